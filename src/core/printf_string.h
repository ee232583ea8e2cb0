#pragma once
// printf-style formatting into a std::string as long as the values need (GCC 12 has no std::format):
// the writers' text lines, whose values (timestamps given through the API) have no length bound.
#include <cstdarg>
#include <cstdio>
#include <string>

namespace lingbot {

[[gnu::format(printf, 1, 2)]] inline std::string printf_string(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string s(static_cast<size_t>(n > 0 ? n : 0), '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, format, again);  // writes the terminator at data()[size()]
  va_end(again);
  return s;
}

}  // namespace lingbot
