#pragma once
// The exporter interface `lingbot-map run --export LIST` drives, and the registry of exporters.
//
// An exporter turns the stream of completed frames into files under the run's output folder. The
// run calls, in order:
//   prepare(run)   for every selected exporter: create its folders and check they accept files.
//                  Nothing is written or removed yet, so a bad folder fails the run before any
//                  output exists.
//   (then ExportKind::remove_outputs removes what an earlier run left: of every registered export,
//   selected or not, for run, so its folder never mixes two runs (StaleOutputs::EveryExport); of
//   the selected ones only for the Python Exporter, so two Exporters can share a folder)
//   begin(run)     open the files;
//   frame(record)  once per completed frame, in frame order;
//   discard_frame() when some exporter failed on a frame (a full disk): on every exporter that was
//                  given that frame, the failed one included, so every export ends at the same last
//                  complete frame (the frames before it);
//   finish()       once at the end (also after Ctrl-C or an error), so every file is complete
//                  (the same files whatever ended the run: summary.json says how it ended).
// Every exporter is incremental: memory does not grow with the number of frames beyond a small
// per-frame record (a pose, a flag) or a documented budget, and after each frame() its files are
// valid for the frames so far — or, for formats that cannot be appended to (GLB, the whole-run NPZ),
// written atomically (temporary name + rename) in finish().
//
// Conventions (see src/model/geometry.h and include/lingbot/session.h): the decoded pose is
// camera -> world (`c2w`); `w2c` is its inverse; OpenCV camera axes (x right, y down, z forward);
// matrices row-major; intrinsics K in pixels of the preprocessed image with the principal point at
// (W/2, H/2), where pixel (x, y) means column x, row y at integer coordinates (no +0.5: the engine
// unprojects pixel centres at integer coordinates). Writers of formats with another pixel-centre
// rule (COLMAP: centres at +0.5) shift the principal point and say so.
//
// Invalid values (one rule for every writer): a depth or confidence sample that is non-finite or
// <= 0 is invalid — 0 in 16-bit PNGs, black in previews, never a point in PLY/GLB/COLMAP; raw float
// arrays (.npy/.npz) keep the values as computed. A frame whose pose encoding, pose or intrinsics
// hold a non-finite value keeps its raw arrays but is left out of every geometric export
// (trajectory, cameras, points).
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/output_validity.h"
#include "io/timestamp_unit.h"
#include "io/writers.h"

namespace lingbot::io {

// How points are chosen for PLY / GLB / COLMAP (select_points): confidence above the threshold,
// then every downsample-th one.
struct PointFilter {
  float conf_threshold = 1.5f;
  int downsample = 10;
};

// Facts about the whole run, fixed before the first frame.
struct ExportRun {
  std::filesystem::path out_dir;      // every exporter writes below this folder
  int width = 0, height = 0;          // preprocessed frame size in pixels (all frames)
  int scale_frames = 0;               // frames 0 .. scale_frames-1 are the scale phase
  PointFilter points;
  nlohmann::json meta = nlohmann::json::object();  // top-level fields for poses.json (image size, model, ...)
};

// One completed frame. Views into the engine's result, valid only during Exporter::frame().
struct ExportFrame {
  int64_t index = 0;             // frame number in the run, from 0
  double timestamp = 0;          // seconds (video) or the frame index (image folders): timestamp_unit
  TimestampUnit timestamp_unit = TimestampUnit::FrameIndex;
  std::string_view source;       // input file name, or "frame_<n>" for video
  bool keyframe = false;         // stored in the KV cache (scale frames count as keyframes)
  bool scale_frame = false;      // one of the first ExportRun::scale_frames frames
  std::span<const float> image;  // [3, H, W] preprocessed RGB in [0, 1]
  std::span<const float> pose_enc;      // [9] t, q (xyzw), fov_h, fov_w
  RigidTransform<double> c2w{};  // camera -> world, the decoded pose (FrameResult::extrinsic_c2w)
  RigidTransform<double> w2c{};  // world -> camera, its inverse as the engine computed it (FrameResult::extrinsic)
  Mat33 intrinsics{};            // K
  std::span<const float> depth;         // [H, W]
  std::span<const float> depth_conf;    // [H, W], or empty
  std::span<const float> world_points;  // [H, W, 3]
  // The pixels that came from the picture (io::content_rect); the rest is padding (pad mode, frames on
  // a larger canvas), which gives no point. nullopt: every pixel.
  std::optional<PixelRect> content;
  // Where the source picture lies on the frame (io::place_on_frame), for its camera in its own
  // pixels; nullopt: a model input given as it is.
  std::optional<SourcePlacement> placement;
  // [H, W], 0 = the pixel gives no point (the caller's mask: sky, moving objects), or empty = every
  // pixel. Only the point clouds (PLY / GLB / COLMAP / viewer) read it; depth maps stay whole.
  std::span<const uint8_t> point_mask;

  // upstream's frame_type: 0 = scale frame, 1 = keyframe, 2 = non-keyframe.
  uint8_t frame_type() const { return scale_frame ? 0 : (keyframe ? 1 : 2); }
};

// The rules above as predicates, shared by every writer (pixels: io::is_valid_map_value).
bool geometry_finite(const ExportFrame& f);  // pose_enc, c2w and K all finite
// The frame's points for a point cloud (PLY / GLB / COLMAP / viewer) of a run `width` pixels wide:
// none when !geometry_finite, else select_points with invalid depth / confidence pixels, the
// pixels outside f.content and those f.point_mask leaves out removed.
PointBatch frame_points(const ExportFrame& f, int width, const PointFilter& filter);

class Exporter {
 public:
  virtual ~Exporter() = default;
  virtual std::string_view name() const = 0;
  virtual void prepare(const ExportRun& run) = 0;
  virtual void begin(const ExportRun& run) = 0;
  virtual void frame(const ExportFrame& f) = 0;
  // Takes back the latest frame() call, whether it returned or threw part way: the files and counts
  // are those of the frames before it again. Cutting files back and removing them frees space, so it
  // works on the full disk that failed the frame; it throws only when that fails as well.
  virtual void discard_frame() = 0;
  virtual void finish() = 0;
  // For summary.json: the files written ("files": name -> description), counts ("frames",
  // "points", ...), and optionally "note": one line the run prints (e.g. a file it did not write).
  virtual nlohmann::json report() const = 0;
};

// What an exporter that writes files per frame keeps to take its latest frame back: that frame's
// index (the names of its files; -1 when the call failed before writing any), and the exporter's
// frame count and newest frame index before it.
struct LastFrame {
  int64_t index = -1;
  int64_t frames_before = 0;
  int64_t newest_before = -1;
};

// The registry: every export `run --export` knows, in a fixed order. Adding one = a make_ /
// remove_ function pair and a row in the table of export.cpp.
struct ExportKind {
  std::string_view name;         // the --export name
  std::string_view description;  // one line for --help / docs/cli.md
  std::string_view folder;       // the sub-folder of the output folder its files go to; "" = the folder itself
  bool default_on;               // part of the default set
  std::unique_ptr<Exporter> (*make)();
  // Removes what this export wrote into `out_dir` in an earlier run (only its own file names).
  void (*remove_outputs)(const std::filesystem::path& out_dir);
};
std::span<const ExportKind> export_kinds();
// "poses,tum,depth,ply,depth-preview,viewer": the default --export list.
std::string default_export_list();
// Parses a comma list ("all" = every export); duplicates are dropped, order follows export_kinds().
// Throws Error "unknown export 'x' (choose from poses, tum, ...)" for a name not in the registry.
std::vector<std::string> parse_export_list(std::string_view list);
std::unique_ptr<Exporter> make_exporter(std::string_view name);

// Creates `dir` (and parents) and checks a file can be created in it. Errors, `what` naming the
// folder: "cannot create <what> <dir>: <reason>" / "<what> <dir> is not writable: <reason>".
void ensure_writable_dir(const std::filesystem::path& dir, std::string_view what = "folder");
// Removes the regular files in `dir` whose name `match` accepts, and their NAME.tmp temporaries (left
// by a run killed mid-write); a missing dir is fine. Returns how many files it removed.
size_t remove_files_in(const std::filesystem::path& dir, bool (*match)(const std::string& name));

// Drives the selected exporters through the protocol above. When an exporter throws in frame(),
// the frame is discarded from every exporter that was given it and the error is rethrown (with
// "; and frame N could not be taken back from <export>: <reason>" added when a discard failed too),
// so the files end at the same frame. finish() is called on every exporter even when one throws;
// the first error is rethrown after all have finished.
// Which exports' earlier outputs ExportSet::begin removes from the output folder.
enum class StaleOutputs {
  EveryExport,      // every registered export's, selected or not (run: one run per folder)
  SelectedExports,  // the selected exports' only (the Python Exporter: other writers may share the folder)
};

class ExportSet {
 public:
  explicit ExportSet(std::vector<std::unique_ptr<Exporter>> exporters);
  // prepare() on every selected exporter, remove_outputs of the exports `stale` names and an earlier
  // run's summary.json (run's report, written at its end), begin().
  void begin(const ExportRun& run, StaleOutputs stale);
  void frame(const ExportFrame& f);
  void finish();
  nlohmann::json report() const;  // name -> Exporter::report()
  const Exporter* find(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<Exporter>> exporters_;
  bool finished_ = false;
};

}  // namespace lingbot::io
