#include "model/camera_head.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "model/geometry.h"
#include "model/take_weight.h"

namespace lingbot::model {

namespace kn = lingbot::kernels;

CameraHeadCache::CameraHeadCache(int iterations, int64_t trunk_depth, int64_t dim)
    : iterations_(iterations), depth_(trunk_depth), dim_(dim), entries_(static_cast<size_t>(iterations * trunk_depth)) {}

void CameraHeadCache::reset() {
  for (Entry& e : entries_) {
    e.k.clear();
    e.v.clear();
  }
  frames_ = 0;
  deferred_ = false;
  dropped_ = 0;
}

void CameraHeadCache::commit_deferred() {
  LINGBOT_CHECK(deferred_, "camera head: commit_deferred without a pending Deferred frame");
  deferred_ = false;
  apply_history_bound();  // deferred like the aggregator cache's eviction, so a rollback is exact
}

void CameraHeadCache::rollback_deferred() {
  LINGBOT_CHECK(deferred_, "camera head: rollback_deferred without a pending Deferred frame");
  for (Entry& e : entries_) {  // the frame is the last row of every cache
    e.k.resize(e.k.size() - static_cast<size_t>(dim_));
    e.v.resize(e.v.size() - static_cast<size_t>(dim_));
  }
  --frames_;
  deferred_ = false;
}

std::vector<unsigned char> CameraHeadCache::live_bytes() const {
  std::vector<unsigned char> out;
  for (const Entry& e : entries_) {
    const auto* k = reinterpret_cast<const unsigned char*>(e.k.data());
    const auto* v = reinterpret_cast<const unsigned char*>(e.v.data());
    out.insert(out.end(), k, k + e.k.size() * sizeof(float));
    out.insert(out.end(), v, v + e.v.size() * sizeof(float));
  }
  return out;
}

void CameraHeadCache::set_history_bound(int64_t keep_first, int64_t keep_recent) {
  LINGBOT_CHECK(keep_first >= 0 && keep_recent >= 0, "camera head: history bound must be >= 0, got keep_first ",
                keep_first, ", keep_recent ", keep_recent);
  keep_first_ = keep_first;
  keep_recent_ = keep_recent;
}

void CameraHeadCache::apply_history_bound() {
  if (keep_recent_ == 0 || frames_ <= keep_first_ + keep_recent_) return;
  const int64_t excess = frames_ - keep_first_ - keep_recent_;
  for (Entry& e : entries_) {
    for (std::vector<float>* buf : {&e.k, &e.v})  // erase keeps the capacity: no reallocation later
      buf->erase(buf->begin() + keep_first_ * dim_, buf->begin() + (keep_first_ + excess) * dim_);
  }
  frames_ -= excess;
  dropped_ += excess;
}

int64_t CameraHeadCache::bytes() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += static_cast<int64_t>((e.k.size() + e.v.size()) * sizeof(float));
  return n;
}

int64_t CameraHeadCache::bytes_reserved() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += static_cast<int64_t>((e.k.capacity() + e.v.capacity()) * sizeof(float));
  return n;
}

CameraHead::CameraHead(const CameraHeadConfig& config, io::TensorMap& w, const std::string& prefix) : cfg_(config) {
  const int64_t D = cfg_.dim_in, H = cfg_.mlp_hidden, P = cfg_.pose_dim, B = cfg_.pose_branch_hidden;
  LINGBOT_CHECK(cfg_.trunk_depth >= 1, "camera head: trunk_depth must be >= 1, got ", cfg_.trunk_depth);
  LINGBOT_CHECK(cfg_.num_heads >= 1 && D % cfg_.num_heads == 0, "camera head: num_heads ", cfg_.num_heads,
                " does not divide dim_in ", D);
  LINGBOT_CHECK(P == kPoseEncodingDim, "camera head: pose_dim must be 9, got ", P);
  auto take = [&](const std::string& name, const Shape& shape) { return take_weight(w, prefix + name, shape); };
  for (int64_t b = 0; b < cfg_.trunk_depth; ++b) {
    const std::string p = "trunk." + std::to_string(b) + ".";
    Block blk{take(p + "norm1.weight", {D}),     take(p + "norm1.bias", {D}),
              take(p + "attn.qkv.weight", {3 * D, D}), take(p + "attn.qkv.bias", {3 * D}),
              take(p + "attn.proj.weight", {D, D}),    take(p + "attn.proj.bias", {D}),
              take(p + "ls1.gamma", {D}),              take(p + "norm2.weight", {D}),
              take(p + "norm2.bias", {D}),             take(p + "mlp.fc1.weight", {H, D}),
              take(p + "mlp.fc1.bias", {H}),           take(p + "mlp.fc2.weight", {D, H}),
              take(p + "mlp.fc2.bias", {D}),           take(p + "ls2.gamma", {D})};
    blocks_.push_back(std::move(blk));
  }
  token_norm_w_ = take("token_norm.weight", {D});
  token_norm_b_ = take("token_norm.bias", {D});
  trunk_norm_w_ = take("trunk_norm.weight", {D});
  trunk_norm_b_ = take("trunk_norm.bias", {D});
  empty_pose_ = take("empty_pose_tokens", {1, 1, P});
  embed_pose_w_ = take("embed_pose.weight", {D, P});
  embed_pose_b_ = take("embed_pose.bias", {D});
  mod_w_ = take("poseLN_modulation.1.weight", {3 * D, D});
  mod_b_ = take("poseLN_modulation.1.bias", {3 * D});
  branch_fc1_w_ = take("pose_branch.fc1.weight", {B, D});
  branch_fc1_b_ = take("pose_branch.fc1.bias", {B});
  branch_fc2_w_ = take("pose_branch.fc2.weight", {P, B});
  branch_fc2_b_ = take("pose_branch.fc2.bias", {P});
}

CameraHeadCache CameraHead::make_cache(int num_iterations) const {
  const int64_t iters = num_iterations == 0 ? cfg_.num_iterations : num_iterations;
  LINGBOT_CHECK(iters >= 1, "camera head: num_iterations must be >= 1, got ", iters);
  return CameraHeadCache(static_cast<int>(iters), cfg_.trunk_depth, cfg_.dim_in);
}

// Pre-norm block: x += ls1 · proj(attn(norm1(x))); x += ls2 · fc2(gelu(fc1(norm2(x)))). x: [n, D].
void CameraHead::run_block(compute::Backend& be, const Block& blk, CameraHeadCache::Entry& cache, FrameMode mode,
                           float* x, int64_t n) const {
  const int64_t D = cfg_.dim_in, H = cfg_.mlp_hidden, heads = cfg_.num_heads, hd = D / heads;
  std::vector<float> h(static_cast<size_t>(n * D)), qkv(static_cast<size_t>(n * 3 * D)), att(h.size());
  be.layer_norm(x, n, D, &blk.norm1_w, &blk.norm1_b, cfg_.ln_eps, h.data());
  be.linear(h.data(), n, blk.qkv_w, &blk.qkv_b, qkv.data());

  // Keys: the stored frames (oldest first), then this step's own tokens. A stored frame is appended
  // after attention, which sees the same key set as "append, then attend to the cache".
  const int64_t cached = static_cast<int64_t>(cache.k.size()) / D;
  kn::KVSpan spans[2];
  int n_spans = 0;
  if (cached > 0)
    spans[n_spans++] = {cache.k.data(), cache.v.data(), DType::F32, static_cast<int>(cached), D};
  spans[n_spans++] = {qkv.data() + D, qkv.data() + 2 * D, DType::F32, static_cast<int>(n), 3 * D};
  const kn::QueryView q{qkv.data(), static_cast<int>(n), static_cast<int>(heads), static_cast<int>(hd), 3 * D};
  be.attention_dense(q, std::span<const kn::KVSpan>(spans, n_spans), att.data(),
                     1.0f / std::sqrt(static_cast<float>(hd)));

  if (mode != FrameMode::NonKeyframe) {
    for (int64_t r = 0; r < n; ++r) {
      const float* row = qkv.data() + r * 3 * D;
      cache.k.insert(cache.k.end(), row + D, row + 2 * D);
      cache.v.insert(cache.v.end(), row + 2 * D, row + 3 * D);
    }
  }

  be.linear(att.data(), n, blk.proj_w, &blk.proj_b, h.data());
  be.layer_scale_add(x, h.data(), &blk.ls1, n, D);

  std::vector<float> m(static_cast<size_t>(n * H));
  be.layer_norm(x, n, D, &blk.norm2_w, &blk.norm2_b, cfg_.ln_eps, h.data());
  be.linear(h.data(), n, blk.fc1_w, &blk.fc1_b, m.data());
  be.gelu_erf(m.data(), n * H);
  be.linear(m.data(), n, blk.fc2_w, &blk.fc2_b, h.data());
  be.layer_scale_add(x, h.data(), &blk.ls2, n, D);
}

Tensor CameraHead::step(compute::Backend& be, CameraHeadCache& cache, FrameMode mode, const RowsView& tokens) const {
  const int64_t D = cfg_.dim_in, P = cfg_.pose_dim, B = cfg_.pose_branch_hidden, n = tokens.rows;
  LINGBOT_CHECK(be.allocator().kind() == MemoryKind::Host, "camera head: its cache is host memory; run it on a "
                "host-memory backend (cpu), not ", be.description());
  LINGBOT_CHECK(cache.depth_ == cfg_.trunk_depth && cache.dim_ == D && cache.iterations_ >= 1,
                "camera head: the cache was made for another head (trunk depth ", cache.depth_, ", dim ", cache.dim_,
                "; this head has ", cfg_.trunk_depth, ", ", D, ")");
  LINGBOT_CHECK(tokens.data != nullptr && tokens.cols == D && n >= 1 && tokens.stride() >= D,
                "camera head: camera tokens must be [n >= 1, ", D, "] with row stride >= ", D, ", got [", n, ", ",
                tokens.cols, "] stride ", tokens.stride());
  LINGBOT_CHECK(!cache.deferred_, "camera head: a Deferred frame is pending (call commit_deferred or rollback_deferred)");
  if (mode == FrameMode::ScalePhase) {
    LINGBOT_CHECK(cache.frames_ == 0, "camera head: scale phase needs an empty cache, it holds ", cache.frames_,
                  " frames (call reset())");
  } else {
    LINGBOT_CHECK(n == 1, "camera head: a ",
                  mode == FrameMode::Keyframe ? "keyframe" : mode == FrameMode::Deferred ? "deferred" : "non-keyframe",
                  " step takes 1 frame, got ", n);
  }

  // t = token_norm(camera tokens); a = LN_noaffine(t) (the adaLN input; t itself is the residual).
  std::vector<float> t(static_cast<size_t>(n * D)), a(t.size()), x(t.size());
  be.layer_norm(tokens.data, n, D, &token_norm_w_, &token_norm_b_, cfg_.ln_eps, t.data(), tokens.stride());
  be.layer_norm(t.data(), n, D, nullptr, nullptr, cfg_.adaln_eps, a.data());

  const int64_t iters = cache.iterations_;
  Tensor out({iters, n, P});
  std::vector<float> pose(static_cast<size_t>(n * P));  // raw accumulated sum of deltas
  for (int64_t r = 0; r < n; ++r) std::copy(empty_pose_.f32(), empty_pose_.f32() + P, pose.begin() + r * P);
  std::vector<float> emb(t.size()), mod(static_cast<size_t>(n * 3 * D)), hid(static_cast<size_t>(n * B)),
      delta(pose.size());
  for (int64_t it = 0; it < iters; ++it) {
    be.linear(pose.data(), n, embed_pose_w_, &embed_pose_b_, emb.data());
    be.silu(emb.data(), n * D);
    be.linear(emb.data(), n, mod_w_, &mod_b_, mod.data());
    be.modulate(x.data(), a.data(), t.data(), mod.data(), n, D);
    for (int64_t b = 0; b < cfg_.trunk_depth; ++b)
      run_block(be, blocks_[b], cache.entries_[it * cfg_.trunk_depth + b], mode, x.data(), n);

    be.layer_norm(x.data(), n, D, &trunk_norm_w_, &trunk_norm_b_, cfg_.ln_eps, emb.data());
    be.linear(emb.data(), n, branch_fc1_w_, &branch_fc1_b_, hid.data());
    be.gelu_erf(hid.data(), n * B);
    be.linear(hid.data(), n, branch_fc2_w_, &branch_fc2_b_, delta.data());
    if (it == 0) {
      pose = delta;
    } else {
      for (size_t i = 0; i < pose.size(); ++i) pose[i] += delta[i];
    }
    // Activations: translation linear, quaternion linear, FoV relu.
    float* o = out.f32() + it * n * P;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < P; ++c) {
        const float v = pose[r * P + c];
        o[r * P + c] = c >= 7 ? std::max(v, 0.0f) : v;
      }
  }
  if (mode != FrameMode::NonKeyframe) cache.frames_ += n;
  cache.deferred_ = mode == FrameMode::Deferred;
  if (mode != FrameMode::NonKeyframe && !cache.deferred_) cache.apply_history_bound();
  return out;
}

}  // namespace lingbot::model
