// lingbot-map: streaming 3D reconstruction with LingBot-Map. See README.md.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "lingbot_git_rev.h"

int main(int argc, char** argv) {
  CLI::App app{"lingbot-map: streaming 3D reconstruction with LingBot-Map (C++ engine)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(LINGBOT_VERSION) + " (" + LINGBOT_GIT_REV + ")");
  lingbot::cli::add_version_command(app);
  lingbot::cli::add_inspect_command(app);
  lingbot::cli::add_convert_command(app);
  lingbot::cli::add_verify_command(app);
  lingbot::cli::add_bench_command(app);
  lingbot::cli::add_run_command(app);
  lingbot::cli::add_view_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
