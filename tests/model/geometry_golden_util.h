#pragma once
// Shared helpers of the head / geometry golden tests: locating golden cases and comparing tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>

#include "io/safetensors.h"
#include "lingbot/tensor.h"

namespace lingbot::test {

// Directory of golden case `name`: the repo copy (testdata/<name>) when it holds the files, else
// ../shared/golden/<name>; nullopt (and a visible message) when neither exists.
inline std::optional<std::string> golden_case_dir(const std::string& name) {
  namespace fs = std::filesystem;
  for (const std::string& base : {std::string(LINGBOT_TESTDATA_DIR), std::string(LINGBOT_SHARED_GOLDEN_DIR)}) {
    const fs::path dir = fs::path(base) / name;
    if (fs::exists(dir / "reference.safetensors")) return dir.string();
  }
  std::printf("[ NOTE     ] golden case '%s' not found in %s or %s\n", name.c_str(), LINGBOT_TESTDATA_DIR,
              LINGBOT_SHARED_GOLDEN_DIR);
  return std::nullopt;
}

struct Diff {
  double max_abs = 0;   // max |a - b|
  double max_ref = 0;   // max |b|
  int64_t argmax = -1;  // flat index of max_abs
};

inline Diff diff(const float* a, const float* ref, int64_t n) {
  Diff d;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::abs(double(a[i]) - double(ref[i]));
    if (!(e <= d.max_abs)) {  // also catches NaN
      d.max_abs = e;
      d.argmax = i;
    }
    d.max_ref = std::max(d.max_ref, std::abs(double(ref[i])));
  }
  return d;
}

// max elementwise |a - b| / max(|b|, floor)
inline double max_rel(const float* a, const float* ref, int64_t n, double floor) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::abs(double(a[i]) - double(ref[i])) / std::max(std::abs(double(ref[i])), floor);
    if (!(e <= m)) m = e;
  }
  return m;
}

}  // namespace lingbot::test
