#include "io/stream_damage.h"

#include <algorithm>
#include <cmath>

namespace lingbot::io {

namespace {

// "20-39" / "3, 7, 12" (consecutive runs collapsed), with "..." when the list was capped.
std::string ranges(const std::vector<StreamPosition>& v, int64_t total) {
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1].position == v[j].position + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(v[i].position);
    if (j > i) {  // (two appends: GCC 12 warns falsely on `"-" + to_string`)
      s += '-';
      s += std::to_string(v[j].position);
    }
    i = j + 1;
  }
  if (static_cast<int64_t>(v.size()) < total) s += ", ...";
  return s;
}

}  // namespace

std::string StreamDamage::describe() const {
  std::string s;
  auto add = [&](const std::string& part) {
    if (!s.empty()) s += ", ";
    s += part;
  };
  if (decode_errors > 0) add(std::to_string(decode_errors) + " decode error" + (decode_errors == 1 ? "" : "s"));
  if (lost_frames > 0) {
    std::string part = std::to_string(lost_frames) + " frame" + (lost_frames == 1 ? "" : "s") + " lost";
    if (!lost.empty()) part += " (stream positions " + ranges(lost, lost_frames) + ")";
    add(part);
  }
  if (damaged_frames > 0) {
    std::string part = std::to_string(damaged_frames) + " frame" + (damaged_frames == 1 ? "" : "s") +
                       " decoded with errors (positions " + ranges(damaged, damaged_frames);
    if (!damaged.empty() && !damaged.front().file.empty())
      part += (damaged_frames > 1 ? "; first " : "; ") + damaged.front().file + ": " + damaged.front().problem;
    add(part + ")");
  }
  if (truncated) add(truncation);
  return s;
}

std::string damaged_input_message(DamagedInput input, const StreamDamage& d, std::string_view done) {
  if (input == DamagedInput::ImageFolder)
    return "the input images are damaged (" + d.describe() +
           "); libjpeg concealed the lost data in those frames, which were " + std::string(done) + " as decoded";
  return "the input video is damaged (" + d.describe() + "); the frames that decoded were " + std::string(done);
}

void StreamDamage::add_damaged_image(int64_t index, const std::string& file, const CorruptData& corrupt) {
  ++damaged_frames;
  if (damaged.size() < kMaxListed)
    damaged.push_back({index, static_cast<double>(index), file, corrupt.first_warning});
}

void StreamDamageTracker::on_packet(int64_t pts) {
  if (pts != kNoTimestamp) pending_.insert(pts);
}

void StreamDamageTracker::lose(int64_t pts, int64_t position) {
  ++damage_.lost_frames;
  const StreamPosition p{position, pts != kNoTimestamp ? seconds_(pts, ctx_) : static_cast<double>(position) / fps_};
  if (damage_.lost.size() < StreamDamage::kMaxListed) {
    if (pts != kNoTimestamp) lost_index_[pts] = damage_.lost.size();
    damage_.lost.push_back(p);
  }
  if (pts != kNoTimestamp) {
    if (inferred_.erase(pts) > 0) inferred_lost_[pts] = position;
    lost_position_[pts] = position;
    // Only a recent loss can still come out late (reordering spans a few frames): memory stays
    // bounded on a long stream that keeps losing frames.
    if (lost_position_.size() > kMaxRevivable) lost_position_.erase(lost_position_.begin());
  }
}

void StreamDamageTracker::add_grid_gaps(int64_t pts) {
  if (frame_ticks_ <= 0 || !on_grid_ || pts == kNoTimestamp) return;
  if (last_pts_ != kNoTimestamp && pts <= last_pts_) return;  // a late frame revived below: no step
  if (last_pts_ != kNoTimestamp) {
    // In double: corrupt timestamps may be far apart (their int64 difference could overflow).
    const double steps = (static_cast<double>(pts) - static_cast<double>(last_pts_)) / frame_ticks_;
    const double k = std::round(steps);
    if (k < 1 || std::abs(steps - k) > 0.25 || k - 1 > static_cast<double>(kMaxInferredGap)) {
      // A variable frame rate (its steps say nothing about lost frames), or a jump too long to be
      // frames that went missing (a corrupt or reset timestamp): no inference from here on.
      on_grid_ = false;
    } else {
      // Each empty slot on the grid is a frame that was never sent: pending, so that the loop in
      // on_frame loses it in presentation order with its timestamp. A slot a sent packet fills
      // (within half a frame) is left to that packet.
      const int64_t half = half_frame();
      std::vector<int64_t> empty;
      for (int64_t j = 1; j < static_cast<int64_t>(k); ++j) {
        const int64_t slot = last_pts_ + std::llround(static_cast<double>(j) * frame_ticks_);
        const auto it = pending_.lower_bound(slot - half);
        if (it == pending_.end() || *it > slot + half) empty.push_back(slot);
      }
      if (!empty.empty() && ++gap_events_ > kMaxGapEvents) {
        withdraw_inferred();
      } else {
        pending_.insert(empty.begin(), empty.end());
        inferred_.insert(empty.begin(), empty.end());
      }
    }
  }
  last_pts_ = pts;
}

void StreamDamageTracker::withdraw_inferred() {
  on_grid_ = false;
  std::set<int64_t> withdrawn;  // positions of the inferred losses
  for (const int64_t slot : inferred_) pending_.erase(slot);
  for (const auto& [slot, position] : inferred_lost_) {
    withdrawn.insert(position);
    lost_position_.erase(slot);
    --damage_.lost_frames;
  }
  inferred_.clear();
  inferred_lost_.clear();
  if (withdrawn.empty()) return;
  // The listed losses left, their indices renumbered.
  std::vector<StreamPosition> kept;
  std::map<int64_t, size_t> index_of_position;
  for (const StreamPosition& p : damage_.lost)
    if (!withdrawn.count(p.position)) {
      index_of_position[p.position] = kept.size();
      kept.push_back(p);
    }
  std::map<int64_t, size_t> index;
  for (const auto& [pts, at] : lost_index_)
    if (auto it = index_of_position.find(damage_.lost[at].position); it != index_of_position.end()) index[pts] = it->second;
  damage_.lost = std::move(kept);
  lost_index_ = std::move(index);
}

int64_t StreamDamageTracker::on_frame(int64_t pts, bool damaged) {
  int64_t position = -1;
  add_grid_gaps(pts);
  if (pts != kNoTimestamp) {
    // Every earlier-presented packet still pending can no longer come out: lost.
    while (!pending_.empty() && *pending_.begin() < pts) {
      const int64_t q = *pending_.begin();
      pending_.erase(pending_.begin());
      lose(q, next_position_++);
    }
    pending_.erase(pts);
    // A frame declared lost that comes out late after all (a decoder that reorders more than it
    // announced) gets its position back; a slot the grid inference made matches within half a frame.
    auto it = lost_position_.find(pts);
    if (it == lost_position_.end() && frame_ticks_ > 0) {
      const int64_t half = half_frame();
      it = lost_position_.lower_bound(pts - half);
      if (it != lost_position_.end() && it->first > pts + half) it = lost_position_.end();
    }
    if (it != lost_position_.end()) {
      const int64_t lost_pts = it->first;
      position = it->second;
      lost_position_.erase(it);
      inferred_lost_.erase(lost_pts);
      --damage_.lost_frames;
      if (auto li = lost_index_.find(lost_pts); li != lost_index_.end()) {
        const size_t at = li->second;
        lost_index_.erase(li);
        damage_.lost.erase(damage_.lost.begin() + static_cast<std::ptrdiff_t>(at));
        for (auto& entry : lost_index_)
          if (entry.second > at) --entry.second;
      }
    }
  }
  if (position < 0) position = next_position_++;
  if (damaged) {
    ++damage_.damaged_frames;
    if (damage_.damaged.size() < StreamDamage::kMaxListed)
      damage_.damaged.push_back({position, pts != kNoTimestamp ? seconds_(pts, ctx_) : static_cast<double>(position) / fps_});
  }
  return position;
}

void StreamDamageTracker::on_end(int64_t declared_frames) {
  while (!pending_.empty()) {
    const int64_t q = *pending_.begin();
    pending_.erase(pending_.begin());
    lose(q, next_position_++);
  }
  if (declared_frames > next_position_) {
    const int64_t present = next_position_;
    if (!damage_.truncated) {
      damage_.truncated = true;
      damage_.truncation = "file ends at frame " + std::to_string(present) + " of " + std::to_string(declared_frames) +
                           " declared by the container";
    }
    // Counted in one step: a corrupt header may declare billions of frames (found by fuzz_video).
    for (int64_t p = next_position_; p < declared_frames && damage_.lost.size() < StreamDamage::kMaxListed; ++p)
      damage_.lost.push_back({p, static_cast<double>(p) / fps_});
    damage_.lost_frames += declared_frames - next_position_;
    next_position_ = declared_frames;
  }
}

void StreamDamageTracker::on_cut_frame(int64_t present, int64_t frame_bytes) {
  const int64_t position = next_position_++;
  lose(kNoTimestamp, position);
  if (damage_.truncated) return;
  damage_.truncated = true;
  damage_.truncation = "file ends inside frame " + std::to_string(position) + " (" + std::to_string(present) + " of " +
                       std::to_string(frame_bytes) + " bytes)";
}

void StreamDamageTracker::on_read_error(const std::string& message) {
  damage_.truncated = true;
  damage_.truncation = "read error after frame " + std::to_string(next_position_) + ": " + message;
}

}  // namespace lingbot::io
