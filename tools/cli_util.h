#pragma once
// CLI11 helpers shared by the subcommands.
#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

namespace lingbot::cli {

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

}  // namespace lingbot::cli
