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

// The configuration fields a refusal names at most, and how much of each value it shows: the
// refusal ends up in the termination log (4096 bytes) and in the job's status.
constexpr std::size_t kNamedFields = 4;
constexpr std::size_t kShownField = 60;
// A whole refusal, a bound whatever a gang publishes (a long list of differing ranks included):
// it must leave room in the 4096-byte termination log for the cause's context.
constexpr std::size_t kMaxRefusal = 2048;

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

// A peer's string as a refusal may show it: control characters (a refusal is one line of a
// termination log) as '?', and at most `limit` bytes, "..." included, cut at a UTF-8
// character's start. A string that fits is returned as it is (so a refusal passed on is not
// cut twice).
std::string Shown(const std::string& value, std::size_t limit = kShownField) {
  std::size_t end = value.size();
  if (end > limit) {
    end = limit - 3;
    while (end > 0 && (static_cast<unsigned char>(value[end]) & 0xC0) == 0x80) --end;
  }
  std::string out = value.substr(0, end);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) c = '?';
  }
  return end < value.size() ? out + "..." : out;
}

// A peer's fingerprint as a refusal shows it (DescribeFingerprint of Shown strings).
GangFingerprint ShownFingerprint(const GangFingerprint& fp) {
  GangFingerprint out;
  out.protocol = fp.protocol;
  out.runner = Shown(fp.runner);
  out.image = Shown(fp.image, kShownValue);
  out.config = Shown(fp.config);
  return out;
}

// " in batch_size (64 vs 32), seed (2 vs 1)": the fields whose values differ, theirs first, in
// the configuration line's order; a field only one side has reads "(none)" on the other. "" when
// either side published no fields, or when the fields agree although the digests do not (values
// that differ only in bytes that are not UTF-8, which travel replaced): the digests say it then.
std::string NameDifferences(const std::vector<std::pair<std::string, std::string>>& theirs,
                            const std::vector<std::pair<std::string, std::string>>& mine) {
  if (theirs.empty() || mine.empty()) return "";
  const auto find = [](const auto& fields, const std::string& key) -> const std::string* {
    for (const auto& [k, v] : fields) {
      if (k == key) return &v;
    }
    return nullptr;
  };
  std::vector<std::string> named;
  std::size_t differing = 0;
  const auto note = [&](const std::string& key, const std::string* their_value,
                        const std::string* my_value) {
    if (their_value != nullptr && my_value != nullptr && *their_value == *my_value) return;
    if (++differing > kNamedFields) return;
    named.push_back(Shown(key) + " (" + (their_value ? Shown(*their_value) : "(none)") + " vs " +
                    (my_value ? Shown(*my_value) : "(none)") + ")");
  };
  for (const auto& [key, value] : mine) note(key, find(theirs, key), &value);
  for (const auto& [key, value] : theirs) {
    if (find(mine, key) == nullptr) note(key, &value, nullptr);
  }
  if (named.empty()) return "";
  std::string out = " in ";
  for (std::size_t i = 0; i < named.size(); ++i) out += (i == 0 ? "" : ", ") + named[i];
  if (differing > named.size()) {
    out += " and " + std::to_string(differing - named.size()) + " more field" +
           (differing - named.size() == 1 ? "" : "s");
  }
  return out;
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
    const std::string shown = Shown(theirs.raw, kShownValue);
    return them + " published a gang fingerprint this runner cannot read (\"" + shown + "\") but " +
           my_runner + std::string(kSameRunner);
  }
  const GangFingerprint& fp = *theirs.fingerprint;
  if (!SameRunner(fp, mine)) {
    return them + " runs " + DescribeFingerprint(ShownFingerprint(fp)) + " but " + my_runner +
           std::string(kSameRunner);
  }
  return them + "'s training configuration differs from " + me + "'s" +
         NameDifferences(fp.config_fields, mine.config_fields) + " (digest " + Shown(fp.config) +
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
  return Shown(refusal, kMaxRefusal);
}

}  // namespace

std::string EncodeFingerprint(const GangFingerprint& fingerprint) {
  nlohmann::json j = {{"protocol", fingerprint.protocol},
                      {"runner", fingerprint.runner},
                      {"image", fingerprint.image},
                      {"config", fingerprint.config}};
  if (!fingerprint.config_fields.empty()) {
    nlohmann::json fields = nlohmann::json::array();
    for (const auto& [key, value] : fingerprint.config_fields) {
      fields.push_back(nlohmann::json::array({key, value}));
    }
    j["config_fields"] = std::move(fields);
  }
  // A value that is not UTF-8 (a dataset path) is replaced, not thrown on.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
  // Fields are read only where the whole list is well formed: half a list would name
  // differences that are not there.
  if (const auto fields = j.find("config_fields"); fields != j.end() && fields->is_array()) {
    for (const auto& f : *fields) {
      if (!f.is_array() || f.size() != 2 || !f[0].is_string() || !f[1].is_string()) {
        fp.config_fields.clear();
        break;
      }
      fp.config_fields.emplace_back(f[0].get<std::string>(), f[1].get<std::string>());
    }
  }
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
                                                 const GangFingerprint& own, Duration timeout) {
  if (world_size <= 1) return FingerprintVerdict{};
  // Compared as the others read it: a string that is not UTF-8 travels with its bad bytes
  // replaced, so two ranks of the same such image must compare the replaced forms.
  const GangFingerprint mine = ParseFingerprint(EncodeFingerprint(own)).value_or(own);
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
  return FingerprintVerdict{Shown(*verdict, kMaxRefusal)};
}

}  // namespace ringtrain::rendezvous
