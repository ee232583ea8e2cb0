#pragma once
// What a frame's timestamp counts. A video or live stream has a clock: seconds of presentation time
// from the stream start (and so has a timestamp a caller gives). Image folders, demo frames and
// arrays have none: their timestamp is the frame's index, and a display must not label it seconds.
#include <cstdint>

namespace lingbot::io {

enum class TimestampUnit : uint8_t { FrameIndex, Seconds };

}  // namespace lingbot::io
