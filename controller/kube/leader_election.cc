#include "controller/kube/leader_election.h"
#include "common/json_fields.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <ctime>
#include <random>

namespace ringtrain::kube {
namespace {

// client-go's JitterFactor: acquisition attempts are spread over [retry, 1.2 × retry].
constexpr double kJitter = 0.2;

int LeaseSeconds(Duration d) {
  auto s = (d.count() + 999) / 1000;
  return static_cast<int>(std::max<long long>(1, s));
}

}  // namespace

std::string FormatMicroTime(WallTime t) {
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(micros / 1'000'000);
  long frac = static_cast<long>(micros % 1'000'000);
  if (frac < 0) {
    frac += 1'000'000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::Create(KubeClient* client,
                                                               LeaderElectionConfig config) {
  if (client == nullptr) return InvalidArgument("leader election: no client");
  if (config.identity.empty()) return InvalidArgument("leader election: identity is empty");
  if (config.lease_name.empty()) return InvalidArgument("leader election: lease name is empty");
  if (config.retry_period.count() <= 0 ||
      config.renew_deadline.count() <= (1.0 + kJitter) * config.retry_period.count()) {
    return InvalidArgument("leader election: renew_deadline must exceed 1.2 × retry_period");
  }
  if (config.lease_duration <= config.renew_deadline) {
    return InvalidArgument("leader election: lease_duration must exceed renew_deadline");
  }
  return std::unique_ptr<LeaderElector>(new LeaderElector(client, std::move(config)));
}

LeaderElector::LeaderElector(KubeClient* client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool LeaderElector::IsLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_;
}

std::string LeaderElector::CurrentLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return observed_holder_;
}

WallTime LeaderElector::Now() const {
  return config_.clock != nullptr ? config_.clock->Now() : real_clock_.Now();
}

SteadyTime LeaderElector::SteadyNow() const {
  return config_.clock != nullptr ? config_.clock->SteadyNow() : real_clock_.SteadyNow();
}

bool LeaderElector::SleepUnlessStopped(Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stopping_; });
}

void LeaderElector::SetLeader(bool leader) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leader_ == leader) return;
    leader_ = leader;
  }
  spdlog::info("leader election: {} {} lease {}/{}", config_.identity, leader ? "acquired" : "lost",
               config_.lease_namespace, config_.lease_name);
  if (leader && config_.on_started_leading) config_.on_started_leading();
  if (!leader && config_.on_stopped_leading) config_.on_stopped_leading();
}

Status LeaderElector::TryAcquireOrRenew() {
  const WallTime now = Now();
  const std::string stamp = FormatMicroTime(now);
  auto got = client_->Get(kLeases, config_.lease_namespace, config_.lease_name);
  if (!got.ok() && got.status().code() != StatusCode::kNotFound) return got.status();
  if (!got.ok()) {
    Json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec",
         {{"holderIdentity", config_.identity},
          {"leaseDurationSeconds", LeaseSeconds(config_.lease_duration)},
          {"acquireTime", stamp},
          {"renewTime", stamp},
          {"leaseTransitions", 0}}}};
    ASSIGN_OR_RETURN(Json created, client_->Create(kLeases, config_.lease_namespace, lease));
    std::lock_guard<std::mutex> lock(mu_);
    observed_lease_ = created;
    observed_record_ = created["spec"].dump();
    observed_time_ = now;
    observed_holder_ = config_.identity;
    return Status::Ok();
  }
  Json lease = std::move(*got);
  Json spec = lease.contains("spec") && lease["spec"].is_object() ? lease["spec"] : Json::object();
  std::string holder = spec.contains("holderIdentity") && spec["holderIdentity"].is_string()
                           ? spec["holderIdentity"].get<std::string>()
                           : "";
  long long duration_s =
      IntField(spec, "leaseDurationSeconds", LeaseSeconds(config_.lease_duration));
  std::string new_leader;
  bool expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Expiry is judged by our own clock from when we saw the record change (as client-go does),
    // never by comparing renewTime with our clock: the clocks of two replicas may disagree.
    std::string record = spec.dump();
    if (record != observed_record_) {
      observed_record_ = record;
      observed_time_ = now;
    }
    if (holder != observed_holder_) new_leader = holder;
    observed_holder_ = holder;
    observed_lease_ = lease;
    expired = observed_time_ + std::chrono::seconds(duration_s) <= now;
  }
  if (!new_leader.empty() && config_.on_new_leader) config_.on_new_leader(new_leader);
  if (!holder.empty() && holder != config_.identity && !expired) {
    return FailedPrecondition("lease " + config_.lease_name + " is held by " + holder);
  }
  Json next = spec;
  next["holderIdentity"] = config_.identity;
  next["leaseDurationSeconds"] = LeaseSeconds(config_.lease_duration);
  next["renewTime"] = stamp;
  if (holder != config_.identity) {
    next["acquireTime"] = stamp;
    next["leaseTransitions"] = IntField(spec, "leaseTransitions") + 1;
  }
  lease["spec"] = next;
  // metadata.resourceVersion stays as read: a 409 means another replica wrote first.
  ASSIGN_OR_RETURN(Json updated, client_->Update(kLeases, config_.lease_namespace, lease));
  std::lock_guard<std::mutex> lock(mu_);
  observed_lease_ = updated;
  observed_record_ = updated.contains("spec") ? updated["spec"].dump() : next.dump();
  observed_time_ = now;
  observed_holder_ = config_.identity;
  return Status::Ok();
}

void LeaderElector::Release() {
  auto got = client_->Get(kLeases, config_.lease_namespace, config_.lease_name);
  if (!got.ok()) return;
  Json lease = std::move(*got);
  if (!lease.contains("spec") || StringField(lease["spec"], "holderIdentity") != config_.identity) {
    return;
  }
  const std::string stamp = FormatMicroTime(Now());
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = stamp;
  lease["spec"]["acquireTime"] = stamp;
  auto released = client_->Update(kLeases, config_.lease_namespace, lease);
  if (!released.ok()) {
    spdlog::warn("leader election: release of {}/{} failed: {}", config_.lease_namespace,
                 config_.lease_name, released.status().ToString());
  }
}

void LeaderElector::Run() {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(1.0, 1.0 + kJitter);
  for (;;) {
    // Campaign.
    bool acquired = false;
    for (;;) {
      Status s = TryAcquireOrRenew();
      if (s.ok()) {
        acquired = true;
        break;
      }
      if (s.code() != StatusCode::kFailedPrecondition) {
        spdlog::debug("leader election: acquire failed: {}", s.ToString());
      }
      auto wait = Duration(static_cast<long long>(config_.retry_period.count() * jitter(rng)));
      if (!SleepUnlessStopped(wait)) break;
    }
    if (!acquired) return;
    SetLeader(true);
    // Lead: renew every retry period; step down when another holder shows up or when no renewal
    // succeeded for renew_deadline.
    auto last_renew = SteadyNow();
    bool stopping = false;
    for (;;) {
      if (!SleepUnlessStopped(config_.retry_period)) {
        stopping = true;
        break;
      }
      Status s = TryAcquireOrRenew();
      if (s.ok()) {
        last_renew = SteadyNow();
        continue;
      }
      spdlog::warn("leader election: renew failed: {}", s.ToString());
      if (s.code() == StatusCode::kFailedPrecondition) break;
      if (SteadyNow() - last_renew >= config_.renew_deadline) break;
    }
    SetLeader(false);
    if (stopping) {
      if (config_.release_on_stop) Release();
      return;
    }
  }
}

}  // namespace ringtrain::kube
