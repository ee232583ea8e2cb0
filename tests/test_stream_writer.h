#pragma once
// Test helper: encodes RGB frames one at a time into a streamable container (NUT + FFV1, lossless
// RGB) and pushes every frame out at once, so a reader sees it while the stream is still open.
// Sinks: an FFmpeg URL (e.g. "pipe:5" for a file descriptor) or a callback receiving the bytes
// (e.g. an HTTP response body). Errors are gtest failures (ok() false).
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "io/image.h"

namespace lingbot_test {

class StreamVideoWriter {
 public:
  using ByteSink = std::function<bool(const uint8_t* data, size_t n)>;

  // Writes to an FFmpeg output URL ("pipe:N", a file path).
  StreamVideoWriter(const std::string& url, int width, int height, int fps) { open(url, {}, width, height, fps); }
  // Writes to `sink` (returning false marks the writer failed, e.g. the client went away).
  StreamVideoWriter(ByteSink sink, int width, int height, int fps) { open("", std::move(sink), width, height, fps); }
  ~StreamVideoWriter() { close(); }
  StreamVideoWriter(const StreamVideoWriter&) = delete;
  StreamVideoWriter& operator=(const StreamVideoWriter&) = delete;

  bool ok() const { return ok_; }

  // Encodes and flushes one frame (same size as given at construction).
  bool write(const lingbot::io::ImageU8& img) {
    if (!ok_) return false;
    if (av_frame_make_writable(frame_) < 0) return ok_ = false;
    const uint8_t* src[4] = {img.rgb.data(), nullptr, nullptr, nullptr};
    const int src_stride[4] = {img.width * 3, 0, 0, 0};
    sws_scale(sws_, src, src_stride, 0, img.height, frame_->data, frame_->linesize);
    frame_->pts = pts_++;
    if (avcodec_send_frame(ctx_, frame_) < 0) return ok_ = false;
    drain();
    avio_flush(fmt_->pb);
    return ok_;
  }

  // Ends the stream (trailer) and closes the sink; idempotent.
  void close() {
    if (!fmt_) return;
    if (ok_) {
      avcodec_send_frame(ctx_, nullptr);
      drain();
      av_write_trailer(fmt_);
      avio_flush(fmt_->pb);
    }
    av_packet_free(&pkt_);
    av_frame_free(&frame_);
    sws_freeContext(sws_);
    avcodec_free_context(&ctx_);
    if (custom_io_ && fmt_->pb) {
      av_freep(&fmt_->pb->buffer);
      avio_context_free(&fmt_->pb);
    } else {
      avio_closep(&fmt_->pb);
    }
    avformat_free_context(fmt_);
    fmt_ = nullptr;
  }

 private:
  static int write_cb(void* opaque, uint8_t* buf, int n) {  // FFmpeg 5's AVIO signature (non-const)
    auto* self = static_cast<StreamVideoWriter*>(opaque);
    if (!self->sink_(buf, static_cast<size_t>(n))) {
      self->ok_ = false;
      return AVERROR(EPIPE);
    }
    return n;
  }

  void open(const std::string& url, ByteSink sink, int w, int h, int fps) {
    sink_ = std::move(sink);
    const AVCodec* codec = avcodec_find_encoder_by_name("ffv1");
    ok_ = codec != nullptr && avformat_alloc_output_context2(&fmt_, nullptr, "nut", nullptr) >= 0;
    EXPECT_TRUE(ok_) << "no FFV1 encoder / NUT muxer";
    if (!ok_) return;
    AVStream* st = avformat_new_stream(fmt_, nullptr);
    ctx_ = avcodec_alloc_context3(codec);
    ctx_->width = w;
    ctx_->height = h;
    ctx_->time_base = AVRational{1, fps};
    ctx_->framerate = AVRational{fps, 1};
    ctx_->pix_fmt = AV_PIX_FMT_0RGB32;
    if (fmt_->oformat->flags & AVFMT_GLOBALHEADER) ctx_->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    ok_ = avcodec_open2(ctx_, codec, nullptr) >= 0 && avcodec_parameters_from_context(st->codecpar, ctx_) >= 0;
    st->time_base = ctx_->time_base;
    st->avg_frame_rate = ctx_->framerate;
    if (sink_) {
      constexpr int kBuf = 4096;
      auto* buf = static_cast<unsigned char*>(av_malloc(kBuf));
      fmt_->pb = avio_alloc_context(buf, kBuf, 1, this, nullptr, &StreamVideoWriter::write_cb, nullptr);
      custom_io_ = true;
    } else {
      ok_ = ok_ && avio_open(&fmt_->pb, url.c_str(), AVIO_FLAG_WRITE) >= 0;
    }
    fmt_->flush_packets = 1;
    ok_ = ok_ && avformat_write_header(fmt_, nullptr) >= 0;
    EXPECT_TRUE(ok_) << "cannot start the NUT stream";
    avio_flush(fmt_->pb);
    sws_ = sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, ctx_->pix_fmt, SWS_POINT, nullptr, nullptr, nullptr);
    frame_ = av_frame_alloc();
    frame_->format = ctx_->pix_fmt;
    frame_->width = w;
    frame_->height = h;
    ok_ = ok_ && av_frame_get_buffer(frame_, 0) >= 0;
    pkt_ = av_packet_alloc();
  }

  void drain() {
    while (avcodec_receive_packet(ctx_, pkt_) == 0) {
      av_packet_rescale_ts(pkt_, ctx_->time_base, fmt_->streams[0]->time_base);
      pkt_->stream_index = 0;
      if (av_write_frame(fmt_, pkt_) < 0) ok_ = false;
      av_packet_unref(pkt_);
    }
  }

  ByteSink sink_;
  bool ok_ = false;
  bool custom_io_ = false;
  AVFormatContext* fmt_ = nullptr;
  AVCodecContext* ctx_ = nullptr;
  SwsContext* sws_ = nullptr;
  AVFrame* frame_ = nullptr;
  AVPacket* pkt_ = nullptr;
  int64_t pts_ = 0;
};

}  // namespace lingbot_test
