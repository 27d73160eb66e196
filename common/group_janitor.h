// Process groups that must not outlive this process, however it ends. `ringtrain run` starts
// each rank in a process group of its own (ChildProcess with new_process_group); the rank dies
// with it (PR_SET_PDEATHSIG), but what the rank started did not: after a kill -9 of
// `ringtrain run`, a spec.command shell's runner (or a script's workers) trained on, unseen,
// holding its ports. A janitor process, forked once, learns the groups through a pipe and, once
// the pipe closes (this process ended: an exit, a crash and a SIGKILL alike), sends every group
// still listed SIGTERM, then SIGKILL after the grace, as a node's kubelet stops a pod whose
// owner is gone. Owns the pipe and that process; must not know what runs in the groups.
#pragma once

#include <sys/types.h>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain {

// Forks the janitor (once per process; a second call is an error), in a process group of its
// own: a Ctrl-C at the terminal, or a kill of this process's group, is not for it. It holds no
// descriptor of this process but the pipe's read end and stderr, where it says what it stops.
Status StartGroupJanitor(Duration grace);

// ChildProcess's, for a child in its own group: the group started; the group was killed and its
// leader reaped (its id may be reused from then on). No-ops without a janitor; never block (a
// janitor that cannot keep up misses a group rather than stall the caller).
void JanitorWatchGroup(pid_t pgid);
void JanitorForgetGroup(pid_t pgid);

// The janitor's pid, or -1 without one (tests).
pid_t GroupJanitorPid();

}  // namespace ringtrain
