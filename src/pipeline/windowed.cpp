#include "lingbot/windowed.h"

#include <algorithm>
#include <exception>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>

#include "core/busy_guard.h"
#include "core/error.h"
#include "core/rigid_transform.h"
#include "model/geometry.h"
#include "pipeline/frame_values.h"

namespace lingbot {

namespace {

// Similarity x -> s·R·x + t mapping a window's frame into window 0's.
struct Sim3 {
  float s = 1.0f;
  model::Mat3x3 R{1, 0, 0, 0, 1, 0, 0, 0, 1};
  float t[3] = {0, 0, 0};
};

const IntervalKeyframes* interval_policy(const SessionOptions& o) {
  return dynamic_cast<const IntervalKeyframes*>(o.keyframe_policy.get());
}

// The interval that converts overlap_keyframes to frames: the interval policy's; with any other
// policy keyframe_interval, as upstream converts it in flow mode too (although flow mode otherwise
// ignores it; run and Python pass 1 there).
int keyframe_interval_of(const SessionOptions& o) {
  const IntervalKeyframes* p = interval_policy(o);
  return std::max(p ? p->interval() : o.keyframe_interval, 1);
}

model::Mat3x3 matmul(const model::Mat3x3& a, const model::Mat3x3& b) {
  model::Mat3x3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) c[i * 3 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[3 + j] + a[i * 3 + 2] * b[6 + j];
  return c;
}

model::Mat3x3 rotation_of(const float* pe) { return model::quat_xyzw_to_mat(pe[3], pe[4], pe[5], pe[6]); }

// Warps one pose encoding (9 floats) in place: centre -> s·R·c + t, rotation -> R·R_c (re-encoded).
void warp_pose(float* pe, const Sim3& x) {
  const model::Mat3x3 rot = matmul(x.R, rotation_of(pe));
  float c[3];
  for (int r = 0; r < 3; ++r) c[r] = x.s * (x.R[r * 3] * pe[0] + x.R[r * 3 + 1] * pe[1] + x.R[r * 3 + 2] * pe[2]) + x.t[r];
  const std::array<float, 4> q = rotation_to_quat_xyzw(rot);
  std::copy(c, c + 3, pe);
  std::copy(q.begin(), q.end(), pe + 3);
}

// Rule 9 + 11: warps row `r` in place, cameras and world points recomputed from the warped outputs.
// Strongly exception-safe: every new tensor is made first, and the row changes only by moves after
// that, so a throw (out of memory) leaves it unwarped and whole.
void warp_in_place(FrameResult& r, const Sim3& x, model::ImageSize size, int threads) {
  const int64_t D = model::kPoseEncodingDim;
  Tensor depth = r.depth.clone();
  if (!depth.empty()) {
    float* d = depth.f32();
    for (int64_t i = 0; i < depth.numel(); ++i) d[i] *= x.s;
  }
  if (r.pose_enc.empty()) {
    r.depth = std::move(depth);
    return;
  }
  Tensor pose_enc = r.pose_enc.clone(), iters = r.pose_enc_iters.clone();
  warp_pose(pose_enc.f32(), x);
  for (int64_t it = 0; !iters.empty() && it < iters.dim(0); ++it) warp_pose(iters.f32() + it * D, x);
  model::PoseEncoding e;
  std::memcpy(e.data(), pose_enc.f32(), sizeof(e));
  const model::Camera cam = model::camera_from_pose_encoding(e, size);
  Tensor extrinsic = Tensor::from_f32({3, 4}, cam.w2c), intrinsic = Tensor::from_f32({3, 3}, cam.intrinsic),
         c2w = Tensor::from_f32({3, 4}, cam.c2w);
  Tensor points = depth.empty() ? std::move(r.world_points) : model::world_points_from_depth(depth, cam, size, threads);
  r.pose_enc = std::move(pose_enc);
  r.pose_enc_iters = std::move(iters);
  r.extrinsic = std::move(extrinsic);
  r.intrinsic = std::move(intrinsic);
  r.extrinsic_c2w = std::move(c2w);
  r.depth = std::move(depth);
  r.world_points = std::move(points);
}

bool finite_pose(const FrameResult& r) {
  if (r.pose_enc.empty()) return false;
  const float* p = r.pose_enc.f32();
  return std::all_of(p, p + 7, [](float v) { return std::isfinite(v); });
}

bool finite(const Sim3& x) {
  return std::isfinite(x.s) && std::all_of(x.R.begin(), x.R.end(), [](float v) { return std::isfinite(v); }) &&
         std::all_of(x.t, x.t + 3, [](float v) { return std::isfinite(v); });
}

// Rule 8: the similarity of `curr` (raw rows of the window) to `prev_tail` (warped rows
// [max(Lp - ov, 0), Lp) of the previous window, Lp = prev_rows). The anchor is the latest paired
// frame whose pose is finite in both windows (upstream: the latest paired frame; they differ only
// where upstream's similarity, and every later window with it, would be NaN). nullopt when no
// similarity can be found (no overlap, no camera head, no finite anchor): the window keeps its frame.
std::optional<Sim3> align(const std::vector<FrameResult>& prev_tail, int64_t prev_rows,
                          const std::vector<FrameResult>& curr, int64_t ov) {
  Sim3 x;
  if (ov <= 0 || prev_tail.empty() || curr.empty()) return std::nullopt;
  const int64_t start = std::max<int64_t>(prev_rows - ov, 0);
  const int64_t n = std::min({ov, prev_rows - start, static_cast<int64_t>(curr.size())});
  std::vector<int64_t> paired;
  for (int64_t o = 0; o < n; ++o)
    if (prev_tail[static_cast<size_t>(o)].frame_type != FrameType::NonKeyframe &&
        curr[static_cast<size_t>(o)].frame_type != FrameType::NonKeyframe)
      paired.push_back(o);
  if (paired.empty()) paired.push_back(0);
  int64_t anchor = -1;
  for (const int64_t o : paired)
    if (finite_pose(prev_tail[static_cast<size_t>(o)]) && finite_pose(curr[static_cast<size_t>(o)])) anchor = o;
  if (anchor < 0) return std::nullopt;
  const FrameResult& a = prev_tail[static_cast<size_t>(anchor)];
  const FrameResult& b = curr[static_cast<size_t>(anchor)];
  const model::Mat3x3 Ra = rotation_of(a.pose_enc.f32()), Rb = rotation_of(b.pose_enc.f32());
  model::Mat3x3 RbT{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) RbT[i * 3 + j] = Rb[j * 3 + i];
  x.R = matmul(Ra, RbT);

  // Scale: lower median of depth_prev / depth_curr over every counted pixel of the paired rows.
  std::vector<float> ratios;
  for (int64_t o : paired) {
    const Tensor& dp = prev_tail[static_cast<size_t>(o)].depth;
    const Tensor& dc = curr[static_cast<size_t>(o)].depth;
    if (dp.empty() || dc.empty()) continue;
    for (int64_t i = 0; i < dc.numel(); ++i) {
      const float p = dp.f32()[i], c = dc.f32()[i];
      if (std::isfinite(p) && std::isfinite(c) && std::abs(c) > std::numeric_limits<float>::epsilon())
        ratios.push_back(p / c);
    }
  }
  if (!ratios.empty()) {
    const auto mid = ratios.begin() + static_cast<std::ptrdiff_t>((ratios.size() - 1) / 2);
    std::nth_element(ratios.begin(), mid, ratios.end());
    x.s = std::clamp(*mid, 1e-3f, 1e3f);
  }
  const float* ca = a.pose_enc.f32();
  const float* cb = b.pose_enc.f32();
  for (int r = 0; r < 3; ++r)
    x.t[r] = ca[r] - x.s * (x.R[r * 3] * cb[0] + x.R[r * 3 + 1] * cb[1] + x.R[r * 3 + 2] * cb[2]);
  if (!finite(x)) return std::nullopt;
  return x;
}

}  // namespace

int windowed_kv_window(int kv_window, int pinned_frames, const WindowedOptions& w) {
  if (kv_window < 1 || kv_window > kMaxKvWindow) return kv_window;
  return std::min(kv_window, std::max(1, w.window_size - pinned_frames));
}

int64_t windowed_span(int scale_frames, int window_size, int keyframe_interval) {
  return scale_frames + int64_t{std::max(window_size - scale_frames, 0)} * keyframe_interval;
}

namespace {
// The KV window asked for, the model's default resolved (0 = the default, as Session resolves it).
int asked_kv_window(const Model& model, const SessionOptions& so) {
  return so.kv_window ? so.kv_window : static_cast<int>(model.config().kv_cache.sliding_window);
}

// The options of the session every window runs in (windowed_kv_window; defaults resolved first).
SessionOptions window_session_options(const Model* model, SessionOptions so, const WindowedOptions& w) {
  if (!model) return so;  // Session reports it
  const ModelConfig& c = model->config();
  const int K = so.scale_frames ? so.scale_frames : static_cast<int>(c.kv_cache.scale_frames);
  const bool pinned = so.include_scale_frames.value_or(c.kv_cache.include_scale_frames);
  so.kv_window = windowed_kv_window(asked_kv_window(*model, so), pinned ? K : 0, w);
  return so;
}
}  // namespace

int64_t windowed_overlap(const WindowedOptions& w, const SessionOptions& o) {
  const int64_t K = o.scale_frames;
  if (w.overlap_keyframes) return std::max<int64_t>(K, int64_t{*w.overlap_keyframes} * keyframe_interval_of(o));
  if (w.overlap_size) return *w.overlap_size;
  return K;
}

namespace {
void check_window_fields(const WindowedOptions& w) {
  LINGBOT_CHECK(w.window_size >= 1, "window_size must be >= 1, got ", w.window_size);
  LINGBOT_CHECK(!w.overlap_size || *w.overlap_size >= 0, "overlap_size must be >= 0, got ",
                *w.overlap_size);
  LINGBOT_CHECK(!w.overlap_keyframes || *w.overlap_keyframes >= 1,
                "overlap_keyframes must be >= 1 (the overlap is at least the scale frames; no "
                "overlap: overlap_size = 0), got ",
                *w.overlap_keyframes);
  LINGBOT_CHECK(!(w.overlap_size && w.overlap_keyframes),
                "set overlap_size or overlap_keyframes, not both");
}
}  // namespace

void check_windowed_options(const WindowedOptions& w, const SessionOptions& o) {
  const int64_t K = o.scale_frames;
  check_window_fields(w);
  const int64_t ov = windowed_overlap(w, o);
  // Named by the fields (the Python keywords too), so the message says which value to change.
  const std::string overlap = w.overlap_keyframes
                                  ? detail::concat("overlap_keyframes ", *w.overlap_keyframes, " (= ", ov, " frames)")
                                  : detail::concat("overlap_size ", ov);
  if (interval_policy(o)) {
    const int64_t n = keyframe_interval_of(o);
    const int64_t L = windowed_span(static_cast<int>(K), w.window_size, static_cast<int>(n));
    LINGBOT_CHECK(ov < L, overlap, " must be smaller than a window (", L, " frames: scale_frames ", K,
                  " + (window_size ", w.window_size, " - ", K, ") keyframes x keyframe_interval ", n, ")");
  } else {
    LINGBOT_CHECK(w.window_size >= ov + K, "window_size ", w.window_size, " must be at least ", overlap,
                  " + scale_frames ", K, " with keyframes chosen while running (keyframe_interval 'flow'), "
                  "or consecutive windows would not overlap by it");
  }
}

// Whether the window being filled may still grow (rows past its tail stay held for the overlap) or
// is the last one (every row can go).
enum class WindowEnd : uint8_t { Open, Final };

struct WindowedSession::Impl {
  Session session;
  SessionOptions reported;  // session.options() with the kv_window asked for (windowed_kv_window)
  WindowedOptions wo;
  WindowObserver obs;
  bool fixed = true;
  int64_t K = 0, ov = 0, L = 0, target_keyframes = 0, min_rows = 0;
  int64_t pushed = 0;
  bool finished = false;
  bool failed = false;  // a step threw (stopped, out of memory): closed for good
  std::atomic<bool> busy{false};  // a call that changes the session is running (BusyGuard)
  model::ImageSize size;

  std::vector<WindowInfo> windows;
  std::vector<FrameResult> rows;  // the current window's rows (moved out once delivered)
  int64_t delivered = 0;          // rows of the current window returned so far
  int64_t warped = 0;             // rows [0, warped) are warped in place already (never twice)
  int64_t keyframes = 0;          // streamed keyframes of the current window
  bool full = false;              // the current window has all its rows (it ends unless the sequence does)
  std::optional<Sim3> xf;         // the current window's similarity, once known
  int64_t rows_before = 0;        // rows of earlier windows (row ids in processing order)
  std::deque<std::pair<int64_t, Tensor>> recent;  // the last ov input frames (sequence index, image)
  std::vector<FrameResult> prev_tail;             // warped rows [max(Lp - ov, 0), Lp) of the previous window
  int64_t prev_rows = 0;

  Impl(std::shared_ptr<const Model> model, const SessionOptions& so, const WindowedOptions& w, WindowObserver o)
      : session(model, window_session_options(model.get(), so, w)), wo(w), obs(std::move(o)) {
    const SessionOptions& r = session.options();
    reported = r;
    reported.kv_window = asked_kv_window(*model, so);  // the Session above has checked model
    // The overlap rules (check_windowed_options) matter only once a second window begins: a sequence
    // that fits in one window runs with any overlap, as upstream (which clamps it to the length).
    check_window_fields(wo);
    K = r.scale_frames;
    ov = windowed_overlap(wo, r);
    fixed = interval_policy(r) != nullptr;
    if (fixed) LINGBOT_CHECK(r.keyframe_policy->decides_before(), "internal: interval policy decides after");
    L = windowed_span(r.scale_frames, wo.window_size, keyframe_interval_of(r));
    target_keyframes = wo.window_size - K;
    min_rows = fixed ? L : wo.window_size;  // rows of any window that is not the last
  }

  WindowInfo& current() { return windows.back(); }

  void begin_window(int64_t start) {
    WindowInfo info;
    info.index = static_cast<int64_t>(windows.size());
    info.start = start;
    windows.push_back(info);
    rows.clear();
    delivered = warped = keyframes = 0;
    full = false;
    xf.reset();
    if (info.index == 0) set_transform(Sim3{}, /*aligned=*/true);
  }

  // `aligned`: x came from the overlap (or is window 0's identity); else x is the identity and the
  // window keeps its own world frame (overlap 0, no finite pose to align by).
  void set_transform(const Sim3& x, bool aligned) {
    xf = x;
    WindowInfo& w = current();
    w.aligned = aligned;
    w.scale = x.s;
    w.transform = {x.R[0], x.R[1], x.R[2], x.t[0], x.R[3], x.R[4], x.R[5], x.t[1],
                   x.R[6], x.R[7], x.R[8], x.t[2], 0,      0,      0,      1};
  }

  // The results of one push into the window's session.
  void absorb(std::vector<FrameResult>&& results) {
    if (results.empty()) return;
    const int64_t w = current().index, start = current().start;
    const SessionStats stats = session.stats();
    current().cache = stats.cache;
    if (obs.on_step)
      obs.on_step(w, start + results.front().frame_index, static_cast<int64_t>(results.size()),
                  results.front().rope_time_index, stats);
    for (FrameResult& r : results) {
      r.frame_index += start;
      if (r.flow_reference_frame >= 0) r.flow_reference_frame += start;
      r.window_index = w;
      if (obs.on_row) obs.on_row(w, rows_before + static_cast<int64_t>(rows.size()), r);
      if (r.frame_type == FrameType::Keyframe) ++keyframes;
      rows.push_back(std::move(r));
    }
    full = fixed ? static_cast<int64_t>(rows.size()) >= L : keyframes >= target_keyframes;
  }

  void feed(const Tensor& image) { absorb(session.push_frame(image)); }

  void try_align(WindowEnd end) {
    if (xf) return;
    const int64_t need = std::min(ov, prev_rows);
    if (static_cast<int64_t>(rows.size()) < need && !(end == WindowEnd::Final && !rows.empty())) return;
    const std::optional<Sim3> x = align(prev_tail, prev_rows, rows, ov);
    set_transform(x.value_or(Sim3{}), x.has_value());
  }

  // Moves the rows that are final now (all of them when the window is final) into `out`, warped.
  void deliver(WindowEnd end, std::vector<FrameResult>& out) {
    if (!xf) return;
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t upto = end == WindowEnd::Final ? n : std::min(n, std::max(min_rows, n) - ov);
    if (upto <= delivered) return;
    warp_upto(upto);  // may throw (out of memory) before any row left `rows`
    out.reserve(out.size() + static_cast<size_t>(upto - delivered));
    for (; delivered < upto; ++delivered) out.push_back(std::move(rows[static_cast<size_t>(delivered)]));
  }

  // Warps rows [warped, n) in place. A throw (out of memory) leaves the row it was warping unwarped
  // and every row whole, so finish_early() still returns them, each warped once.
  void warp_upto(int64_t n) {
    for (; warped < n; ++warped) warp_in_place(rows[static_cast<size_t>(warped)], *xf, size, session.options().threads);
  }

  // After a push threw: true when it changed nothing (the frame was refused before its step).
  bool push_changed_nothing(int64_t frames_before, int64_t windows_before) const {
    return !session.closed() && session.frames_pushed() == frames_before &&
           static_cast<int64_t>(windows.size()) == windows_before;
  }

  // Frame `index` of the sequence must have the first frame's size: the window's own session
  // checks it only against its window's first frame, and a new window starts with a fresh one.
  void check_size(const Tensor& image, int64_t index) const {
    const int64_t h = image.dim(1), w = image.dim(2);
    LINGBOT_CHECK(h == size.height && w == size.width, "frame ", index, " has size ", h, "x", w,
                  " (HxW), but this sequence's frames are ", size.height, "x", size.width);
  }

  // First frame of the window after the current (full) one.
  int64_t next_start() const {
    const int64_t end = windows.back().start + static_cast<int64_t>(rows.size());
    return fixed ? windows.back().start + L - ov : std::max(end - ov, windows.back().start + K);
  }

  // The current window is full and a further frame arrived: it is not the last one.
  void next_window() {
    check_windowed_options(wo, session.options());
    windows.reserve(windows.size() + 1);  // begin_window's push_back cannot throw once rows have moved
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t end = current().start + n;
    current().end = end;
    const int64_t tail = std::max<int64_t>(n - ov, 0);
    LINGBOT_CHECK(delivered == tail && xf, "internal: window ", current().index, " delivered ", delivered,
                  " rows before its tail of ", n - tail);
    warp_upto(n);  // may throw (out of memory) with every row still in place
    prev_tail.clear();
    prev_tail.reserve(static_cast<size_t>(n - tail));
    for (int64_t r = tail; r < n; ++r) prev_tail.push_back(std::move(rows[static_cast<size_t>(r)]));
    prev_rows = n;
    rows_before += n;
    const int64_t start = next_start();
    session.reset();
    begin_window(start);
    for (const auto& [idx, img] : recent)
      if (idx >= start) feed(img);
  }
};

WindowedSession::WindowedSession(std::shared_ptr<const Model> model, const SessionOptions& options,
                                 const WindowedOptions& windowed, WindowObserver observer)
    : impl_(std::make_unique<Impl>(std::move(model), options, windowed, std::move(observer))) {}
WindowedSession::~WindowedSession() = default;
WindowedSession::WindowedSession(WindowedSession&&) noexcept = default;
WindowedSession& WindowedSession::operator=(WindowedSession&&) noexcept = default;

WindowedSession::Impl& WindowedSession::impl() const {
  LINGBOT_CHECK(impl_ != nullptr, "this WindowedSession was moved from: it can only be assigned to or destroyed");
  return *impl_;
}

std::vector<FrameResult> WindowedSession::push_frame(const Tensor& image) {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "WindowedSession::push_frame: this WindowedSession", kOneCallAtATime);
  LINGBOT_CHECK(!s.failed, "the windowed session has ended its sequence at a step that failed or was stopped");
  LINGBOT_CHECK(!s.finished, "a frame pushed after finish(): the windowed session has finished its sequence");
  LINGBOT_CHECK(image.ndim() == 3 && image.dim(0) == 3, "image must have shape [3, H, W], got ", shape_str(image.shape()));
  LINGBOT_CHECK(image.dtype() == DType::F32, "image must be f32, got ", dtype_name(image.dtype()));
  pipeline::check_frame_values(image.f32(), image.numel(), s.pushed);  // the window's session would say its own index
  if (!s.windows.empty()) s.check_size(image, s.pushed);
  // A throw once the push changed anything (a step stopped or failed, the window's session took the
  // frame, a window begun, out of memory) closes the windowed session for good: the next window's
  // reset() would otherwise reopen its session with the rows out of step. A frame refused before
  // its step leaves everything as it was, and the session open.
  struct CloseOnThrow {
    Impl& s;
    int64_t frames_before, windows_before;
    int uncaught = std::uncaught_exceptions();
    ~CloseOnThrow() {
      if (std::uncaught_exceptions() <= uncaught) return;
      if (s.push_changed_nothing(frames_before, windows_before)) return;
      s.failed = true;
    }
  } guard{s, s.session.frames_pushed(), static_cast<int64_t>(s.windows.size())};
  // The frame counts as pushed once the window's session took it, also when its step then failed or
  // was stopped: frames_pushed() agrees with a Session's.
  const auto feed = [&] {
    const int64_t before = s.session.frames_pushed();
    try {
      s.feed(image);
    } catch (...) {
      if (s.session.frames_pushed() > before) ++s.pushed;
      throw;
    }
  };
  std::vector<FrameResult> out;
  if (s.windows.empty()) {
    s.size = {static_cast<int>(image.dim(1)), static_cast<int>(image.dim(2))};
    s.begin_window(0);
    try {
      feed();
    } catch (...) {
      if (s.session.frames_pushed() == 0 && !s.session.closed()) s.windows.clear();  // refused: as if never pushed
      throw;
    }
  } else {
    if (s.full) s.next_window();  // its rows are delivered below, after this frame's step
    feed();
  }
  if (s.ov > 0) {
    s.recent.emplace_back(s.pushed, image.clone());
    while (static_cast<int64_t>(s.recent.size()) > s.ov) s.recent.pop_front();
  }
  ++s.pushed;
  s.try_align(WindowEnd::Open);
  s.deliver(WindowEnd::Open, out);
  return out;
}

std::vector<FrameResult> WindowedSession::finish() {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "WindowedSession::finish: this WindowedSession", kOneCallAtATime);
  LINGBOT_CHECK(!s.failed, "the windowed session has ended its sequence at a step that failed or was stopped");
  LINGBOT_CHECK(!s.finished, "finish() called twice: the windowed session has finished its sequence");
  std::vector<FrameResult> out;
  if (s.windows.empty()) {
    s.finished = true;
    return out;
  }
  try {
    s.absorb(s.session.finish());  // a last window shorter than the scale frames runs its scale phase here
  } catch (...) {
    s.failed = true;  // closed; finish_early() still returns what was computed
    throw;
  }
  s.current().end = s.current().start + static_cast<int64_t>(s.rows.size());
  try {
    s.try_align(WindowEnd::Final);
    s.deliver(WindowEnd::Final, out);
  } catch (...) {
    s.failed = true;  // out of memory: finish_early() still returns the rows, none lost
    throw;
  }
  s.finished = true;
  s.recent.clear();
  return out;
}

std::vector<FrameResult> WindowedSession::finish_early() {
  Impl& s = impl();
  const BusyGuard busy(s.busy, "WindowedSession::finish_early: this WindowedSession", kOneCallAtATime);
  LINGBOT_CHECK(!s.finished, "finish_early() after finish(): the windowed session has finished its sequence");
  s.finished = true;
  std::vector<FrameResult> out;
  if (s.windows.empty()) return out;
  if (s.rows.empty() && s.current().end < 0) s.current().end = s.current().start;  // begun, no row: empty
  if (!s.rows.empty()) {
    s.current().end = s.current().start + static_cast<int64_t>(s.rows.size());
    s.try_align(WindowEnd::Final);
    s.deliver(WindowEnd::Final, out);
  }
  // The previous window's tail (warped already) for the frames the new window has no row of yet.
  const int64_t last = out.empty() ? s.current().start - 1 + s.delivered : out.back().frame_index;
  for (FrameResult& r : s.prev_tail)
    if (r.frame_index > last) out.push_back(std::move(r));
  s.prev_tail.clear();
  s.recent.clear();
  return out;
}

bool WindowedSession::next_push_runs_scale_phase() const {
  const Impl& s = impl();
  if (s.failed || s.finished) return false;
  const int64_t K = s.K;
  if (s.windows.empty()) return K == 1;
  if (!s.full) return s.session.frames_pushed() + 1 == K;
  // A new window begins: the recent frames from its start are fed again, then this one.
  const int64_t start = s.next_start();
  int64_t refed = 0;
  for (const auto& entry : s.recent) refed += entry.first >= start ? 1 : 0;
  return refed + 1 >= K;
}

bool WindowedSession::finish_runs_scale_phase() const {
  const Impl& s = impl();
  if (s.failed || s.finished || s.windows.empty()) return false;
  const int64_t n = s.session.frames_pushed();
  return n > 0 && n < s.K;
}

bool WindowedSession::closed() const { return impl().failed || impl().finished; }
const std::vector<WindowInfo>& WindowedSession::windows() const { return impl().windows; }
int64_t WindowedSession::overlap() const { return impl().ov; }
int64_t WindowedSession::frames_pushed() const { return impl().pushed; }
const SessionOptions& WindowedSession::options() const { return impl().reported; }
std::string WindowedSession::device_description() const { return impl().session.device_description(); }
SessionStats WindowedSession::stats() const { return impl().session.stats(); }

}  // namespace lingbot
