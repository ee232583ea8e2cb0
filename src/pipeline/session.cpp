#include "lingbot/session.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include "compute/phase_scope.h"
#include "core/allocator.h"
#include "core/busy_guard.h"
#include "core/error.h"
#include "model/aggregator.h"
#include "model/camera_head.h"
#include "model/dpt_head.h"
#include "model/encoder.h"
#include "model/geometry.h"
#include "pipeline/frame_values.h"
#include "pipeline/model_modules.h"
#include "pipeline/session_backend.h"

namespace lingbot {

int resolve_threads(int threads) { return threads == 0 ? std::max(1, omp_get_max_threads()) : threads; }

namespace {

SessionOptions resolve(const SessionOptions& in, const ModelConfig& cfg) {
  SessionOptions o = in;
  if (o.scale_frames == 0) o.scale_frames = static_cast<int>(cfg.kv_cache.scale_frames);
  if (o.kv_window == 0) o.kv_window = static_cast<int>(cfg.kv_cache.sliding_window);
  if (!o.cross_frame_special) o.cross_frame_special = cfg.kv_cache.cross_frame_special;
  if (!o.include_scale_frames) o.include_scale_frames = cfg.kv_cache.include_scale_frames;
  if (!o.camera_only) o.camera_only = cfg.kv_cache.camera_only;
  if (o.camera_iterations == 0) o.camera_iterations = static_cast<int>(cfg.camera.num_iterations);
  o.threads = resolve_threads(o.threads);
  o.device = resolve_device(in.device);
  LINGBOT_CHECK(o.scale_frames >= 1, "scale_frames must be >= 1, got ", o.scale_frames);
  LINGBOT_CHECK(o.kv_window >= 1, "kv_window must be >= 1, got ", o.kv_window);
  LINGBOT_CHECK(o.keyframe_interval >= 1, "keyframe_interval must be >= 1, got ", o.keyframe_interval);
  LINGBOT_CHECK(o.camera_iterations >= 1, "camera_iterations must be >= 1, got ",
                o.camera_iterations);
  LINGBOT_CHECK(o.threads >= 1, "threads must be >= 0, got ", in.threads);
  LINGBOT_CHECK(o.max_special_tokens >= 0, "max_special_tokens must be >= 0, got ",
                o.max_special_tokens);
  LINGBOT_CHECK(o.max_special_frames >= 0 && o.max_special_frames <= kMaxSpecialFrames, "max_special_frames must be in 0..",
                kMaxSpecialFrames, " (0 = keep all), got ", o.max_special_frames);
  for (const auto& [name, value, bound] : {std::tuple{"scale_frames", o.scale_frames, kMaxScaleFrames},
                                           std::tuple{"kv_window", o.kv_window, kMaxKvWindow},
                                           std::tuple{"camera_iterations", o.camera_iterations, kMaxCameraIterations},
                                           std::tuple{"threads", o.threads, kMaxThreads}})
    LINGBOT_CHECK(value <= bound, name, " must be at most ", bound, ", got ", value,
                  std::string_view(name) == "threads" && in.threads == 0 ? " (0 = all: OpenMP's thread count)" : "");
  LINGBOT_CHECK(o.kv_backend == KVBackend::Paged || o.kv_backend == KVBackend::Dense ||
                    o.kv_backend == KVBackend::DenseFull,
                "kv_backend: unknown value ", static_cast<int>(o.kv_backend));
  LINGBOT_CHECK(dtype_known(o.kv_dtype), "kv_dtype: unknown value ", static_cast<int>(o.kv_dtype));
  LINGBOT_CHECK(o.kv_backend != KVBackend::DenseFull || o.max_special_frames == 0,
                "max_special_frames does not apply to the dense-full KV backend (it keeps every frame)");
  if (const auto* p = dynamic_cast<const IntervalKeyframes*>(o.keyframe_policy.get())) {
    LINGBOT_CHECK(o.keyframe_interval == 1 || o.keyframe_interval == p->interval(), "keyframe_interval ",
                  o.keyframe_interval, " contradicts keyframe_policy IntervalKeyframes(", p->interval(),
                  "): set one of them");
    o.keyframe_interval = p->interval();  // options() reports the interval in effect
  }
  if (!o.keyframe_policy) o.keyframe_policy = std::make_shared<IntervalKeyframes>(o.keyframe_interval);
  o.keyframe_policy->check(o);
  return o;
}

}  // namespace

struct Session::Impl {
  std::shared_ptr<const Model> model;
  SessionOptions opt;
  // Where the model's ops run (declared before every buffer it allocates, so it outlives them).
  std::unique_ptr<compute::Backend> backend;
  HostAllocator allocator;
  std::unique_ptr<KVCache> cache;
  std::optional<model::CameraHeadCache> camera_cache;  // per-stream camera-token caches

  // Sequence state.
  int64_t height = 0, width = 0;  // 0 until the first frame of the sequence
  model::FrameGrid grid;
  compute::Array pos_embed;
  int64_t pushed = 0;        // frames received
  int64_t completed = 0;     // frames whose results were returned
  int64_t stored = 0;        // frames stored in the caches (drives the RoPE time index)
  int64_t steps = 0;
  bool closed = false;
  bool failed = false;  // closed by a step that threw (stopped, out of memory): its caches hold part of it
  // failed: the caches' stats before that step (stats() reports the last completed step, not the
  // partial one: a stop in the scale phase has stored no frame).
  struct CacheSnapshot {
    CacheStats cache;
    int64_t camera_frames = 0, camera_bytes = 0;
  } before_failed_step;
  compute::Scratch scale_tokens;  // encoder outputs of the buffered scale frames [n, patches, C]
  compute::Scratch frame_tokens;  // encoder output of a streamed frame [patches, C]
  compute::Scratch image;         // the frame being encoded [3, H, W], in the backend's memory
  // The reference keyframe of the policies: the last stored frame (raw pose encoding, index).
  Tensor last_stored_pose;
  int64_t last_stored_index = -1;
  bool pending = false;  // a push_frame_deferred frame awaits commit_frame / rollback_frame
  Tensor deferred_result_pose;  // push_frame_deferred: the pending frame's pose, for commit_frame
  std::atomic<bool> busy{false};  // a call that changes the session is running (BusyGuard)

  model::EncoderScratch enc_scratch;
  model::AggregatorScratch agg_scratch;
  SessionPhaseTimes phases;  // encoder, camera head, DPT head (the blocks' are in agg_scratch)
  std::vector<compute::Array> selected;

  int64_t scale_frames() const { return opt.scale_frames; }
  // The error for a push on a closed session (`call` names it).
  // The messages name no call (C++ push_frame, Python push): the caller knows which one it made.
  void check_open() const {
    check_not_failed();
    LINGBOT_CHECK(!closed, "a frame pushed after finish(): the session has finished its sequence (call reset() to start a new one)");
  }
  void check_not_failed() const {
    LINGBOT_CHECK(!failed, "the session has ended its sequence at a step that failed or was stopped (call reset() to start a "
                           "new one)");
  }
  // Runs the work of a step; when it throws, the session closes (failed) and the error goes on.
  CacheSnapshot caches_now() const {
    CacheSnapshot c;
    if (cache) c.cache = cache->stats();
    if (camera_cache) {
      c.camera_frames = camera_cache->frames();
      c.camera_bytes = camera_cache->bytes();
    }
    return c;
  }
  template <class F>
  auto step_work(F&& work) {
    const CacheSnapshot before = caches_now();
    try {
      return work();
    } catch (...) {
      closed = failed = true;
      before_failed_step = before;
      throw;
    }
  }
  void begin_sequence(int64_t H, int64_t W);
  void encode(const float* image, float* out);
  std::vector<FrameResult> run_step(int64_t first_frame, int64_t n, FrameMode mode, const float* patch_tokens);
  void run_heads(FrameMode mode, std::vector<FrameResult>& results);
  const float* encode_streamed(const float* image, int64_t H, int64_t W, std::vector<float>& tokens);
  KeyframeQuery query(int64_t idx) const;
  void note_stored(const FrameResult& r);
  void commit();
  void rollback();
  std::vector<FrameResult> push(const float* image);  // push_frame's step, after its checks
};

KeyframeQuery Session::Impl::query(int64_t idx) const {
  KeyframeQuery q;
  q.frame_index = idx;
  q.streamed_index = idx - opt.scale_frames;
  q.reference_frame = last_stored_index;
  q.reference_pose_enc = last_stored_pose.empty() ? nullptr : &last_stored_pose;
  q.height = height;
  q.width = width;
  return q;
}

void Session::Impl::note_stored(const FrameResult& r) {
  last_stored_index = r.frame_index;
  last_stored_pose = r.pose_enc.empty() ? Tensor() : r.pose_enc.clone();
}

// Ends a Deferred step: the frame stays (deferred eviction executed) or leaves every cache again.
void Session::Impl::commit() {
  cache->commit_deferred();
  if (camera_cache) camera_cache->commit_deferred();
  ++stored;
  pending = false;
}

void Session::Impl::rollback() {
  cache->rollback_deferred();
  if (camera_cache) camera_cache->rollback_deferred();
  pending = false;
}

void Session::Impl::begin_sequence(int64_t H, int64_t W) {
  const ModelConfig& cfg = model->config();
  const int64_t p = cfg.encoder.patch_size;
  height = H;
  width = W;
  grid = {H / p, W / p};
  pos_embed = ModelModules::encoder(*model).position_embedding(*backend, H, W);
  const int tpf = static_cast<int>(ModelModules::aggregator(*model).tokens_per_frame(grid));
  if (cache && cache->options().tokens_per_frame == tpf) {
    cache->reset();
    return;
  }
  CacheOptions co;
  co.num_blocks = static_cast<int>(cfg.aggregator.depth);
  co.heads = static_cast<int>(cfg.aggregator.num_heads);
  co.head_dim = static_cast<int>(cfg.aggregator.head_dim());
  co.tokens_per_frame = tpf;
  co.num_special_tokens = static_cast<int>(cfg.aggregator.num_special_tokens);
  co.scale_frames = opt.scale_frames;
  co.sliding_window = opt.kv_window;
  co.cross_frame_special = *opt.cross_frame_special;
  co.camera_only = *opt.camera_only;
  co.include_scale_frames = *opt.include_scale_frames;
  co.dtype = opt.kv_dtype;
  co.round_pages_pow2 = opt.round_pages_pow2;
  co.max_special_tokens = opt.max_special_tokens;
  co.max_special_frames = opt.max_special_frames;
  cache.reset();  // release the old pools before allocating new ones
  cache = make_session_kv_cache(*backend, opt.kv_backend, co, allocator);
}

void Session::Impl::encode(const float* image, float* out) {
  const compute::PhaseScope phase(*backend, phases.encoder);
  const int64_t n = 3 * height * width;
  backend->upload(this->image.reserve(*backend, n), image, static_cast<size_t>(n) * sizeof(float));
  ModelModules::encoder(*model).forward(*backend, this->image.data(), height, width, pos_embed, out, enc_scratch);
}

std::vector<FrameResult> Session::Impl::run_step(int64_t first_frame, int64_t n, FrameMode mode,
                                                 const float* patch_tokens) {
  const ModelConfig& cfg = model->config();
  const int64_t C = cfg.aggregator.embed_dim, Pp = grid.patches();
  const int64_t P = ModelModules::aggregator(*model).tokens_per_frame(grid);
  model::StepFrames frames;
  frames.n_frames = static_cast<int>(n);
  frames.patch_tokens = patch_tokens;
  std::vector<FrameResult> results(static_cast<size_t>(n));
  for (int64_t f = 0; f < n; ++f) {
    const int64_t idx = first_frame + f;
    // Variants by absolute position (DESIGN.md §2.6): camera/register [0] only for frame 0, scale [0]
    // only for the scale phase.
    frames.camera_variant.push_back(idx == 0 ? 0 : 1);
    frames.register_variant.push_back(idx == 0 ? 0 : 1);
    frames.scale_variant.push_back(mode == FrameMode::ScalePhase ? 0 : 1);
    // Time index: the number of frames stored before this one (a non-keyframe shares it with the
    // next keyframe).
    const int64_t t = stored + (mode == FrameMode::ScalePhase ? f : 0);
    frames.time_index.push_back(t);
    FrameResult& r = results[static_cast<size_t>(f)];
    r.frame_index = idx;
    r.is_keyframe = mode != FrameMode::NonKeyframe;
    r.frame_type = mode == FrameMode::ScalePhase    ? FrameType::Scale
                   : mode == FrameMode::NonKeyframe ? FrameType::NonKeyframe
                                                    : FrameType::Keyframe;
    r.rope_time_index = t;
    if (opt.keep_patch_tokens) {
      r.patch_tokens = Tensor({Pp, C});
      backend->download(r.patch_tokens.raw(), patch_tokens + f * Pp * C, r.patch_tokens.nbytes());
    }
  }
  if (opt.step_progress)
    frames.after_block = [this, n, depth = cfg.aggregator.depth](int64_t done) {
      opt.step_progress({n, StepProgress::Stage::Aggregator, done, depth});
    };
  ModelModules::aggregator(*model).step(*backend, grid, frames, mode, *cache, agg_scratch, selected);
  if (mode == FrameMode::ScalePhase || mode == FrameMode::Keyframe) stored += n;  // Deferred: on commit
  ++steps;
  completed += n;

  if (opt.keep_features) {
    for (int64_t f = 0; f < n; ++f) {
      FrameResult& r = results[static_cast<size_t>(f)];
      for (const compute::Array& layer : selected) {
        Tensor t({P, 2 * C});
        backend->download(t.raw(), layer.data() + f * P * 2 * C, t.nbytes());
        r.features.push_back(std::move(t));
      }
    }
  }
  run_heads(mode, results);
  backend->collect_device_times();  // the heads' results were copied back: the device is idle
  if (mode == FrameMode::ScalePhase || mode == FrameMode::Keyframe) note_stored(results.back());
  return results;
}

// Heads on the step's selected outputs `selected` ([n, P, 2C] each): the camera head reads token 0
// of the last output for all frames of the step (causally, through its own cache, with the step's
// mode); the DPT head reads each frame's patch rows of its four inputs.
void Session::Impl::run_heads(FrameMode mode, std::vector<FrameResult>& results) {
  const ModelConfig& cfg = model->config();
  const int64_t n = static_cast<int64_t>(results.size());
  const int64_t C2 = 2 * cfg.aggregator.embed_dim, S = cfg.aggregator.num_special_tokens;
  const int64_t P = ModelModules::aggregator(*model).tokens_per_frame(grid), Pp = grid.patches();
  const model::ImageSize size{static_cast<int>(height), static_cast<int>(width)};
  std::vector<model::Camera> cameras(static_cast<size_t>(n));
  if (opt.camera_head) {
    const compute::PhaseScope phase(*backend, phases.camera_head);
    const model::RowsView tokens{selected.back().data(), n, C2, P * C2};  // token 0 of each frame
    const Tensor poses = ModelModules::camera_head(*model).step(*backend, *camera_cache, mode, tokens);  // [iters, n, 9]
    const int64_t iters = poses.dim(0), D = model::kPoseEncodingDim;
    for (int64_t f = 0; f < n; ++f) {
      FrameResult& r = results[static_cast<size_t>(f)];
      r.pose_enc_iters = Tensor({iters, D});
      for (int64_t it = 0; it < iters; ++it)
        std::memcpy(r.pose_enc_iters.f32() + it * D, poses.f32() + (it * n + f) * D,
                    static_cast<size_t>(D) * sizeof(float));
      model::PoseEncoding enc;
      std::memcpy(enc.data(), r.pose_enc_iters.f32() + (iters - 1) * D, sizeof(enc));
      r.pose_enc = Tensor::from_f32({D}, enc);
      const model::Camera& cam = cameras[static_cast<size_t>(f)] = model::camera_from_pose_encoding(enc, size);
      r.extrinsic = Tensor::from_f32({3, 4}, cam.w2c);
      r.intrinsic = Tensor::from_f32({3, 3}, cam.intrinsic);
      r.extrinsic_c2w = Tensor::from_f32({3, 4}, cam.c2w);
    }
    if (!opt.depth_head && opt.step_progress) opt.step_progress({n, StepProgress::Stage::Heads, n, n});
  }
  if (opt.depth_head) {
    const compute::PhaseScope phase(*backend, phases.dpt_head);
    const auto& idx = cfg.dpt.intermediate_layer_idx;
    for (int64_t f = 0; f < n; ++f) {
      if (f > 0) backend->throw_if_stopped();  // a scale phase's heads take seconds per frame on a CPU
      FrameResult& r = results[static_cast<size_t>(f)];
      std::array<model::RowsView, 4> layers;
      for (size_t i = 0; i < layers.size(); ++i)
        layers[i] = {selected[static_cast<size_t>(idx[i])].data() + (f * P + S) * C2, Pp, C2, C2};
      model::DepthOutput d = ModelModules::dpt_head(*model).forward(*backend, layers, size);
      r.depth = std::move(d.depth);
      r.depth_conf = std::move(d.conf);
      if (opt.camera_head)
        r.world_points = model::world_points_from_depth(r.depth, cameras[static_cast<size_t>(f)], size, opt.threads);
      if (opt.step_progress) opt.step_progress({n, StepProgress::Stage::Heads, f + 1, n});
    }
  }
}

Session::Session(std::shared_ptr<const Model> model, const SessionOptions& options) : impl_(std::make_unique<Impl>()) {
  LINGBOT_CHECK(model != nullptr, "Session needs a model, got nullptr");
  impl_->opt = resolve(options, model->config());
  impl_->backend = make_session_backend(impl_->opt.device, impl_->opt.threads);
  impl_->backend->set_stop_flag(impl_->opt.stop);
  const auto& idx = model->config().dpt.intermediate_layer_idx;
  const size_t n_selected = model->config().aggregator.selected_layers.size();
  for (int64_t i : idx)
    LINGBOT_CHECK(!impl_->opt.depth_head || (i >= 0 && static_cast<size_t>(i) < n_selected),
                  "dpt.intermediate_layer_idx entry ", i, " is outside the ", n_selected,
                  " selected aggregator outputs");
  if (impl_->opt.camera_head) {
    const SessionOptions& o = impl_->opt;
    impl_->camera_cache.emplace(ModelModules::camera_head(*model).make_cache(*impl_->backend, o.camera_iterations));
    // The camera tokens the aggregator still sees: pinned scale frames, window and kept frames.
    if (o.max_special_frames > 0)
      impl_->camera_cache->set_history_bound(*o.include_scale_frames ? o.scale_frames : 0,
                                             o.kv_window + o.max_special_frames);
  }
  impl_->model = std::move(model);
}

Session::Impl& Session::impl() const {
  LINGBOT_CHECK(impl_ != nullptr, "this Session was moved from: it can only be assigned to or destroyed");
  return *impl_;
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

std::vector<FrameResult> Session::push_frame(const Tensor& image) {
  LINGBOT_CHECK(image.ndim() == 3 && image.dim(0) == 3, "image must have shape [3, H, W], got ",
                shape_str(image.shape()));
  LINGBOT_CHECK(image.dtype() == DType::F32, "image must be f32, got ", dtype_name(image.dtype()));
  return push_frame(image.f32(), image.dim(1), image.dim(2));
}

std::vector<FrameResult> Session::push_frame(const float* image, int64_t H, int64_t W) {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "Session::push_frame: this Session", kOneCallAtATime);
  s.check_open();
  LINGBOT_CHECK(!s.pending, "push_frame: frame ", s.pushed - 1,
                " awaits its decision (call commit_frame() or rollback_frame() first)");
  LINGBOT_CHECK(image != nullptr, "push_frame: image is null");
  const int64_t p = s.model->patch_size();
  LINGBOT_CHECK(H > 0 && W > 0 && H % p == 0 && W % p == 0, "image size ", H, "x", W,
                " (HxW) is not a multiple of the patch size ", p);
  pipeline::check_frame_values(image, 3 * H * W, s.pushed);
  if (s.pushed == 0) {
    s.begin_sequence(H, W);
  } else {
    LINGBOT_CHECK(H == s.height && W == s.width, "frame ", s.pushed, " has size ", H, "x", W,
                  " (HxW), but this sequence's frames are ", s.height, "x", s.width,
                  " (call reset() to start a new sequence)");
  }
  return s.step_work([&] { return s.push(image); });
}

std::vector<FrameResult> Session::Impl::push(const float* image) {
  Impl& s = *this;
  const int64_t C = s.model->config().encoder.embed_dim, Pp = s.grid.patches();
  const int64_t idx = s.pushed;
  const int64_t K = s.scale_frames();
  if (idx < K) {
    if (idx == 0) s.scale_tokens.reserve(*s.backend, K * Pp * C);  // every scale frame's tokens, kept to the step
    s.encode(image, s.scale_tokens.data() + idx * Pp * C);
    ++s.pushed;
    if (s.pushed < K) return {};
    auto results = s.run_step(0, K, FrameMode::ScalePhase, s.scale_tokens.data());
    s.scale_tokens.release();
    return results;
  }
  float* tokens = s.frame_tokens.reserve(*s.backend, Pp * C);
  s.encode(image, tokens);
  ++s.pushed;
  const KeyframePolicy& policy = *s.opt.keyframe_policy;
  const KeyframeQuery q = s.query(idx);
  if (policy.decides_before()) {
    const bool keyframe = policy.is_keyframe(q);
    return s.run_step(idx, 1, keyframe ? FrameMode::Keyframe : FrameMode::NonKeyframe, tokens);
  }
  std::vector<FrameResult> results = s.run_step(idx, 1, FrameMode::Deferred, tokens);
  s.pending = true;
  FrameResult& r = results.front();
  const KeyframeDecision d = policy.decide_after(q, r);
  r.flow = d.flow;
  r.flow_reference_frame = q.reference_frame;
  if (d.keyframe) {
    s.commit();
    s.note_stored(r);
  } else {
    s.rollback();
    r.is_keyframe = false;
    r.frame_type = FrameType::NonKeyframe;
  }
  return results;
}

FrameResult Session::push_frame_deferred(const Tensor& image) {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "Session::push_frame_deferred: this Session", kOneCallAtATime);
  s.check_open();
  LINGBOT_CHECK(!s.pending, "push_frame_deferred: frame ", s.pushed - 1,
                " awaits its decision (call commit_frame() or rollback_frame() first)");
  LINGBOT_CHECK(image.ndim() == 3 && image.dim(0) == 3 && image.dtype() == DType::F32,
                "image must be f32 [3, H, W], got ", dtype_name(image.dtype()), " ", shape_str(image.shape()));
  LINGBOT_CHECK(s.pushed >= s.scale_frames(), "push_frame_deferred: frame ", s.pushed, " is a scale frame (the first ",
                s.scale_frames(), " frames are always stored; push them with push_frame)");
  const int64_t H = image.dim(1), W = image.dim(2);
  LINGBOT_CHECK(H == s.height && W == s.width, "frame ", s.pushed, " has size ", H, "x", W,
                " (HxW), but this sequence's frames are ", s.height, "x", s.width,
                " (call reset() to start a new sequence)");
  pipeline::check_frame_values(image.f32(), image.numel(), s.pushed);
  const int64_t C = s.model->config().encoder.embed_dim, Pp = s.grid.patches();
  const int64_t idx = s.pushed;
  std::vector<FrameResult> results = s.step_work([&] {
    float* tokens = s.frame_tokens.reserve(*s.backend, Pp * C);
    s.encode(image.f32(), tokens);
    ++s.pushed;
    return s.run_step(idx, 1, FrameMode::Deferred, tokens);
  });
  s.pending = true;
  results.front().flow_reference_frame = s.last_stored_index;
  s.deferred_result_pose = results.front().pose_enc.empty() ? Tensor() : results.front().pose_enc.clone();
  return std::move(results.front());
}

void Session::commit_frame() {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "Session::commit_frame: this Session", kOneCallAtATime);
  LINGBOT_CHECK(s.pending, "commit_frame: no frame awaits a decision (push one with push_frame_deferred)");
  s.commit();
  s.last_stored_index = s.pushed - 1;
  s.last_stored_pose = std::move(s.deferred_result_pose);
}

void Session::rollback_frame() {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "Session::rollback_frame: this Session", kOneCallAtATime);
  LINGBOT_CHECK(s.pending, "rollback_frame: no frame awaits a decision (push one with push_frame_deferred)");
  s.rollback();
  s.deferred_result_pose = Tensor();
}

std::string Session::device_description() const { return impl().backend->description(); }

const KeyframePolicy& Session::keyframe_policy() const { return *impl().opt.keyframe_policy; }

std::vector<unsigned char> Session::cache_live_bytes(int block) const {
  const Impl& s = impl();
  return s.cache ? s.cache->live_bytes(block) : std::vector<unsigned char>{};
}

std::vector<unsigned char> Session::camera_cache_live_bytes() const {
  const Impl& s = impl();
  return s.camera_cache ? s.camera_cache->live_bytes() : std::vector<unsigned char>{};
}

std::vector<FrameResult> Session::finish() {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "Session::finish: this Session", kOneCallAtATime);
  s.check_not_failed();
  LINGBOT_CHECK(!s.closed, "finish() called twice: the session has finished its sequence (call reset() to start a new one)");
  LINGBOT_CHECK(!s.pending, "finish: frame ", s.pushed - 1,
                " awaits its decision (call commit_frame() or rollback_frame() first)");
  s.closed = true;
  if (s.pushed == 0 || s.pushed >= s.scale_frames()) return {};
  // Short stream: the scale phase runs on the frames received (the reference caps
  // num_scale_frames at the sequence length).
  auto results = s.step_work([&] { return s.run_step(0, s.pushed, FrameMode::ScalePhase, s.scale_tokens.data()); });
  s.scale_tokens.release();
  return results;
}

void Session::reset() {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "Session::reset: this Session", kOneCallAtATime);
  if (s.cache) s.cache->reset();
  if (s.camera_cache) s.camera_cache->reset();
  s.height = s.width = 0;
  s.pushed = s.completed = s.stored = s.steps = 0;
  s.closed = s.failed = false;
  s.scale_tokens.release();
  s.last_stored_pose = Tensor();
  s.deferred_result_pose = Tensor();
  s.last_stored_index = -1;
  s.pending = false;
}

bool Session::closed() const { return impl().closed; }
int64_t Session::frames_pushed() const { return impl().pushed; }

SessionStats Session::stats() const {
  const Impl& s = impl();
  SessionStats st;
  st.steps = s.steps;
  st.frames_completed = s.completed;
  st.phases = s.phases;
  st.phases.frame_blocks = s.agg_scratch.frame_blocks;
  st.phases.global_blocks = s.agg_scratch.global_blocks;
  // After a failed step: the last completed step's, not the partial step's.
  const Impl::CacheSnapshot caches = s.failed ? s.before_failed_step : s.caches_now();
  st.cache = caches.cache;
  st.camera_cache_frames = caches.camera_frames;
  st.camera_cache_bytes = caches.camera_bytes;
  st.rope_time_next = s.stored;
  st.decision_pending = s.pending;
  if (const std::optional<size_t> peak = s.backend->device_peak_bytes()) {
    st.device_peak_bytes = static_cast<int64_t>(*peak);
    st.device_kv_cache_bytes = st.cache.bytes_reserved;
  }
  return st;
}

const SessionOptions& Session::options() const { return impl().opt; }
const Model& Session::model() const { return *impl().model; }

}  // namespace lingbot
