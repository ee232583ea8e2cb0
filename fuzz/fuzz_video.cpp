// libFuzzer target: the video reader (io/video.h) on an in-memory file (custom AVIO): probing,
// demuxing, decoding, pixel conversion and the damage bookkeeping, for at most a few frames.
#include "fuzz_util.h"
#include "io/video.h"

namespace {
// FFmpeg's own log would flood the fuzzer output; set once, before the first input.
const bool kQuiet = (lingbot::io::quiet_libav_logging(), true);
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kQuiet;
  lingbot_fuzz::expect_only_lingbot_errors([&] {
    auto reader = lingbot::io::VideoReader::from_memory(lingbot_fuzz::bytes(data, size), "fuzz video");
    // Huge declared frame sizes are legal for a decoder; keep one input's cost bounded.
    if (static_cast<int64_t>(reader.info().width) * reader.info().height > 4096 * 4096) return;
    lingbot::io::VideoFrame f;
    for (int i = 0; i < 8 && reader.next(&f); ++i) {
    }
    (void)reader.damage().describe();
  });
  return 0;
}
