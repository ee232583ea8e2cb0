#pragma once
// Video decoding with FFmpeg's libraries (libavformat/libavcodec/libswscale), one frame at a time.
//
// Sampling follows upstream demo.py (--fps): interval = max(1, round(source_fps / target_fps)) with
// Python rounding (half to even), and decoded frame i is kept iff i % interval == 0. source_fps is
// what OpenCV 4's CAP_PROP_FPS reports: the stream's average frame rate (frames / duration); where a
// stream states none, the nominal rate (r_frame_rate; OpenCV would answer 1 / time base there), else
// 30 (demo.py's `or 30`). Average and nominal rates differ for variable-rate video (phone and screen
// recordings): a stream timed on a 60 fps grid that averages 30 fps samples every 3rd frame at
// --fps 10, as upstream does, not every 6th.
// Differences from upstream: upstream writes sampled frames to JPEG files (quality 95) and reloads
// them; here frames go straight to 8-bit RGB (swscale, bicubic, default BT.601 matrix as OpenCV
// uses), so there is no JPEG loss. A display-matrix rotation of 90/180/270 degrees (phone videos)
// is applied, as OpenCV does by default.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/image.h"
#include "io/stream_damage.h"

namespace lingbot::io {

struct VideoInfo {
  int width = 0;              // displayed frame size (after rotation metadata)
  int height = 0;
  int rotation = 0;           // clockwise degrees applied to decoded frames: 0, 90, 180 or 270
  double fps = 0;             // source frame rate used for sampling: average, else nominal, else 30 (above)
  // False when the input states no frame rate and `fps` is assumed: FFmpeg's default for image
  // streams (25: an MJPEG or PNG pipe, whose timestamps it makes up from that rate) or upstream's 30.
  bool fps_stated = true;
  // Sample (pixel) aspect ratio, width : height of one stored pixel; 1 : 1 when square (within 1 %) or
  // unstated.
  // Frames are used as stored (as OpenCV, and so upstream, reads them), not stretched to display.
  int pixel_aspect_num = 1, pixel_aspect_den = 1;
  int64_t frame_count = 0;    // frames the container declares (0 when it does not say)
  double duration_s = 0;      // container duration (0 when unknown)
  std::string codec;          // decoder name, e.g. "h264"
};

struct VideoFrame {
  ImageU8 image;              // 8-bit RGB
  int64_t source_index = 0;   // stream position (before sampling; lost frames counted, see stream_damage.h)
  double timestamp_s = 0;     // presentation time pts x time_base from the stream start (source_index / fps
                              // when the stream has no timestamps)
};

// How to open a source that is not a plain file (see live_source.h for the live layer).
struct VideoOpenOptions {
  std::string format;               // FFmpeg input format, e.g. "video4linux2"; "" = probe
  bool low_latency = false;         // probe only the first packets (a live source has no end to probe)
  // Polled during blocking I/O (also of a silent "pipe:N", made non-blocking for the reader's life);
  // returning true aborts it (stop, Ctrl-C): opening throws, next() returns false with no damage.
  std::function<bool()> interrupt;
};

// The input as FFmpeg names it: "-" (the standard input, as most tools read it) is "pipe:0".
std::string ffmpeg_source(const std::string& source);

// What a user should know of a video before the run (FrameSource::notices; run's notice lines for
// --live too): that it states no frame rate (info.fps_stated), or that its pixels are not square.
std::vector<std::string> video_notices(const std::string& source, const VideoInfo& info);

// True for a still image given as a video: a local image file name (not a URL, not a %d pattern)
// whose stream is not animated (an APNG is a video), which FFmpeg reads as one frame at a made-up
// 25 fps (video_notices says so; its VideoInfo::fps is not a frame rate, and
// FrameSource::video_sampling is nullopt for it).
bool is_still_image(const std::string& source, const VideoInfo& info);

// True for inputs FFmpeg opens itself rather than a local file: "<scheme>://..." (rtsp, http, ...)
// and "pipe:N". Device nodes such as /dev/video0 are local paths.
bool is_stream_url(const std::string& source);

class VideoReader {
 public:
  // Opens `path` and its best video stream. target_fps <= 0 keeps every frame.
  // Errors: "video file not found: <path>", "cannot open video <path>: <reason>",
  // "no video stream in <path>", "unsupported video codec '<name>' in <path>".
  explicit VideoReader(const std::filesystem::path& path, double target_fps = 0);
  // The same on a file held in memory (custom AVIO; seeks within the buffer). `label` names it in
  // errors. Used by the fuzz target and for inputs that are not files.
  static VideoReader from_memory(std::vector<uint8_t> bytes, const std::string& label, double target_fps = 0);
  // Any FFmpeg input: a file, a URL (is_stream_url: no existence check), a device with opts.format;
  // "-" is the standard input ("pipe:0", the name errors then use).
  VideoReader(const std::string& source, double target_fps, const VideoOpenOptions& opts);
  ~VideoReader();
  VideoReader(VideoReader&&) noexcept;
  VideoReader& operator=(VideoReader&&) noexcept;
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const VideoInfo& info() const;
  int sample_interval() const;  // keep every n-th decoded frame
  // Decodes up to the next sampled frame (stream position % sample_interval() == 0); false at the
  // end of the stream. Packets the decoder rejects as invalid data are skipped and counted, frames
  // that never come out are recorded as lost, a read error ends the stream as truncated (damage());
  // any other failure throws Error("error decoding video <path>...: <reason>").
  bool next(VideoFrame* out);
  // What was found damaged so far; complete (truncation, trailing losses) once next() returned false.
  const StreamDamage& damage() const;
  int64_t corrupt_packets() const;  // damage().decode_errors

 private:
  struct Impl;
  explicit VideoReader(std::unique_ptr<Impl> impl);
  void open(double target_fps);
  std::unique_ptr<Impl> impl_;
};

// Silences FFmpeg's process-wide logging (its demuxers print probing warnings, and a copy of every
// error that VideoReader already reports through its exception). Call once from the application; the
// library itself never changes it.
void quiet_libav_logging();

// The sampling interval rule on its own (source fps <= 0 is treated as 30).
int video_sample_interval(double source_fps, double target_fps);

}  // namespace lingbot::io
