// The process-wide stop request: SIGTERM/SIGINT (a deleted pod, Ctrl-C) set it once, and every
// wait in the process wakes on it — poll() loops include StopFd(), sleeps use SleepOrStop().
// Owns only the flag, its eventfd and the handlers; must not know who waits.
#pragma once

#include <atomic>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain {

// Installs the SIGTERM and SIGINT handlers that call RequestStop (and ignores SIGPIPE).
void InstallStopSignalHandlers();

// Async-signal-safe. `signal` 0 = a stop requested by code, not by a signal.
void RequestStop(int signal);
// False on a thread inside a StopExemptScope.
bool StopRequested();
// The first signal that requested the stop, or 0.
int StopSignal();
// Readable (POLLIN) from the moment a stop is requested, for poll() sets; never drained.
int StopFd();
// The flag itself, for loops that already take a `const std::atomic<bool>*` (the trainer).
const std::atomic<bool>& StopFlag();

// Cancelled("stopped by SIGTERM during <what>"): the error every interrupted wait returns.
Status StoppedStatus(std::string_view what);
// Sleeps `d` unless a stop is requested first; false when it was.
bool SleepOrStop(Duration d);

// While one lives on this thread, StopRequested() reads false for it: a failing rank reports
// its cause to the store (bounded by its own short deadline) even after a SIGTERM.
class StopExemptScope {
 public:
  StopExemptScope();
  ~StopExemptScope();
  StopExemptScope(const StopExemptScope&) = delete;
  StopExemptScope& operator=(const StopExemptScope&) = delete;

 private:
  bool previous_;
};

// Whether a StopExemptScope is live on this thread.
bool StopExemptForThisThread();

// Clears the request (tests share one process).
void ResetStopForTest();

}  // namespace ringtrain
