#include "model/camera_head.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "model/geometry.h"
#include "model/take_weight.h"

namespace lingbot::model {

namespace kn = lingbot::kernels;

CameraHeadCache::CameraHeadCache(compute::Backend& be, int iterations, int64_t trunk_depth, int64_t dim)
    : be_(&be),
      iterations_(iterations),
      depth_(trunk_depth),
      dim_(dim),
      entries_(static_cast<size_t>(iterations * trunk_depth)) {}

void CameraHeadCache::reset() {
  first_ = begin_ = end_ = 0;
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
  --end_;  // the frame is the last row of every cache
  --frames_;
  deferred_ = false;
}

std::vector<unsigned char> CameraHeadCache::live_bytes() const {
  const size_t row = static_cast<size_t>(dim_) * sizeof(float);
  std::vector<unsigned char> out(static_cast<size_t>(bytes()));
  unsigned char* o = out.data();
  for (const Entry& e : entries_)
    for (const Buffer* buf : {&e.k, &e.v}) {
      const auto* base = static_cast<const unsigned char*>(buf->data());
      be_->download(o, base, static_cast<size_t>(first_) * row);
      o += first_ * row;
      be_->download(o, base + begin_ * row, static_cast<size_t>(end_ - begin_) * row);
      o += (end_ - begin_) * row;
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
  // Until the first drop the rows are one run from row 0 (first_ == begin_ == 0); the first drop
  // splits it after the pinned frames. Dropping then only advances the start of the recent run.
  if (first_ < keep_first_) first_ = begin_ = keep_first_;
  const int64_t excess = frames_ - keep_first_ - keep_recent_;
  begin_ += excess;
  frames_ -= excess;
  dropped_ += excess;
}

void CameraHeadCache::make_room(int64_t rows) {
  if (end_ + rows <= capacity_) return;
  // New buffers of twice the held frames, the two runs packed into one: steady bounded streams
  // reallocate once per ~keep_recent frames, to the same size.
  const int64_t cap = std::max<int64_t>(16, 2 * (frames_ + rows));
  const int64_t row = dim_ * static_cast<int64_t>(sizeof(float)), recent = end_ - begin_;
  // Every new buffer first, so a failed allocation leaves the cache as it was.
  std::vector<Buffer> grown;
  grown.reserve(2 * entries_.size());
  for (size_t i = 0; i < 2 * entries_.size(); ++i) grown.emplace_back(be_->allocator(), static_cast<size_t>(cap * row));
  size_t next = 0;
  for (Entry& e : entries_)
    for (Buffer* buf : {&e.k, &e.v}) {
      Buffer& dst = grown[next++];
      if (first_ > 0) be_->copy_rows(dst.data(), first_ * row, buf->data(), first_ * row, 1, first_ * row);
      if (recent > 0)
        be_->copy_rows(static_cast<char*>(dst.data()) + first_ * row, recent * row,
                       static_cast<const char*>(buf->data()) + begin_ * row, recent * row, 1, recent * row);
    }
  next = 0;
  for (Entry& e : entries_)
    for (Buffer* buf : {&e.k, &e.v}) *buf = std::move(grown[next++]);  // stream-ordered frees: copies first
  capacity_ = cap;
  begin_ = first_;
  end_ = first_ + recent;
}

int64_t CameraHeadCache::bytes() const {
  return frames_ * dim_ * 2 * static_cast<int64_t>(sizeof(float) * entries_.size());
}

int64_t CameraHeadCache::bytes_reserved() const {
  return capacity_ * dim_ * 2 * static_cast<int64_t>(sizeof(float) * entries_.size());
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

CameraHeadCache CameraHead::make_cache(compute::Backend& be, int num_iterations) const {
  const int64_t iters = num_iterations == 0 ? cfg_.num_iterations : num_iterations;
  LINGBOT_CHECK(iters >= 1, "camera head: num_iterations must be >= 1, got ", iters);
  return CameraHeadCache(be, static_cast<int>(iters), cfg_.trunk_depth, cfg_.dim_in);
}

// Pre-norm block: x += ls1 · proj(attn(norm1(x))); x += ls2 · fc2(gelu(fc1(norm2(x)))). x: [n, D].
void CameraHead::run_block(compute::Backend& be, const Block& blk, CameraHeadCache& cache,
                           CameraHeadCache::Entry& entry, FrameMode mode, float* x, int64_t n) const {
  const int64_t D = cfg_.dim_in, H = cfg_.mlp_hidden, heads = cfg_.num_heads, hd = D / heads;
  CameraHeadCache::Workspace& ws = cache.ws_;
  float* h = ws.h.reserve(be, n * D);
  float* qkv = ws.qkv.reserve(be, n * 3 * D);
  float* att = ws.att.reserve(be, n * D);
  be.layer_norm(x, n, D, &blk.norm1_w, &blk.norm1_b, cfg_.ln_eps, h);
  be.linear(h, n, blk.qkv_w, &blk.qkv_b, qkv);

  // Keys: the held frames (oldest first: the pinned run, then the recent run), then this step's own
  // tokens. A stored frame is appended after attention, which sees the same key set as "append, then
  // attend to the cache".
  const auto* k = static_cast<const float*>(entry.k.data());
  const auto* v = static_cast<const float*>(entry.v.data());
  kn::KVSpan spans[3];
  int n_spans = 0;
  if (cache.first_ > 0) spans[n_spans++] = {k, v, DType::F32, static_cast<int>(cache.first_), D};
  if (cache.end_ > cache.begin_)
    spans[n_spans++] = {k + cache.begin_ * D, v + cache.begin_ * D, DType::F32,
                        static_cast<int>(cache.end_ - cache.begin_), D};
  spans[n_spans++] = {qkv + D, qkv + 2 * D, DType::F32, static_cast<int>(n), 3 * D};
  const kn::QueryView q{qkv, static_cast<int>(n), static_cast<int>(heads), static_cast<int>(hd), 3 * D};
  be.attention_dense(q, std::span<const kn::KVSpan>(spans, n_spans), att, 1.0f / std::sqrt(static_cast<float>(hd)));

  if (mode != FrameMode::NonKeyframe) {  // rows end_.. (make_room made space; step() advances end_)
    const int64_t row = D * static_cast<int64_t>(sizeof(float)), qkv_row = 3 * row;
    be.copy_rows(static_cast<char*>(entry.k.data()) + cache.end_ * row, row, qkv + D, qkv_row, n, row);
    be.copy_rows(static_cast<char*>(entry.v.data()) + cache.end_ * row, row, qkv + 2 * D, qkv_row, n, row);
  }

  be.linear_scale_add(att, n, blk.proj_w, &blk.proj_b, &blk.ls1, h, x);

  float* m = ws.m.reserve(be, n * H);
  be.layer_norm(x, n, D, &blk.norm2_w, &blk.norm2_b, cfg_.ln_eps, h);
  be.linear_gelu(h, n, blk.fc1_w, &blk.fc1_b, m);
  be.linear_scale_add(m, n, blk.fc2_w, &blk.fc2_b, &blk.ls2, h, x);
}

Tensor CameraHead::step(compute::Backend& be, CameraHeadCache& cache, FrameMode mode, const RowsView& tokens) const {
  const int64_t D = cfg_.dim_in, P = cfg_.pose_dim, B = cfg_.pose_branch_hidden, n = tokens.rows;
  LINGBOT_CHECK(&be == cache.be_, "camera head: the cache was made on another backend; run every step of a cache "
                "on the backend it was made on");
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
  const bool stores = mode != FrameMode::NonKeyframe;
  if (stores) cache.make_room(n);

  // t = token_norm(camera tokens); a = LN_noaffine(t) (the adaLN input; t itself is the residual).
  CameraHeadCache::Workspace& ws = cache.ws_;
  float* t = ws.t.reserve(be, n * D);
  float* a = ws.a.reserve(be, n * D);
  float* x = ws.x.reserve(be, n * D);
  be.layer_norm(tokens.data, n, D, &token_norm_w_, &token_norm_b_, cfg_.ln_eps, t, tokens.stride());
  be.layer_norm(t, n, D, nullptr, nullptr, cfg_.adaln_eps, a);

  const int64_t iters = cache.iterations_;
  // pose: the raw accumulated sum of deltas, starting from the learned empty pose; raw[it]: its value
  // after iteration it (copied back once, activated on the host).
  float* pose = ws.pose.reserve(be, n * P);
  float* raw = ws.raw.reserve(be, iters * n * P);
  std::vector<float> start(static_cast<size_t>(n * P));
  for (int64_t r = 0; r < n; ++r) std::copy(empty_pose_.f32(), empty_pose_.f32() + P, start.begin() + r * P);
  be.upload(pose, start.data(), start.size() * sizeof(float));
  float* emb = ws.emb.reserve(be, n * D);
  float* mod = ws.mod.reserve(be, n * 3 * D);
  float* hid = ws.hid.reserve(be, n * B);
  float* delta = ws.delta.reserve(be, n * P);
  const int64_t pose_bytes = n * P * static_cast<int64_t>(sizeof(float));
  for (int64_t it = 0; it < iters; ++it) {
    be.linear(pose, n, embed_pose_w_, &embed_pose_b_, emb);
    be.silu(emb, n * D);
    be.linear(emb, n, mod_w_, &mod_b_, mod);
    be.modulate(x, a, t, mod, n, D);
    for (int64_t b = 0; b < cfg_.trunk_depth; ++b)
      run_block(be, blocks_[b], cache, cache.entries_[it * cfg_.trunk_depth + b], mode, x, n);

    be.layer_norm(x, n, D, &trunk_norm_w_, &trunk_norm_b_, cfg_.ln_eps, emb);
    be.linear_gelu(emb, n, branch_fc1_w_, &branch_fc1_b_, hid);
    be.linear(hid, n, branch_fc2_w_, &branch_fc2_b_, delta);
    if (it == 0)
      be.copy_rows(pose, pose_bytes, delta, pose_bytes, 1, pose_bytes);
    else
      be.add(pose, delta, n * P);
    be.copy_rows(raw + it * n * P, pose_bytes, pose, pose_bytes, 1, pose_bytes);
  }
  if (stores) {
    cache.end_ += n;
    cache.frames_ += n;
  }
  cache.deferred_ = mode == FrameMode::Deferred;
  if (stores && !cache.deferred_) cache.apply_history_bound();

  // Activations: translation linear, quaternion linear, FoV relu.
  Tensor out({iters, n, P});
  be.download(out.f32(), raw, static_cast<size_t>(out.numel()) * sizeof(float));
  float* o = out.f32();
  for (int64_t i = 0; i < out.numel(); ++i)
    if (i % P >= 7) o[i] = std::max(o[i], 0.0f);
  return out;
}

}  // namespace lingbot::model
