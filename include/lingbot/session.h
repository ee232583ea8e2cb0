#pragma once
// lingbot::Session: streaming inference over one video sequence.
//
// Protocol (the reference's `inference_streaming`, frame by frame):
//   * The first `scale_frames` frames form the scale phase. push_frame() encodes each of them at once
//     but returns nothing until the last one arrives; then the scale frames are processed together
//     (bidirectional global attention), stored in the KV cache, and all their results are returned
//     by that push, in frame order.
//   * Every later push processes its frame immediately and returns exactly that frame's result.
//     The keyframe policy (keyframe_policy.h; default: every keyframe_interval-th frame, i.e. frame
//     i >= scale_frames is a keyframe iff (i - scale_frames) % keyframe_interval == 0) decides which
//     frames are stored; a non-keyframe attends to the cache plus its own tokens and is never stored.
//     A policy that decides after the frame ran (FlowKeyframes) runs it with eviction deferred, then
//     commits it or rolls it back (aggregator cache, camera-head caches and RoPE time index exactly
//     as before), all inside the same push.
//   * Deciding by hand: push_frame_deferred() runs one streamed frame with eviction deferred and
//     returns its result (frame_type still undecided); commit_frame() makes it a keyframe,
//     rollback_frame() a non-keyframe. One of them must come before the next push or finish().
//   * finish() ends the sequence: if fewer than scale_frames frames were pushed, it runs the scale
//     phase on those frames (as the reference does for a short stream) and returns their results;
//     otherwise it returns nothing. After finish() the session is closed: push_frame() throws until
//     reset(). A step that throws (a stopped one: SessionOptions::stop) closes it as well.
//   * reset() forgets the sequence (cache emptied without reallocating) and reopens the session;
//     the next frame may have a different size.
// Frames of one sequence must all have the same size. A Session is not thread-safe; use one per
// stream (they may share a Model). A call that changes it (push, commit/rollback, finish, reset)
// while another such call runs, from another thread or from its own keyframe policy, throws Error
// ("... is already running a call ...") and changes nothing; the const readers (stats(), ...) are
// not checked and must not overlap those calls either.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lingbot/cache_stats.h"
#include "lingbot/dtype.h"
#include "lingbot/keyframe_policy.h"
#include "lingbot/model.h"
#include "lingbot/device.h"
#include "lingbot/phase_time.h"
#include "lingbot/tensor.h"

namespace lingbot {

// Upper bounds of SessionOptions' counts (the constructor refuses more). Beyond them no run can be
// useful on any machine this engine targets (the release model stores 8 scale frames + 64); they
// also keep every derived count inside 32-bit ranges. `run` checks its options against the same.
inline constexpr int kMaxScaleFrames = 1024;
inline constexpr int kMaxKvWindow = 1 << 20;
inline constexpr int kMaxCameraIterations = 64;
inline constexpr int kMaxThreads = 4096;
// max_special_frames: each kept frame's specials take ~0.6 MB of K/V at the release size, so 2^30 is
// far past any machine (and sums with kv_window stay far from overflowing).
inline constexpr int64_t kMaxSpecialFrames = int64_t{1} << 30;

// Where a forward step is (SessionOptions::step_progress). A step runs the aggregator's blocks over its
// frames, then the heads frame by frame; the scale phase is one step over all the scale frames, which
// can take minutes on a CPU.
struct StepProgress {
  enum class Stage { Aggregator, Heads };
  int64_t frames = 0;  // frames the step runs: the scale frames in the scale phase, else 1
  Stage stage = Stage::Aggregator;
  // Aggregator: blocks finished of the model's depth (0: the step starts). Heads: frames whose heads have finished, of
  // `frames` (the camera head runs all of them at once, the DPT head one frame at a time).
  int64_t done = 0, total = 0;
};

struct SessionOptions {
  // Where the model runs. cpu (default) | cuda (a -DLINGBOT_CUDA=ON build and a visible GPU; else the
  // Session constructor throws naming what is missing) | auto (cuda when available, else cpu).
  Device device = Device::Cpu;
  KVBackend kv_backend = KVBackend::Paged;  // paged | dense | dense-full
  DType kv_dtype = DType::F32;           // storage dtype of the aggregator K/V cache
  // Scale frames: num_scale_frames of the protocol and the cache's pinned scale frames (one value,
  // as in the reference runs). 0 = the model's default (ModelConfig::kv_cache.scale_frames).
  int scale_frames = 0;
  int kv_window = 0;                       // stored frames in the cache window besides the scale frames; 0 = model default
  // Cache visibility rules (upstream's kv_cache options; unset = ModelConfig::kv_cache, which the
  // released model sets to true / true / false):
  //   cross_frame_special: a frame evicted from the window keeps its special tokens (camera,
  //     registers, scale) visible to later frames; false: nothing of it stays visible (the paged
  //     cache still stores the specials of every stored frame).
  //   include_scale_frames: the scale frames are pinned (never evicted, not counted in kv_window);
  //     false: they are ordinary window frames, evicted oldest first like the rest.
  //   camera_only: with cross_frame_special, an evicted frame keeps only its camera token visible
  //     (1 instead of all num_special_tokens).
  std::optional<bool> cross_frame_special;
  std::optional<bool> include_scale_frames;
  std::optional<bool> camera_only;
  int keyframe_interval = 1;               // >= 1; 1 = every frame is stored (when keyframe_policy is null)
  // Which streamed frames are stored; null = IntervalKeyframes(keyframe_interval). Shared, immutable.
  std::shared_ptr<const KeyframePolicy> keyframe_policy;
  int camera_iterations = 0;               // camera-head refinement iterations; 0 = model default
  int threads = 0;                         // OpenMP threads; 0 = all available. Results do not depend on it.
                                           // The engine tiles every GEMM over these threads and so sets
                                           // OpenBLAS to one thread for the whole process on its first
                                           // GEMM (openblas_set_num_threads(1); OpenBLAS 0.3.21 has no
                                           // per-call setting): a host's own BLAS calls then run on one.
  bool camera_head = true;                 // run the camera head (pose, extrinsic, intrinsic)
  bool depth_head = true;                  // run the DPT head (depth, confidence; world points need both)
  bool keep_features = false;              // fill FrameResult::features (4 x [P, 2C] f32 a frame: ~33 MB at
                                           // 518x378 on the released model; Python: features=)
  bool keep_patch_tokens = false;          // fill FrameResult::patch_tokens
  bool round_pages_pow2 = false;           // paged cache: round patch pages up (padding is masked)
  // Limit on the special tokens the KV cache holds per block (paged: num_special_tokens per stored
  // frame whose specials are not dropped; dense, dense-full: the kept specials of evicted frames);
  // 0 = unlimited. A check, not a bound: nothing is dropped to stay under it. The push whose frame
  // would exceed it throws Error before the cache changes, and the session is then closed until
  // reset(), as after any failed step. To bound a stream's cost, use max_special_frames.
  int64_t max_special_tokens = 0;
  // Bounded cost forever: of the frames evicted from the cache window only the newest
  // max_special_frames keep their special tokens (the older ones' are dropped), and the camera
  // head's causal cache keeps only the pinned scale frames and the newest kv_window +
  // max_special_frames stored frames. Memory and per-frame cost then stop growing; outputs move
  // (docs/long-streams.md "Long and live streams"). 0 = keep every frame's (upstream); at most
  // kMaxSpecialFrames.
  int64_t max_special_frames = 0;
  // A flag the caller may set at any time, from another thread or a signal handler, to end the
  // push_frame() / finish() in progress early (Ctrl-C during a long scale phase): checked before
  // each frame's encoder, each aggregator block and each head (each frame's, for the depth head),
  // so the step ends within about one block's time. That step throws lingbot::Stopped, its frames give no result, and the session is
  // closed (its caches hold a partial step) until reset(). Not owned; null = never stopped.
  const std::atomic<bool>* stop = nullptr;
  // Called on the thread running the step as it starts, after each aggregator block and after each
  // frame's heads, in every step (the caller shows what it needs: `run` shows steps of more than one frame). An
  // exception it throws fails the step, which closes the session until reset(). Empty = not called.
  std::function<void(const StepProgress&)> step_progress;
};

// SessionOptions::threads as the engine resolves it: 0 = all available (omp_get_max_threads(), which
// OMP_NUM_THREADS sets); any other value is returned as given (the options check refuses < 0).
int resolve_threads(int threads);

struct FrameResult {
  int64_t frame_index = 0;      // position in the sequence, from 0
  bool is_keyframe = false;     // stored in the caches (every scale frame and every keyframe)
  FrameType frame_type = FrameType::Scale;  // scale frame / keyframe / non-keyframe (is_keyframe = not the last)
  int64_t rope_time_index = 0;  // 3D-RoPE time position (advances only for stored frames)
  // Policies that decide after the frame ran (FlowKeyframes): the value that decided, e.g. the flow in
  // pixels, and the frame it was measured against; -1 for frames decided otherwise.
  double flow = -1.0;
  int64_t flow_reference_frame = -1;
  int64_t window_index = 0;     // windowed mode (windowed.h): the window the result comes from; else 0
  // Per selected aggregator layer j (ModelConfig::aggregator.selected_layers[j]): f32 [P, 2C],
  // tokens [camera, registers, scale, patches row-major], channels [frame block | global block].
  // Filled when SessionOptions::keep_features; outputs of other layers are never retained.
  std::vector<Tensor> features;
  // Encoder output (normalised DINOv2 patch tokens): f32 [(H/p)(W/p), C], when keep_patch_tokens.
  Tensor patch_tokens;
  // Camera head (when SessionOptions::camera_head):
  Tensor pose_enc;        // f32 [9]: [t_x, t_y, t_z, q_x, q_y, q_z, q_w (scalar last), fov_h, fov_w]
                          // (fields of view in radians: fov_h = 2·atan(H / (2·fy)), fov_w likewise)
  Tensor pose_enc_iters;  // f32 [camera_iterations, 9]: activated encoding after each refinement
  // Camera convention: the decoded pose [R(q) | t] is CAMERA -> WORLD (X_world = R·X_cam + t), so
  // pose_enc[0:3] is the camera centre. This is how every upstream consumer of the released
  // LingBot-Map checkpoints reads it (demo.py's viewer, the windowed Sim(3) alignment, the flow
  // keyframe test, the benchmark wrapper); VGGT's identical encoding decodes to world -> camera.
  // Camera axes are OpenCV's (x right, y down, z forward); matrices are row-major.
  Tensor extrinsic;       // f32 [3, 4] world -> camera [Rᵀ | −Rᵀt], the inverse of extrinsic_c2w
  Tensor intrinsic;       // f32 [3, 3] K in pixels (cx = W/2, cy = H/2)
  Tensor extrinsic_c2w;   // f32 [3, 4] camera -> world [R | t], the decoded pose
  // DPT head (when SessionOptions::depth_head); world points also need the camera head:
  // exp() and 1 + exp() of the head's two channels: depth >= 0 and depth_conf >= 1 when finite (0 and
  // 1 only where exp() underflows). Non-finite values (NaN, inf) are possible, as in any output,
  // and are passed on as computed; `run` counts them per frame in summary.json "warnings" and makes no
  // point of them.
  Tensor depth;           // f32 [H, W]
  Tensor depth_conf;      // f32 [H, W]
  Tensor world_points;    // f32 [H, W, 3]: extrinsic_c2w · (K⁻¹ [x, y, 1]ᵀ · depth), x = column, y = row
                          // at integer coordinates (no +0.5)
};

// Time spent per phase since the session was made (all steps; reset() does not clear it).
struct SessionPhaseTimes {
  PhaseTime encoder, frame_blocks, global_blocks, camera_head, dpt_head;
};

struct SessionStats {
  int64_t steps = 0;              // forward steps run (the scale phase counts as one)
  int64_t frames_completed = 0;   // frames whose results were returned
  CacheStats cache;               // see lingbot/cache_stats.h (zero before the first step)
  int64_t camera_cache_frames = 0;  // frames stored in the camera head's caches (never evicted, except
                                    // beyond the bound max_special_frames > 0 sets)
  int64_t camera_cache_bytes = 0;   // K+V bytes held by the camera head's caches
  int64_t rope_time_next = 0;       // 3D-RoPE time index the next stored frame gets (= frames stored)
  bool decision_pending = false;    // a push_frame_deferred frame awaits commit_frame / rollback_frame
  SessionPhaseTimes phases;
  // Device memory (device cuda; nullopt on the CPU, whose memory is the process's peak RSS):
  // the most device bytes the session's backend held at once since the session was made (weights
  // uploaded, activations, scratch and the KV cache; reset() does not lower it), and the KV cache's
  // device bytes now (= cache.bytes_reserved, which lives in device memory there).
  std::optional<int64_t> device_peak_bytes;
  std::optional<int64_t> device_kv_cache_bytes;
};

class Session {
 public:
  // Throws lingbot::Error when an option is out of range or inconsistent with the model.
  Session(std::shared_ptr<const Model> model, const SessionOptions& options = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // image: f32 [3, H, W] RGB in [0, 1] (channel-major: all R rows, then G, then B); H and W multiples
  // of the patch size, equal for all frames of the sequence. Read during the call only (copied into
  // the session's buffers). Throws Error, and leaves the session as it was, for a frame of another
  // size, a non-finite value or one outside [0, 1] (1 % margin). Returns the results completed by
  // this push (see the protocol above).
  std::vector<FrameResult> push_frame(const Tensor& image);
  std::vector<FrameResult> push_frame(const float* image, int64_t height, int64_t width);  // as above, `image`
                                                                                           // holds 3 * H * W
  std::vector<FrameResult> finish();
  void reset();

  // Deciding by hand (see the protocol): only for streamed frames (frame index >= scale_frames; throws
  // for a scale frame). The result's frame_type is Keyframe provisionally; commit_frame() stores the
  // frame (it is a keyframe), rollback_frame() removes it again (a non-keyframe: caches and RoPE index
  // exactly as before the push). Both throw when no deferred frame is pending.
  FrameResult push_frame_deferred(const Tensor& image);
  void commit_frame();
  void rollback_frame();
  // The policy in use (never null).
  const KeyframePolicy& keyframe_policy() const;
  // Fingerprints of the per-stream state (equal bytes = equal state: determinism and rollback checks).
  // The aggregator cache's live K/V bytes of global block `block`, 0 <= block <
  // ModelConfig::aggregator.depth (another value throws Error once a step has run), on device cpu
  // with every KV backend (device cuda throws Error: the K/V are in device memory); the camera-head
  // caches' stored rows. Empty before the first step (the block is not checked then).
  std::vector<unsigned char> cache_live_bytes(int block) const;
  std::vector<unsigned char> camera_cache_live_bytes() const;

  bool closed() const;
  int64_t frames_pushed() const;
  // After a step that failed or was stopped: the caches as the last completed step left them (the
  // partial step's frames are not counted).
  SessionStats stats() const;
  const SessionOptions& options() const;  // with every default resolved
  // The backend the model runs on, one line: "cpu (2 threads)", or the GPU's name on cuda.
  std::string device_description() const;
  const Model& model() const;

 private:
  struct Impl;
  Impl& impl() const;  // throws Error on a moved-from object
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot
