#include "io/frame_source.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace lingbot::io {

struct FrameSource::Impl {
  FrameSelection sel;
  std::vector<std::filesystem::path> files;  // folder mode: the selected files
  size_t next_file = 0;
  std::optional<VideoReader> video;          // video mode
  bool still_image = false;                  // video mode: an image file (is_still_image), one frame
  int64_t sampled = 0;                       // video frames passed by the fps sampler so far
  int64_t produced = 0;
  std::vector<std::string> notices;
};

FrameSource::FrameSource() : impl_(std::make_unique<Impl>()) {}
FrameSource::FrameSource(FrameSource&&) noexcept = default;
FrameSource& FrameSource::operator=(FrameSource&&) noexcept = default;
FrameSource::~FrameSource() = default;

namespace {
void check_selection(const FrameSelection& sel) {
  LINGBOT_CHECK(sel.stride >= 1, "stride must be >= 1, got ", sel.stride);
  LINGBOT_CHECK(sel.first_k >= 0, "first_k must be >= 0, got ", sel.first_k);
}
}  // namespace

FrameSource FrameSource::from_folder(const std::filesystem::path& dir, const FrameSelection& sel) {
  check_selection(sel);
  FrameSource s;
  s.impl_->sel = sel;
  std::vector<std::filesystem::path> all = list_image_files(dir);
  for (std::string notice : {unread_image_files_notice(dir), name_order_notice(all)})
    if (!notice.empty()) s.impl_->notices.push_back(std::move(notice));
  if (sel.first_k > 0 && static_cast<int64_t>(all.size()) > sel.first_k) all.resize(static_cast<size_t>(sel.first_k));
  for (size_t i = 0; i < all.size(); i += static_cast<size_t>(sel.stride)) s.impl_->files.push_back(all[i]);
  if (std::string notice = grey16_png_notice(s.impl_->files); !notice.empty()) s.impl_->notices.push_back(std::move(notice));
  return s;
}

FrameSource FrameSource::from_video(const std::filesystem::path& file, const FrameSelection& sel,
                                    std::function<bool()> interrupt) {
  check_selection(sel);
  FrameSource s;
  s.impl_->sel = sel;
  VideoOpenOptions open;
  open.interrupt = std::move(interrupt);
  s.impl_->video.emplace(file.string(), sel.video_fps, open);
  s.impl_->notices = video_notices(file.string(), s.impl_->video->info());
  s.impl_->still_image = is_still_image(ffmpeg_source(file.string()), s.impl_->video->info());
  return s;
}

const std::vector<std::string>& FrameSource::notices() const { return impl_->notices; }

std::optional<FrameSource::VideoSampling> FrameSource::video_sampling() const {
  if (!impl_->video || impl_->still_image) return std::nullopt;
  return VideoSampling{impl_->video->info().fps, impl_->video->sample_interval()};
}

bool FrameSource::next(SourceFrame* out) {
  Impl& s = *impl_;
  if (!s.video) {
    if (s.next_file >= s.files.size()) return false;
    const std::filesystem::path& p = s.files[s.next_file++];
    out->image = load_image(p, &out->corrupt);
    out->name = p.filename().string();
    out->timestamp = static_cast<double>(s.produced);
    out->timestamp_unit = TimestampUnit::FrameIndex;
  } else {
    VideoFrame f;
    while (true) {
      if (s.sel.first_k > 0 && s.sampled >= s.sel.first_k) return false;
      if (!s.video->next(&f)) return false;
      const int64_t k = s.sampled++;
      if (k % s.sel.stride == 0) break;
    }
    out->image = std::move(f.image);
    out->corrupt = {};
    out->name = "frame_" + std::to_string(f.source_index);
    out->timestamp = f.timestamp_s;
    out->timestamp_unit = TimestampUnit::Seconds;
  }
  if (s.sel.rotate_clockwise_90) out->image = transpose(out->image, Transpose::Rotate270);
  out->index = s.produced++;
  return true;
}

const StreamDamage* FrameSource::damage() const { return impl_->video ? &impl_->video->damage() : nullptr; }

std::optional<int64_t> FrameSource::count() const {
  if (impl_->video) return std::nullopt;
  return static_cast<int64_t>(impl_->files.size());
}

std::optional<int64_t> FrameSource::estimated_count() const {
  const Impl& s = *impl_;
  if (!s.video) return count();
  if (s.still_image) return 1;  // FFmpeg states no frame count for it
  const VideoInfo& info = s.video->info();
  int64_t decoded = info.frame_count;
  if (decoded <= 0 && info.duration_s > 0) decoded = static_cast<int64_t>(std::llround(info.duration_s * info.fps));
  if (decoded <= 0) return std::nullopt;
  const int64_t interval = s.video->sample_interval();
  int64_t sampled = (decoded + interval - 1) / interval;
  if (s.sel.first_k > 0) sampled = std::min(sampled, s.sel.first_k);
  return (sampled + s.sel.stride - 1) / s.sel.stride;
}

ImageSize FrameSource::canvas(const PreprocessOptions& opt, std::string* mixed_sizes) const {
  if (mixed_sizes) mixed_sizes->clear();
  const Impl& s = *impl_;
  auto oriented = [&](ImageSize sz) {
    return s.sel.rotate_clockwise_90 ? ImageSize{sz.height, sz.width} : sz;
  };
  if (s.video) {
    return preprocessed_size(oriented({s.video->info().width, s.video->info().height}), opt);
  }
  std::vector<ImageSize> sizes;
  sizes.reserve(s.files.size());
  for (const auto& p : s.files) sizes.push_back(preprocessed_size(oriented(probe_image_size(p)), opt));
  if (mixed_sizes) *mixed_sizes = mixed_sizes_notice(sizes);
  return batch_canvas_size(sizes);
}

}  // namespace lingbot::io
