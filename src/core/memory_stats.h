#pragma once
// Process memory readings (Linux /proc): resident set size now and at its peak, in bytes.
#include <cstddef>

namespace lingbot {

size_t current_rss_bytes();   // VmRSS; 0 if unavailable
size_t peak_rss_bytes();      // VmHWM; 0 if unavailable
// Lowers the peak mark (VmHWM) to the current RSS, so a later peak_rss_bytes() measures only what came
// after (Linux >= 4.0, /proc/self/clear_refs; without it the peak keeps its earlier value).
void reset_peak_rss();
// Memory this process can still obtain: MemAvailable of /proc/meminfo, lowered to the cgroup (v2)
// limit's headroom (memory.max - memory.current) when one is set; 0 if unavailable.
size_t available_memory_bytes();
// Memory and swap of the machine (MemTotal + SwapTotal of /proc/meminfo): under Linux's default
// overcommit heuristic no single allocation may reserve more, resident or not; 0 if unavailable.
size_t total_memory_bytes();

}  // namespace lingbot
