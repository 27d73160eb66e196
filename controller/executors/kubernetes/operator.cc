#include "controller/executors/kubernetes/operator.h"

#include <spdlog/spdlog.h>

namespace ringtrain::op {

// The informers' objects, plus an index of pods by job that the pod informer's handlers keep
// (a reconcile must not scan every pod of the cluster).
class Operator::Cache final : public ClusterCache {
 public:
  explicit Cache(const std::unique_ptr<kube::Informer>* jobs) : jobs_(jobs) {}

  std::optional<Json> GetJob(const std::string& ns, const std::string& name) const override {
    return (*jobs_)->Get(ns, name);
  }
  std::vector<Json> JobPods(const std::string& ns, const std::string& job) const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Json> out;
    auto it = pods_.find({ns, job});
    if (it == pods_.end()) return out;
    for (const auto& [name, pod] : it->second) out.push_back(pod);
    return out;
  }

  void Upsert(const Json& pod) {
    auto [ns, job, name] = Names(pod);
    if (job.empty()) return;
    Json trimmed = TrimPodForCache(pod);
    std::lock_guard<std::mutex> lock(mu_);
    pods_[{ns, job}][name] = std::move(trimmed);
  }
  void Remove(const Json& pod) {
    auto [ns, job, name] = Names(pod);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find({ns, job});
    if (it == pods_.end()) return;
    it->second.erase(name);
    if (it->second.empty()) pods_.erase(it);
  }

  static std::tuple<std::string, std::string, std::string> Names(const Json& pod) {
    const Json meta = pod.value("metadata", Json::object());
    std::string job;
    if (auto l = meta.find("labels"); l != meta.end() && l->is_object()) {
      job = l->value(kJobLabel, "");
    }
    return {meta.value("namespace", ""), job, meta.value("name", "")};
  }

 private:
  const std::unique_ptr<kube::Informer>* jobs_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::map<std::string, Json>> pods_;
};

StatusOr<std::unique_ptr<Operator>> Operator::Create(kube::KubeClient* client,
                                                     OperatorOptions options,
                                                     ControllerMetrics* metrics,
                                                     const Clock* clock) {
  if (options.workers < 1) return InvalidArgument("--workers: must be at least 1");
  std::unique_ptr<Operator> op(new Operator(client, std::move(options), metrics, clock));
  if (op->options_.leader_elect) {
    kube::LeaderElectionConfig cfg = op->options_.election;
    Operator* self = op.get();
    cfg.on_started_leading = [self] {
      spdlog::info("leader election: this replica ({}) leads", self->options_.election.identity);
      self->leading_ = true;
      if (self->metrics_ != nullptr) self->metrics_->SetLeader(true);
      self->StartWorkers();
    };
    cfg.on_stopped_leading = [self] {
      if (!self->leading_.exchange(false)) return;
      if (!self->stopping_) {
        spdlog::error("leader election: lost the lease; stopping the workers");
        self->lost_leadership_ = true;
      }
      self->StopWorkers();
      // After the workers: a reconcile still running would set its job's series again.
      if (self->metrics_ != nullptr) self->metrics_->SetLeader(false);
    };
    cfg.on_new_leader = [](const std::string& id) {
      spdlog::info("leader election: the leader is {}", id.empty() ? "(none)" : id);
    };
    kube::KubeClient* election_client =
        op->options_.election_client != nullptr ? op->options_.election_client : client;
    auto elector = kube::LeaderElector::Create(election_client, std::move(cfg));
    if (!elector.ok()) return elector.status().WithContext("leader election");
    op->elector_ = std::move(*elector);
  }
  return op;
}

Operator::Operator(kube::KubeClient* client, OperatorOptions options, ControllerMetrics* metrics,
                   const Clock* clock)
    : client_(client),
      options_(std::move(options)),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : &real_clock_),
      queue_(options_.queue, clock_) {
  cache_ = std::make_unique<Cache>(&jobs_);
  events_ = std::make_unique<EventRecorder>(
      options_.events_client != nullptr ? options_.events_client : client_, "ringtrain-controller",
      options_.election.identity.empty() ? "ringtrain-controller" : options_.election.identity,
      EventRecorder::kMaxQueued, options_.events_abandoned);
  // A read of rank 0's /status that answers wakes its job's pass (status_readers > 0).
  options_.reconciler.status_read = [this](const std::string& key) { queue_.Add(key); };
  reconciler_ = std::make_unique<Reconciler>(client_, cache_.get(), clock_, events_.get(), metrics_,
                                             options_.reconciler);
  auto restarts = [this] {
    if (metrics_ != nullptr) metrics_->IncWatchRestarts();
  };

  kube::InformerOptions jobs;
  jobs.resource = kube::kTrainingJobs;
  jobs.ns = options_.ns;
  jobs.watch_timeout_seconds = options_.watch_timeout_seconds;
  jobs.on_add = jobs.on_update = jobs.on_delete = [this](const Json& j) { EnqueueJob(j); };
  jobs.on_watch_restart = restarts;
  jobs.on_relist = restarts;
  jobs.on_list_error = [this](const Status&) {
    if (metrics_ != nullptr) metrics_->IncListErrors(kube::kTrainingJobs.plural);
  };
  jobs_ = std::make_unique<kube::Informer>(client_, std::move(jobs));

  kube::InformerOptions pods;
  pods.resource = kube::kPods;
  pods.ns = options_.ns;
  pods.label_selector = kJobLabel;
  pods.watch_timeout_seconds = options_.watch_timeout_seconds;
  pods.transform = &TrimPodForCache;
  pods.on_add = pods.on_update = [this](const Json& p) {
    cache_->Upsert(p);
    EnqueuePod(p);
  };
  pods.on_delete = [this](const Json& p) {
    cache_->Remove(p);
    EnqueuePod(p);
  };
  pods.on_watch_restart = restarts;
  pods.on_relist = restarts;
  pods.on_list_error = [this](const Status&) {
    if (metrics_ != nullptr) metrics_->IncListErrors(kube::kPods.plural);
  };
  pods_ = std::make_unique<kube::Informer>(client_, std::move(pods));
}

Operator::~Operator() { Stop(); }

void Operator::EnqueueJob(const Json& job) {
  const Json meta = job.value("metadata", Json::object());
  queue_.Add(JobKey(meta.value("namespace", ""), meta.value("name", "")));
}

void Operator::EnqueuePod(const Json& pod) {
  auto [ns, job, name] = Cache::Names(pod);
  if (!job.empty()) queue_.Add(JobKey(ns, job));
}

void Operator::Start() {
  jobs_->Start();
  pods_->Start();
  if (elector_) {
    elector_->Start();
  } else {
    leading_ = true;
    if (metrics_ != nullptr) metrics_->SetLeader(true);
    StartWorkers();
  }
}

void Operator::StartWorkers() {
  std::lock_guard<std::mutex> lock(workers_mu_);
  if (stopping_ || !workers_.empty() || starter_.joinable()) return;
  // Workers wait for both caches: planning from half a cache would create pods that exist.
  starter_ = std::thread([this] {
    while (!stopping_ && leading_ && !Ready()) std::this_thread::sleep_for(Duration(20));
    std::lock_guard<std::mutex> lock(workers_mu_);
    if (stopping_ || !leading_) return;
    for (const Json& job : jobs_->List()) EnqueueJob(job);
    spdlog::info("caches synced; starting {} workers", options_.workers);
    for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Worker(); });
  });
}

void Operator::StopWorkers() {
  queue_.ShutDown();
  std::thread starter;
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    starter = std::move(starter_);
  }
  if (starter.joinable()) starter.join();
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    workers = std::move(workers_);
  }
  for (auto& w : workers) w.join();
}

void Operator::Worker() {
  while (auto key = queue_.Get()) {
    const auto slash = key->find('/');
    const std::string ns = key->substr(0, slash);
    const std::string name = key->substr(slash + 1);
    const SteadyTime start = clock_->SteadyNow();
    StatusOr<ReconcileResult> result = Internal("not reconciled");
    try {
      result = reconciler_->Reconcile(ns, name);
    } catch (const std::exception& e) {
      // The edge of the worker thread: an exception from a library (JSON of an unexpected
      // shape) becomes a retried error for this key, never a crashed controller.
      result = Internal(std::string("reconcile threw: ") + e.what());
    }
    if (metrics_ != nullptr) {
      metrics_->ObserveReconcile(
          std::chrono::duration<double>(clock_->SteadyNow() - start).count());
    }
    if (!result.ok()) {
      if (metrics_ != nullptr) metrics_->IncReconcileErrors();
      if (result.status().code() == StatusCode::kAborted) {
        spdlog::debug("reconcile {}: {} (retrying)", *key, result.status().ToString());
      } else {
        spdlog::warn("reconcile {}: {} (retry {})", *key, result.status().ToString(),
                     queue_.NumRequeues(*key) + 1);
      }
      queue_.AddRateLimited(*key);
    } else {
      queue_.Forget(*key);
      if (result->requeue_after) queue_.AddAfter(*key, *result->requeue_after);
    }
    queue_.Done(*key);
  }
}

void Operator::Stop() {
  if (stopping_.exchange(true)) return;
  StopWorkers();
  // The readers wake jobs through queue_, which is destroyed before the reconciler.
  reconciler_->StopStatusReads();
  // Events are writes too: the last ones go out while this replica still holds the lease.
  events_->Flush();
  if (elector_) elector_->Stop();
  leading_ = false;
  if (metrics_ != nullptr) metrics_->SetLeader(false);
  jobs_->Stop();
  pods_->Stop();
}

bool Operator::Ready() const { return jobs_->HasSynced() && pods_->HasSynced(); }

bool Operator::IsLeader() const { return leading_; }

}  // namespace ringtrain::op
