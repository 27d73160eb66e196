// Work that only one rank does while the others wait for it, such as rank 0 reading or writing a
// checkpoint. Such work may take longer than the collective timeout (a large model on a slow
// volume), and a peer waiting in its next collective would then take a live rank 0 for a dead
// one. Here the root does the work on a helper thread and keeps the gang in step with small
// broadcasts: every `heartbeat` it tells the others whether it is still busy, so a slow write
// fails no one, while a root that dies or hangs outside the work still fails them within the
// collective timeout. The work itself is bounded by `timeout`.
#pragma once

#include <functional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "runner/comm/communicator.h"

namespace ringtrain::comm {

struct RootWorkOptions {
  int root = 0;
  // How often the root says it is still busy: well under the collective timeout
  // (HeartbeatFor).
  Duration heartbeat{1000};
  // How long the work may take. Past it the root stops waiting and fails with
  // ResourceExhausted (retryable, and not a peer loss: the root's own volume hangs), leaving the
  // work's thread behind; the work must therefore own everything it touches.
  Duration timeout{30 * 60 * 1000};
  std::string what = "work";  // names the work in errors: "checkpoint write at step 1000"
  std::string timeout_name;   // names the timeout's setting in its message, if any
  // After a stop request (SIGTERM), how much longer the root waits for its work (a checkpoint
  // write that completes is kept) before it gives up and returns.
  Duration stop_grace{5000};
};

// A heartbeat well under `collective_timeout`: a quarter of it, at most 1 s, at least 1 ms.
Duration HeartbeatFor(Duration collective_timeout);

// Collective: every rank calls it at the same point. On the root, runs `work` on a helper thread
// and returns its status (as the work says it) once it is done, after the gang has heard so; on
// the others, `work` is not called and the result is Ok once the root said it is done. A
// collective that fails (a lost peer, a stop request) ends the heartbeats: the root still waits
// for its work (a checkpoint write that completes is kept), up to the timeout, then returns the
// collective's error. A stop request (common/stop.h) ends the heartbeats on every rank (a
// backend whose collectives do not watch for it too), and the root's wait after stop_grace. The
// heartbeats' errors are prefixed "<what>: " on the root and "waiting for rank R's <what>: " on
// the others. An exception from `work` is its error: std::bad_alloc a permanent "out of memory",
// another Internal.
Status WhileRootWorks(Communicator& comm, const std::function<Status()>& work,
                      const RootWorkOptions& options);

// The root's work with no gang to keep in step (its peers are gone: rank 0 saving the state it
// kept when it gives up recovering in place, stopped or failed). Runs `work` on a helper thread
// and returns its status, waiting for it up to options.timeout also after a stop request (the
// work is what the rank does before it stops: stop_grace does not apply); a SIGTERM/SIGINT
// (StopSignalCount) beyond the one that asks the rank to stop ends the wait at once with
// Cancelled: the next signal when a stop was requested before the work began, else the second.
// A wait that ends before the work leaves its thread behind (the work must own everything it
// touches); past the timeout the result is ResourceExhausted, as WhileRootWorks's. Errors are
// prefixed "<what>: ".
Status WorkAlone(const std::function<Status()>& work, const RootWorkOptions& options);

}  // namespace ringtrain::comm
