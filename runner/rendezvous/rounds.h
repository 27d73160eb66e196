// Recovery rounds of one gang attempt: the world re-forms in place, under a new round, when a
// rank is lost and its replacement joins the survivors. Round 0 is the attempt's own key space
// (a gang that never recovers reads and writes exactly the keys it always did); round N > 0
// lives under "r<N>/", so every communicator, failure record and rendezvous of a round starts
// clean. The current round is the integer under "round" (absent: 0). Owns those keys; must not
// know about communicators or training.
//
// Who joins which round:
//  - a survivor, after its communicator failed in round R, moves the round to R + 1 (or joins a
//    later one another rank started);
//  - a fresh process joins the current round, unless another process already arrived there as
//    its rank (then it replaces a rank that round lost, and starts the next round itself). Each
//    JoinRound call stores a random incarnation as the value of its "arrived/<rank>" keys, so a
//    retry after a store error (the first arrival may have landed) rejoins its own round;
//  - a rank waiting in a round that moved on while it waited follows it.
// The store may be a new one (rank 0 lost: its replacement hosts a fresh store at the same
// address): survivors re-create the round key there, and store errors are retried until the
// deadline.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "runner/rendezvous/fingerprint.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::rendezvous {

inline constexpr const char* kRoundKey = "round";

// The key space of `round` in the attempt's store (the store itself for round 0).
std::unique_ptr<Store> RoundStore(Store& attempt, int round);

struct RoundOptions {
  int rank = 0;
  int world_size = 1;
  // The round this rank last trained in and lost a peer in; nullopt for a fresh process.
  std::optional<int> failed_round;
  // Bounds the whole join, store outages included (a fresh gang: the rendezvous timeout; a
  // recovery: the recovery timeout).
  Duration timeout = std::chrono::seconds(300);
  // Published in every round this rank arrives in, before its arrival (fingerprint.h), so that
  // AgreeOnFingerprints after the join reads every rank's without waiting. nullopt: none.
  std::optional<GangFingerprint> fingerprint;
};

// Joins the round this rank belongs to (above) and waits for the whole world there; returns the
// round. Errors: DeadlineExceeded naming the ranks that never arrived, the store's own error
// once the deadline passed, Cancelled on a stop request.
StatusOr<int> JoinRound(Store& attempt, const RoundOptions& options);

}  // namespace ringtrain::rendezvous
