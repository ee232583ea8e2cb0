#pragma once
// Live input for `lingbot-map run --live`: any FFmpeg input (a V4L2 camera /dev/videoN, rtsp://,
// http://, pipe:0 for a stream on stdin, or a file) decoded on its own thread, newest frame first.
//
// The decoder thread keeps exactly ONE decoded frame waiting (the newest). When the engine is slower
// than the source, a frame not taken before the next one is decoded is dropped and counted; nothing
// is ever queued beyond that one frame, so memory and latency stay bounded however far behind the
// engine falls. The length is unknown (no frame count). next() blocks until a frame newer than the
// last one it returned is available, and returns false at the end of the stream or once stopped.
//
//   LiveFrameSource src("pipe:0", sel, [&] { return ctrl_c_pressed; });
//   SourceFrame f;
//   while (src.next(&f)) { ... }           // src.stats().dropped: frames the engine never saw
//
// Selection: video frames are sampled at sel.video_fps (as VideoReader does), then first_k / stride
// apply to the sampled frames as in FrameSource; frames dropped for being late count after that.
// Stop: stop() (any thread), the `interrupt` callback turning true (Ctrl-C), the end of the stream or
// the destructor end the decoder thread cleanly, also while FFmpeg blocks on I/O (its interrupt
// callback). An error of the source after it opened is rethrown by next() after the frames decoded
// before it; an I/O error caused by a stop/interrupt is a clean end.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "io/frame_source.h"
#include "io/video.h"

namespace lingbot::io {

struct LiveStats {
  int64_t decoded = 0;    // frames selected by the decoder (after fps sampling, first_k, stride)
  int64_t delivered = 0;  // frames next() returned
  int64_t dropped = 0;    // frames replaced by a newer one before next() took them
  // decoded == delivered + dropped (+ 1 while a frame waits)
};

class LiveFrameSource {
 public:
  // Opens `source` on the calling thread (errors as VideoReader's, e.g. "cannot open video <s>: ...")
  // and starts decoding. /dev/video* opens with FFmpeg's V4L2 input. `interrupt` is polled while
  // opening, decoding and waiting; returning true stops the source.
  LiveFrameSource(const std::string& source, const FrameSelection& sel, std::function<bool()> interrupt = {});
  ~LiveFrameSource();  // stops and joins the decoder thread
  LiveFrameSource(const LiveFrameSource&) = delete;
  LiveFrameSource& operator=(const LiveFrameSource&) = delete;

  // The newest decoded frame not returned yet (index = position among the frames returned, name
  // "frame_<decoded index>", timestamp in seconds of the source); false at the end or when stopped.
  bool next(SourceFrame* out);
  void stop();
  LiveStats stats() const;
  // Stops the source (as stop()), waits for the decoder thread to end and returns what it found
  // damaged (as VideoReader::damage(): decode errors, lost frames, a cut), for the end of a run.
  // Frames dropped for being late are not damage (stats()).
  StreamDamage finish_and_damage();
  const VideoInfo& info() const;  // the source's stream (frame_count 0 for a live source)
  // The stream's frame rate and the sampling FrameSelection::video_fps gives, as FrameSource's.
  FrameSource::VideoSampling video_sampling() const;
  // Preprocessed size of every frame (the stream's frame size, oriented by the selection).
  ImageSize canvas(const PreprocessOptions& opt) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lingbot::io
