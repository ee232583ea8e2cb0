#pragma once
// Shared by the `lingbot-map run` CLI tests: running the binary, temp folders, and parsers for the
// files `run` writes (PLY header, 16-bit PNG header, TUM lines).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/image.h"
#include "test_files.h"

namespace run_test {

namespace fs = std::filesystem;

using lingbot_test::kTestdata;
using lingbot_test::slurp;
using lingbot_test::write_file;
inline const std::string kGolden = LINGBOT_SHARED_GOLDEN_DIR;
// The tiny golden case (testdata/tiny): its frames, its checkpoint, and run options that fit it.
inline const std::string kTinyFrames = lingbot_test::kTinyDir + "/frames";
inline const std::string kTinyModel = lingbot_test::kTinyDir + "/model.pt";
inline const std::string kTinyRunArgs = " --image-size 112 --scale-frames 2 --kv-window 3";

struct Result {
  int exit_code = -1;
  std::string out, err;
};

inline std::vector<lingbot::io::ImageU8> tiny_frames() {
  std::vector<lingbot::io::ImageU8> frames;
  for (const auto& p : lingbot::io::list_image_files(kTinyFrames)) frames.push_back(lingbot::io::load_image(p));
  return frames;
}

// A fresh, empty folder unique to this process and `name`.
inline fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("run_cli_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Runs a shell command with stdout/stderr captured (not a terminal, so progress is plain lines).
inline Result run_command(const std::string& command) {
  const fs::path d = fresh_dir("_io");
  const std::string cmd = command + " >" + (d / "out").string() + " 2>" + (d / "err").string();
  const int status = std::system(cmd.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(d / "out");
  r.err = slurp(d / "err");
  return r;
}

// Runs `lingbot-map <args>` (run_command).
inline Result run_cli(const std::string& args) { return run_command(std::string(LINGBOT_CLI_PATH) + " " + args); }

// A bench Ctrl-C'd after `seconds` (timeout -s INT): its result, and the frames its "interrupted
// (Ctrl-C) after N of <total> frames: the table and the CSV hold what was measured; no summary line"
// said (checked whole; -1 when the line is missing). Exit status 130 is checked too.
inline std::pair<Result, long> interrupted_bench(int seconds, const std::string& args, long total) {
  const Result r = run_command("timeout --preserve-status -s INT " + std::to_string(seconds) + " " +
                               std::string(LINGBOT_CLI_PATH) + " " + args);
  EXPECT_EQ(r.exit_code, 130) << r.out << r.err;
  const std::string prefix = "interrupted (Ctrl-C) after ";
  const size_t at = r.err.rfind(prefix);
  EXPECT_NE(at, std::string::npos) << r.err;
  if (at == std::string::npos) return {r, -1};
  const long frames = std::stol(r.err.substr(at + prefix.size()));
  EXPECT_EQ(r.err.substr(at), prefix + std::to_string(frames) + " of " + std::to_string(total) +
                                  " frames: the table and the CSV hold what was measured; no summary line\n");
  EXPECT_EQ(r.out.find("summary:"), std::string::npos) << r.out;
  return {r, frames};
}

// `lingbot-map <args>` as the unprivileged user nobody (uid / gid 65534, util-linux's setpriv) when this
// test runs as root (CI does), where permissions must apply: a copy of the CLI in `dir` runs (the build
// tree may be in a folder nobody cannot enter, such as /root); the files it writes must be nobody's.
// Else run_cli.
inline constexpr unsigned kNobody = 65534;
inline Result run_cli_unprivileged(const std::string& args, const fs::path& dir) {
  if (::geteuid() != 0) return run_cli(args);
  const fs::path cli = dir / "lingbot-map";
  fs::copy_file(LINGBOT_CLI_PATH, cli, fs::copy_options::overwrite_existing);
  // nobody must reach and run the copy whatever the umask: the test's folders and the binary.
  for (const fs::path& p : {dir.parent_path(), dir, cli}) fs::permissions(p, fs::perms(0755));
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  const Result can = run_command(as_nobody + "test -x " + cli.string());
  EXPECT_EQ(can.exit_code, 0) << "user nobody cannot run " << cli << " (a folder above it closed to others?) "
                              << can.err;
  // A sanitizer build's LSAN_OPTIONS names a suppressions file in the source tree, which nobody may not
  // be able to read: no leak check on this run (leaks are not what it tests; the other runs check them).
  return run_command("ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" " + as_nobody + cli.string() + " " + args);
}

// Regular files in `dir` whose name ends with `suffix`.
inline size_t count_files(const fs::path& dir, const std::string& suffix) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().ends_with(suffix)) ++n;
  return n;
}

// The key=value pairs of the last "summary:" line of a bench command's output.
inline std::map<std::string, std::string> summary_of(const std::string& out) {
  std::map<std::string, std::string> kv;
  const auto pos = out.rfind("summary:");
  EXPECT_NE(pos, std::string::npos) << out;
  if (pos == std::string::npos) return kv;
  std::istringstream is(out.substr(pos + 8, out.find('\n', pos) - pos - 8));
  for (std::string item; is >> item;) {
    const auto eq = item.find('=');
    EXPECT_NE(eq, std::string::npos) << item;
    if (eq != std::string::npos) kv[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return kv;
}

inline bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

inline nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(slurp(p)); }

struct PlyInfo {
  int64_t vertices = -1;
  size_t header_bytes = 0;
  std::vector<std::string> properties;  // "float x", ...
  std::string format;
};

// Parses the header of a PLY file; vertices = -1 when it is malformed.
inline PlyInfo parse_ply_header(const std::string& bytes) {
  PlyInfo info;
  const size_t end = bytes.find("end_header\n");
  if (bytes.rfind("ply\n", 0) != 0 || end == std::string::npos) return info;
  info.header_bytes = end + std::string("end_header\n").size();
  std::istringstream is(bytes.substr(0, end));
  std::string line;
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    std::string word;
    ls >> word;
    if (word == "format") {
      info.format = line.substr(7);
    } else if (word == "element") {
      std::string what;
      ls >> what;
      if (what == "vertex") ls >> info.vertices;
    } else if (word == "property") {
      std::string type, name;
      ls >> type >> name;
      info.properties.push_back(type + " " + name);
    }
  }
  return info;
}

struct PngInfo {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, colour_type = -1;
};

// Reads the IHDR chunk of a PNG file (the signature and IHDR are always its first 33 bytes).
inline PngInfo parse_png_header(const std::string& bytes) {
  PngInfo info;
  if (bytes.size() < 33 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || bytes.compare(12, 4, "IHDR") != 0) return info;
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at])) << 24) |
           (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 2])) << 8) | static_cast<uint8_t>(bytes[at + 3]);
  };
  info.width = be32(16);
  info.height = be32(20);
  info.bit_depth = static_cast<uint8_t>(bytes[24]);
  info.colour_type = static_cast<uint8_t>(bytes[25]);
  return info;
}

// Non-empty lines of a text file, each split on whitespace.
inline std::vector<std::vector<std::string>> read_lines(const fs::path& p) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream is(slurp(p));
  std::string line;
  while (std::getline(is, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::vector<std::string> words;
    for (std::string w; ls >> w;) words.push_back(w);
    lines.push_back(words);
  }
  return lines;
}

}  // namespace run_test
