// Gang rendezvous over a Store: every rank announces itself and waits for the whole world.
// Owns the "arrived/<rank>" keys; must not create sockets or know about communicators.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/runner_env.h"
#include "common/status.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::rendezvous {

inline constexpr Duration kDefaultRendezvousTimeout = contract::kRendezvousTimeout;

// Sets "arrived/<rank>" and blocks until all `world_size` ranks have. On timeout the error
// names the ranks that never arrived: "rendezvous timed out after 30s waiting for ranks 2, 3
// (world size 4)". Pass a PrefixStore so keys of an earlier attempt are never seen.
// With `abandon`, the wait is checked every second and ends with Aborted once it returns true
// (a recovery round that moved on while this rank waited: rounds.h).
// `arrival` is the key's value; only its presence counts here (rounds.h stores the joining
// process's incarnation there, to tell its own earlier arrival from another process's).
Status JoinRendezvous(Store& store, int rank, int world_size,
                      Duration timeout = kDefaultRendezvousTimeout,
                      const std::function<bool()>& abandon = {}, const std::string& arrival = "1");

// Ascending ranks as "2, 3" for short lists; runs of three or more collapse to "4-9", so a gang
// of thousands with one node down still reads in one line.
std::string FormatRanks(const std::vector<int>& ranks);

}  // namespace ringtrain::rendezvous
