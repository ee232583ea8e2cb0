#pragma once
// CLI11 helpers shared by the subcommands.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "lingbot/device.h"
#include "lingbot/model.h"

namespace lingbot::cli {

// A duration as the progress lines show it (elapsed, ETA): M:SS, or H:MM:SS from an hour; "--:--"
// when unknown (not finite); a negative one is 0:00.
inline std::string format_clock(double seconds) {
  if (!std::isfinite(seconds)) return "--:--";
  const long long t = std::llround(std::max(0.0, seconds));
  char buf[48];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  return buf;
}

// "1 frame", "3 frames": a count and its noun (a regular plural).
inline std::string count_of(int64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// The device of `--device NAME` (lingbot::resolve_device); when auto passes over a visible GPU, one
// line on stdout says why ("notice: device auto runs on the CPU: cuda:0 cannot be used (...)").
inline Device resolve_device_option(const std::string& name) {
  std::string note;
  const Device d = resolve_device(parse_device(name), &note);
  if (!note.empty()) std::printf("notice: %s\n", note.c_str());
  return d;
}

// Validator for floating-point options: "nan", "inf" and the like are not usable values (a usage
// error, exit 2, like any value that does not parse).
inline CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          size_t used = 0;
          const double v = std::stod(s, &used);
          if (used == s.size() && std::isfinite(v)) return "";
        } catch (const std::exception&) {
        }
        return "'" + s + "' is not a finite number";
      },
      "FINITE");
}

// Validator for an option whose value is one of a few words: anything else is a usage error (exit 2)
// "<option>: must be <text>, got '<value>'" (text: e.g. "auto, bar or lines").
inline CLI::Validator one_of(std::vector<std::string> words, std::string text) {
  return CLI::Validator(
      [words = std::move(words), text = std::move(text)](std::string& s) -> std::string {
        for (const std::string& w : words)
          if (s == w) return "";
        return "must be " + text + ", got '" + s + "'";
      },
      "");
}

// Parses a choice in a subcommand's callback: a lingbot::Error from `parse` (a word that is not one
// of the option's choices) becomes a usage error (exit 2) "<name>: <message>", as a validator's would
// (name "": the message alone, which names the options). For options whose old spelling
// (RenamedOptions) has no validator, for list items, and for options that contradict each other.
template <typename F>
auto parse_choice(const std::string& name, F parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const Error& e) {
    throw CLI::ValidationError(name.empty() ? std::string(e.what()) : name + ": " + e.what());
  }
}

// What a failure says to the user: the exception's message, except std::bad_alloc's, which is the bare
// "std::bad_alloc" and names no cause.
inline std::string error_text(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
    return "out of memory: an allocation failed (smaller sizes in the options, or more free memory, would let it run)";
  return e.what();
}

// `--set key=value` split at its first '=': nullopt without a '=' or a key.
inline std::optional<std::pair<std::string, std::string>> split_key_value(const std::string& s) {
  const size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0) return std::nullopt;
  return std::pair{s.substr(0, eq), s.substr(eq + 1)};
}

// Validator for `--set key=value` (a missing '=' or key is a usage error; the key itself is checked
// against the configuration later).
inline CLI::Validator key_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string { return split_key_value(s) ? "" : "expects key=value, got '" + s + "'"; }, "");
}

// The `--set` values (checked by key_value() when parsed) as configuration overrides, in order.
inline ConfigOverrides config_overrides(const std::vector<std::string>& sets) {
  ConfigOverrides o;
  for (const std::string& s : sets) {
    auto kv = split_key_value(s);
    LINGBOT_CHECK(kv.has_value(), "--set expects key=value, got '", s, "'");
    o.push_back(std::move(*kv));
  }
  return o;
}

// A usage error found after parsing (options that need or exclude each other, a missing input or
// model, both spellings of a renamed option): thrown as CLI11's own, so it exits 2 with "Run '...
// --help' for usage." like a value that does not parse (docs/cli.md "Exit codes and errors").
template <typename... Parts>
void usage_check(bool ok, const Parts&... parts) {
  if (!ok) throw CLI::ValidationError(detail::concat(parts...));
}

// Old spellings of renamed options (the naming rule: docs/naming.md). An old name keeps working for
// a release: hidden from --help, one `notice:` line on stderr when used, and an error when it is
// given together with its new name.
class RenamedOptions {
 public:
  template <class T>
  void add(CLI::App* cmd, CLI::Option* current, const std::string& new_name, const std::string& old_name, T& target) {
    entries_.push_back({cmd->add_option(old_name, target)->group(""), current, new_name, old_name});
  }
  // Call first in the subcommand's callback.
  void resolve() const {
    for (const Entry& e : entries_) {
      if (e.old->count() == 0) continue;
      usage_check(e.current->count() == 0, "give ", e.new_name, " or its old spelling ", e.old_name, ", not both");
      std::fprintf(stderr, "notice: %s is deprecated, use %s\n", e.old_name.c_str(), e.new_name.c_str());
    }
  }

 private:
  struct Entry {
    CLI::Option* old;
    CLI::Option* current;
    std::string new_name, old_name;
  };
  std::vector<Entry> entries_;
};

}  // namespace lingbot::cli
