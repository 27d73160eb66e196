#include "runner/rendezvous/failure.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "common/runner_contract.h"
#include "common/stop.h"

namespace ringtrain::rendezvous {
namespace {

constexpr std::string_view kDetectedBy = " (detected by rank ";
constexpr std::string_view kExitCode = ", exit code ";

bool ParseInt(std::string_view s, int& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out >= 0;
}

// Whether this error can be a consequence of another rank's failure.
bool MayBeConsequence(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted;
}

}  // namespace

std::string EncodeFailure(const FailureRecord& record) {
  std::string out = record.cause;
  out += kDetectedBy;
  out += std::to_string(record.rank);
  if (record.exit_code) {
    out += kExitCode;
    out += std::to_string(*record.exit_code);
  }
  out += ")";
  return out;
}

std::optional<FailureRecord> ParseFailure(const std::string& value) {
  auto at = value.rfind(kDetectedBy);
  if (at == std::string::npos || value.empty() || value.back() != ')') return std::nullopt;
  std::string_view tail(value);
  tail = tail.substr(at + kDetectedBy.size());
  tail.remove_suffix(1);
  FailureRecord r;
  r.cause = value.substr(0, at);
  auto comma = tail.find(kExitCode);
  int code = 0;
  if (comma != std::string_view::npos) {
    if (!ParseInt(tail.substr(comma + kExitCode.size()), code) || code > 255) return std::nullopt;
    r.exit_code = code;
    tail = tail.substr(0, comma);
  }
  if (!ParseInt(tail, r.rank)) return std::nullopt;
  return r;
}

namespace {

FailureRecord RecordOf(const std::string& value) {
  if (auto parsed = ParseFailure(value)) return *parsed;
  FailureRecord raw;
  raw.cause = value;
  return raw;
}

}  // namespace

void GangFailure::AwaitRootCause() const {
  StopExemptScope exempt;
  (void)store_.Get(kFailureKey, kRootCauseGrace);
}

StatusOr<FailureRecord> GangFailure::Publish(const Status& cause) const {
  StopExemptScope exempt;
  const std::string mine = EncodeFailure({rank_, cause.ToString(), std::nullopt});
  ASSIGN_OR_RETURN(const std::string first,
                   store_.CompareSetWithin(kFailureKey, "", mine, kFailureReportTimeout));
  return RecordOf(first.empty() ? mine : first);
}

StatusOr<std::optional<FailureRecord>> GangFailure::Probe() const {
  StopExemptScope exempt;
  Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto value = store_.Get(kFailureKey, Duration::zero());
    if (value.ok()) {
      if (value->empty()) return std::optional<FailureRecord>();
      return std::optional<FailureRecord>(RecordOf(*value));
    }
    const StatusCode code = value.status().code();
    // Nothing recorded yet (or a slow store: the caller's own timeout decides).
    if (code == StatusCode::kDeadlineExceeded || code == StatusCode::kNotFound) {
      return std::optional<FailureRecord>();
    }
    last = value.status();
  }
  return Unavailable("lost the rendezvous store (rank 0): " + last.message());
}

std::string GangFailure::Describe(const FailureRecord& record) {
  if (record.rank < 0) return record.cause;
  return record.cause + " (rank " + std::to_string(record.rank) + ")";
}

FailureReport ResolveFailure(Store& store, int rank, const Status& own, int own_exit_code) {
  FailureReport mine{own.ToString(), own_exit_code};
  FailureRecord record{rank, own.ToString(), own_exit_code};
  // A failure this rank already knows to be another's ("caused by rank R: <cause>", as rank 0's
  // start failure reaches the others): reported as it is, and published as rank R's.
  if (const std::string& m = own.message(); m.starts_with(contract::kCausedByPrefix)) {
    const std::size_t digits = contract::kCausedByPrefix.size();
    const std::size_t colon = m.find(": ", digits);
    if (colon != std::string::npos && colon > digits && colon - digits <= 9 &&
        std::all_of(m.begin() + static_cast<std::ptrdiff_t>(digits),
                    m.begin() + static_cast<std::ptrdiff_t>(colon),
                    [](char c) { return c >= '0' && c <= '9'; })) {
      mine.message = m;
      record = {std::stoi(m.substr(digits, colon - digits)), m.substr(colon + 2), own_exit_code};
    }
  }
  StopExemptScope exempt;
  auto first =
      store.CompareSetWithin(kFailureKey, "", EncodeFailure(record), kFailureReportTimeout);
  if (!first.ok() || !MayBeConsequence(own)) return mine;
  auto parsed = ParseFailure(*first);
  if (!parsed || parsed->rank == rank) return mine;
  FailureReport theirs;
  theirs.message =
      std::string(contract::kCausedByPrefix) + std::to_string(parsed->rank) + ": " + parsed->cause;
  theirs.exit_code = parsed->exit_code.value_or(kExitRetryable);
  return theirs;
}

}  // namespace ringtrain::rendezvous
