#include "runner/rendezvous/rounds.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>

#include "common/random.h"
#include "common/stop.h"
#include "runner/rendezvous/prefix_store.h"
#include "runner/rendezvous/rendezvous.h"

namespace ringtrain::rendezvous {
namespace {

constexpr Duration kRetryPause{std::chrono::milliseconds(200)};

std::optional<int> ParseRound(const std::string& value) {
  int r = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), r);
  if (ec != std::errc() || p != value.data() + value.size() || r < 0) return std::nullopt;
  return r;
}

// The current round and its raw value ("" when absent).
StatusOr<std::pair<int, std::string>> ReadRound(Store& attempt) {
  auto got = attempt.Get(kRoundKey, Duration::zero());
  if (!got.ok()) {
    const StatusCode code = got.status().code();
    if (code == StatusCode::kDeadlineExceeded || code == StatusCode::kNotFound) {
      return std::pair<int, std::string>{0, ""};
    }
    return got.status();
  }
  auto r = ParseRound(*got);
  if (!r) return DataLoss("rendezvous store key \"round\" holds \"" + *got + "\", not a round");
  return std::pair<int, std::string>{*r, *got};
}

// Moves the round to at least `target`; returns the round now current (maybe later).
StatusOr<int> AdvanceTo(Store& attempt, int target) {
  for (int tries = 0; tries < 64; ++tries) {
    ASSIGN_OR_RETURN(auto cur, ReadRound(attempt));
    if (cur.first >= target) return cur.first;
    ASSIGN_OR_RETURN(std::string now,
                     attempt.CompareSet(kRoundKey, cur.second, std::to_string(target)));
    if (now == std::to_string(target)) return target;
  }
  return Aborted("rendezvous: the round key kept changing");
}

// What one JoinRound call carries from a try to the next.
struct JoinState {
  // The value of this process's "arrived/<rank>" keys: its own arrival, read back on a retry,
  // is not another process's.
  std::string incarnation;
  // The round this process last set its arrival in (perhaps without hearing back).
  std::optional<int> arrived_in;
};

// Whether another process than this one arrived as `rank` in this round: the key holds another
// incarnation (or "1", written by a runner that stored none).
StatusOr<bool> ArrivedAsAnother(Store& round_store, int rank, const std::string& incarnation) {
  auto got = round_store.Get("arrived/" + std::to_string(rank), Duration::zero());
  if (!got.ok()) {
    const StatusCode code = got.status().code();
    if (code == StatusCode::kDeadlineExceeded || code == StatusCode::kNotFound) return false;
    return got.status();
  }
  return *got != incarnation;
}

// One try at the whole join; store errors come back to be retried.
StatusOr<int> TryJoin(Store& attempt, const RoundOptions& o, JoinState& state,
                      SteadyTime deadline) {
  int round = 0;
  if (o.failed_round) {
    ASSIGN_OR_RETURN(round, AdvanceTo(attempt, *o.failed_round + 1));
  } else {
    ASSIGN_OR_RETURN(auto cur, ReadRound(attempt));
    round = cur.first;
    // A retry rejoins the round this process already arrived in. Otherwise another process
    // arrived as this rank in the current round: this one is a lost rank's replacement.
    if (state.arrived_in != round) {
      ASSIGN_OR_RETURN(bool replaces,
                       ArrivedAsAnother(*RoundStore(attempt, round), o.rank, state.incarnation));
      if (replaces) {
        ASSIGN_OR_RETURN(round, AdvanceTo(attempt, round + 1));
      }
    }
  }
  for (;;) {
    auto store = RoundStore(attempt, round);
    const auto left =
        std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    int moved_to = round;
    if (o.fingerprint) RETURN_IF_ERROR(PublishFingerprint(*store, o.rank, *o.fingerprint));
    state.arrived_in = round;
    Status s = JoinRendezvous(
        *store, o.rank, o.world_size, std::max(left, Duration::zero()),
        [&] {
          auto cur = ReadRound(attempt);
          if (cur.ok() && cur->first > round) moved_to = cur->first;
          return moved_to > round;
        },
        state.incarnation);
    if (s.ok()) return round;
    if (s.code() != StatusCode::kAborted || moved_to <= round) return s;
    round = moved_to;  // the round moved on while this rank waited: follow it
  }
}

}  // namespace

std::unique_ptr<Store> RoundStore(Store& attempt, int round) {
  return std::make_unique<PrefixStore>(attempt,
                                       round == 0 ? "" : "r" + std::to_string(round) + "/");
}

StatusOr<int> JoinRound(Store& attempt, const RoundOptions& options) {
  const SteadyTime deadline = DeadlineAfter(options.timeout);
  JoinState state{.incarnation = RandomToken(8), .arrived_in = std::nullopt};
  for (;;) {
    auto joined = TryJoin(attempt, options, state, deadline);
    if (joined.ok()) return joined;
    const StatusCode code = joined.status().code();
    // The store is down (its host, rank 0, was lost and its replacement is not up yet):
    // retried until the deadline. Anything else is final.
    if (code != StatusCode::kUnavailable || std::chrono::steady_clock::now() >= deadline) {
      return joined.status();
    }
    if (!SleepOrStop(kRetryPause)) return StoppedStatus("rendezvous");
  }
}

}  // namespace ringtrain::rendezvous
