#pragma once
// Process memory readings (Linux /proc): resident set size now and at its peak, in bytes.
#include <cstddef>

namespace lingbot {

size_t current_rss_bytes();   // VmRSS; 0 if unavailable
size_t peak_rss_bytes();      // VmHWM; 0 if unavailable

}  // namespace lingbot
