#pragma once
// Test helper: encodes RGB frames into a video file with libavcodec, so video tests need no
// committed media. FFV1 stores 8-bit RGB losslessly (exact pixels); other encoders get YUV 4:2:0.
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libswscale/swscale.h>
}
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "io/image.h"

namespace lingbot_test {

// Writes `frames` (all the same size) at `fps` with encoder `codec_name` into `path` (container by
// extension); `display_rotation_cw` degrees adds a display-matrix side datum; `movflags` is the MP4
// muxer option (e.g. "+faststart": index at the front, as streaming sites serve files); `pts` (in
// frames, one per frame) gives frames other timestamps than 0, 1, 2, ... (a gap: frames that never
// arrived); `pixel_aspect` (0:1 = unstated) is the stored pixels' width : height. Returns false when
// this libavcodec lacks the encoder.
inline bool write_test_video(const std::filesystem::path& path, const char* codec_name,
                             const std::vector<lingbot::io::ImageU8>& frames, int fps, double display_rotation_cw = 0,
                             const char* movflags = nullptr, const std::vector<int64_t>& pts = {},
                             AVRational pixel_aspect = AVRational{0, 1}) {
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name);
  if (!codec || frames.empty()) return false;
  const int w = frames[0].width, h = frames[0].height;
  AVFormatContext* fmt = nullptr;
  EXPECT_GE(avformat_alloc_output_context2(&fmt, nullptr, nullptr, path.c_str()), 0);
  AVStream* st = avformat_new_stream(fmt, nullptr);
  AVCodecContext* ctx = avcodec_alloc_context3(codec);
  ctx->width = w;
  ctx->height = h;
  ctx->time_base = AVRational{1, fps};
  ctx->framerate = AVRational{fps, 1};
  ctx->sample_aspect_ratio = pixel_aspect;
  const bool lossless_rgb = std::strcmp(codec_name, "ffv1") == 0;
  ctx->pix_fmt = lossless_rgb ? AV_PIX_FMT_0RGB32 : AV_PIX_FMT_YUV420P;
  if (fmt->oformat->flags & AVFMT_GLOBALHEADER) ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  EXPECT_GE(avcodec_open2(ctx, codec, nullptr), 0);
  EXPECT_GE(avcodec_parameters_from_context(st->codecpar, ctx), 0);
  st->time_base = ctx->time_base;
  st->avg_frame_rate = ctx->framerate;
  st->sample_aspect_ratio = pixel_aspect;
  if (display_rotation_cw != 0) {
    auto* m = reinterpret_cast<int32_t*>(av_stream_new_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, 9 * sizeof(int32_t)));
    av_display_rotation_set(m, display_rotation_cw);  // clockwise, per its documentation
  }
  EXPECT_GE(avio_open(&fmt->pb, path.c_str(), AVIO_FLAG_WRITE), 0);
  AVDictionary* mux_options = nullptr;
  if (movflags) av_dict_set(&mux_options, "movflags", movflags, 0);
  EXPECT_GE(avformat_write_header(fmt, &mux_options), 0);
  av_dict_free(&mux_options);
  SwsContext* sws = sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, ctx->pix_fmt, lossless_rgb ? SWS_POINT : SWS_BICUBIC,
                                   nullptr, nullptr, nullptr);
  AVFrame* frame = av_frame_alloc();
  frame->format = ctx->pix_fmt;
  frame->width = w;
  frame->height = h;
  EXPECT_GE(av_frame_get_buffer(frame, 0), 0);
  AVPacket* pkt = av_packet_alloc();
  auto drain = [&]() {
    while (avcodec_receive_packet(ctx, pkt) == 0) {
      av_packet_rescale_ts(pkt, ctx->time_base, st->time_base);
      pkt->stream_index = st->index;
      EXPECT_GE(av_interleaved_write_frame(fmt, pkt), 0);
    }
  };
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_GE(av_frame_make_writable(frame), 0);
    const uint8_t* src[4] = {frames[i].rgb.data(), nullptr, nullptr, nullptr};
    const int src_stride[4] = {w * 3, 0, 0, 0};
    sws_scale(sws, src, src_stride, 0, h, frame->data, frame->linesize);
    frame->pts = pts.empty() ? static_cast<int64_t>(i) : pts[i];
    EXPECT_GE(avcodec_send_frame(ctx, frame), 0);
    drain();
  }
  avcodec_send_frame(ctx, nullptr);
  drain();
  EXPECT_GE(av_write_trailer(fmt), 0);
  av_packet_free(&pkt);
  av_frame_free(&frame);
  sws_freeContext(sws);
  avcodec_free_context(&ctx);
  avio_closep(&fmt->pb);
  avformat_free_context(fmt);
  return true;
}

}  // namespace lingbot_test
