#include "core/memory_stats.h"

#include <cstdio>
#include <cstring>

namespace lingbot {
namespace {
// The "<key> <n> kB" line of a /proc file (status, meminfo), in bytes; 0 when absent.
size_t read_kb_field(const char* path, const char* key) {
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  const size_t klen = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, klen) == 0) {
      std::sscanf(line + klen, "%zu", &kb);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}
}  // namespace

size_t available_memory_bytes() {
  size_t avail = read_kb_field("/proc/meminfo", "MemAvailable:");
  auto read_number = [](const char* path, size_t* out) {
    FILE* f = std::fopen(path, "r");
    if (!f) return false;
    unsigned long long v = 0;
    const bool ok = std::fscanf(f, "%llu", &v) == 1;  // "max" (no limit) does not parse
    std::fclose(f);
    if (ok) *out = static_cast<size_t>(v);
    return ok;
  };
  size_t limit = 0, used = 0;
  if (read_number("/sys/fs/cgroup/memory.max", &limit) && read_number("/sys/fs/cgroup/memory.current", &used)) {
    const size_t headroom = limit > used ? limit - used : 0;
    if (avail == 0 || headroom < avail) avail = headroom;
  }
  return avail;
}

size_t total_memory_bytes() {
  return read_kb_field("/proc/meminfo", "MemTotal:") + read_kb_field("/proc/meminfo", "SwapTotal:");
}

size_t current_rss_bytes() { return read_kb_field("/proc/self/status", "VmRSS:"); }
size_t peak_rss_bytes() { return read_kb_field("/proc/self/status", "VmHWM:"); }

void reset_peak_rss() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

}  // namespace lingbot
