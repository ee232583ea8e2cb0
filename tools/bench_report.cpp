#include "bench_report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <fstream>
#include <set>
#include <sstream>

#include "cli_util.h"
#include "core/error.h"
#include "io/file_util.h"

namespace lingbot::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

const char* mode_name(FrameMode m) {
  switch (m) {
    case FrameMode::ScalePhase: return "scale";
    case FrameMode::Keyframe: return "key";
    case FrameMode::NonKeyframe: return "nonkey";
    case FrameMode::Deferred: return "deferred";
  }
  return "?";
}

double gflops_of(const FrameRow& row) { return row.attended && row.attn_ms > 0 ? row.flops / (row.attn_ms * 1e6) : 0; }

// Smallest of 1, 2, 5, 10, 20, 50, ... that keeps the table to about 25 sampled frames.
int table_stride(int frames) {
  int stride = 1;
  for (int m = 1;; m *= 10)
    for (int f : {1, 2, 5}) {
      stride = f * m;
      if (frames / stride <= 25) return stride;
    }
}

}  // namespace

ProgressReporter::ProgressReporter(bool terminal) : terminal_(terminal), start_(std::chrono::steady_clock::now()) {}

double ProgressReporter::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressReporter::on_calibrated(const KvBenchResult& r) {
  print_calibration(stdout, r);
  std::fflush(stdout);
  start_ = std::chrono::steady_clock::now();  // ETA from the streaming part only
}

void ProgressReporter::on_step(int done, int total) {
  const double el = elapsed_s();
  const double eta = done > 0 ? el / done * (total - done) : NAN;
  const int pct = total > 0 ? static_cast<int>(100.0 * done / total) : 100;
  if (terminal_) {
    if (done < total && el - last_draw_s_ < 0.2) return;
    last_draw_s_ = el;
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(static_cast<double>(kWidth) * done / total) : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r[%s] %d/%d frames %3d%%  elapsed %s  ETA %s ", bar.c_str(), done, total, pct,
                 cli::format_clock(el).c_str(), cli::format_clock(eta).c_str());
    std::fflush(stderr);
    bar_drawn_ = true;
  } else {
    // A line per 10% step, or every 30 s on slow runs.
    const int decile = pct / 10;
    if (decile == last_pct_line_ && el - last_draw_s_ < 30 && done < total) return;
    if (decile == last_pct_line_ && done == total) return;
    last_pct_line_ = decile;
    last_draw_s_ = el;
    std::fprintf(stderr, "progress: %d/%d frames (%d%%), elapsed %.0f s, ETA %s\n", done, total, pct, el,
                 done < total ? cli::format_clock(eta).c_str() : "0:00");
    std::fflush(stderr);
  }
}

void ProgressReporter::on_stop(const KvBenchResult& r, const BackendStop& s) {
  if (bar_drawn_) {
    std::fprintf(stderr, "\n");
    bar_drawn_ = false;
  }
  if (s.budget)
    std::printf("stop: backend %s stopped at frame %d: %s would exceed the --mem-cap-gb auto budget of %g GiB "
                "(%s)%s\n",
                kv_backend_name(r.options.backends[s.backend]), s.frame,
                r.options.backends.size() > 1 ? "the backends' KV caches together" : "its KV cache",
                r.options.mem_budget_gb, s.reason.c_str(),
                r.options.backends.size() > 1 ? "; its memory goes to the others" : "");
  else
    std::printf("stop: backend %s stopped at frame %d: its KV cache would exceed --mem-cap-gb %g (%s)\n",
                kv_backend_name(r.options.backends[s.backend]), s.frame, r.options.mem_cap_gb, s.reason.c_str());
  std::fflush(stdout);
}

void ProgressReporter::finish() {
  if (bar_drawn_) std::fprintf(stderr, "\n");
  bar_drawn_ = false;
}

std::string spinning_cpu_time_warning(double load, int cores, int threads, const char* wait_policy) {
  std::string policy = wait_policy ? wait_policy : "";
  std::transform(policy.begin(), policy.end(), policy.begin(), [](unsigned char c) { return std::tolower(c); });
  if (!(load > cores) || threads <= 1 || policy == "passive") return "";
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "load average %.2f on %d cores: waiting OpenMP threads spin, so the CPU times above include time "
                "spent waiting for cores other processes held; for load-proof CPU times run with "
                "OMP_WAIT_POLICY=passive or fewer --threads",
                load, cores);
  return buf;
}

std::string spinning_cpu_time_warning(int threads) {
  double load = 0;
  if (getloadavg(&load, 1) != 1) return "";
  return spinning_cpu_time_warning(load, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), threads,
                                   std::getenv("OMP_WAIT_POLICY"));
}

void print_calibration(std::FILE* f, const KvBenchResult& r, const char* label) {
  const DeviceCalibration& c = r.calibration;
  if (c.gemm_gflops <= 0) return;
  if (r.options.device == BenchDeviceKind::Cuda) {
    std::fprintf(f,
                 "%s: cuBLAS bf16 GEMM %dx%dx%d (f32 accumulate): %.1f TFLOP/s; device copy: %.0f GB/s "
                 "(specification %.0f GB/s)\n",
                 label, c.gemm_n, c.gemm_n, c.gemm_n, c.gemm_gflops * 1e-3, c.bandwidth_gbps, c.spec_bandwidth_gbps);
    return;
  }
  std::fprintf(f, "%s: sgemm %dx%dx%d, %d threads: %.1f GFLOP/s; memory bandwidth (triad): %.1f GB/s\n", label,
               c.gemm_n, c.gemm_n, c.gemm_n, r.options.threads, c.gemm_gflops, c.bandwidth_gbps);
  if (std::string_view(label) == "calibration") std::fprintf(f, "blas: %s\n", c.gemm_library.c_str());
}

void print_table(std::FILE* f, const KvBenchResult& r) {
  const KvBenchOptions& o = r.options;
  const int stride = table_stride(o.frames);
  std::set<int> frames;
  for (const auto& row : r.rows) {
    const bool sampled = row.mode == FrameMode::ScalePhase || row.frame % stride == 0 || row.frame == 100 ||
                         row.frame == 320 || row.frame == o.frames;
    if (sampled && (row.attended || !o.attention)) frames.insert(row.frame);
  }
  std::fprintf(f, "%6s  %-10s  %-6s  %7s  %10s  %11s  %9s  %7s  %10s  %10s  %9s\n", "frame", "kv_backend", "mode",
               "keys", "attn_ms", "attn_cpu_ms", "maint_ms", "GFLOP/s", "kv_used_MiB", "kv_res_MiB", "peak_rss_MiB");
  for (const auto& row : r.rows) {
    if (!frames.count(row.frame)) continue;
    std::fprintf(f, "%6d  %-10s  %-6s  %7lld  %10.1f  %11.1f  %9.2f  %7.1f  %11.1f  %10.1f  %12.1f\n", row.frame,
                 kv_backend_name(o.backends[row.backend]), mode_name(row.mode), static_cast<long long>(row.n_k),
                 row.attn_ms, row.attn_cpu_ms, row.maint_ms, gflops_of(row), row.stats.bytes_used / kMiB,
                 row.stats.bytes_reserved / kMiB, row.peak_rss_bytes / kMiB);
  }
}

std::string summary_line(const KvBenchResult& r) {
  std::string s = "summary:";
  for (const auto& [k, v] : summarize(r)) s += " " + k + "=" + v;
  return s;
}

void write_csv(const std::string& path, const KvBenchResult& r) {
  std::ostringstream os;
  os << "frame,kv_backend,mode,attended,queries,keys,attn_ms,maint_ms,gflops,kv_bytes_used,kv_bytes_reserved,"
        "patch_bytes_reserved,special_bytes_reserved,frames_stored,frames_resident,special_tokens,pool_pages,"
        "free_pages,special_pages,rss_bytes,peak_rss_bytes,attn_cpu_ms,maint_cpu_ms\n";
  char buf[96];
  for (const auto& row : r.rows) {
    const CacheStats& s = row.stats;
    os << row.frame << ',' << kv_backend_name(r.options.backends[row.backend]) << ',' << mode_name(row.mode) << ','
       << (row.attended ? 1 : 0) << ',' << row.n_q << ',' << row.n_k << ',';
    std::snprintf(buf, sizeof buf, "%.4f,%.4f,%.3f,", row.attn_ms, row.maint_ms, gflops_of(row));
    os << buf << s.bytes_used << ',' << s.bytes_reserved << ',' << s.patch_bytes_reserved << ','
       << s.special_bytes_reserved << ',' << s.frames_stored << ',' << s.frames_resident << ',' << s.special_tokens
       << ',' << s.pool_pages << ',' << s.free_pages << ',' << s.special_pages << ',' << row.rss_bytes << ','
       << row.peak_rss_bytes;
    std::snprintf(buf, sizeof buf, ",%.4f,%.4f\n", row.attn_cpu_ms, row.maint_cpu_ms);
    os << buf;
  }
  io::write_file_atomic(path, os.str(), io::OnLink::WriteThrough);
}

void require_gnuplot() {
  // `command -v` through the shell finds gnuplot exactly as popen() will.
  const int rc = std::system("command -v gnuplot >/dev/null 2>&1");
  LINGBOT_CHECK(rc == 0, "--plot needs gnuplot, which was not found in PATH (install the Debian package gnuplot-nox)");
}

void write_plot(const std::string& path, const KvBenchResult& r) {
  require_gnuplot();
  const KvBenchOptions& o = r.options;
  std::ostringstream gp;
  // Data as inline datablocks, one per backend: frame, reserved MiB, used MiB, latency ms (attended rows).
  for (size_t b = 0; b < o.backends.size(); ++b) {
    gp << "$mem" << b << " << EOD\n";
    for (const auto& row : r.rows)
      if (row.backend == static_cast<int>(b))
        gp << row.frame << ' ' << row.stats.bytes_reserved / kMiB << ' ' << row.stats.bytes_used / kMiB << '\n';
    gp << "EOD\n$lat" << b << " << EOD\n";
    for (const auto& row : r.rows)
      if (row.backend == static_cast<int>(b) && (row.attended || !o.attention) && row.mode != FrameMode::ScalePhase)
        gp << row.frame << ' ' << row.attn_ms + row.maint_ms << ' ' << row.attn_cpu_ms + row.maint_cpu_ms << '\n';
    gp << "EOD\n";
  }
  gp << "set terminal pngcairo size 1100,900 font 'sans,10'\n"
     << "set output " << gnuplot_output(path) << "\n"
     << "set multiplot layout 2,1 title \"lingbot-map bench kv: " << o.resolution << " px ("
     << r.tokens_per_frame << " tokens/frame), " << dtype_name(o.dtype) << ", " << o.blocks << " blocks x "
     << o.heads << " heads x " << o.head_dim << ", KV window " << o.window << ", scale frames " << o.scale_frames
     << ", attention " << (!o.attention ? "off" : o.attend_every > 1 ? "sampled every " + std::to_string(o.attend_every) + " frames" : "on")
     << "\"\n"
     << "set grid\nset key top left\nset xlabel 'frame'\nset yrange [0:*]\n"
     << "set ylabel 'KV cache MiB (solid: reserved, dashed: used)'\n";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  gp << "plot ";
  for (size_t b = 0; b < o.backends.size(); ++b) {
    const char* c = colors[b % 4];
    const char* name = kv_backend_name(o.backends[b]);
    if (b) gp << ", ";
    gp << "$mem" << b << " using 1:2 with lines lw 2 lc rgb '" << c << "' title '" << name << " reserved', "
       << "$mem" << b << " using 1:3 with lines lw 1 dt 2 lc rgb '" << c << "' title '" << name << " used'";
  }
  gp << "\nset ylabel '" << (o.attention ? "ms per frame, attention + cache maintenance" : "ms per frame, cache bookkeeping")
     << " (solid: wall, dashed: CPU)'\n";
  gp << "plot ";
  for (size_t b = 0; b < o.backends.size(); ++b) {
    if (b) gp << ", ";
    gp << "$lat" << b << " using 1:2 with linespoints pt 7 ps 0.4 lw 1.5 lc rgb '" << colors[b % 4] << "' title '"
       << kv_backend_name(o.backends[b]) << " wall', $lat" << b << " using 1:3 with lines lw 1 dt 2 lc rgb '"
       << colors[b % 4] << "' title '" << kv_backend_name(o.backends[b]) << " CPU'";
  }
  gp << "\nunset multiplot\nset output\n";
  run_gnuplot(gp.str(), path);
}

std::string gnuplot_quote(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return "\"" + out + "\"";
}

std::string gnuplot_output(const std::string& path) {
  return gnuplot_quote(io::temp_path(io::output_file_target(path)).string());
}

void check_bench_outputs(const std::string& csv, const std::string& plot) {
  if (!csv.empty()) io::check_output_file(csv);
  if (plot.empty()) return;
  require_gnuplot();
  io::check_output_file(plot);
  if (!csv.empty()) {
    std::error_code ec1, ec2;
    const auto a = std::filesystem::weakly_canonical(std::filesystem::absolute(csv), ec1);
    const auto b = std::filesystem::weakly_canonical(std::filesystem::absolute(plot), ec2);
    LINGBOT_CHECK(ec1 || ec2 || a != b, "--csv and --plot name the same file '", csv, "'");
    LINGBOT_CHECK(ec1 || ec2 || a != io::temp_path(b), "--csv '", csv, "' is the temporary file the --plot PNG is "
                  "written through: choose another name");
  }
  // gnuplot's pngcairo terminal writes PNG whatever the name: a .jpg would hold PNG bytes.
  LINGBOT_CHECK(io::lower_extension(plot) == ".png", "--plot writes a PNG image: name the file .png, got '", plot, "'");
}

void run_gnuplot(const std::string& script_text, const std::string& path) {
  require_gnuplot();
  // Script beside the PNG's temp dir; gnuplot's own errors go to our stderr.
  const std::filesystem::path script =
      std::filesystem::temp_directory_path() / ("lingbot-bench-" + std::to_string(::getpid()) + ".gp");
  {
    std::ofstream s(script);
    LINGBOT_CHECK(s.good(), "cannot write gnuplot script '", script.string(), "'");
    s << script_text;
  }
  const std::string cmd = "gnuplot '" + script.string() + "'";
  const int rc = std::system(cmd.c_str());
  std::filesystem::remove(script);
  const std::filesystem::path target = io::output_file_target(path);
  std::error_code ec;
  if (rc != 0 || !std::filesystem::exists(io::temp_path(target), ec)) {
    io::discard_temp_file(target);
    LINGBOT_CHECK(false, "gnuplot failed to write --plot file '", path, "' (exit status ",
                  WIFEXITED(rc) ? WEXITSTATUS(rc) : rc, ")");
  }
  io::commit_temp_file(target);
}

}  // namespace lingbot::bench
