#include "common/runner_status.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/http.h"
#include "common/runner_contract.h"
#include "common/utf8.h"

namespace ringtrain::contract {
namespace {

using nlohmann::json;

// The field, or nullptr when absent or null (the runner writes a NaN loss as null).
const json* Field(const json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Status ReadInt(const json& obj, std::string_view key, std::int64_t max, std::int64_t* out) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (v->is_number_unsigned()) {
    if (v->get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      return InvalidArgument("/status: " + std::string(key) + ": out of range");
    }
    *out = static_cast<std::int64_t>(v->get<std::uint64_t>());
    return Status::Ok();
  }
  if (!v->is_number_integer()) {
    return InvalidArgument("/status: " + std::string(key) + ": must be an integer");
  }
  const std::int64_t n = v->get<std::int64_t>();
  if (n < 0 || n > max) return InvalidArgument("/status: " + std::string(key) + ": out of range");
  *out = n;
  return Status::Ok();
}

// `non_negative`: a rate or a duration, which the job's status (the CRD's minimum: 0) refuses
// below zero: a negative one in the status write would be refused by the API server forever.
Status ReadNumber(const json& obj, std::string_view key, double* out, bool non_negative = false) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number())
    return InvalidArgument("/status: " + std::string(key) + ": must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return Status::Ok();  // not representable in the job's status
  if (non_negative && d < 0) {
    return InvalidArgument("/status: " + std::string(key) + ": out of range (negative)");
  }
  *out = d;
  return Status::Ok();
}

Status ReadString(const json& obj, std::string_view key, std::string* out) {
  const json* v = Field(obj, key);
  if (v == nullptr) return Status::Ok();
  if (!v->is_string())
    return InvalidArgument("/status: " + std::string(key) + ": must be a string");
  // Goes into the job's status and events: one bounded line.
  constexpr std::size_t kMaxText = 1024;
  std::string s = v->get<std::string>();
  // Cut between characters: the parse took valid UTF-8 only, and the job's status must stay so.
  s.resize(Utf8Cut(s, kMaxText));
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace

StatusOr<RunnerStatus> ParseRunnerStatus(std::string_view body) {
  if (body.size() > kMaxStatusBytes) {
    return InvalidArgument("/status: larger than " + std::to_string(kMaxStatusBytes) + " bytes");
  }
  // No exceptions (allow_exceptions=false); invalid UTF-8 and depth are errors of the parse.
  const json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("/status: not valid JSON");
  if (!j.is_object()) return InvalidArgument("/status: not a JSON object");
  RunnerStatus r;
  RETURN_IF_ERROR(ReadInt(j, "step", std::numeric_limits<std::int64_t>::max(), &r.step));
  std::int64_t epoch = 0;
  RETURN_IF_ERROR(ReadInt(j, "epoch", std::numeric_limits<int>::max(), &epoch));
  r.epoch = static_cast<int>(epoch);
  RETURN_IF_ERROR(ReadNumber(j, "samplesPerSecond", &r.samples_per_second, true));
  if (Field(j, "samplesPerSecond") == nullptr) {
    RETURN_IF_ERROR(ReadNumber(j, "samples_per_second", &r.samples_per_second, true));
  }
  RETURN_IF_ERROR(ReadNumber(j, "loss", &r.loss));
  // The runner writes "test_accuracy" and "test_mse"; "testAccuracy" and "testMSE" are read
  // first, as samples/s is.
  const char* accuracy = Field(j, "testAccuracy") != nullptr ? "testAccuracy" : "test_accuracy";
  RETURN_IF_ERROR(ReadNumber(j, accuracy, &r.test_accuracy, true));
  if (r.test_accuracy > 1) {
    return InvalidArgument("/status: " + std::string(accuracy) + ": out of range (above 1)");
  }
  const char* mse = Field(j, "testMSE") != nullptr ? "testMSE" : "test_mse";
  RETURN_IF_ERROR(ReadNumber(j, mse, &r.test_mse, true));
  RETURN_IF_ERROR(ReadString(j, "state", &r.state));
  RETURN_IF_ERROR(ReadString(j, kStatusResumeWarning, &r.resume_warning));
  constexpr auto kMaxInt64 = std::numeric_limits<std::int64_t>::max();
  RETURN_IF_ERROR(ReadInt(j, kStatusStartStep, kMaxInt64, &r.start_step));
  std::int64_t recoveries = 0;
  RETURN_IF_ERROR(ReadInt(j, kStatusRecoveries, std::numeric_limits<int>::max(), &recoveries));
  r.recoveries = static_cast<int>(recoveries);
  RETURN_IF_ERROR(ReadInt(j, kStatusRecoveryStepsLost, kMaxInt64, &r.recovery_steps_lost));
  RETURN_IF_ERROR(ReadNumber(j, kStatusRecoverySeconds, &r.recovery_seconds, true));
  RETURN_IF_ERROR(ReadInt(j, kStatusLastRecoveryStep, kMaxInt64, &r.last_recovery_step));
  RETURN_IF_ERROR(ReadString(j, kStatusRecoveryCause, &r.recovery_cause));
  RETURN_IF_ERROR(ReadNumber(j, kStatusRecoveringSeconds, &r.recovering_seconds, true));
  return r;
}

StatusOr<RunnerStatus> FetchRunnerStatus(const std::string& host, int port, Duration timeout) {
  auto reply = http::Get(host, port, "/status", timeout, kMaxStatusBytes + 4096);
  if (!reply.ok()) return Unavailable(reply.status().message());
  if (reply->code != 200) {
    return Unavailable("GET /status: HTTP " + std::to_string(reply->code));
  }
  return ParseRunnerStatus(reply->body);
}

}  // namespace ringtrain::contract
