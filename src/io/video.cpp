#include "io/video.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cmath>

#include "core/error.h"
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

}  // namespace

void quiet_libav_logging() { av_log_set_level(AV_LOG_QUIET); }

bool is_stream_url(const std::string& source) {
  return source.find("://") != std::string::npos || source.rfind("pipe:", 0) == 0;
}

int video_sample_interval(double source_fps, double target_fps) {
  if (target_fps <= 0) return 1;
  if (!(source_fps > 0)) source_fps = 30;  // upstream: cap.get(CAP_PROP_FPS) or 30
  return static_cast<int>(std::max<long long>(1, round_half_even(source_fps / target_fps)));
}

struct VideoReader::Impl {
  std::string path;
  std::function<bool()> interrupt;  // VideoOpenOptions::interrupt (FFmpeg calls it through `fmt`)
  VideoInfo info;
  int interval = 1;
  int stream_index = -1;
  AVRational time_base{0, 1};
  int64_t start_pts = 0;
  int64_t decoded = 0;      // frames received from the decoder so far
  int64_t corrupt = 0;      // packets/frames rejected as invalid data
  bool flushing = false;    // the demuxer is exhausted and the decoder was told so
  bool finished = false;
  std::unique_ptr<AVFormatContext, FormatCloser> fmt;
  std::unique_ptr<AVCodecContext, CodecFreer> codec;
  std::unique_ptr<AVFrame, FrameFreer> frame;
  std::unique_ptr<AVPacket, PacketFreer> packet;
  std::unique_ptr<SwsContext, SwsFreer> sws;

  ImageU8 to_rgb(const AVFrame* f) {
    LINGBOT_CHECK(f->width > 0 && f->height > 0, "error decoding video ", path, ": empty frame");
    SwsContext* ctx = sws_getCachedContext(sws.release(), f->width, f->height,
                                           static_cast<AVPixelFormat>(f->format), f->width, f->height,
                                           AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr);
    sws.reset(ctx);
    LINGBOT_CHECK(ctx != nullptr, "error decoding video ", path, ": cannot convert pixel format ",
                  av_get_pix_fmt_name(static_cast<AVPixelFormat>(f->format)), " to RGB");
    ImageU8 img(f->width, f->height);
    uint8_t* dst[4] = {img.rgb.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {f->width * 3, 0, 0, 0};
    sws_scale(ctx, f->data, f->linesize, 0, f->height, dst, dst_stride);
    return img;
  }
};

VideoReader::VideoReader(const std::filesystem::path& path, double target_fps)
    : VideoReader(path.string(), target_fps, VideoOpenOptions{}) {}

VideoReader::VideoReader(const std::string& source, double target_fps, const VideoOpenOptions& open)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.path = source;
  if (!is_stream_url(source)) {
    std::error_code ec;
    LINGBOT_CHECK(std::filesystem::exists(source, ec), "video file not found: ", s.path);
    LINGBOT_CHECK(!std::filesystem::is_directory(source, ec), "cannot open video ", s.path, ": is a directory");
  }
  const AVInputFormat* format = nullptr;
  if (!open.format.empty()) {
    format = av_find_input_format(open.format.c_str());
    LINGBOT_CHECK(format != nullptr, "cannot open video ", s.path, ": FFmpeg input format '", open.format,
                  "' is not available");
  }
  AVFormatContext* raw = avformat_alloc_context();
  LINGBOT_CHECK(raw != nullptr, "cannot open video ", s.path, ": out of memory");
  if (open.interrupt) {
    s.interrupt = open.interrupt;
    raw->interrupt_callback.callback = [](void* opaque) -> int { return (*static_cast<std::function<bool()>*>(opaque))() ? 1 : 0; };
    raw->interrupt_callback.opaque = &s.interrupt;  // Impl is heap-allocated: the address is stable
  }
  if (open.low_latency) {
    raw->probesize = 32 * 1024;               // bytes (FFmpeg's minimum useful probe)
    raw->max_analyze_duration = AV_TIME_BASE / 10;
    raw->fps_probe_size = 0;                  // no waiting for frames to guess the rate
  }
  int r = avformat_open_input(&raw, s.path.c_str(), format, nullptr);  // frees `raw` on failure
  LINGBOT_CHECK(r >= 0, "cannot open video ", s.path, ": ", av_error(r));
  s.fmt.reset(raw);
  r = avformat_find_stream_info(raw, nullptr);
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
  const bool swap = s.info.rotation == 90 || s.info.rotation == 270;
  s.info.width = swap ? st->codecpar->height : st->codecpar->width;
  s.info.height = swap ? st->codecpar->width : st->codecpar->height;
  s.info.fps = av_q2d(av_guess_frame_rate(raw, st, nullptr));
  if (!(s.info.fps > 0)) s.info.fps = 30;
  s.info.frame_count = st->nb_frames;
  if (raw->duration != AV_NOPTS_VALUE && raw->duration > 0) {
    s.info.duration_s = static_cast<double>(raw->duration) / AV_TIME_BASE;
  }
  s.info.codec = decoder->name;
  s.interval = video_sample_interval(s.info.fps, target_fps);
}

VideoReader::~VideoReader() = default;
VideoReader::VideoReader(VideoReader&&) noexcept = default;
VideoReader& VideoReader::operator=(VideoReader&&) noexcept = default;

const VideoInfo& VideoReader::info() const { return impl_->info; }
int64_t VideoReader::corrupt_packets() const { return impl_->corrupt; }
int VideoReader::sample_interval() const { return impl_->interval; }

bool VideoReader::next(VideoFrame* out) {
  Impl& s = *impl_;
  if (s.finished) return false;
  while (true) {
    int r = avcodec_receive_frame(s.codec.get(), s.frame.get());
    if (r == 0) {
      const int64_t index = s.decoded++;
      if (index % s.interval == 0) {
        out->image = s.to_rgb(s.frame.get());
        if (s.info.rotation == 90) out->image = transpose(out->image, Transpose::Rotate270);
        if (s.info.rotation == 180) out->image = transpose(out->image, Transpose::Rotate180);
        if (s.info.rotation == 270) out->image = transpose(out->image, Transpose::Rotate90);
        out->source_index = index;
        const int64_t pts = s.frame->best_effort_timestamp;
        out->timestamp_s = pts != AV_NOPTS_VALUE
                               ? static_cast<double>(pts - s.start_pts) * av_q2d(s.time_base)
                               : static_cast<double>(index) / s.info.fps;
        av_frame_unref(s.frame.get());
        return true;
      }
      av_frame_unref(s.frame.get());
      continue;
    }
    if (r == AVERROR_EOF) {
      s.finished = true;
      return false;
    }
    if (r == AVERROR_INVALIDDATA) {
      ++s.corrupt;
      continue;
    }
    LINGBOT_CHECK(r == AVERROR(EAGAIN), "error decoding video ", s.path, ": ", av_error(r));
    LINGBOT_CHECK(!s.flushing, "error decoding video ", s.path, ": decoder stalled while flushing");

    r = av_read_frame(s.fmt.get(), s.packet.get());
    if (r == AVERROR_EOF) {
      s.flushing = true;
      r = avcodec_send_packet(s.codec.get(), nullptr);
      LINGBOT_CHECK(r >= 0, "error decoding video ", s.path, ": ", av_error(r));
      continue;
    }
    LINGBOT_CHECK(r >= 0, "error reading video ", s.path, ": ", av_error(r));
    if (s.packet->stream_index == s.stream_index) {
      r = avcodec_send_packet(s.codec.get(), s.packet.get());
      av_packet_unref(s.packet.get());
      if (r == AVERROR_INVALIDDATA) {
        ++s.corrupt;
        continue;
      }
      LINGBOT_CHECK(r >= 0, "error decoding video ", s.path, " at frame ", s.decoded, ": ", av_error(r));
    } else {
      av_packet_unref(s.packet.get());
    }
  }
}

}  // namespace lingbot::io
