#pragma once
// `lingbot-map run`'s frames: one interface over an image folder, a video file or stream, a --live
// source and the generated --demo frames, with what the run reports of them (count, notices,
// sampling, damage).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/frame_source.h"
#include "io/live_source.h"
#include "io/stream_damage.h"
#include "lingbot/preprocess.h"
#include "run_options.h"

namespace lingbot::cli {

// One interface over the folder / video FrameSource and the generated demo frames.
struct Input {
  std::string kind;         // "images" | "video" | "live" | "demo"
  std::string path;         // folder or file ("" for the demo)
  std::function<bool(io::SourceFrame*)> next;
  std::optional<int64_t> count;      // exact, when known up front
  std::optional<int64_t> estimated;  // for progress / the automatic keyframe interval
  io::ImageSize canvas;              // common preprocessed size of every frame
  std::function<const io::StreamDamage*()> damage = [] { return nullptr; };  // a video's (a folder's: FrameLoop's)
  std::shared_ptr<io::LiveFrameSource> live;  // --live: for its drop counts
  std::vector<std::string> notices;           // io::FrameSource::notices
  std::optional<io::FrameSource::VideoSampling> sampling;  // a video (file, pipe or --live source)
};

// Opens the input `a` names (--images, --video, --live or --demo), checking it and decoding what
// the canvas needs; `interrupted` is polled during blocking reads (a signal aborts the open).
Input open_input(const RunArgs& a, const PreprocessOptions& pre, std::function<bool()> interrupted);

}  // namespace lingbot::cli
