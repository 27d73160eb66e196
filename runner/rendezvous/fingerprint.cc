#include "runner/rendezvous/fingerprint.h"

#include <nlohmann/json.hpp>

#include <string_view>
#include <vector>

#include "runner/rendezvous/rendezvous.h"

namespace ringtrain::rendezvous {
namespace {

constexpr const char* kVerdictKey = "fingerprint/verdict";
constexpr const char* kAgreed = "ok";
// The first gang protocol whose ranks publish a fingerprint: a rank without one is older.
constexpr int kFirstFingerprintProtocol = 1;
// An unreadable value is shown cut to this: it must not fill the termination log (4096 bytes).
constexpr std::size_t kShownValue = 120;
constexpr std::string_view kSameRunner = ": every rank of a gang must run the same runner";
constexpr std::string_view kSameConfig =
    ": give every rank the same training configuration (model, dataset, batch size, epochs, "
    "seed, optimizer and learning rate)";

std::string FingerprintKey(int rank) { return "fingerprint/" + std::to_string(rank); }

// What one rank published under its key.
struct Published {
  bool present = false;
  std::string raw;
  std::optional<GangFingerprint> fingerprint;  // nullopt when absent or unreadable
};

StatusOr<Published> ReadPublished(Store& store, int rank) {
  Published p;
  auto got = store.Get(FingerprintKey(rank), Duration::zero());
  if (!got.ok()) {
    const StatusCode code = got.status().code();
    if (code == StatusCode::kDeadlineExceeded || code == StatusCode::kNotFound) return p;
    return got.status().WithContext("gang fingerprint of rank " + std::to_string(rank));
  }
  p.present = true;
  p.raw = *got;
  p.fingerprint = ParseFingerprint(*got);
  return p;
}

// An image counts only where both ranks know theirs: a pod from before RINGTRAIN_IMAGE, or a
// rank started by hand, runs the same runner as long as the releases and protocols agree.
bool SameRunner(const GangFingerprint& a, const GangFingerprint& b) {
  return a.protocol == b.protocol && a.runner == b.runner &&
         (a.image.empty() || b.image.empty() || a.image == b.image);
}

enum class Difference { kNone, kRunner, kConfig };

Difference Compare(const Published& theirs, const GangFingerprint& mine) {
  if (!theirs.fingerprint || !SameRunner(*theirs.fingerprint, mine)) return Difference::kRunner;
  if (theirs.fingerprint->config != mine.config) return Difference::kConfig;
  return Difference::kNone;
}

// Why rank `their_rank` cannot train beside rank `my_rank` (Compare found a difference).
std::string Explain(int their_rank, const Published& theirs, int my_rank,
                    const GangFingerprint& mine) {
  const std::string them = "rank " + std::to_string(their_rank);
  const std::string me = "rank " + std::to_string(my_rank);
  const std::string my_runner = me + " runs " + DescribeFingerprint(mine);
  if (!theirs.present) {
    return them + " published no gang fingerprint (a runner from before gang protocol " +
           std::to_string(kFirstFingerprintProtocol) + ") but " + my_runner +
           std::string(kSameRunner);
  }
  if (!theirs.fingerprint) {
    const std::string shown =
        theirs.raw.size() > kShownValue ? theirs.raw.substr(0, kShownValue) + "..." : theirs.raw;
    return them + " published a gang fingerprint this runner cannot read (\"" + shown + "\") but " +
           my_runner + std::string(kSameRunner);
  }
  const GangFingerprint& fp = *theirs.fingerprint;
  if (!SameRunner(fp, mine)) {
    return them + " runs " + DescribeFingerprint(fp) + " but " + my_runner +
           std::string(kSameRunner);
  }
  return them + "'s training configuration differs from " + me + "'s (digest " + fp.config +
         " vs " + mine.config + ")" + std::string(kSameConfig);
}

// Rank 0's side: compares every rank with itself; "" when all agree.
StatusOr<std::string> Judge(Store& store, int world_size, const GangFingerprint& mine) {
  std::vector<Published> all(static_cast<std::size_t>(world_size));
  std::vector<int> differ;
  int first_runner = -1;
  int first_config = -1;
  for (int r = 1; r < world_size; ++r) {
    auto& p = all[static_cast<std::size_t>(r)];
    ASSIGN_OR_RETURN(p, ReadPublished(store, r));
    const Difference d = Compare(p, mine);
    if (d == Difference::kNone) continue;
    differ.push_back(r);
    if (d == Difference::kRunner && first_runner < 0) first_runner = r;
    if (d == Difference::kConfig && first_config < 0) first_config = r;
  }
  if (differ.empty()) return std::string();
  // Another runner may digest the same configuration differently: name the runner first.
  const int named = first_runner >= 0 ? first_runner : first_config;
  std::string refusal = Explain(named, all[static_cast<std::size_t>(named)], 0, mine);
  if (differ.size() > 1) refusal += " (ranks " + FormatRanks(differ) + " differ from rank 0)";
  return refusal;
}

}  // namespace

std::string EncodeFingerprint(const GangFingerprint& fingerprint) {
  const nlohmann::json j = {{"protocol", fingerprint.protocol},
                            {"runner", fingerprint.runner},
                            {"image", fingerprint.image},
                            {"config", fingerprint.config}};
  return j.dump();
}

std::optional<GangFingerprint> ParseFingerprint(const std::string& value) {
  const nlohmann::json j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto protocol = j.find("protocol");
  if (protocol == j.end() || !protocol->is_number_integer()) return std::nullopt;
  const auto text = [&j](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  GangFingerprint fp;
  fp.protocol = protocol->get<int>();
  fp.runner = text("runner");
  fp.image = text("image");
  fp.config = text("config");
  return fp;
}

std::string DescribeFingerprint(const GangFingerprint& fingerprint) {
  std::string out = "runner " + (fingerprint.runner.empty() ? "(unknown)" : fingerprint.runner) +
                    " protocol " + std::to_string(fingerprint.protocol);
  if (!fingerprint.image.empty()) out += " image " + fingerprint.image;
  return out;
}

Status PublishFingerprint(Store& round_store, int rank, const GangFingerprint& fingerprint) {
  return round_store.Set(FingerprintKey(rank), EncodeFingerprint(fingerprint))
      .WithContext("gang fingerprint");
}

StatusOr<FingerprintVerdict> AgreeOnFingerprints(Store& round_store, int rank, int world_size,
                                                 const GangFingerprint& mine, Duration timeout) {
  if (world_size <= 1) return FingerprintVerdict{};
  if (rank == 0) {
    ASSIGN_OR_RETURN(std::string refusal, Judge(round_store, world_size, mine));
    RETURN_IF_ERROR(round_store.Set(kVerdictKey, refusal.empty() ? kAgreed : refusal)
                        .WithContext("gang fingerprint verdict"));
    return FingerprintVerdict{std::move(refusal)};
  }
  // A rank 0 of another protocol (or from before the fingerprint) gives no verdict, or gives one
  // this rank cannot read: refused here, naming it.
  ASSIGN_OR_RETURN(const Published rank0, ReadPublished(round_store, 0));
  if (!rank0.fingerprint || rank0.fingerprint->protocol != mine.protocol) {
    return FingerprintVerdict{Explain(0, rank0, rank, mine)};
  }
  auto verdict = round_store.Get(kVerdictKey, timeout);
  if (!verdict.ok()) {
    if (verdict.status().code() == StatusCode::kDeadlineExceeded) {
      return DeadlineExceeded("rank 0 gave no verdict on the gang's fingerprints within " +
                              FormatDuration(timeout));
    }
    return verdict.status().WithContext("gang fingerprint verdict");
  }
  if (*verdict == kAgreed) return FingerprintVerdict{};
  return FingerprintVerdict{*verdict};
}

}  // namespace ringtrain::rendezvous
