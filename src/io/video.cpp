#include "io/video.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <fcntl.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "io/file_util.h"
#include "io/preprocess.h"

namespace lingbot::io {

namespace {

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof(buf));
  return buf;
}

struct FormatCloser {
  void operator()(AVFormatContext* p) const noexcept { avformat_close_input(&p); }
};
struct CodecFreer {
  void operator()(AVCodecContext* p) const noexcept { avcodec_free_context(&p); }
};
struct FrameFreer {
  void operator()(AVFrame* p) const noexcept { av_frame_free(&p); }
};
struct PacketFreer {
  void operator()(AVPacket* p) const noexcept { av_packet_free(&p); }
};
struct SwsFreer {
  void operator()(SwsContext* p) const noexcept { sws_freeContext(p); }
};
// A custom AVIOContext owns its (av_malloc'd) buffer; avformat_close_input does not free either.
struct AvioFreer {
  void operator()(AVIOContext* p) const noexcept {
    if (p) av_freep(&p->buffer);
    avio_context_free(&p);
  }
};

// In-memory file behind a custom AVIOContext.
struct MemoryFile {
  std::vector<uint8_t> bytes;
  size_t pos = 0;
  static int read(void* opaque, uint8_t* buf, int n) {
    auto* m = static_cast<MemoryFile*>(opaque);
    const size_t left = m->bytes.size() - m->pos;
    if (left == 0) return AVERROR_EOF;
    const size_t k = std::min(left, static_cast<size_t>(std::max(n, 0)));
    std::memcpy(buf, m->bytes.data() + m->pos, k);
    m->pos += k;
    return static_cast<int>(k);
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* m = static_cast<MemoryFile*>(opaque);
    const auto size = static_cast<int64_t>(m->bytes.size());
    if (whence & AVSEEK_SIZE) return size;
    int64_t target = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET: target = offset; break;
      case SEEK_CUR: target = static_cast<int64_t>(m->pos) + offset; break;
      case SEEK_END: target = size + offset; break;
      default: return AVERROR(EINVAL);
    }
    if (target < 0 || target > size) return AVERROR(EINVAL);
    m->pos = static_cast<size_t>(target);
    return target;
  }
};

// Whether a packet of an MJPEG stream holds a whole JPEG: an EOI marker (FF D9) after the start of
// its first scan. The marker segments before the scan are skipped by their lengths (an EXIF
// thumbnail in APP1 has its own EOI); inside scan data FF D9 cannot occur (the entropy coder escapes
// FF as FF 00), so the first one there ends the picture, whatever padding a camera or muxer leaves
// after it. A packet whose structure this does not follow is left to the decoder.
bool holds_whole_jpeg(const AVPacket* p) {
  const uint8_t* d = p->data;
  const size_t n = p->size > 0 ? static_cast<size_t>(p->size) : 0;
  if (n < 4 || d[0] != 0xff || d[1] != 0xd8) return true;
  size_t i = 2;
  while (i + 1 < n) {
    if (d[i] != 0xff) return true;
    const uint8_t marker = d[i + 1];
    if (marker == 0xff) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xda) {
      for (size_t j = i + 2; j + 1 < n; ++j)
        if (d[j] == 0xff && d[j + 1] == 0xd9) return true;
      return false;
    }
    if (marker == 0xd9 || (marker >= 0xd0 && marker <= 0xd7) || marker == 0x01) return true;  // no scan, or odd
    if (i + 3 >= n) return false;  // cut inside the headers
    i += 2 + ((size_t{d[i + 2]} << 8) | d[i + 3]);
  }
  return false;  // cut before the first scan
}

}  // namespace

void quiet_libav_logging() { av_log_set_level(AV_LOG_QUIET); }

std::vector<std::string> video_notices(const std::string& source, const VideoInfo& info) {
  std::vector<std::string> notices;
  const std::string name = ffmpeg_source(source);
  // A photo given as a video: FFmpeg reads it (image2 or an image pipe demuxer) as a one-frame video
  // at a made-up 25 fps, as upstream's video reader (OpenCV) does, without its EXIF orientation.
  if (is_still_image(name, info)) {
    notices.push_back(detail::concat(name, " is an image file, read as a video of one frame without its EXIF "
                                     "orientation: photos go in a folder read as an image folder (run --images, "
                                     "Python images=)"));
    return notices;  // its made-up frame rate is not worth a line of its own
  }
  if (!info.fps_stated)
    notices.push_back(detail::concat(name, " states no frame rate: its timestamps and the fps sampling assume ", info.fps,
                                     " fps (fps 0 keeps every frame)"));
  if (info.pixel_aspect_num != info.pixel_aspect_den)
    notices.push_back(detail::concat(name, "'s pixels are not square (pixel aspect ratio ", info.pixel_aspect_num, ":",
                                     info.pixel_aspect_den, "): frames are used as stored, as upstream reads them, not "
                                     "stretched to their displayed shape, and the intrinsics are in stored pixels"));
  return notices;
}

bool is_still_image(const std::string& source, const VideoInfo& info) {
  return !is_stream_url(source) && is_image_file_name(source) && source.find('%') == std::string::npos &&
         info.codec != "apng";
}

std::string ffmpeg_source(const std::string& source) { return source == "-" ? "pipe:0" : source; }

bool is_stream_url(const std::string& source) {
  return source.find("://") != std::string::npos || source.rfind("pipe:", 0) == 0;
}

int video_sample_interval(double source_fps, double target_fps) {
  if (target_fps <= 0) return 1;
  if (!(source_fps > 0)) source_fps = 30;  // upstream: cap.get(CAP_PROP_FPS) or 30
  // A target far below the source rate keeps only the first frame: the interval is capped at the
  // largest int (a ratio past it overflowed the conversion: a negative or zero interval).
  const double ratio = source_fps / target_fps;
  if (!(ratio < static_cast<double>(std::numeric_limits<int>::max()))) return std::numeric_limits<int>::max();
  return static_cast<int>(std::max<long long>(1, round_half_even(ratio)));
}

// "pipe:N" read with an interrupt callback: FFmpeg's pipe protocol blocks in read() where the callback
// cannot run; on a non-blocking descriptor it retries EAGAIN itself and checks the callback between
// tries, so a stop or Ctrl-C ends a silent pipe too. The descriptor's flags are restored at the end.
class NonBlockingPipe {
 public:
  explicit NonBlockingPipe(const std::string& source) {
    const std::string n = source.substr(5);
    const int fd = n.empty() ? 0 : std::atoi(n.c_str());
    const int flags = fcntl(fd, F_GETFL);
    LINGBOT_CHECK(flags >= 0, "cannot open video ", source, ": file descriptor ", fd, " is not open");
    if (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0) {
      fd_ = fd;
      flags_ = flags;
    }
  }
  ~NonBlockingPipe() {
    if (fd_ >= 0) fcntl(fd_, F_SETFL, flags_);
  }
  NonBlockingPipe(const NonBlockingPipe&) = delete;
  NonBlockingPipe& operator=(const NonBlockingPipe&) = delete;

 private:
  int fd_ = -1, flags_ = 0;
};

struct VideoReader::Impl {
  std::string path;
  std::optional<NonBlockingPipe> pipe;  // declared first: restored after FFmpeg let go of the descriptor
  bool low_latency = false;             // VideoOpenOptions::low_latency (a live source)
  std::function<bool()> interrupt;  // VideoOpenOptions::interrupt (FFmpeg calls it through `fmt`)
  VideoInfo info;
  int interval = 1;
  int stream_index = -1;
  AVRational time_base{0, 1};
  int64_t start_pts = 0;
  // Frames the container says it shows (MP4: its edit list's, from the sample index), or from its
  // duration; 0 = unknown.
  int64_t declared_frames = 0;
  std::optional<StreamDamageTracker> tracker;
  bool flushing = false;    // the demuxer is exhausted and the decoder was told so
  bool finished = false;
  int64_t last_frame_pts = AV_NOPTS_VALUE;  // the latest decoded frame's timestamp
  // Y4M stores frames back to back with no count: a file cut inside its last frame ends, for
  // FFmpeg's demuxer, like a whole one. Bytes after the last whole frame's packet tell it.
  int64_t last_packet_end = -1;   // file offset after the last video packet's data (-1: none / unknown)
  int64_t last_packet_bytes = 0;  // its size (every raw frame has the same)
  std::optional<int64_t> cut_frame_bytes;  // bytes of a frame the file ends inside (0: inside its FRAME header)
  std::unique_ptr<MemoryFile> memory;                 // from_memory: the file (outlives avio)
  std::unique_ptr<AVIOContext, AvioFreer> avio;        // from_memory: declared before fmt, freed after it
  std::unique_ptr<AVFormatContext, FormatCloser> fmt;
  std::unique_ptr<AVCodecContext, CodecFreer> codec;
  std::unique_ptr<AVFrame, FrameFreer> frame;
  std::unique_ptr<AVPacket, PacketFreer> packet;
  std::unique_ptr<SwsContext, SwsFreer> sws;
  // sws_scale's SIMD paths store whole vectors, past a row's last pixel and past the last row (a
  // 1-pixel-wide frame overran a tight width*3 buffer into unmapped memory: a fuzz finding), so it
  // writes into an FFmpeg frame with aligned, padded rows; to_rgb copies the pixels out.
  std::unique_ptr<AVFrame, FrameFreer> bgr_frame;

  static double pts_seconds(int64_t pts, const void* ctx) {
    const auto* s = static_cast<const Impl*>(ctx);
    // ticks x num / den, one rounding: 3 ticks of 1/10 s are 0.3 (x av_q2d's 0.1 gave 0.30000000000000004).
    return static_cast<double>(pts - s->start_pts) * s->time_base.num / s->time_base.den;
  }

  ImageU8 to_rgb(const AVFrame* f) {
    LINGBOT_CHECK(f->width > 0 && f->height > 0, "error decoding video ", path, ": empty frame");
    // BGR24, as OpenCV (upstream's reader) asks swscale for, then swapped to RGB: swscale rounds the
    // two orders differently on its general path (10-bit video, 8-bit 4:2:0 of odd height: up to 9
    // levels apart), so this gives OpenCV's pixels on the same FFmpeg.
    SwsContext* ctx = sws_getCachedContext(sws.release(), f->width, f->height,
                                           static_cast<AVPixelFormat>(f->format), f->width, f->height,
                                           AV_PIX_FMT_BGR24, SWS_BICUBIC, nullptr, nullptr, nullptr);
    sws.reset(ctx);
    LINGBOT_CHECK(ctx != nullptr, "error decoding video ", path, ": cannot convert pixel format ",
                  av_get_pix_fmt_name(static_cast<AVPixelFormat>(f->format)), " to RGB");
    if (!bgr_frame || bgr_frame->width != f->width || bgr_frame->height != f->height) {
      std::unique_ptr<AVFrame, FrameFreer> next(av_frame_alloc());  // kept only once it has its buffer
      LINGBOT_CHECK(next != nullptr, "error decoding video ", path, ": out of memory");
      next->format = AV_PIX_FMT_BGR24;
      next->width = f->width;
      next->height = f->height;
      const int err = av_frame_get_buffer(next.get(), 0);
      LINGBOT_CHECK(err >= 0, "error decoding video ", path, ": cannot allocate a ", f->width, "x", f->height,
                    " RGB frame: ", av_error(err));
      bgr_frame = std::move(next);
    }
    const int rows = sws_scale(ctx, f->data, f->linesize, 0, f->height, bgr_frame->data, bgr_frame->linesize);
    LINGBOT_CHECK(rows == f->height, "error decoding video ", path, ": converting a ", f->width, "x", f->height, " ",
                  av_get_pix_fmt_name(static_cast<AVPixelFormat>(f->format)), " frame to RGB failed");
    ImageU8 img(f->width, f->height);
    for (int y = 0; y < f->height; ++y) {
      const uint8_t* bgr = bgr_frame->data[0] + static_cast<ptrdiff_t>(y) * bgr_frame->linesize[0];
      uint8_t* out = img.rgb.data() + static_cast<size_t>(y) * f->width * 3;
      for (int x = 0; x < f->width; ++x, bgr += 3, out += 3) out[0] = bgr[2], out[1] = bgr[1], out[2] = bgr[0];
    }
    return img;
  }
};

VideoReader::VideoReader(const std::filesystem::path& path, double target_fps)
    : VideoReader(path.string(), target_fps, VideoOpenOptions{}) {}

VideoReader::VideoReader(const std::string& given, double target_fps, const VideoOpenOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const std::string source = ffmpeg_source(given);
  s.path = source;
  if (!is_stream_url(source)) {
    std::error_code ec;
    check_path_exists(source, "video file");
    LINGBOT_CHECK(!std::filesystem::is_directory(source, ec), "cannot open video ", s.path, ": is a directory");
  }
  const AVInputFormat* format = nullptr;
  if (!opts.format.empty()) {
    format = av_find_input_format(opts.format.c_str());
    LINGBOT_CHECK(format != nullptr, "cannot open video ", s.path, ": FFmpeg input format '", opts.format,
                  "' is not available");
  }
  if (opts.interrupt && source.rfind("pipe:", 0) == 0) s.pipe.emplace(source);  // may throw: before raw
  s.low_latency = opts.low_latency;
  AVFormatContext* raw = avformat_alloc_context();
  LINGBOT_CHECK(raw != nullptr, "cannot open video ", s.path, ": out of memory");
  if (opts.interrupt) {
    s.interrupt = opts.interrupt;
    raw->interrupt_callback.callback = [](void* opaque) -> int { return (*static_cast<std::function<bool()>*>(opaque))() ? 1 : 0; };
    raw->interrupt_callback.opaque = &s.interrupt;  // Impl is heap-allocated: the address is stable
  }
  if (opts.low_latency) {
    raw->probesize = 32 * 1024;               // bytes (FFmpeg's minimum useful probe)
    raw->max_analyze_duration = AV_TIME_BASE / 10;
    raw->fps_probe_size = 0;                  // no waiting for frames to guess the rate
  }
  int r = avformat_open_input(&raw, s.path.c_str(), format, nullptr);  // frees `raw` on failure
  // A pipe that ended before any video arrived (an empty stdin, a producer that failed) reads as
  // FFmpeg's "Invalid data": say what the pipe is and what likely happened.
  const bool pipe = source.rfind("pipe:", 0) == 0;
  LINGBOT_CHECK(r >= 0, "cannot open video ", s.path, source == "pipe:0" ? " (the standard input)" : "", ": ", av_error(r),
                pipe && (r == AVERROR_INVALIDDATA || r == AVERROR_EOF)
                    ? " (nothing FFmpeg recognises as video arrived: was the pipe empty, or its writer failed?)"
                    : "");
  s.fmt.reset(raw);
  open(target_fps);
}

VideoReader::VideoReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

VideoReader VideoReader::from_memory(std::vector<uint8_t> bytes, const std::string& label, double target_fps) {
  auto impl = std::make_unique<Impl>();
  Impl& s = *impl;
  s.path = label;
  s.memory = std::make_unique<MemoryFile>();
  s.memory->bytes = std::move(bytes);
  constexpr int kBufferSize = 1 << 16;
  auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferSize));
  LINGBOT_CHECK(buffer != nullptr, "cannot open video ", label, ": out of memory");
  s.avio.reset(avio_alloc_context(buffer, kBufferSize, 0, s.memory.get(), &MemoryFile::read, nullptr, &MemoryFile::seek));
  if (!s.avio) av_free(buffer);
  LINGBOT_CHECK(s.avio != nullptr, "cannot open video ", label, ": out of memory");
  AVFormatContext* raw = avformat_alloc_context();
  LINGBOT_CHECK(raw != nullptr, "cannot open video ", label, ": out of memory");
  raw->pb = s.avio.get();
  raw->flags |= AVFMT_FLAG_CUSTOM_IO;
  const int r = avformat_open_input(&raw, nullptr, nullptr, nullptr);  // frees raw on failure
  LINGBOT_CHECK(r >= 0, "cannot open video ", label, ": ", av_error(r));
  s.fmt.reset(raw);
  VideoReader reader(std::move(impl));
  reader.open(target_fps);
  return reader;
}

// Everything after avformat_open_input: stream, decoder, metadata.
void VideoReader::open(double target_fps) {
  Impl& s = *impl_;
  AVFormatContext* raw = s.fmt.get();
  int r = avformat_find_stream_info(raw, nullptr);
  LINGBOT_CHECK(r >= 0, "cannot open video ", s.path, ": ", av_error(r));

  const AVCodec* decoder = nullptr;
  r = av_find_best_stream(raw, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  LINGBOT_CHECK(r != AVERROR_STREAM_NOT_FOUND, "no video stream in ", s.path);
  if (r == AVERROR_DECODER_NOT_FOUND) {
    int idx = -1;
    for (unsigned i = 0; i < raw->nb_streams; ++i) {
      if (raw->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) {
        idx = static_cast<int>(i);
        break;
      }
    }
    const char* name = idx >= 0 ? avcodec_get_name(raw->streams[idx]->codecpar->codec_id) : "?";
    LINGBOT_CHECK(false, "unsupported video codec '", name, "' in ", s.path);
  }
  LINGBOT_CHECK(r >= 0 && decoder != nullptr, "cannot open video ", s.path, ": ", av_error(r));
  s.stream_index = r;
  AVStream* st = raw->streams[r];
  // FFmpeg prefers a moving picture to an attached one, so this is the only video stream: an audio
  // file's cover art (one still image, stated at a made-up 90000 fps).
  LINGBOT_CHECK(!(st->disposition & AV_DISPOSITION_ATTACHED_PIC), "no video stream in ", s.path,
                " (only an attached picture, such as an audio file's cover art)");

  s.codec.reset(avcodec_alloc_context3(decoder));
  LINGBOT_CHECK(s.codec != nullptr, "cannot open video ", s.path, ": out of memory");
  r = avcodec_parameters_to_context(s.codec.get(), st->codecpar);
  LINGBOT_CHECK(r >= 0, "cannot open video ", s.path, ": ", av_error(r));
  r = avcodec_open2(s.codec.get(), decoder, nullptr);
  LINGBOT_CHECK(r >= 0, "unsupported video codec '", decoder->name, "' in ", s.path, ": ", av_error(r));

  s.frame.reset(av_frame_alloc());
  s.packet.reset(av_packet_alloc());
  LINGBOT_CHECK(s.frame && s.packet, "cannot open video ", s.path, ": out of memory");

  s.time_base = st->time_base;
  s.start_pts = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
  // Clockwise rotation for display, as FFmpeg's own tools and OpenCV derive it.
  if (const uint8_t* m = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, nullptr)) {
    double theta = -av_display_rotation_get(reinterpret_cast<const int32_t*>(m));
    if (std::isfinite(theta)) {
      theta -= 360 * std::floor(theta / 360 + 0.9 / 360);  // into [0, 360)
      const long quarter = std::lround(theta / 90);
      if (std::fabs(theta - 90.0 * quarter) < 2) s.info.rotation = static_cast<int>(quarter % 4) * 90;
    }
  }
  // Frames are sized to the stream's stated size (the canvas): a stream without one is one FFmpeg
  // cannot decode (its animated WebP demuxer, for one, hands the decoder nothing it can read).
  LINGBOT_CHECK(st->codecpar->width > 0 && st->codecpar->height > 0, "cannot open video ", s.path, ": its ",
                decoder->name, " stream states no frame size (", st->codecpar->width, "x", st->codecpar->height,
                "); FFmpeg cannot decode this file");
  const bool swap = s.info.rotation == 90 || s.info.rotation == 270;
  s.info.width = swap ? st->codecpar->height : st->codecpar->width;
  s.info.height = swap ? st->codecpar->width : st->codecpar->height;
  // Sampling and the expected length use the average rate (video.h); the timestamp grid of the gap
  // inference below is the nominal one, on which a variable-rate stream's frames sit.
  const auto rate = [](AVRational q) { return q.num > 0 && q.den > 0 ? av_q2d(q) : 0.0; };  // 0: unknown
  const double average_fps = rate(st->avg_frame_rate), nominal_fps = rate(st->r_frame_rate);
  s.info.fps = average_fps > 0 ? average_fps : nominal_fps > 0 ? nominal_fps : 30;
  // An image pipe's (png_pipe, jpeg_pipe, ...) rate and a raw or multipart MJPEG stream's are their
  // demuxer's option, 25 unless set: nothing in the input states it. (Other raw streams, such as H.264
  // or MPEG-4 elementary streams, carry their rate in the bitstream.)
  const std::string_view format_name = raw->iformat->name;
  s.info.fps_stated = (average_fps > 0 || nominal_fps > 0) && !format_name.ends_with("_pipe") &&
                      format_name != "mjpeg" && format_name != "mpjpeg";
  const AVRational sar = av_guess_sample_aspect_ratio(raw, st, nullptr);
  // Within 1 %: a resize to an even size (scale=500:-2 states 376:375) leaves the pixels square to the eye.
  if (sar.num > 0 && sar.den > 0 && std::fabs(av_q2d(sar) - 1.0) > 0.01) {
    AVRational reduced{};
    av_reduce(&reduced.num, &reduced.den, sar.num, sar.den, INT_MAX);
    s.info.pixel_aspect_num = reduced.num, s.info.pixel_aspect_den = reduced.den;
  }
  const double grid_fps = rate(av_guess_frame_rate(raw, st, nullptr));
  s.info.frame_count = st->nb_frames;
  if (raw->duration != AV_NOPTS_VALUE && raw->duration > 0) {
    s.info.duration_s = static_cast<double>(raw->duration) / AV_TIME_BASE;
  }
  s.info.codec = decoder->name;
  s.interval = video_sample_interval(s.info.fps, target_fps);
  // The frame count the stream should have: stated by the container (MP4), else from its duration
  // (Matroska), which only the gap at the end is compared against (see next()).
  s.declared_frames = std::max<int64_t>(0, st->nb_frames);
  // MP4 / MOV: the frames its edit list shows, from the sample index (nb_frames counts every sample,
  // also those the edit list hides or, past an edit that ends early, drops from the index unread).
  if (st->nb_frames > 0 && std::string_view(raw->iformat->name).starts_with("mov,")) {
    const int entries = avformat_index_get_entries_count(st);
    int64_t shown = 0;
    for (int i = 0; i < entries; ++i) {
      const AVIndexEntry* e = avformat_index_get_entry(st, i);
      if (e && !(e->flags & AVINDEX_DISCARD_FRAME)) ++shown;
    }
    if (entries > 0) s.declared_frames = shown;
  }
  if (s.declared_frames == 0 && s.info.duration_s > 0)
    s.declared_frames = std::llround(s.info.duration_s * s.info.fps);
  s.tracker.emplace(&Impl::pts_seconds, &s, s.info.fps);
  // Without a stated frame count the expected length is duration x rate: frames missing from the
  // middle show as steps of several frame durations (stream_damage.h), given a time base fine enough.
  const double frame_ticks = grid_fps > 0 ? 1.0 / (grid_fps * av_q2d(s.time_base)) : 0.0;
  // Files only: a live source (low latency: a camera, rtsp, a live pipe) has no duration, and a
  // camera slowing down in low light steps by whole frame durations without losing anything.
  if (st->nb_frames <= 0 && s.info.duration_s > 0 && !s.low_latency && frame_ticks >= 2)
    s.tracker->infer_gaps(frame_ticks);
}

VideoReader::~VideoReader() = default;
VideoReader::VideoReader(VideoReader&&) noexcept = default;
VideoReader& VideoReader::operator=(VideoReader&&) noexcept = default;

const VideoInfo& VideoReader::info() const { return impl_->info; }
const StreamDamage& VideoReader::damage() const { return impl_->tracker->damage(); }
int64_t VideoReader::corrupt_packets() const { return impl_->tracker->damage().decode_errors; }
int VideoReader::sample_interval() const { return impl_->interval; }

bool VideoReader::next(VideoFrame* out) {
  Impl& s = *impl_;
  if (s.finished) return false;
  StreamDamageTracker& track = *s.tracker;
  while (true) {
    int r = avcodec_receive_frame(s.codec.get(), s.frame.get());
    if (r == 0) {
      const int64_t pts = s.frame->best_effort_timestamp;
      const bool damaged = s.frame->decode_error_flags != 0 || (s.frame->flags & AV_FRAME_FLAG_CORRUPT) != 0;
      const int64_t position = track.on_frame(pts != AV_NOPTS_VALUE ? pts : StreamDamageTracker::kNoTimestamp, damaged);
      if (pts != AV_NOPTS_VALUE && (s.last_frame_pts == AV_NOPTS_VALUE || pts > s.last_frame_pts)) s.last_frame_pts = pts;
      if (position % s.interval == 0) {
        out->image = s.to_rgb(s.frame.get());
        if (s.info.rotation == 90) out->image = transpose(out->image, Transpose::Rotate270);
        if (s.info.rotation == 180) out->image = transpose(out->image, Transpose::Rotate180);
        if (s.info.rotation == 270) out->image = transpose(out->image, Transpose::Rotate90);
        out->source_index = position;
        out->timestamp_s = pts != AV_NOPTS_VALUE ? Impl::pts_seconds(pts, &s) : static_cast<double>(position) / s.info.fps;
        av_frame_unref(s.frame.get());
        return true;
      }
      av_frame_unref(s.frame.get());
      continue;
    }
    if (r == AVERROR_EOF) {
      s.finished = true;
      // A container without a frame count only says its duration: the frames missing at the end are
      // the time after the last decoded frame (so a variable rate, whose positions are decoded frames,
      // is not taken for a cut); a shortfall of one or two frames there is rounding, not a cut.
      int64_t declared = s.declared_frames;
      if (s.fmt->streams[s.stream_index]->nb_frames <= 0) {
        if (s.last_frame_pts != AV_NOPTS_VALUE && s.info.duration_s > 0) {
          const double tail_s = s.info.duration_s - Impl::pts_seconds(s.last_frame_pts, &s);
          declared = track.positions() + std::max<int64_t>(0, std::llround(tail_s * s.info.fps) - 1);
        }
        if (declared - track.positions() <= 2) declared = 0;
      }
      track.on_end(declared);
      if (s.cut_frame_bytes) track.on_cut_frame(*s.cut_frame_bytes, s.last_packet_bytes);
      return false;
    }
    if (r == AVERROR_INVALIDDATA) {
      track.on_decode_error();
      continue;
    }
    LINGBOT_CHECK(r == AVERROR(EAGAIN), "error decoding video ", s.path, ": ", av_error(r));
    LINGBOT_CHECK(!s.flushing, "error decoding video ", s.path, ": decoder stalled while flushing");

    r = av_read_frame(s.fmt.get(), s.packet.get());
    if (s.interrupt && s.interrupt()) {
      // A read the interrupt callback aborted: the end it asked for, not damage. Whatever the read
      // returned goes too: an error, or a packet cut short where the source stalled (decoding it gave
      // a damaged frame to the model).
      if (r >= 0) av_packet_unref(s.packet.get());
      s.finished = true;
      return false;
    }
    // A multipart JPEG stream (an IP camera's, or FFmpeg's mpjpeg muxer) opens a part after every
    // frame, so its end is a part that never comes: FFmpeg's demuxer calls that invalid data.
    if (r == AVERROR_INVALIDDATA && s.fmt->pb && avio_feof(s.fmt->pb) && std::strcmp(s.fmt->iformat->name, "mpjpeg") == 0)
      r = AVERROR_EOF;
    if (r < 0) {
      // End of file, or the demuxer gave up on a damaged file: keep what was read, drain the decoder.
      if (r != AVERROR_EOF) track.on_read_error(av_error(r));
      if (r == AVERROR_EOF && s.last_packet_end >= 0 && std::strcmp(s.fmt->iformat->name, "yuv4mpegpipe") == 0) {
        // A pipe has no size: at its end, the bytes read so far are the whole stream.
        int64_t size = s.fmt->pb ? avio_size(s.fmt->pb) : -1;
        if (size < 0 && s.fmt->pb) size = avio_tell(s.fmt->pb);
        constexpr int64_t kFrameHeader = 6;  // "FRAME\n" (parameters after FRAME are not written by encoders)
        if (size > s.last_packet_end) s.cut_frame_bytes = std::max<int64_t>(0, size - s.last_packet_end - kFrameHeader);
      }
      s.flushing = true;
      r = avcodec_send_packet(s.codec.get(), nullptr);
      LINGBOT_CHECK(r >= 0, "error decoding video ", s.path, ": ", av_error(r));
      continue;
    }
    if (s.packet->stream_index == s.stream_index) {
      const int64_t pts = s.packet->pts;
      if (s.packet->pos >= 0) {
        s.last_packet_end = s.packet->pos + s.packet->size;
        s.last_packet_bytes = s.packet->size;
      }
      // A packet the demuxer marks as not shown (AV_PKT_FLAG_DISCARD: an MP4 edit list's preroll, the
      // frames before the cut of a clip trimmed with `ffmpeg -ss T -c copy`) is decoded, as later frames
      // may need it, but gives no frame: not awaited (it was counted lost: a trimmed clip was "damaged").
      if (!(s.packet->flags & AV_PKT_FLAG_DISCARD))
        track.on_packet(pts != AV_NOPTS_VALUE ? pts : StreamDamageTracker::kNoTimestamp);
      if (s.codec->codec_id == AV_CODEC_ID_MJPEG && !holds_whole_jpeg(s.packet.get())) {
        // A JPEG cut short (the end of a pipe, a dropped connection): FFmpeg's decoder would emulate
        // the missing end and hand over a half-grey picture without a word. A decode error instead,
        // as a damaged PNG in an image pipe is, so the frame counts as lost.
        av_packet_unref(s.packet.get());
        track.on_decode_error();
        continue;
      }
      r = avcodec_send_packet(s.codec.get(), s.packet.get());
      av_packet_unref(s.packet.get());
      if (r == AVERROR_INVALIDDATA) {
        track.on_decode_error();
        continue;
      }
      LINGBOT_CHECK(r >= 0, "error decoding video ", s.path, " at frame ", track.positions(), ": ", av_error(r));
    } else {
      av_packet_unref(s.packet.get());
    }
  }
}

}  // namespace lingbot::io
