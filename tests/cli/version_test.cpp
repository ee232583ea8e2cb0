// `lingbot-map version` / `--version`: the commit the binary was built from (regenerated at build
// time, not configure time) and the BLAS the GEMMs run on.
#include <cctype>

#include "run_test_util.h"

namespace {

using namespace run_test;

// "<digits>.<digits>.<digits>" (no std::regex: GCC 12 warns falsely inside it under -O2/ASan).
bool is_semver(const std::string& s) {
  int dots = 0;
  bool digit_before = false;
  for (char c : s) {
    if (c == '.') {
      if (!digit_before) return false;
      ++dots;
      digit_before = false;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      digit_before = true;
    } else {
      return false;
    }
  }
  return dots == 2 && digit_before;
}

// A short or full hex commit hash, optionally "-dirty", or "unknown" where git cannot say.
bool is_git_rev(std::string s) {
  if (s == "unknown") return true;
  const std::string dirty = "-dirty";
  if (s.size() > dirty.size() && s.compare(s.size() - dirty.size(), dirty.size(), dirty) == 0)
    s.resize(s.size() - dirty.size());
  if (s.size() < 7 || s.size() > 40) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

TEST(Version, NamesTheCommitBackendsAndBlas) {
  const Result r = run_cli("version");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // "lingbot-map <version> (git <rev>)" on the first line.
  const std::string first = r.out.substr(0, r.out.find('\n'));
  const std::string prefix = "lingbot-map ";
  ASSERT_EQ(first.rfind(prefix, 0), 0u) << r.out;
  const size_t open = first.find(" (git ");
  ASSERT_NE(open, std::string::npos) << r.out;
  ASSERT_EQ(first.back(), ')') << r.out;
  const std::string version = first.substr(prefix.size(), open - prefix.size());
  const std::string rev = first.substr(open + 6, first.size() - open - 7);
  EXPECT_TRUE(is_semver(version)) << version;
  EXPECT_TRUE(is_git_rev(rev)) << rev;
  // The checkout's HEAD, as git says it here ("unknown" only where git cannot say, as for the build).
  const Result head = run_command("git -C " + std::string(LINGBOT_TESTDATA_DIR) + " rev-parse --short HEAD");
  if (head.exit_code == 0)
    EXPECT_EQ(rev.substr(0, rev.find('-')), head.out.substr(0, head.out.find('\n')))
        << "the binary names another commit than the checkout's HEAD (built before the last commit?)";
  else
    EXPECT_EQ(rev, "unknown") << head.err;
  EXPECT_TRUE(contains(r.out, "\nbackends: cpu")) << r.out;
  EXPECT_TRUE(contains(r.out, "\nblas: OpenBLAS ")) << r.out;
  EXPECT_TRUE(contains(r.out, ", core ")) << r.out;
  // The same revision through --version.
  const Result v = run_cli("--version");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out, version + " (" + rev + ")\n");
}

}  // namespace

namespace {

// A standard output that cannot be written (a full disk) is an error, not a silent success.
TEST(CliOutput, AFailedWriteToStandardOutputExits1) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  for (const std::string& args : {std::string("version"), "inspect " + kTinyModel, std::string("--help")}) {
    const fs::path d = fresh_dir("full");
    const std::string cmd = std::string(LINGBOT_CLI_PATH) + " " + args + " >/dev/full 2>" + (d / "err").string();
    const int status = std::system(cmd.c_str());
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1) << args;
    // The reason when the last flush failed; a failure of an earlier write leaves only the stream's flag.
    const std::string err = lingbot_test::slurp(d / "err");
    EXPECT_TRUE(err == "error: cannot write the standard output: No space left on device\n" ||
                err == "error: cannot write the standard output (a write failed)\n")
        << args << ": " << err;
  }
}

}  // namespace
