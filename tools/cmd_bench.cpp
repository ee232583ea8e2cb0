// `lingbot-map bench kv`: paged vs dense streaming attention (see tools/bench_kv.h, docs/performance.md).
// `lingbot-map bench model`: end-to-end frames through a random-weight model (tools/bench_model.h).
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "bench_gpu.h"
#include "bench_kv.h"
#include "bench_model.h"
#include "bench_report.h"
#include "bench_soak.h"
#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "lingbot/model.h"
#include "lingbot/session.h"
#include "pipeline/demo_model.h"
#include "pipeline/session_backend.h"
#include "run_modes.h"
#include "stop_signals.h"

namespace lingbot::cli {
namespace {

// After a CPU bench, before its summary line: a warning when its CPU times count spinning.
void print_spinning_warning(int threads) {
  const std::string w = bench::spinning_cpu_time_warning(threads);
  if (!w.empty()) std::printf("warning: %s\n", w.c_str());
}

// --mem-cap-gb: "auto" or a finite number of GiB (its range is checked with the other options).
CLI::Validator auto_or_gib() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        std::string number = v;
        return v == "auto" || finite_number()(number).empty() ? "" : "must be auto or a number of GiB, got '" + v + "'";
      },
      "");
}

// --seed: CLI11 converts "-3" to an unsigned 2^64 - 3; a seed is written as a non-negative integer.
CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        uint64_t n = 0;
        const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        return ec == std::errc() && p == v.data() + v.size() && !v.empty() ? ""
                                                                            : "must be a non-negative integer, got '" + v + "'";
      },
      "");
}

// bench model --resolution: 224 (224x224), 518 (518x378) or WxH with positive integers.
std::optional<std::pair<int, int>> parse_resolution(const std::string& text) {
  if (text == "224") return std::pair{224, 224};
  if (text == "518") return std::pair{518, 378};
  int w = 0, h = 0;
  const char* end = text.data() + text.size();
  const auto [x, ec] = std::from_chars(text.data(), end, w);
  if (ec != std::errc() || x == end || *x != 'x') return std::nullopt;
  const auto [p, ec2] = std::from_chars(x + 1, end, h);
  if (ec2 != std::errc() || p != end || w <= 0 || h <= 0) return std::nullopt;
  return std::pair{w, h};
}

template <typename F>
void for_each_item(const std::string& list, F f) {
  size_t pos = 0;
  while (true) {
    const size_t comma = list.find(',', pos);
    f(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
}

// Typed as CLI11 parses them (a value that does not convert is its usage error); ranges are checked
// with the options (bench::validate). Words (on | off, ...) are checked by their validators.
struct BenchKvArgs {
  std::string resolution = "518";  // 224 | 518
  int blocks = 24, heads = 16, head_dim = 64, window = 64, scale_frames = 8, keyframe_interval = 1, frames = 400;
  std::string dtype = "bf16";
  std::optional<std::string> backends;  // not given: the device's default list
  int threads = 0, attend_every = 1;
  std::string mem_cap_gb = "auto", attention = "on", calibrate = "on", attention_ab = "off";
  uint64_t seed = 1;
  std::string device = "cpu", csv, plot;
  RenamedOptions renamed;  // --window, --dtype, --backends (old spellings)
};

// A bench stopped by Ctrl-C (or SIGTERM / SIGHUP) ends at the step in progress and prints what it
// measured (table, CSV, plot), without the summary line, whose figures need the whole run.
constexpr const char* kSecondInterruptLoses = "no table, no CSV";

// What configurations a bench model sweep started, of how many (a bench with one: {0, 0}).
struct ConfigsStarted {
  size_t started = 0, total = 0;
};

// After the measured part is printed: the line saying so, and the exit status of the signal (130 for
// Ctrl-C).
[[noreturn]] void end_interrupted(const StopSignalGuard& stop, int64_t frames_done, int64_t frames, bool csv,
                                  ConfigsStarted configs = {}) {
  std::fflush(stdout);  // the table before the line, in a log of both streams
  const std::string where = configs.total <= 1 ? ""
                            : configs.started == 0
                                ? " (before the first of " + std::to_string(configs.total) + " configurations)"
                                : " of configuration " + std::to_string(configs.started) + " of " +
                                      std::to_string(configs.total);
  std::fprintf(stderr, "interrupted (%s) after %lld of %lld frames%s: %s what was measured; no summary line\n",
               stop_signal_words(stop.signal()), static_cast<long long>(frames_done), static_cast<long long>(frames),
               where.c_str(), csv ? "the table and the CSV hold" : "the table holds");
  throw CLI::RuntimeError(exit_code_of_signal(stop.signal()));
}

// --plot: written, or (a run stopped before a point of it was measured) said not to be.
template <class Write>
void write_plot_unless_empty(const std::string& path, bool has_points, Write write) {
  if (!has_points) {
    std::printf("plot: %s not written (nothing measured to plot)\n", path.c_str());
    return;
  }
  write();
  std::printf("plot: %s\n", path.c_str());
}

// Backends when --kv-backends is not given: all three on the CPU; CUDA has only the paged cache.
std::string default_backends(bench::BenchDeviceKind device) {
  return device == bench::BenchDeviceKind::Cuda ? "paged" : "paged,dense,dense-full";
}

// Parses and validates the options; opens the device into `device`.
bench::KvBenchOptions to_options(const BenchKvArgs& a, std::unique_ptr<bench::BenchDevice>& device) {
  bench::KvBenchOptions o;
  o.device = bench::parse_bench_device(a.device);
  o.resolution = std::stoi(a.resolution);  // 224 | 518 (validator)
  o.blocks = a.blocks;
  o.heads = a.heads;
  o.head_dim = a.head_dim;
  o.window = a.window;
  o.scale_frames = a.scale_frames;
  o.dtype = parse_choice("--kv-dtype", [&] { return parse_dtype(a.dtype); });  // the old spelling has no validator
  o.keyframe_interval = a.keyframe_interval;
  o.frames = a.frames;
  o.backends.clear();
  const std::string backends = a.backends.value_or(default_backends(o.device));
  if (backends.empty()) throw CLI::ValidationError("--kv-backends needs at least one of paged, dense, dense-full");
  for_each_item(backends, [&](const std::string& item) {
    o.backends.push_back(parse_choice("--kv-backends", [&] { return parse_kv_backend(item); }));
  });
  o.threads = resolve_threads(a.threads);
  const bool auto_cap = a.mem_cap_gb == "auto";
  o.mem_cap_gb = auto_cap ? 0.0 : std::stod(a.mem_cap_gb);  // a finite number (validator)
  o.attention = a.attention == "on";
  o.calibrate = a.calibrate == "on";
  o.attention_ab = a.attention_ab == "on";
  o.attend_every = a.attend_every;
  o.seed = a.seed;
  bench::validate(o);
  // The device is opened last, so bad options are reported first and a missing GPU is one error line
  // before any work.
  device = bench::make_bench_device(o.device, o.threads);
  if (auto_cap) {
    // The backends run side by side: together they may take 60% of the device's memory (RAM or GPU
    // memory). One budget for all rather than an equal share each: the paged pool is reserved whole at
    // the start (6.7 GiB by default) while dense and dense-full grow by doubling, so on a 16-24 GiB
    // machine equal shares stopped paged at frame 1 and measured nothing.
    o.mem_budget_gb = std::floor(device->memory_bytes() * 0.6 / 1073741824.0 * 10.0) / 10.0;
  }
  return o;
}

void run_bench_kv(const BenchKvArgs& args) {
  args.renamed.resolve();
  std::unique_ptr<bench::BenchDevice> device;
  const bench::KvBenchOptions o = to_options(args, device);
  // Fail on unusable outputs before a long run, not after it.
  bench::check_bench_outputs(args.csv, args.plot);
  std::string names;
  for (auto b : o.backends) names += std::string(names.empty() ? "" : ",") + kv_backend_name(b);
  std::printf("device: %s %s\n", bench::bench_device_name(o.device), device->description().c_str());
  char cap[96] = "none per backend";  // --mem-cap-gb 0: no cap
  if (o.mem_budget_gb > 0)
    std::snprintf(cap, sizeof cap, o.backends.size() > 1 ? "%g GiB for all backends together" : "%g GiB",
                  o.mem_budget_gb);
  else if (o.mem_cap_gb > 0) std::snprintf(cap, sizeof cap, "%g GiB per backend", o.mem_cap_gb);
  std::printf(
      "bench kv: resolution %d (%d tokens/frame = %d patches + %d specials), %d blocks x %d heads x %d head_dim, "
      "K/V %s, KV window %d, scale frames %d, keyframe interval %d, %d frames, KV backends %s, %d threads, "
      "attention %s%s, memory cap %s, seed %llu\n",
      o.resolution, bench::patches_per_frame(o.resolution) + bench::kSpecialTokens, bench::patches_per_frame(o.resolution),
      bench::kSpecialTokens, o.blocks, o.heads, o.head_dim, std::string(dtype_name(o.dtype)).c_str(), o.window,
      o.scale_frames, o.keyframe_interval, o.frames, names.c_str(), o.threads, o.attention ? "on" : "off",
      o.attention && o.attend_every > 1 ? (" (sampled every " + std::to_string(o.attend_every) + " frames)").c_str() : "",
      cap, static_cast<unsigned long long>(o.seed));
  if (o.device == bench::BenchDeviceKind::Cpu)
    std::printf("cpu attention compute for %s K/V: %s%s\n", std::string(dtype_name(o.dtype)).c_str(),
                kernels::attention_compute_name(kernels::resolved_attention_compute(kernels::AttentionCompute::Auto, o.dtype)),
                !kernels::native_bf16_attention() ? " (CPU lacks AVX512_BF16)"
                : kernels::amx_bf16_attention() ? " (CPU has AVX512_BF16 and AMX: AMX tiles where head_dim % 32 == 0)"
                                                : " (CPU has AVX512_BF16, no AMX)");
  std::fflush(stdout);
  bench::ProgressReporter progress(::isatty(STDERR_FILENO) == 1);
  const StopSignalGuard stop(kSecondInterruptLoses);
  bench::KvBenchOptions run_options = o;
  run_options.stop = stop.flag();
  const bench::KvBenchResult r = bench::run_kv_bench(run_options, *device, &progress);
  progress.finish();
  bench::print_table(stdout, r);
  // The summary's figures: the better of the runs before and after the stream (a busy machine only lowers one).
  if (!r.interrupted) bench::print_calibration(stdout, r, "calibration, the better of before and after the stream");
  if (!args.csv.empty()) {
    bench::write_csv(args.csv, r);
    std::printf("csv: %s (%zu rows)\n", args.csv.c_str(), r.rows.size());
  }
  // The latency panel needs a single-frame step: an early Ctrl-C leaves only the scale phase's.
  const bool plottable = std::any_of(r.rows.begin(), r.rows.end(), [](const bench::FrameRow& row) {
    return row.mode != FrameMode::ScalePhase;
  });
  if (!args.plot.empty()) write_plot_unless_empty(args.plot, plottable, [&] { bench::write_plot(args.plot, r); });
  if (r.interrupted) end_interrupted(stop, r.rows.empty() ? 0 : r.rows.back().frame, o.frames, !args.csv.empty());
  print_spinning_warning(o.device == bench::BenchDeviceKind::Cpu ? o.threads : 1);
  std::printf("%s\n", bench::summary_line(r).c_str());
  std::fflush(stdout);
  LINGBOT_CHECK(r.stops.size() < o.backends.size(), "bench kv: every backend stopped (",
                r.stops.empty() ? "" : r.stops.front().reason, "): nothing was measured");
}

struct BenchSoakArgs {
  std::string model;
  bool demo = false;
  std::string kv_backend = "paged", kv_dtype = "f32", csv;
  bench::SoakOptions o;
  RenamedOptions renamed;  // --num-scale-frames, --attention (old spellings)
  // --keyframe-interval (default 1: every frame stored), --flow-threshold, --max-non-keyframe-gap
  ModeArgs modes = [] {
    ModeArgs m;
    m.keyframe_interval = "1";
    return m;
  }();
};

// Progress: one line every 10% of the frames, on stderr as the other benches' (stdout keeps the
// report and the summary line).
class SoakProgress final : public bench::SoakObserver {
 public:
  void on_frame(const bench::SoakRow& row, int64_t total) override {
    if (row.frame % std::max<int64_t>(1, total / 10) != 0 && row.frame != total) return;
    std::fprintf(stderr, "frame %lld/%lld  push %.3f ms  RSS %.1f MiB  KV %.2f MiB  specials dropped %lld\n",
                 static_cast<long long>(row.frame), static_cast<long long>(total), row.push_ms,
                 static_cast<double>(row.rss_bytes) / 1048576.0, static_cast<double>(row.cache.bytes_reserved) / 1048576.0,
                 static_cast<long long>(row.cache.special_frames_dropped));
  }
};

void run_bench_soak(BenchSoakArgs a) {
  a.renamed.resolve();
  usage_check(a.demo != !a.model.empty(), a.demo ? "give either --model or --demo, not both"
                                                  : "no model: give --model PATH (e.g. testdata/tiny/model.pt) or --demo");
  a.o.kv_backend = parse_choice("--kv-backend", [&] { return parse_kv_backend(a.kv_backend); });
  a.o.kv_dtype = parse_choice("--kv-dtype", [&] { return parse_dtype(a.kv_dtype); });
  check_mode_args(a.modes, a.o.scale_frames);
  const ModeChoice keyframes = choose_mode(a.modes, a.o.frames);
  a.o.keyframe_interval = keyframes.keyframe_interval;
  a.o.keyframe_policy = keyframes.policy;
  a.o.threads = resolve_threads(a.o.threads);  // --threads 0 is every core, as in run
  bench::validate(a.o);
  bench::check_bench_outputs(a.csv, "");
  const std::shared_ptr<const Model> model = a.demo ? make_demo_model() : Model::load(a.model);
  std::printf("bench soak: %s, %lld frames, max special frames %lld%s, keyframe policy %s, %d scale frames, "
              "KV window %d, KV backend %s, K/V %s, %d threads, reference frame %lld, timing window %lld\n",
              a.demo ? "built-in demo model" : a.model.c_str(), static_cast<long long>(a.o.frames),
              static_cast<long long>(a.o.max_special_frames), a.o.max_special_frames == 0 ? " (unbounded)" : "",
              bench::keyframe_rule(a.o).c_str(), a.o.scale_frames, a.o.kv_window, a.kv_backend.c_str(), a.kv_dtype.c_str(),
              a.o.threads, static_cast<long long>(a.o.reference_frame), static_cast<long long>(a.o.timing_window));
  std::fflush(stdout);
  SoakProgress progress;
  const StopSignalGuard stop(kSecondInterruptLoses);
  a.o.stop = stop.flag();
  const bench::SoakResult r = bench::run_soak(model, a.o, &progress);
  bench::print_soak_report(stdout, r);
  if (!a.csv.empty()) {
    bench::write_soak_csv(a.csv, r);
    std::printf("csv: %s (%zu rows)\n", a.csv.c_str(), r.rows.size());
  }
  if (r.interrupted) end_interrupted(stop, static_cast<int64_t>(r.rows.size()), a.o.frames, !a.csv.empty());
  print_spinning_warning(a.o.threads);
  std::printf("%s\n", bench::soak_summary_line(r).c_str());
  std::fflush(stdout);
  LINGBOT_CHECK(r.pass, "bench soak did not pass: ", r.verdict);
}

struct BenchModelArgs {  // typed as BenchKvArgs
  std::string model = "full", resolution = "518";  // 224 | 518 | WxH (validator)
  int frames = 10, scale_frames = 8, window = 64, threads = 0;
  std::string weights_dtype = "f32,bf16", kv_dtype = "f32", calibrate = "on", writers = "on";
  uint64_t seed = 1;
  std::string csv, plot, load_test, device = "cpu";
  RenamedOptions renamed;  // --window (old spelling)
};

void run_bench_model(const BenchModelArgs& a) {
  a.renamed.resolve();
  bench::ModelBenchOptions o;
  o.model = a.model;
  std::tie(o.width, o.height) = *parse_resolution(a.resolution);  // checked by the validator
  o.frames = a.frames;
  o.scale_frames = a.scale_frames;
  o.window = a.window;
  o.threads = resolve_threads(a.threads);
  o.seed = a.seed;
  o.calibrate = a.calibrate == "on";
  o.writers = a.writers == "on";
  o.load_test_file = a.load_test;
  o.device = cli::resolve_device_option(a.device);
  std::vector<std::string> notices;
  o.weights_dtypes.clear();
  for_each_item(a.weights_dtype, [&](const std::string& item) {
    const WeightsDtypeForDevice c =
        parse_choice("--weights-dtype", [&] { return parse_weights_dtype(item, o.device); });
    if (!c.notice.empty()) notices.push_back(c.notice);
    if (!c.rule.empty()) notices.push_back("weights dtype " + c.rule);
    o.weights_dtypes.push_back(c.dtype);
  });
  o.kv_dtypes.clear();
  for_each_item(a.kv_dtype, [&](const std::string& item) {
    o.kv_dtypes.push_back(parse_choice("--kv-dtype", [&] { return parse_dtype(item); }));
  });
  bench::validate(o);
  bench::check_bench_outputs(a.csv, a.plot);
  for (const auto& n : notices) std::printf("%s\n", n.c_str());
  std::printf("bench model: %s model, %dx%d, %d frames (%d scale frames), KV window %d, %d threads, seed %llu\n",
              o.model.c_str(), o.width, o.height, o.frames, o.scale_frames, o.window, o.threads,
              static_cast<unsigned long long>(o.seed));
  std::printf("blas: %s\n", kernels::blas_description().c_str());
  std::fflush(stdout);
  const StopSignalGuard stop(kSecondInterruptLoses);
  o.stop = stop.flag();
  const bench::ModelBenchResult r = bench::run_model_bench(o, stderr);
  bench::print_table(stdout, r);
  if (!a.csv.empty()) {
    bench::write_csv(a.csv, r);
    std::printf("csv: %s (%zu rows)\n", a.csv.c_str(), r.rows.size());
  }
  if (!a.plot.empty()) write_plot_unless_empty(a.plot, !r.rows.empty(), [&] { bench::write_plot(a.plot, r); });
  if (r.interrupted) {
    // Frames of the last configuration started (a stop between configurations: all of its frames).
    const int64_t done = std::count_if(r.rows.begin(), r.rows.end(), [&](const bench::ModelBenchRow& row) {
      return row.config + 1 == static_cast<int>(r.configs.size());
    });
    end_interrupted(stop, done, o.frames, !a.csv.empty(),
                    {r.configs.size(), o.weights_dtypes.size() * o.kv_dtypes.size()});
  }
  print_spinning_warning(o.device == Device::Cpu ? o.threads : 1);
  std::printf("%s\n", bench::summary_line(r).c_str());
  std::fflush(stdout);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (KV cache: bench kv; whole model: bench model; long-stream soak: bench soak; "
                                            "GPU acceptance measurements: bench gpu)");
  bench->require_subcommand(1);
  auto* kv = bench->add_subcommand(
      "kv", "Streaming attention simulation at the model's shapes with random Q/K/V: KV memory, latency, "
            "machine calibration; prints a table and a final 'summary:' line");
  auto args = std::make_shared<BenchKvArgs>();
  kv->add_option("--resolution", args->resolution, "224 (256+6 tokens/frame) or 518 (999+6)")
      ->capture_default_str()
      ->check(one_of({"224", "518"}, "224 or 518"));
  kv->add_option("--blocks", args->blocks, "global attention blocks")->capture_default_str();
  kv->add_option("--heads", args->heads, "attention heads")->capture_default_str();
  kv->add_option("--head-dim", args->head_dim, "head dimension")->capture_default_str();
  args->renamed.add(kv, kv->add_option("--kv-window", args->window, "sliding window of the KV cache (frames)")
                            ->capture_default_str(), "--kv-window", "--window", args->window);
  kv->add_option("--scale-frames", args->scale_frames, "pinned scale frames")->capture_default_str();
  args->renamed.add(kv, kv->add_option("--kv-dtype", args->dtype, "KV storage dtype: f32, f16 or bf16")->capture_default_str(),
                    "--kv-dtype", "--dtype", args->dtype);
  kv->add_option("--keyframe-interval", args->keyframe_interval, "store every N-th frame after the scale phase")
      ->capture_default_str();
  kv->add_option("--frames", args->frames, "frames to stream")->capture_default_str();
  args->renamed.add(kv, kv->add_option("--kv-backends", args->backends,
                                       "comma-separated KV backends: paged, dense, dense-full (default: all three; "
                                       "cuda: paged, the only CUDA cache)"),
                    "--kv-backends", "--backends", args->backends);
  kv->add_option("--device", args->device,
                 "cpu | cuda | auto (as run --device; cuda needs a -DLINGBOT_CUDA=ON build and a GPU)")
      ->check(one_of({"cpu", "cuda", "auto"}, "cpu, cuda or auto"))
      ->capture_default_str();
  kv->add_option("--threads", args->threads, "threads (0: all cores)")->capture_default_str();
  kv->add_option("--mem-cap-gb", args->mem_cap_gb, "stop a backend before its KV cache exceeds this many GiB (0: no cap; auto: the backends together may "
                 "take 60% of RAM, or of GPU memory with --device cuda: one whose allocation would pass that "
                 "stops and frees its memory)")
      ->check(auto_or_gib())
      ->capture_default_str();
  kv->add_option("--attention", args->attention, "on: attend every block; off: cache bookkeeping + memory only")
      ->check(one_of({"on", "off"}, "on or off"))
      ->capture_default_str();
  kv->add_option("--attend-every", args->attend_every,
                 "with attention on, attend only the 3 frames up to each multiple of N, 100, 320 and the last "
                 "(others bookkeeping only)")
      ->capture_default_str();
  kv->add_option("--seed", args->seed, "random Q/K/V seed")->check(unsigned_integer())->capture_default_str();
  kv->add_option("--attention-ab", args->attention_ab,
                 "on|off: also time the CPU attention kernel alone with the default compute path (native bf16 "
                 "for bf16 K/V on AVX512_BF16) and with the f32 path, side by side (summary ab_* keys)")
      ->check(one_of({"on", "off"}, "on or off"))
      ->capture_default_str();
  kv->add_option("--calibrate", args->calibrate, "on|off: sgemm and memory-bandwidth calibration (cuda: cuBLAS GEMM and device copy)")
      ->check(one_of({"on", "off"}, "on or off"))
      ->capture_default_str();
  kv->add_option("--csv", args->csv, "write every row to this CSV file");
  kv->add_option("--plot", args->plot, "write a two-panel PNG (needs gnuplot)");
  kv->callback([args] { run_bench_kv(*args); });

  auto* model = bench->add_subcommand(
      "model", "End-to-end frames through a random-weight model built in memory (no checkpoint): per-phase CPU time (device time with --device cuda), "
               "peak RSS, same-run GEMM calibration; --weights-dtype / --kv-dtype sweeps");
  auto margs = std::make_shared<BenchModelArgs>();
  model->add_option("--model-size", margs->model, "full (~1.16 G parameters, as released) | demo (tiny)")
      ->check(one_of({"full", "demo"}, "full or demo"))
      ->capture_default_str();
  model->add_option("--resolution", margs->resolution,
                    "224 (224x224), 518 (518x378) or WxH (multiples of the patch size 14, at most 4096 a side)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return parse_resolution(v) ? "" : "must be 224, 518 or WxH (positive integers), got '" + v + "'";
          },
          ""))
      ->capture_default_str();
  model->add_option("--frames", margs->frames, "frames pushed per configuration (> scale frames)")->capture_default_str();
  model->add_option("--scale-frames", margs->scale_frames, "scale frames")->capture_default_str();
  margs->renamed.add(model, model->add_option("--kv-window", margs->window, "KV cache sliding window (frames)")
                                ->capture_default_str(), "--kv-window", "--window", margs->window);
  model->add_option("--weights-dtype", margs->weights_dtype, "comma-separated sweep of auto | f32 | f16 | bf16")
      ->capture_default_str();
  model->add_option("--kv-dtype", margs->kv_dtype, "comma-separated sweep of f32 | f16 | bf16")->capture_default_str();
  model->add_option("--threads", margs->threads, "threads (0: all cores)")->capture_default_str();
  model->add_option("--device", margs->device, "where the model runs: cpu | cuda | auto (as run --device)")
      ->check(one_of({"cpu", "cuda", "auto"}, "cpu, cuda or auto"))
      ->capture_default_str();
  model->add_option("--seed", margs->seed, "random weights / frames seed")->check(unsigned_integer())->capture_default_str();
  model->add_option("--calibrate", margs->calibrate, "on|off: same-run GEMM calibration")
      ->check(one_of({"on", "off"}, "on or off"))
      ->capture_default_str();
  model->add_option("--writers", margs->writers, "on|off: also time the output writers")
      ->check(one_of({"on", "off"}, "on or off"))
      ->capture_default_str();
  model->add_option("--load-test", margs->load_test,
                    "write the f32 random weights to this safetensors FILE first and time Model::load of it "
                    "(f32 memory-mapped, first (the file just written: in the page cache) then again; each reduced weights dtype read + converted)");
  model->add_option("--csv", margs->csv, "write every push as a CSV row");
  model->add_option("--plot", margs->plot, "write a two-panel PNG (needs gnuplot)");
  model->callback([margs] { run_bench_model(*margs); });
  auto* soak = bench->add_subcommand(
      "soak", "A long stream through a real session (all heads): peak RSS and per-frame time at a reference "
              "frame vs the last, KV and camera-head growth vs the exact formula; table, CSV, 'summary:' line");
  auto sa = std::make_shared<BenchSoakArgs>();
  soak->add_option("--model", sa->model, "checkpoint (e.g. testdata/tiny/model.pt)");
  soak->add_flag("--demo", sa->demo, "use the built-in random-weight demo model");
  soak->add_option("--frames", sa->o.frames, "frames to stream")->capture_default_str();
  soak->add_option("--max-special-frames", sa->o.max_special_frames,
                   "special-stream bound (SessionOptions::max_special_frames); 0 = unbounded, as upstream")
      ->capture_default_str();
  soak->add_option("--keyframe-interval", sa->modes.keyframe_interval,
                   "N: store every N-th frame after the scale frames; flow: flow keyframes (as run); auto (or 0): as "
                   "run for --frames")
      ->check(keyframe_interval_validator())
      ->capture_default_str();
  add_flow_keyframe_options(soak, &sa->modes);
  sa->renamed.add(soak, soak->add_option("--scale-frames", sa->o.scale_frames, "scale frames (pinned)")->capture_default_str(),
                  "--scale-frames", "--num-scale-frames", sa->o.scale_frames);
  soak->add_option("--kv-window", sa->o.kv_window, "KV window, in stored frames")->capture_default_str();
  sa->renamed.add(soak, soak->add_option("--kv-backend", sa->kv_backend, "paged | dense | dense-full")->capture_default_str(),
                  "--kv-backend", "--attention", sa->kv_backend);
  soak->add_option("--kv-dtype", sa->kv_dtype, "f32 | f16 | bf16")->capture_default_str();
  soak->add_option("--threads", sa->o.threads, "OpenMP threads (0 = all cores)")->capture_default_str();
  soak->add_option("--reference-frame", sa->o.reference_frame,
                   "frame compared with the last one; default (0): min(1000, --frames / 2), with --max-special-frames "
                   "at least the frame the bounded caches fill by (docs/performance.md \"Soak\")");
  soak->add_option("--timing-window", sa->o.timing_window,
                   "frames per per-frame-time median; default (0): min(200, the frames from that fill frame to the "
                   "reference frame)");
  soak->add_option("--csv", sa->csv, "write one row per frame to this CSV file");
  soak->callback([sa] { run_bench_soak(*sa); });

  auto* gpu = bench->add_subcommand(
      "gpu", "GPU acceptance measurements (scripts/gpu_check.sh; -DLINGBOT_CUDA=ON build and a GPU): paged vs "
             "contiguous attention at the streaming shape, device memory over a long stream; tables + RESULT lines");
  auto ga = std::make_shared<std::string>("all");
  auto gargs = std::make_shared<bench::BenchGpuArgs>();
  gpu->add_option("measurement", *ga, "attention | memory | all")
      ->capture_default_str()
      ->check(one_of({"attention", "memory", "all"}, "attention, memory or all"));
  gpu->add_option("--frames", gargs->frames, "memory: keyframes streamed (> 8)")->capture_default_str();
  gpu->callback([ga, gargs] {
    gargs->what = bench::parse_gpu_bench(*ga);
    bench::run_bench_gpu(*gargs);
  });
}

}  // namespace lingbot::cli
