// `lingbot-map view OUT_DIR`: serves a run's output folder and the viewer page over HTTP until
// Ctrl-C. Works on a finished run and on one still being written (the page follows new frames).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "io/file_util.h"
#include "viewer_server.h"

namespace lingbot::cli {

namespace {

namespace fs = std::filesystem;

struct ViewArgs {
  std::string out;
  int port = kDefaultViewerPort;
  std::string host = kDefaultViewerHost;
};

void view_command(const ViewArgs& a) {
  io::check_path_exists(a.out, "output folder");  // "output folder not found: X", a link loop named as one
  LINGBOT_CHECK(fs::is_directory(a.out), a.out, " is not a folder (give run's --out folder)");
  LINGBOT_CHECK(fs::is_directory(fs::path(a.out) / "viewer"), a.out,
                " has no viewer/ frames: it is not the output of 'lingbot-map run' (or of a run without the viewer export)");
  const fs::path root(a.out);
  StopSignals stop;  // from here on a Ctrl-C waits for stop.wait(), however early it comes
  auto status = std::make_shared<FolderRunStatus>(root);
  ViewerServer server(root, [status] { return (*status)(); });
  server.start(a.host, a.port, "--port");
  if (!is_loopback_host(a.host))
    std::printf("warning: listening on %s, not a loopback address: anyone who can reach it can read %s\n",
                a.host.c_str(), a.out.c_str());
  std::printf("viewer: %s  (serving %s; Ctrl-C to stop)\n", server.url().c_str(), a.out.c_str());
  std::fflush(stdout);
  stop.wait();
  std::printf("viewer: stopped\n");
}

}  // namespace

void add_view_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "view",
      "Serve a run's output folder and the browser viewer (point cloud, cameras, trajectory, depth)\n"
      "at http://HOST:PORT/ until Ctrl-C. The page and three.js are built into this binary: no network\n"
      "is needed. Only files inside OUT_DIR are served. A run still going on is followed live.");
  auto a = std::make_shared<ViewArgs>();
  cmd->add_option("OUT_DIR", a->out, "output folder of 'lingbot-map run'")->required();
  cmd->add_option("--port", a->port, "TCP port (0 = any free port; the URL printed says which)")
      ->check(CLI::Range(0, 65535))  // as run's --serve: a usage error (exit 2)
      ->capture_default_str();
  cmd->add_option("--host", a->host,
                  "address to listen on; the default is loopback only. Another address (e.g. 0.0.0.0) "
                  "makes the folder readable from the network")
      ->capture_default_str();
  cmd->callback([a] { view_command(*a); });
}

}  // namespace lingbot::cli
