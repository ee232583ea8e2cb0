// `lingbot-map run --live` on real streams (issue #14 part 3):
//   * pipe:0 — the test writes a NUT/FFV1 stream (lossless RGB) into the process's stdin frame by
//     frame; each frame's result must appear while the stream is still open (the next frames not
//     written yet), and the poses equal an offline run over the same frames as images;
//   * a deliberately slow engine (the hidden --debug-frame-delay-ms hook) drops frames, newest first,
//     and says how many (log line and summary.json: decoded = processed + dropped);
//   * a looping HTTP source served from this test on 127.0.0.1 (cpp-httplib), stopped by --first-k.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <thread>

#include "io/image.h"
#include "run_test_util.h"
#include "test_stream_writer.h"

namespace {

using namespace run_test;
using Clock = std::chrono::steady_clock;

// Ends with --scale-frames (the caller appends the count); kFolderArgs for --images runs (no --fps).
const std::string kFolderArgs = " --model " + kTestdata +
                                "/tiny/model.pt --image-size 112 --kv-window 3 --threads 1 --progress lines --scale-frames ";
const std::string kModelArgs = " --fps 0" + kFolderArgs;

// `lingbot-map run <args>` with its stdin the read end of a pipe the test writes to.
struct Child {
  pid_t pid = -1;
  int stdin_w = -1;
  fs::path io;
  Child(const std::vector<std::string>& args, const fs::path& io_dir) : io(io_dir) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[0], 0);
      ::close(fds[0]);
      ::close(fds[1]);
      const int out = ::open((io / "stdout.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open((io / "stderr.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      std::vector<char*> argv;
      std::string bin = LINGBOT_CLI_PATH;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[0]);
    stdin_w = fds[1];
  }
  bool running() {
    int status = 0;
    return ::waitpid(pid, &status, WNOHANG) == 0 ? true : (exited_ = true, status_ = status, false);
  }
  int wait() {
    if (!exited_) {
      ::waitpid(pid, &status_, 0);
      exited_ = true;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  ~Child() {
    if (stdin_w >= 0) ::close(stdin_w);
    if (!exited_ && pid > 0) {
      ::kill(pid, SIGKILL);
      wait();
    }
  }
  bool exited_ = false;
  int status_ = 0;
};

std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream is(s);
  for (std::string w; is >> w;) v.push_back(w);
  return v;
}

bool wait_for_file(const fs::path& p, double seconds) {
  const auto t0 = Clock::now();
  while (!fs::exists(p)) {
    if (std::chrono::duration<double>(Clock::now() - t0).count() > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}


TEST(RunLive, PipeStdinGivesResultsWhileFramesArrive) {
  const fs::path dir = fresh_dir("live_pipe");
  const auto frames = tiny_frames();
  ASSERT_EQ(frames.size(), 10u);
  // One scale frame, so every frame's result can be awaited before the next frame is written (with
  // two, frame 0 would wait for frame 1, and writing both at once lets the newest replace frame 0).
  Child child(split_args("run --video pipe:0 --live --keyframe-interval 1 --out " + (dir / "out").string() + kModelArgs + "1"), dir);
  {
    lingbot_test::StreamVideoWriter w("pipe:" + std::to_string(child.stdin_w), 112, 70, 10);
    ASSERT_TRUE(w.ok());
    for (size_t i = 0; i < frames.size(); ++i) {
      ASSERT_TRUE(w.write(frames[i])) << "frame " << i;
      char name[32];
      std::snprintf(name, sizeof name, "%06zu.npy", i);
      // The result of frame i arrives before frame i + 1 is even written.
      ASSERT_TRUE(wait_for_file(dir / "out" / "depth" / name, 120)) << "no result for frame " << i << "\n"
                                                                    << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
      ASSERT_TRUE(child.running()) << "the run ended before the stream did";
    }
    w.close();
  }
  ::close(child.stdin_w);
  child.stdin_w = -1;
  ASSERT_EQ(child.wait(), 0) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
  const auto summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_EQ(summary["input"]["kind"], "live");
  // The stream's rate and what --fps kept of it, as for a video file (a probe found both null).
  EXPECT_EQ(summary["input"]["source_fps"], 10.0);
  EXPECT_EQ(summary["input"]["sample_interval"], 1);
  EXPECT_TRUE(contains(slurp(dir / "stdout.txt"), "input: live pipe:0 (10 fps, every frame), unknown frames"))
      << slurp(dir / "stdout.txt");
  EXPECT_EQ(summary["frames"], 10);
  EXPECT_EQ(summary["live"]["frames_decoded"], 10);
  EXPECT_EQ(summary["live"]["frames_processed"], 10);
  EXPECT_EQ(summary["live"]["frames_dropped"], 0);
  EXPECT_TRUE(contains(slurp(dir / "stdout.txt"), "live: 10 frames decoded, 10 processed, 0 dropped"));
  // An endless source gets a bounded cost unless --max-special-frames says otherwise (here it never
  // fires: 10 frames, 6 evicted, so the poses below still equal the offline run's).
  EXPECT_EQ(summary["options"]["max_special_frames"], 256);
  EXPECT_EQ(summary["options"]["max_special_frames_rule"], "automatic (live input: bounded cost)");
  EXPECT_TRUE(contains(slurp(dir / "stdout.txt"), "live input: --max-special-frames 256 (memory and time per frame stay "
                                                  "flat however long the stream runs; --max-special-frames 0 keeps every "
                                                  "frame's special tokens, as upstream)\n"));

  // Lossless stream: the same poses as the offline run over the frames as images.
  const Result offline =
      run_cli("run --images " + kTestdata + "/tiny/frames --keyframe-interval 1 --out " + (dir / "offline").string() + kFolderArgs + "1");
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  const auto offline_summary = read_json(dir / "offline" / "summary.json");
  EXPECT_EQ(offline_summary["options"]["max_special_frames"], 0);
  EXPECT_EQ(offline_summary["options"]["max_special_frames_rule"], "default (keep all, as upstream)");
  const auto live_poses = read_json(dir / "out" / "poses.json")["frames"];
  const auto ref_poses = read_json(dir / "offline" / "poses.json")["frames"];
  ASSERT_EQ(live_poses.size(), 10u);
  ASSERT_EQ(ref_poses.size(), 10u);
  for (size_t i = 0; i < 10; ++i)
    for (size_t r = 0; r < 3; ++r)
      for (size_t c = 0; c < 4; ++c)
        EXPECT_NEAR(live_poses[i]["w2c"][r][c].get<double>(), ref_poses[i]["w2c"][r][c].get<double>(), 1e-6)
            << "frame " << i;
}

// --fps below the stream's rate keeps 1 in N decoded frames, and the run says so as for a video file
// (summary.json input.source_fps / sample_interval were null for a live source).
TEST(RunLive, FpsSamplesTheStreamAndTheRunSaysHow) {
  const fs::path dir = fresh_dir("live_fps");
  const auto frames = tiny_frames();
  Child child(split_args("run --video pipe:0 --live --fps 5 --out " + (dir / "out").string() + kFolderArgs + "1"), dir);
  {
    lingbot_test::StreamVideoWriter w("pipe:" + std::to_string(child.stdin_w), 112, 70, 10);
    for (size_t i = 0; i < frames.size(); ++i) ASSERT_TRUE(w.write(frames[i])) << "frame " << i;
    w.close();
  }
  ::close(child.stdin_w);
  child.stdin_w = -1;
  ASSERT_EQ(child.wait(), 0) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
  const auto summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary["input"]["source_fps"], 10.0);
  EXPECT_EQ(summary["input"]["sample_interval"], 2);
  EXPECT_EQ(summary["live"]["frames_decoded"], 5);  // frames 0, 2, 4, 6, 8 of 10
  EXPECT_TRUE(contains(slurp(dir / "stdout.txt"), "input: live pipe:0 (10 fps, 1 in 2 frames: 5 fps), unknown frames"))
      << slurp(dir / "stdout.txt");
}

TEST(RunLive, SlowEngineDropsFramesAndSaysHowMany) {
  const fs::path dir = fresh_dir("live_slow");
  const auto frames = tiny_frames();
  constexpr int kFrames = 30;
  // 300 ms per frame: taking all 30 frames would need >= 9 s, writing them takes milliseconds.
  Child child(split_args("run --video pipe:0 --live --debug-frame-delay-ms 300 --out " + (dir / "out").string() +
                         kModelArgs + "2"),
              dir);
  {
    lingbot_test::StreamVideoWriter w("pipe:" + std::to_string(child.stdin_w), 112, 70, 10);
    for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(w.write(frames[static_cast<size_t>(i % 10)])) << "frame " << i;
    w.close();
  }
  ::close(child.stdin_w);
  child.stdin_w = -1;
  ASSERT_EQ(child.wait(), 0) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
  const auto summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary["status"], "completed");
  const int64_t decoded = summary["live"]["frames_decoded"], processed = summary["live"]["frames_processed"],
                dropped = summary["live"]["frames_dropped"];
  EXPECT_EQ(decoded, kFrames);
  EXPECT_EQ(processed + dropped, kFrames);
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(summary["frames"], processed);  // every frame taken got a result
  EXPECT_EQ(read_json(dir / "out" / "poses.json")["frames"].size(), static_cast<size_t>(processed));
  EXPECT_TRUE(contains(slurp(dir / "stdout.txt"), "live: " + std::to_string(kFrames) + " frames decoded, " +
                                               std::to_string(processed) + " processed, " + std::to_string(dropped) +
                                               " dropped"));
}

TEST(RunLive, LoopingHttpSourceStopsCleanly) {
  const auto frames = tiny_frames();
  httplib::Server server;
  std::atomic<int> served{0};
  server.Get("/loop.nut", [&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("video/x-nut", [&](size_t, httplib::DataSink& sink) {
      lingbot_test::StreamVideoWriter w(
          [&](const uint8_t* data, size_t n) { return sink.is_writable() && sink.write(reinterpret_cast<const char*>(data), n); },
          112, 70, 10);
      // Loops the 10 frames until the client goes away (at most about a minute of video).
      for (int i = 0; i < 600 && w.ok(); ++i) {
        if (!w.write(frames[static_cast<size_t>(i % 10)])) break;
        ++served;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      sink.done();
      return true;
    });
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread listener([&] { server.listen_after_bind(); });
  const fs::path dir = fresh_dir("live_http");
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/loop.nut";
  const Result r = run_cli("run --video " + url + " --live --first-k 12 --out " + (dir / "out").string() + kModelArgs + "2");
  server.stop();
  listener.join();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_EQ(summary["input"]["path"], url);
  // Unknown length: the default keyframe rule is flow, never the frame-count rule.
  EXPECT_EQ(summary["options"]["keyframe_interval_rule"].get<std::string>().rfind("automatic (live input, unknown length: flow", 0), 0u)
      << summary["options"]["keyframe_interval_rule"];
  EXPECT_EQ(summary["live"]["frames_decoded"], 12);
  EXPECT_EQ(summary["live"]["frames_processed"].get<int64_t>() + summary["live"]["frames_dropped"].get<int64_t>(), 12);
  EXPECT_EQ(summary["frames"], summary["live"]["frames_processed"]);
  EXPECT_GE(summary["frames"].get<int64_t>(), 2);
  EXPECT_GE(served.load(), 12);
  EXPECT_LT(served.load(), 600) << "the source should have stopped when the run disconnected";
}

// A source silent from the start: SIGTERM (or Ctrl-C) before any frame ends the run with its exit
// code and one line, not with the default action of the signal; nothing is written. Also without
// --live: a pipe is read like a file there, but a silent one must not hold a stop back.
TEST(RunLive, SignalBeforeTheFirstFrameEndsCleanly) {
  for (const std::string live : {"--live ", ""}) {
    SCOPED_TRACE(live);
    const fs::path dir = fresh_dir("live_sigterm_first");
    Child child(split_args("run --video pipe:0 " + live + "--out " + (dir / "out").string() + kModelArgs + "1"), dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the stream stays open and silent
    ASSERT_TRUE(child.running()) << slurp(dir / "stderr.txt");
    ::kill(child.pid, SIGTERM);
    EXPECT_EQ(child.wait(), 143) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
    EXPECT_EQ(slurp(dir / "stderr.txt"), "interrupted before the first frame (SIGTERM): nothing was written\n");
    EXPECT_FALSE(fs::exists(dir / "out"));
  }
}

// Without --live a pipe is read like a file: the stream's first frames are probed before any is
// processed, so a pipe that stalls there holds the run in the probe, where Ctrl-C must still end it.
TEST(RunLive, CtrlCEndsAPipeStalledInItsProbe) {
  const fs::path dir = fresh_dir("pipe_sigint_probe");
  ::signal(SIGPIPE, SIG_IGN);
  Child child(split_args("run --video pipe:0 --out " + (dir / "out").string() + kModelArgs + "1"), dir);
  lingbot_test::StreamVideoWriter w("pipe:" + std::to_string(child.stdin_w), 112, 70, 10);
  const auto frames = tiny_frames();
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(w.write(frames[i]));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(child.running()) << slurp(dir / "stderr.txt");
  const auto t0 = Clock::now();
  ::kill(child.pid, SIGINT);
  EXPECT_EQ(child.wait(), 130) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  EXPECT_EQ(slurp(dir / "stderr.txt"), "interrupted before the first frame (Ctrl-C): nothing was written\n");
}

TEST(RunLive, CtrlCStopsASilentStreamCleanly) {
  const fs::path dir = fresh_dir("live_sigint");
  const auto frames = tiny_frames();
  // The writer outlives the run (its trailer then goes to a closed pipe): EPIPE, not a fatal signal.
  ::signal(SIGPIPE, SIG_IGN);
  Child child(split_args("run --video pipe:0 --live --out " + (dir / "out").string() + kModelArgs + "1"), dir);
  lingbot_test::StreamVideoWriter w("pipe:" + std::to_string(child.stdin_w), 112, 70, 10);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(w.write(frames[i]));
    char name[32];
    std::snprintf(name, sizeof name, "%06zu.npy", i);
    ASSERT_TRUE(wait_for_file(dir / "out" / "depth" / name, 120)) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
  }
  // The stream stays open and silent; Ctrl-C must still end the run (exit 130, files finalised).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(child.running());
  ::kill(child.pid, SIGINT);
  EXPECT_EQ(child.wait(), 130) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
  const auto summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary["status"], "interrupted");
  EXPECT_EQ(summary["frames"], 3);
  EXPECT_EQ(summary["warnings"].size(), 0u) << summary["warnings"];  // an aborted read is no damage
  EXPECT_EQ(summary["live"]["frames_processed"], 3);
  EXPECT_EQ(summary["live"]["frames_dropped"], 0);
}

// Ctrl-C while a live source stalls in the middle of a packet (a camera or network pause): the read
// the signal aborts is not damage, and the half-received frame goes nowhere (it was decoded and
// pushed, a step the signal then cut: one frame without a result, and at times an "input damaged"
// warning).
TEST(RunLive, CtrlCDuringAPacketCutShortIsNoDamage) {
  const fs::path dir = fresh_dir("live_sigint_mid_packet");
  const auto frames = tiny_frames();
  ::signal(SIGPIPE, SIG_IGN);
  Child child(split_args("run --video pipe:0 --live --out " + (dir / "out").string() + kModelArgs + "1"), dir);
  bool cut = false, cut_done = false;
  const int fd = child.stdin_w;
  lingbot_test::StreamVideoWriter w(
      [&](const uint8_t* data, size_t n) {
        if (cut_done) return true;  // the rest of the packet never comes
        if (cut) {
          n /= 2;
          cut_done = true;
        }
        for (size_t done = 0; done < n;) {
          const ssize_t k = ::write(fd, data + done, n - done);
          if (k <= 0) return false;
          done += static_cast<size_t>(k);
        }
        return true;
      },
      112, 70, 10);
  const size_t whole = 3;
  for (size_t i = 0; i < whole; ++i) ASSERT_TRUE(w.write(frames[i % frames.size()]));
  cut = true;
  ASSERT_TRUE(w.write(frames[whole % frames.size()]));  // half of its packet
  // Results come for the whole frames the engine takes (a loaded machine may drop one: the newest
  // replaces a frame not yet taken; the decoder may hold the last until a next packet begins). The
  // signal must come once the engine is idle, the reader blocked in the cut packet: when the number
  // of results has stopped changing.
  ASSERT_TRUE(wait_for_file(dir / "out" / "depth" / "000000.npy", 60)) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
  size_t results = 0;
  for (auto still = Clock::now(), give_up = Clock::now() + std::chrono::seconds(30);
       Clock::now() - still < std::chrono::milliseconds(1500) && Clock::now() < give_up;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const size_t n = count_files(dir / "out" / "depth", ".npy");
    if (n != results) results = n, still = Clock::now();
  }
  ASSERT_TRUE(child.running());
  ::kill(child.pid, SIGINT);
  EXPECT_EQ(child.wait(), 130) << slurp(dir / "stdout.txt") << slurp(dir / "stderr.txt");
  const auto summary = read_json(dir / "out" / "summary.json");
  EXPECT_EQ(summary["status"], "interrupted");
  EXPECT_EQ(summary["warnings"].size(), 0u) << summary["warnings"];
  EXPECT_EQ(summary["frames_without_result"], 0) << summary.dump();
  EXPECT_EQ(summary["frames"], summary["frames_pushed"]);
}

TEST(RunLive, BadLiveOptionsNameTheProblem) {
  const fs::path dir = fresh_dir("live_errors");
  Result r = run_cli("run --live --images " + kTestdata + "/tiny/frames --out " + (dir / "out").string() + kFolderArgs + "1");
  EXPECT_EQ(r.exit_code, 2);  // a usage error
  EXPECT_EQ(r.err,
            "error: --live needs --video SOURCE (a camera /dev/video0, rtsp://..., http://..., pipe:0 or a file)\n"
            "Run 'lingbot-map run --help' for usage.\n");
  r = run_cli("run --live --video http://127.0.0.1:1/none.nut --out " + (dir / "out").string() + kModelArgs + "1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "error: cannot open video http://127.0.0.1:1/none.nut: ")) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out")) << "nothing is written for an input that cannot be opened";
}

}  // namespace
