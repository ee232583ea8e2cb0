#pragma once
// PhaseClock: wall and process-CPU seconds accumulated over the calls it times, into a PhaseTime
// (lingbot/phase_time.h). Used for the per-phase breakdown of a streaming run (SessionStats::phases).
#include <chrono>
#include <ctime>

#include "lingbot/phase_time.h"

namespace lingbot {

// Adds the time between construction and destruction to `into`.
class PhaseClock {
 public:
  explicit PhaseClock(PhaseTime& into) : into_(into), wall0_(std::chrono::steady_clock::now()), cpu0_(cpu_now()) {}
  ~PhaseClock() {
    into_.wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count();
    into_.cpu_s += cpu_now() - cpu0_;
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

  static double cpu_now() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }

 private:
  PhaseTime& into_;
  std::chrono::steady_clock::time_point wall0_;
  double cpu0_;
};

}  // namespace lingbot
