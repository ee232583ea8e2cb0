// `lingbot-map version` / `--version`: the commit the binary was built from (regenerated at build
// time, not configure time) and the BLAS the GEMMs run on.
#include <regex>

#include "run_test_util.h"

namespace {

using namespace run_test;

TEST(Version, NamesTheCommitBackendsAndBlas) {
  const Result r = run_cli("version");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  const std::regex first(R"(^lingbot-map (\d+\.\d+\.\d+) \(git ([0-9a-f]{7,40}(-dirty)?|unknown)\)\n)");
  ASSERT_TRUE(std::regex_search(r.out, m, first)) << r.out;
  EXPECT_TRUE(contains(r.out, "\nbackends: cpu")) << r.out;
  EXPECT_TRUE(contains(r.out, "\nblas: OpenBLAS ")) << r.out;
  EXPECT_TRUE(contains(r.out, ", core ")) << r.out;
  // The same revision through --version.
  const Result v = run_cli("--version");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out, m[1].str() + " (" + m[2].str() + ")\n");
}

}  // namespace
