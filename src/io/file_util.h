#pragma once
// Whole-file reads and crash-safe whole-file writes for the io layer.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lingbot::io {

// Reads a whole file. `what` names the kind of file in errors:
// "<what> not found: <path>", "cannot read <what> <path>: <reason>".
std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path, const std::string& what);

// Writes `bytes` to `<path>.tmp` and renames it over `path`, so a reader (or an interrupted run)
// never sees a half-written file. Throws Error("cannot write <path>: <reason>").
void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes);
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

// For writers that stream into the temporary file themselves: "<path>.tmp", and the rename of that
// finished file over `path` (the temporary is removed when the rename fails; error "cannot write
// <path>: <reason>"). discard_temp_file removes it after a failed write (no error).
std::filesystem::path temp_path(const std::filesystem::path& path);
void commit_temp_file(const std::filesystem::path& path);
void discard_temp_file(const std::filesystem::path& path);

}  // namespace lingbot::io
