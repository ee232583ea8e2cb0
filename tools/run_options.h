#pragma once
// `lingbot-map run`'s options: RunArgs (what the command line gave, unresolved), their CLI11
// definitions with the help text (define_run_options), and the checks that need no file read
// (check_run_args; run exits 2 or 1 with one error line). cmd_run.cpp resolves and runs them.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli_util.h"
#include "io/export.h"
#include "lingbot/model.h"
#include "pipeline/demo_model.h"
#include "run_modes.h"

namespace lingbot::cli {

// --live's --max-special-frames unless given: each kept frame costs 6 tokens of K and V per block (576 KiB
// in bf16 at the released model's width: 144 MiB for 256 frames), and 1,536 keys against the window's
// 64 x 1,005 at 518x378.
inline constexpr int64_t kLiveMaxSpecialFrames = 256;

inline constexpr int kDefaultKvWindow = 64;  // the released model's kv_cache.sliding_window

struct RunArgs {
  std::string images, video, model, out;
  bool demo = false;
  int64_t demo_frames = kDemoFrameCount;
  std::optional<int> image_size;  // unset = 518 (demo: 112)
  std::string preprocess;  // crop | pad; "" = crop (--mode crop|pad is its deprecated spelling)
  ModeArgs modes;          // --mode streaming|windowed, keyframe and window options (run_modes.h)
  double fps = 10;
  int64_t first_k = 0;
  int64_t stride = 1;
  bool rotate_cw90 = false;
  int scale_frames = 8;
  // --kv-window; unset: kDefaultKvWindow. Refused with --kv-backend dense-full, which has no window.
  std::optional<int> kv_window;
  // --max-special-frames; unset: 0 (keep every evicted frame's specials, as upstream), but
  // kLiveMaxSpecialFrames for a live stream in streaming mode (resolved with the mode).
  std::optional<int64_t> max_special_frames;
  int camera_iterations = 4;
  std::string device = "cpu";
  std::string kv_backend = "paged";
  // The defaults are the fast, lean ones (docs/cli.md "Defaults"); f32 / f32 reproduces the reference.
  std::string kv_dtype = "bf16";
  std::string weights_dtype = "auto";
  int threads = 0;
  double conf_threshold = 1.5;
  int downsample = 10;
  std::vector<std::string> sets;
  std::string progress = "auto";
  std::string export_preprocessed;  // folder for the preprocessed frames as PNG; "" = none
  std::string exports = io::default_export_list();  // --export: comma list of io::export_kinds() names
  bool allow_damaged = false;       // a damaged input still exits 0 (status "completed", warnings listed)
  bool live = false;                // --video is a live source (io/live_source.h)
  int debug_frame_delay_ms = 0;     // test hook: sleep after every frame (a deliberately slow engine)
  std::string pipeline = "on";      // --pipeline: read and write on their own threads (tools/run_pipeline.h)
  int serve_port = -1;              // --serve: viewer on this loopback port while running; -1 = off
  double demo_pace = 0;             // --demo-pace: seconds to wait before each generated frame
  RenamedOptions renamed;           // --num-scale-frames, --attention (old spellings)
};

// Adds every option of `run` to `cmd`, bound to the fields of `a` (which must outlive `cmd`).
void define_run_options(CLI::App* cmd, RunArgs* a);

// Option values that cannot work, found before anything is opened or written: ranges, combinations,
// output folders that cannot be created or would overwrite the input (lingbot::Error, usage errors
// through usage_check).
void check_run_args(const RunArgs& a);

// --set key=value pairs in order; a field run sets from its own options is refused.
ConfigOverrides parse_sets(const std::vector<std::string>& sets);

}  // namespace lingbot::cli
