// The gang fingerprint: what every rank of a round must share to train together (the gang
// protocol, the runner's release, its image when the pod says, a digest of the training
// configuration), published under "fingerprint/<rank>" before the rank arrives in a round and
// compared once the whole world has. Owns those keys and the verdict key; must not know how the
// fingerprint is made (runner/rank: FingerprintOf) or how a refusal is reported (failure.h).
//
// Rank 0 compares and publishes the verdict; every other rank waits for it, so every rank of a
// refused round returns rank 0's words. A rank 0 that published no fingerprint (a runner from
// before the fingerprint, or of another protocol) gives no verdict: the other ranks refuse it
// on their own.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::rendezvous {

// How long a rank waits for rank 0's verdict once the world has arrived: rank 0 reads one key
// per rank from its own store, so this is a bound for a rank 0 lost in between, not a budget.
inline constexpr Duration kFingerprintVerdictTimeout{std::chrono::seconds(60)};

struct GangFingerprint {
  int protocol = 0;    // kGangProtocolVersion (common/version.h)
  std::string runner;  // the runner's release, e.g. "0.1.0"
  std::string image;   // the container image, "" when the pod does not say (RINGTRAIN_IMAGE)
  std::string config;  // a digest of what must be identical on every rank (train/config.h)
  // The configuration the digest is made of, field by field in its order ("batch_size", "64"),
  // so that rank 0 can name what differs; empty from a runner that did not publish it (the
  // digests alone are named then).
  std::vector<std::pair<std::string, std::string>> config_fields;

  bool operator==(const GangFingerprint&) const = default;
};

// The store value: JSON with "protocol" always an integer, whatever a later protocol adds, so
// that every runner can read another's protocol and name it.
std::string EncodeFingerprint(const GangFingerprint& fingerprint);
// nullopt for a value without an integer "protocol".
std::optional<GangFingerprint> ParseFingerprint(const std::string& value);
// "runner 0.1.0 protocol 1 image ghcr.io/x:0.1" (no image part when it is unknown).
std::string DescribeFingerprint(const GangFingerprint& fingerprint);

// Sets "fingerprint/<rank>" in the round's store. rounds.h calls it before every arrival, so a
// rank that sees all "arrived/<r>" keys finds every fingerprint without waiting.
Status PublishFingerprint(Store& round_store, int rank, const GangFingerprint& fingerprint);

// What the round decided: empty when every rank runs the same, else why the gang is refused,
// e.g. "rank 1 runs runner 0.2.0 protocol 2 but rank 0 runs runner 0.1.0 protocol 1: ...", or
// "rank 1's training configuration differs from rank 0's in batch_size (64 vs 32) (digest
// ... vs ...): ...".
struct FingerprintVerdict {
  std::string refusal;
  bool agreed() const { return refusal.empty(); }
};

// After the whole world arrived in a round (JoinRound): rank 0 compares every rank's fingerprint
// with its own and publishes the verdict; the other ranks wait up to `timeout` for it (Cancelled
// on a stop request). A world of one agrees with itself. Runner differences (protocol, release,
// image where both ranks know theirs) are named before configuration differences: two runners
// may digest one configuration differently. Errors are the store's, or DeadlineExceeded when
// rank 0 gave no verdict in time.
StatusOr<FingerprintVerdict> AgreeOnFingerprints(Store& round_store, int rank, int world_size,
                                                 const GangFingerprint& mine,
                                                 Duration timeout = kFingerprintVerdictTimeout);

}  // namespace ringtrain::rendezvous
