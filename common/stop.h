// The process-wide stop request: SIGTERM/SIGINT (a deleted pod, Ctrl-C) set it once, and every
// wait in the process wakes on it — poll() loops include StopFd(), sleeps use SleepOrStop().
// Owns only the flag, its eventfd and the handlers; must not know who waits.
#pragma once

#include <signal.h>

#include <atomic>
#include <string_view>

#include "common/clock.h"
#include "common/event_counter.h"
#include "common/status.h"

namespace ringtrain {

// Installs the SIGTERM and SIGINT handlers that call RequestStop (and ignores SIGPIPE).
void InstallStopSignalHandlers();

// Blocks the stop signals (SIGTERM, SIGINT) on the calling thread, for a thread that must never
// take them: an OpenMP worker of oneDNN's JIT kernels, whose stack pointer may lie inside a heap
// block (see stop.cc) and which has no alternate signal stack. `previous`, when given, gets the
// mask as it was (for pthread_sigmask(SIG_SETMASK, ...)).
void BlockStopSignalsOnThisThread(sigset_t* previous = nullptr);

// Async-signal-safe. `signal` 0 = a stop requested by code, not by a signal.
void RequestStop(int signal);
// False on a thread inside a StopExemptScope.
bool StopRequested();
// The first signal that requested the stop, or 0.
int StopSignal();
// How many SIGTERM/SIGINT signals this process has received (a drain's included; a stop requested
// by code is none): a wait that goes on after the stop notices a further signal by it.
int StopSignalCount();
// Readable (POLLIN) from the moment a stop is requested, for poll() sets; never drained.
int StopFd();
// StopFd() for a wait that has checked StopRequested() and now blocks in poll(): counted, so
// that a test requests the stop only once the waiter can notice it through the descriptor
// alone (SleepOrStop, net's waits, ChildProcess::Wait; not the ring's hot loop).
int StopFdForBlockingPoll();
// How many times StopFdForBlockingPoll was called: "a waiter is blocked on the stop".
const EventCounter& StopFdPollsForTest();
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

// Draining (a SIGTERM is a handshake, not a loss): while a DrainScope lives anywhere in the
// process (the training steps), the first SIGTERM/SIGINT does not stop the process; it sets
// DrainFlag(), and the trainer stops at a step boundary the whole gang agrees on. A second
// signal, or EscalateDrain (a watchdog's, when the handshake takes too long), turns it into a
// stop at once. Outside a DrainScope signals stop at once, as always.
class DrainScope {
 public:
  DrainScope();
  ~DrainScope();
  DrainScope(const DrainScope&) = delete;
  DrainScope& operator=(const DrainScope&) = delete;
};
// Set by the first signal while draining (never cleared but by ResetStopForTest).
const std::atomic<bool>& DrainFlag();
// The drain signal becomes a stop request (the process stops at once).
void EscalateDrain();

// Clears the request (tests share one process).
void ResetStopForTest();

}  // namespace ringtrain
