#pragma once
// Whole-file reads and crash-safe whole-file writes for the io layer.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lingbot::io {

// Checks that `path` exists: "<what> not found: <path>", "<what> <path> is a symbolic link loop",
// "cannot access <what> <path>: <reason>" (permissions, a file used as a folder, ...).
void check_path_exists(const std::filesystem::path& path, const std::string& what);

// Reads a whole file. `what` names the kind of file in errors:
// "<what> not found: <path>", "cannot read <what> <path>: <reason>".
std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path, const std::string& what);

// Writes `bytes` to `<path>.tmp` and renames it over `path`, so a reader (or an interrupted run)
// never sees a half-written file. Throws Error("cannot write <path>: <reason>").
void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes);
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace lingbot::io
