#pragma once
// PhaseScope: times one phase of the forward pass on a backend, host and device alike: the host's
// wall and CPU time (core/phase_clock.h) and, on a device backend, the device time of the work the
// phase queued (Backend::device_timer_start/stop; added to into.device_s when the owner calls
// Backend::collect_device_times()).
#include "compute/backend.h"
#include "core/phase_clock.h"

namespace lingbot::compute {

class PhaseScope {
 public:
  // Throws lingbot::Stopped first when the backend's stop flag is set (a phase is where a step may end).
  PhaseScope(Backend& be, PhaseTime& into) : be_(be), into_(into), clock_(into) {
    be_.throw_if_stopped();
    be_.device_timer_start();
  }
  // A timer error is dropped here (a destructor may run while an exception unwinds): the device's
  // error is sticky, so the next op reports it.
  ~PhaseScope() {
    try {
      be_.device_timer_stop(into_);
    } catch (...) {
    }
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Backend& be_;
  PhaseTime& into_;
  PhaseClock clock_;
};

}  // namespace lingbot::compute
