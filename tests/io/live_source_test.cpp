// LiveFrameSource (io/live_source.h) on a real FFmpeg stream: a NUT/FFV1 stream written frame by
// frame into a pipe by a writer thread of the test, read back through "pipe:<fd>".
//   * a consumer as fast as the source gets every frame, in order, exactly (lossless codec);
//   * a slow consumer gets newest-frame-first: frames are dropped, counted exactly
//     (decoded = delivered + dropped), never queued (the frame it gets is the newest written);
//   * stop() ends a source that is silent (writer paused, pipe open) promptly, and so does the
//     interrupt callback; a source that cannot be opened is one clear error;
//   * FFmpeg's device inputs are loaded (libavdevice, not linked) only when a /dev/video source is opened.
#include <gtest/gtest.h>
#include <unistd.h>

#include <dlfcn.h>

extern "C" {
#include <libavdevice/version.h>
#include <libavformat/avformat.h>
}

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "core/error.h"
#include "io/live_source.h"
#include "test_stream_writer.h"

using namespace lingbot;
using namespace lingbot::io;
using Clock = std::chrono::steady_clock;

namespace {

// Noise (incompressible: every frame is larger than FFmpeg's probe size, as a camera frame is), with
// the frame number in the first pixel.
constexpr int kW = 160, kH = 120;
ImageU8 frame_image(int i) {
  ImageU8 img(kW, kH);
  uint32_t h = 2166136261u ^ static_cast<uint32_t>(i);
  for (auto& b : img.rgb) {
    h = (h ^ (h >> 13)) * 16777619u + 12345u;
    b = static_cast<uint8_t>(h >> 24);
  }
  img.rgb[0] = static_cast<uint8_t>(i);
  return img;
}

// Frame number encoded in the pixels (inverse of frame_image at pixel (0, 0), channel 0).
int pattern_number(const ImageU8& img) { return img.rgb[0]; }

struct Pipe {
  int r = -1, w = -1;
  Pipe() { EXPECT_EQ(::pipe(fds_), 0); r = fds_[0]; w = fds_[1]; }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
  int fds_[2] = {-1, -1};
};

FrameSelection every_frame() {
  FrameSelection sel;
  sel.video_fps = 0;  // no fps sampling: every decoded frame is a candidate
  return sel;
}

}  // namespace

TEST(LiveFrameSource, FastConsumerGetsEveryFrameInOrder) {
  Pipe p;
  constexpr int kFrames = 12;
  std::atomic<int> taken{0};
  std::thread writer([&] {
    lingbot_test::StreamVideoWriter out("pipe:" + std::to_string(p.w), kW, kH, 25);
    for (int i = 0; i < kFrames; ++i) {
      // Paced by the consumer: the next frame only once the previous one was taken.
      while (taken.load() < i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      out.write(frame_image(i));
    }
    out.close();
    ::close(p.w);
    p.w = -1;
  });
  LiveFrameSource src("pipe:" + std::to_string(p.r), every_frame());
  EXPECT_EQ(src.info().width, kW);
  EXPECT_EQ(src.info().height, kH);
  SourceFrame f;
  int n = 0;
  while (src.next(&f)) {
    EXPECT_EQ(f.index, n);
    EXPECT_EQ(f.image.rgb, frame_image(pattern_number(f.image)).rgb);
    EXPECT_EQ(pattern_number(f.image), n);
    ++n;
    taken = n;
  }
  writer.join();
  const LiveStats st = src.stats();
  EXPECT_EQ(st.decoded, kFrames);
  EXPECT_EQ(st.delivered + st.dropped, st.decoded);
  EXPECT_EQ(st.delivered, n);
  EXPECT_EQ(st.dropped, 0);
}

TEST(LiveFrameSource, SlowConsumerDropsOldFramesAndCountsThem) {
  Pipe p;
  constexpr int kFrames = 40, kBehind = 5;
  std::thread writer([&] {
    lingbot_test::StreamVideoWriter out("pipe:" + std::to_string(p.w), kW, kH, 25);
    for (int i = 0; i < kFrames; ++i) out.write(frame_image(i));
    out.close();
    ::close(p.w);
    p.w = -1;
  });
  LiveFrameSource src("pipe:" + std::to_string(p.r), every_frame());
  SourceFrame f;
  std::vector<int> got;
  while (src.next(&f)) {
    got.push_back(pattern_number(f.image));
    // The slow engine: busy until kBehind more frames were decoded (or the stream ended).
    const int64_t target = std::min<int64_t>(kFrames, got.back() + 1 + kBehind);
    while (src.stats().decoded < target) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  writer.join();
  const LiveStats st = src.stats();
  EXPECT_EQ(st.decoded, kFrames);
  EXPECT_EQ(st.delivered, static_cast<int64_t>(got.size()));
  EXPECT_EQ(st.delivered + st.dropped, kFrames);
  ASSERT_FALSE(got.empty());
  // Newest first: each frame taken is at least kBehind past the previous (the frames in between were
  // dropped, never queued), except when the stream ended first; the last frame is never dropped.
  for (size_t i = 1; i < got.size(); ++i) {
    if (got[i - 1] + 1 + kBehind <= kFrames) {
      EXPECT_GE(got[i] - got[i - 1], kBehind) << "frame " << got[i];
    }
  }
  EXPECT_EQ(got.back(), kFrames - 1);
  EXPECT_GE(st.dropped, (st.delivered - 2) * (kBehind - 1));
}

TEST(LiveFrameSource, StopEndsASilentSourcePromptly) {
  Pipe p;
  std::atomic<bool> release{false};
  std::thread writer([&] {
    lingbot_test::StreamVideoWriter out("pipe:" + std::to_string(p.w), kW, kH, 25);
    for (int i = 0; i < 3; ++i) out.write(frame_image(i));
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // silent, pipe open
  });
  std::atomic<bool> interrupt{false};
  {
    LiveFrameSource src("pipe:" + std::to_string(p.r), every_frame(), [&] { return interrupt.load(); });
    SourceFrame f;
    ASSERT_TRUE(src.next(&f));
    while (src.stats().decoded < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // Take the newest of the three if it still waits. Not "delivered < 3": when all three were
    // decoded before the first next(), two were dropped and nothing waits (next() would block on the
    // silent source before the interrupt thread exists: a hang seen once in ~10 runs).
    const LiveStats st = src.stats();
    if (st.decoded > st.delivered + st.dropped) {
      ASSERT_TRUE(src.next(&f));
    }
    // Now the source is silent: next() would wait; the interrupt (Ctrl-C) ends it.
    std::thread ctrl_c([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      interrupt = true;
    });
    const auto t0 = Clock::now();
    EXPECT_FALSE(src.next(&f));
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
    ctrl_c.join();
    src.stop();
  }  // the destructor joins the decoder thread blocked on the silent pipe
  release = true;
  writer.join();
}

TEST(LiveFrameSource, UnopenableSourceIsOneClearError) {
  try {
    LiveFrameSource src("/nonexistent/stream.nut", every_frame());
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "video file not found: /nonexistent/stream.nut");
  }
  try {
    LiveFrameSource src("http://127.0.0.1:1/none.nut", every_frame());
    ADD_FAILURE() << "opened a closed port";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot open video http://127.0.0.1:1/none.nut: ", 0), 0u) << e.what();
  }
}

// A /dev/video source loads libavdevice and registers its inputs before the open: the library is not
// in the process before (not linked: it costs every process ~0.1 s to start; each ctest test is its
// own process, and no other test here opens a camera path), and the V4L2 input format exists after.
TEST(LiveFrameSource, ACameraPathLoadsFFmpegsDeviceInputs) {
  const std::string lib = "libavdevice.so." + std::to_string(LIBAVDEVICE_VERSION_MAJOR);
  EXPECT_EQ(dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD), nullptr) << lib << " is linked";
  EXPECT_EQ(av_find_input_format("video4linux2"), nullptr);
  try {
    LiveFrameSource src("/dev/video-lingbot-test-none", every_frame());
    ADD_FAILURE() << "opened a missing camera";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "video file not found: /dev/video-lingbot-test-none");
  }
  void* loaded = dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD);  // a new reference, if it is in the process
  EXPECT_NE(loaded, nullptr);
  if (loaded != nullptr) dlclose(loaded);
  EXPECT_NE(av_find_input_format("video4linux2"), nullptr);
}
