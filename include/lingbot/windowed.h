#pragma once
// lingbot::WindowedSession: upstream's windowed inference (GCTStream.inference_windowed, demo.py
// --mode windowed) for sequences longer than the ~320 stored frames the video RoPE was trained on,
// streamed frame by frame.
//
// The sequence is cut into overlapping windows. Each window runs with a fresh cache (aggregator and
// camera head, RoPE time 0): its first scale_frames frames are its scale phase, later frames stream
// with the session's keyframe policy. Windows are formed as upstream forms them:
//   * overlap ov: overlap_keyframes ? max(K, overlap_keyframes · n) : overlap_size ? overlap_size : K
//                 (K = scale frames; n = the IntervalKeyframes interval; with any other policy
//                 SessionOptions::keyframe_interval, as upstream converts it in flow mode too)
//   * IntervalKeyframes policy: fixed windows of L = K + max(window_size - K, 0) · interval frames, window k
//     starting at k · (L - ov); the last one ends with the sequence.
//   * any other policy (FlowKeyframes): a window streams until it has stored window_size - K
//     keyframes (it ends on a keyframe) or the sequence ends; the next starts ov frames before its end.
// Window w >= 1 is aligned to window w-1 (after that one's alignment) by a similarity (s, R, t) from
// their overlap: R from the latest frame that is stored in both and has a finite pose in both
// (anchor), s = the lower median of the depth ratios over all such frames (clamped to [1e-3, 1e3]),
// t from the anchor's camera centres. Without an anchor (overlap 0, no finite pose) the window keeps
// its own frame: identity, WindowInfo::aligned false.
// Every row is warped (centre -> s·R·c + t, rotation -> R·R_c re-encoded as a unit quaternion with
// w >= 0, depth -> s·depth; cameras and world points recomputed from them), and the output takes
// rows [0, L_w - ov) of every non-final window and all rows of the final one.
//
// Streaming: push_frame() returns the frames that became final with this push (warped, in frame
// order, each exactly once); finish() returns the rest. A row is final as soon as its window's
// transform is known and it is certain that no later window replaces it, so output lags the input by
// at most the overlap (plus the first window's scale phase). Only the current window's rows and the
// last `ov` input frames are held.
// Frame indices in results are positions in the whole sequence; rope_time_index is window-local.
// Not thread-safe, as Session: one thread at a time per WindowedSession (an overlapping push or
// finish, also one from the window observer, throws Error and changes nothing).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/session.h"

namespace lingbot {

// The front ends' windowed-mode defaults (run --window-size / --overlap-size, Python window_size= /
// overlap_size=), upstream demo.py's.
inline constexpr int kDefaultWindowSize = 64;
inline constexpr int kDefaultOverlapSize = 16;

struct WindowedOptions {
  int window_size = kDefaultWindowSize;  // stored frames per window (its scale frames + keyframes)
  std::optional<int> overlap_size;       // overlap in frames, >= 0 (default: the scale frames; run and
                                         // the Python module default to 16)
  std::optional<int> overlap_keyframes;  // overlap in keyframes, >= 1 (not with overlap_size)
};

// One window: bounds and its similarity to window 0's frame.
struct WindowInfo {
  int64_t index = 0;
  int64_t start = 0;           // first frame (inclusive)
  int64_t end = -1;            // last frame + 1; -1 while the window is still open
  bool aligned = false;        // scale / transform found from the overlap (window 0: the identity); stays
                               // false, with the identity (the window keeps its own world frame), with
                               // overlap 0 or when no overlap frame has a finite pose in both windows
  float scale = 1.0f;          // s
  std::array<float, 16> transform{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};  // [[R, t], [0, 1]] row-major (s not in it)
  CacheStats cache;            // the window session's KV cache after the window's last step so far
};

// Observation hooks (verification, tracing); called synchronously. Rows are in processing order.
struct WindowObserver {
  // After every forward call of a window's session: window index, first frame (sequence index),
  // frames in the call, first RoPE time index and the window session's stats after the call (and its
  // decision).
  std::function<void(int64_t window_index, int64_t first_frame, int64_t frames, int64_t rope_time_start,
                     const SessionStats& stats)>
      on_step;
  // Every raw (unwarped, window-local) row as computed; frame_index is the sequence index.
  std::function<void(int64_t window_index, int64_t row, const FrameResult& raw)> on_row;
};

// Throws lingbot::Error naming the field when the options cannot form windows that overlap by exactly
// ov frames: window_size < 1, overlap < 0, overlap >= the window length L (fixed
// windows), or window_size < ov + K (windows formed by keyframes). WindowedSession checks the first two
// at construction and the rest when a second window would begin (a sequence that fits in one window
// needs no overlap); call this up front to reject such options before any work. `resolved`: options
// with every default filled in, as Session::options() returns them (scale_frames 0 there would be
// taken as 0 frames, not as the model's default).
void check_windowed_options(const WindowedOptions& w, const SessionOptions& resolved);
int64_t windowed_overlap(const WindowedOptions& w, const SessionOptions& resolved);  // ov, before clamping
// The KV window a window's session runs with: a window stores at most window_size frames (its scale
// frames + keyframes), so a KV window beyond what the window can fill besides its pinned frames would
// only reserve cache pages no window uses (the results are the same):
// min(kv_window, max(1, window_size - pinned_frames)), pinned_frames = the scale frames when the cache
// pins them (kv_cache.include_scale_frames, as released), else 0 (the window then counts them).
// A kv_window outside 1..kMaxKvWindow is returned as given (for the options check to report).
// WindowedSession::options() reports the kv_window asked for.
int windowed_kv_window(int kv_window, int pinned_frames, const WindowedOptions& w);
// Frames a window spans with interval keyframes: scale_frames + (window_size - scale_frames) x
// keyframe_interval (with flow keyframes a window runs until it has stored window_size frames).
int64_t windowed_span(int scale_frames, int window_size, int keyframe_interval);

class WindowedSession {
 public:
  // Session options as for Session (keyframe_policy: IntervalKeyframes -> fixed windows, any other
  // policy -> windows formed by keyframes).
  WindowedSession(std::shared_ptr<const Model> model, const SessionOptions& options, const WindowedOptions& windowed,
                  WindowObserver observer = {});
  ~WindowedSession();
  WindowedSession(WindowedSession&&) noexcept;
  WindowedSession& operator=(WindowedSession&&) noexcept;

  // image: f32 [3, H, W] as for Session::push_frame. Returns the frames that became final.
  std::vector<FrameResult> push_frame(const Tensor& image);
  // Ends the sequence and returns every remaining frame. Afterwards push_frame throws, as it does
  // after a push that threw (SessionOptions::stop, out of memory): a windowed session has no reset.
  std::vector<FrameResult> finish();
  // Ends the sequence early (the input failed, or the caller stopped) without running the model
  // again: returns the rows already computed and not yet returned (the current window's tail held
  // back for the overlap; when a new window has no rows yet, the previous window's tail), aligned as
  // far as known. Frames still waiting for a scale phase give no result. Also after a push that
  // threw. Afterwards push_frame throws.
  std::vector<FrameResult> finish_early();

  // Whether the next push_frame() / finish() runs a scale phase: a window's first scale_frames frames
  // attended together, the long step (a caller may then let Ctrl-C stop it at once through
  // SessionOptions::stop). A new window's scale phase runs in the push that begins it when the overlap
  // re-feeds at least scale_frames - 1 frames.
  bool next_push_runs_scale_phase() const;
  bool finish_runs_scale_phase() const;
  // True after finish() / finish_early(), or after a step that failed or was stopped (a frame refused
  // before its step, e.g. of another size, leaves the session open).
  bool closed() const;
  const std::vector<WindowInfo>& windows() const;  // every window begun so far; valid until the next
                                                    // push_frame / finish / finish_early
  int64_t overlap() const;                          // ov
  int64_t frames_pushed() const;                    // frames taken, as Session's (a stopped step's included)
  const SessionOptions& options() const;            // resolved
  std::string device_description() const;          // as Session::device_description
  SessionStats stats() const;                       // the current window's session

 private:
  struct Impl;
  Impl& impl() const;  // throws Error on a moved-from object
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot
