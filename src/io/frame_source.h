#pragma once
// Input frames for `lingbot-map run`, one at a time, from an image folder or a video file, selected
// like upstream demo.py's load_images: video frames sampled at --fps, then the first --first-k
// frames, then every --stride-th of those, then optionally rotated 90 degrees clockwise.
// Frames are decoded lazily: a folder reads one file per next(), a video decodes as it goes.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/image.h"
#include "io/preprocess.h"
#include "io/timestamp_unit.h"
#include "io/video.h"

namespace lingbot::io {

struct FrameSelection {
  int64_t first_k = 0;             // keep only the first k frames (after fps sampling); 0 = all
  int64_t stride = 1;              // then keep every stride-th frame
  double video_fps = 10;           // video sampling rate (demo.py --fps default); <= 0 = every frame
  bool rotate_clockwise_90 = false;  // applied after EXIF orientation
};

struct SourceFrame {
  ImageU8 image;
  int64_t index = 0;       // position in the selected sequence (0, 1, 2, ...)
  std::string name;        // file name, or "frame_<n>" for video (n = stream position, lost frames counted)
  double timestamp = 0;    // seconds for video; the index for image folders
  TimestampUnit timestamp_unit = TimestampUnit::FrameIndex;
  // Image folders: the data libjpeg lost and concealed in this file (StreamDamage::add_damaged_image
  // records it once the frame is used: a frame read ahead and never used is no damage of the run).
  CorruptData corrupt;
};

class FrameSource {
 public:
  // Errors as list_image_files / VideoReader, and "stride must be >= 1, got <n>",
  // "first_k must be >= 0, got <n>".
  static FrameSource from_folder(const std::filesystem::path& dir, const FrameSelection& sel);
  // `interrupt` (optional): as VideoOpenOptions::interrupt, polled while opening and reading (Ctrl-C
  // on a stalled pipe or URL); once it returns true the video ends (next() returns false).
  static FrameSource from_video(const std::filesystem::path& file, const FrameSelection& sel,
                                std::function<bool()> interrupt = {});

  FrameSource(FrameSource&&) noexcept;
  FrameSource& operator=(FrameSource&&) noexcept;
  ~FrameSource();

  // The next selected frame; false when there are no more. Throws on unreadable files.
  bool next(SourceFrame* out);
  // Video: decode errors, lost frames and truncation found so far (complete once next() returned
  // false at the end of the stream); nullptr for image folders (an image that cannot be decoded
  // throws; one decoded with concealed damage says so in SourceFrame::corrupt).
  const StreamDamage* damage() const;
  // Number of frames that will be produced, when known up front (image folders); nullopt for video.
  std::optional<int64_t> count() const;
  // count() for folders; for video an estimate from the declared frame count (or duration x fps)
  // after sampling and selection, for progress display; nullopt when the container says neither.
  std::optional<int64_t> estimated_count() const;
  // The common tensor size for all frames: upstream pads a batch of mixed sizes to the largest
  // preprocessed height and width. Folders: from every selected file's header (no pixel decoding);
  // video: from the stream's frame size. `mixed_sizes` (optional): set to a notice when the frames
  // preprocess to more than one size (then every smaller one is padded with white to the canvas), else "".
  ImageSize canvas(const PreprocessOptions& opt, std::string* mixed_sizes = nullptr) const;
  // What the user should know of the input before the run, one sentence each (run prints
  // "notice: " lines, the Python module UserWarnings): a folder's files of another image format, and
  // names whose byte order is not their numbers' order; a video that states no frame rate, or whose
  // pixels are not square.
  const std::vector<std::string>& notices() const;
  // Video: the stream's frame rate (VideoInfo::fps, assumed where it states none) and the sampling
  // FrameSelection::video_fps gives (every `sample_interval`-th decoded frame is kept); nullopt for folders and for an image file given as a
  // video (is_still_image: one frame, no frame rate).
  struct VideoSampling {
    double source_fps = 0;
    int sample_interval = 1;
  };
  std::optional<VideoSampling> video_sampling() const;

 private:
  FrameSource();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot::io
