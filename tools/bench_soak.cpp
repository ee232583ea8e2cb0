#include "bench_soak.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <fstream>

#include "core/error.h"
#include "io/file_util.h"
#include "core/memory_stats.h"
#include "io/preprocess.h"
#include "lingbot/keyframe_policy.h"
#include "lingbot/session.h"
#include "bench/harness/demo_model.h"

namespace lingbot::bench {
namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds of the whole process (all threads): what a frame costs, independent of how many other
// processes share the cores (wall time is recorded too).
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median_ms(const std::vector<SoakRow>& rows, int64_t last_frame, int64_t window) {
  std::vector<double> v;
  for (int64_t f = std::max<int64_t>(1, last_frame - window + 1); f <= last_frame; ++f)
    v.push_back(rows[static_cast<size_t>(f - 1)].cpu_ms);
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string keyframe_rule(const SoakOptions& o) {
  if (!o.keyframe_policy) return "interval-" + std::to_string(o.keyframe_interval);
  if (const auto* interval = dynamic_cast<const IntervalKeyframes*>(o.keyframe_policy.get()))
    return "interval-" + std::to_string(interval->interval());
  const auto* flow = dynamic_cast<const FlowKeyframes*>(o.keyframe_policy.get());
  if (!flow) return "custom";
  char buf[64];
  std::snprintf(buf, sizeof buf, "flow-%g-gap-%d", flow->threshold(), flow->max_non_keyframe_gap());
  return buf;
}

void validate(const SoakOptions& o) {
  LINGBOT_CHECK(o.frames >= 2, "--frames must be >= 2, got ", o.frames);
  LINGBOT_CHECK(o.reference_frame >= 1 && o.reference_frame < o.frames, "--reference-frame must be in [1, --frames = ",
                o.frames, "), got ", o.reference_frame);
  LINGBOT_CHECK(o.timing_window >= 1 && o.timing_window <= o.reference_frame,
                "--timing-window must be in [1, --reference-frame = ", o.reference_frame, "], got ", o.timing_window);
  LINGBOT_CHECK(o.max_special_frames >= 0, "--max-special-frames must be >= 0 (0 = keep all), got ",
                o.max_special_frames);
  LINGBOT_CHECK(o.keyframe_interval >= 1, "--keyframe-interval must be >= 1, got ", o.keyframe_interval);
  LINGBOT_CHECK(o.scale_frames >= 1, "--scale-frames must be >= 1, got ", o.scale_frames);
  LINGBOT_CHECK(o.kv_window >= 1, "--kv-window must be >= 1, got ", o.kv_window);
  LINGBOT_CHECK(o.threads >= 1, "--threads must be >= 0 (0 = all cores), got ", o.threads);
  LINGBOT_CHECK(o.loop_frames >= 1, "loop_frames must be >= 1, got ", o.loop_frames);
  // The session's own bounds, with the flags' names and before the model loads.
  LINGBOT_CHECK(o.scale_frames <= kMaxScaleFrames, "--scale-frames must be at most ", kMaxScaleFrames, ", got ",
                o.scale_frames);
  LINGBOT_CHECK(o.kv_window <= kMaxKvWindow, "--kv-window must be at most ", kMaxKvWindow, ", got ", o.kv_window);
  LINGBOT_CHECK(o.threads <= kMaxThreads, "--threads must be at most ", kMaxThreads, ", got ", o.threads);
  LINGBOT_CHECK(o.kv_backend != KVBackend::DenseFull || o.max_special_frames == 0,
                "--max-special-frames does not apply to --kv-backend dense-full (it keeps every frame)");
}

SoakResult run_soak(std::shared_ptr<const Model> model, const SoakOptions& o, SoakObserver* observer) {
  validate(o);
  SoakResult r;
  r.options = o;
  const ModelConfig& cfg = model->config();
  const int64_t p = cfg.encoder.patch_size;
  // Demo frames are 112 x 70 (8 x 5 patches of 14); other patch sizes crop them to a multiple.
  PreprocessOptions pre;
  pre.image_size = static_cast<int>(kDemoFrameWidth / p * p);
  pre.patch_size = static_cast<int>(p);
  pre.preprocess = Preprocess::Crop;
  std::vector<Tensor> frames;
  for (int i = 0; i < o.loop_frames; ++i) frames.push_back(io::preprocess_image(render_demo_frame(i), pre));
  r.image_height = static_cast<int>(frames[0].dim(1));
  r.image_width = static_cast<int>(frames[0].dim(2));

  // Cache geometry (kv_cache.h / paged_kv_cache.h), for the exact growth formulas.
  r.num_blocks = cfg.aggregator.depth;
  r.num_special_tokens = cfg.aggregator.num_special_tokens;
  r.patch_tokens = (r.image_height / p) * (r.image_width / p);
  r.tokens_per_frame = r.patch_tokens + r.num_special_tokens;
  const int64_t page_size = std::max(r.patch_tokens, r.num_special_tokens);
  r.special_page_frames = page_size / r.num_special_tokens;
  r.special_page_bytes = 2 * page_size * cfg.aggregator.embed_dim * static_cast<int64_t>(dtype_size(o.kv_dtype));
  r.camera_row_bytes_per_frame = 2 * cfg.camera.dim_in * static_cast<int64_t>(sizeof(float)) *
                                 cfg.camera.num_iterations * cfg.camera.trunk_depth;

  SessionOptions so;
  so.kv_backend = o.kv_backend;
  so.kv_dtype = o.kv_dtype;
  so.scale_frames = o.scale_frames;
  so.kv_window = o.kv_window;
  so.keyframe_interval = o.keyframe_interval;
  so.keyframe_policy = o.keyframe_policy;
  so.max_special_frames = o.max_special_frames;
  so.threads = o.threads;
  so.keep_features = false;
  Session session(model, so);
  // The bounded caches reach their final size once the window and the kept frames are full.
  const int64_t fill_stored = static_cast<int64_t>(o.scale_frames) + o.kv_window + o.max_special_frames + 1;
  r.fill_frame = o.frames + 1;

  // All rows exist (and their memory is touched) before the first frame, so the harness's own
  // records never show up as RSS growth of the engine.
  r.rows.assign(static_cast<size_t>(o.frames), SoakRow{});
  for (int64_t f = 0; f < o.frames; ++f) {
    const auto t0 = Clock::now();
    const double c0 = process_cpu_ms();
    const std::vector<FrameResult> results = session.push_frame(frames[static_cast<size_t>(f % o.loop_frames)]);
    const double cpu = process_cpu_ms() - c0;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    SoakRow& row = r.rows[static_cast<size_t>(f)];
    row.frame = f + 1;
    row.keyframe = !results.empty() && results.back().is_keyframe;
    row.push_ms = ms;
    row.cpu_ms = cpu;
    row.rss_bytes = static_cast<int64_t>(current_rss_bytes());
    row.peak_rss_bytes = static_cast<int64_t>(peak_rss_bytes());
    const SessionStats st = session.stats();
    row.cache = st.cache;
    row.camera_cache_frames = st.camera_cache_frames;
    row.camera_cache_bytes = st.camera_cache_bytes;
    if (row.keyframe && f >= o.scale_frames) ++r.keyframes;
    if (r.fill_frame > o.frames && row.cache.frames_stored >= fill_stored) r.fill_frame = row.frame;
    if (observer) observer->on_frame(row, o.frames);
  }

  const SoakRow& ref = r.rows[static_cast<size_t>(o.reference_frame - 1)];
  const SoakRow& last = r.rows.back();
  r.peak_rss_growth = static_cast<double>(last.peak_rss_bytes) / static_cast<double>(ref.peak_rss_bytes) - 1.0;
  r.ref_median_ms = median_ms(r.rows, o.reference_frame, o.timing_window);
  r.last_median_ms = median_ms(r.rows, o.frames, o.timing_window);
  r.time_ratio = r.ref_median_ms > 0 ? r.last_median_ms / r.ref_median_ms : 0;
  r.kv_reserved_growth = last.cache.bytes_reserved - ref.cache.bytes_reserved;
  r.kv_used_growth = last.cache.bytes_used - ref.cache.bytes_used;
  r.camera_growth = last.camera_cache_bytes - ref.camera_cache_bytes;
  const int64_t stored = last.cache.frames_stored - ref.cache.frames_stored;
  const bool bounded = o.max_special_frames > 0 && o.reference_frame >= r.fill_frame;
  const int64_t token_bytes = 2 * cfg.aggregator.embed_dim * static_cast<int64_t>(dtype_size(o.kv_dtype));
  if (bounded) {
    r.kv_reserved_formula = r.kv_used_formula = r.camera_formula = 0;
  } else {
    // Unbounded: every stored frame adds its specials; the paged stream allocates a page per block
    // every special_page_frames frames; dense keeps the specials of evicted frames in its side buffer
    // (grown geometrically, so only its used bytes follow a formula).
    const int64_t evicted = last.cache.frames_stored - last.cache.frames_resident -
                            (ref.cache.frames_stored - ref.cache.frames_resident);
    const int64_t kept = o.kv_backend == KVBackend::Paged ? stored : evicted;
    r.kv_used_formula = r.num_blocks * token_bytes * r.num_special_tokens * kept;
    if (o.kv_backend == KVBackend::DenseFull)
      r.kv_used_formula = r.num_blocks * token_bytes * r.tokens_per_frame * stored;
    r.kv_reserved_formula = o.kv_backend == KVBackend::Paged
                                ? r.num_blocks * r.special_page_bytes *
                                      (ceil_div(last.cache.frames_stored, r.special_page_frames) -
                                       ceil_div(ref.cache.frames_stored, r.special_page_frames))
                                : r.kv_reserved_growth;  // dense: geometric growth, no exact formula
    r.camera_formula = r.camera_row_bytes_per_frame * stored;
  }
  std::string why;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) why += (why.empty() ? "" : "; ") + what;
  };
  if (o.max_special_frames > 0) {
    if (r.fill_frame > o.frames)
      check(false, "the bounded caches never filled: they need " + std::to_string(fill_stored) +
                       " stored frames, the run stored " + std::to_string(last.cache.frames_stored));
    else
      check(o.reference_frame >= r.fill_frame, "--reference-frame " + std::to_string(o.reference_frame) +
                                                   " is before the bounded caches fill (frame " +
                                                   std::to_string(r.fill_frame) + ")");
    check(r.peak_rss_growth <= 0.01, "peak RSS grew " + std::to_string(r.peak_rss_growth * 100) + "% > 1%");
    check(r.time_ratio <= 1.05, "per-frame time ratio " + std::to_string(r.time_ratio) + " > 1.05");
  }
  check(r.kv_used_growth == r.kv_used_formula, "KV used bytes grew " + std::to_string(r.kv_used_growth) +
                                                   " != formula " + std::to_string(r.kv_used_formula));
  check(r.kv_reserved_growth == r.kv_reserved_formula, "KV reserved bytes grew " +
                                                           std::to_string(r.kv_reserved_growth) + " != formula " +
                                                           std::to_string(r.kv_reserved_formula));
  check(r.camera_growth == r.camera_formula, "camera-head cache grew " + std::to_string(r.camera_growth) +
                                                 " != formula " + std::to_string(r.camera_formula));
  r.pass = why.empty();
  r.verdict = r.pass ? (o.max_special_frames > 0 ? "bounded: peak RSS growth <= 1%, time ratio <= 1.05, KV and "
                                                   "camera-head bytes flat"
                                                 : "unbounded: KV and camera-head growth equal the formulas exactly")
                     : why;
  return r;
}

void write_soak_csv(const std::string& path, const SoakResult& r) {
  std::ostringstream f;
  f << "frame,keyframe,push_ms,cpu_ms,rss_bytes,peak_rss_bytes,frames_stored,frames_resident,special_tokens,"
       "special_frames_dropped,special_pages,special_free_pages,visible_tokens,kv_bytes_used,kv_bytes_reserved,"
       "camera_cache_frames,camera_cache_bytes\n";
  for (const SoakRow& row : r.rows) {
    const CacheStats& c = row.cache;
    f << row.frame << ',' << (row.keyframe ? 1 : 0) << ',' << row.push_ms << ',' << row.cpu_ms << ',' << row.rss_bytes << ','
      << row.peak_rss_bytes << ',' << c.frames_stored << ',' << c.frames_resident << ',' << c.special_tokens << ','
      << c.special_frames_dropped << ',' << c.special_pages << ',' << c.special_free_pages << ',' << c.visible_tokens
      << ',' << c.bytes_used << ',' << c.bytes_reserved << ',' << row.camera_cache_frames << ','
      << row.camera_cache_bytes << '\n';
  }
  io::write_file_atomic(path, f.str(), io::OnLink::WriteThrough);
}

std::string soak_summary_line(const SoakResult& r) {
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "summary: frames=%lld max_special_frames=%lld keyframe_policy=%s stored_keyframes=%lld kv_backend=%s reference_frame=%lld "
                "peak_rss_growth_pct=%.3f time_ratio=%.4f ref_cpu_ms=%.3f last_cpu_ms=%.3f kv_reserved_growth=%lld "
                "kv_reserved_formula=%lld kv_used_growth=%lld kv_used_formula=%lld camera_growth=%lld "
                "camera_formula=%lld pass=%s",
                static_cast<long long>(r.options.frames), static_cast<long long>(r.options.max_special_frames),
                keyframe_rule(r.options).c_str(), static_cast<long long>(r.keyframes), kv_backend_name(r.options.kv_backend),
                static_cast<long long>(r.options.reference_frame), r.peak_rss_growth * 100, r.time_ratio,
                r.ref_median_ms, r.last_median_ms, static_cast<long long>(r.kv_reserved_growth),
                static_cast<long long>(r.kv_reserved_formula), static_cast<long long>(r.kv_used_growth),
                static_cast<long long>(r.kv_used_formula), static_cast<long long>(r.camera_growth),
                static_cast<long long>(r.camera_formula), r.pass ? "yes" : "no");
  return buf;
}

void print_soak_report(std::FILE* f, const SoakResult& r) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::fprintf(f, "%8s %9s %9s %11s %11s %10s %9s %9s %11s\n", "frame", "push_ms", "cpu_ms", "rss_MiB", "peak_MiB", "kv_MiB",
               "dropped", "visible", "camera_KiB");
  const int64_t n = static_cast<int64_t>(r.rows.size());
  int64_t stride = 1;
  while (n / stride > 20) stride *= 10;
  for (int64_t i = 0; i < n; ++i) {
    const SoakRow& row = r.rows[static_cast<size_t>(i)];
    const bool show = row.frame == r.options.reference_frame || row.frame % stride == 0 || i == n - 1;
    if (!show) continue;
    std::fprintf(f, "%8lld %9.3f %9.3f %11.2f %11.2f %10.3f %9lld %9lld %11.1f\n", static_cast<long long>(row.frame),
                 row.push_ms, row.cpu_ms, static_cast<double>(row.rss_bytes) / kMiB, static_cast<double>(row.peak_rss_bytes) / kMiB,
                 static_cast<double>(row.cache.bytes_reserved) / kMiB,
                 static_cast<long long>(row.cache.special_frames_dropped),
                 static_cast<long long>(row.cache.visible_tokens), static_cast<double>(row.camera_cache_bytes) / 1024.0);
  }
  std::fprintf(f,
               "frame %lld -> %lld: peak RSS %+.3f%%, median CPU per frame %.3f -> %.3f ms (x%.4f), KV reserved %+lld B "
               "(formula %+lld), KV used %+lld B (formula %+lld), camera head %+lld B (formula %+lld)\n",
               static_cast<long long>(r.options.reference_frame), static_cast<long long>(r.options.frames),
               r.peak_rss_growth * 100, r.ref_median_ms, r.last_median_ms, r.time_ratio,
               static_cast<long long>(r.kv_reserved_growth), static_cast<long long>(r.kv_reserved_formula),
               static_cast<long long>(r.kv_used_growth), static_cast<long long>(r.kv_used_formula),
               static_cast<long long>(r.camera_growth), static_cast<long long>(r.camera_formula));
  std::fprintf(f, "%s: %s\n", r.pass ? "PASS" : "FAIL", r.verdict.c_str());
}

}  // namespace lingbot::bench
