#pragma once
// Whole-file reads and crash-safe whole-file writes for the io layer.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lingbot::io {

// Checks that `path` exists: throws FileNotFound("<what> not found: <path>"), or Error("<what>
// <path> is a symbolic link loop ..." / "cannot access <what> <path>: <reason>": permissions, a
// file used as a folder, ...).
void check_path_exists(const std::filesystem::path& path, const std::string& what);

// Reads a whole file. `what` names the kind of file in errors:
// "<what> not found: <path>", "cannot read <what> <path>: <reason>".
std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path, const std::string& what);

// `path`'s extension in lower case, with its dot (".png"; "" for none): names compared as a user
// types them, "x.PNG" as "x.png".
std::string lower_extension(const std::filesystem::path& path);

// The file a whole-file write to `path` replaces: `path`, or the file a symbolic link there names
// (the link is kept). Throws Error("cannot write <path>: it is a directory" / "...: it is not a
// regular file (a device, pipe or socket)"): a rename over it would replace it.
std::filesystem::path output_file_target(const std::filesystem::path& path);
// Before long work whose result goes to `path`: output_file_target's checks, and its folder must
// exist and be writable. Reads nothing and leaves an existing file as it is. Error: "cannot write
// <path>: <reason>".
void check_output_file(const std::filesystem::path& path);

// What a whole-file write does with a symbolic link at its path: replace the link (a run's own
// files in its output folder, as every exporter does) or write the file it names (a file the user
// named: convert's output, bench --csv / --plot).
enum class OnLink { Replace, WriteThrough };

// Writes `bytes` to a temporary beside the file and renames it over the file, so a reader (or an
// interrupted run) never sees a half-written file. Refuses a folder, device, pipe or socket at the
// path (a link to one with WriteThrough). Throws Error("cannot write <path>: <reason>").
void write_file_atomic(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                       OnLink on_link = OnLink::Replace);
void write_file_atomic(const std::filesystem::path& path, std::string_view text, OnLink on_link = OnLink::Replace);

// Per-frame file names: the frame index zero-padded to 6 digits (more from frame 1,000,000), then
// `suffix`: frame_file_name(7, ".png") = "000007.png". is_frame_file_name: 6 or more digits + suffix.
std::string frame_file_name(int64_t index, std::string_view suffix);
bool is_frame_file_name(std::string_view name, std::string_view suffix);

// For writers that stream into the temporary file themselves: "<path>.tmp", and the rename of that
// finished file over `path` (the temporary is removed when the rename fails; error "cannot write
// <path>: <reason>"). discard_temp_file removes it after a failed write (no error).
std::filesystem::path temp_path(const std::filesystem::path& path);
void commit_temp_file(const std::filesystem::path& path);
void discard_temp_file(const std::filesystem::path& path);
// An open stdio file, closed when it goes. A writer that must see the close's error (a delayed
// write error: NFS, quota) closes it itself: std::fclose(file.release()).
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using UniqueFile = std::unique_ptr<std::FILE, FileCloser>;
// Opens `path` with fopen `mode` ("wb", ...); Error "cannot write <path>: <reason>" when it cannot.
UniqueFile open_for_writing(const std::filesystem::path& path, const char* mode = "wb");
// A file that a writer appends to, created holding `initial` (a header: a valid file of no frames):
// written to its temporary and renamed into place, so a process killed at any moment leaves the old
// file or the whole header, never an empty or half-written one. A symbolic link at `path` is
// replaced (OnLink::Replace: a run's own file). The stream is left at the end, open for writing.
// Errors as write_file_atomic's.
UniqueFile create_with_content(const std::filesystem::path& path, std::string_view initial);

// After a failed append to `f` (a full disk fails a write part way), or to take back appends that
// succeeded: drops what stdio still buffers and cuts the file back to its first `valid_bytes`, then
// positions the stream there. Best effort (a failed append's caller rethrows the original error,
// which is what gets reported); returns false when the file could not be cut.
bool roll_back_failed_append(std::FILE* f, long valid_bytes);
// The same cut to take back appends that succeeded (an exporter's rewind), with an error when it
// fails: "cannot cut <path> back to <n> bytes: <reason>".
void cut_file_back(std::FILE* f, const std::filesystem::path& path, long bytes);
// Removes `path` and its temporary `<path>.tmp` when they exist (a frame's file taken back, an
// earlier run's output). A folder of that name is not an output and stays, even an empty one
// (check_output_file_target refuses it before a run). Error: "cannot remove <path>: <reason>".
void remove_output_file(const std::filesystem::path& path);
// For an exporter's prepare(), before anything is removed or written: throws unless `path` is
// absent or not a folder: "cannot write <path>: a folder of that name exists (move or remove it)".
void check_output_file_target(const std::filesystem::path& path);
// An output folder that can never be made, found before anything is written (create_directories
// would fail only after other outputs exist): `path` exists and is not a folder, or the nearest of
// its parents that exists is not one, or a symbolic link loop. Errors name it as "<what> <path>":
// "... exists and is not a folder", "<what> <path>: <parent> is not a folder", "... is a symbolic
// link loop". A folder that cannot be created or written is found when it is created.
void check_output_folder_path(const std::filesystem::path& path, std::string_view what);

}  // namespace lingbot::io
