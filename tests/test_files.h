#pragma once
// Whole-file reads and writes for tests, and the committed test data folder (testdata/). One copy
// for every test area: a unity build (CI's CMAKE_UNITY_BUILD) merges a folder's test files into one
// translation unit, where per-file helpers of the same name would clash.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace lingbot_test {

inline const std::string kTestdata = LINGBOT_TESTDATA_DIR;
inline const std::string kTinyDir = kTestdata + "/tiny";  // the tiny golden case: frames, model.pt, safetensors

// The whole file as bytes in a string; "" when it cannot be read.
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream is(p, std::ios::binary);
  std::stringstream ss;
  ss << is.rdbuf();
  return ss.str();
}

// The whole file as bytes; empty when it cannot be read.
inline std::vector<uint8_t> slurp_bytes(const std::filesystem::path& p) {
  std::ifstream is(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
}

inline void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

inline void write_file(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace lingbot_test
