// Damaged videos: a file cut short, corrupted bytes in the middle, and the in-memory reader. The
// reader must report decode errors, lost frames (count and stream positions) and truncation, and
// label the frames it does decode by their position in the intact stream (pts x time_base).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "io/frame_source.h"
#include "io/video.h"
#include "test_temp_dir.h"
#include "test_video_writer.h"
#include "test_files.h"
#include "test_jpeg.h"

using namespace lingbot;
using namespace lingbot::io;

namespace {

using lingbot_test::TempDir;

// Frame i carries its index in a block that survives lossy coding: the top-left 16x16 block has
// grey level 6*i (i < 40). The rest is per-frame noise, so every frame costs the encoder real bytes
// and the sample data, not the index, makes up most of the file.
ImageU8 numbered_frame(int i, int w, int h) {
  ImageU8 img(w, h);
  uint32_t r = 2654435761u * static_cast<uint32_t>(i + 1);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.pixel(x, y);
      const bool tag = x < 16 && y < 16;
      for (int c = 0; c < 3; ++c) {
        r = r * 1664525u + 1013904223u;
        p[c] = static_cast<uint8_t>(tag ? 6 * i : (r >> 24));
      }
    }
  return img;
}

int stamped_number(const ImageU8& img) { return (img.pixel(8, 8)[1] + 3) / 6; }

std::vector<ImageU8> numbered_frames(int n, int w, int h) {
  std::vector<ImageU8> frames;
  for (int i = 0; i < n; ++i) frames.push_back(numbered_frame(i, w, h));
  return frames;
}

// H.264 when this libavcodec has libx264, else MPEG-4 part 2 (both inter-coded).
const char* lossy_codec() { return avcodec_find_encoder_by_name("libx264") ? "libx264" : "mpeg4"; }

using lingbot_test::slurp_bytes;
using lingbot_test::write_file;

std::vector<VideoFrame> read_all(VideoReader& reader) {
  std::vector<VideoFrame> frames;
  VideoFrame f;
  while (reader.next(&f)) frames.push_back(std::move(f));
  return frames;
}

}  // namespace

TEST(VideoDamage, IntactVideoReportsNoDamage) {
  TempDir dir;
  const auto path = dir.path / "clip.mp4";
  ASSERT_TRUE(lingbot_test::write_test_video(path, lossy_codec(), numbered_frames(40, 64, 48), 10, 0, "+faststart"));
  VideoReader reader(path);
  const auto frames = read_all(reader);
  ASSERT_EQ(frames.size(), 40u);
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i].source_index, static_cast<int64_t>(i));
    EXPECT_EQ(stamped_number(frames[i].image), static_cast<int>(i));
    EXPECT_NEAR(frames[i].timestamp_s, 0.1 * static_cast<double>(i), 1e-9);
  }
  EXPECT_FALSE(reader.damage().any()) << reader.damage().describe();
}

// A clip trimmed without re-encoding (`ffmpeg -ss T -i in.mp4 -c copy out.mp4`) keeps the frames from
// the keyframe before T, marked by an edit list as not presented: FFmpeg decodes and drops them. They
// were taken for lost frames (a new user's trimmed phone clip: "32 frames lost (stream positions
// 0-31)", status damaged, exit 3) and shifted the --fps sampling by their count.
TEST(VideoDamage, AnEditListsHiddenFramesAreNotLost) {
  TempDir dir;
  const auto path = dir.path / "trimmed.mp4";
  std::vector<int64_t> pts;
  for (int64_t i = -7; i < 23; ++i) pts.push_back(i);  // 7 frames before the cut, 23 after
  ASSERT_TRUE(lingbot_test::write_test_video(path, lossy_codec(), numbered_frames(30, 64, 48), 10, 0, nullptr, pts));
  VideoReader reader(path);
  const auto frames = read_all(reader);
  ASSERT_EQ(frames.size(), 23u);
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i].source_index, static_cast<int64_t>(i));
    EXPECT_EQ(stamped_number(frames[i].image), static_cast<int>(i) + 7);
    EXPECT_NEAR(frames[i].timestamp_s, 0.1 * static_cast<double>(i), 1e-9);
  }
  EXPECT_FALSE(reader.damage().any()) << reader.damage().describe();
  VideoReader sampled(path, 5);  // 1 in 2, from the first presented frame
  const auto kept = read_all(sampled);
  ASSERT_EQ(kept.size(), 12u);
  EXPECT_EQ(stamped_number(kept[1].image), 9);
}

// The reproduction: 40 frames, index at the front (+faststart), only the first half kept.
TEST(VideoDamage, FileCutInHalfReportsTheMissingFrames) {
  TempDir dir;
  const auto path = dir.path / "clip.mp4";
  ASSERT_TRUE(lingbot_test::write_test_video(path, lossy_codec(), numbered_frames(40, 64, 48), 10, 0, "+faststart"));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  VideoReader reader(path);
  EXPECT_EQ(reader.info().frame_count, 40);
  const auto frames = read_all(reader);
  ASSERT_GE(frames.size(), 5u);
  ASSERT_LT(frames.size(), 40u);
  for (const VideoFrame& f : frames) {
    EXPECT_EQ(stamped_number(f.image), static_cast<int>(f.source_index));
    EXPECT_NEAR(f.timestamp_s, 0.1 * static_cast<double>(f.source_index), 1e-9);
  }
  const StreamDamage& d = reader.damage();
  EXPECT_TRUE(d.truncated);
  EXPECT_EQ(d.lost_frames + static_cast<int64_t>(frames.size()), 40) << d.describe();
  ASSERT_EQ(static_cast<int64_t>(d.lost.size()), d.lost_frames);
  // Every position 0..39 is either decoded or listed lost, exactly once.
  std::vector<int> seen(40, 0);
  for (const VideoFrame& f : frames) ++seen[static_cast<size_t>(f.source_index)];
  for (const StreamPosition& p : d.lost) {
    ASSERT_GE(p.position, 0);
    ASSERT_LT(p.position, 40);
    ++seen[static_cast<size_t>(p.position)];
    EXPECT_NEAR(p.timestamp_s, 0.1 * static_cast<double>(p.position), 1e-6);
  }
  for (int i = 0; i < 40; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "position " << i;
  EXPECT_NE(d.describe().find("of 40 declared"), std::string::npos) << d.describe();
}

// Y4M stores raw frames back to back and declares no count; FFmpeg's demuxer ends a file cut inside
// a frame as if it were whole. The reader finds the bytes after the last whole frame: that frame is
// lost and the file truncated. A cut between two frames cannot be told from a shorter file.
TEST(VideoDamage, Y4mCutInsideAFrameReportsIt) {
  TempDir dir;
  const int w = 64, h = 48, frame_bytes = w * h * 3 / 2;  // 4:2:0
  std::string y4m = "YUV4MPEG2 W64 H48 F10:1 Ip A1:1 C420jpeg\n";
  for (int i = 0; i < 5; ++i) {
    y4m += "FRAME\n";
    y4m += std::string(static_cast<size_t>(w * h), static_cast<char>(40 * i + 10));
    y4m += std::string(static_cast<size_t>(w * h / 2), static_cast<char>(128));
  }
  const size_t whole = y4m.size(), last_frame = whole - frame_bytes - 6;
  struct Case {
    size_t size;
    size_t frames;
    std::string truncation;  // "" = intact
  };
  const Case cases[] = {
      {whole, 5, ""},
      {whole - 1000, 4, "file ends inside frame 4 (" + std::to_string(frame_bytes - 1000) + " of 4608 bytes)"},
      {last_frame + 3, 4, "file ends inside frame 4 (0 of 4608 bytes)"},  // inside its FRAME header
      {last_frame, 4, ""},  // between frames: a whole file of 4 frames
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("file of " + std::to_string(c.size) + " bytes");
    const auto path = dir.path / ("cut" + std::to_string(c.size) + ".y4m");
    write_file(path, y4m.substr(0, c.size));
    VideoReader reader(path);
    const auto frames = read_all(reader);
    ASSERT_EQ(frames.size(), c.frames);
    for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(frames[i].source_index, static_cast<int64_t>(i));
    const StreamDamage& d = reader.damage();
    EXPECT_EQ(d.truncation, c.truncation);
    {
      // The same bytes through a pipe (no file size: the bytes read tell the cut).
      int fds[2];
      ASSERT_EQ(::pipe(fds), 0);
      std::thread writer([&] {
        const std::string bytes = y4m.substr(0, c.size);
        for (size_t at = 0; at < bytes.size();) {
          const ssize_t n = ::write(fds[1], bytes.data() + at, bytes.size() - at);
          if (n <= 0) break;
          at += static_cast<size_t>(n);
        }
        ::close(fds[1]);
      });
      VideoReader piped("pipe:" + std::to_string(fds[0]), 0, VideoOpenOptions{});
      EXPECT_EQ(read_all(piped).size(), c.frames);
      EXPECT_EQ(piped.damage().truncation, c.truncation);
      writer.join();
      ::close(fds[0]);
    }
    EXPECT_EQ(d.any(), !c.truncation.empty());
    if (c.truncation.empty()) continue;
    EXPECT_EQ(d.lost_frames, 1);
    ASSERT_EQ(d.lost.size(), 1u);
    EXPECT_EQ(d.lost[0].position, 4);
    EXPECT_NEAR(d.lost[0].timestamp_s, 0.4, 1e-9);
    EXPECT_EQ(d.describe(), "1 frame lost (stream positions 4), " + c.truncation);
  }
}

// JPEG frames one after another (an MJPEG pipe, `-f mjpeg`) and as a multipart stream (an IP
// camera's, `-f mpjpeg`). A frame cut short is a decode error and a lost frame: FFmpeg's decoder
// emulated its missing end and handed over a half-grey picture (found by a probe: status
// "completed"). Bytes after a frame's end are padding, not damage (a first version allowed 16 and
// dropped every frame of a file padded with 32). A multipart stream's trailing boundary is its
// normal end, not a read error.
TEST(VideoDamage, AJpegStreamCutInsideAFrameReportsIt) {
  TempDir dir;
  std::string jpegs, padded, multipart = "--ffmpeg\r\n";
  for (int i = 0; i < 4; ++i) {
    const ImageU8 img = numbered_frame(i, 64, 48);
    const std::vector<uint8_t> encoded = lingbot_test::encode_jpeg(img.rgb, img.width, img.height, 3);
    const std::string jpeg(encoded.begin(), encoded.end());
    jpegs += jpeg;
    padded += jpeg + std::string(40, '\0');  // what some cameras and muxers leave after a frame's end
    multipart += "Content-type: image/jpeg\r\nContent-length: " + std::to_string(jpeg.size()) + "\r\n\r\n" + jpeg +
                 "\r\n--ffmpeg\r\n";
  }
  struct Case {
    std::string name, bytes;
    size_t frames;
  };
  const Case cases[] = {{"frames.mjpeg", jpegs, 4},
                        {"padded.mjpeg", padded, 4},
                        {"cut.mjpeg", jpegs.substr(0, jpegs.size() - 300), 3},
                        {"frames.mpjpeg", multipart, 4},
                        {"cut.mpjpeg", multipart.substr(0, multipart.size() - 300), 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write_file(dir.path / c.name, c.bytes);
    VideoReader reader(dir.path / c.name, 0);
    const auto frames = read_all(reader);
    ASSERT_EQ(frames.size(), c.frames);
    for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(stamped_number(frames[i].image), static_cast<int>(i));
    const StreamDamage& d = reader.damage();
    if (c.frames == 4) {
      EXPECT_FALSE(d.any()) << d.describe();
      continue;
    }
    EXPECT_EQ(d.decode_errors, 1);
    EXPECT_EQ(d.lost_frames, 1);
    ASSERT_EQ(d.lost.size(), 1u);
    EXPECT_EQ(d.lost[0].position, 3);
  }
}

// Garbage over one frame's bytes in the middle: that frame (and any that depend on it and cannot be
// decoded) is reported; the frames after it keep their stream positions and timestamps.
TEST(VideoDamage, CorruptBytesInTheMiddleAreReportedAndLabelsStayOnTheStreamTiming) {
  TempDir dir;
  const auto path = dir.path / "clip.mp4";
  ASSERT_TRUE(lingbot_test::write_test_video(path, lossy_codec(), numbered_frames(40, 64, 48), 10, 0, "+faststart"));
  std::vector<uint8_t> bytes = slurp_bytes(path);
  // The sample data follows the index; overwrite a run in the middle of it.
  const size_t start = bytes.size() / 2, len = 400;
  uint32_t x = 12345;
  for (size_t i = start; i < start + len; ++i) {
    x = x * 1103515245u + 12345u;
    bytes[i] = static_cast<uint8_t>(x >> 24);
  }
  write_file(path, bytes);
  VideoReader reader(path);
  const auto frames = read_all(reader);
  const StreamDamage& d = reader.damage();
  EXPECT_TRUE(d.any());
  EXPECT_GT(d.decode_errors + d.damaged_frames + d.lost_frames, 0) << d.describe();
  EXPECT_EQ(static_cast<int64_t>(frames.size()) + d.lost_frames, 40) << d.describe();
  EXPECT_FALSE(d.truncated);
  // Frames after the damage: labelled by stream position; undamaged ones show their own number.
  std::vector<int64_t> damaged;
  for (const auto& p : d.damaged) damaged.push_back(p.position);
  int checked_after = 0;
  for (const VideoFrame& f : frames) {
    EXPECT_NEAR(f.timestamp_s, 0.1 * static_cast<double>(f.source_index), 1e-9);
    if (std::find(damaged.begin(), damaged.end(), f.source_index) == damaged.end() && f.source_index >= 30) {
      EXPECT_EQ(stamped_number(f.image), static_cast<int>(f.source_index));
      ++checked_after;
    }
  }
  EXPECT_GT(checked_after, 0);
}

TEST(VideoDamage, InMemoryReaderMatchesTheFileReader) {
  TempDir dir;
  const auto path = dir.path / "clip.mkv";
  ASSERT_TRUE(lingbot_test::write_test_video(path, "ffv1", numbered_frames(6, 32, 24), 10));
  VideoReader from_file(path);
  VideoReader in_memory = VideoReader::from_memory(slurp_bytes(path), "clip in memory");
  EXPECT_EQ(in_memory.info().width, 32);
  EXPECT_EQ(in_memory.info().codec, from_file.info().codec);
  const auto a = read_all(from_file), b = read_all(in_memory);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].image.rgb, b[i].image.rgb);
    EXPECT_EQ(a[i].timestamp_s, b[i].timestamp_s);
  }
  try {
    (void)VideoReader::from_memory({1, 2, 3}, "three bytes");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open video three bytes: "), std::string::npos) << e.what();
  }
}

// The frame selection passes the damage through; frame names stay stream positions.
TEST(VideoDamage, FrameSourceExposesTheDamage) {
  TempDir dir;
  const auto path = dir.path / "clip.mp4";
  ASSERT_TRUE(lingbot_test::write_test_video(path, lossy_codec(), numbered_frames(40, 64, 48), 10, 0, "+faststart"));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  FrameSelection sel;
  sel.video_fps = 0;
  FrameSource src = FrameSource::from_video(path, sel);
  SourceFrame f;
  int64_t n = 0;
  while (src.next(&f)) {
    EXPECT_EQ(f.name, "frame_" + std::to_string(stamped_number(f.image)));
    ++n;
  }
  ASSERT_NE(src.damage(), nullptr);
  EXPECT_EQ(src.damage()->lost_frames + n, 40);
  EXPECT_EQ(FrameSource::from_folder(LINGBOT_TESTDATA_DIR "/tiny/frames", {}).damage(), nullptr);
}

// A folder's JPEG that libjpeg decodes with lost data says so with the frame (PIL would hand it over
// silently); whoever uses the frame records it (StreamDamage::add_damaged_image): at its frame index,
// with its file and libjpeg's words.
TEST(FrameSourceDamage, AFolderJpegWithLostDataSaysSoWithItsFrame) {
  TempDir dir;
  const std::vector<uint8_t> good = lingbot_test::encode_jpeg(lingbot_test::textured_rgb(64, 48), 64, 48, 3);
  for (const std::string name : {"f0.jpg", "f1.jpg", "f2.jpg", "f3.jpg", "f4.jpg", "f5.jpg"})
    lingbot_test::write_file(dir.path / name, name == "f3.jpg" || name == "f5.jpg" ? lingbot_test::cut_scan_jpeg(good) : good);
  FrameSelection sel;
  sel.stride = 3;  // f0, f3
  FrameSource src = FrameSource::from_folder(dir.path, sel);
  SourceFrame f;
  ASSERT_TRUE(src.next(&f));
  EXPECT_FALSE(f.corrupt.any());
  ASSERT_TRUE(src.next(&f));
  EXPECT_EQ(f.name, "f3.jpg");
  EXPECT_EQ(f.corrupt.warnings, 1);
  EXPECT_EQ(f.corrupt.first_warning, "Corrupt JPEG data: premature end of data segment");
  EXPECT_EQ(src.damage(), nullptr);

  StreamDamage d;
  d.add_damaged_image(f.index, f.name, f.corrupt);
  EXPECT_EQ(d.damaged_frames, 1);
  EXPECT_EQ(d.decode_errors + d.lost_frames, 0);
  EXPECT_FALSE(d.truncated);
  ASSERT_EQ(d.damaged.size(), 1u);
  EXPECT_EQ(d.damaged[0].position, 1);
  EXPECT_EQ(d.damaged[0].timestamp_s, 1.0);
  EXPECT_EQ(d.damaged[0].file, "f3.jpg");
  EXPECT_EQ(d.damaged[0].problem, "Corrupt JPEG data: premature end of data segment");
  EXPECT_EQ(d.describe(), "1 frame decoded with errors (positions 1; f3.jpg: Corrupt JPEG data: premature end of data segment)");
  d.add_damaged_image(5, "f5.jpg", f.corrupt);
  EXPECT_EQ(d.describe(),
            "2 frames decoded with errors (positions 1, 5; first f3.jpg: Corrupt JPEG data: premature end of data segment)");
  EXPECT_EQ(damaged_input_message(DamagedInput::ImageFolder, d, "used"),
            "the input images are damaged (" + d.describe() +
                "); libjpeg concealed the lost data in those frames, which were used as decoded");
}

namespace {
double pts_seconds(int64_t pts, const void*) { return 0.04 * static_cast<double>(pts); }
}  // namespace

// The bookkeeping on its own: decoder output in presentation order (B-frames arrive out of order),
// a packet that never comes out, a frame that comes out late after all, and the end of a file that
// declares more frames than it holds.
TEST(StreamDamageTracker, PositionsLossesAndTruncation) {
  StreamDamageTracker t(&pts_seconds, nullptr, 25);
  for (int64_t pts : {0, 3, 1, 2, 6, 4, 5}) t.on_packet(pts);  // decode order of I P B B P B B
  EXPECT_EQ(t.on_frame(0, false), 0);
  EXPECT_EQ(t.on_frame(1, false), 1);
  EXPECT_EQ(t.on_frame(3, false), 3);  // pts 2 never came out: lost at position 2
  EXPECT_EQ(t.on_frame(2, true), 2);   // ... until it does (late): it gets its position back, damaged
  EXPECT_EQ(t.on_frame(5, false), 5);  // pts 4 lost
  EXPECT_EQ(t.on_frame(6, false), 6);
  t.on_end(0);
  const StreamDamage& d = t.damage();
  EXPECT_EQ(d.lost_frames, 1);
  ASSERT_EQ(d.lost.size(), 1u);
  EXPECT_EQ(d.lost[0].position, 4);
  EXPECT_DOUBLE_EQ(d.lost[0].timestamp_s, 0.16);
  EXPECT_EQ(d.damaged_frames, 1);
  EXPECT_FALSE(d.truncated);
  EXPECT_EQ(d.describe(), "1 frame lost (stream positions 4), 1 frame decoded with errors (positions 2)");
}

// Found by fuzz_video: a header declaring ~1e12 frames made the end-of-stream bookkeeping loop once
// per missing frame. Counted in one step now; the list stays capped.
TEST(StreamDamageTracker, HugeDeclaredFrameCountIsCountedNotIterated) {
  StreamDamageTracker t(&pts_seconds, nullptr, 25);
  t.on_packet(0);
  EXPECT_EQ(t.on_frame(0, false), 0);
  t.on_end(int64_t{1} << 40);
  const StreamDamage& d = t.damage();
  EXPECT_TRUE(d.truncated);
  EXPECT_EQ(d.lost_frames, (int64_t{1} << 40) - 1);
  EXPECT_EQ(d.lost.size(), StreamDamage::kMaxListed);
  EXPECT_EQ(d.lost.back().position, static_cast<int64_t>(StreamDamage::kMaxListed));
  EXPECT_NE(d.describe().find("(stream positions 1-100, ...)"), std::string::npos) << d.describe();
  EXPECT_NE(d.describe().find("file ends at frame 1 of 1099511627776 declared by the container"), std::string::npos);
}

namespace {
double ms_seconds(int64_t pts, const void*) { return 0.001 * static_cast<double>(pts); }
}  // namespace

// Frames whose packets never arrived (a demuxer resyncing past damage): with infer_gaps, a step of
// k frame durations between output frames is k - 1 lost frames, and the frames after keep the
// stream's own positions; a packet sent for one of those slots is lost once, not twice.
TEST(StreamDamageTracker, GapsOnAConstantRateGridAreLostFrames) {
  StreamDamageTracker t(&ms_seconds, nullptr, 25);
  t.infer_gaps(40);  // time base 1/1000 s at 25 fps
  for (int64_t pts : {0, 40, 80, 240, 280}) t.on_packet(pts);  // 120..200 never arrived
  t.on_packet(160);                                           // ... but 160's packet did, undecodable
  EXPECT_EQ(t.on_frame(0, false), 0);
  EXPECT_EQ(t.on_frame(40, false), 1);
  EXPECT_EQ(t.on_frame(80, false), 2);
  EXPECT_EQ(t.on_frame(240, false), 6);  // slots 120, 160, 200 lost: positions 3-5
  EXPECT_EQ(t.on_frame(280, false), 7);
  t.on_end(8);                           // duration x rate: nothing missing at the end
  const StreamDamage& d = t.damage();
  EXPECT_EQ(d.lost_frames, 3);
  EXPECT_FALSE(d.truncated);
  ASSERT_EQ(d.lost.size(), 3u);
  EXPECT_DOUBLE_EQ(d.lost[0].timestamp_s, 0.12);
  EXPECT_DOUBLE_EQ(d.lost[2].timestamp_s, 0.2);
  EXPECT_EQ(d.describe(), "3 frames lost (stream positions 3-5)");
}

// A variable-rate stream (steps not whole frame durations) turns the inference off before any false
// loss, also for a later step that happens to be two durations.
TEST(StreamDamageTracker, AVariableRateStreamInfersNoLosses) {
  StreamDamageTracker t(&ms_seconds, nullptr, 25);
  t.infer_gaps(40);
  int64_t position = 0;
  for (int64_t pts : {0, 40, 67, 107, 187, 227}) {
    t.on_packet(pts);
    EXPECT_EQ(t.on_frame(pts, false), position++) << pts;
  }
  t.on_end(0);
  EXPECT_FALSE(t.damage().any()) << t.damage().describe();
}

// Steps of whole frame durations that keep coming (a camera halving its rate in low light, a screen
// recorder idling) are a variable frame rate, not damage: at the (kMaxGapEvents + 1)-th step the
// losses inferred so far are withdrawn and the inference ends; positions go on one per frame.
TEST(StreamDamageTracker, RecurringGapsAreAVariableFrameRateNotLosses) {
  StreamDamageTracker t(&ms_seconds, nullptr, 25);
  t.infer_gaps(40);
  const std::pair<int64_t, int64_t> frames[] = {{0, 0},   {40, 1},  {80, 2},  {160, 4}, {240, 6},
                                                {320, 8}, {400, 9}, {440, 10}, {520, 11}};
  for (const auto& [pts, position] : frames) {
    t.on_packet(pts);
    EXPECT_EQ(t.on_frame(pts, false), position) << pts;
    if (pts == 320) {
      EXPECT_EQ(t.damage().lost_frames, 3) << "three gaps: still counted as losses";
    }
  }
  t.on_end(0);
  EXPECT_FALSE(t.damage().any()) << t.damage().describe();
  EXPECT_TRUE(t.damage().lost.empty());
}

// Withdrawing inferred losses keeps the real ones (packets sent and never decoded), listed in order.
TEST(StreamDamageTracker, WithdrawingInferredGapsKeepsRealLosses) {
  StreamDamageTracker t(&ms_seconds, nullptr, 25);
  t.infer_gaps(40);
  for (int64_t pts : {0, 40, 80, 120, 200, 280, 360, 440, 480}) t.on_packet(pts);
  EXPECT_EQ(t.on_frame(0, false), 0);
  EXPECT_EQ(t.on_frame(80, false), 2);  // 40's packet was sent: a real loss at position 1
  EXPECT_EQ(t.on_frame(120, false), 3);
  EXPECT_EQ(t.on_frame(200, false), 5);   // gap 1: slot 160
  EXPECT_EQ(t.on_frame(280, false), 7);   // gap 2: slot 240
  EXPECT_EQ(t.on_frame(360, false), 9);   // gap 3: slot 320
  EXPECT_EQ(t.on_frame(440, false), 10);  // gap 4: a variable rate
  EXPECT_EQ(t.on_frame(480, false), 11);
  t.on_end(0);
  const StreamDamage& d = t.damage();
  EXPECT_EQ(d.lost_frames, 1);
  ASSERT_EQ(d.lost.size(), 1u);
  EXPECT_EQ(d.lost[0].position, 1);
  EXPECT_DOUBLE_EQ(d.lost[0].timestamp_s, 0.04);
  EXPECT_EQ(d.describe(), "1 frame lost (stream positions 1)");
}

// A late frame revives its loss only among the latest kMaxRevivable losses: the bookkeeping stays
// bounded on a long stream that keeps losing frames (the counts stay complete).
TEST(StreamDamageTracker, OnlyRecentLossesCanBeRevived) {
  StreamDamageTracker t(&ms_seconds, nullptr, 25);
  const int64_t n = 10000;
  for (int64_t pts = 0; pts <= n; ++pts) t.on_packet(pts);
  EXPECT_EQ(t.on_frame(n, false), n);  // every earlier packet lost
  EXPECT_EQ(t.damage().lost_frames, n);
  EXPECT_EQ(t.on_frame(n - 1, false), n - 1);  // recent: its position back
  EXPECT_EQ(t.damage().lost_frames, n - 1);
  EXPECT_EQ(t.on_frame(0, false), n + 1);  // forgotten: a new position, still counted lost
  EXPECT_EQ(t.damage().lost_frames, n - 1);
  static_assert(StreamDamageTracker::kMaxRevivable < 10000);
}

// A jump longer than kMaxInferredGap frames is a corrupt or reset timestamp, not missing frames: no
// loss is inferred from it (nor later), and timestamps far apart do not overflow the step.
TEST(StreamDamageTracker, ATimestampJumpIsNotCountedAsLostFrames) {
  for (const int64_t jump : {int64_t{40} * (StreamDamageTracker::kMaxInferredGap + 2), INT64_MAX / 2}) {
    StreamDamageTracker t(&ms_seconds, nullptr, 25);
    t.infer_gaps(40);
    const int64_t at[] = {-INT64_MAX / 2, -INT64_MAX / 2 + 40, -INT64_MAX / 2 + 40 + jump, -INT64_MAX / 2 + 120 + jump};
    for (int i = 0; i < 4; ++i) {
      t.on_packet(at[i]);
      EXPECT_EQ(t.on_frame(at[i], false), i);
    }
    t.on_end(0);
    EXPECT_FALSE(t.damage().any()) << t.damage().describe();
  }
}

// End to end through VideoReader: a Matroska file (no stated frame count) whose frames 10-14 never
// reached the file is reported with those positions, no false cut at the end, and the frames after
// the gap keep their stream positions and timestamps.
TEST(VideoDamage, FramesMissingFromAMatroskaFileAreLostWhereTheyWere) {
  TempDir dir;
  std::vector<int64_t> pts;
  for (int64_t i = 0; i < 25; ++i)
    if (i < 10 || i >= 15) pts.push_back(i);
  const auto frames = numbered_frames(static_cast<int>(pts.size()), 32, 24);
  const auto mkv = dir.path / "gap.mkv";
  ASSERT_TRUE(lingbot_test::write_test_video(mkv, "ffv1", frames, 10, 0, nullptr, pts));
  VideoReader reader(mkv);
  const auto got = read_all(reader);
  ASSERT_EQ(got.size(), pts.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].source_index, pts[i]) << i;
    EXPECT_EQ(got[i].timestamp_s, static_cast<double>(pts[i]) / 10.0) << i;
  }
  EXPECT_EQ(reader.damage().describe(), "5 frames lost (stream positions 10-14)");
  EXPECT_FALSE(reader.damage().truncated);
}

// A variable-rate Matroska file on its nominal grid (10 fps, then every other slot, as a webcam
// halving its rate in low light): not damaged, no cut at the end, and --fps samples decoded frames
// (upstream counts decoded frames; sampling grid slots would keep none of the half-rate part).
TEST(VideoDamage, AVariableRateMatroskaIsNotDamaged) {
  TempDir dir;
  std::vector<int64_t> pts;
  for (int64_t i = 0; i < 20; ++i) pts.push_back(i);
  for (int64_t i = 21; i < 60; i += 2) pts.push_back(i);
  const auto frames = numbered_frames(static_cast<int>(pts.size()), 32, 24);
  const auto mkv = dir.path / "vfr.mkv";
  ASSERT_TRUE(lingbot_test::write_test_video(mkv, "ffv1", frames, 10, 0, nullptr, pts));
  {
    VideoReader reader(mkv);
    const auto got = read_all(reader);
    ASSERT_EQ(got.size(), pts.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(stamped_number(got[i].image), static_cast<int>(i));
      EXPECT_EQ(got[i].timestamp_s, static_cast<double>(pts[i]) / 10.0) << i;
      if (i > 0) {
        EXPECT_GT(got[i].source_index, got[i - 1].source_index) << i;
      }
    }
    EXPECT_FALSE(reader.damage().any()) << reader.damage().describe();
  }
  VideoReader sampled(mkv, 5);  // every 2nd frame
  ASSERT_EQ(sampled.sample_interval(), 2);
  const auto kept = read_all(sampled);
  // 10 of the first 20 frames; 21, 23, 25 keep their grid slots (odd: skipped) until the 4th step of
  // two slots shows a variable rate; then every 2nd of the remaining 17 frames (9).
  EXPECT_EQ(kept.size(), 19u);
  EXPECT_FALSE(sampled.damage().any()) << sampled.damage().describe();
}

// A Matroska file cut in half: the frames after the cut are lost (its duration, written in the
// header, says how long the stream was), the file truncated.
TEST(VideoDamage, MatroskaCutInHalfReportsTheMissingFrames) {
  TempDir dir;
  const auto mkv = dir.path / "cut.mkv";
  ASSERT_TRUE(lingbot_test::write_test_video(mkv, "ffv1", numbered_frames(40, 32, 24), 10));
  std::filesystem::resize_file(mkv, std::filesystem::file_size(mkv) / 2);
  VideoReader reader(mkv);
  const auto got = read_all(reader);
  ASSERT_GE(got.size(), 5u);
  ASSERT_LT(got.size(), 40u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].source_index, static_cast<int64_t>(i));
  const StreamDamage& d = reader.damage();
  EXPECT_TRUE(d.truncated) << d.describe();
  EXPECT_EQ(d.lost_frames + static_cast<int64_t>(got.size()), 40) << d.describe();
}

// A late frame half a frame before an inferred slot (the edge of the half-frame match) is that slot's
// frame after all: it gets the slot's position back and the loss is withdrawn.
TEST(StreamDamageTracker, ALateFrameHalfAFrameBeforeAnInferredSlotRevivesIt) {
  StreamDamageTracker t(&ms_seconds, nullptr, 25);
  t.infer_gaps(40);  // half a frame: 20 ticks
  for (int64_t pts : {0, 120}) t.on_packet(pts);
  EXPECT_EQ(t.on_frame(0, false), 0);
  EXPECT_EQ(t.on_frame(120, false), 3);  // slots 40 and 80 inferred lost: positions 1, 2
  EXPECT_EQ(t.damage().lost_frames, 2);
  t.on_packet(20);
  EXPECT_EQ(t.on_frame(20, false), 1);  // 20 + half = 40: slot 40's frame
  EXPECT_EQ(t.damage().lost_frames, 1);
}

// A read error, then a cut last frame: the first, more specific reason stays the truncation's.
TEST(StreamDamageTracker, TheFirstTruncationReasonIsKept) {
  StreamDamageTracker t(&pts_seconds, nullptr, 25);
  t.on_packet(0);
  t.on_frame(0, false);
  t.on_read_error("Input/output error");
  t.on_end(0);
  t.on_cut_frame(100, 1000);
  EXPECT_EQ(t.damage().truncation, "read error after frame 1: Input/output error");
  EXPECT_EQ(t.damage().lost_frames, 1);
}
