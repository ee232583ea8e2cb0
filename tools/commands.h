#pragma once
// Each subcommand of the `lingbot-map` CLI registers itself on the CLI11 app from its own file
// (tools/cmd_<name>.cpp). The registered callback runs the command; errors propagate as exceptions
// and become one "error: ..." line with exit code 1 in main.
#include <CLI/CLI.hpp>

namespace lingbot::cli {

void add_version_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_verify_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_view_command(CLI::App& app);

}  // namespace lingbot::cli
