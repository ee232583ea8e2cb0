#include "bench_soak.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <fstream>

#include "bench/harness/calibration.h"
#include "core/error.h"
#include "core/printf_string.h"
#include "io/file_util.h"
#include "core/memory_stats.h"
#include "core/phase_clock.h"
#include "io/preprocess.h"
#include "lingbot/keyframe_policy.h"
#include "lingbot/session.h"
#include "pipeline/demo_model.h"
#include "cli_util.h"

namespace lingbot::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The median CPU time of the window ending at last_frame, without the scale phase's pushes; none when
// the window holds only those.
std::optional<double> median_ms(const std::vector<SoakRow>& rows, int64_t last_frame, int64_t window, int64_t scale_frames) {
  std::vector<double> v;
  for (int64_t f = std::max(scale_frames + 1, last_frame - window + 1); f <= last_frame; ++f)
    v.push_back(rows[static_cast<size_t>(f - 1)].cpu_ms);
  if (v.empty()) return std::nullopt;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// A figure with `format`, or "na" when there is none.
std::string figure_or_na(const char* format, const std::optional<double>& v) { return v ? printf_string(format, *v) : "na"; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Saturating at INT64_MAX (a fill frame past any --frames).
int64_t sat_add(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}
int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

// At most this many streamed frames from one stored frame to the next: the keyframe interval, or the
// flow policy's max non-keyframe gap; 0 = unknown (a custom policy).
int64_t keyframe_spacing(const SoakOptions& o) {
  if (!o.keyframe_policy) return o.keyframe_interval;
  if (const auto* interval = dynamic_cast<const IntervalKeyframes*>(o.keyframe_policy.get()))
    return interval->interval();
  if (const auto* flow = dynamic_cast<const FlowKeyframes*>(o.keyframe_policy.get()))
    return flow->max_non_keyframe_gap();
  return 0;
}

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

int64_t min_reference_frame(const SoakOptions& o) {
  if (o.max_special_frames == 0) return 1;
  const int64_t spacing = keyframe_spacing(o);
  if (spacing == 0) return 0;
  return sat_add(sat_add(o.scale_frames, sat_mul(sat_add(o.kv_window, o.max_special_frames), spacing)), 1);
}

void validate(SoakOptions& o) {
  LINGBOT_CHECK(o.frames >= 2, "--frames must be >= 2, got ", o.frames);
  // A row a frame is kept (about 200 B): 10^7 frames is days of pushes and 2 GB of rows.
  LINGBOT_CHECK(o.frames <= kMaxSoakFrames, "--frames must be at most ", kMaxSoakFrames, ", got ", o.frames);
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
  cli::usage_check(o.kv_backend != KVBackend::DenseFull || o.max_special_frames == 0,
                   "--max-special-frames does not apply to --kv-backend dense-full (it keeps every frame)");
  // The defaults, from the options in effect (0 = not given).
  const int64_t min_ref = min_reference_frame(o);
  if (o.reference_frame == 0) {
    cli::usage_check(min_ref > 0, "--reference-frame has no default for keyframe policy ", keyframe_rule(o),
                     " with --max-special-frames: give it");
    if (min_ref >= o.frames) {
      const bool flow = o.keyframe_policy && dynamic_cast<const FlowKeyframes*>(o.keyframe_policy.get());
      cli::usage_check(false, "--frames ", o.frames, " is too few for --max-special-frames ", o.max_special_frames,
                       ": the reference frame must be at least ", min_ref,
                       ", the frame by which the bounded caches have filled (scale frames ", o.scale_frames,
                       " + (KV window ", o.kv_window, " + max special frames ", o.max_special_frames, ") x ",
                       flow ? "max non-keyframe gap " : "keyframe interval ", keyframe_spacing(o), " + 1",
                       flow ? ", at the latest" : "", "); give --frames ",
                       sat_add(min_ref, 2 * kMinDefaultTimingWindow - 1), " or more (for a timing window of ",
                       kMinDefaultTimingWindow, " frames from there)",
                       flow ? ", or --reference-frame (flow keyframes may fill them sooner)" : "");
    }
    // At least min_ref, plus up to a timing window of frames from there (halfway to the last frame
    // when fewer remain), so that both medians hold frames from min_ref on.
    o.reference_frame = std::max(std::min(kDefaultReferenceFrame, o.frames / 2),
                                 min_ref + std::min(kDefaultTimingWindow - 1, (o.frames - 1 - min_ref) / 2));
    // The window the default gives: 1 + (frames - 1 - min_ref) / 2 frames, at least the minimum from
    // frames = min_ref + 2 x kMinDefaultTimingWindow - 1 on.
    if (o.max_special_frames > 0 && o.timing_window == 0 && o.reference_frame - min_ref + 1 < kMinDefaultTimingWindow)
      cli::usage_check(false, "--frames ", o.frames, " leaves a timing window of ", o.reference_frame - min_ref + 1,
                       " frame(s) after the bounded caches fill (frame ", min_ref, "), too few to judge the cost flat; give --frames ",
                       sat_add(min_ref, 2 * kMinDefaultTimingWindow - 1), " or more, or --reference-frame and --timing-window");
  }
  if (o.timing_window == 0) {
    // The frames from the fill frame to the reference frame (all of them without the bound).
    const int64_t filled = min_ref >= 1 && o.reference_frame >= min_ref ? o.reference_frame - min_ref + 1
                                                                          : o.reference_frame;
    o.timing_window = std::min(kDefaultTimingWindow, filled);
  }
  LINGBOT_CHECK(o.reference_frame >= 1 && o.reference_frame < o.frames, "--reference-frame must be in [1, --frames = ",
                o.frames, "), got ", o.reference_frame);
  LINGBOT_CHECK(o.timing_window >= 1 && o.timing_window <= o.reference_frame,
                "--timing-window must be in [1, --reference-frame = ", o.reference_frame, "], got ", o.timing_window);
}

SoakResult run_soak(std::shared_ptr<const Model> model, const SoakOptions& options, SoakObserver* observer) {
  SoakOptions o = options;
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
  so.stop = o.stop;
  so.keep_features = false;
  Session session(model, so);
  // The bounded caches' used bytes, visible keys and camera rows are final once the window and the
  // kept frames are full.
  const int64_t fill_stored = sat_add(sat_add(o.scale_frames, o.kv_window), sat_add(o.max_special_frames, 1));
  r.fill_frame = o.frames + 1;

  // All rows exist (and their memory is touched) before the first frame, so the harness's own
  // records never show up as RSS growth of the engine.
  r.rows.assign(static_cast<size_t>(o.frames), SoakRow{});
  wait_for_quiet_process();  // CPU times from here on are ours only (calibration.h)
  for (int64_t f = 0; f < o.frames; ++f) {
    const auto t0 = Clock::now();
    const double c0 = 1e3 * PhaseClock::cpu_now();
    std::vector<FrameResult> results;
    try {
      if (o.stop && o.stop->load(std::memory_order_acquire)) throw Stopped("stopped");
      results = session.push_frame(frames[static_cast<size_t>(f % o.loop_frames)]);
    } catch (const Stopped&) {
      r.interrupted = true;
      r.rows.resize(static_cast<size_t>(f));
      r.verdict = "interrupted after " + std::to_string(f) + " of " + std::to_string(o.frames) + " frames: nothing compared";
      return r;
    }
    const double cpu = 1e3 * PhaseClock::cpu_now() - c0;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    SoakRow& row = r.rows[static_cast<size_t>(f)];
    row.frame = f + 1;
    row.keyframe = !results.empty() && results.back().is_keyframe;
    row.push_ms = ms;
    row.cpu_ms = cpu;
    row.rss_bytes = static_cast<int64_t>(current_rss_bytes());
    // A running maximum: the kernel's per-thread RSS counters reach VmHWM late, which could read a
    // little lower than at the frame before (a peak that fell, in 1 of 3 runs).
    row.peak_rss_bytes = std::max(static_cast<int64_t>(peak_rss_bytes()), f > 0 ? r.rows[static_cast<size_t>(f - 1)].peak_rss_bytes : 0);
    const SessionStats st = session.stats();
    row.cache = st.cache;
    row.camera_cache_frames = st.camera_cache_frames;
    row.camera_cache_bytes = st.camera_cache_bytes;
    for (const FrameResult& res : results) r.frames_stored += res.is_keyframe;  // the scale frames too, as run counts
    if (r.fill_frame > o.frames && row.cache.frames_stored >= fill_stored) r.fill_frame = row.frame;
    if (observer) observer->on_frame(row, o.frames);
  }

  const SoakRow& ref = r.rows[static_cast<size_t>(o.reference_frame - 1)];
  const SoakRow& last = r.rows.back();
  r.peak_rss_growth = static_cast<double>(last.peak_rss_bytes) / static_cast<double>(ref.peak_rss_bytes) - 1.0;
  r.ref_median_ms = median_ms(r.rows, o.reference_frame, o.timing_window, o.scale_frames);
  r.last_median_ms = median_ms(r.rows, o.frames, o.timing_window, o.scale_frames);
  if (r.ref_median_ms && r.last_median_ms && *r.ref_median_ms > 0) r.time_ratio = *r.last_median_ms / *r.ref_median_ms;
  r.kv_reserved_growth = last.cache.bytes_reserved - ref.cache.bytes_reserved;
  r.kv_used_growth = last.cache.bytes_used - ref.cache.bytes_used;
  r.camera_growth = last.camera_cache_bytes - ref.camera_cache_bytes;
  // The exact formulas, from the stored frames alone (frame_ledger.h, kv_cache.h, paged_kv_cache.h,
  // camera_head.h), so they hold for any keyframe policy and from any reference frame (also one
  // before the window is full, or before the bounded caches fill).
  const SessionOptions& eff = session.options();  // the model's cache defaults resolved
  const int64_t pinned_cap = *eff.include_scale_frames ? o.scale_frames : 0;
  const int64_t M = o.max_special_frames;
  CacheOptions co;
  co.num_special_tokens = static_cast<int>(r.num_special_tokens);
  co.cross_frame_special = *eff.cross_frame_special;
  co.camera_only = *eff.camera_only;
  const int64_t kept_per_evicted = kept_specials_per_evicted_frame(co);
  const int64_t spf = r.special_page_frames, head_pages = ceil_div(pinned_cap, spf);
  auto evicted = [&](int64_t s) {  // the oldest unpinned frames beyond the window (dense-full: none)
    if (o.kv_backend == KVBackend::DenseFull) return int64_t{0};
    return std::max<int64_t>(0, s - std::min(s, pinned_cap) - o.kv_window);
  };
  auto dropped = [&](int64_t s) { return M > 0 ? std::max<int64_t>(0, evicted(s) - M) : 0; };
  const int64_t token_bytes = 2 * cfg.aggregator.embed_dim * static_cast<int64_t>(dtype_size(o.kv_dtype));
  // KV used: resident frames all their tokens; paged: the special stream keeps every stored frame's
  // specials but the dropped ones; dense: the kept specials of the evicted frames not dropped.
  auto used_bytes = [&](int64_t s) {
    const int64_t resident = s - evicted(s);
    const int64_t tokens = o.kv_backend == KVBackend::Paged
                               ? resident * r.patch_tokens + (s - dropped(s)) * r.num_special_tokens
                               : resident * r.tokens_per_frame + (evicted(s) - dropped(s)) * kept_per_evicted;
    return r.num_blocks * token_bytes * tokens;
  };
  // Paged special pages allocated: a step first backs the logical pages up to ceil(stored / spf)
  // (free pages first), then evicts and releases the pages whose frames' specials are all dropped;
  // so the allocation is the most pages ever held right after backing. Without the bound that is
  // ceil(stored / spf); with it the count held is periodic in the stored frames (period spf) once
  // pages are released, so the allocation is final after one period of that.
  auto special_pages = [&](int64_t s) -> int64_t {
    if (M == 0 || s < o.scale_frames) return ceil_div(s, spf);  // (stored is 0 before the scale phase)
    auto tail_first = [&](int64_t stored) {  // first logical page not released
      return std::max(head_pages, (std::min(stored, pinned_cap) + dropped(stored)) / spf);
    };
    int64_t pages = ceil_div(o.scale_frames, spf);  // the scale phase: the first step, on an empty cache
    const int64_t periodic_from = sat_add(head_pages * spf + o.kv_window, sat_add(M, 1));
    const int64_t until = std::min(s, sat_add(periodic_from, spf));
    for (int64_t t = o.scale_frames + 1; t <= until; ++t)
      pages = std::max(pages, ceil_div(t, spf) - (tail_first(t - 1) - head_pages));
    return pages;
  };
  // Camera head: one K,V row set per stored frame; with the bound the scale frames and the newest
  // kv_window + max_special_frames stored frames.
  auto camera_frames = [&](int64_t s) {
    return M > 0 ? std::min(s, pinned_cap + o.kv_window + M) : s;
  };
  const int64_t s_ref = ref.cache.frames_stored, s_last = last.cache.frames_stored;
  r.kv_used_formula = used_bytes(s_last) - used_bytes(s_ref);
  if (o.kv_backend == KVBackend::Paged)
    r.kv_reserved_formula = r.num_blocks * r.special_page_bytes * (special_pages(s_last) - special_pages(s_ref));
  r.camera_formula = r.camera_row_bytes_per_frame * (camera_frames(s_last) - camera_frames(s_ref));
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
    // The reference frame is at or after the fill frame, which is past the scale phase: both medians exist.
    check(r.time_ratio.value_or(INFINITY) <= 1.05, "per-frame time ratio " + figure_or_na("%f", r.time_ratio) + " > 1.05");
  }
  check(r.kv_used_growth == r.kv_used_formula, "KV used bytes grew " + std::to_string(r.kv_used_growth) +
                                                   " != formula " + std::to_string(r.kv_used_formula));
  if (r.kv_reserved_formula)
    check(r.kv_reserved_growth == *r.kv_reserved_formula, "KV reserved bytes grew " +
                                                              std::to_string(r.kv_reserved_growth) + " != formula " +
                                                              std::to_string(*r.kv_reserved_formula));
  check(r.camera_growth == r.camera_formula, "camera-head cache grew " + std::to_string(r.camera_growth) +
                                                 " != formula " + std::to_string(r.camera_formula));
  r.pass = why.empty();
  if (!r.pass)
    r.verdict = why;
  else if (o.max_special_frames == 0 && !r.kv_reserved_formula)
    r.verdict = "unbounded: KV used and camera-head growth equal the formulas exactly (KV reserved: no formula for "
                "the dense backends' geometric growth)";
  else if (o.max_special_frames == 0)
    r.verdict = "unbounded: KV and camera-head growth equal the formulas exactly";
  else if (!r.kv_reserved_formula)
    r.verdict = "bounded: peak RSS growth <= 1%, time ratio <= 1.05, KV used and camera-head bytes flat";
  else if (*r.kv_reserved_formula == 0)
    r.verdict = "bounded: peak RSS growth <= 1%, time ratio <= 1.05, KV and camera-head bytes flat";
  else  // the reference frame is in the few frames where the paged special stream still allocates
    r.verdict = "bounded: peak RSS growth <= 1%, time ratio <= 1.05, KV used and camera-head bytes flat, KV "
                "reserved bytes grew by the formula exactly (the special stream's last pages)";
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

namespace {
// The KV reserved formula's value, or "na" (summary) / "n/a for the dense backends" (report).
std::string reserved_formula_text(const SoakResult& r, bool report) {
  if (!r.kv_reserved_formula) return report ? "n/a for the dense backends" : "na";
  return printf_string(report ? "%+lld" : "%lld", static_cast<long long>(*r.kv_reserved_formula));
}
}  // namespace

std::string soak_summary_line(const SoakResult& r) {
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "summary: frames=%lld max_special_frames=%lld keyframe_policy=%s frames_stored=%lld kv_backend=%s reference_frame=%lld "
                "peak_rss_growth_pct=%.3f time_ratio=%s ref_cpu_ms=%s last_cpu_ms=%s kv_reserved_growth=%lld "
                "kv_reserved_formula=%s kv_used_growth=%lld kv_used_formula=%lld camera_growth=%lld "
                "camera_formula=%lld pass=%s",
                static_cast<long long>(r.options.frames), static_cast<long long>(r.options.max_special_frames),
                keyframe_rule(r.options).c_str(), static_cast<long long>(r.frames_stored), kv_backend_name(r.options.kv_backend),
                static_cast<long long>(r.options.reference_frame), r.peak_rss_growth * 100,
                figure_or_na("%.4f", r.time_ratio).c_str(), figure_or_na("%.3f", r.ref_median_ms).c_str(),
                figure_or_na("%.3f", r.last_median_ms).c_str(), static_cast<long long>(r.kv_reserved_growth),
                reserved_formula_text(r, /*report=*/false).c_str(), static_cast<long long>(r.kv_used_growth),
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
  if (r.interrupted) return;  // no comparison: the run ended before its last frame
  std::fprintf(f,
               "frame %lld -> %lld: peak RSS %+.3f%%, median CPU per frame %s -> %s ms (x%s), KV reserved %+lld B "
               "(formula %s), KV used %+lld B (formula %+lld), camera head %+lld B (formula %+lld)\n",
               static_cast<long long>(r.options.reference_frame), static_cast<long long>(r.options.frames),
               r.peak_rss_growth * 100, figure_or_na("%.3f", r.ref_median_ms).c_str(),
               figure_or_na("%.3f", r.last_median_ms).c_str(), figure_or_na("%.4f", r.time_ratio).c_str(),
               static_cast<long long>(r.kv_reserved_growth), reserved_formula_text(r, /*report=*/true).c_str(),
               static_cast<long long>(r.kv_used_growth), static_cast<long long>(r.kv_used_formula),
               static_cast<long long>(r.camera_growth), static_cast<long long>(r.camera_formula));
  std::fprintf(f, "%s: %s\n", r.pass ? "PASS" : "FAIL", r.verdict.c_str());
}

}  // namespace lingbot::bench
