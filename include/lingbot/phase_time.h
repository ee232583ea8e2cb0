#pragma once
// PhaseTime: seconds spent in one phase of the streaming forward pass, accumulated over calls
// (SessionStats::phases). Wall time is steady-clock time; CPU time is the process's CPU time
// (CLOCK_PROCESS_CPUTIME_ID), summed over all its threads, so on a busy machine it is the steadier
// measure of work done, and with N busy threads it runs up to N times faster than the wall clock.
// On a device (--device cuda) the ops are queued asynchronously, so wall and CPU time are the host's
// time to queue them (plus any wait); device time is the device's own time for the phase's work,
// measured between stream markers (CUDA events) and 0 on the CPU.
namespace lingbot {

struct PhaseTime {
  double wall_s = 0.0;  // seconds of wall-clock time
  double cpu_s = 0.0;   // seconds of process CPU time, all threads
  double device_s = 0.0;  // seconds of device work (device backends; 0 on the CPU)
};

}  // namespace lingbot
