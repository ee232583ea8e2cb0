#include <cstdio>

#include "commands.h"
#include "lingbot_git_rev.h"
#include "kernels/cpu/ops.h"

namespace lingbot::cli {

void add_version_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print the engine version and build configuration");
  cmd->callback([] {
    std::printf("lingbot-map %s (git %s)\n", LINGBOT_VERSION, LINGBOT_GIT_REV);
#ifdef LINGBOT_HAVE_CUDA
    std::printf("backends: cpu cuda\n");
#else
    std::printf("backends: cpu\n");
#endif
    std::printf("blas: %s\n", kernels::blas_description().c_str());
  });
}

}  // namespace lingbot::cli
