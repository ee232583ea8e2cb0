#include "viewer_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <csignal>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/export_viewer.h"
#include "io/output_lock.h"
#include "io/writers.h"
#include "viewer_assets.h"

namespace lingbot::cli {

namespace fs = std::filesystem;
using nlohmann::json;

LiveRunStatus::LiveRunStatus() {
  std::random_device rd;
  char id[32];
  std::snprintf(id, sizeof id, "%08x%08x", rd(), rd());
  run_ = id;
}

void LiveRunStatus::set_frames(int64_t frames) {
  std::lock_guard<std::mutex> lock(mutex_);
  frames_ = frames;
}

void LiveRunStatus::finish(const std::string& status, const std::string& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  status_ = status;
  error_ = error;
}

json LiveRunStatus::json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {{"frames", frames_}, {"status", status_}, {"error", error_}, {"live", true}, {"run", run_}};
}

json FolderRunStatus::operator()() {
  std::lock_guard<std::mutex> lock(mutex_);
  const fs::path& out_dir = out_dir_;
  // A run into this folder removes the earlier run's files before writing its own, and writes each
  // frame file once (temporary name + rename): a new first frame file means another run.
  std::string run;
  struct stat st{};
  if (::stat((out_dir / "viewer" / io::viewer_frame_file_name(0)).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    // ctime too: a file system with coarse times may give two quick runs the same inode and mtime.
    run = std::to_string(st.st_ino) + "-" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) +
          "-" + std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec) + "-" +
          std::to_string(st.st_size);
  }
  // Frames counted on from the last request: a run's frame files only grow, so a request costs the new
  // frames (it cost one stat per frame: 1 s at 300,000 frames, with the page asking every 0.5 s). Another
  // run, or a frame file gone, counts from 0.
  std::error_code ec;
  if (run != run_ || (frames_ > 0 && !fs::is_regular_file(out_dir / "viewer" / io::viewer_frame_file_name(frames_ - 1), ec)))
    frames_ = 0;
  run_ = run;
  while (fs::is_regular_file(out_dir / "viewer" / io::viewer_frame_file_name(frames_), ec)) ++frames_;
  const int64_t frames = frames_;
  if (frames == 0) run.clear();
  std::string status = "running", error;
  std::ifstream in(out_dir / "summary.json");
  if (in) {
    const json summary = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (summary.is_object() && summary.contains("status") && summary["status"].is_string()) {
      status = summary["status"].get<std::string>();
      if (summary.contains("error") && summary["error"].is_string()) error = summary["error"].get<std::string>();
    }
  } else if (const io::OutputWriter writer = io::output_writer(out_dir); writer == io::OutputWriter::Gone) {
    // No summary and nobody holds the run's lock: its process is gone (killed, or a second Ctrl-C).
    status = "ended";
    error = "the run ended without writing summary.json (killed, or a second Ctrl-C); its files hold the frames "
            "written before";
  } else if (writer == io::OutputWriter::Unknown && !fs::exists(out_dir / "summary.json", ec)) {
    // No lock file either (looked at after the summary: a run that just ended wrote its summary
    // before removing the lock): no run writes here, and none will write a summary.
    status = "ended";
    error = "no run is writing this folder and it has no summary.json (copied while its run went on, or the "
            "summary was removed); its files hold the frames written";
  }
  return {{"frames", frames}, {"status", status}, {"error", error}, {"live", false}, {"run", run}};
}

bool is_loopback_host(const std::string& host) {
  std::string name = host;  // host names are case-insensitive, and "localhost." is the same name
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name == "localhost" || name == "localhost.") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

namespace {

bool is_ip_or_localhost(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  return host == "localhost" || inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

// The host name of a Host header value: "name:port", "[v6]:port" or without a port.
std::string host_header_name(const std::string& value) {
  if (!value.empty() && value.front() == '[') {
    const size_t close = value.find(']');
    return close == std::string::npos ? value : value.substr(1, close - 1);
  }
  const size_t colon = value.rfind(':');
  return colon == std::string::npos ? value : value.substr(0, colon);
}

const char* content_type(const fs::path& p) {
  const std::string ext = p.extension().string();
  if (ext == ".json") return "application/json";
  if (ext == ".png") return "image/png";
  if (ext == ".tum" || ext == ".txt") return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

void not_found(httplib::Response& res) {
  res.status = 404;
  res.set_content("not found\n", "text/plain");
}

// Whether the request's byte ranges can be served from a file of `size` bytes: none, or one that
// starts inside the file. Its end past the file is clamped to it (RFC 9110: "to the end") in the
// request itself, the library's own object, which computes the reply's length from the range as
// given. Several ranges are refused: a few bytes of request would otherwise make the server send
// the file once per range.
bool ranges_servable(httplib::Request& req, int64_t size) {
  if (req.ranges.empty()) return true;
  if (req.ranges.size() > 1 || size == 0) return false;
  auto& [first, last] = req.ranges.front();
  if (first < 0) return last > 0;  // bytes=-N: the last N bytes (the library clamps N to the size)
  if (first >= size || (last >= 0 && last < first)) return false;
  if (last >= size) last = static_cast<ssize_t>(size - 1);
  return true;  // bytes=A- or bytes=A-B
}

// A run file, read in chunks as the client takes them (a long run's points.ply or predictions.npz
// is never held in memory); one byte range (206) at most.
void serve_file(httplib::Request& req, httplib::Response& res, const fs::path& file) {
  auto in = std::make_shared<std::ifstream>(file, std::ios::binary | std::ios::ate);  // the size of what was opened
  if (!*in) return not_found(res);
  const int64_t size = static_cast<int64_t>(in->tellg());
  if (size < 0) return not_found(res);
  if (!ranges_servable(req, size)) {
    res.status = 416;
    res.set_header("Content-Range", "bytes */" + std::to_string(size));
    return;
  }
  if (size == 0) return res.set_content("", content_type(file));  // the library's provider needs a byte
  res.set_content_provider(static_cast<size_t>(size), content_type(file),
                           [in](size_t offset, size_t length, httplib::DataSink& sink) {
                             std::vector<char> buf(std::min<size_t>(length, 256 * 1024));
                             in->clear();
                             in->seekg(static_cast<std::streamoff>(offset));
                             in->read(buf.data(), static_cast<std::streamsize>(buf.size()));
                             const std::streamsize got = in->gcount();
                             return got > 0 && sink.write(buf.data(), static_cast<size_t>(got));
                           });
}

// One of the page's files, from the CLI's memory. Through a content provider of known length, which
// the library never compresses: for a client that accepts brotli (every browser) it compressed a
// set_content body at brotli's highest quality on every request, 2 s for three.js per page load.
// Uncompressed, the page's ~2.3 MB take milliseconds on a loopback or local network.
void serve_asset(httplib::Response& res, const WebAsset& asset) {
  const std::string_view data = asset.data;  // static storage: outlives every response
  if (data.empty()) return res.set_content("", std::string(asset.mime));
  res.set_content_provider(data.size(), std::string(asset.mime),
                           [data](size_t offset, size_t length, httplib::DataSink& sink) {
                             return sink.write(data.data() + offset, std::min(length, data.size() - offset));
                           });
}

// A request path below /run/ (already percent-decoded by the server) -> a regular file inside
// `root`, or nothing. Lexically: no "..", ".", empty segment, backslash or NUL. Then the resolved
// path (every symlink followed) must still lie inside the resolved root.
std::optional<fs::path> resolve_in_root(const fs::path& root, const std::string& rel) {
  if (rel.empty() || rel.find('\0') != std::string::npos || rel.find('\\') != std::string::npos) return std::nullopt;
  std::stringstream ss(rel);
  std::string seg;
  while (std::getline(ss, seg, '/'))
    if (seg.empty() || seg == "." || seg == "..") return std::nullopt;
  if (rel.back() == '/') return std::nullopt;
  std::error_code ec;
  const fs::path root_real = fs::canonical(root, ec);
  if (ec) return std::nullopt;
  const fs::path real = fs::canonical(root_real / rel, ec);
  if (ec) return std::nullopt;
  const auto [r, p] = std::mismatch(root_real.begin(), root_real.end(), real.begin(), real.end());
  if (r != root_real.end() || p == real.end()) return std::nullopt;  // outside root, or root itself
  if (!fs::is_regular_file(real, ec)) return std::nullopt;
  return real;
}

}  // namespace

ViewerServer::ViewerServer(const fs::path& root, StatusFn status) : shared_(std::make_shared<Shared>()) {
  shared_->root = root;
  shared_->status = std::move(status);
}

ViewerServer::~ViewerServer() {
  shared_->closed = true;
  // A status() call in flight ends before the caller's objects go (it is quick; 3 s at most here).
  if (shared_->status_mutex.try_lock_for(std::chrono::seconds(3))) shared_->status_mutex.unlock();
  if (server_) server_->stop();
  if (!thread_.joinable()) return;
  // stop() ends the listening loop, but a worker reading a request a client trickles in (a header
  // line every few seconds) keeps the server thread in its pool's join for as long as the client
  // likes. The server goes with the command, so after 3 s it is left to the process's exit: the
  // thread detached and the server object kept (never freed) for the workers still using it.
  if (stopped_.wait_for(std::chrono::seconds(3)) == std::future_status::ready) {
    thread_.join();
    return;
  }
  thread_.detach();
  (void)server_.release();
}

std::string ViewerServer::url() const {
  // A wildcard address is where the server listens, not one a browser can open: this machine's
  // loopback reaches it.
  const std::string host = host_ == "0.0.0.0" ? "127.0.0.1" : host_ == "::" ? "::1" : host_;
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port_) + "/";
}

void ViewerServer::start(const std::string& host, int port, std::string_view port_option) {
  LINGBOT_CHECK(!server_, "internal: viewer server started twice");
  LINGBOT_CHECK(web_assets_missing().empty(), web_assets_missing());
  LINGBOT_CHECK(is_ip_or_localhost(host), "--host must be an IP address or localhost, got '", host, "'");
  LINGBOT_CHECK(port >= 0 && port <= 65535, "--port must be 0..65535, got ", port);
  host_ = host;
  server_ = std::make_unique<httplib::Server>();
  httplib::Server& svr = *server_;
  const bool loopback = is_loopback_host(host);

  // Read-only: GET and HEAD. Any other method is answered 405 before the library reads its body
  // (it would buffer a chunked one of any size, or wait for one without a length), also before it
  // sends "100 Continue"; the unread body then ends the connection. GET bodies are never read.
  svr.set_payload_max_length(4096);
  const auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "GET" || req.method == "HEAD") return false;
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_header("Connection", "close");
    res.set_content("method not allowed: this server only reads\n", "text/plain");
    return true;
  };
  svr.set_expect_100_continue_handler([not_allowed](const httplib::Request& req, httplib::Response& res) {
    return not_allowed(req, res) ? 405 : 100;
  });
  svr.set_pre_routing_handler([loopback, not_allowed](const httplib::Request& req, httplib::Response& res) {
    if (not_allowed(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (!loopback || is_loopback_host(host_header_name(req.get_header_value("Host"))))
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 403;
    res.set_content("forbidden: this server answers only requests addressed to a loopback host\n", "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  // The page polls every 0.5 s: idle keep-alive connections go after 2 s, and 32 workers leave room
  // for slow clients (the library's default is 8).
  svr.set_keep_alive_timeout(2);
  // Small replies (a frame file, the status) are written as headers, then body: with Nagle's
  // algorithm the body waited for the client's delayed ACK, 40 ms a request (600 frames: 24 s).
  svr.set_tcp_nodelay(true);
  svr.new_task_queue = [] { return new httplib::ThreadPool(32); };
  svr.Get(".*", [shared = shared_](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Content-Type-Options", "nosniff");
    const std::string& path = req.path;
    constexpr std::string_view kRun = "/run/";
    const auto stopping = [&res] {
      res.status = 503;
      res.set_content("the viewer is stopping\n", "text/plain");
    };
    if (path.starts_with(kRun)) {  // root is the server's own copy: no lock
      if (shared->closed) return stopping();
      const auto file = resolve_in_root(shared->root, path.substr(kRun.size()));
      if (!file) return not_found(res);
      return serve_file(const_cast<httplib::Request&>(req), res, *file);
    }
    if (path == "/api/status") {
      nlohmann::json status;
      {
        std::lock_guard<std::timed_mutex> lock(shared->status_mutex);  // the destructor waits for it
        if (shared->closed) return stopping();
        status = shared->status();
      }
      std::error_code ec;
      status["depth_preview"] = fs::is_directory(shared->root / "depth_preview", ec);  // the page asks for its PNGs
      res.set_content(io::json_text(status), "application/json");
      return;
    }
    for (const WebAsset& a : web_assets()) {
      if (path == a.url) return serve_asset(res, a);
    }
    not_found(res);
  });

  // httplib's default adds SO_REUSEPORT, which lets a second server bind a port already in use and
  // share its connections; keep only SO_REUSEADDR (rebinding right after a restart).
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (port == 0) {
    port_ = svr.bind_to_any_port(host);
    LINGBOT_CHECK(port_ > 0, "cannot listen on ", host, " (any port)");
  } else {
    LINGBOT_CHECK(svr.bind_to_port(host, port), "cannot listen on ", host, ":", port, " (in use? try another ",
                  port_option, ", or 0 for any free one)");
    port_ = port;
  }
  // The server thread (and the worker threads it starts) must not take Ctrl-C from the main thread.
  sigset_t block, previous;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &previous);
  std::promise<void> stopped;
  stopped_ = stopped.get_future();
  thread_ = std::thread([&svr, stopped = std::move(stopped)]() mutable {
    svr.listen_after_bind();  // returns once stop() was called and every worker has finished
    stopped.set_value();
  });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  // stop() does nothing before the server runs: wait for that (or for the thread's end), so a
  // destructor right after start() (the run failing up front) stops it.
  for (int i = 0; i < 1000 && !svr.is_running(); ++i) {
    if (stopped_.wait_for(std::chrono::milliseconds(5)) == std::future_status::ready) break;
  }
}

namespace {

// What the handler touches: a lock-free flag and sem_post, both async-signal-safe.
// Initialised in place (POSIX leaves a copied sem_t undefined), by StopSignals before any handler runs.
sem_t& stop_semaphore() {
  static struct Semaphore {
    sem_t sem;
    Semaphore() { sem_init(&sem, 0, 0); }
  } semaphore;
  return semaphore.sem;
}
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_view_stop_signal(int sig) {
  g_stop_signal = sig;
  sem_post(&stop_semaphore());
}

}  // namespace

StopSignals::StopSignals() : cleared_(clear_pending()), int_(SIGINT, on_view_stop_signal), term_(SIGTERM, on_view_stop_signal) {}

bool StopSignals::clear_pending() {
  sem_t& sem = stop_semaphore();
  while (sem_trywait(&sem) == 0) {
  }  // no stale post from an earlier StopSignals
  g_stop_signal = 0;
  return true;
}

int StopSignals::wait() {
  while (sem_wait(&stop_semaphore()) != 0 && errno == EINTR) {
  }
  return g_stop_signal;
}

int wait_for_stop_signal() { return StopSignals().wait(); }

}  // namespace lingbot::cli
