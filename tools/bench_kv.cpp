#include "bench_kv.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "core/allocator.h"
#include "core/error.h"
#include "core/format_bytes.h"
#include "core/memory_stats.h"
#include "core/phase_clock.h"
#include "bench/harness/calibration.h"
#include "bench/harness/kv_bookkeeping.h"
#include "lingbot/session.h"

namespace lingbot::bench {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the whole process (all threads): unlike wall time, barely affected by other processes
// competing for the cores.
double cpu_ms() { return 1e3 * PhaseClock::cpu_now(); }

// Thrown by CappedAllocator before an allocation that would take a backend's KV bytes past its cap, or
// all backends' past the shared budget (`budget`).
class MemCapExceeded : public Error {
 public:
  MemCapExceeded(size_t held, size_t request, size_t cap, bool budget)
      : Error(detail::concat("KV allocation of ", request, " bytes on top of ", held, budget ? " (all backends)" : "",
                             " would exceed the ", budget ? "budget" : "cap", " of ", cap, " bytes")),
        budget(budget) {}
  bool budget;
};

// Bytes all backends hold together, against a cap shared by them (KvBenchOptions::mem_budget_gb).
// Backends allocate from the bench's one thread.
struct SharedBudget {
  size_t cap = 0;  // 0 = none
  size_t used = 0;
};

// Allocator (of the device's memory) that refuses (throws MemCapExceeded) before exceeding a byte cap
// of its own or the shared budget, so a backend is stopped before the memory is taken. Geometric
// growth that holds old + new buffers at once counts both.
class CappedAllocator final : public Allocator {
 public:
  CappedAllocator(size_t cap, SharedBudget* budget, std::unique_ptr<Allocator> inner)
      : cap_(cap), budget_(budget), inner_(std::move(inner)) {}
  void* allocate(size_t bytes) override {
    if (cap_ > 0 && inner_->bytes_allocated() + bytes > cap_)
      throw MemCapExceeded(inner_->bytes_allocated(), bytes, cap_, /*budget=*/false);
    if (budget_->cap > 0 && budget_->used + bytes > budget_->cap)
      throw MemCapExceeded(budget_->used, bytes, budget_->cap, /*budget=*/true);
    void* p = inner_->allocate(bytes);
    budget_->used += bytes;
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    inner_->deallocate(p, bytes);
    budget_->used -= bytes;
  }
  MemoryKind kind() const override { return inner_->kind(); }
  size_t bytes_allocated() const override { return inner_->bytes_allocated(); }
  uint64_t allocation_count() const override { return inner_->allocation_count(); }

 private:
  size_t cap_;
  SharedBudget* budget_;
  std::unique_ptr<Allocator> inner_;
};

// Counter-based generator: value i of stream `key` depends only on (key, i), so inputs are the same
// for every backend and thread count, and any block can be generated on its own.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fills n floats, uniform in [-sqrt(3), sqrt(3)) (zero mean, unit variance), two per 64-bit draw.
void fill_uniform(float* dst, int64_t n, uint64_t key, int threads) {
  constexpr float kScale = 1.7320508f * 2.0f / 4294967296.0f;
  const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static) num_threads(threads) if (pairs > 65536)
  for (int64_t p = 0; p < pairs; ++p) {
    const uint64_t r = splitmix64(key ^ (static_cast<uint64_t>(p) * 0xd1b54a32d192ed03ull));
    dst[2 * p] = static_cast<float>(static_cast<uint32_t>(r)) * kScale - 1.7320508f;
    if (2 * p + 1 < n) dst[2 * p + 1] = static_cast<float>(static_cast<uint32_t>(r >> 32)) * kScale - 1.7320508f;
  }
}

struct Step {
  FrameMode mode;
  int n_frames;
  int frame_end;  // frames processed after this step (1-based index of its last frame)
};

// The run's steps: the scale phase, then one step per frame (computed when needed: a list of all of
// them grew with --frames before any was run).
int step_count(const KvBenchOptions& o) { return 1 + o.frames - std::min(o.scale_frames, o.frames); }

Step step_at(const KvBenchOptions& o, int index) {
  const int scale = std::min(o.scale_frames, o.frames);
  if (index == 0) return {FrameMode::ScalePhase, scale, scale};
  const int i = scale + index - 1;  // 0-based frame
  const bool key = o.keyframe_interval <= 1 || (i - o.scale_frames) % o.keyframe_interval == 0;
  return {key ? FrameMode::Keyframe : FrameMode::NonKeyframe, 1, i + 1};
}

struct LiveBackend {
  int index = 0;
  KVBackend kind = KVBackend::Paged;
  std::unique_ptr<CappedAllocator> alloc;
  std::unique_ptr<KVCache> cache;
  FrameRow row;
};

std::string fmt(double v, int prec = 4) {
  if (!std::isfinite(v)) return "na";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, v);
  if (std::strstr(buf, "e+") != nullptr) std::snprintf(buf, sizeof buf, "%.1f", v);  // 1509949.4, not 1.50995e+06
  return buf;
}

}  // namespace

bool is_attended_frame(const KvBenchOptions& o, int frame, bool scale_phase) {
  if (scale_phase || o.attend_every <= 1) return true;
  // Sample points and the kLatencyFrames - 1 frames before each (so every point gets a smoothed latency).
  for (int d = 0; d < kLatencyFrames; ++d) {
    const int f = frame + d;
    if (f > o.frames) break;
    if (f % o.attend_every == 0 || f == 100 || f == 320 || f == o.frames) return true;
  }
  return false;
}

int patches_per_frame(int resolution) {
  if (resolution == 224) return 16 * 16;
  if (resolution == 518) return 37 * 27;  // 518x378 input, patch 14
  throw Error(detail::concat("--resolution must be 224 or 518, got ", resolution));
}

int64_t token_kv_bytes(const KvBenchOptions& o) {
  return 2LL * o.heads * o.head_dim * static_cast<int64_t>(dtype_size(o.dtype));
}

void validate(const KvBenchOptions& o) {
  patches_per_frame(o.resolution);
  LINGBOT_CHECK(o.blocks >= 1, "--blocks must be >= 1, got ", o.blocks);
  LINGBOT_CHECK(o.heads >= 1, "--heads must be >= 1, got ", o.heads);
  LINGBOT_CHECK(o.head_dim >= 1, "--head-dim must be >= 1, got ", o.head_dim);
  LINGBOT_CHECK(o.window >= 1, "--kv-window must be >= 1, got ", o.window);
  LINGBOT_CHECK(o.scale_frames >= 1, "--scale-frames must be >= 1, got ", o.scale_frames);
  LINGBOT_CHECK(o.keyframe_interval >= 1, "--keyframe-interval must be >= 1, got ", o.keyframe_interval);
  LINGBOT_CHECK(o.frames >= 1, "--frames must be >= 1, got ", o.frames);
  // As bench model: with only the scale phase, no single-frame step is measured (every figure na).
  LINGBOT_CHECK(o.frames > o.scale_frames, "--frames must exceed --scale-frames (", o.scale_frames,
                ") so that single-frame steps are measured, got ", o.frames);
  LINGBOT_CHECK(o.threads >= 1, "--threads must be >= 0 (0 = all cores), got ", o.threads);
  // Upper bounds: beyond them the run cannot be useful, and the buffers the sizes ask for would fail
  // to allocate part way (std::bad_alloc) instead of being refused here.
  for (const auto& [option, value, bound] : {std::tuple{"--blocks", o.blocks, kMaxBlocks},
                                             std::tuple{"--heads", o.heads, kMaxHeads},
                                             std::tuple{"--head-dim", o.head_dim, kMaxHeadDim},
                                             std::tuple{"--kv-window", o.window, kMaxKvWindow},
                                             std::tuple{"--scale-frames", o.scale_frames, kMaxScaleFrames},
                                             std::tuple{"--frames", o.frames, kMaxFrames},
                                             std::tuple{"--threads", o.threads, kMaxThreads}})
    LINGBOT_CHECK(value <= bound, option, " must be at most ", bound, ", got ", value);
  LINGBOT_CHECK(o.attend_every >= 1, "--attend-every must be >= 1, got ", o.attend_every);
  LINGBOT_CHECK(std::isfinite(o.mem_cap_gb) && o.mem_cap_gb >= 0, "--mem-cap-gb must be >= 0, got ", o.mem_cap_gb);
  LINGBOT_CHECK(std::isfinite(o.mem_budget_gb) && o.mem_budget_gb >= 0, "the KV memory budget must be >= 0 GiB, got ",
                o.mem_budget_gb);
  LINGBOT_CHECK(!o.backends.empty(), "--kv-backends must name at least one backend");
  for (KVBackend b : o.backends)
    LINGBOT_CHECK(o.device != BenchDeviceKind::Cuda || b == KVBackend::Paged, "--kv-backends: '", kv_backend_name(b),
                  "' is not available with --device cuda (CUDA has only the 'paged' cache)");
  for (size_t i = 0; i < o.backends.size(); ++i)
    for (size_t j = i + 1; j < o.backends.size(); ++j)
      LINGBOT_CHECK(o.backends[i] != o.backends[j], "--kv-backends lists '", kv_backend_name(o.backends[i]), "' twice");
  LINGBOT_CHECK(o.attention || o.attend_every == 1, "--attend-every needs --attention on (nothing is attended)");
  if (o.attention_ab) {
    LINGBOT_CHECK(o.device == BenchDeviceKind::Cpu, "--attention-ab needs --device cpu");
    LINGBOT_CHECK(o.attention, "--attention-ab needs --attention on");
    LINGBOT_CHECK(std::find(o.backends.begin(), o.backends.end(), KVBackend::Paged) != o.backends.end(),
                  "--attention-ab needs the paged backend in --kv-backends");
  }
}

KvBenchResult run_kv_bench(const KvBenchOptions& o, KvBenchObserver* observer) {
  validate(o);
  const std::unique_ptr<BenchDevice> device = make_bench_device(o.device, o.threads);
  return run_kv_bench(o, *device, observer);
}

KvBenchResult run_kv_bench(const KvBenchOptions& o, BenchDevice& device, KvBenchObserver* observer) {
  validate(o);
  LINGBOT_CHECK(device.kind() == o.device, "run_kv_bench: options ask for device '", bench_device_name(o.device),
                "' but got a '", bench_device_name(device.kind()), "' device");
  KvBenchResult res;
  res.options = o;
  res.device = device.description();
  const int patches = patches_per_frame(o.resolution);
  res.tokens_per_frame = patches + kSpecialTokens;
  const double t_start = now_ms();

  // Calibrated before and after the stream; the better figure counts (a busy machine only lowers it).
  auto calibrate = [&] {
    if (!o.calibrate) return;
    const DeviceCalibration c = device.calibrate(o.threads);
    DeviceCalibration& best = res.calibration;
    best.gemm_gflops = std::max(best.gemm_gflops, c.gemm_gflops);
    best.gemm_n = c.gemm_n;
    best.bandwidth_gbps = std::max(best.bandwidth_gbps, c.bandwidth_gbps);
    best.spec_bandwidth_gbps = c.spec_bandwidth_gbps;
    best.gemm_library = c.gemm_library;
  };
  calibrate();
  if (!o.calibrate) wait_for_quiet_process();  // CPU times from here on are ours only (calibration.h)
  reset_peak_rss();  // the calibration buffers do not count as benchmark memory
  if (observer) observer->on_calibrated(res);

  const int steps = step_count(o);
  const int64_t row = static_cast<int64_t>(o.heads) * o.head_dim;
  const int64_t max_q = static_cast<int64_t>(step_at(o, 0).n_frames) * res.tokens_per_frame;
  // q, k, v of one block (f32 [n_q, heads, head_dim] each, generated on the host and staged where the
  // caches read them) and the output, reused for every block. The scale phase's are the largest: a
  // size they cannot have is refused with the options to lower, not a std::bad_alloc part way.
  const int64_t buffer_bytes = (o.attention_ab ? 6 : 4) * max_q * row * static_cast<int64_t>(sizeof(float));
  const auto available = static_cast<int64_t>(available_memory_bytes());
  LINGBOT_CHECK(available == 0 || buffer_bytes <= available, "bench kv: the step buffers (q, k, v and output of ",
                max_q, " tokens x ", o.heads, " heads x ", o.head_dim, " head_dim, f32) need ", format_bytes(buffer_bytes),
                ", more than the ", format_bytes(available), " available: lower --scale-frames, --heads or --head-dim");
  CacheOptions co;
  co.num_blocks = o.blocks;
  co.heads = o.heads;
  co.head_dim = o.head_dim;
  co.tokens_per_frame = res.tokens_per_frame;
  co.num_special_tokens = kSpecialTokens;
  co.scale_frames = o.scale_frames;
  co.sliding_window = o.window;
  co.dtype = o.dtype;
  const size_t cap = static_cast<size_t>(o.mem_cap_gb * 1073741824.0);
  SharedBudget budget{static_cast<size_t>(o.mem_budget_gb * 1073741824.0)};  // outlives the allocators

  std::vector<LiveBackend> live;
  auto stop = [&](size_t li, int frame, const MemCapExceeded& why) {
    BackendStop s{live[li].index, frame, why.budget, why.what()};
    res.stops.push_back(s);
    if (observer) observer->on_stop(res, s);
    // The cache first: erase() move-assigns the later backends down member by member, which would
    // destroy this allocator while the cache still held its memory (a use-after-free: bench kv
    // crashed when a backend other than the last one hit its cap).
    live[li].cache.reset();
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(li));
  };
  for (size_t i = 0; i < o.backends.size(); ++i) {
    LiveBackend b;
    b.index = static_cast<int>(i);
    b.kind = o.backends[i];
    b.alloc = std::make_unique<CappedAllocator>(cap, &budget, device.make_allocator());
    live.push_back(std::move(b));
    try {
      live.back().cache = device.make_cache(o.backends[i], co, *live.back().alloc);
    } catch (const MemCapExceeded& e) {
      stop(live.size() - 1, 1, e);  // the cache frame 1 needs could not be made
    }
  }

  std::vector<float> q(max_q * row), k(max_q * row), v(max_q * row);
  float* out = device.output(max_q * row);
  std::vector<float> ab_out[2];  // --attention-ab: Auto, F32
  if (o.attention_ab)
    for (auto& b : ab_out) b.resize(static_cast<size_t>(max_q * row));
  if (!o.attention) {
    // Bookkeeping-only runs write no K/V; keep the buffers defined anyway.
    fill_uniform(q.data(), max_q * row, o.seed, o.threads);
  }

  const auto stop_requested = [&] { return o.stop && o.stop->load(std::memory_order_acquire); };
  for (int si = 0; si < steps && !live.empty(); ++si) {
    if (stop_requested()) {
      res.interrupted = true;
      break;
    }
    const Step st = step_at(o, si);
    const int64_t n_q = static_cast<int64_t>(st.n_frames) * res.tokens_per_frame;
    const bool attend = o.attention && is_attended_frame(o, st.frame_end, si == 0);
    for (auto& b : live) {
      b.row = FrameRow{};
      b.row.frame = st.frame_end;
      b.row.backend = b.index;
      b.row.mode = st.mode;
      b.row.attended = attend;
      b.row.n_q = n_q;
    }
    // Runs f on every live backend, adding its wall and CPU time to `acc` / `acc_cpu`; a backend
    // hitting its cap or the shared budget stops (freeing its memory for the others).
    auto for_each_live = [&](auto&& f, double FrameRow::*acc, double FrameRow::*acc_cpu) {
      for (size_t li = 0; li < live.size();) {
        const double t0 = now_ms(), c0 = cpu_ms();
        try {
          f(live[li]);
          device.synchronize();
        } catch (const MemCapExceeded& e) {
          stop(li, st.frame_end, e);
          continue;
        }
        live[li].row.*acc_cpu += cpu_ms() - c0;
        live[li].row.*acc += now_ms() - t0;
        ++li;
      }
    };
    if (attend) {
      for_each_live([&](LiveBackend& b) { b.cache->begin_step(st.mode, st.n_frames); }, &FrameRow::maint_ms, &FrameRow::maint_cpu_ms);
      for (auto& b : live) b.row.n_k = b.cache->keys_in_step();
      for (int blk = 0; blk < o.blocks && !live.empty(); ++blk) {
        // A step at 518 px takes seconds a block on a CPU: a stop ends it here (its rows are dropped).
        if (stop_requested()) {
          res.interrupted = true;
          break;
        }
        const uint64_t key = splitmix64(o.seed) ^ splitmix64((static_cast<uint64_t>(si) << 20) + blk);
        fill_uniform(q.data(), n_q * row, splitmix64(key + 1), o.threads);
        fill_uniform(k.data(), n_q * row, splitmix64(key + 2), o.threads);
        fill_uniform(v.data(), n_q * row, splitmix64(key + 3), o.threads);
        const int64_t n = n_q * row;
        std::optional<kernels::VisibleKV> ab_pair;  // the paged cache's keys of this block (--attention-ab)
        const kernels::QueryView qv{device.stage(0, q.data(), n), static_cast<int>(n_q), o.heads, o.head_dim, row};
        const kernels::KVSpan kv{device.stage(1, k.data(), n), device.stage(2, v.data(), n), DType::F32,
                                 static_cast<int>(n_q), row};
        // As the model drives it: the cache stores the block's K/V and hands out its keys, the device's
        // attention kernel reads them.
        for_each_live(
            [&](LiveBackend& b) {
              const kernels::VisibleKV keys = b.cache->store(blk, kv);
              device.attention(qv, keys, out);
              if (o.attention_ab && b.kind == KVBackend::Paged) ab_pair.emplace(keys);
            },
            &FrameRow::attn_ms, &FrameRow::attn_cpu_ms);
        if (ab_pair) {
          // The two paths alone on the same keys, outside attn_ms; the order alternates per block so
          // neither always finds the keys warmer in cache.
          LiveBackend* pb = nullptr;
          for (auto& b : live)
            if (b.kind == KVBackend::Paged) pb = &b;
          if (pb) {
            double ms[2] = {0, 0};
            for (int i = 0; i < 2; ++i) {
              const int which = (blk + i) % 2;  // 0: Auto, 1: F32
              const double t0 = now_ms();
              device.attention_with_compute(qv, *ab_pair, ab_out[which].data(),
                                            which == 0 ? kernels::AttentionCompute::Auto : kernels::AttentionCompute::F32);
              ms[which] = now_ms() - t0;
            }
            pb->row.ab_auto_ms += ms[0];
            pb->row.ab_f32_ms += ms[1];
            if (ms[0] > 0) pb->row.ab_call_speedup.push_back(ms[1] / ms[0]);
            for (int64_t i = 0; i < n; ++i)
              pb->row.ab_max_abs_diff =
                  std::max(pb->row.ab_max_abs_diff, static_cast<double>(std::fabs(ab_out[0][i] - ab_out[1][i])));
          }
          ab_pair.reset();
        }
      }
      if (res.interrupted) break;
      for_each_live([&](LiveBackend& b) { b.cache->end_step(); }, &FrameRow::maint_ms, &FrameRow::maint_cpu_ms);
      for (auto& b : live)
        b.row.flops = 4.0 * static_cast<double>(n_q) * static_cast<double>(b.row.n_k) * o.head_dim * o.heads * o.blocks;
    } else {
      for_each_live([&](LiveBackend& b) { bench::bookkeeping_step(*b.cache, st.mode, st.n_frames); },
                    &FrameRow::maint_ms, &FrameRow::maint_cpu_ms);
    }
    const int64_t rss = static_cast<int64_t>(current_rss_bytes());
    const int64_t peak = static_cast<int64_t>(peak_rss_bytes());
    for (auto& b : live) {
      b.row.stats = b.cache->stats();
      b.row.rss_bytes = rss;
      b.row.peak_rss_bytes = peak;
      res.rows.push_back(b.row);
    }
    if (observer) observer->on_step(st.frame_end, o.frames);
  }
  live.clear();  // free the caches before calibrating again
  if (!res.interrupted) calibrate();
  res.wall_seconds = (now_ms() - t_start) * 1e-3;
  return res;
}

std::vector<std::pair<std::string, std::string>> summarize(const KvBenchResult& r) {
  const KvBenchOptions& o = r.options;
  const int patches = r.tokens_per_frame - kSpecialTokens;
  const int last = o.frames;
  const double nan = std::nan("");
  auto backend_index = [&](KVBackend k) -> int {
    for (size_t i = 0; i < o.backends.size(); ++i)
      if (o.backends[i] == k) return static_cast<int>(i);
    return -1;
  };
  auto row_at = [&](KVBackend k, int frame) -> const FrameRow* {
    const int bi = backend_index(k);
    for (const auto& row : r.rows)
      if (row.backend == bi && row.frame == frame) return &row;
    return nullptr;
  };
  // Latency of a backend "at" a frame: mean (attn + maint) over its attended streaming rows among the
  // last kLatencyFrames frames up to it (smooths timer noise).
  auto latency_at = [&](KVBackend k, int frame, bool cpu = false) -> double {
    const int bi = backend_index(k);
    double sum = 0;
    int n = 0;
    for (const auto& row : r.rows)
      if (row.backend == bi && row.attended && row.mode != FrameMode::ScalePhase && row.frame <= frame &&
          row.frame > frame - kLatencyFrames) {
        sum += cpu ? row.attn_cpu_ms + row.maint_cpu_ms : row.attn_ms + row.maint_ms;
        ++n;
      }
    if (n == 0 || !row_at(k, frame)) return nan;
    return sum / n;
  };
  auto bytes_ratio = [&](KVBackend a, KVBackend b, int frame) -> double {
    const FrameRow* ra = row_at(a, frame);
    const FrameRow* rb = row_at(b, frame);
    if (!ra || !rb || rb->stats.bytes_used == 0) return nan;
    return static_cast<double>(ra->stats.bytes_used) / static_cast<double>(rb->stats.bytes_used);
  };
  const int64_t tok_bytes = token_kv_bytes(o) * o.blocks;  // one token, all blocks
  auto reserved_vs_min = [&](int frame) -> double {
    const FrameRow* p = row_at(KVBackend::Paged, frame);
    if (!p) return nan;
    const int64_t min_bytes = (p->stats.frames_resident * patches + p->stats.special_tokens) * tok_bytes;
    return min_bytes ? static_cast<double>(p->stats.bytes_reserved) / static_cast<double>(min_bytes) : nan;
  };

  std::vector<std::pair<std::string, std::string>> s;
  s.emplace_back("device", bench_device_name(o.device));
  const std::string at_last = "@" + std::to_string(last);
  s.emplace_back("mem_ratio_paged_vs_densefull@320", fmt(bytes_ratio(KVBackend::Paged, KVBackend::DenseFull, 320)));
  s.emplace_back("mem_ratio_paged_vs_dense@320", fmt(bytes_ratio(KVBackend::Paged, KVBackend::Dense, 320)));
  s.emplace_back("mem_ratio_paged_vs_densefull" + at_last,
                 fmt(bytes_ratio(KVBackend::Paged, KVBackend::DenseFull, last)));
  s.emplace_back("paged_reserved_vs_min@320", fmt(reserved_vs_min(320)));
  s.emplace_back("paged_reserved_vs_min" + at_last, fmt(reserved_vs_min(last)));
  const double lp = latency_at(KVBackend::Paged, last), ld = latency_at(KVBackend::Dense, last);
  s.emplace_back("lat_ratio_paged_vs_dense" + at_last, fmt(lp / ld));
  const double lpc = latency_at(KVBackend::Paged, last, /*cpu=*/true), ldc = latency_at(KVBackend::Dense, last, /*cpu=*/true);
  s.emplace_back("cpu_ratio_paged_vs_dense" + at_last, fmt(lpc / ldc));
  s.emplace_back("lat_ms_paged" + at_last, fmt(lp));
  s.emplace_back("lat_ms_dense" + at_last, fmt(ld));
  s.emplace_back("lat_ms_densefull" + at_last, fmt(latency_at(KVBackend::DenseFull, last)));
  if (last > 100)  // the drift from frame 100 on: none in a shorter run
    s.emplace_back("drift_paged_" + std::to_string(last) + "_vs_100",
                   fmt(latency_at(KVBackend::Paged, last) / latency_at(KVBackend::Paged, 100)));

  // Kernel throughput: paged streaming steps (not the scale phase), attend() time incl. the K/V store.
  // Bytes: every visible key's K and V read once per block (a lower bound on the traffic).
  double flops = 0, kv_bytes = 0, ms = 0;
  const int pi = backend_index(KVBackend::Paged);
  for (const auto& row : r.rows)
    if (row.backend == pi && row.attended && row.mode != FrameMode::ScalePhase) {
      flops += row.flops;
      kv_bytes += static_cast<double>(row.n_k) * static_cast<double>(token_kv_bytes(o)) * o.blocks;
      ms += row.attn_ms;
    }
  const double kgf = ms > 0 ? flops / (ms * 1e-3) * 1e-9 : nan;
  const double kgb = ms > 0 ? kv_bytes / (ms * 1e-3) * 1e-9 : nan;
  const DeviceCalibration& cal = r.calibration;
  s.emplace_back("kernel_gflops", fmt(kgf));
  s.emplace_back("kernel_gbps", fmt(kgb));
  if (o.device == BenchDeviceKind::Cuda) {
    // Fractions of the GPU's peaks measured in the same run (cuBLAS bf16 GEMM, device copy).
    s.emplace_back("kernel_tflops", fmt(kgf * 1e-3));
    s.emplace_back("gemm_tflops", cal.gemm_gflops > 0 ? fmt(cal.gemm_gflops * 1e-3) : "na");
    s.emplace_back("kernel_pct_of_gemm", cal.gemm_gflops > 0 ? fmt(100.0 * kgf / cal.gemm_gflops, 3) : "na");
    s.emplace_back("copy_gbps", cal.bandwidth_gbps > 0 ? fmt(cal.bandwidth_gbps) : "na");
    s.emplace_back("kernel_pct_of_copy_bw", cal.bandwidth_gbps > 0 ? fmt(100.0 * kgb / cal.bandwidth_gbps, 3) : "na");
    s.emplace_back("spec_bandwidth_gbps", cal.spec_bandwidth_gbps > 0 ? fmt(cal.spec_bandwidth_gbps) : "na");
  } else {
    s.emplace_back("sgemm_gflops", cal.gemm_gflops > 0 ? fmt(cal.gemm_gflops) : "na");
    s.emplace_back("kernel_pct_of_sgemm", cal.gemm_gflops > 0 ? fmt(100.0 * kgf / cal.gemm_gflops, 3) : "na");
    s.emplace_back("bandwidth_gbps", cal.bandwidth_gbps > 0 ? fmt(cal.bandwidth_gbps) : "na");
  }

  if (o.attention_ab) {
    // Native-bf16 vs f32 attention, kernel alone, paged streaming steps, same keys in the same run.
    double a = 0, f = 0, diff = 0;
    std::vector<double> calls;
    for (const auto& row : r.rows)
      if (row.backend == pi && row.attended && row.mode != FrameMode::ScalePhase) {
        a += row.ab_auto_ms;
        f += row.ab_f32_ms;
        diff = std::max(diff, row.ab_max_abs_diff);
        calls.insert(calls.end(), row.ab_call_speedup.begin(), row.ab_call_speedup.end());
      }
    // Median over the per-block pairs: a pair slowed by another process on the cores moves the
    // sums above but barely the median.
    double median = nan;
    if (!calls.empty()) {
      std::sort(calls.begin(), calls.end());
      const size_t n = calls.size();
      median = n % 2 ? calls[n / 2] : 0.5 * (calls[n / 2 - 1] + calls[n / 2]);
    }
    s.emplace_back("ab_auto_compute",
                   kernels::attention_compute_name(kernels::resolved_attention_compute(kernels::AttentionCompute::Auto, o.dtype)));
    s.emplace_back("ab_kernel_ms_auto", fmt(a));
    s.emplace_back("ab_kernel_ms_f32", fmt(f));
    s.emplace_back("ab_speedup_auto_vs_f32", a > 0 ? fmt(f / a, 3) : "na");
    s.emplace_back("ab_speedup_median_call", fmt(median, 3));
    s.emplace_back("ab_max_abs_diff", fmt(diff, 3));
  }

  // Special stream: bytes stored per stored frame, all blocks (measured), and reserved per frame.
  const FrameRow* pl = nullptr;
  for (const auto& row : r.rows)
    if (row.backend == pi) pl = &row;
  if (pl && pl->stats.frames_stored > 0) {
    s.emplace_back("special_bytes_per_frame",
                   fmt(static_cast<double>(pl->stats.special_tokens * tok_bytes) / pl->stats.frames_stored, 8));
    s.emplace_back("special_reserved_bytes_per_frame",
                   fmt(static_cast<double>(pl->stats.special_bytes_reserved) / pl->stats.frames_stored, 6));
  } else {
    s.emplace_back("special_bytes_per_frame", "na");
    s.emplace_back("special_reserved_bytes_per_frame", "na");
  }
  // Paged patch memory must not grow once pinned + window frames are resident.
  const int steady = o.scale_frames + o.window;
  std::optional<int64_t> lo, hi;
  for (const auto& row : r.rows)
    if (row.backend == pi && row.frame >= steady) {
      lo = std::min(lo.value_or(row.stats.patch_bytes_reserved), row.stats.patch_bytes_reserved);
      hi = std::max(hi.value_or(row.stats.patch_bytes_reserved), row.stats.patch_bytes_reserved);
    }
  s.emplace_back("paged_patch_reserved_const_after_" + std::to_string(steady),
                 lo ? (*lo == *hi ? "yes" : "no") : "na");
  s.emplace_back("paged_patch_reserved_bytes", hi ? std::to_string(*hi) : "na");
  for (size_t i = 0; i < o.backends.size(); ++i) {
    const FrameRow* lr = nullptr;
    for (const auto& row : r.rows)
      if (row.backend == static_cast<int>(i)) lr = &row;
    std::string name = kv_backend_name(o.backends[i]);
    name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
    s.emplace_back("reserved_bytes_" + name + "@end", lr ? std::to_string(lr->stats.bytes_reserved) : "na");
  }
  for (const auto& st : r.stops) {
    std::string name = kv_backend_name(o.backends[st.backend]);
    name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
    s.emplace_back("stopped_" + name + "_at_frame", std::to_string(st.frame));
  }
  int64_t peak = 0;
  for (const auto& row : r.rows) peak = std::max(peak, row.peak_rss_bytes);
  s.emplace_back("peak_rss_bytes", r.rows.empty() ? "na" : std::to_string(peak));
  s.emplace_back("wall_s", fmt(r.wall_seconds, 4));
  return s;
}

}  // namespace lingbot::bench
