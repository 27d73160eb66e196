#include "controller/kube/leader_election.h"
#include "common/json_fields.h"

#include <spdlog/spdlog.h>

#include <algorithm>
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
  caller_ = std::thread([this] { CallerLoop(); });
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // From a callback (on one of the elector's own threads): the destructor joins them.
  const auto self = std::this_thread::get_id();
  if (thread_.get_id() == self || caller_.get_id() == self) return;
  if (thread_.joinable()) thread_.join();
  // The release has had its budget: a call still running (a hung plugin) is of no more use.
  if (config_.calls_abandoned != nullptr) config_.calls_abandoned->store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    caller_exit_ = true;
  }
  cv_.notify_all();
  if (caller_.joinable()) caller_.join();
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

std::optional<Status> LeaderElector::Call(std::function<Status()> call, SteadyTime deadline,
                                          bool stoppable) {
  // `deadline` is on the injected clock; the waits below are on the real one.
  const auto until = std::chrono::steady_clock::now() + (deadline - SteadyNow());
  std::unique_lock<std::mutex> lock(mu_);
  auto given_up = [&] { return stoppable && stopping_; };
  // A call that outlived its deadline may still be running: never two at once.
  if (!cv_.wait_until(lock, until, [&] { return done_ == posted_ || given_up(); }) || given_up()) {
    return std::nullopt;
  }
  call_ = std::move(call);
  const std::uint64_t mine = ++posted_;
  cv_.notify_all();
  if (!cv_.wait_until(lock, until, [&] { return done_ == mine || given_up(); }) || done_ != mine) {
    return std::nullopt;
  }
  return call_result_;
}

void LeaderElector::CallerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return caller_exit_ || done_ != posted_; });
    if (done_ == posted_) return;
    std::function<Status()> call = std::move(call_);
    const std::uint64_t serial = posted_;
    lock.unlock();
    Status result = call();
    lock.lock();
    call_result_ = std::move(result);
    done_ = serial;
    cv_.notify_all();
  }
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
  const std::string stamp = FormatMicroTime(Now());
  const SteadyTime now = SteadyNow();
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
  // Another holder's lease is timed from when its record reached us, after the Get (a slow Get
  // must not shorten the wait on it), as client-go does.
  const SteadyTime seen = SteadyNow();
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
    // Expiry is judged by our own monotonic clock from when we saw the record change (as
    // client-go does), never by comparing renewTime with our clock: the clocks of two replicas
    // may disagree, and a wall clock may jump.
    std::string record = spec.dump();
    if (record != observed_record_) {
      observed_record_ = record;
      observed_time_ = seen;
    }
    if (holder != observed_holder_) new_leader = holder;
    observed_holder_ = holder;
    observed_lease_ = lease;
    expired = observed_time_ + std::chrono::seconds(duration_s) <= seen;
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

Status LeaderElector::Release() {
  ASSIGN_OR_RETURN(Json lease, client_->Get(kLeases, config_.lease_namespace, config_.lease_name));
  if (!lease.contains("spec") || StringField(lease["spec"], "holderIdentity") != config_.identity) {
    return Status::Ok();
  }
  const std::string stamp = FormatMicroTime(Now());
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = stamp;
  lease["spec"]["acquireTime"] = stamp;
  return client_->Update(kLeases, config_.lease_namespace, lease).status();
}

void LeaderElector::Run() {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(1.0, 1.0 + kJitter);
  auto attempt = [this] { return TryAcquireOrRenew(); };
  for (;;) {
    // Campaign. `renewed_at` is when the last attempt that took or renewed the lease began: the
    // write that others see happened after it, so they wait a whole lease_duration from a
    // later moment than the renew_deadline this leader measures from it.
    SteadyTime renewed_at{};
    bool acquired = false;
    for (;;) {
      const SteadyTime start = SteadyNow();
      auto s = Call(attempt, start + config_.renew_deadline, /*stoppable=*/true);
      if (s && s->ok()) {
        acquired = true;
        renewed_at = start;
        break;
      }
      if (s && s->code() != StatusCode::kFailedPrecondition) {
        spdlog::debug("leader election: acquire failed: {}", s->ToString());
      }
      auto wait = Duration(static_cast<long long>(config_.retry_period.count() * jitter(rng)));
      if (!SleepUnlessStopped(wait)) break;
    }
    if (!acquired) return;
    SetLeader(true);
    // Lead: renew every retry period; step down when another holder shows up or when no renewal
    // succeeded by renew_deadline — also while a renewal is still waiting for the API server,
    // since a follower takes the lease once it expires whatever this replica is waiting for.
    bool stopping = false;
    for (;;) {
      const SteadyTime deadline = renewed_at + config_.renew_deadline;
      const Duration left = std::chrono::duration_cast<Duration>(deadline - SteadyNow());
      if (left.count() <= 0) {
        spdlog::warn("leader election: no renewal within the renew deadline ({})",
                     FormatDuration(config_.renew_deadline));
        break;
      }
      if (!SleepUnlessStopped(std::min(config_.retry_period, left))) {
        stopping = true;
        break;
      }
      const SteadyTime start = SteadyNow();
      if (start >= deadline) continue;
      auto s = Call(attempt, deadline, /*stoppable=*/true);
      if (!s) continue;  // the deadline passed or Stop() was called: the checks above say which
      if (s->ok()) {
        renewed_at = start;
        continue;
      }
      spdlog::warn("leader election: renew failed: {}", s->ToString());
      if (s->code() == StatusCode::kFailedPrecondition) break;
    }
    SetLeader(false);
    if (stopping) {
      if (config_.release_on_stop) {
        auto released = Call([this] { return Release(); }, SteadyNow() + config_.release_timeout,
                             /*stoppable=*/false);
        if (!released || !released->ok()) {
          spdlog::warn("leader election: release of {}/{} failed: {}", config_.lease_namespace,
                       config_.lease_name,
                       released ? released->ToString()
                                : "no answer within " + FormatDuration(config_.release_timeout));
        }
      }
      return;
    }
  }
}

}  // namespace ringtrain::kube
