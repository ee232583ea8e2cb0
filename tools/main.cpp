// lingbot-map: streaming 3D reconstruction with LingBot-Map. See README.md.
//
// Exit codes: 0 success; 1 bad input or a failed run (files, values out of range: one "error: ..."
// line); 2 usage error (unknown subcommand or option, a value that does not parse, a missing
// required option: one "error: ..." line and a hint to --help); 3 `run` finished on a damaged input
// (see --allow-damaged); 130 / 143 `run` stopped by Ctrl-C / SIGTERM.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "lingbot_git_rev.h"

namespace {

constexpr int kExitUsage = 2;

// CLI11 messages can span lines ("... Run with --help for more information."): keep the first.
std::string first_line(const std::string& s) {
  const size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// Output to a full disk or a closed descriptor fails silently in stdio: the last flush tells.
int checked_stdout(int code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (flushed && !std::ferror(stdout)) return code;
  // errno names the flush's failure; an earlier failed write left only the stream's error flag.
  std::fprintf(stderr, "error: cannot write the standard output%s%s\n", flushed ? "" : ": ",
               flushed ? " (a write failed)" : std::strerror(errno));
  return code == 0 ? 1 : code;
}

// CLI11's "Could not convert: --threads = 1.5" as the other value errors read: "--threads: '1.5' is
// not an integer" (the option's type, from the subcommand that was being parsed).
std::string conversion_message(const CLI::App& parsed, const std::string& message) {
  const std::string prefix = "Could not convert: ";
  const size_t eq = message.find(" = ");
  if (message.rfind(prefix, 0) != 0 || eq == std::string::npos) return message;
  const std::string name = message.substr(prefix.size(), eq - prefix.size());
  const std::string value = message.substr(eq + 3);
  const CLI::Option* opt = parsed.get_option_no_throw(name);
  if (opt == nullptr) return message;
  const std::string type = opt->get_type_name();
  std::string what = "is not a valid value";
  if (type == "INT" || type == "UINT") {
    // A whole number that does not fit reads differently from one that is not a number at all.
    const std::string magnitude = value.starts_with('-') ? value.substr(1) : value;
    const bool digits = !magnitude.empty() && magnitude.find_first_not_of("0123456789") == std::string::npos;
    what = digits ? "is out of range" : type == "UINT" ? "is not a non-negative integer" : "is not an integer";
  } else if (type == "FLOAT") {
    what = "is not a number";
  }
  return name + ": '" + value + "' " + what;
}

int run_cli(int argc, char** argv) {
  CLI::App app{"lingbot-map: streaming 3D reconstruction with LingBot-Map (C++ engine)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(LINGBOT_VERSION) + " (" + LINGBOT_GIT_REV + ")");
  // lingbot-gpu-check (CMakeLists.txt) is this CLI with only version, verify and bench, so that it links
  // without FFmpeg, cpp-httplib and the rest for the bundle of a bare GPU machine (scripts/gpu_bundle.sh).
  // The order here is the order `--help` lists them in.
  lingbot::cli::add_version_command(app);
#ifndef LINGBOT_CLI_GPU_CHECK
  lingbot::cli::add_inspect_command(app);
  lingbot::cli::add_convert_command(app);
#endif
  lingbot::cli::add_verify_command(app);
  lingbot::cli::add_bench_command(app);
#ifndef LINGBOT_CLI_GPU_CHECK
  lingbot::cli::add_run_command(app);
  lingbot::cli::add_view_command(app);
#endif
  // The leading words that are not options must name subcommands, level by level (CLI11 would say
  // "A subcommand is required" for `bench foo` or `--bogus`).
  const auto all = [](const CLI::App*) { return true; };
  const CLI::App* level = &app;
  std::string path = "lingbot-map";
  const auto names_of = [](const std::vector<const CLI::App*>& subs) {
    std::string names;
    for (const CLI::App* sub : subs) names += (names.empty() ? "" : ", ") + sub->get_name();
    return names;
  };
  int k = 1;
  for (; k < argc; ++k) {
    const std::vector<const CLI::App*> subs = level->get_subcommands(all);
    if (subs.empty()) break;
    const std::string names = names_of(subs);
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : subs)
      if (sub->check_name(argv[k])) next = sub;
    const std::string word = argv[k];
    const bool help_or_version = word == "--help" || word == "-h" || (level == &app && word == "--version");
    if (next == nullptr && !help_or_version) {
      const std::string what = word[0] == '-' ? "a subcommand before options, got '" : "unknown subcommand '";
      std::fprintf(stderr, "error: %s%s' (%s: %s)\nRun '%s --help' for usage.\n", what.c_str(), word.c_str(),
                   level == &app ? "subcommands" : (path.substr(12) + " subcommands").c_str(), names.c_str(), path.c_str());
      return kExitUsage;
    }
    if (next == nullptr) break;
    level = next;
    path += " " + next->get_name();
  }
  // The words ran out at a level that needs a subcommand (`lingbot-map bench`): name them (CLI11 says
  // only "A subcommand is required").
  if (k == argc && level->get_require_subcommand_min() > 0) {
    std::fprintf(stderr, "error: %s needs a subcommand: %s\nRun '%s --help' for usage.\n", path.c_str(),
                 names_of(level->get_subcommands(all)).c_str(), path.c_str());
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command's own exit status (run: 3, 130, 143); it printed its messages
  } catch (const CLI::ParseError& e) {
    // The subcommand that was being parsed names the right --help.
    std::string help = "lingbot-map";
    const CLI::App* parsed = &app;
    for (const CLI::App* level = &app; level != nullptr;) {  // down to the deepest one (bench kv)
      const CLI::App* next = nullptr;
      for (const CLI::App* sub : level->get_subcommands())
        if (sub->parsed()) next = sub;
      if (next) {
        help += " " + next->get_name();
        parsed = next;
      }
      level = next;
    }
    std::string message = first_line(e.what());
    if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) message = conversion_message(*parsed, message);
    // A misspelt option (--output for --out) was reported as the required option it left out: CLI11
    // checks requirements before the arguments it could not place. Those come first.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !parsed->remaining().empty()) {
      const std::vector<std::string> extra = parsed->remaining();
      std::string words;
      for (const std::string& w : extra) words += " " + w;
      message = std::string(extra.size() == 1 ? "The following argument was not expected:" : "The following arguments "
                            "were not expected:") + words + " (and " + message + ")";
    }
    // "--image-size: At Most 1 required but received 2": an option given twice.
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && message.find(": At Most 1 required but received ") != std::string::npos)
      message = message.substr(0, message.find(':')) + " is given more than once (give it once)";
    std::fflush(stdout);  // what the command printed comes first in a log of both streams
    std::fprintf(stderr, "error: %s\nRun '%s --help' for usage.\n", message.c_str(), help.c_str());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fflush(stdout);  // the notices before the error stay before it in a log of both streams (`2>&1 | tee`)
    std::fprintf(stderr, "error: %s\n", lingbot::cli::error_text(e).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return checked_stdout(run_cli(argc, argv)); }
