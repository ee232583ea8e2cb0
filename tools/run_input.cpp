#include "run_input.h"

#include <chrono>
#include <thread>
#include <utility>

#include "io/preprocess.h"
#include "io/video.h"
#include "pipeline/demo_model.h"

namespace lingbot::cli {

Input open_input(const RunArgs& a, const PreprocessOptions& pre, std::function<bool()> interrupted) {
  Input in;
  if (a.demo) {
    in.kind = "demo";
    in.count = in.estimated = a.demo_frames;
    in.canvas = io::preprocessed_size({kDemoFrameWidth, kDemoFrameHeight}, pre);
    auto index = std::make_shared<int64_t>(0);
    const int64_t total = a.demo_frames;
    const auto pace = std::chrono::duration<double>(a.demo_pace);
    in.next = [index, total, pace](io::SourceFrame* f) {
      if (*index >= total) return false;
      if (pace.count() > 0) std::this_thread::sleep_for(pace);  // --demo-pace: to watch --serve live
      f->index = *index;
      f->image = render_demo_frame(*index);
      f->name = "demo_" + std::to_string(*index);
      f->timestamp = static_cast<double>(*index);
      ++*index;
      return true;
    };
    return in;
  }
  io::FrameSelection sel;
  sel.first_k = a.first_k;
  sel.stride = a.stride;
  sel.video_fps = a.fps;
  sel.rotate_clockwise_90 = a.rotate_cw90;
  // FFmpeg would print its own copy of every error (e.g. "moov atom not found") next to ours; the
  // user gets one line through the exception, and VideoReader counts skipped packets itself.
  if (!a.video.empty()) io::quiet_libav_logging();
  if (a.live) {
    in.live = std::make_shared<io::LiveFrameSource>(a.video, sel, interrupted);
    in.kind = "live";
    in.path = a.video;
    in.canvas = in.live->canvas(pre);
    in.next = [src = in.live](io::SourceFrame* f) { return src->next(f); };
    in.notices = io::video_notices(a.video, in.live->info());
    in.sampling = in.live->video_sampling();
    auto found = std::make_shared<io::StreamDamage>();  // a copy: the decoder thread owns the reader's
    in.damage = [src = in.live, found]() -> const io::StreamDamage* {  // called once the run is over
      *found = src->finish_and_damage();
      return found.get();
    };
    return in;
  }
  auto src = std::make_shared<io::FrameSource>(
      a.images.empty() ? io::FrameSource::from_video(a.video, sel, interrupted)
                       : io::FrameSource::from_folder(a.images, sel));
  in.kind = a.images.empty() ? "video" : "images";
  in.path = a.images.empty() ? a.video : a.images;
  in.count = src->count();
  in.estimated = src->estimated_count();
  std::string mixed_sizes;
  in.canvas = src->canvas(pre, &mixed_sizes);
  in.next = [src](io::SourceFrame* f) { return src->next(f); };
  in.damage = [src] { return src->damage(); };
  in.notices = src->notices();
  if (!mixed_sizes.empty()) in.notices.push_back(mixed_sizes);
  in.sampling = src->video_sampling();
  return in;
}

}  // namespace lingbot::cli
