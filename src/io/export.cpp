#include "io/export.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>

#include "core/error.h"
#include "io/export_depth_preview.h"
#include "io/export_basic.h"
#include "io/export_bss.h"
#include "io/export_colmap.h"
#include "io/export_glb.h"
#include "io/export_npz.h"
#include "io/export_viewer.h"

namespace lingbot::io {

namespace fs = std::filesystem;

namespace {

const ExportKind kKinds[] = {
    {"poses", "poses.json: per frame c2w 4x4, w2c 3x4, K, keyframe flag, source name", "", true, make_poses_exporter,
     remove_poses_outputs},
    {"tum", "trajectory.tum: TUM RGB-D trajectory (camera -> world)", "", true, make_tum_exporter, remove_tum_outputs},
    {"depth", "depth/NNNNNN.{png,npy} and _conf.{png,npy}: 16-bit PNG and float32 depth / confidence", "depth", true,
     make_depth_exporter, remove_depth_outputs},
    {"ply", "points.ply: binary coloured point cloud", "", true, make_ply_exporter, remove_ply_outputs},
    {"depth-preview", "depth_preview/NNNNNN.png: colourised depth (Turbo, near = red, far = blue, invalid = black)", "depth_preview", true,
     make_depth_preview_exporter, remove_depth_preview_outputs},
    {"viewer", "viewer/NNNNNN.bin: per-frame points, pose and frame image for 'lingbot-map view' / run --serve", "viewer", true,
     make_viewer_exporter, remove_viewer_outputs},
    {"npz", "predictions/frame_NNNNNN.npz + meta.npz (upstream batch_demo.py layout) and predictions.npz", "predictions", false,
     make_npz_exporter, remove_npz_outputs},
    {"colmap", "colmap/{cameras,images,points3D}.txt + images/NNNNNN.png: COLMAP text model and its pictures", "colmap", false, make_colmap_exporter,
     remove_colmap_outputs},
    {"glb", "scene.glb: points, keyframe frustums and the trajectory (glTF 2.0 binary)", "", false, make_glb_exporter,
     remove_glb_outputs},
    {"bss", "bss/traj.txt + bss/intrinsics.txt: upstream benchmark format", "bss", false, make_bss_exporter,
     remove_bss_outputs},
};

std::string choices() {
  std::string s;
  for (const ExportKind& k : kKinds) {
    if (!s.empty()) s += ", ";
    s += k.name;
  }
  return s + ", all";
}

}  // namespace

bool geometry_finite(const ExportFrame& f) {
  return all_finite(f.pose_enc) && all_finite(f.c2w) && all_finite(f.w2c) && all_finite(f.intrinsics);
}

PointBatch frame_points(const ExportFrame& f, int width, const PointFilter& filter) {
  if (!geometry_finite(f)) return {};
  PointArea area;
  if (f.content) {
    area.frame_width = width;
    area.rect = *f.content;
  }
  area.mask = f.point_mask;
  return select_points(f.world_points, f.image, f.depth_conf, filter.conf_threshold, filter.downsample, f.depth, area);
}

std::span<const ExportKind> export_kinds() { return kKinds; }

std::string default_export_list() {
  std::string s;
  for (const ExportKind& k : kKinds)
    if (k.default_on) {
      if (!s.empty()) s += ',';
      s += k.name;
    }
  return s;
}

std::vector<std::string> parse_export_list(std::string_view list) {
  std::vector<bool> chosen(std::size(kKinds), false);
  size_t start = 0;
  bool any = false;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    std::string_view name = list.substr(start, end - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    LINGBOT_CHECK(!name.empty(), "empty export name in '", std::string(list), "' (choose from ", choices(), ")");
    any = true;
    if (name == "all") {
      std::fill(chosen.begin(), chosen.end(), true);
    } else {
      size_t i = 0;
      while (i < std::size(kKinds) && kKinds[i].name != name) ++i;
      LINGBOT_CHECK(i < std::size(kKinds), "unknown export '", std::string(name), "' (choose from ", choices(), ")");
      chosen[i] = true;
    }
    start = end + 1;
  }
  LINGBOT_CHECK(any, "no export named (choose from ", choices(), ")");
  std::vector<std::string> out;
  for (size_t i = 0; i < std::size(kKinds); ++i)
    if (chosen[i]) out.emplace_back(kKinds[i].name);
  return out;
}

std::unique_ptr<Exporter> make_exporter(std::string_view name) {
  for (const ExportKind& k : kKinds)
    if (k.name == name) return k.make();
  throw Error("unknown export '" + std::string(name) + "' (choose from " + choices() + ")");
}

void ensure_writable_dir(const fs::path& dir, std::string_view what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  LINGBOT_CHECK(!ec, "cannot create ", what, " ", dir.string(), ": ", ec.message());
  LINGBOT_CHECK(fs::is_directory(dir), "cannot create ", what, " ", dir.string(), ": a file of that name exists");
  // A folder can exist and still refuse files (permissions, read-only mount): try one.
  const fs::path probe = dir / ".lingbot-write-test";
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  LINGBOT_CHECK(f != nullptr, what, " ", dir.string(), " is not writable: ", std::strerror(errno));
  std::fclose(f);
  fs::remove(probe, ec);
}

size_t remove_files_in(const fs::path& dir, bool (*match)(const std::string& name)) {
  std::error_code ec;
  size_t removed = 0;
  if (!fs::is_directory(dir, ec)) return removed;
  for (const auto& entry : fs::directory_iterator(dir)) {
    // A matching file's temporary too (write_file_atomic's NAME.tmp, left by a run killed mid-write).
    std::string name = entry.path().filename().string();
    if (name.ends_with(".tmp")) name.resize(name.size() - 4);
    if (!entry.is_regular_file() || !match(name)) continue;
    fs::remove(entry.path(), ec);
    LINGBOT_CHECK(!ec, "cannot remove old ", entry.path().string(), ": ", ec.message());
    ++removed;
  }
  return removed;
}

// ---------------------------------------------------------------------------------------------
ExportSet::ExportSet(std::vector<std::unique_ptr<Exporter>> exporters) : exporters_(std::move(exporters)) {}

void ExportSet::begin(const ExportRun& run, StaleOutputs stale) {
  for (auto& e : exporters_) e->prepare(run);
  for (const ExportKind& k : kKinds) {
    const bool selected = std::any_of(exporters_.begin(), exporters_.end(),
                                      [&](const std::unique_ptr<Exporter>& e) { return e->name() == k.name; });
    if (!selected && stale == StaleOutputs::SelectedExports) continue;
    k.remove_outputs(run.out_dir);
    // The sub-folder of an export this run does not write goes once its old files are gone (a re-run
    // with fewer exports leaves no empty bss/, colmap/, ...): only when empty, and never a link.
    const fs::path dir = run.out_dir / k.folder;
    std::error_code ec;
    if (!selected && !k.folder.empty() && fs::is_directory(fs::symlink_status(dir, ec)) && fs::is_empty(dir, ec))
      fs::remove(dir, ec);
  }
  // run's report of an earlier run would describe files being replaced (removed once every check passed).
  std::error_code ec;
  fs::remove(run.out_dir / "summary.json", ec);
  LINGBOT_CHECK(!ec, "cannot remove the earlier run's ", (run.out_dir / "summary.json").string(), ": ", ec.message());
  for (auto& e : exporters_) e->begin(run);
}

void ExportSet::frame(const ExportFrame& f) {
  size_t given = 0;  // exporters that were given this frame
  try {
    for (auto& e : exporters_) {
      ++given;
      e->frame(f);
    }
  } catch (const std::exception& failure) {
    std::string undo_errors;
    for (size_t i = 0; i < given; ++i) {
      try {
        exporters_[i]->discard_frame();
      } catch (const std::exception& e) {
        undo_errors += detail::concat("; and frame ", f.index, " could not be taken back from ",
                                      exporters_[i]->name(), ": ", e.what());
      }
    }
    if (undo_errors.empty()) throw;
    throw Error(failure.what() + undo_errors);
  }
}

void ExportSet::finish() {
  if (finished_) return;
  finished_ = true;
  std::exception_ptr first;
  for (auto& e : exporters_) {
    try {
      e->finish();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

nlohmann::json ExportSet::report() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& e : exporters_) out[std::string(e->name())] = e->report();
  return out;
}

const Exporter* ExportSet::find(std::string_view name) const {
  for (const auto& e : exporters_)
    if (e->name() == name) return e.get();
  return nullptr;
}

}  // namespace lingbot::io
