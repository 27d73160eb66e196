#include "runner/rendezvous/rendezvous.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ringtrain::rendezvous {
namespace {

std::string ArrivedKey(int rank) { return "arrived/" + std::to_string(rank); }

constexpr Duration kAbandonPoll{std::chrono::seconds(1)};

}  // namespace

std::string FormatRanks(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      out += std::to_string(ranks[i]);
      ++i;
    }
  }
  return out;
}

Status JoinRendezvous(Store& store, int rank, int world_size, Duration timeout,
                      const std::function<bool()>& abandon, const std::string& arrival) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgument("rendezvous: rank " + std::to_string(rank) +
                           " is out of range for world size " + std::to_string(world_size));
  }
  RETURN_IF_ERROR(store.Set(ArrivedKey(rank), arrival).WithContext("rendezvous"));
  std::vector<std::string> keys;
  keys.reserve(world_size);
  for (int r = 0; r < world_size; ++r) keys.push_back(ArrivedKey(r));
  Status waited;
  if (!abandon) {
    waited = store.Wait(keys, timeout);
  } else {
    const SteadyTime deadline = DeadlineAfter(timeout);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
      waited = store.Wait(keys, std::clamp(left, Duration::zero(), kAbandonPoll));
      if (waited.code() != StatusCode::kDeadlineExceeded || left <= kAbandonPoll) break;
      if (abandon()) return Aborted("rendezvous: abandoned (the recovery round moved on)");
    }
  }
  if (waited.code() != StatusCode::kDeadlineExceeded) return waited.WithContext("rendezvous");

  // Probe key by key rather than parse the store's message: its wording is the store's
  // business, and a rank that arrived meanwhile should not be blamed.
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    auto got = store.Get(keys[r], Duration(0));
    if (got.ok()) continue;
    if (got.status().code() != StatusCode::kDeadlineExceeded) {
      return got.status().WithContext("rendezvous");
    }
    missing.push_back(r);
  }
  if (missing.empty()) return Status::Ok();
  return DeadlineExceeded("rendezvous timed out after " + FormatDuration(timeout) +
                          " waiting for rank" + (missing.size() > 1 ? "s " : " ") +
                          FormatRanks(missing) + " (world size " + std::to_string(world_size) +
                          ")");
}

}  // namespace ringtrain::rendezvous
