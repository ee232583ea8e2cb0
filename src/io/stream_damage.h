#pragma once
// Integrity bookkeeping of a decoded video stream: which frames of the stream never came out of
// the decoder (lost), which came out with decoder-reported errors (damaged, concealed), and whether
// the file ended before the frame count its container declares (truncated). An image folder uses
// StreamDamage alone: its damaged frames are JPEGs libjpeg decoded with corrupt data (CorruptData),
// their positions the frames' indices in the run.
//
// Stream positions are presentation-order frame numbers of the stream itself, lost frames included,
// so labels of the frames after a loss stay those of the intact stream. They come from the packets'
// timestamps: a decoder outputs frames in presentation order, so when it returns the frame with
// timestamp p, every packet sent earlier with a timestamp < p that has not come out is lost (it can
// no longer be output). This needs no constant frame rate. Packets without timestamps get the next
// position in output order (no per-frame loss positions; the final count still shows losses).
//
// Frames whose packets never arrived (a demuxer resyncing past damage, a gap in a stream) leave no
// trace in the packets. For a container that states no frame count (Matroska, NUT, raw streams:
// their expected length comes from the duration at a constant rate anyway), infer_gaps() also
// counts a step between consecutive output frames of k > 1 frame durations as k - 1 lost frames,
// for as long as every step so far is a whole number of frame durations: a variable-rate stream
// turns the inference off at its first off-grid step, and a step of more than kMaxInferredGap frames
// (a corrupt or reset timestamp, not missing frames) turns it off too. Damage that drops whole packets
// (a demuxer resyncing past a bad cluster) makes few such steps; a variable rate on the grid (a
// camera halving its rate in low light, a screen recorder idling) keeps making them: at the
// (kMaxGapEvents + 1)-th step the losses inferred so far are withdrawn and the inference ends (so a
// file damaged in more places than that reports only its other damage). Positions then go on one per
// decoded frame: the frames after it are numbered, and sampled, as decoded, like upstream's reader.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lingbot/preprocess.h"  // CorruptData

namespace lingbot::io {

struct StreamPosition {
  StreamPosition() = default;
  // (A constructor, not an aggregate: most positions give the first two fields only.)
  StreamPosition(int64_t at, double seconds, std::string file_name = {}, std::string what = {})
      : position(at), timestamp_s(seconds), file(std::move(file_name)), problem(std::move(what)) {}
  int64_t position = 0;     // presentation-order frame number in the stream (0-based)
  double timestamp_s = 0;   // its presentation time, seconds from the stream start
  std::string file;         // image folders: the frame's file name ("" for video)
  std::string problem;      // image folders: what the decoder repaired, in its words ("" for video)
};

struct StreamDamage {
  // At most this many positions are listed per kind; the counts are always complete.
  static constexpr size_t kMaxListed = 100;
  int64_t decode_errors = 0;   // packets or frames the decoder rejected as invalid data
  int64_t lost_frames = 0;     // frames of the stream that were never decoded
  int64_t damaged_frames = 0;  // frames decoded with errors (concealed by the decoder) and used
  std::vector<StreamPosition> lost;     // first kMaxListed lost frames
  std::vector<StreamPosition> damaged;  // first kMaxListed damaged frames
  bool truncated = false;      // the stream ended early (declared frame count not reached, read error)
  std::string truncation;      // how: "file ends at frame 20 of 40 declared", "read error: ..."
  bool any() const { return decode_errors > 0 || lost_frames > 0 || damaged_frames > 0 || truncated; }
  // An image folder's frame `index` (its timestamp too), read from `file`, decoded with corrupt data.
  void add_damaged_image(int64_t index, const std::string& file, const CorruptData& corrupt);
  // One line for logs: "3 decode errors, 20 frames lost (positions 20-39), file ends at ..."; for an
  // image folder the first damaged file and its problem follow the positions.
  std::string describe() const;
};

// The sentence that `run`'s error line and Python's RuntimeWarning begin with: "the input video is
// damaged (<describe()>); the frames that decoded were <done>", or for an image folder "the input
// images are damaged (...); libjpeg concealed the lost data in those frames, which were <done> as
// decoded".
enum class DamagedInput { ImageFolder, Video };
std::string damaged_input_message(DamagedInput input, const StreamDamage& d, std::string_view done);

// Feeds StreamDamage from the decode loop. Timestamps are in the stream's time base; `seconds`
// converts one to seconds from the stream start.
class StreamDamageTracker {
 public:
  static constexpr int64_t kNoTimestamp = INT64_MIN;
  static constexpr int64_t kMaxInferredGap = 3600;  // frames: 2 minutes at 30 fps
  static constexpr int kMaxGapEvents = 3;           // steps of several durations before a variable rate
  static constexpr size_t kMaxRevivable = 4096;     // latest losses a late frame may still revive
  StreamDamageTracker(double (*seconds)(int64_t pts, const void* ctx), const void* ctx, double fps)
      : seconds_(seconds), ctx_(ctx), fps_(fps) {}

  // Turns on the gap inference above; frame_ticks = one frame duration in time-base units.
  void infer_gaps(double frame_ticks) { frame_ticks_ = frame_ticks; }
  void on_packet(int64_t pts);     // a packet of the video stream was sent to the decoder
  void on_decode_error() { ++damage_.decode_errors; }  // the decoder rejected a packet / frame
  // A decoded frame with timestamp `pts` (its best-effort timestamp); returns its stream position.
  int64_t on_frame(int64_t pts, bool damaged);
  // The decoder is drained: frames still pending are lost. `declared_frames` (> 0 when the
  // container states it) reveals frames after the end of a truncated file.
  void on_end(int64_t declared_frames);
  // The demuxer failed before the end of the file; what was read is kept.
  void on_read_error(const std::string& message);
  // After on_end: the file ends `present` bytes into one more frame of `frame_bytes` (a raw stream
  // cut inside a frame, which its demuxer drops silently): that frame is lost, the file truncated.
  void on_cut_frame(int64_t present, int64_t frame_bytes);

  const StreamDamage& damage() const { return damage_; }
  int64_t positions() const { return next_position_; }

 private:
  void lose(int64_t pts, int64_t position);
  void add_grid_gaps(int64_t pts);
  void withdraw_inferred();  // a variable rate after all: the inferred losses were none
  // Half a frame duration in ticks: how far a timestamp may sit from its grid slot.
  int64_t half_frame() const { return static_cast<int64_t>(frame_ticks_ / 2); }
  double (*seconds_)(int64_t, const void*);
  const void* ctx_;
  double fps_;
  StreamDamage damage_;
  std::set<int64_t> pending_;             // timestamps sent but not yet decoded
  std::map<int64_t, size_t> lost_index_;  // lost timestamp -> its position (late output revives it)
  std::map<int64_t, int64_t> lost_position_;
  int64_t next_position_ = 0;
  double frame_ticks_ = 0;           // infer_gaps: one frame duration (0: off)
  bool on_grid_ = true;              // every step between output frames so far is whole frame durations
  int gap_events_ = 0;               // steps of several frame durations so far
  std::set<int64_t> inferred_;                // grid slots the inference added, still pending
  std::map<int64_t, int64_t> inferred_lost_;  // those lost: slot -> position (at most kMaxGapEvents steps')
  int64_t last_pts_ = kNoTimestamp;  // the latest output frame's timestamp
};

}  // namespace lingbot::io
