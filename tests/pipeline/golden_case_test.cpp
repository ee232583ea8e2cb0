// case.json parsing (bench/harness/golden_case.h): integer fields are checked as integers in range before
// they are converted (a float such as 1.8e67 read as int was undefined behaviour, found by
// fuzz_golden_case).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "bench/harness/golden_case.h"

namespace {

std::string error_of(const std::string& text) {
  try {
    (void)lingbot::parse_case_json(text, "case.json");
  } catch (const lingbot::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GoldenCase, IntegerFieldsAreCheckedBeforeConversion) {
  const std::string head = R"({"weights_file": "w.safetensors", "scenario": {"kv_cache_sliding_window": 3, )";
  EXPECT_EQ(error_of(head + R"("num_scale_frames": 1.7e67}})"),
            "case.json: scenario.num_scale_frames must be an integer, got 1.7e+67");
  EXPECT_EQ(error_of(head + R"("num_scale_frames": 17777777777777777777777}})"),
            "case.json: scenario.num_scale_frames must be an integer, got 1.7777777777777777e+22");
  EXPECT_EQ(error_of(head + R"("num_scale_frames": 4294967296}})"),
            "case.json: scenario.num_scale_frames must be at most 2147483647, got 4294967296");
  EXPECT_EQ(error_of(head + R"("num_scale_frames": 2, "keyframe_interval": 2.5}})"),
            "case.json: scenario.keyframe_interval must be an integer, got 2.5");
  const lingbot::GoldenCase g = lingbot::parse_case_json(head + R"("num_scale_frames": 2, "keyframe_interval": 3}})",
                                                         "case.json");
  EXPECT_EQ(g.scale_frames, 2);
  EXPECT_EQ(g.sliding_window, 3);
  EXPECT_EQ(g.keyframe_interval, 3);
}

}  // namespace
