#pragma once
// A fresh, empty folder per test, removed afterwards: <tmp>/lingbot_test_<pid>_<suite>_<test><tag>
// (the process id keeps parallel ctest processes apart; `tag` when one test needs two folders).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace lingbot_test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           ("lingbot_test_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name() + tag);
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace lingbot_test
