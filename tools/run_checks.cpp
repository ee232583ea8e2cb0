#include "run_checks.h"

#include <algorithm>
#include <cstdio>
#include <span>

#include "core/error.h"
#include "io/output_validity.h"

namespace lingbot::cli {

MemoryAdvice run_memory_advice() {
  return {"the run", "lower --kv-window or --scale-frames (the KV cache keeps the window's and the scale frames) or --image-size",
          "lower --kv-window or --scale-frames (the KV cache keeps the window's and the scale frames), use --kv-dtype bf16 "
          "(half the bytes), or lower --image-size",
          "process fewer frames (--first-k, --stride, --fps), a larger --keyframe-interval, or bound the history with "
          "--max-special-frames N (the newest N past frames keep their special tokens and camera-head entries)",
          "lower --image-size or --scale-frames",
          "bound the special tokens past the window with --max-special-frames N (the newest N past frames keep theirs), "
          "process fewer frames (--first-k, --stride, --fps) or use a larger --keyframe-interval"};
}

namespace {

std::span<const float> values(const Tensor& t) {
  return t.empty() ? std::span<const float>() : std::span<const float>(t.f32(), static_cast<size_t>(t.numel()));
}

}  // namespace

FrameCheck check_frame_result(const FrameResult& r) {
  FrameCheck c;
  const std::pair<const char*, const Tensor*> fields[] = {
      {"pose_enc", &r.pose_enc},       {"extrinsic", &r.extrinsic},   {"intrinsic", &r.intrinsic},
      {"depth", &r.depth},             {"depth_conf", &r.depth_conf}, {"world_points", &r.world_points}};
  for (const auto& [name, t] : fields) {
    const int64_t n = io::count_non_finite(values(*t));
    if (n > 0) c.non_finite.emplace_back(name, n);
  }
  c.geometry_valid = io::has_valid_geometry(values(r.pose_enc), values(r.extrinsic), values(r.intrinsic));
  return c;
}

void RunWarnings::add(nlohmann::json entry, const std::string& line) {
  if (count_ < kMaxLogged) std::fprintf(stderr, "warning: %s\n", line.c_str());
  if (count_ == kMaxLogged) std::fprintf(stderr, "warning: further warnings only in summary.json\n");
  ++count_;
  if (list_.size() < kMaxListed) list_.push_back(std::move(entry));
}

void RunWarnings::add_frame(int64_t frame, const FrameCheck& c) {
  if (c.non_finite.empty() && c.geometry_valid) return;
  nlohmann::json fields = nlohmann::json::object();
  std::string names;
  for (const auto& [name, n] : c.non_finite) {
    fields[name] = n;
    names += (names.empty() ? "" : ", ") + name + " (" + std::to_string(n) + ")";
  }
  add({{"kind", "non_finite"}, {"frame", frame}, {"fields", fields}, {"geometry", c.geometry_valid}},
      "frame " + std::to_string(frame) + ": non-finite values in " + names +
          (c.geometry_valid ? "; those pixels are invalid (0 in PNGs, no points)"
                            : "; the frame has no geometry: poses.json marks it \"valid\": false, no TUM line, no points"));
}

void RunWarnings::add_damage(const io::StreamDamage& d) {
  if (!d.any()) return;
  nlohmann::json lost = nlohmann::json::array(), damaged = nlohmann::json::array();
  for (const auto& p : d.lost) lost.push_back({{"position", p.position}, {"timestamp", p.timestamp_s}});
  for (const auto& p : d.damaged) {
    nlohmann::json e = {{"position", p.position}, {"timestamp", p.timestamp_s}};
    if (!p.file.empty()) e.update({{"file", p.file}, {"problem", p.problem}});
    damaged.push_back(std::move(e));
  }
  nlohmann::json entry = {{"kind", "input_damaged"},    {"decode_errors", d.decode_errors},
                          {"lost_frames", d.lost_frames}, {"lost", lost},
                          {"damaged_frames", d.damaged_frames}, {"damaged", damaged},
                          {"truncated", d.truncated}};
  if (d.truncated) entry["truncation"] = d.truncation;
  add(std::move(entry), "input damaged: " + d.describe());
}

void RunWarnings::add_unaligned_windows(const std::vector<int64_t>& windows, int64_t overlap_frames) {
  if (windows.empty()) return;
  std::string names;
  for (const int64_t w : windows) names += (names.empty() ? "" : ", ") + std::to_string(w);
  const bool no_overlap = overlap_frames == 0;
  add({{"kind", "windows_not_aligned"},
       {"windows", windows},
       {"reason", no_overlap ? "no overlap" : "no finite pose in the overlap"}},
      "window" + std::string(windows.size() > 1 ? "s " : " ") + names + " not aligned to window 0 (" +
          (no_overlap ? "--overlap-size 0: no shared frames" : "no overlap frame has a finite pose in both windows") +
          "); each keeps its own world frame, so poses and points of different windows are not in one frame");
}

}  // namespace lingbot::cli
