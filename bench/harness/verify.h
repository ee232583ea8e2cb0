#pragma once
// Golden-case verification: runs a case directory's scenario through the public Session API and
// compares every tensor of its reference.safetensors that the engine produces.
//
// Case format (../shared/golden/README.md): case.json (scenario, model hyperparameters, weights_file
// relative to the case directory), the weights, reference.safetensors with the input `images`
// [S, 3, H, W] and the reference outputs. Tolerances are the README's recommended ones for a float32
// implementation ("Numerical noise floor and recommended tolerances"); integer traces must match
// exactly. A reference tensor the engine cannot produce is a FAIL ("not implemented"), never skipped;
// only tensors excluded explicitly with `only` patterns are reported as skipped.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kvcache/kv_cache.h"
#include "lingbot/device.h"
#include "lingbot/dtype.h"
#include "lingbot/tensor.h"
#include "bench/harness/golden_case.h"

namespace lingbot {

struct VerifyOptions {
  std::string case_dir;
  std::optional<KVBackend> kv_backend;  // default paged
  std::optional<DType> kv_dtype;      // default f32
  DType weights_dtype = DType::F32;   // ModelLoadOptions::weights_dtype of the loaded case model
  int threads = 0;                    // 0 = all
  Device device = Device::Cpu;        // SessionOptions::device of the run (auto is resolved there)
  std::vector<std::string> only;      // glob patterns of tensor names to check; empty = all
  bool keep_outputs = false;          // fill VerifyReport::outputs (accuracy tests compare backends)
};

struct VerifyRow {
  std::string tensor;
  std::string frames;        // frames compared ("0-9", "0,2,3"), or "-" for non-per-frame tensors
  double max_abs = 0.0;      // max |engine - reference|
  double max_rel = 0.0;      // max_abs / max|reference| (0 when the reference is all zeros)
  std::string tolerance;     // human-readable bound
  std::string status;        // "ok", "FAIL", "SKIP" (excluded by --only), "input", "index"
  std::string note;          // reason for FAIL / SKIP, or empty
  double kv_scale = 1.0;     // factor applied to the f32 tolerance for reduced-precision K/V and weights
                             // (1 for f32; see verify_tolerance_scale)
  // Per-frame head outputs only (pose_enc, pose_enc_iters, extrinsic, intrinsic, extrinsic_c2w, depth,
  // depth_conf, world_points): index = frame; max |engine - reference| and max|reference| of that frame.
  std::vector<double> frame_max_abs, frame_max_ref;
  bool counts_as_failure() const { return status == "FAIL"; }
};

struct VerifyReport {
  std::string case_name;
  std::string backend;
  std::string kv_dtype;
  std::string weights_dtype;
  int threads = 0;
  std::vector<VerifyRow> rows;
  int64_t frames = 0;
  double seconds = 0.0;          // wall time of the engine run, streaming or windowed (model load excluded)
  size_t peak_rss_bytes = 0;     // process peak RSS after the run
  // With VerifyOptions::keep_outputs: engine head outputs by reference tensor name, one f32 tensor per
  // frame (same names as the per-frame rows); empty otherwise.
  std::map<std::string, std::vector<Tensor>> outputs;
  bool passed() const;
};

// Factor on the README's f32 tolerances for reduced-precision storage: K/V x50 (f16) / x400 (bf16),
// weights x250 (f16) / x2000 (bf16), the excesses adding up when both are reduced (x1 for f32 / f32).
// Weights scale more than K/V: every block linear also rounds its input activations to the dtype.
double verify_tolerance_scale(DType kv_dtype, DType weights_dtype);

// Throws lingbot::Error for an unreadable / malformed case or an unsupported scenario option.
VerifyReport run_verify(const VerifyOptions& options);

// The table: tensor, frames, max abs err, max rel err, tolerance, ok; then a summary line.
std::string format_verify_report(const VerifyReport& report);

}  // namespace lingbot
