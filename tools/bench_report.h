#pragma once
// Output of `lingbot-map bench kv`: progress display, stdout table, CSV, gnuplot PNG, summary line.
#include <chrono>
#include <cstdio>
#include <string>

#include "bench_kv.h"

namespace lingbot::bench {

// Progress on stderr: a redrawn bar with ETA when stderr is a terminal, otherwise a plain line every
// 10% of the frames or 30 s. Backend stop lines go to stdout (and clear the bar first).
class ProgressReporter final : public KvBenchObserver {
 public:
  explicit ProgressReporter(bool terminal);
  void on_calibrated(const KvBenchResult& partial) override;
  void on_step(int frames_done, int frames_total) override;
  void on_stop(const KvBenchResult& partial, const BackendStop& stop) override;
  void finish();  // ends the bar line

 private:
  double elapsed_s() const;
  bool terminal_;
  std::chrono::steady_clock::time_point start_;
  double last_draw_s_ = -1;
  int last_pct_line_ = -1;
  bool bar_drawn_ = false;
};

// The "<label>: sgemm ..., memory bandwidth ..." line (nothing when not calibrated), and with the
// default label (before the stream) the "blas:" line; after the stream, the label says the figures are
// the better of the two runs, which the summary keeps.
void print_calibration(std::FILE* f, const KvBenchResult& r, const char* label = "calibration");
// Table of sampled frames (all frames when there are few), all backends.
void print_table(std::FILE* f, const KvBenchResult& r);
// One line: "summary: key=value key=value ...".
std::string summary_line(const KvBenchResult& r);

// Process CPU time counts OpenMP threads spinning while they wait for a core another process holds,
// so a bench's CPU times are inflated when the machine was oversubscribed. The warning to print
// after a run then: the 1-minute load average `load` exceeded `cores`, the run had more than one
// thread, and OMP_WAIT_POLICY (`wait_policy`, null when unset) is not passive. Empty otherwise.
std::string spinning_cpu_time_warning(double load, int cores, int threads, const char* wait_policy);
// The same for this process now (/proc/loadavg, the online cores, OMP_WAIT_POLICY).
std::string spinning_cpu_time_warning(int threads);

// All rows as CSV (header documented in docs/performance.md). Throws Error if the file cannot be written.
void write_csv(const std::string& path, const KvBenchResult& r);

// Throws Error unless gnuplot can be run (names the Debian package gnuplot-nox).
void require_gnuplot();
// Before a bench runs: the --csv and --plot files can be written (io::check_output_file; an existing
// file is left as it is until the bench has its rows), gnuplot is there for a plot, and the two are
// not one file.
void check_bench_outputs(const std::string& csv, const std::string& plot);
// The quoted name a plot script's `set output` gives for the PNG `path`: a temporary beside it.
std::string gnuplot_output(const std::string& path);
// Runs a gnuplot script that writes gnuplot_output(path), then renames that over `path` (a failed or
// interrupted plot leaves the old file); throws Error when gnuplot is missing or fails.
void run_gnuplot(const std::string& script_text, const std::string& path);
// `s` as a double-quoted gnuplot string.
std::string gnuplot_quote(const std::string& s);

// Two panels (KV memory vs frame, latency vs frame), one curve per backend, rendered by gnuplot.
void write_plot(const std::string& path, const KvBenchResult& r);

}  // namespace lingbot::bench
