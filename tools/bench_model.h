#pragma once
// `lingbot-map bench model`: end-to-end frames through a random-weight model built in memory (no
// checkpoint file: the weights come from ModelConfig with a seeded RNG, pipeline/demo_model.h), for
// each weights dtype x KV dtype of the sweep, one configuration after the other in one process.
//
// Per push_frame (the scale phase is one push returning scale_frames results) it records wall and
// process-CPU time, the per-phase CPU time of SessionStats::phases (encoder, frame blocks, global
// blocks, camera head, DPT head) and of the writers (depth PNG/NPY + PLY into a temporary folder, as
// `run` writes them), RSS and peak RSS (the peak is reset before each configuration's model is built,
// so it covers building the weights, the scale phase and the stream). A same-run calibration times
// kernels::linear at the model's fc1 shape for f32 (OpenBLAS sgemm) and each reduced weights dtype.
#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/phase_clock.h"
#include "bench/harness/calibration.h"
#include "lingbot/device.h"
#include "lingbot/dtype.h"

namespace lingbot::bench {

struct ModelBenchOptions {
  std::string model = "full";   // full (ModelConfig::release(), ~1.16 G parameters) | demo (the tiny demo model)
  int width = 518, height = 378;  // frame size (multiples of the patch size 14)
  int frames = 10;               // frames pushed per configuration (>= scale_frames + 1)
  int scale_frames = 8;
  int window = 64;
  int camera_iterations = 4;
  std::vector<DType> weights_dtypes = {DType::F32, DType::BF16};
  std::vector<DType> kv_dtypes = {DType::F32};
  int threads = 1;
  Device device = Device::Cpu;   // resolved (cpu or cuda): SessionOptions::device of every configuration
  uint64_t seed = 1;
  bool calibrate = true;
  bool writers = true;           // time the output writers too
  // Non-empty: first write the f32 random weights to this safetensors file, then time Model::load of
  // it: f32 (memory-mapped) twice -- the second is warm (page cache) -- and each reduced weights dtype
  // (read + convert). The file is left in place.
  std::string load_test_file;
  // Set (by a signal handler) to end the run early: the push in progress ends within about a block
  // (SessionOptions::stop); the result holds the pushes done (ModelBenchResult::interrupted). Not owned.
  const std::atomic<bool>* stop = nullptr;
};

struct LoadTiming {
  DType weights = DType::F32;
  bool mapped = false;
  double seconds = 0;            // Model::load wall time
  double cpu_seconds = 0;        // process CPU time of the same call
  size_t borrowed_bytes = 0, owned_bytes = 0;
};

// Throws Error naming the first bad option.
void validate(const ModelBenchOptions& o);

struct ModelBenchRow {
  int config = 0;                // index into ModelBenchResult::configs
  int push = 0;                  // 1-based push count (frames pushed so far)
  int results = 0;               // frame results this push returned (scale phase: scale_frames, then 1)
  double wall_ms = 0, cpu_ms = 0;  // push_frame (+ finish) wall / process CPU
  // Per phase: process CPU ms on the CPU; device ms (CUDA events around each phase's queued work) on
  // a device, where the host's CPU time is only the time to queue the work.
  double encoder_ms = 0, frame_blocks_ms = 0, global_blocks_ms = 0, camera_ms = 0, dpt_ms = 0;
  double writers_ms = 0;         // CPU of writing this push's results
  int64_t rss_bytes = 0, peak_rss_bytes = 0;
  std::optional<int64_t> device_peak_bytes;  // SessionStats::device_peak_bytes after the push (cuda; none on cpu)
};

struct ModelBenchConfig {
  DType weights = DType::F32, kv = DType::F32;
  std::string gemm;              // gemm_path_description(weights)
  double build_seconds = 0;      // random weights + Model::from_weights
  int64_t parameters = 0;
  // Means over the pushes after the scale phase (single-frame steps); none when a stop came first.
  int single_frame_pushes = 0;
  double frame_wall_ms = 0, frame_cpu_ms = 0;
  double scale_phase_cpu_ms = 0;  // the scale frames' pushes together (each its encoder; the last the step)
  // Means of the rows' phase ms (encoder, frame blocks, global blocks, camera, DPT) over the same
  // pushes; device ms when phases_on_device, else CPU ms (see ModelBenchRow).
  std::array<double, 5> frame_phase_ms{};
  bool phases_on_device = false;
  int64_t peak_rss_bytes = 0;
  std::optional<int64_t> device_peak_bytes;  // the session's device peak at its end (cuda; none on cpu)
};

struct ModelBenchResult {
  ModelBenchOptions options;
  std::vector<ModelBenchConfig> configs;
  std::vector<ModelBenchRow> rows;
  std::vector<bench::LinearCalibration> calibration;  // f32 first, then each reduced weights dtype
  std::vector<LoadTiming> loads;  // with load_test_file: f32 first load, f32 warm, then reduced dtypes
  std::string load_average_start, load_average_end;   // /proc/loadavg's first three fields
  double wall_seconds = 0;
  bool interrupted = false;  // options.stop ended it: the configuration in progress has the pushes done
};

// Progress: one line per configuration and per push on `progress` (stderr in the CLI).
ModelBenchResult run_model_bench(const ModelBenchOptions& options, std::FILE* progress);

// The `summary:` keys in print order (docs/performance.md defines them).
std::vector<std::pair<std::string, std::string>> summarize(const ModelBenchResult& r);
std::string summary_line(const ModelBenchResult& r);
void print_table(std::FILE* f, const ModelBenchResult& r);
// Header: config,weights_dtype,kv_dtype,push,results,wall_ms,cpu_ms,encoder_ms,frame_blocks_ms,
// global_blocks_ms,camera_ms,dpt_ms,writers_ms,rss_bytes,peak_rss_bytes,device_peak_bytes (the last
// empty on the CPU)
void write_csv(const std::string& path, const ModelBenchResult& r);
// Per-push CPU ms by phase (stacked per configuration) and peak RSS vs push.
void write_plot(const std::string& path, const ModelBenchResult& r);

}  // namespace lingbot::bench
