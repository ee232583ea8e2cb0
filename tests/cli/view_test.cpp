// `lingbot-map view` and `run --serve`: the server answers only for files inside the run's folder
// (raw and percent-encoded "..", symlinks out -> 404), binds loopback unless --host says otherwise,
// refuses requests addressed to a non-loopback Host while bound to loopback, and the viewer files
// match the run's other outputs. Raw sockets, so no client normalises the paths for us.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "cli/run_test_util.h"

namespace {

using namespace run_test;

// A CLI process with stdout on a pipe; SIGINT and reaped on destruction.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& args) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      std::string cli = LINGBOT_CLI_PATH;
      argv.push_back(cli.data());
      std::vector<std::string> copy = args;
      for (std::string& s : copy) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(cli.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_fd_ = fds[0];
  }
  ~ServerProcess() {
    if (pid_ > 0 && exit_code_ < 0) stop();
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  // Reads stdout until it prints "viewer: http://HOST:PORT/"; returns the port (0 if it exited first).
  int wait_for_port() {
    char buf[4096];
    for (;;) {
      const size_t at = output_.find("viewer: http://");
      const size_t slash = at == std::string::npos ? at : output_.find("/ ", at + 15);
      if (slash != std::string::npos) {
        const size_t colon = output_.rfind(':', slash);
        return std::stoi(output_.substr(colon + 1, slash - colon - 1));
      }
      const ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n <= 0) return 0;
      output_.append(buf, static_cast<size_t>(n));
    }
  }
  // `sig` (once), then the exit code; -1 when the process was still there a minute later (then killed).
  int stop(int sig = SIGINT) {
    ::kill(pid_, sig);
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 600 && (done = ::waitpid(pid_, &status, WNOHANG)) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (done == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      status = -1;
    }
    exit_code_ = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char buf[4096];
    for (ssize_t n; (n = ::read(out_fd_, buf, sizeof buf)) > 0;) output_.append(buf, static_cast<size_t>(n));
    return exit_code_;
  }
  const std::string& output() const { return output_; }
  // SIGKILL (no handler runs), then reaped.
  void kill9() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exit_code_ = 128 + SIGKILL;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int exit_code_ = -1;
  std::string output_;
};

struct HttpReply {
  int status = 0;  // 0: could not connect
  std::string head;  // status line and headers
  std::string body;
};

// One raw HTTP/1.1 request of `target` exactly as given, with a Host header and `extra` header lines
// (each ending in \r\n); `body` is sent after the headers.
HttpReply http_request(const std::string& ip, int port, const std::string& method, const std::string& target,
                       const std::string& host_header = "", const std::string& extra = "", const std::string& body = "") {
  HttpReply reply;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return reply;
  }
  const std::string host = host_header.empty() ? ip + ":" + std::to_string(port) : host_header;
  const std::string req =
      method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" + extra + "\r\n" + body;
  EXPECT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string raw;
  char buf[65536];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (raw.rfind("HTTP/1.1 ", 0) == 0) reply.status = std::stoi(raw.substr(9, 3));
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end != std::string::npos) {
    reply.head = raw.substr(0, head_end);
    reply.body = raw.substr(head_end + 4);
  }
  return reply;
}

HttpReply http_get(const std::string& ip, int port, const std::string& target, const std::string& host_header = "") {
  return http_request(ip, port, "GET", target, host_header);
}

// An IPv4 address of this machine that is not loopback, if it has one.
std::optional<std::string> non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
      continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
  }
  ::freeifaddrs(list);
  return found;
}

// One demo run shared by the tests of this file.
const fs::path& demo_out() {
  static const fs::path out = [] {
    const fs::path d = fresh_dir("view_demo");
    const Result r = run_cli("run --demo --out " + d.string());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return d;
  }();
  return out;
}

std::string frame_name(size_t i) {
  char name[32];
  std::snprintf(name, sizeof name, "%06zu.bin", i);
  return name;
}

uint32_t u32_at(const std::string& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}


TEST(View, ViewerFilesMatchPosesAndPly) {
  const fs::path out = demo_out();
  const nlohmann::json poses = read_json(out / "poses.json");
  const int64_t ply_points = parse_ply_header(slurp(out / "points.ply")).vertices;
  int64_t points = 0;
  size_t frames = 0;
  for (; fs::exists(out / "viewer" / frame_name(frames)); ++frames) {
    const std::string name = frame_name(frames);
    const std::string b = slurp(out / "viewer" / name);
    ASSERT_GE(b.size(), 128u);
    EXPECT_EQ(b.substr(0, 4), "LBVF");
    const uint32_t n = u32_at(b, 104), pw = u32_at(b, 112), ph = u32_at(b, 116);
    const auto pad4 = [](size_t v) { return (v + 3) / 4 * 4; };
    EXPECT_EQ(b.size(), 128 + 16 * size_t{n} + pad4(3 * size_t{n}) + pad4(3 * size_t{pw} * ph)) << name;
    // c2w in the file equals poses.json's c2w (float precision).
    const auto& c2w = poses["frames"][frames]["c2w"];
    for (int i = 0; i < 12; ++i) {
      float v;
      std::memcpy(&v, b.data() + 40 + 4 * i, 4);
      EXPECT_NEAR(v, c2w[i / 4][i % 4].get<double>(), 1e-5) << name << " c2w[" << i << "]";
    }
    points += n;
  }
  EXPECT_EQ(frames, poses["frames"].size());
  EXPECT_EQ(points, ply_points);
}

TEST(View, ServesOnlyFilesInsideTheFolder) {
  const fs::path out = demo_out();
  // A secret next to the folder, and symlinks from inside pointing out of it.
  const fs::path secret = out.parent_path() / "view_secret.txt";
  { std::ofstream(secret) << "SECRET-OUTSIDE\n"; }
  fs::remove(out / "link_out.txt");
  fs::remove(out / "link_dir");
  fs::remove(out / "link_in.json");
  fs::create_symlink(secret, out / "link_out.txt");
  fs::create_directory_symlink(out.parent_path(), out / "link_dir");
  fs::create_symlink(out / "poses.json", out / "link_in.json");

  ServerProcess server({"view", out.string(), "--port", "0"});
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.output();
  const std::string ip = "127.0.0.1";

  // Positive controls: the page, the status, a run file, a percent-encoded name, a symlink inside.
  EXPECT_EQ(http_get(ip, port, "/").status, 200);
  const HttpReply status = http_get(ip, port, "/api/status");
  ASSERT_EQ(status.status, 200);
  EXPECT_EQ(nlohmann::json::parse(status.body)["frames"], 12);
  EXPECT_EQ(nlohmann::json::parse(status.body)["status"], "completed");
  EXPECT_FALSE(nlohmann::json::parse(status.body)["run"].get<std::string>().empty());  // viewer/000000.bin's identity
  const HttpReply poses = http_get(ip, port, "/run/poses.json");
  EXPECT_EQ(poses.status, 200);
  EXPECT_EQ(poses.body, slurp(out / "poses.json"));
  EXPECT_EQ(http_get(ip, port, "/run/pose%73.json").body, slurp(out / "poses.json"));
  EXPECT_EQ(http_get(ip, port, "/run/link_in.json").status, 200);
  EXPECT_EQ(http_get(ip, port, "/run/viewer/000000.bin").body, slurp(out / "viewer" / "000000.bin"));

  const std::string rel_secret = "../" + secret.filename().string();
  const std::vector<std::string> targets = {"/run/" + rel_secret, "/run/%2e%2e/" + secret.filename().string(), "/run/%2E%2E/" + secret.filename().string(),
        "/run/..%2f" + secret.filename().string(), "/run/%2e%2e%2f" + secret.filename().string(),
        "/run/.%2e/" + secret.filename().string(), "/run/viewer/../../" + secret.filename().string(),
        "/run/..\\" + secret.filename().string(), "/run/%2e%2e%5c" + secret.filename().string(),
        "/../" + secret.filename().string(), "/run/%252e%252e/" + secret.filename().string(),
        "/run/" + secret.string(), "/run/%2f" + secret.string().substr(1), "/run//etc/passwd",
        std::string("/run/../../../../../../etc/passwd"), std::string("/run/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd"),
        std::string("/run/link_out.txt"), "/run/link_dir/" + secret.filename().string(),
        "/run/poses.json%00.png", std::string("/run/"), std::string("/run/viewer"), std::string("/run/viewer/"),
        std::string("/run/no-such-file"), std::string("/etc/passwd")};
  for (const std::string& target : targets) {
    const HttpReply r = http_get(ip, port, target);
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_EQ(r.body.find("SECRET-OUTSIDE"), std::string::npos) << target;
    EXPECT_EQ(r.body.find("root:"), std::string::npos) << target;
  }
  // DNS rebinding: while bound to loopback, a request addressed to another host name is refused.
  EXPECT_EQ(http_get(ip, port, "/run/poses.json", "attacker.example:" + std::to_string(port)).status, 403);
  EXPECT_EQ(http_get(ip, port, "/run/poses.json", "localhost:" + std::to_string(port)).status, 200);
  EXPECT_EQ(server.stop(), 0);
  EXPECT_TRUE(contains(server.output(), "viewer: stopped")) << server.output();
  fs::remove(out / "link_out.txt");
  fs::remove(out / "link_dir");
  fs::remove(out / "link_in.json");
  fs::remove(secret);
}

// The server only reads: other methods get 405 at once, whatever their body (declared and never
// sent, chunked, with "Expect: 100-continue", or without a length): only its handlers that run
// before the body is read answer 405 (with Allow); the HTTP library answers a body it read or
// waited for with 413 (a declared length over the limit, skipped first) or 400 (one that never
// ended, at its 5 s read timeout), so the status says it did not wait, on a machine of any speed.
// One byte range is served and several are refused, Host names compare case-insensitively, /api/status says whether
// the run has depth previews, and a folder nobody writes that has no summary.json has "ended".
TEST(View, ReadOnlyRequestsRangesAndStatus) {
  const fs::path out = demo_out();
  ServerProcess server({"view", out.string(), "--port", "0"});
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.output();
  const std::string ip = "127.0.0.1";
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    const HttpReply r = http_request(ip, port, method, "/api/status", "", "Content-Length: 3\r\n", "abc");
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_TRUE(contains(r.head, "Allow: GET, HEAD")) << r.head;
  }
  for (const std::string& extra : {std::string("Content-Length: 300000000\r\n"), std::string("Transfer-Encoding: chunked\r\n"),
                                   std::string("Content-Length: 300000000\r\nExpect: 100-continue\r\n"), std::string()}) {
    const HttpReply r = http_request(ip, port, "POST", "/run/poses.json", "", extra, extra.empty() ? "" : "5\r\nhello");
    EXPECT_EQ(r.status, 405) << extra << r.head;
    EXPECT_TRUE(contains(r.head, "Allow: GET, HEAD")) << r.head;
    EXPECT_FALSE(contains(r.head, "100 Continue")) << r.head;
  }
  // A GET's declared body is not read either: the answer comes without it.
  EXPECT_EQ(http_request(ip, port, "GET", "/api/status", "", "Content-Length: 300000000\r\n").status, 200);
  const std::string ply = slurp(out / "points.ply");
  const HttpReply part = http_request(ip, port, "GET", "/run/points.ply", "", "Range: bytes=3-12\r\n");
  EXPECT_EQ(part.status, 206);
  EXPECT_EQ(part.body, ply.substr(3, 10));
  EXPECT_EQ(http_request(ip, port, "GET", "/run/points.ply", "", "Range: bytes=0-0,0-,0-\r\n").status, 416);
  const std::string size = std::to_string(ply.size());
  EXPECT_EQ(http_request(ip, port, "GET", "/run/points.ply", "", "Range: bytes=-5\r\n").body, ply.substr(ply.size() - 5));
  EXPECT_EQ(http_request(ip, port, "GET", "/run/points.ply", "", "Range: bytes=10-\r\n").body, ply.substr(10));
  // An end past the file means "to the end" (it gave a 206 with a length past the file's end); a
  // start past it cannot be served: 416 with the size.
  for (const std::string& range : {"0-" + std::to_string(ply.size() + 100), "-" + std::to_string(ply.size() + 1)}) {
    const HttpReply r = http_request(ip, port, "GET", "/run/points.ply", "", "Range: bytes=" + range + "\r\n");
    EXPECT_EQ(r.status, 206) << range;
    EXPECT_EQ(r.body, ply) << range;
    EXPECT_TRUE(contains(r.head, "Content-Length: " + size)) << range << "\n" << r.head;
  }
  for (const std::string& range : {size + "-", size + "-" + size, std::string("-0")}) {
    const HttpReply r = http_request(ip, port, "GET", "/run/points.ply", "", "Range: bytes=" + range + "\r\n");
    EXPECT_EQ(r.status, 416) << range;
    if (range != "-0") {
      EXPECT_TRUE(contains(r.head, "Content-Range: bytes */" + size)) << range << "\n" << r.head;
    }
  }
  EXPECT_EQ(http_get(ip, port, "/run/points.ply").body, ply);  // streamed in chunks, whole
  const HttpReply head = http_request(ip, port, "HEAD", "/run/poses.json");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_TRUE(contains(head.head, "Content-Length: " + std::to_string(fs::file_size(out / "poses.json")))) << head.head;
  EXPECT_EQ(http_get(ip, port, "/api/status", "LOCALHOST:" + std::to_string(port)).status, 200);
  const nlohmann::json first = nlohmann::json::parse(http_get(ip, port, "/api/status").body);
  EXPECT_EQ(first["depth_preview"], true);
  EXPECT_EQ(server.stop(), 0);

  // A copy of the viewer files alone: no run writes it, no summary will come, no depth previews.
  const fs::path copy = fresh_dir("view_copy");
  fs::copy(out / "viewer", copy / "viewer");
  ServerProcess second({"view", copy.string(), "--port", "0"});
  const int port2 = second.wait_for_port();
  ASSERT_GT(port2, 0) << second.output();
  const nlohmann::json st = nlohmann::json::parse(http_get(ip, port2, "/api/status").body);
  EXPECT_EQ(st["status"], "ended");
  EXPECT_EQ(st["depth_preview"], false);
  EXPECT_EQ(st["frames"], read_json(out / "poses.json")["frames"].size());
  // Other files, another run for the page (it reloads its frames).
  EXPECT_NE(st["run"].get<std::string>(), first["run"].get<std::string>());
  EXPECT_FALSE(st["run"].get<std::string>().empty());
  EXPECT_TRUE(contains(st["error"].get<std::string>(), "no run is writing this folder and it has no summary.json"));
  EXPECT_EQ(second.stop(), 0);
}

// The page's own files come whole and uncompressed to a browser (which accepts brotli): the library
// compressed them per request at brotli's highest quality, 2.1 s for three.js on every page load.
TEST(View, PageFilesComeUncompressedToABrowser) {
  ServerProcess server({"view", demo_out().string(), "--port", "0"});
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.output();
  const fs::path three = fs::path(LINGBOT_TESTDATA_DIR) / "../web/node_modules/three/build/three.core.js";
  for (const auto& [target, file] : {std::pair<std::string, fs::path>{"/three/three.core.js", three},
                                     {"/viewer.js", fs::path(LINGBOT_TESTDATA_DIR) / "../web/viewer/viewer.js"}}) {
    const HttpReply r = http_request("127.0.0.1", port, "GET", target, "", "Accept-Encoding: gzip, deflate, br\r\n");
    EXPECT_EQ(r.status, 200) << target;
    EXPECT_FALSE(contains(r.head, "Content-Encoding")) << target << "\n" << r.head;
    EXPECT_TRUE(r.body == slurp(file)) << target << ": " << r.body.size() << " bytes";
  }
  EXPECT_EQ(server.stop(), 0);
}

// Bytes the server's socket of one loopback connection (127.0.0.1:server_port from client_port)
// holds unread, from /proc/net/tcp; nullopt while no such socket is listed.
std::optional<unsigned long> unread_by_server(int server_port, int client_port) {
  std::ifstream tcp("/proc/net/tcp");
  EXPECT_TRUE(tcp.is_open()) << "/proc/net/tcp";
  std::string line;
  std::getline(tcp, line);  // the column names
  while (std::getline(tcp, line)) {
    unsigned local_addr = 0, local_port = 0, remote_addr = 0, remote_port = 0, state = 0;
    unsigned long tx = 0, rx = 0;
    if (std::sscanf(line.c_str(), " %*u: %8X:%4X %8X:%4X %2X %8lX:%8lX", &local_addr, &local_port, &remote_addr,
                    &remote_port, &state, &tx, &rx) == 7 &&
        static_cast<int>(local_port) == server_port && static_cast<int>(remote_port) == client_port)
      return rx;
  }
  return std::nullopt;
}

// A client that trickles a request in (a header line every 200 ms, never ending it) does not keep
// the viewer from exiting on Ctrl-C: it waits 3 s for the server's workers, then exits 0 (it waited
// for the client: 39 s with a client that gave up after 40 lines). Ctrl-C comes once the server has
// read what was sent (its socket holds nothing unread), so the request is being read then; the
// viewer must exit before the client's 300 lines (60 s) run out, whatever the machine's speed.
TEST(View, CtrlCEndsTheViewerWhileAClientTricklesARequest) {
  ServerProcess server({"view", demo_out().string(), "--port", "0"});
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.output();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  sockaddr_in mine{};
  socklen_t mine_len = sizeof mine;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_len), 0);
  const int client_port = ntohs(mine.sin_port);
  constexpr int kLines = 300;
  std::atomic<bool> done{false}, started{false};
  std::atomic<int> lines_sent{0};
  std::thread trickle([&] {
    const std::string start = "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    started = true;
    for (int i = 0; i < kLines && !done; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const std::string line = "X-Slow: " + std::to_string(i) + "\r\n";
      if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) < 0) break;
      ++lines_sent;
    }
  });
  // Until the server read the request's start; the bound only keeps a broken server from hanging the test.
  bool reading = false;
  for (int i = 0; i < 3000 && !reading; ++i) {
    if (started) {
      const std::optional<unsigned long> unread = unread_by_server(port, client_port);
      reading = unread && *unread == 0;
    }
    if (!reading) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(reading) << "the server never read the request's start";
  EXPECT_EQ(server.stop(), 0);
  const int sent_before_exit = lines_sent;
  done = true;
  trickle.join();
  ::close(fd);
  EXPECT_LT(sent_before_exit, kLines) << "the viewer waited for the trickling client";
  EXPECT_TRUE(contains(server.output(), "viewer: stopped")) << server.output();
}

TEST(View, LoopbackUnlessHostSaysOtherwise) {
  const std::optional<std::string> lan = non_loopback_ipv4();
  if (!lan) GTEST_SKIP() << "this machine has no non-loopback IPv4 address to test with";
  {
    ServerProcess server({"view", demo_out().string(), "--port", "0"});
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0) << server.output();
    EXPECT_TRUE(contains(server.output(), "http://127.0.0.1:")) << server.output();
    EXPECT_EQ(http_get("127.0.0.1", port, "/api/status").status, 200);
    EXPECT_EQ(http_get(*lan, port, "/api/status").status, 0) << "reachable on " << *lan << " without --host";
    EXPECT_EQ(server.stop(), 0);
  }
  {
    ServerProcess server({"view", demo_out().string(), "--port", "0", "--host", "0.0.0.0"});
    const int port = server.wait_for_port();
    ASSERT_GT(port, 0) << server.output();
    EXPECT_TRUE(contains(server.output(), "warning: listening on 0.0.0.0, not a loopback address")) << server.output();
    // The printed URL is one a browser opens (0.0.0.0 is where it listens, not an address to open).
    EXPECT_TRUE(contains(server.output(), "viewer: http://127.0.0.1:" + std::to_string(port) + "/")) << server.output();
    EXPECT_EQ(http_get(*lan, port, "/api/status").status, 200) << "not reachable on " << *lan << " with --host 0.0.0.0";
    EXPECT_EQ(server.stop(), 0);
  }
}

TEST(View, Errors) {
  const fs::path empty = fresh_dir("view_empty");
  Result r = run_cli("view " + (empty / "missing").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: output folder not found: " + (empty / "missing").string() + "\n");
  fs::create_symlink(empty / "loop_b", empty / "loop_a");
  fs::create_symlink(empty / "loop_a", empty / "loop_b");
  r = run_cli("view " + (empty / "loop_a").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: output folder " + (empty / "loop_a").string() +
                       " is a symbolic link loop (Too many levels of symbolic links)\n");
  write_file(empty / "notes.txt", "x");
  r = run_cli("view " + (empty / "notes.txt").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: " + (empty / "notes.txt").string() + " is not a folder (give run's --out folder)\n");
  fs::remove(empty / "notes.txt");
  r = run_cli("view " + empty.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: " + empty.string() +
                       " has no viewer/ frames: it is not the output of 'lingbot-map run' (or of a run without the "
                       "viewer export)\n");
  r = run_cli("view " + demo_out().string() + " --host example.com --port 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: --host must be an IP address or localhost, got 'example.com'\n");
  // A port out of range is a usage error, as run's --serve (it exited 1 where --serve exits 2).
  r = run_cli("view " + demo_out().string() + " --port 99999");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "error: --port: Value 99999 not in range 0 to 65535\nRun 'lingbot-map view --help' for usage.\n");
  // run --serve binds before writing anything: a busy port leaves no output folder.
  ServerProcess busy({"view", demo_out().string(), "--port", "0"});
  const int port = busy.wait_for_port();
  ASSERT_GT(port, 0);
  const fs::path out = empty / "serve_out";
  r = run_cli("run --demo --serve " + std::to_string(port) + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "error: cannot listen on 127.0.0.1:" + std::to_string(port))) << r.err;
  EXPECT_TRUE(contains(r.err, "(in use? try another --serve PORT, or 0 for any free one)")) << r.err;  // run's option
  EXPECT_FALSE(fs::exists(out));
  r = run_cli("run --demo --serve 0 --export poses --out " + out.string());
  EXPECT_EQ(r.exit_code, 2);  // a usage error
  EXPECT_EQ(r.err, "error: --serve shows the viewer export: add viewer to --export\nRun 'lingbot-map run --help' for usage.\n");
  r = run_cli("run --images x --model y --demo-pace 1 --out " + out.string());
  EXPECT_EQ(r.exit_code, 2);  // a usage error
  EXPECT_EQ(r.err, "error: --demo-pace paces the generated frames of --demo only\nRun 'lingbot-map run --help' for usage.\n");
  r = run_cli("run --demo --demo-pace nan --out " + out.string());
  EXPECT_EQ(r.exit_code, 2);  // as --fps nan
  EXPECT_EQ(r.err, "error: --demo-pace: 'nan' is not a finite number\nRun 'lingbot-map run --help' for usage.\n");
  EXPECT_EQ(busy.stop(), 0);
}

TEST(View, ServeFollowsTheRunAndReportsItsEnd) {
  const fs::path out = fresh_dir("view_serve");
  ServerProcess run({"run", "--demo", "--demo-frames", "12", "--serve", "0", "--progress", "lines", "--out", out.string()});
  const int port = run.wait_for_port();
  ASSERT_GT(port, 0) << run.output();
  // Poll until the run reports its end; the frame count never decreases and each counted frame's
  // file is there.
  int64_t last = 0;
  std::string state = "running", run_id;
  for (int i = 0; i < 1200 && state == "running"; ++i) {
    const HttpReply r = http_get("127.0.0.1", port, "/api/status");
    ASSERT_EQ(r.status, 200);
    const nlohmann::json s = nlohmann::json::parse(r.body);
    EXPECT_TRUE(s["live"].get<bool>());
    if (i == 0) run_id = s["run"].get<std::string>();
    EXPECT_FALSE(run_id.empty());
    EXPECT_EQ(s["run"].get<std::string>(), run_id);  // one run, one identity
    EXPECT_GE(s["frames"].get<int64_t>(), last);
    last = s["frames"].get<int64_t>();
    if (last > 0) {
      EXPECT_EQ(http_get("127.0.0.1", port, "/run/viewer/" + frame_name(static_cast<size_t>(last - 1))).status, 200);
    }
    state = s["status"].get<std::string>();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(state, "completed");
  EXPECT_EQ(last, 12);
  EXPECT_EQ(run.stop(), 0);
  // The run's report comes when it ends, before the wait for Ctrl-C (it came only after it).
  const std::string& o = run.output();
  const size_t report = o.find("completed: 12 frames"), serving = o.find("viewer: run completed; still serving");
  ASSERT_NE(serving, std::string::npos) << o;
  EXPECT_LT(report, serving) << o;
  EXPECT_LT(o.find("wrote " + (out / "summary.json").string()), serving) << o;
}

// SIGTERM during a run with --serve ends the run and the process (exit 143): a service manager
// sends it once; only after Ctrl-C does the page stay up (it kept serving, waiting for a second signal).
TEST(View, SigtermEndsARunWithServeAndItsServer) {
  const fs::path out = fresh_dir("view_serve_term");
  ServerProcess run({"run", "--demo", "--demo-frames", "400", "--demo-pace", "0.05", "--serve", "0", "--progress",
                     "lines", "--out", out.string()});
  ASSERT_GT(run.wait_for_port(), 0) << run.output();
  for (int i = 0; i < 1200 && !fs::exists(out / "viewer" / frame_name(2)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(out / "viewer" / frame_name(2)));
  EXPECT_EQ(run.stop(SIGTERM), 143) << run.output();
  EXPECT_EQ(run.output().find("still serving"), std::string::npos) << run.output();
  EXPECT_EQ(read_json(out / "summary.json").at("signal"), "SIGTERM");
}

// The output folder's run lock (io/output_lock.h): a second run into a folder a run is writing to is
// refused before it writes anything; `view` tells a run going on ("running") from one whose process
// is gone without a summary.json (kill -9: "ended", with the reason), which it called running forever.
TEST(View, RunLockRefusesASecondRunAndViewSeesAKilledRun) {
  const fs::path out = fresh_dir("view_lock") / "out";
  ServerProcess first({"run", "--demo", "--demo-frames", "400", "--demo-pace", "0.05", "--progress", "lines",
                       "--out", out.string()});
  for (int i = 0; i < 1200 && !fs::exists(out / "viewer" / frame_name(2)); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(out / "viewer" / frame_name(2)));
  const Result second = run_cli("run --demo --demo-frames 2 --out " + out.string());
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_EQ(second.err, "error: another lingbot-map run is writing to " + out.string() + " (it holds " +
                            (out / ".lingbot-run.lock").string() +
                            "); wait for it to end or choose another output folder\n");
  {
    ServerProcess view({"view", out.string(), "--port", "0"});
    const int port = view.wait_for_port();
    ASSERT_GT(port, 0) << view.output();
    EXPECT_EQ(nlohmann::json::parse(http_get("127.0.0.1", port, "/api/status").body)["status"], "running");
    first.kill9();
    const nlohmann::json s = nlohmann::json::parse(http_get("127.0.0.1", port, "/api/status").body);
    EXPECT_EQ(s["status"], "ended");
    EXPECT_EQ(s["error"], "the run ended without writing summary.json (killed, or a second Ctrl-C); its files hold "
                          "the frames written before");
    EXPECT_GE(s["frames"].get<int64_t>(), 3);
    EXPECT_EQ(view.stop(), 0);
  }
  // The folder is free again; a run that ends normally leaves no lock file.
  const Result third = run_cli("run --demo --demo-frames 2 --scale-frames 2 --out " + out.string());
  EXPECT_EQ(third.exit_code, 0) << third.err;
  EXPECT_FALSE(fs::exists(out / ".lingbot-run.lock"));
}

}  // namespace
