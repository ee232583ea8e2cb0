// VideoReader: decode a video generated at run time (lossless FFV1 in Matroska, so pixels are exact),
// fps sampling as upstream demo.py, and error messages.
#include <gtest/gtest.h>

#include "test_files.h"
#include "test_temp_dir.h"
#include "test_video_writer.h"
#include <fcntl.h>
#include <unistd.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/frame_source.h"
#include "io/png.h"
#include "io/video.h"
#include "test_tools.h"

using namespace lingbot;
using namespace lingbot::io;

namespace {

using lingbot_test::TempDir;

// Frame i, pixel (x, y): R = 20*i + x, G = 3*y, B = 255 - 20*i.
ImageU8 synthetic_frame(int i, int w, int h) {
  ImageU8 img(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.pixel(x, y);
      p[0] = static_cast<uint8_t>(20 * i + x);
      p[1] = static_cast<uint8_t>(3 * y);
      p[2] = static_cast<uint8_t>(255 - 20 * i);
    }
  return img;
}

// Encodes `n` synthetic frames at `fps` with `codec_name` into `path`. Returns false when this
// libavcodec lacks the encoder.
bool write_video(const std::filesystem::path& path, const char* codec_name, int n, int fps, int w, int h,
                 double display_rotation_cw = 0) {
  std::vector<ImageU8> frames;
  for (int i = 0; i < n; ++i) frames.push_back(synthetic_frame(i, w, h));
  return lingbot_test::write_test_video(path, codec_name, frames, fps, display_rotation_cw);
}

std::vector<VideoFrame> read_all(const std::filesystem::path& p, double fps) {
  VideoReader reader(p, fps);
  std::vector<VideoFrame> frames;
  VideoFrame f;
  while (reader.next(&f)) frames.push_back(std::move(f));
  EXPECT_FALSE(reader.next(&f));  // stays at the end
  return frames;
}

std::string error_of(const std::filesystem::path& p) {
  try {
    VideoReader reader(p);
  } catch (const FileNotFound& e) {
    return "FileNotFound: " + std::string(e.what());
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Video, SampleIntervalFollowsDemoRule) {
  EXPECT_EQ(video_sample_interval(30, 10), 3);
  EXPECT_EQ(video_sample_interval(10, 4), 2);    // 2.5 rounds half to even
  EXPECT_EQ(video_sample_interval(10, 3), 3);    // 3.33
  EXPECT_EQ(video_sample_interval(25, 60), 1);   // never below 1
  EXPECT_EQ(video_sample_interval(0, 10), 3);    // unknown source fps -> 30
  EXPECT_EQ(video_sample_interval(29.97, 0), 1); // no target: every frame
  // Far below the source rate: the first frame only (the interval overflowed int: negative or 0).
  for (const double target : {30.0 / 4294967296.0, 1e-8, 1e-300})
    EXPECT_EQ(video_sample_interval(30, target), std::numeric_limits<int>::max()) << target;
}

TEST(Video, DecodesLosslessFramesExactly) {
  TempDir dir;
  const auto path = dir.path / "clip.mkv";
  ASSERT_TRUE(write_video(path, "ffv1", 10, 10, 32, 24)) << "libavcodec lacks the ffv1 encoder";
  VideoReader reader(path);
  EXPECT_EQ(reader.info().width, 32);
  EXPECT_EQ(reader.info().height, 24);
  EXPECT_DOUBLE_EQ(reader.info().fps, 10.0);
  EXPECT_EQ(reader.info().codec, "ffv1");
  EXPECT_EQ(reader.sample_interval(), 1);
  VideoFrame f;
  int n = 0;
  while (reader.next(&f)) {
    ASSERT_EQ(f.source_index, n);
    // pts x time base with one rounding: the nearest double to n / 10 (0.3, not 0.30000000000000004),
    // so poses.json and trajectory.tum print the decimal the stream states.
    EXPECT_EQ(f.timestamp_s, n / 10.0);
    const ImageU8 want = synthetic_frame(n, 32, 24);
    ASSERT_EQ(f.image.width, 32);
    ASSERT_EQ(f.image.height, 24);
    EXPECT_EQ(f.image.rgb, want.rgb) << "frame " << n;
    ++n;
  }
  EXPECT_EQ(n, 10);
}

TEST(Video, SamplesAtTargetFps) {
  TempDir dir;
  const auto path = dir.path / "clip.mkv";
  ASSERT_TRUE(write_video(path, "ffv1", 10, 10, 16, 8));
  auto frames = read_all(path, 4);  // interval round(2.5) = 2
  ASSERT_EQ(frames.size(), 5u);
  for (size_t k = 0; k < frames.size(); ++k) {
    EXPECT_EQ(frames[k].source_index, static_cast<int64_t>(2 * k));
    EXPECT_EQ(frames[k].image.rgb, synthetic_frame(static_cast<int>(2 * k), 16, 8).rgb);
  }
  frames = read_all(path, 3);  // interval 3: frames 0, 3, 6, 9
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[3].source_index, 9);
}

// A variable-rate stream (a phone or screen recording): timestamps on a 60 fps grid, 20 frames 1/60 s
// apart, then 20 frames 3/60 s apart: 40 frames in 80/60 s, 30 fps on average. Sampled as OpenCV's
// CAP_PROP_FPS (the average) gives it to upstream's demo.py: --fps 10 keeps every 3rd frame (the
// nominal 60 fps would keep every 6th). MP4 states the frame count, so no loss is inferred either.
TEST(Video, VariableFrameRateSamplesAtTheAverageRate) {
  TempDir dir;
  const auto path = dir.path / "vfr.mp4";
  std::vector<ImageU8> frames;
  std::vector<int64_t> pts;
  for (int i = 0; i < 40; ++i) {
    frames.push_back(synthetic_frame(i % 12, 32, 16));
    pts.push_back(i < 20 ? i : 20 + 3 * (i - 20));
  }
  LINGBOT_SKIP_WITHOUT_TOOL(lingbot_test::write_test_video(path, "mpeg4", frames, 60, 0, nullptr, pts),
                            "libavcodec lacks the mpeg4 encoder");
  VideoReader reader(path, 10);
  // About 30 (MP4's duration, which FFmpeg versions count with or without the last frame's).
  EXPECT_GT(reader.info().fps, 29.0);
  EXPECT_LT(reader.info().fps, 32.0);
  EXPECT_EQ(reader.sample_interval(), 3);
  std::vector<int64_t> kept;
  std::vector<double> times;
  for (VideoFrame f; reader.next(&f);) {
    kept.push_back(f.source_index);
    times.push_back(f.timestamp_s);
  }
  const std::vector<int64_t> every_third = {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39};
  EXPECT_EQ(kept, every_third);
  ASSERT_EQ(times.size(), every_third.size());
  for (size_t k = 0; k < times.size(); ++k)  // the frames' own presentation times
    EXPECT_NEAR(times[k], static_cast<double>(pts[static_cast<size_t>(every_third[k])]) / 60, 1e-6) << k;
  EXPECT_FALSE(reader.damage().any()) << reader.damage().describe();
}

// Frames as narrow as one pixel: swscale's vector stores run past the row ends, so the reader converts
// into padded rows first (a tight buffer was overrun past its end, see the next test).
TEST(Video, NarrowFramesDecodeExactly) {
  TempDir dir;
  for (const int w : {1, 2, 3, 5, 7}) {
    const auto path = dir.path / ("narrow" + std::to_string(w) + ".mkv");
    ASSERT_TRUE(write_video(path, "ffv1", 3, 10, w, 67)) << "libavcodec lacks the ffv1 encoder";
    const auto frames = read_all(path, 0);
    ASSERT_EQ(frames.size(), 3u) << "width " << w;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(frames[i].image.rgb, synthetic_frame(i, w, 67).rgb) << "width " << w << ", frame " << i;
  }
}

// A fuzz finding (fuzz/corpus/fuzz_video/regression_one_pixel_wide.m4v, 2.9 KB): a damaged MPEG-4
// stream of 1x5376 yuv420p frames. Converting them into a tight 1x5376 RGB buffer made swscale write
// past the buffer's end (a SEGV under AddressSanitizer: swscale itself is not instrumented).
TEST(Video, OnePixelWideYuvFramesConvert) {
  const std::string path = lingbot_test::kTestdata + "/../fuzz/corpus/fuzz_video/regression_one_pixel_wide.m4v";
  std::vector<uint8_t> bytes = lingbot_test::slurp_bytes(path);
  ASSERT_FALSE(bytes.empty()) << path;
  auto reader = VideoReader::from_memory(std::move(bytes), "regression_one_pixel_wide.m4v");
  EXPECT_EQ(reader.info().width, 1);
  EXPECT_EQ(reader.info().height, 5376);
  VideoFrame f;
  int n = 0;
  while (reader.next(&f)) {
    ASSERT_EQ(f.image.width, 1);
    ASSERT_EQ(f.image.height, 5376);
    ++n;
  }
  EXPECT_GE(n, 1);
}

TEST(Video, DecodesLossyYuvVideo) {
  TempDir dir;
  const auto path = dir.path / "clip.avi";
  LINGBOT_SKIP_WITHOUT_TOOL(write_video(path, "mpeg4", 6, 25, 32, 32), "libavcodec lacks the mpeg4 encoder");
  const auto frames = read_all(path, 0);
  ASSERT_EQ(frames.size(), 6u);
  // Lossy: colours within a few levels of the source in flat regions (B is constant per frame).
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(frames[i].image.pixel(16, 16)[2], 255 - 20 * i, 12) << "frame " << i;
  }
}

TEST(Video, ErrorsNameTheFile) {
  TempDir dir;
  EXPECT_EQ(error_of(dir.path / "nope.mp4"), "FileNotFound: video file not found: " + (dir.path / "nope.mp4").string());
  const auto text = dir.path / "notes.mp4";
  {
    std::ofstream f(text);
    f << "this is not a video, just some text that no demuxer should accept\n";
  }
  EXPECT_EQ(error_of(text), "cannot open video " + text.string() + ": Invalid data found when processing input");
  // A WAV file with one second of silence: a valid media file without a video stream.
  const auto wav = dir.path / "sound.wav";
  {
    const uint32_t rate = 8000, data_bytes = rate * 2;
    std::ofstream f(wav, std::ios::binary);
    auto u32 = [&](uint32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
    auto u16 = [&](uint16_t v) { f.write(reinterpret_cast<const char*>(&v), 2); };
    f.write("RIFF", 4);
    u32(36 + data_bytes);
    f.write("WAVEfmt ", 8);
    u32(16);
    u16(1);  // PCM
    u16(1);  // mono
    u32(rate);
    u32(rate * 2);
    u16(2);
    u16(16);
    f.write("data", 4);
    u32(data_bytes);
    const std::vector<char> silence(data_bytes, 0);
    f.write(silence.data(), data_bytes);
  }
  EXPECT_EQ(error_of(wav), "no video stream in " + wav.string());
}

// Found by a probe: an MP3's cover art was reconstructed as one frame, then reported as 272,717 lost
// frames (its stated 90000 fps over the song's length). Built by hand: an ID3v2.3 tag whose APIC frame
// holds a PNG, then MPEG-1 Layer III frames of silence (header FF FB 90 00, 417 bytes each).
TEST(Video, AnAudioFileWithCoverArtHasNoVideoStream) {
  TempDir dir;
  const std::vector<uint8_t> png = encode_png_rgb8(synthetic_frame(0, 16, 8));
  std::vector<uint8_t> apic = {0};  // text encoding
  for (char c : std::string("image/png")) apic.push_back(static_cast<uint8_t>(c));
  apic.insert(apic.end(), {0, 3, 0});  // MIME terminator, picture type 3 (front cover), empty description
  apic.insert(apic.end(), png.begin(), png.end());
  std::vector<uint8_t> file = {'I', 'D', '3', 3, 0, 0};
  const uint32_t tag_size = 10 + static_cast<uint32_t>(apic.size());
  for (int shift : {21, 14, 7, 0}) file.push_back(static_cast<uint8_t>((tag_size >> shift) & 0x7f));  // syncsafe
  file.insert(file.end(), {'A', 'P', 'I', 'C'});
  for (int shift : {24, 16, 8, 0}) file.push_back(static_cast<uint8_t>(apic.size() >> shift));
  file.insert(file.end(), {0, 0});  // frame flags
  file.insert(file.end(), apic.begin(), apic.end());
  for (int frame = 0; frame < 40; ++frame) {
    std::vector<uint8_t> mp3(417, 0);
    mp3[0] = 0xff, mp3[1] = 0xfb, mp3[2] = 0x90, mp3[3] = 0x00;
    file.insert(file.end(), mp3.begin(), mp3.end());
  }
  const auto path = dir.path / "song.mp3";
  lingbot_test::write_file(path, file);
  EXPECT_EQ(error_of(path),
            "no video stream in " + path.string() + " (only an attached picture, such as an audio file's cover art)");
}

// What an input does not state is said before the run (run's notices, Python's warnings): an image
// stream's frame rate (FFmpeg's 25 fps default: the timestamps and the fps sampling follow from it),
// non-square pixels (used as stored, as upstream). A file that states both has no notice.
TEST(FrameSource, NoticesSayWhatAVideoDoesNotState) {
  TempDir dir;
  const auto clip = dir.path / "clip.mkv";
  ASSERT_TRUE(write_video(clip, "ffv1", 4, 10, 16, 8));
  EXPECT_EQ(FrameSource::from_video(clip, FrameSelection{}).notices(), std::vector<std::string>{});

  const auto stream = dir.path / "frames.bin";  // PNG files one after another, as a `-f image2pipe` pipe
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 3; ++i) {
    const std::vector<uint8_t> png = encode_png_rgb8(synthetic_frame(i, 16, 8));
    bytes.insert(bytes.end(), png.begin(), png.end());
  }
  lingbot_test::write_file(stream, bytes);
  FrameSource pngs = FrameSource::from_video(stream, FrameSelection{0, 1, 0, false});
  EXPECT_EQ(pngs.notices(), std::vector<std::string>{stream.string() + " states no frame rate: its timestamps and the "
                                                     "fps sampling assume 25 fps (fps 0 keeps every frame)"});
  SourceFrame f;
  std::vector<double> timestamps;
  while (pngs.next(&f)) timestamps.push_back(f.timestamp);
  EXPECT_EQ(timestamps, (std::vector<double>{0, 0.04, 0.08}));

  // A photo given as a video: one frame, and a notice that photos go to an image folder instead.
  const auto photo = dir.path / "photo.png";
  lingbot_test::write_file(photo, encode_png_rgb8(synthetic_frame(0, 16, 8)));
  FrameSource one = FrameSource::from_video(photo, FrameSelection{});
  EXPECT_EQ(one.notices(), std::vector<std::string>{photo.string() + " is an image file, read as a video of one frame "
                                                    "without its EXIF orientation: photos go in a folder read as an "
                                                    "image folder (run --images, Python images=)"});
  int n = 0;
  while (one.next(&f)) ++n;
  EXPECT_EQ(n, 1);
  // FFmpeg's 25 fps for it is made up: no frame rate or sampling is claimed (the run's input line and
  // summary.json's source_fps said 25 fps, 1 in 2 frames).
  EXPECT_FALSE(one.video_sampling().has_value());
  EXPECT_EQ(one.estimated_count(), 1);  // the input line said "unknown frames"
  EXPECT_TRUE(pngs.video_sampling().has_value());  // an image pipe is a video, its rate assumed and said so

  const auto wide = dir.path / "anamorphic.mkv";
  std::vector<ImageU8> frames = {synthetic_frame(0, 16, 8), synthetic_frame(1, 16, 8)};
  ASSERT_TRUE(lingbot_test::write_test_video(wide, "ffv1", frames, 10, 0, nullptr, {}, AVRational{4, 2}));
  FrameSource anamorphic = FrameSource::from_video(wide, FrameSelection{});
  EXPECT_EQ(anamorphic.notices(),
            std::vector<std::string>{wide.string() + "'s pixels are not square (pixel aspect ratio 2:1): frames are used "
                                     "as stored, as upstream reads them, not stretched to their displayed shape, and "
                                     "the intrinsics are in stored pixels"});
}

// "-" is the standard input, as for most tools (it was "video file not found: -").
TEST(Video, DashIsTheStandardInput) {
  TempDir dir;
  const auto clip = dir.path / "clip.nut";
  ASSERT_TRUE(write_video(clip, "ffv1", 3, 10, 16, 8));
  const int file = ::open(clip.c_str(), O_RDONLY);
  ASSERT_GE(file, 0);
  const int saved = ::dup(0);
  ASSERT_EQ(::dup2(file, 0), 0);
  ::close(file);
  std::vector<std::string> names;
  std::string error;
  try {
    FrameSource src = FrameSource::from_video("-", FrameSelection{0, 1, 0, false});
    SourceFrame f;
    while (src.next(&f)) names.push_back(f.name);
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "");
  EXPECT_EQ(names, (std::vector<std::string>{"frame_0", "frame_1", "frame_2"}));
  // An empty standard input says so (it was FFmpeg's bare "Invalid data found when processing input").
  const int empty = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(empty, 0);
  ASSERT_EQ(::dup2(empty, 0), 0);
  ::close(empty);
  error.clear();
  try {
    FrameSource::from_video("-", FrameSelection{0, 1, 0, false});
  } catch (const Error& e) {
    error = e.what();
  }
  ::dup2(saved, 0);
  ::close(saved);
  EXPECT_EQ(error, "cannot open video pipe:0 (the standard input): Invalid data found when processing input (nothing "
                   "FFmpeg recognises as video arrived: was the pipe empty, or its writer failed?)");
}

TEST(FrameSource, VideoSelectionFollowsDemoOrder) {
  TempDir dir;
  const auto path = dir.path / "clip.mkv";
  ASSERT_TRUE(write_video(path, "ffv1", 10, 10, 16, 8));
  // fps 5 -> decoded frames 0,2,4,6,8; first_k 4 -> 0,2,4,6; stride 2 -> 0,4; then rotated.
  FrameSource src = FrameSource::from_video(path, FrameSelection{4, 2, 5, true});
  EXPECT_FALSE(src.count().has_value());
  EXPECT_EQ(src.estimated_count(), 2);  // 1 s at 10 fps in the container: 10 -> 5 -> 4 -> 2
  EXPECT_EQ(src.canvas(PreprocessOptions{28, 14, Preprocess::Crop}), (ImageSize{28, 28}));  // 8x16 -> 28x56 -> crop
  SourceFrame f;
  std::vector<std::string> names;
  while (src.next(&f)) {
    EXPECT_EQ(f.index, static_cast<int64_t>(names.size()));
    EXPECT_EQ(f.image.width, 8);
    EXPECT_EQ(f.image.height, 16);
    names.push_back(f.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"frame_0", "frame_4"}));
  const ImageU8 want = transpose(synthetic_frame(4, 16, 8), Transpose::Rotate270);
  EXPECT_EQ(f.image.rgb, want.rgb);
  EXPECT_NEAR(f.timestamp, 0.4, 1e-9);
}

TEST(FrameSource, FolderSelectionAndMixedSizeCanvas) {
  TempDir dir;
  for (int i = 0; i < 5; ++i) {
    // Frame 2 is taller: its crop-mode height exceeds the others and sets the canvas.
    std::string name = "f";  // (built stepwise: GCC 12 warns falsely on "f" + std::string)
    name += std::to_string(i);
    name += ".png";
    write_png_rgb8(dir.path / name, synthetic_frame(i, 28, i == 2 ? 28 : 14));
  }
  FrameSource src = FrameSource::from_folder(dir.path, FrameSelection{4, 2, 10, false});
  ASSERT_EQ(src.count(), 2);  // f0, f2
  EXPECT_EQ(src.estimated_count(), 2);
  EXPECT_EQ(src.canvas(PreprocessOptions{28, 14, Preprocess::Crop}), (ImageSize{28, 28}));
  SourceFrame f;
  ASSERT_TRUE(src.next(&f));
  EXPECT_EQ(f.name, "f0.png");
  EXPECT_EQ(f.image.rgb, synthetic_frame(0, 28, 14).rgb);
  ASSERT_TRUE(src.next(&f));
  EXPECT_EQ(f.name, "f2.png");
  EXPECT_EQ(f.timestamp, 1.0);
  EXPECT_FALSE(src.next(&f));
  try {
    FrameSource::from_folder(dir.path, FrameSelection{0, 0, 10, false});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "stride must be >= 1, got 0");
  }
}

TEST(Video, AppliesDisplayMatrixRotation) {
  TempDir dir;
  const auto path = dir.path / "portrait.mp4";
  // A display matrix rotating 90 degrees clockwise, as phones record portrait video.
  LINGBOT_SKIP_WITHOUT_TOOL(write_video(path, "mpeg4", 2, 10, 64, 32, 90), "libavcodec lacks the mpeg4 encoder");
  VideoReader reader(path);
  EXPECT_EQ(reader.info().rotation, 90);
  EXPECT_EQ(reader.info().width, 32);
  EXPECT_EQ(reader.info().height, 64);
  VideoFrame f;
  ASSERT_TRUE(reader.next(&f));
  ASSERT_EQ(f.image.width, 32);
  ASSERT_EQ(f.image.height, 64);
  // R grows with the source x (R = x at frame 0); after a clockwise turn source x runs down the rows.
  EXPECT_LT(f.image.pixel(16, 8)[0], 20);
  EXPECT_GT(f.image.pixel(16, 56)[0], 44);
}

// Every display rotation turns the frame as a player shows it: each displayed pixel holds the source
// pixel the rotation puts there (R = source x, G = 3 * source y; lossy, so compared on average).
TEST(Video, EveryDisplayRotationTurnsTheFrameClockwise) {
  TempDir dir;
  constexpr int W = 64, H = 32;
  for (const int rotation : {90, 180, 270}) {
    SCOPED_TRACE(rotation);
    const auto path = dir.path / ("turned" + std::to_string(rotation) + ".mp4");
    LINGBOT_SKIP_WITHOUT_TOOL(write_video(path, "mpeg4", 1, 10, W, H, rotation), "libavcodec lacks the mpeg4 encoder");
    VideoReader reader(path);
    EXPECT_EQ(reader.info().rotation, rotation);
    VideoFrame f;
    ASSERT_TRUE(reader.next(&f));
    const bool swap = rotation != 180;
    ASSERT_EQ(f.image.width, swap ? H : W);
    ASSERT_EQ(f.image.height, swap ? W : H);
    double error = 0;
    for (int y = 0; y < f.image.height; ++y)
      for (int x = 0; x < f.image.width; ++x) {
        // The source pixel a clockwise turn by `rotation` shows at (x, y).
        const int sx = rotation == 90 ? y : rotation == 180 ? W - 1 - x : W - 1 - y;
        const int sy = rotation == 90 ? H - 1 - x : rotation == 180 ? H - 1 - y : x;
        error += std::abs(f.image.pixel(x, y)[0] - sx) + std::abs(f.image.pixel(x, y)[1] - 3 * sy);
      }
    EXPECT_LT(error / (2.0 * W * H), 4.0);  // a wrong turn is off by tens on average
  }
}

TEST(Video, TruncatedFileEndsCleanly) {
  TempDir dir;
  const auto path = dir.path / "clip.mkv";
  ASSERT_TRUE(write_video(path, "ffv1", 10, 10, 32, 24));
  const auto full = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, full * 6 / 10);
  // The frames before the cut decode exactly; the damaged tail is skipped or ends the stream.
  VideoReader reader(path);
  VideoFrame f;
  int64_t n = 0;
  while (reader.next(&f)) {
    if (reader.corrupt_packets() == 0) {
      EXPECT_EQ(f.image.rgb, synthetic_frame(static_cast<int>(f.source_index), 32, 24).rgb);
    }
    ++n;
  }
  EXPECT_GE(n, 3);
  EXPECT_LT(n, 10);
}
