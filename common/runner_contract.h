// The runner <-> controller contract carried by a rank's termination message and /status.
// Written by the runner, read by the operator and `ringtrain run`; no logic lives here.
#pragma once

#include <string_view>

namespace ringtrain::contract {

// Termination message (one line, at most 4096 bytes as the kubelet keeps it):
// - a rank that fails on its own writes its own cause, e.g.
//   "PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied".
// - a rank that fails because another rank failed first (lost peer, abort seen in the store)
//   writes kCausedByPrefix, the first failing rank, ": ", and that rank's cause, e.g.
//   "caused by rank 0: PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied", and exits
//   with the first failure's exit code when it knows it (else 138), so a gang whose rank 0 pod
//   is gone still reports the root cause. Readers prefer a message without the prefix.
inline constexpr std::string_view kCausedByPrefix = "caused by rank ";
// - a rank whose in-place recovery failed (the peers it waited for never joined the next round
//   within the recovery timeout) writes its loss, this marker and why the round failed, e.g.
//   "caused by rank 1: ... timed out ...; in-place recovery failed: rendezvous timed out after
//   120s waiting for rank 1". The operator then restarts the gang rather than replace this rank:
//   a peer it waited for, though its pod runs, is no survivor to recover beside (a hung one).
//   A round that timed out waiting for one rank ends "waiting for rank N (world size W)" (the
//   rendezvous' words): the operator names rank N in status.lastFailure, not the rank that
//   waited for it.
inline constexpr std::string_view kRecoveryFailedMarker = "; in-place recovery failed: ";

// A rank that refuses its newest checkpoint as another model's (a permanent failure) says this:
// `ringtrain run` then offers no command to resume from that checkpoint, which would fail the
// same way.
inline constexpr std::string_view kCheckpointOfAnotherModel = ": written for another model: ";
// Marks a retryable failure of rank 0's own checkpoint I/O (the volume failed it after the
// read's retries: EIO, ESTALE, a rename refused): the gang restarts, the rank exits retryable.
// It is no lost peer, so no in-place recovery round takes it up: a round reads or writes the same
// file again at once, and rounds do not count against backoffLimit (they looped forever).
inline constexpr std::string_view kCheckpointIoFailed = "rank 0's checkpoint I/O failed: ";

// On success (exit 0) rank 0 writes its final /status JSON object as the termination message,
// so the final step, epoch and samples/s are known even when /status can no longer be read.
// /status fields: step, epoch (epochs completed), samplesPerSecond, loss, and, when rank 0
// found checkpoints but could resume from none of them, "resumeWarning" (a one-line reason).
inline constexpr std::string_view kStatusResumeWarning = "resumeWarning";
// Where this run of rank 0 started: the step of the checkpoint or kept state it continued from.
inline constexpr std::string_view kStatusStartStep = "startStep";
// In-place recoveries of the attempt (the gang's totals, kept across a replaced rank 0): how
// many, the steps they threw away, the seconds without training, the step the last one
// continued from. Absent before the first.
inline constexpr std::string_view kStatusRecoveries = "recoveries";
inline constexpr std::string_view kStatusRecoveryStepsLost = "recoveryStepsLost";
inline constexpr std::string_view kStatusRecoverySeconds = "recoverySeconds";
inline constexpr std::string_view kStatusLastRecoveryStep = "lastRecoveryStep";
// While rank 0's state is "recovering": the loss it recovers from, one line as the rank logged
// it (e.g. "step 20625: gradient all-reduce: all-reduce: timed out after 10s waiting for rank
// 1"), so a job whose pods all run says why it does not train. Absent otherwise.
inline constexpr std::string_view kStatusRecoveryCause = "recoveryCause";
// While "recovering": the seconds since the outage began (rank 0's last progress before the
// loss), so the operator tells a loss it answered itself (it made the gang whole after that)
// from one it never saw.
inline constexpr std::string_view kStatusRecoveringSeconds = "recoveringSeconds";

}  // namespace ringtrain::contract
