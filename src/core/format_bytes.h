#pragma once
// Byte counts as people read them, the one format of every message and summary line that names a
// size: "4.43 GiB" from 1 GiB up, "12.5 MiB" from 1 MiB, "3.2 KiB" from 1 KiB, else "512 B".
// Benchmark tables use fixed units per column instead (their numbers are compared down a column).
#include <cstdint>
#include <string>

#include "core/printf_string.h"

namespace lingbot {

inline std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  const double size = b < 0 ? -b : b;
  if (size >= kGiB) return printf_string("%.2f GiB", b / kGiB);
  if (size >= kMiB) return printf_string("%.1f MiB", b / kMiB);
  if (size >= kKiB) return printf_string("%.1f KiB", b / kKiB);
  return printf_string("%lld B", static_cast<long long>(bytes));
}

}  // namespace lingbot
