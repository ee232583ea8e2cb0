#include "bench_model.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <tuple>

#include "bench_report.h"
#include "core/error.h"
#include "core/memory_stats.h"
#include "core/printf_string.h"
#include "io/file_util.h"
#include "io/safetensors.h"
#include "io/writers.h"
#include "kernels/cpu/ops.h"
#include "lingbot/preprocess.h"
#include "lingbot/session.h"
#include "pipeline/session_backend.h"
#include "pipeline/demo_model.h"

namespace lingbot::bench {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return f ? a + "/" + b + "/" + c : "na";
}

ModelConfig bench_config(const ModelBenchOptions& o) {
  return o.model == "demo" ? demo_model_config() : ModelConfig::release();
}

// --load-test's loads in order: f32 twice (the second from a warm page cache), then each reduced dtype.
const char* load_label(size_t i) { return i == 0 ? " (first)" : i == 1 ? " (again: page cache warm)" : ""; }

std::string fixed_str(double v, int prec = 3) { return printf_string("%.*f", prec, v); }

std::string key(const ModelBenchConfig& c) {
  std::string k = "w";  // appended piecewise: GCC 12 warns (-Wrestrict, a false positive) on "w" + string
  k += dtype_name(c.weights);
  k += "_kv";
  k += dtype_name(c.kv);
  return k;
}

}  // namespace

void validate(const ModelBenchOptions& o) {
  LINGBOT_CHECK(o.model == "full" || o.model == "demo", "--model-size must be full or demo, got '", o.model, "'");
  const int p = static_cast<int>(bench_config(o).encoder.patch_size);
  LINGBOT_CHECK(o.width >= p && o.height >= p && o.width % p == 0 && o.height % p == 0, "--resolution ", o.width, "x",
                o.height, " must be multiples of the patch size ", p);
  LINGBOT_CHECK(o.scale_frames >= 1, "--scale-frames must be >= 1, got ", o.scale_frames);
  LINGBOT_CHECK(o.frames > o.scale_frames, "--frames must exceed --scale-frames (", o.scale_frames,
                ") so that single-frame steps are measured, got ", o.frames);
  LINGBOT_CHECK(o.window >= 1, "--kv-window must be >= 1, got ", o.window);
  LINGBOT_CHECK(o.threads >= 1, "--threads must be >= 0 (0 = all cores), got ", o.threads);
  // The session's bounds, with the flags' names and before the model is made (it takes a minute and GBs).
  for (const auto& [option, value, bound] : {std::tuple{"--scale-frames", o.scale_frames, kMaxScaleFrames},
                                             std::tuple{"--kv-window", o.window, kMaxKvWindow},
                                             std::tuple{"--threads", o.threads, kMaxThreads}})
    LINGBOT_CHECK(value <= bound, option, " must be at most ", bound, ", got ", value);
  LINGBOT_CHECK(!o.weights_dtypes.empty() && !o.kv_dtypes.empty(), "--weights-dtype and --kv-dtype need a value");
  LINGBOT_CHECK(o.width <= kMaxImageSize && o.height <= kMaxImageSize, "--resolution ", o.width, "x", o.height,
                " must be at most ", kMaxImageSize, " a side");
  for (const auto& [flag, list] : {std::pair{"--weights-dtype", &o.weights_dtypes}, std::pair{"--kv-dtype", &o.kv_dtypes}})
    for (size_t i = 0; i < list->size(); ++i)
      for (size_t j = i + 1; j < list->size(); ++j)
        LINGBOT_CHECK((*list)[i] != (*list)[j], flag, " lists '", dtype_name((*list)[i]), "' twice");
}

ModelBenchResult run_model_bench(const ModelBenchOptions& o, std::FILE* progress) {
  validate(o);
  ModelBenchResult r;
  r.options = o;
  r.load_average_start = load_average();
  const auto t_start = std::chrono::steady_clock::now();
  const ModelConfig cfg = bench_config(o);

  if (o.calibrate) {
    // The model's commonest big GEMM: fc1 of a block on one 518 frame (1005 tokens x C -> hidden).
    const int64_t rows = std::min<int64_t>(1005, (o.width / cfg.encoder.patch_size) * (o.height / cfg.encoder.patch_size) + 6);
    const int64_t in = cfg.aggregator.embed_dim, out = cfg.aggregator.mlp_hidden;
    r.calibration.push_back(bench::calibrate_linear(DType::F32, rows, in, out, o.threads, 3));
    for (DType w : o.weights_dtypes)
      if (w != DType::F32) r.calibration.push_back(bench::calibrate_linear(w, rows, in, out, o.threads, 3));
  }

  if (!o.load_test_file.empty()) {
    {
      if (progress) std::fprintf(progress, "bench model: writing f32 random weights to %s\n", o.load_test_file.c_str());
      const io::TensorMap w = demo_weights(cfg, o.seed);
      io::write_safetensors(o.load_test_file, w);
    }
    std::vector<DType> order{DType::F32, DType::F32};
    for (DType w : o.weights_dtypes)
      if (w != DType::F32) order.push_back(w);
    for (DType w : order) {
      ModelLoadOptions mo;
      mo.weights_dtype = w;
      const double c0 = PhaseClock::cpu_now();
      const auto m = Model::load(o.load_test_file, {}, mo);
      LoadTiming t;
      t.weights = w;
      t.cpu_seconds = PhaseClock::cpu_now() - c0;
      t.seconds = m->load_stats().seconds;
      t.mapped = m->load_stats().mapped;
      t.borrowed_bytes = m->load_stats().borrowed_bytes;
      t.owned_bytes = m->load_stats().owned_bytes;
      r.loads.push_back(t);
      if (progress)
        std::fprintf(progress, "bench model: Model::load %s weights%s: %.2f s (%.2f s CPU), %s\n", dtype_name(w).data(),
                     load_label(r.loads.size() - 1), t.seconds, t.cpu_seconds, t.mapped ? "memory-mapped" : "read + converted");
    }
  }

  // Frames: seeded uniform noise in [0, 1], the same for every configuration.
  const size_t frame_elems = static_cast<size_t>(3) * o.width * o.height;
  auto frame = [&](int i) {
    Tensor t({3, o.height, o.width});
    std::mt19937_64 rng(o.seed * 1000003u + static_cast<uint64_t>(i));
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    float* d = t.f32();
    for (size_t k = 0; k < frame_elems; ++k) d[k] = u(rng);
    return t;
  };

  const std::filesystem::path out_dir =
      std::filesystem::temp_directory_path() / ("lingbot-bench-model-" + std::to_string(::getpid()));
  wait_for_quiet_process();  // CPU times from here on are ours only (calibration.h)
  const auto stop_requested = [&] { return o.stop && o.stop->load(std::memory_order_acquire); };
  for (DType wd : o.weights_dtypes) {
    for (DType kv : o.kv_dtypes) {
      if (stop_requested()) r.interrupted = true;
      if (r.interrupted) break;
      ModelBenchConfig c;
      c.weights = wd;
      c.kv = kv;
      c.gemm = gemm_path_description(o.device, wd);
      const int ci = static_cast<int>(r.configs.size());
      reset_peak_rss();  // each configuration reports its own peak
      const auto tb = std::chrono::steady_clock::now();
      ModelLoadOptions mo;
      mo.weights_dtype = wd;
      std::shared_ptr<const Model> model = Model::from_weights(demo_weights(cfg, o.seed, wd), cfg, mo);
      c.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count();
      c.parameters = cfg.parameter_count();
      if (progress)
        std::fprintf(progress, "bench model: weights %s, KV %s: built %.2f G parameters in %.1f s (%s)\n",
                     dtype_name(wd).data(), dtype_name(kv).data(), static_cast<double>(c.parameters) / 1e9,
                     c.build_seconds, c.gemm.c_str());
      SessionOptions so;
      so.device = o.device;
      so.kv_dtype = kv;
      so.scale_frames = o.scale_frames;
      so.kv_window = o.window;
      so.camera_iterations = o.camera_iterations;
      so.threads = o.threads;
      so.keep_features = false;
      so.stop = o.stop;
      Session session(model, so);
      std::filesystem::remove_all(out_dir);
      std::filesystem::create_directories(out_dir / "depth");
      {
        io::PlyWriter ply(out_dir / "points.ply");
        SessionPhaseTimes prev{};
        double frame_wall = 0, frame_cpu = 0;
        int frame_n = 0;
        for (int i = 0; i < o.frames; ++i) {
          const Tensor img = frame(i);
          const auto w0 = std::chrono::steady_clock::now();
          const double c0 = PhaseClock::cpu_now();
          std::vector<FrameResult> results;
          try {
            if (stop_requested()) throw Stopped("stopped");
            results = session.push_frame(img);
            if (i + 1 == o.frames) {
              auto tail = session.finish();
              for (auto& t : tail) results.push_back(std::move(t));
            }
          } catch (const Stopped&) {
            r.interrupted = true;  // this configuration keeps the pushes done
            break;
          }
          ModelBenchRow row;
          row.config = ci;
          row.push = i + 1;
          row.results = static_cast<int>(results.size());
          row.wall_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
          row.cpu_ms = 1e3 * (PhaseClock::cpu_now() - c0);
          const SessionStats st = session.stats();
          const SessionPhaseTimes& ph = st.phases;
          // A device session's phases: the device's time for their work (the host only queues it).
          const bool on_device = st.device_peak_bytes.has_value();
          const auto ms = [&](const PhaseTime& now, const PhaseTime& before) {
            return 1e3 * (on_device ? now.device_s - before.device_s : now.cpu_s - before.cpu_s);
          };
          row.encoder_ms = ms(ph.encoder, prev.encoder);
          row.frame_blocks_ms = ms(ph.frame_blocks, prev.frame_blocks);
          row.global_blocks_ms = ms(ph.global_blocks, prev.global_blocks);
          row.camera_ms = ms(ph.camera_head, prev.camera_head);
          row.dpt_ms = ms(ph.dpt_head, prev.dpt_head);
          prev = ph;
          if (o.writers) {
            // The frames' pixels (the points' colours) are made again outside the writers' time.
            std::vector<Tensor> sources;
            for (const FrameResult& fr : results) sources.push_back(frame(static_cast<int>(fr.frame_index)));
            PhaseTime wt;
            {
              const PhaseClock clock(wt);
              for (size_t k = 0; k < results.size(); ++k) {
                const FrameResult& fr = results[k];
                const size_t hw = static_cast<size_t>(o.width) * o.height;
                io::write_depth_frame(out_dir / "depth", fr.frame_index, o.width, o.height,
                                      std::span<const float>(fr.depth.f32(), hw),
                                      std::span<const float>(fr.depth_conf.f32(), hw));
                const Tensor& src = sources[k];
                const io::PointBatch batch = io::select_points(std::span<const float>(fr.world_points.f32(), 3 * hw),
                                                               std::span<const float>(src.f32(), 3 * hw),
                                                               std::span<const float>(fr.depth_conf.f32(), hw), 1.5f, 10);
                ply.append_points(batch.xyz, batch.rgb);
                ply.flush();
              }
            }
            row.writers_ms = 1e3 * wt.cpu_s;
          }
          row.rss_bytes = static_cast<int64_t>(current_rss_bytes());
          row.peak_rss_bytes = static_cast<int64_t>(peak_rss_bytes());
          row.device_peak_bytes = session.stats().device_peak_bytes;
          if (i < o.scale_frames) {  // each encodes its frame; the last runs the scale phase's step
            c.scale_phase_cpu_ms += row.cpu_ms;
          } else if (row.results == 1 && i >= o.scale_frames) {
            frame_wall += row.wall_ms;
            frame_cpu += row.cpu_ms;
            const double phase[5] = {row.encoder_ms, row.frame_blocks_ms, row.global_blocks_ms, row.camera_ms, row.dpt_ms};
            for (int k = 0; k < 5; ++k) c.frame_phase_ms[k] += phase[k];
            ++frame_n;
          }
          if (progress)
            std::fprintf(progress, "  push %d/%d: %d result(s), %.0f ms wall, %.0f ms CPU, peak RSS %.2f GiB\n", i + 1,
                         o.frames, row.results, row.wall_ms, row.cpu_ms, static_cast<double>(row.peak_rss_bytes) / kGiB);
          r.rows.push_back(row);
        }
        for (double& p : c.frame_phase_ms) p = frame_n ? p / frame_n : 0;
        c.phases_on_device = session.stats().device_peak_bytes.has_value();
        c.single_frame_pushes = frame_n;
        c.frame_wall_ms = frame_n ? frame_wall / frame_n : 0;
        c.frame_cpu_ms = frame_n ? frame_cpu / frame_n : 0;
      }
      c.peak_rss_bytes = static_cast<int64_t>(peak_rss_bytes());
      c.device_peak_bytes = session.stats().device_peak_bytes;
      r.configs.push_back(c);
    }
  }
  std::filesystem::remove_all(out_dir);
  r.load_average_end = load_average();
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return r;
}

std::vector<std::pair<std::string, std::string>> summarize(const ModelBenchResult& r) {
  const ModelBenchOptions& o = r.options;
  std::vector<std::pair<std::string, std::string>> s;
  s.emplace_back("model", o.model);
  s.emplace_back("size", std::to_string(o.width) + "x" + std::to_string(o.height));
  s.emplace_back("frames", std::to_string(o.frames));
  s.emplace_back("threads", std::to_string(o.threads));
  s.emplace_back("device", std::string(device_name(o.device)));
  s.emplace_back("load_avg_start", r.load_average_start);
  s.emplace_back("load_avg_end", r.load_average_end);
  for (const auto& cal : r.calibration) {
    const std::string k = cal.weights == DType::F32 ? "sgemm" : std::string(dtype_name(cal.weights)) + "_gemm";
    s.emplace_back(k + "_gflops", fixed_str(cal.gflops, 1));
    s.emplace_back(k + "_gflops_per_cpu_s", fixed_str(cal.gflops_per_cpu_s, 1));
  }
  if (r.calibration.size() > 1 && r.calibration[0].gflops_per_cpu_s > 0)
    for (size_t i = 1; i < r.calibration.size(); ++i)
      s.emplace_back(std::string(dtype_name(r.calibration[i].weights)) + "_gemm_vs_sgemm_cpu",
                     fixed_str(r.calibration[i].gflops_per_cpu_s / r.calibration[0].gflops_per_cpu_s, 2));
  for (size_t i = 0; i < r.loads.size(); ++i) {
    const LoadTiming& t = r.loads[i];
    const std::string k = "load_" + std::string(dtype_name(t.weights)) + (t.mapped ? "_mmap" : "_read") +
                          (i == 1 ? "_warm" : (i == 0 ? "_first" : ""));
    s.emplace_back(k + "_s", fixed_str(t.seconds, 2));
  }
  const ModelBenchConfig* base = nullptr;
  for (const auto& c : r.configs) {
    s.emplace_back(key(c) + "_frame_cpu_ms", fixed_str(c.frame_cpu_ms, 0));
    s.emplace_back(key(c) + "_frame_wall_ms", fixed_str(c.frame_wall_ms, 0));
    s.emplace_back(key(c) + "_peak_rss_gib", fixed_str(static_cast<double>(c.peak_rss_bytes) / kGiB, 2));
    if (c.device_peak_bytes) {  // device runs only
      s.emplace_back(key(c) + "_device_peak_bytes", std::to_string(*c.device_peak_bytes));
      s.emplace_back(key(c) + "_device_peak_gib", fixed_str(static_cast<double>(*c.device_peak_bytes) / kGiB, 2));
    }
    if (c.phases_on_device) {  // device ms per phase, means over the single-frame pushes
      static constexpr const char* kPhase[5] = {"encoder", "frame_blocks", "global_blocks", "camera", "dpt"};
      for (size_t k = 0; k < c.frame_phase_ms.size(); ++k)
        s.emplace_back(key(c) + "_device_" + kPhase[k] + "_ms", fixed_str(c.frame_phase_ms[k], 2));
    }
    if (!base && c.weights == DType::F32) base = &c;
  }
  if (base && base->frame_cpu_ms > 0)
    for (const auto& c : r.configs)
      if (&c != base)  // every config against the first with f32 weights (docs/performance.md's ratios)
        s.emplace_back(key(c) + "_vs_" + key(*base) + "_frame_cpu", fixed_str(c.frame_cpu_ms / base->frame_cpu_ms, 2));
  return s;
}

std::string summary_line(const ModelBenchResult& r) {
  std::string line = "summary:";
  for (const auto& [k, v] : summarize(r)) line += " " + k + "=" + v;
  return line;
}

void print_table(std::FILE* f, const ModelBenchResult& r) {
  for (const auto& cal : r.calibration)
    std::fprintf(f, "calibration: %s weights, linear %lldx%lld->%lld: %.1f GFLOP/s wall, %.1f GFLOP per CPU-second (%s)\n",
                 dtype_name(cal.weights).data(), static_cast<long long>(cal.rows), static_cast<long long>(cal.in),
                 static_cast<long long>(cal.out), cal.gflops, cal.gflops_per_cpu_s, cal.path.c_str());
  const bool device_phases = !r.configs.empty() && r.configs.front().phases_on_device;
  std::fprintf(f, "phase columns (encoder .. dpt): %s\n",
               device_phases ? "device ms (CUDA events around each phase's queued work)" : "process CPU ms");
  // The device peak column only where there is a device (the CPU's memory is the peak RSS column).
  std::fprintf(f, "%-14s %5s %7s %9s %9s %8s %8s %8s %7s %7s %7s %9s%s\n", "config", "push", "results", "wall ms", "CPU ms",
               "encoder", "frameblk", "globblk", "camera", "dpt", "writers", "peak GiB", device_phases ? "   dev GiB" : "");
  for (const auto& row : r.rows) {
    const ModelBenchConfig& c = r.configs[static_cast<size_t>(row.config)];
    const std::string dev = row.device_peak_bytes ? fixed_str(static_cast<double>(*row.device_peak_bytes) / kGiB, 2) : "-";
    std::fprintf(f, device_phases ? "%-14s %5d %7d %9.1f %9.0f %8.2f %8.2f %8.2f %7.2f %7.2f %7.0f %9.2f %9s\n"
                                  : "%-14s %5d %7d %9.0f %9.0f %8.0f %8.0f %8.0f %7.0f %7.0f %7.0f %9.2f%s\n",
                 key(c).c_str(), row.push,
                 row.results, row.wall_ms, row.cpu_ms, row.encoder_ms, row.frame_blocks_ms, row.global_blocks_ms,
                 row.camera_ms, row.dpt_ms, row.writers_ms, static_cast<double>(row.peak_rss_bytes) / kGiB,
                 device_phases ? dev.c_str() : "");
  }
  for (size_t i = 0; i < r.loads.size(); ++i) {
    const LoadTiming& t = r.loads[i];
    std::fprintf(f, "load: %s weights%s, %s: %.2f s wall, %.2f s CPU, %.2f GiB borrowed from the mapping, %.2f GiB owned\n",
                 dtype_name(t.weights).data(), load_label(i), t.mapped ? "memory-mapped" : "read + converted", t.seconds, t.cpu_seconds,
                 static_cast<double>(t.borrowed_bytes) / kGiB, static_cast<double>(t.owned_bytes) / kGiB);
  }
  for (const auto& c : r.configs) {
    // A configuration a stop cut short before its first single-frame push has no per-frame figure.
    const bool measured = c.single_frame_pushes > 0;
    std::fprintf(f, "%s: %s ms CPU / %s ms wall per frame after the scale phase, scale phase %.0f ms CPU, peak RSS %.2f GiB, weights built in %.1f s (%s)\n",
                 key(c).c_str(), measured ? fixed_str(c.frame_cpu_ms, 0).c_str() : "na",
                 measured ? fixed_str(c.frame_wall_ms, 0).c_str() : "na", c.scale_phase_cpu_ms,
                 static_cast<double>(c.peak_rss_bytes) / kGiB, c.build_seconds, c.gemm.c_str());
  }
}

void write_csv(const std::string& path, const ModelBenchResult& r) {
  std::ostringstream f;
  f << "config,weights_dtype,kv_dtype,push,results,wall_ms,cpu_ms,encoder_ms,frame_blocks_ms,global_blocks_ms,"
       "camera_ms,dpt_ms,writers_ms,rss_bytes,peak_rss_bytes,device_peak_bytes\n";
  for (const auto& row : r.rows) {
    const ModelBenchConfig& c = r.configs[static_cast<size_t>(row.config)];
    f << key(c) << ',' << dtype_name(c.weights) << ',' << dtype_name(c.kv) << ',' << row.push << ',' << row.results
      << ',' << row.wall_ms << ',' << row.cpu_ms << ',' << row.encoder_ms << ',' << row.frame_blocks_ms << ','
      << row.global_blocks_ms << ',' << row.camera_ms << ',' << row.dpt_ms << ',' << row.writers_ms << ','
      << row.rss_bytes << ',' << row.peak_rss_bytes << ',';
    if (row.device_peak_bytes) f << *row.device_peak_bytes;  // empty on the CPU
    f << '\n';
  }
  io::write_file_atomic(path, f.str(), io::OnLink::WriteThrough);
}

void write_plot(const std::string& path, const ModelBenchResult& r) {
  std::ostringstream gp;
  for (size_t c = 0; c < r.configs.size(); ++c) {
    gp << "$d" << c << " << EOD\n";
    for (const auto& row : r.rows)
      if (row.config == static_cast<int>(c))
        gp << row.push << ' ' << row.cpu_ms << ' ' << row.encoder_ms << ' ' << row.frame_blocks_ms << ' '
           << row.global_blocks_ms << ' ' << row.camera_ms + row.dpt_ms << ' ' << row.writers_ms << ' '
           << static_cast<double>(row.peak_rss_bytes) / kGiB << '\n';
    gp << "EOD\n";
  }
  const ModelBenchOptions& o = r.options;
  gp << "set terminal pngcairo size 1100,900 font 'sans,10' noenhanced\nset output " << gnuplot_output(path) << "\n"
     << "set multiplot layout 2,1 title " << gnuplot_quote("lingbot-map bench model: " + o.model + " model, " +
                                                        std::to_string(o.width) + "x" + std::to_string(o.height) + ", " +
                                                        std::to_string(o.threads) + " thread(s), load " +
                                                        r.load_average_start)
     << "\nset grid\nset key top right\nset xtics 1\nset xlabel 'push (frames pushed)'\nset logscale y\n"
     << "set ylabel 'CPU ms per push (solid: total, dashed: frame+global blocks)'\nplot ";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  for (size_t c = 0; c < r.configs.size(); ++c) {
    const std::string name = key(r.configs[c]);
    if (c) gp << ", ";
    gp << "$d" << c << " using 1:2 with linespoints pt 7 lw 2 lc rgb '" << colors[c % 6] << "' title '" << name
       << "', $d" << c << " using 1:($4+$5) with lines dt 2 lc rgb '" << colors[c % 6] << "' title '" << name
       << " blocks'";
  }
  gp << "\nunset logscale y\nset yrange [0:*]\nset ylabel 'peak RSS GiB'\nplot ";
  for (size_t c = 0; c < r.configs.size(); ++c) {
    if (c) gp << ", ";
    gp << "$d" << c << " using 1:8 with linespoints pt 7 lw 2 lc rgb '" << colors[c % 6] << "' title '"
       << key(r.configs[c]) << "'";
  }
  gp << "\nunset multiplot\nset output\n";
  run_gnuplot(gp.str(), path);
}

}  // namespace lingbot::bench
