#pragma once
// Causal camera head (upstream `heads/camera_head.py: CameraCausalHead`) for streaming inference.
//
// Per step it takes the camera token (token 0) of every frame of the step from the LAST aggregator
// output (2C channels) and returns the activated pose encoding after each refinement iteration:
//   t = token_norm(camera tokens)                                   (LayerNorm, eps 1e-5)
//   p_0 = empty_pose_tokens; for it in 0..iters-1:
//     shift, scale, gate = chunk3(Linear(SiLU(embed_pose(p_it))))    (p_it = raw accumulated sum)
//     x = gate · (LN_noaffine(t, eps 1e-6) · (1 + scale) + shift) + t
//     x = trunk blocks (pre-norm attention + MLP, LayerScale) with causal attention over the cache
//         of iteration `it`, block `b`
//     delta = pose_branch(trunk_norm(x)); acc = delta (it 0) or acc + delta
//     out[it] = [acc_t (linear), acc_q (linear), relu(acc_fov)]
// Every iteration restarts from t; only the pose input changes. Results for fewer iterations are
// therefore exact prefixes of a longer run (same arithmetic).
//
// Camera-token KV cache: one per (iteration, trunk block), one token per frame, f32, append-only,
// never evicted (upstream's eviction test cannot fire for one token per frame) unless a history
// bound is set (CameraHeadCache::set_history_bound, for unbounded streams):
//   ScalePhase  (cache must be empty, n >= 1 frames): the n frames attend bidirectionally to each
//               other, then all are stored.
//   Keyframe    (n == 1): stored, then attends to every stored frame (itself included).
//   NonKeyframe (n == 1): attends to every stored frame plus itself; nothing is stored.
//   Deferred    (n == 1): as Keyframe, then the caller decides with commit_deferred() (keep it) or
//               rollback_deferred() (remove it from every (iteration, block) cache: the caches are
//               exactly as before the step). Upstream never rolls the camera head back (golden
//               README N1); the reference, and this engine, do.
// The cache is a small append-only row buffer per (iteration, block) in the memory of the backend
// the head runs on (device memory on CUDA, so a frame's camera tokens never leave the device) rather
// than a KVCache: it has no pages, no eviction, no special tokens and is touched once per block per
// step, so one or two contiguous row runs read by attention_dense are the whole job.
//
// Split: CameraHead holds the immutable weights (build it once per loaded model, share it);
// CameraHeadCache is the per-stream state (one per session, sized for its iteration count).
//   CameraHead head(config.camera, weights);          // consumes the camera_head.* tensors
//   CameraHeadCache cache = head.make_cache(be, iters);  // per stream, on backend `be`; reset() for a new sequence
//   Tensor poses = head.step(be, cache, mode, RowsView{last_output, n_frames, 2C, P·2C});
#include <cstdint>
#include <vector>

#include "compute/backend.h"
#include "io/tensor_map.h"
#include "kvcache/frame_mode.h"
#include "lingbot/model_config.h"
#include "lingbot/tensor.h"
#include "model/rows_view.h"

namespace lingbot::model {

// Per-stream state of the camera head: the camera-token K/V caches, [iteration][trunk block], each
// one f32 K row and one f32 V row of dim_in floats per stored frame, plus the step's activations, all
// in the memory of the backend it was made on (which must outlive it). Owned by the streaming session
// (one per stream); created by CameraHead::make_cache(). Move-only.
class CameraHeadCache {
 public:
  int num_iterations() const { return iterations_; }
  int64_t frames() const { return frames_; }  // frames held in each (iteration, block) cache
  int64_t frames_dropped() const { return dropped_; }  // stored frames the history bound removed
  // Bounded history (SessionOptions::max_special_frames): after each storing step only the first
  // `keep_first` stored frames and the newest `keep_recent` stored frames stay (older ones in between
  // are dropped without moving any row; the buffers are reallocated only when full, to twice the held
  // frames, so memory stays flat). keep_recent 0 = keep all (upstream). Set before the first step of a
  // sequence; reset() keeps it.
  void set_history_bound(int64_t keep_first, int64_t keep_recent);
  int64_t bytes() const;                      // K+V bytes held now, all caches
  int64_t bytes_reserved() const;             // K+V bytes allocated, all caches
  void reset();                               // forget every frame, keep the capacity
  // After a Deferred step: keep the frame / remove it again. Throw when no Deferred frame is pending.
  void commit_deferred();
  void rollback_deferred();
  bool deferred_pending() const { return deferred_; }
  // The stored K then V rows of every (iteration, block) cache, in order (copied to the host): equal
  // bytes = equal state.
  std::vector<unsigned char> live_bytes() const;

 private:
  friend class CameraHead;
  struct Entry {
    Buffer k, v;  // f32 [capacity_, dim_] each, in backend memory
  };
  // The step's activations (grow-only, reused by every step).
  struct Workspace {
    compute::Scratch t, a, x, emb, mod, hid, delta, pose, raw, h, qkv, att, m;
  };
  CameraHeadCache(compute::Backend& be, int iterations, int64_t trunk_depth, int64_t dim);
  // Row ranges of the held frames, oldest first: rows [0, first_) then [begin_, end_) of every buffer.
  // Dropping frames advances begin_; appending writes at end_ (reallocating first when full).
  void make_room(int64_t rows);  // ensures end_ + rows <= capacity_, compacting into new buffers
  void apply_history_bound();

  compute::Backend* be_ = nullptr;
  int iterations_ = 0;
  int64_t depth_ = 0, dim_ = 0;
  std::vector<Entry> entries_;  // [iteration * trunk_depth + block]
  int64_t capacity_ = 0;        // rows of every buffer
  int64_t first_ = 0, begin_ = 0, end_ = 0;
  int64_t frames_ = 0;
  bool deferred_ = false;
  int64_t dropped_ = 0;
  int64_t keep_first_ = 0, keep_recent_ = 0;
  Workspace ws_;
};

// The camera head's weights: immutable after construction, shareable by any number of streams.
class CameraHead {
 public:
  // Takes the `prefix`-named tensors (PyTorch state_dict names, e.g. "camera_head.trunk.0.attn.qkv.weight")
  // out of `weights` (they are moved and erased from the map; f16/bf16 are converted to f32), so a
  // loaded checkpoint is not held twice. Throws Error naming the first missing or mis-shaped tensor.
  CameraHead(const CameraHeadConfig& config, io::TensorMap& weights, const std::string& prefix = "camera_head.");

  // An empty cache for `num_iterations` refinement iterations (0 = config.num_iterations), in the
  // memory of `be` (which must outlive the cache; every step of this cache runs on it).
  // Throws Error unless num_iterations >= 1 after that substitution.
  CameraHeadCache make_cache(compute::Backend& be, int num_iterations = 0) const;

  // One streaming step. camera_tokens: n_frames rows of dim_in floats (token 0 of each frame of the
  // last aggregator output, f32). Returns f32 [cache.num_iterations(), n_frames, 9]: the activated
  // pose encoding [t_x, t_y, t_z, q_x, q_y, q_z, q_w, fov_h, fov_w] after each iteration (the last
  // row is the final pose). Modes: see the header comment. Throws Error, leaving the cache unchanged,
  // on a bad shape, a cache of another head or another backend, or a bad mode/frame-count combination.
  // Runs on `be`, the cache's backend: camera_tokens are in its memory; the poses are copied back once
  // per step. Results do not depend on the CPU backend's thread count.
  Tensor step(compute::Backend& be, CameraHeadCache& cache, FrameMode mode, const RowsView& camera_tokens) const;

  const CameraHeadConfig& config() const { return cfg_; }

 private:
  struct Block {
    Tensor norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b, ls1;
    Tensor norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b, ls2;
  };

  void run_block(compute::Backend& be, const Block& blk, CameraHeadCache& cache, CameraHeadCache::Entry& entry,
                 FrameMode mode, float* x, int64_t n) const;

  CameraHeadConfig cfg_;
  std::vector<Block> blocks_;
  Tensor token_norm_w_, token_norm_b_, trunk_norm_w_, trunk_norm_b_;
  Tensor empty_pose_, embed_pose_w_, embed_pose_b_, mod_w_, mod_b_;
  Tensor branch_fc1_w_, branch_fc1_b_, branch_fc2_w_, branch_fc2_b_;
};

}  // namespace lingbot::model
