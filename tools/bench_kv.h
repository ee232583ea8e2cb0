#pragma once
// `lingbot-map bench kv`: a streaming attention simulation at the model's real shapes with random
// Q/K/V (no weights), driving the KV cache entry point (kvcache/kv_cache.h) exactly as the model's
// global blocks do: per frame step begin_step, attend for every block, end_step.
//
// Frame schedule (as the streaming model): frames 0..scale_frames-1 form one ScalePhase step; then
// one step per frame, a Keyframe when keyframe_interval <= 1 or (i - scale_frames) % interval == 0,
// else a NonKeyframe. Frames are counted 1-based in results: row `frame` = frames processed so far.
//
// All backends run interleaved on one seeded random stream: for each step and block the q/k/v of that
// block are generated once (f32 [n_q, heads, head_dim] each) and fed to every live backend, so the
// inputs are identical and only one block's inputs exist at a time.
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench_device.h"
#include "kvcache/kv_cache.h"
#include "lingbot/dtype.h"

namespace lingbot::bench {

// Upper bounds of the options (validate): the released model has 24 blocks x 16 heads x 64 head_dim;
// the rows a run keeps grow with --frames (one per frame and backend).
inline constexpr int kMaxBlocks = 1024;
inline constexpr int kMaxHeads = 256;
inline constexpr int kMaxHeadDim = 1024;
inline constexpr int kMaxFrames = 1000000;

struct KvBenchOptions {
  int resolution = 518;          // 224 -> 16x16 = 256 patches, 518 -> 37x27 = 999 patches (518x378)
  int blocks = 24;
  int heads = 16;
  int head_dim = 64;
  int window = 64;
  int scale_frames = 8;
  DType dtype = DType::BF16;
  int keyframe_interval = 1;
  int frames = 400;
  std::vector<KVBackend> backends = {KVBackend::Paged, KVBackend::Dense, KVBackend::DenseFull};
  int threads = 1;
  double mem_cap_gb = 8.0;       // per backend, KV cache bytes allocated (1 GB = 2^30 bytes); 0 = no cap
  double mem_budget_gb = 0.0;    // all backends' KV bytes together (--mem-cap-gb auto); 0 = none. A backend
                                 // whose allocation would pass it stops, and its memory goes to the others
  bool attention = true;         // false: bench::bookkeeping_step (bookkeeping + memory only)
  int attend_every = 1;          // attention on and N > 1: attend only around sample points (frames divisible
                                 // by N, 100, 320, the last) and the scale phase; the other steps are
                                 // bookkeeping only (bench::bookkeeping_step), to make long runs affordable
  uint64_t seed = 1;
  bool calibrate = true;
  BenchDeviceKind device = BenchDeviceKind::Cpu;  // cuda: device page pools and kernels (backend paged only)
  bool attention_ab = false;     // cpu: per attended paged step, also time the kernel alone with
                                 // AttentionCompute::Auto and ::F32 on the same keys (order alternating)
  // Set (by a signal handler) to end the run early: checked before each step; the result then holds
  // the steps done (KvBenchResult::interrupted). Not owned; null = never.
  const std::atomic<bool>* stop = nullptr;
};

// Token counts per frame for a resolution; throws Error for anything but 224 or 518.
int patches_per_frame(int resolution);
constexpr int kSpecialTokens = 6;  // camera + 4 registers + scale

// Latencies in the summary are means over the attended frames among the last kLatencyFrames frames.
constexpr int kLatencyFrames = 3;

// Whether the step ending at `frame` (1-based) attends (always true when attend_every == 1).
bool is_attended_frame(const KvBenchOptions& o, int frame, bool scale_phase);

// Throws Error naming the first bad option.
void validate(const KvBenchOptions& o);

struct FrameRow {
  int frame = 0;                 // frames processed so far (1-based)
  int backend = 0;               // index into KvBenchOptions::backends
  FrameMode mode = FrameMode::Keyframe;
  bool attended = false;         // store() + attention ran (false: bench::bookkeeping_step)
  int64_t n_q = 0;               // query tokens of the step
  int64_t n_k = 0;               // keys per query (keys_in_step)
  double attn_ms = 0;            // all attend() calls of the step, all blocks (store of the new K/V + kernel)
  double maint_ms = 0;           // begin_step + end_step (plan, eviction, deferred work, rollback)
  double attn_cpu_ms = 0;        // the same two as process CPU time (all threads; robust to a busy machine)
  double maint_cpu_ms = 0;
  double flops = 0;              // 4 * n_q * n_k * head_dim * heads * blocks when attended
  double ab_auto_ms = 0;         // --attention-ab: kernel alone, AttentionCompute::Auto, all blocks
  double ab_f32_ms = 0;          // --attention-ab: kernel alone, AttentionCompute::F32, all blocks
  double ab_max_abs_diff = 0;    // --attention-ab: max |out_auto - out_f32| over the step
  std::vector<double> ab_call_speedup;  // --attention-ab: f32 ms / auto ms of each block's pair of calls
  CacheStats stats;              // after end_step
  int64_t rss_bytes = 0;         // process, after the step
  int64_t peak_rss_bytes = 0;    // process peak so far
};

struct BackendStop {
  int backend = 0;
  int frame = 0;                 // the frame (1-based) that would have exceeded the cap; 0 = never stopped
  bool budget = false;           // the shared budget (mem_budget_gb) was the limit, not the backend's cap
  std::string reason;
};

struct KvBenchResult {
  KvBenchOptions options;
  int tokens_per_frame = 0;
  std::string device;            // BenchDevice::description()
  DeviceCalibration calibration; // best of before / after the stream; zeros when not calibrated
  std::vector<FrameRow> rows;    // in step order, backends in option order within a step
  std::vector<BackendStop> stops;
  double wall_seconds = 0;
  bool interrupted = false;      // options.stop ended the run before its last step (no second calibration)
};

// Live notifications while the benchmark runs (progress display, stop lines).
class KvBenchObserver {
 public:
  virtual ~KvBenchObserver() = default;
  virtual void on_calibrated(const KvBenchResult& /*partial*/) {}
  virtual void on_step(int /*frames_done*/, int /*frames_total*/) {}
  virtual void on_stop(const KvBenchResult& /*partial*/, const BackendStop& /*stop*/) {}
};

// Runs the benchmark on `device` (validates the options first; device->kind() must be options.device).
KvBenchResult run_kv_bench(const KvBenchOptions& options, BenchDevice& device, KvBenchObserver* observer = nullptr);
// As above on make_bench_device(options.device, options.threads).
KvBenchResult run_kv_bench(const KvBenchOptions& options, KvBenchObserver* observer = nullptr);

// The `summary:` keys, in print order; values are formatted numbers, "yes"/"no", or "na" when the run
// is too short or a backend is missing/stopped. See docs/performance.md for the definitions.
std::vector<std::pair<std::string, std::string>> summarize(const KvBenchResult& result);

// Bytes of one token's K and V in one block: 2 * heads * head_dim * dtype_size.
int64_t token_kv_bytes(const KvBenchOptions& o);

}  // namespace lingbot::bench
