#pragma once
// The HTTP server behind `lingbot-map view` and `run --serve` (cpp-httplib, Debian
// libcpp-httplib-dev). It serves
//   /, /viewer.js, /three/...   the viewer page and three.js, embedded in the binary (viewer_assets.h)
//   /api/status                 {"frames": N, "status": "running"|"completed"|"interrupted"|"failed"|
//                                "ended", "error": "...", "live": bool, "depth_preview": bool,
//                                "run": "..."} (the page polls it; "run" changes when another run's
//                               files are served, so the page drops the frames it loaded)
//   /run/<path>                 regular files inside the run's output folder, nothing else: any
//                               ".." segment, a path that resolves (symlinks included) outside the
//                               folder, a folder or a missing file is 404; streamed in chunks, one
//                               byte range at most (several: 416)
// Only GET and HEAD (405 otherwise, with no body read); request bodies over 4 KiB are refused.
// When bound to a loopback address it also answers only requests whose Host header names a loopback
// host (403 otherwise), so a web page elsewhere cannot read the folder through DNS rebinding.
#include <signal.h>

#include <cstdint>
#include <filesystem>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "core/scoped_signal_action.h"

namespace httplib {
class Server;
}

namespace lingbot::cli {

inline constexpr int kDefaultViewerPort = 8080;
inline constexpr const char* kDefaultViewerHost = "127.0.0.1";

// Run state shared between a running `run` (writer) and the server thread (reader).
class LiveRunStatus {
 public:
  LiveRunStatus();  // makes the run's identity: random, so a restarted `run --serve` differs
  void set_frames(int64_t frames);
  void finish(const std::string& status, const std::string& error);
  nlohmann::json json() const;

 private:
  mutable std::mutex mutex_;
  int64_t frames_ = 0;
  std::string status_ = "running";
  std::string error_;
  std::string run_;
};

// Status of a folder from its files, for `view`: frames = viewer/000000.bin, 000001.bin, ... present
// without a gap; status from summary.json ("running" while it does not exist yet); run = the
// identity of viewer/000000.bin (inode, modification and change times, size: each run writes it anew), "" without it.
// The frame count goes on from the previous call's (the same run), so a call costs the frames added
// since; safe to call from the server's threads.
class FolderRunStatus {
 public:
  explicit FolderRunStatus(std::filesystem::path out_dir) : out_dir_(std::move(out_dir)) {}
  nlohmann::json operator()();

 private:
  std::mutex mutex_;
  std::filesystem::path out_dir_;
  int64_t frames_ = 0;  // frame files counted for run_
  std::string run_;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

class ViewerServer {
 public:
  using StatusFn = std::function<nlohmann::json()>;
  // `root`: the run's output folder (must exist). `status` is called on the server thread.
  ViewerServer(const std::filesystem::path& root, StatusFn status);
  ~ViewerServer();  // stops and joins the server thread (within 3 s: a client that holds a connection
                    // open longer is left to the process's exit)
  ViewerServer(const ViewerServer&) = delete;
  ViewerServer& operator=(const ViewerServer&) = delete;

  // Binds host:port (port 0: any free port) and serves on a background thread, which never takes
  // SIGINT/SIGTERM (they stay with the caller). `host` must be an IP address or "localhost".
  // Throws Error when the page is not in this build or the address cannot be bound (the message
  // names `port_option`, the caller's option for the port: view's "--port", run's "--serve PORT").
  void start(const std::string& host, int port, std::string_view port_option);
  int port() const { return port_; }
  std::string url() const;  // http://host:port/ (a wildcard host: this machine's loopback address)

 private:
  // What the request handlers read, shared with them. The destructor closes it first: a handler
  // still running on a worker the destructor did not wait for then answers 503 and never calls
  // `status` (whose captures the caller may destroy next).
  struct Shared {
    std::filesystem::path root;
    StatusFn status;
    std::timed_mutex status_mutex;  // held while status() runs
    std::atomic<bool> closed{false};
  };
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::future<void> stopped_;  // ready when the server thread is done
  std::string host_;
  int port_ = 0;
};

// SIGINT / SIGTERM caught from construction on by a process-wide handler, so a Ctrl-C that arrives
// before wait() (say, right after the URL is printed) is waited for, never the default action. A
// handler, not a blocked mask: threads that libraries start before us (OpenBLAS's pool, at load)
// do not block the signals, and the kernel may deliver a process signal to any of them.
// wait() blocks until one arrives and returns its number; the destructor restores the previous
// actions. One StopSignals at a time.
class StopSignals {
 public:
  StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int wait();

 private:
  static bool clear_pending();
  [[maybe_unused]] bool cleared_;  // first member: nothing stale is pending once the handlers are installed
  ScopedSignalAction int_, term_;
};

// Blocks until SIGINT or SIGTERM arrives (the signal is consumed) and returns its number.
int wait_for_stop_signal();

}  // namespace lingbot::cli
