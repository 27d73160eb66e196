// The reconciler against an in-memory KubeClient and a cache the test controls (so it can be
// stale on purpose), plus the work queue.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/time_format.h"
#include "controller/executors/kubernetes/controller_metrics.h"
#include "controller/executors/kubernetes/pod_builder.h"
#include "controller/executors/kubernetes/reconciler.h"
#include "controller/runtime/event_recorder.h"
#include "controller/runtime/work_queue.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_kube_client.h"

namespace ringtrain::op {
namespace {

using kube::testing::FakeKubeClient;

class SnapshotCache final : public ClusterCache {
 public:
  std::optional<Json> GetJob(const std::string&, const std::string&) const override { return job; }
  std::vector<Json> JobPods(const std::string&, const std::string&) const override { return pods; }
  // Copies what the client holds now, as an informer that caught up would.
  void CatchUp(FakeKubeClient& client) {
    auto j = client.Get(kube::kTrainingJobs, "default", "mnist");
    job = j.ok() ? std::optional<Json>(*j) : std::nullopt;
    auto list = client.List(kube::kPods, "default", {"ringtrain.dev/job=mnist"});
    pods = list->at("items").get<std::vector<Json>>();
  }
  std::optional<Json> job;
  std::vector<Json> pods;
};

// The shared fake clock (tests/fakes/fake_clock.h) starts here, in 2027, and moves only when a
// test says so.
const WallTime kClockStart{std::chrono::seconds(1'800'000'000)};

Json Job(int replicas, Json extra = Json::object()) {
  Json j = {{"apiVersion", "ringtrain.dev/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", "mnist"}, {"namespace", "default"}, {"generation", 1}}},
            {"spec", {{"replicas", replicas}, {"train", {{"epochs", 1}}}}}};
  j.merge_patch(extra);
  return j;
}

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ReconcilerOptions options;
    options.expectations_timeout = std::chrono::hours(1);
    reconciler_ = std::make_unique<Reconciler>(
        &client_, &cache_, &clock_, nullptr, nullptr, options,
        [](const std::string&, int, Duration) { return std::nullopt; });
  }
  void CreateJob(const Json& job) {
    ASSERT_TRUE(client_.Create(kube::kTrainingJobs, "default", job).ok());
    cache_.CatchUp(client_);
  }
  // The job created, its two pods placed and running, the job Running: a gang at work.
  void RunTwoRankGang(const Json& job) {
    ASSERT_NO_FATAL_FAILURE(CreateJob(job));
    ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
    SetPodPhase("mnist-a0-0", "Running");
    SetPodPhase("mnist-a0-1", "Running");
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
    ASSERT_EQ(Status()["phase"], "Running");
  }
  // RunTwoRankGang, then rank 1's pod deleted by someone and one pass over it; the survivor's
  // pod UID in *survivor_uid.
  void DeleteRankOneOfARunningGang(std::string* survivor_uid) {
    ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2)));
    *survivor_uid = client_.Get(kube::kPods, "default", "mnist-a0-0")->at("metadata").at("uid");
    cache_.CatchUp(client_);
    ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-1", {}).ok());
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  }
  Json Status() { return client_.Get(kube::kTrainingJobs, "default", "mnist")->at("status"); }
  void SetPodPhase(const std::string& name, const std::string& phase, int exit_code = -1) {
    Json pod = *client_.Get(kube::kPods, "default", name);
    pod["status"] = {{"phase", phase}, {"podIP", "10.0.0.1"}};
    if (exit_code >= 0) {
      pod["status"]["containerStatuses"] = {
          {{"name", "runner"}, {"state", {{"terminated", {{"exitCode", exit_code}}}}}}};
    }
    client_.Set(kube::kPods, "default", pod);
  }
  // Someone deleted the pod (its deletionTimestamp, kept when it has one) and its runner ended
  // now with `exit_code`: 143 when it answered the SIGTERM, 137 when the kubelet killed it at
  // the end of its grace period.
  void EndOfADeletion(const std::string& name, int exit_code) {
    Json pod = *client_.Get(kube::kPods, "default", name);
    if (!pod["metadata"].contains("deletionTimestamp")) {
      pod["metadata"]["deletionTimestamp"] = FormatRfc3339(clock_.Now() + std::chrono::seconds(30));
    }
    pod["status"]["phase"] = "Failed";
    pod["status"]["containerStatuses"] = {{{"name", "runner"},
                                           {"state",
                                            {{"terminated",
                                              {{"exitCode", exit_code},
                                               {"reason", "Error"},
                                               {"finishedAt", FormatRfc3339(clock_.Now())}}}}}}};
    client_.Set(kube::kPods, "default", pod);
  }

  FakeKubeClient client_;
  SnapshotCache cache_;
  testing::FakeClock clock_{kClockStart};
  std::unique_ptr<Reconciler> reconciler_;
};

TEST_F(ReconcilerTest, CreatesTheGangOnceEvenWhileTheCacheIsStale) {
  CreateJob(Job(3));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("create", "pods"), 3);
  EXPECT_EQ(client_.CountWrites("create", "secrets"), 1);
  EXPECT_EQ(client_.CountWrites("create", "services"), 1);
  EXPECT_EQ(Status()["phase"], "Pending");
  // The cache has seen neither the pods nor the status: nothing may be done again.
  for (int i = 0; i < 3; ++i) {
    auto r = reconciler_->Reconcile("default", "mnist");
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->requeue_after.has_value());
  }
  EXPECT_EQ(client_.CountWrites("create", "pods"), 3);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("create", "pods"), 3);
}

TEST_F(ReconcilerTest, FailedCreateIsRetriedWithoutWaitingForTheCache) {
  CreateJob(Job(2));
  client_.FailNext("create", "pods", Unavailable("apiserver down"), 1);
  EXPECT_FALSE(reconciler_->Reconcile("default", "mnist").ok());
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  cache_.CatchUp(client_);
  auto pods = client_.List(kube::kPods, "default", {"ringtrain.dev/job=mnist"});
  EXPECT_EQ(pods->at("items").size(), 2u);
}

// runPolicy.recovery GangRestart: any lost replica restarts the whole gang.
const Json kGangRestart = {{"spec", {{"runPolicy", {{"recovery", "GangRestart"}}}}}};

TEST_F(ReconcilerTest, RetryableExitRestartsTheWholeGangAndPermanentExitFails) {
  CreateJob(Job(2, kGangRestart));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Failed", 137);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Status()["restarts"], 1);
  EXPECT_EQ(Status()["attempt"], 1);
  EXPECT_EQ(Status()["lastFailure"]["exitCode"], 137);
  // Status before pods: both old pods are gone, the new gang comes next.
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 2);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a1-0").ok());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a1-1").ok());

  SetPodPhase("mnist-a1-0", "Failed", 3);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Failed");
  EXPECT_EQ(Status()["lastFailure"]["exitCode"], 3);
}

// A gang restart after a failure deletes the ranks other than 0 with a grace of 1 s: only rank
// 0 has work left (the save of the state it kept); a hung rank held the next attempt back for
// its pod's whole 30 s. Rank 0's pod keeps its own grace.
TEST_F(ReconcilerTest, AGangRestartAfterAFailureGivesOnlyRankZeroItsGrace) {
  CreateJob(Job(3, kGangRestart));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Failed", 138);
  SetPodPhase("mnist-a0-2", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ASSERT_EQ(Status()["attempt"], 1);
  std::map<std::string, std::optional<std::int64_t>> grace;
  for (const auto& w : client_.Writes()) {
    if (w.verb == "delete" && w.plural == "pods") grace[w.name] = w.grace;
  }
  ASSERT_EQ(grace.size(), 3u);
  EXPECT_EQ(grace["mnist-a0-0"], std::nullopt) << "rank 0 keeps its pod's grace to save";
  EXPECT_EQ(grace["mnist-a0-1"], 1);
  EXPECT_EQ(grace["mnist-a0-2"], 1);
}

TEST_F(ReconcilerTest, APodDeletedBySomeoneRestartsTheGang) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2, kGangRestart)));
  cache_.CatchUp(client_);
  ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-1", {}).ok());
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Status()["attempt"], 1);
  EXPECT_EQ(Status()["restarts"], 0) << "a deleted pod is not counted against backoffLimit";
  EXPECT_EQ(Status()["lastFailure"]["reason"], "Deleted");
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
}

// Recorded on a real cluster: each pod's sidecar exited 3, then its runner exited 0, so the
// kubelet made the pod Failed, and the operator (scaled to 0) first saw the pods that way. The
// job trained to the end: it succeeded, with no restart (it used to fail, restarts 0).
TEST_F(ReconcilerTest, PodsFailedOnlyByTheirSidecarAfterTheRunnerSucceededRecordedOnARealCluster) {
  std::ifstream in(std::string(RINGTRAIN_SOURCE_DIR) +
                   "/tests/integration/operator/testdata/real-pod-sidecar-failed.json");
  const Json recorded = Json::parse(in);
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2)));
  for (int r = 0; r < 2; ++r) {
    const std::string name = "mnist-a0-" + std::to_string(r);
    Json pod = *client_.Get(kube::kPods, "default", name);
    pod["status"] = recorded.at("rank" + std::to_string(r)).at("status");
    ASSERT_EQ(pod["status"]["phase"], "Failed");
    client_.Set(kube::kPods, "default", pod);
  }
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Succeeded") << Status().dump();
  EXPECT_EQ(Status().value("restarts", 0), 0);
  EXPECT_FALSE(Status().contains("lastFailure")) << Status().dump();
}

// runPolicy.recovery InPlace (the default): only the deleted pod comes back, under its own name
// in the same attempt; the survivor keeps running (same UID) and hands its state over.
TEST_F(ReconcilerTest, APodDeletedBySomeoneIsReplacedAloneInPlace) {
  std::string survivor_uid;
  ASSERT_NO_FATAL_FAILURE(DeleteRankOneOfARunningGang(&survivor_uid));
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Status()["attempt"], 0);
  EXPECT_EQ(Status()["restarts"], 0) << "a deleted pod is not counted against backoffLimit";
  EXPECT_EQ(Status()["inPlaceRecoveries"], 1);
  EXPECT_EQ(Status()["lastFailure"]["reason"], "Deleted");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  auto replacement = client_.Get(kube::kPods, "default", "mnist-a0-1");
  ASSERT_TRUE(replacement.ok()) << "the lost rank comes back under its own name";
  auto survivor = client_.Get(kube::kPods, "default", "mnist-a0-0");
  ASSERT_TRUE(survivor.ok());
  EXPECT_EQ(survivor->at("metadata").at("uid"), survivor_uid) << "the survivor was left alone";
  // The replacement's runner waits for the survivors' state.
  bool recovery_env = false;
  for (const auto& e : replacement->at("spec").at("containers").at(0).at("env")) {
    recovery_env = recovery_env || e.value("name", "") == "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS";
  }
  EXPECT_TRUE(recovery_env);
  EXPECT_EQ(replacement->at("spec").value("terminationGracePeriodSeconds", 0), 30);
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Running");
  EXPECT_EQ(Status()["inPlaceRecoveries"], 1);
}

TEST_F(ReconcilerTest, InvalidSpecFailsOnceWithTheReason) {
  CreateJob(Job(2, {{"spec", {{"backend", "nccl"}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  Json st = Status();
  EXPECT_EQ(st["phase"], "Failed");
  ASSERT_EQ(st["conditions"].size(), 1u);
  EXPECT_EQ(st["conditions"][0]["reason"], "InvalidSpec");
  EXPECT_NE(st["conditions"][0]["message"].get<std::string>().find("spec.backend"),
            std::string::npos);
  cache_.CatchUp(client_);
  const int writes = static_cast<int>(client_.Writes().size());
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(static_cast<int>(client_.Writes().size()), writes);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 0);
}

// Issue 21: a layer list the API server admits (the CRD cannot type it) but whose input the
// job does not give: the operator cannot read the dataset, so it fails the job naming the field.
TEST_F(ReconcilerTest, LayerListWithoutAKnownInputFailsWithoutAPod) {
  Json extra;
  extra["spec"]["train"]["model"] = {
      {"layers", Json::array({"flatten", Json{{"dense", {{"units", 10}}}}})}};
  CreateJob(Job(2, extra));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  Json st = Status();
  EXPECT_EQ(st["phase"], "Failed");
  ASSERT_EQ(st["conditions"].size(), 1u);
  EXPECT_EQ(st["conditions"][0]["reason"], "InvalidSpec");
  EXPECT_NE(st["conditions"][0]["message"].get<std::string>().find(
                "invalid spec: spec.train.model.input: required"),
            std::string::npos)
      << st.dump();
  EXPECT_EQ(client_.CountWrites("create", "pods"), 0);
  EXPECT_EQ(client_.CountWrites("create", "services"), 0);
}

TEST_F(ReconcilerTest, ConflictingStatusWriteIsAnErrorAndNothingElseHappens) {
  CreateJob(Job(2));
  client_.FailNext("update-status", "trainingjobs", Aborted("conflict"), 1);
  auto r = reconciler_->Reconcile("default", "mnist");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 0);
}

// Issue 9 item 1: replicas 2 x gpusPerReplica 4 is 2 pods of 4 ranks, not 8 pods.
TEST_F(ReconcilerTest, GpusPerReplicaMakeOnePodPerReplica) {
  CreateJob(Job(2, {{"spec", {{"gpusPerReplica", 4}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("create", "pods"), 2);
  for (int r = 0; r < 2; ++r) {
    auto pod = client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    ASSERT_TRUE(pod.ok());
    const Json& c = (*pod)["spec"]["containers"][0];
    EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], 4);
    std::map<std::string, Json> env;
    for (const auto& e : c["env"]) env[e["name"]] = e;
    EXPECT_EQ(env["WORLD_SIZE"]["value"], "8");
    EXPECT_EQ(env["RANK"]["value"], std::to_string(4 * r));
    EXPECT_EQ(env["RINGTRAIN_NPROC_PER_NODE"]["value"], "4");
    EXPECT_EQ((*pod)["metadata"]["labels"]["ringtrain.dev/world-size"], "8");
    EXPECT_EQ((*pod)["metadata"]["labels"]["ringtrain.dev/nproc-per-node"], "4");
  }
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-2").ok());
  // Both pods running is the whole gang.
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Running");
  EXPECT_EQ(Status()["replicas"]["running"], 2);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 2);
}

// The recorded answers of a real kube-apiserver v1.28 (tests/fakes/apiserver/transcripts/t3-03,
// t3-04), with the pod names of this file's job (mnist) for the recording's (psa-job, quota-job):
// the API names the pod it refused, and the operator names it only where the API did not.
// clang-format off
const char kPodSecurity403[] = R"json({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"mnist-a0-0\" is forbidden: violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"runner\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"runner\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"runner\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"runner\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")","reason":"Forbidden","details":{"name":"mnist-a0-0","kind":"pods"},"code":403})json";
const char kQuota403[] = R"json({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"mnist-a0-1\" is forbidden: exceeded quota: pods-1, requested: pods=1, used: pods=1, limited: pods=1","reason":"Forbidden","details":{"name":"mnist-a0-1","kind":"pods"},"code":403})json";
// clang-format on

// A create the API refused is a wait of the job (its ReplicaFailure and PodsReady conditions
// say so), not a failed reconcile (ringtrain_controller_reconcile_errors_total, whose alert
// speaks of the controller's own trouble): the pass succeeds and comes back after the backoff.
void ExpectARefusalWaits(const StatusOr<ReconcileResult>& r) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->requeue_after.has_value());
}

// What the kube client makes of a 403 body (kube_client.cc: StatusFromApi).
ringtrain::Status Forbidden(const char* body) {
  return ringtrain::Status(StatusCode::kPermissionDenied,
                           Json::parse(body)["message"].get<std::string>());
}

// The condition of this type (a copy: Status() is a temporary), or null.
Json Condition(const Json& status, const std::string& type) {
  for (const auto& c : status.value("conditions", Json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

// A pod of a running GangRestart gang (attempt 0) deleted by someone else: a new attempt,
// reason PodDeleted, nothing counted against backoffLimit.
void ExpectAnUncountedPodDeletedRestart(const Json& status) {
  EXPECT_EQ(status["phase"], "Restarting") << status.dump();
  EXPECT_EQ(status["attempt"], 1);
  EXPECT_EQ(status.value("restarts", 0), 0);
  EXPECT_EQ(Condition(status, "Restarting")["reason"], "PodDeleted");
}

// `kubectl delete -f job.yaml; kubectl apply -f job.yaml`: the old job's pods still terminate
// when the new job's are created under the same names. The create's AlreadyExists was taken as
// a pod of the job, and the expectation held the job for its whole timeout after the old pods
// had gone (30 s in the review's run); now it is retried and the gang created once they go.
TEST_F(ReconcilerTest, APodNameHeldByADeletedNamesakesPodIsTakenOnceItGoes) {
  Json stray = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata",
                 {{"name", "mnist-a0-0"},
                  {"namespace", "default"},
                  {"uid", "old-pod"},
                  {"labels", {{"ringtrain.dev/job", "mnist"}}},
                  {"deletionTimestamp", FormatRfc3339(clock_.Now() + std::chrono::seconds(30))},
                  {"ownerReferences",
                   {{{"apiVersion", "ringtrain.dev/v1alpha1"},
                     {"kind", "TrainingJob"},
                     {"name", "mnist"},
                     {"uid", "the-deleted-job"},
                     {"controller", true}}}}}}};
  client_.GracefulPodDeletes();
  client_.Set(kube::kPods, "default", stray);
  ASSERT_NO_FATAL_FAILURE(CreateJob(Job(2)));
  auto first = reconciler_->Reconcile("default", "mnist");
  EXPECT_FALSE(first.ok());
  EXPECT_EQ(first.status().message(),
            "create pod mnist-a0-0: the name is held by another owner's pod (uid old-pod, "
            "controller TrainingJob uid the-deleted-job, terminating): created once it is gone");
  kube::DeleteOptions gone;  // its kubelet's last word: the containers stopped
  gone.grace_period_seconds = 0;
  ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-0", gone).ok());
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  auto pod = client_.Get(kube::kPods, "default", "mnist-a0-0");
  ASSERT_TRUE(pod.ok()) << "created at once, not after the expectations' timeout";
  EXPECT_NE((*pod)["metadata"]["uid"], "old-pod");
}

// A pod whose node stopped answering stays Terminating (v1.28 keeps it until its Node object
// goes): past its deletion deadline by kStuckTerminatingAfter it is deleted with grace 0, which
// removes it, and nothing before that (review: the gang restart waited for it forever).
TEST_F(ReconcilerTest, APodStuckTerminatingIsDeletedWithGraceZeroPastItsDeadline) {
  client_.GracefulPodDeletes();
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2)));
  Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-1");
  pod["metadata"]["deletionTimestamp"] = FormatRfc3339(clock_.Now() + std::chrono::seconds(30));
  pod["metadata"]["deletionGracePeriodSeconds"] = 30;
  client_.Set(kube::kPods, "default", pod);  // its node's kubelet never reports again
  cache_.CatchUp(client_);
  auto forced = [&] {
    int n = 0;
    for (const auto& w : client_.Writes()) {
      n += w.verb == "delete" && w.plural == "pods" && w.grace == 0 ? 1 : 0;
    }
    return n;
  };
  clock_.Advance(std::chrono::seconds(149));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(forced(), 0);
  cache_.CatchUp(client_);
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(forced(), 1);
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok()) << "removed";
  // One a finalizer keeps (Kueue's) stays, its grace 0: deleted so once, not on every pass.
  pod = *client_.Get(kube::kPods, "default", "mnist-a0-0");
  pod["metadata"]["deletionTimestamp"] = FormatRfc3339(clock_.Now() - std::chrono::seconds(200));
  pod["metadata"]["deletionGracePeriodSeconds"] = 30;
  pod["metadata"]["finalizers"] = {"kueue.x-k8s.io/managed"};
  client_.Set(kube::kPods, "default", pod);
  for (int pass = 0; pass < 3; ++pass) {
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
    clock_.Advance(std::chrono::seconds(5));
  }
  EXPECT_EQ(forced(), 2);
  EXPECT_EQ((*client_.Get(kube::kPods, "default",
                          "mnist-a0-0"))["metadata"]["deletionGracePeriodSeconds"],
            0);
}

// Recorded on the real v1.28 cluster (s1-both): `kubectl delete pod` of both pods of a training
// gang. Both got a deletionTimestamp while Running; each runner answered the SIGTERM with exit
// 143 (reason Error, its termination message), rank 1 first. No survivor: the gang restarts,
// and like one deleted pod (replaced in place, uncounted) that spends nothing of backoffLimit.
// It used to be a RetryableFailure counted against it: with backoffLimit 0, the job failed.
TEST_F(ReconcilerTest, BothPodsDeletedBySomeoneRestartTheGangUncountedAsRecordedOnARealCluster) {
  ASSERT_NO_FATAL_FAILURE(
      RunTwoRankGang(Job(2, {{"spec", {{"runPolicy", {{"backoffLimit", 0}}}}}})));
  auto deleted = [&](const std::string& name, bool exited) {
    Json pod = *client_.Get(kube::kPods, "default", name);
    pod["metadata"]["deletionTimestamp"] = FormatRfc3339(clock_.Now() + std::chrono::seconds(30));
    pod["metadata"]["deletionGracePeriodSeconds"] = 30;
    if (exited) {
      pod["status"]["phase"] = "Failed";
      pod["status"]["conditions"] = {
          {{"type", "Ready"}, {"status", "False"}, {"reason", "PodFailed"}},
          {{"type", "PodScheduled"}, {"status", "True"}}};
      pod["status"]["containerStatuses"] = {
          {{"name", "runner"},
           {"ready", false},
           {"restartCount", 0},
           {"state",
            {{"terminated",
              {{"exitCode", 143},
               {"reason", "Error"},
               {"message",
                "CANCELLED: stopped by SIGTERM during training; asked to stop: the gang stopped "
                "with this rank after step 3920"},
               {"startedAt", FormatRfc3339(clock_.Now() - std::chrono::seconds(12))},
               {"finishedAt", FormatRfc3339(clock_.Now())}}}}}}};
    }
    client_.Set(kube::kPods, "default", pod);
  };
  cache_.CatchUp(client_);
  deleted("mnist-a0-0", false);
  deleted("mnist-a0-1", false);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["attempt"], 0);
  clock_.Advance(std::chrono::milliseconds(400));
  deleted("mnist-a0-1", true);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting") << Status().dump();
  EXPECT_EQ(Status()["attempt"], 1);
  EXPECT_EQ(Status()["restarts"], 0);
  EXPECT_EQ(Status()["lastFailure"]["exitCode"], 143);
  EXPECT_EQ(Condition(Status(), "Restarting")["reason"], "PodDeleted");
}

// kubectl delete pod of a rank whose runner ignores SIGTERM: the kubelet kills it when the grace
// period ends (exit 137, reason Error, not OOMKilled). A deletion from outside, not a failure
// of the job's: with backoffLimit 0 the gang restarts rather than the job failing.
TEST_F(ReconcilerTest, APodDeletedBySomeoneAndKilledAtTheEndOfItsGracePeriodIsNotCounted) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(
      Job(2, {{"spec", {{"runPolicy", {{"backoffLimit", 0}, {"recovery", "GangRestart"}}}}}})));
  Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-1");
  pod["metadata"]["deletionTimestamp"] = FormatRfc3339(clock_.Now() + std::chrono::seconds(30));
  client_.Set(kube::kPods, "default", pod);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  clock_.Advance(std::chrono::seconds(30));
  EndOfADeletion("mnist-a0-1", 137);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ExpectAnUncountedPodDeletedRestart(Status());
  EXPECT_EQ(Status()["lastFailure"]["exitCode"], 137);
}

// The operator restarts while someone deletes a pod of the running gang: the new one first sees
// it terminating, its runner ended by the SIGTERM (143). Its memory is empty, but nothing in it
// says it deleted the pod: a deletion from outside, not counted (backoffLimit 0 would fail).
TEST_F(ReconcilerTest, APodDeletedBeforeAFreshOperatorSawItRunIsNotCounted) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(
      Job(2, {{"spec", {{"runPolicy", {{"backoffLimit", 0}, {"recovery", "GangRestart"}}}}}})));
  EndOfADeletion("mnist-a0-1", 143);
  cache_.CatchUp(client_);
  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);
  Reconciler fresh(&client_, &cache_, &clock_, nullptr, nullptr, options,
                   [](const std::string&, int, Duration) { return std::nullopt; });
  ASSERT_TRUE(fresh.Reconcile("default", "mnist").ok());
  ExpectAnUncountedPodDeletedRestart(Status());
}

class FailedCreateTest : public ReconcilerTest {
 protected:
  void SetUp() override {
    recorder_ = std::make_unique<EventRecorder>(&client_, "ringtrain-controller", "test");
    // No retry unless the test says so.
    reconciler_ = MakeReconciler(std::chrono::hours(1), recorder_.get());
  }
  std::unique_ptr<Reconciler> MakeReconciler(Duration create_retry_base, EventRecorder* events,
                                             ControllerMetrics* metrics = nullptr) {
    ReconcilerOptions options;
    options.expectations_timeout = std::chrono::hours(1);
    options.create_retry_base = create_retry_base;
    return std::make_unique<Reconciler>(
        &client_, &cache_, &clock_, events, metrics, options,
        [](const std::string&, int, Duration) { return std::nullopt; });
  }
  // A reconciler whose backoff after a refused create has already passed.
  void RetryAtOnce() { reconciler_ = MakeReconciler(Duration(0), recorder_.get()); }
  // Another operator on the same API (a restart, a leader change), with none of this one's
  // memory.
  std::unique_ptr<Reconciler> NextOperator() {
    return MakeReconciler(std::chrono::hours(1), nullptr);
  }
  std::vector<Json> Events() {
    recorder_->Flush();
    return client_.List(kube::kEvents, "default", {})->at("items").get<std::vector<Json>>();
  }
  std::unique_ptr<EventRecorder> recorder_;
};

// A spec made invalid after the job succeeded (an edit, or a newer operator's stricter check):
// the outcome, the conditions and the pods stay; one Warning event says why nothing is planned.
TEST_F(FailedCreateTest, AnInvalidSpecLeavesAFinishedJobAsItIs) {
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  for (int r = 0; r < 2; ++r) {
    Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    pod["status"] = {{"phase", "Succeeded"},
                     {"containerStatuses",
                      {{{"name", "runner"}, {"state", {{"terminated", {{"exitCode", 0}}}}}}}}};
    client_.Set(kube::kPods, "default", pod);
  }
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  const Json finished = Status();
  ASSERT_EQ(finished["phase"], "Succeeded");

  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["backend"] = "nccl";  // without gpusPerReplica: refused by the parser
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  const int pod_deletes = client_.CountWrites("delete", "pods");
  const int status_writes = client_.CountWrites("update-status", "trainingjobs");
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
    cache_.CatchUp(client_);
  }
  EXPECT_EQ(Status(), finished);
  EXPECT_EQ(client_.CountWrites("delete", "pods"), pod_deletes);
  EXPECT_EQ(client_.CountWrites("update-status", "trainingjobs"), status_writes);
  EXPECT_EQ(client_.List(kube::kPods, "default", {})->at("items").size(), 2u);
  int warnings = 0;
  for (const auto& e : Events()) {
    if (e.value("reason", "") != "InvalidSpec") continue;
    ++warnings;
    EXPECT_EQ(e.value("type", ""), "Warning");
    EXPECT_NE(e.value("message", "").find("spec.backend"), std::string::npos) << e.dump();
    EXPECT_EQ(e.value("count", 1), 1) << "once, not on every pass";
  }
  EXPECT_EQ(warnings, 1);
}

// runPolicy.ttlSecondsAfterFinished of a job whose spec does not parse is read on its own and
// applied as the planner applies it: from status.completionTime, the job and its children
// deleted once it expired, and not before.
TEST_F(ReconcilerTest, AnInvalidFinishedJobIsDeletedAtItsTtl) {
  CreateJob(Job(2, {{"spec", {{"runPolicy", {{"ttlSecondsAfterFinished", 30}}}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  for (int r = 0; r < 2; ++r) {
    Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    pod["status"] = {{"phase", "Succeeded"},
                     {"containerStatuses",
                      {{{"name", "runner"}, {"state", {{"terminated", {{"exitCode", 0}}}}}}}}};
    client_.Set(kube::kPods, "default", pod);
  }
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ASSERT_EQ(Status()["phase"], "Succeeded");
  ASSERT_EQ(Status()["completionTime"], FormatRfc3339(kClockStart));

  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["backend"] = "nccl";  // without gpusPerReplica: refused by the parser
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  clock_.Advance(std::chrono::seconds(10));
  auto early = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  ASSERT_TRUE(early->requeue_after.has_value());
  EXPECT_EQ(*early->requeue_after, std::chrono::seconds(20));
  clock_.Advance(std::chrono::seconds(19));
  auto almost = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(almost.ok());
  EXPECT_EQ(almost->requeue_after, std::optional<Duration>(std::chrono::seconds(1)));
  EXPECT_EQ(client_.CountWrites("delete", "trainingjobs"), 0);
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 0) << "a finished job is left as it is";
  EXPECT_EQ(Status()["phase"], "Succeeded");

  clock_.Advance(std::chrono::seconds(1));
  auto expired = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(expired.ok()) << expired.status().ToString();
  EXPECT_FALSE(expired->requeue_after.has_value());
  EXPECT_FALSE(client_.Get(kube::kTrainingJobs, "default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("delete", "trainingjobs"), 1);
  // The planner's delete path: its children go with it.
  EXPECT_EQ(client_.List(kube::kPods, "default", {})->at("items").size(), 0u);
  EXPECT_EQ(client_.CountWrites("delete", "services"), 1);
  EXPECT_EQ(client_.CountWrites("delete", "secrets"), 1);
}

// A finished job whose spec no longer parses (an edit, a stricter operator after a restart) still
// exports its final figures: they come from its status, which is left as it is.
TEST_F(ReconcilerTest, AnInvalidFinishedJobKeepsItsFiguresInTheMetrics) {
  ControllerMetrics metrics;
  Reconciler reconciler(&client_, &cache_, &clock_, nullptr, &metrics, ReconcilerOptions{},
                        [](const std::string&, int, Duration) { return std::nullopt; });
  Json job = Job(1, {{"spec", {{"backend", "nccl"}}}});  // refused by the parser
  job["status"] = {{"phase", "Succeeded"},
                   {"progress", {{"step", 4690}, {"testAccuracy", 0.8945}}}};
  CreateJob(job);
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  const std::string text = metrics.RenderText();
  EXPECT_NE(text.find(R"(ringtrain_controller_job_phase{job="mnist",namespace="default",)"
                      R"(phase="Succeeded"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(ringtrain_controller_job_step{job="mnist",namespace="default"} 4690)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(ringtrain_controller_job_test_accuracy_ratio{job="mnist",)"
                      R"(namespace="default"} 0.8945)"),
            std::string::npos)
      << text;
}

// A gang that heals by itself (a peer that hung and came back, no pod replaced) is counted
// by the controller as rank 0 accounts it: ringtrain_controller_recovered_in_place_total grows
// with status.recovery.inPlace, while the count of replacements the controller ordered does not.
TEST_F(ReconcilerTest, InPlaceRecoveriesTheGangCompletedAreCountedWithoutAReplacedPod) {
  ControllerMetrics metrics;
  std::atomic<int> recoveries{0};
  Reconciler reconciler(&client_, &cache_, &clock_, nullptr, &metrics, ReconcilerOptions{},
                        [&](const std::string&, int, Duration) {
                          reconcile::ObservedProgress p;
                          p.step = 100 + recoveries.load();
                          p.training = true;
                          p.state = "running";
                          p.start_step = 0;
                          p.recoveries = recoveries.load();
                          p.recovery_seconds = 90.0 * recoveries.load();
                          p.last_recovery_step = 100;
                          return std::optional<reconcile::ObservedProgress>(p);
                        });
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  const auto counted = [&] {
    cache_.CatchUp(client_);
    clock_.Advance(std::chrono::seconds(5));
    EXPECT_TRUE(reconciler.Reconcile("default", "mnist").ok());
    const std::string text = metrics.RenderText();
    const std::string name = "ringtrain_controller_recovered_in_place_total ";
    const auto at = text.find("\n" + name);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + 1 + name.size()));
  };
  EXPECT_EQ(counted(), 0.0);
  recoveries = 1;
  EXPECT_EQ(counted(), 1.0);
  EXPECT_EQ(counted(), 1.0) << "counted once";
  recoveries = 3;  // two more between two polls
  EXPECT_EQ(counted(), 3.0);
  EXPECT_EQ(Status()["recovery"]["inPlace"], 3) << Status().dump();
  EXPECT_EQ(Status().value("inPlaceRecoveries", 0), 0) << "no pod was replaced";
  EXPECT_NE(metrics.RenderText().find("ringtrain_controller_in_place_recoveries_total 0"),
            std::string::npos);
}

// On the real cluster: a controller restarted while a gang recovered observed the creation of
// the next attempt's pods as the job's time to its pods, its whole age (174 s where the pods
// had existed 1 s after the job). Only a job's first gang is observed.
TEST_F(ReconcilerTest, PodsReadyIsObservedForAJobsFirstGangOnly) {
  const auto observed = [](ControllerMetrics& m) {
    const std::string text = m.RenderText();
    const std::string name = "ringtrain_controller_job_pods_ready_seconds_count ";
    const auto at = text.find("\n" + name);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + 1 + name.size()));
  };
  ControllerMetrics first;
  Reconciler reconciler(&client_, &cache_, &clock_, nullptr, &first, ReconcilerOptions{},
                        [](const std::string&, int, Duration) { return std::nullopt; });
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  EXPECT_EQ(observed(first), 1.0);
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  ASSERT_EQ(Status()["phase"], "Running");
  // Another operator (a restart) sees rank 1's pod deleted: it replaces rank 1 in place.
  ControllerMetrics next;
  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);
  Reconciler restarted(&client_, &cache_, &clock_, nullptr, &next, options,
                       [](const std::string&, int, Duration) { return std::nullopt; });
  ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-1", {}).ok());
  for (int pass = 0; pass < 6 && !client_.Get(kube::kPods, "default", "mnist-a0-1").ok(); ++pass) {
    cache_.CatchUp(client_);
    clock_.Advance(std::chrono::seconds(30));
    ASSERT_TRUE(restarted.Reconcile("default", "mnist").ok());
  }
  ASSERT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok()) << Status().dump();
  ASSERT_EQ(Status()["inPlaceRecoveries"], 1);
  EXPECT_EQ(observed(next), 0.0) << "the job's pods existed long ago";
}

// A review found: a job created suspended starts its first gang as attempt 1 when resumed, which
// the check above took for a later attempt: never observed.
TEST_F(ReconcilerTest, PodsReadyIsObservedForAJobCreatedSuspended) {
  ControllerMetrics metrics;
  Reconciler reconciler(&client_, &cache_, &clock_, nullptr, &metrics, ReconcilerOptions{},
                        [](const std::string&, int, Duration) { return std::nullopt; });
  CreateJob(Job(2, {{"spec", {{"runPolicy", {{"suspend", true}}}}}}));
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("create", "pods"), 0);
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["runPolicy"]["suspend"] = false;
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  for (int pass = 0; pass < 3 && client_.CountWrites("create", "pods") < 2; ++pass) {
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  }
  ASSERT_EQ(client_.CountWrites("create", "pods"), 2) << Status().dump();
  EXPECT_NE(metrics.RenderText().find("ringtrain_controller_job_pods_ready_seconds_count 1"),
            std::string::npos);
}

// A job failed with reason InvalidSpec, from the start or by an edit while it ran: its ttl
// counts from the completionTime that failure wrote.
TEST_F(ReconcilerTest, AJobFailedForAnInvalidSpecIsDeletedAtItsTtl) {
  CreateJob(
      Job(2, {{"spec", {{"backend", "nccl"}, {"runPolicy", {{"ttlSecondsAfterFinished", 60}}}}}}));
  auto failed = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  ASSERT_EQ(Status()["phase"], "Failed");
  EXPECT_EQ(Status()["completionTime"], FormatRfc3339(kClockStart));
  EXPECT_EQ(failed->requeue_after, std::optional<Duration>(std::chrono::seconds(60)));
  cache_.CatchUp(client_);
  clock_.Advance(std::chrono::seconds(59));
  auto early = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->requeue_after, std::optional<Duration>(std::chrono::seconds(1)));
  EXPECT_TRUE(client_.Get(kube::kTrainingJobs, "default", "mnist").ok());
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ASSERT_FALSE(client_.Get(kube::kTrainingJobs, "default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("delete", "trainingjobs"), 1);

  // Made invalid while it ran: its pods go at once, the job when its ttl expires.
  CreateJob(Job(2, {{"spec", {{"runPolicy", {{"ttlSecondsAfterFinished", 5}}}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["backend"] = "nccl";
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  const WallTime edited = clock_.Now();
  auto invalid = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(invalid.ok()) << invalid.status().ToString();
  EXPECT_EQ(Status()["phase"], "Failed");
  EXPECT_EQ(Status()["completionTime"], FormatRfc3339(edited));
  EXPECT_EQ(invalid->requeue_after, std::optional<Duration>(std::chrono::seconds(5)));
  EXPECT_EQ(client_.List(kube::kPods, "default", {})->at("items").size(), 0u);
  cache_.CatchUp(client_);
  clock_.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_FALSE(client_.Get(kube::kTrainingJobs, "default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("delete", "trainingjobs"), 2);
}

// A ttlSecondsAfterFinished that is itself what is wrong (or that no parser would take) means
// no ttl: the job stays, failed or finished, however long it waits. A valid one beside another
// broken runPolicy field is the control: that job goes.
TEST_F(ReconcilerTest, AnInvalidTtlDeletesNothing) {
  const std::vector<Json> bad = {
      -1, "30", 1.5, true, Json::object(), Json::array({30}), Json::parse("18446744073709551615")};
  std::vector<Json> policies = {{{"ttlSecondsAfterFinished", 30}, {"backoffLimit", -1}}};
  for (const Json& ttl : bad) policies.push_back({{"ttlSecondsAfterFinished", ttl}});
  int deletes = 0;
  for (const Json& policy : policies) {
    const bool valid_ttl = policy["ttlSecondsAfterFinished"] == 30;
    CreateJob(Job(2, {{"spec", {{"runPolicy", policy}}}}));
    auto failed = reconciler_->Reconcile("default", "mnist");
    ASSERT_TRUE(failed.ok()) << policy.dump() << ": " << failed.status().ToString();
    EXPECT_EQ(Status()["phase"], "Failed") << policy.dump();
    EXPECT_NE(
        Status()["conditions"][0]["message"].get<std::string>().find(
            valid_ttl ? "spec.runPolicy.backoffLimit" : "spec.runPolicy.ttlSecondsAfterFinished"),
        std::string::npos)
        << policy.dump();
    EXPECT_EQ(failed->requeue_after.has_value(), valid_ttl) << policy.dump();
    cache_.CatchUp(client_);
    clock_.Advance(std::chrono::hours(24 * 365));
    auto later = reconciler_->Reconcile("default", "mnist");
    ASSERT_TRUE(later.ok()) << policy.dump();
    EXPECT_FALSE(later->requeue_after.has_value()) << policy.dump();
    EXPECT_NE(client_.Get(kube::kTrainingJobs, "default", "mnist").ok(), valid_ttl)
        << policy.dump();
    deletes += valid_ttl ? 1 : 0;
    EXPECT_EQ(client_.CountWrites("delete", "trainingjobs"), deletes) << policy.dump();
    // The test's own delete, for the next case.
    if (client_.Get(kube::kTrainingJobs, "default", "mnist").ok()) {
      ASSERT_TRUE(client_.Delete(kube::kTrainingJobs, "default", "mnist", {}).ok());
      ++deletes;
    }
  }

  // A finished job whose edit broke its ttl: left as it is.
  CreateJob(Job(1, {{"spec", {{"runPolicy", {{"ttlSecondsAfterFinished", 30}}}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-0");
  pod["status"] = {{"phase", "Succeeded"},
                   {"containerStatuses",
                    {{{"name", "runner"}, {"state", {{"terminated", {{"exitCode", 0}}}}}}}}};
  client_.Set(kube::kPods, "default", pod);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ASSERT_EQ(Status()["phase"], "Succeeded");
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = "soon";
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  clock_.Advance(std::chrono::hours(1));
  auto kept = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->requeue_after.has_value());
  EXPECT_TRUE(client_.Get(kube::kTrainingJobs, "default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Succeeded");
}

// A running job deleted: its children are deleted once. The pods then terminate for a while
// (30 s of grace on a real cluster), and each of their updates reconciles the key again: those
// passes delete nothing more (the real cluster logged "is gone: deleting its 2 pods" 6 times and
// sent as many rounds of deletes). Once the last pod vanishes, the key is forgotten.
TEST_F(ReconcilerTest, AGoneJobsChildrenAreDeletedOnceWhileItsPodsTerminate) {
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ASSERT_TRUE(client_.Delete(kube::kTrainingJobs, "default", "mnist", {}).ok());
  cache_.CatchUp(client_);
  ASSERT_EQ(cache_.pods.size(), 2u);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 2);
  EXPECT_EQ(client_.CountWrites("delete", "services"), 1);
  EXPECT_EQ(client_.CountWrites("delete", "secrets"), 1);
  // The pods as the cache still has them: terminating.
  for (auto& pod : cache_.pods) pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z";
  // Any call now would fail the pass: none is made.
  client_.FailNext("delete", "services", Unavailable("the API server is away"), 1);
  client_.FailNext("delete", "secrets", Unavailable("the API server is away"), 1);
  for (int i = 0; i < 3; ++i) {
    auto again = reconciler_->Reconcile("default", "mnist");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_FALSE(again->requeue_after.has_value());
  }
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 2);
  // The last pod gone: nothing is done, and a job created again under the name starts afresh.
  cache_.pods.clear();
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  CreateJob(Job(2));
  auto fresh = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(client_.CountWrites("create", "pods"), 4);
}

// A job deleted and created again under its name: the Secret and Service the first one left
// still name it as their owner, and the garbage collector would delete them under the new one.
// They are deleted (that object only) and created again for the new job.
TEST_F(FailedCreateTest, ChildrenAnEarlierJobOfTheSameNameLeftAreReplaced) {
  const Json old_owner = {{"apiVersion", "ringtrain.dev/v1alpha1"},
                          {"kind", "TrainingJob"},
                          {"name", "mnist"},
                          {"uid", "uid-of-the-deleted-job"},
                          {"controller", true},
                          {"blockOwnerDeletion", true}};
  for (const auto& [r, name] : {std::pair{&kube::kSecrets, TokenSecretName("mnist")},
                                std::pair{&kube::kServices, ServiceName("mnist")}}) {
    Json left = {{"metadata", {{"name", name}, {"ownerReferences", Json::array({old_owner})}}}};
    ASSERT_TRUE(client_.Create(*r, "default", left).ok());
  }
  CreateJob(Job(2));
  const std::string uid = client_.Get(kube::kTrainingJobs, "default", "mnist")
                              ->at("metadata")
                              .at("uid")
                              .get<std::string>();
  for (int pass = 0; pass < 3 && client_.CountWrites("create", "pods") == 0; ++pass) {
    auto result = reconciler_->Reconcile("default", "mnist");
    if (!result.ok()) {
      EXPECT_EQ(result.status().code(), StatusCode::kUnavailable) << result.status().ToString();
    }
    cache_.CatchUp(client_);
  }
  EXPECT_EQ(client_.CountWrites("delete", "secrets"), 1);
  EXPECT_EQ(client_.CountWrites("delete", "services"), 1);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 2);
  for (const auto& [r, name] : {std::pair{&kube::kSecrets, TokenSecretName("mnist")},
                                std::pair{&kube::kServices, ServiceName("mnist")}}) {
    auto child = client_.Get(*r, "default", name);
    ASSERT_TRUE(child.ok()) << name;
    EXPECT_TRUE(OwnedBy(*child, uid)) << child->dump();
  }
  for (const auto& e : Events()) EXPECT_NE(e.value("reason", ""), "FailedCreate") << e.dump();
}

// A Service of the job's name that no TrainingJob owns is someone else's: left alone, and the
// job shows why it cannot start.
TEST_F(FailedCreateTest, AChildAnotherControllerOwnsIsAFailedCreate) {
  Json theirs = {{"metadata",
                  {{"name", ServiceName("mnist")},
                   {"ownerReferences", Json::array({{{"apiVersion", "apps/v1"},
                                                     {"kind", "Deployment"},
                                                     {"name", "web"},
                                                     {"uid", "uid-web"},
                                                     {"controller", true}}})}}}};
  ASSERT_TRUE(client_.Create(kube::kServices, "default", theirs).ok());
  CreateJob(Job(2));
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  EXPECT_EQ(client_.CountWrites("delete", "services"), 0);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 0);
  const Json refused = Condition(Status(), "ReplicaFailure");
  ASSERT_FALSE(refused.is_null()) << Status().dump();
  EXPECT_NE(refused.value("message", "")
                .find("services " + ServiceName("mnist") +
                      " already exists and is not this TrainingJob's"),
            std::string::npos)
      << refused.dump();
  EXPECT_NE(refused.value("message", "").find("(its controller is Deployment web)"),
            std::string::npos)
      << refused.dump();
  int failed_creates = 0;
  for (const auto& e : Events()) failed_creates += e.value("reason", "") == "FailedCreate" ? 1 : 0;
  EXPECT_EQ(failed_creates, 1);
}

// A review found: the pass that first planned RankRecovering remembered it as said before its
// status write, which failed (a conflict, the API away); the events of a pass whose write fails
// are never recorded, and the next pass took the outage as said: no event for it, ever.
TEST_F(FailedCreateTest, ARankRecoveringEventSurvivesAFailedStatusWrite) {
  std::atomic<int> reads{0};
  reconciler_ = std::make_unique<Reconciler>(
      &client_, &cache_, &clock_, recorder_.get(), nullptr, ReconcilerOptions{},
      [&reads](const std::string&, int, Duration) {
        reconcile::ObservedProgress p;
        p.step = 100;
        p.training = true;
        p.state = "running";
        p.start_step = 0;
        const int n = reads++;
        if (n < 1) return std::optional<reconcile::ObservedProgress>(p);
        p.training = false;
        p.idle = true;
        p.state = "recovering";
        // A cause that reads differently each time: each pass writes the status.
        p.recovery_cause = "step 101: all-reduce: timed out after 10s waiting for rank 1 (read " +
                           std::to_string(n) + ")";
        p.recovering_seconds = 30;
        return std::optional<reconcile::ObservedProgress>(p);
      });
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  clock_.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ASSERT_EQ(Status()["phase"], "Running") << Status().dump();
  // The first read of the outage (said only once it was read for 5 s).
  cache_.CatchUp(client_);
  clock_.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  // The pass that says it: its status write fails.
  client_.FailNext("update-status", "trainingjobs", Unavailable("apiserver down"), 1);
  cache_.CatchUp(client_);
  clock_.Advance(std::chrono::seconds(5));
  EXPECT_FALSE(reconciler_->Reconcile("default", "mnist").ok());
  for (int pass = 0; pass < 2; ++pass) {
    cache_.CatchUp(client_);
    clock_.Advance(std::chrono::seconds(5));
    ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  }
  int said = 0;
  for (const Json& e : Events()) said += e.value("reason", "") == "RankRecovering" ? 1 : 0;
  EXPECT_EQ(said, 1) << "once, after the write that failed";
}

// A child with no controller was kept on purpose (`kubectl delete --cascade=orphan` keeps the
// checkpoint claim a new job of the same name resumes from): used as it is.
TEST_F(FailedCreateTest, AChildWithNoControllerIsUsed) {
  Json kept = {{"metadata", {{"name", ServiceName("mnist")}}}};
  ASSERT_TRUE(client_.Create(kube::kServices, "default", kept).ok());
  CreateJob(Job(2));
  auto result = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(client_.CountWrites("delete", "services"), 0);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 2);
}

// A refused create comes back at the end of its backoff, or sooner when the plan asks (a
// deadline, the scheduling timeout): the create backoff (up to 60 s, an hour here) must not
// make activeDeadlineSeconds late. Before, the pass returned the create retry alone.
TEST_F(FailedCreateTest, ARefusedCreateStillWakesForTheJobsDeadline) {
  Json job = Job(2);
  job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 30;
  CreateJob(job);
  client_.FailNext("create", "pods", Forbidden(kPodSecurity403), 100);
  auto r = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->requeue_after.has_value());
  EXPECT_LE(*r->requeue_after, std::chrono::seconds(31)) << "the deadline, not the create backoff";
  EXPECT_GT(*r->requeue_after, Duration(0));
}

// Issue 9 item 5: a refused pod is a Warning event and a condition, with the API's words.
TEST_F(FailedCreateTest, PodSecurityRefusalIsVisibleOnTheJob) {
  CreateJob(Job(2));
  client_.FailNext("create", "pods", Forbidden(kPodSecurity403), 100);
  const std::string api_message = Json::parse(kPodSecurity403)["message"];
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  Json c = Condition(Status(), "ReplicaFailure");
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["reason"], "FailedCreate");
  EXPECT_EQ(c["message"], api_message);
  // The retries are backed off and the event is one, counted.
  cache_.CatchUp(client_);
  auto again = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(again->requeue_after.has_value());
  EXPECT_EQ(client_.CountWrites("create", "pods"), 0);
  RetryAtOnce();
  for (int i = 0; i < 3; ++i) {
    cache_.CatchUp(client_);
    ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  }
  int failed_create = 0;
  for (const auto& e : Events()) {
    if (e["reason"] != "FailedCreate") continue;
    ++failed_create;
    EXPECT_EQ(e["type"], "Warning");
    EXPECT_EQ(e["message"], "Error creating: " + api_message);
    EXPECT_EQ(e["count"], 4);
  }
  EXPECT_EQ(failed_create, 1);
}

// Issue 9 item 5: a partial gang (quota let 1 of 2 pods in) is released, then retried whole.
TEST_F(FailedCreateTest, PartialGangIsReleasedAndRetriedWhole) {
  CreateJob(Job(2));
  client_.FailNext("create", "pods", Forbidden(kQuota403), 1, /*skip=*/1);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  EXPECT_EQ(client_.CountWrites("create", "pods"), 1);
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 1);
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok()) << "rank 0 holds quota";
  Json c = Condition(Status(), "ReplicaFailure");
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["message"], Json::parse(kQuota403)["message"]);
  EXPECT_EQ(Status()["restarts"], 0);
  // Before the backoff: nothing is created.
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("create", "pods"), 1);
  // After it (a reconciler with no backoff left): the whole gang, and the condition clears
  // once it runs.
  RetryAtOnce();
  cache_.CatchUp(client_);  // the wait's reason (FailedCreate) was written meanwhile
  auto retried = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_EQ(client_.CountWrites("create", "pods"), 3);
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Running");
  EXPECT_EQ(Condition(Status(), "ReplicaFailure")["status"], "False");
}

// An admission webhook that is down answers every pod create with a 500 (InternalError), which
// is retryable: it was retried unsaid for good, the placed rank kept, the job Pending with
// "PodsStarting" (review). Refused so for 30 s in a row, it is a refusal like a 403; a blip of
// the queue's quick retries (20 ms, 40 ms) is not.
TEST_F(FailedCreateTest, ACreateRefusedRetryablyTimeAfterTimeIsSaidAndReleasesThePartialGang) {
  CreateJob(Job(2));
  const ::ringtrain::Status webhook = Unavailable(
      "Internal error occurred: failed calling webhook \"sidecar-injector.istio.io\": failed to "
      "call webhook: Post \"https://istiod.istio-system.svc:443/inject\": dial tcp "
      "10.96.0.10:443: connect: connection refused");
  client_.FailNext("create", "pods", webhook, 4, /*skip=*/1);
  RetryAtOnce();
  for (const int seconds : {0, 0, 29}) {
    clock_.Advance(std::chrono::seconds(seconds));
    auto r = reconciler_->Reconcile("default", "mnist");
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << "retried, unsaid, at first";
    cache_.CatchUp(client_);
  }
  EXPECT_FALSE(Condition(Status(), "ReplicaFailure").is_object());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
  clock_.Advance(std::chrono::seconds(1));
  auto third = reconciler_->Reconcile("default", "mnist");
  ExpectARefusalWaits(third);
  Json c = Condition(Status(), "ReplicaFailure");
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["reason"], "FailedCreate");
  // The webhook's words name no pod: the one refused is named before them.
  EXPECT_EQ(c["message"], "pod mnist-a0-1: " + webhook.message());
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok())
      << "the placed rank is released";
  int said = 0;
  for (const Json& e : Events()) said += e["reason"] == "FailedCreate" ? 1 : 0;
  EXPECT_EQ(said, 1);
  // The webhook back: the gang is created whole.
  cache_.CatchUp(client_);
  auto retried = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok());
}

// The released pod is marked as the operator's before it is deleted: its runner ends of the
// deletion while the pod terminates, and an operator started meanwhile (a leader change) reads
// the mark where the first one had its memory. Without it the new one took the release for a
// pod deleted by someone else: a PodDeleted restart that also restarted the placement wait.
TEST_F(FailedCreateTest, AReleasedPodIsMarkedSoAFreshOperatorKnowsItsRelease) {
  CreateJob(Job(2));
  client_.FailNext("create", "pods", Forbidden(kQuota403), 1, /*skip=*/1);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  std::vector<std::string> order;
  for (const auto& w : client_.Writes()) {
    if (w.plural == "pods" && w.name == "mnist-a0-0") order.push_back(w.verb);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"create", "patch", "delete"}));
  // The pod as the kubelet shows it while it terminates: marked, its runner ended by SIGTERM.
  auto job = api::ParseJobJson(client_.Get(kube::kTrainingJobs, "default", "mnist")->dump());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  Json pod = BuildPod(*job, 0, 0, PodOptions{});
  pod["metadata"]["uid"] = "released-0";
  pod["metadata"]["deletionTimestamp"] = FormatRfc3339(clock_.Now() + std::chrono::seconds(30));
  pod["status"] = {{"phase", "Failed"},
                   {"containerStatuses",
                    {{{"name", "runner"},
                      {"state",
                       {{"terminated",
                         {{"exitCode", 143},
                          {"reason", "Error"},
                          {"finishedAt", FormatRfc3339(clock_.Now())}}}}}}}}};
  for (const bool marked : {true, false}) {
    if (marked) pod["metadata"]["annotations"][kDeletedByOperatorAnnotation] = "released";
    if (!marked) pod["metadata"]["annotations"].erase(kDeletedByOperatorAnnotation);
    client_.Set(kube::kPods, "default", pod);
    cache_.CatchUp(client_);
    const Json before = Status();
    ASSERT_TRUE(NextOperator()->Reconcile("default", "mnist").ok());
    const Json restarting = Condition(Status(), "Restarting");
    if (marked) {
      EXPECT_TRUE(!restarting.is_object() || restarting["reason"] != "PodDeleted")
          << Status().dump();
    } else {
      ASSERT_TRUE(restarting.is_object()) << Status().dump();
      EXPECT_EQ(restarting["reason"], "PodDeleted") << "deleted by someone else";
    }
    // Back to the status the release left, for the other case.
    Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
    job["status"] = before;
    client_.Set(kube::kTrainingJobs, "default", job);
  }
}

// The operator that released a partial gang is lost right after the delete (a crash, a leader
// change): ReplicaFailure is on record before the mark and the delete, so the next operator,
// with none of the first one's memory, trusts the mark on the terminating pod and reads its end
// (143, the release's SIGTERM) as the release: no failure, no PodDeleted restart, the gang is
// created again whole after the backoff. The condition used to be written after the delete: a
// loss in between left a mark the next operator did not trust (a PodDeleted restart).
TEST_F(FailedCreateTest, AnOperatorLostAfterAReleaseLeavesMarksTheNextOneTrusts) {
  CreateJob(Job(2));
  client_.FailNext("create", "pods", Forbidden(kQuota403), 1, /*skip=*/1);
  client_.GracefulPodDeletes();
  client_.LoseAfter("delete", "pods");
  (void)reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(client_.Lost()) << "the release reached the delete";
  client_.Revive();  // the next operator's client
  EndOfADeletion("mnist-a0-0", 143);
  ASSERT_EQ(client_.Get(kube::kPods, "default", "mnist-a0-0")
                ->at("metadata")
                .at("annotations")
                .value(kDeletedByOperatorAnnotation, ""),
            "released");

  cache_.CatchUp(client_);
  auto r = NextOperator()->Reconcile("default", "mnist");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Json restarting = Condition(Status(), "Restarting");
  EXPECT_TRUE(!restarting.is_object() || restarting["reason"] != "PodDeleted") << Status().dump();
  EXPECT_EQ(Status()["attempt"], 0) << Status().dump();
  EXPECT_EQ(Status()["replicas"].value("failed", 0), 0) << "the release is no failure";
  EXPECT_EQ(Condition(Status(), "ReplicaFailure")["status"], "True");
}

// ReplicaFailure that could not be written (an outage, a conflict): nothing is marked or
// released before it is on record; the pass fails, and the next one releases the gang.
TEST_F(FailedCreateTest, NoPodIsReleasedBeforeReplicaFailureIsOnRecord) {
  CreateJob(Job(2));
  client_.FailNext("create", "pods", Forbidden(kQuota403), 2, /*skip=*/1);
  client_.FailNext("update-status", "trainingjobs", Unavailable("apiserver down"), 1, /*skip=*/1);
  EXPECT_FALSE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("patch", "pods") + client_.CountWrites("delete", "pods"), 0);
  ASSERT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
  cache_.CatchUp(client_);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  EXPECT_EQ(Condition(Status(), "ReplicaFailure")["status"], "True");
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok()) << "released";
}

// A mark the API refuses does not keep the partial gang holding its quota: a 422 (the real
// server's answer to a uid that is no longer the pod's, t4-02, or a policy that refuses the
// annotation) leaves the decision to the delete's own uid precondition, and the pod is released
// unmarked (a namesake would answer that delete 409, and be left alone); an API outage is
// retried with the pass.
class MarkRefusedTest : public FailedCreateTest,
                        public ::testing::WithParamInterface<StatusCode> {};

TEST_P(MarkRefusedTest, AMarkTheApiRefusesStillReleasesThePod) {
  const std::string why = GetParam() == StatusCode::kInvalidArgument
                              ? "Pod \"mnist-a0-0\" is invalid: metadata.uid: Invalid value: "
                                "\"00000000-0000-0000-0000-000000000001\": field is immutable"
                              : "refused";
  CreateJob(Job(2));
  client_.FailNext("create", "pods", Forbidden(kQuota403), 1, /*skip=*/1);
  client_.FailNext("patch", "pods", ringtrain::Status(GetParam(), why), 1);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  std::vector<std::string> order;
  for (const auto& w : client_.Writes()) {
    if (w.plural == "pods" && w.name == "mnist-a0-0") order.push_back(w.verb);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"create", "delete"}));
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok()) << "rank 0 holds quota";
  EXPECT_EQ(Condition(Status(), "ReplicaFailure")["reason"], "FailedCreate");
}

// The real server's 422 for a uid no longer the pod's (t4-02), a policy's 403 (Gatekeeper), an
// outage.
INSTANTIATE_TEST_SUITE_P(Refusals, MarkRefusedTest,
                         ::testing::Values(StatusCode::kInvalidArgument,
                                           StatusCode::kPermissionDenied, StatusCode::kUnavailable),
                         [](const ::testing::TestParamInfo<StatusCode>& info) {
                           return info.param == StatusCode::kInvalidArgument    ? "Invalid422"
                                  : info.param == StatusCode::kPermissionDenied ? "Forbidden403"
                                                                                : "Unavailable503";
                         });

// A release whose delete failed (an API error) is no release: the pod runs on, and the memory of
// the operator's deletes must not claim it. The next pass finds the quota free and makes the
// gang whole; once it runs, someone deletes that pod (its runner answers the SIGTERM): a
// deletion by others (PodDeleted, not counted), not the release that never happened. It used to
// be remembered before the delete, and its end was taken for the operator's own release.
TEST_F(FailedCreateTest, APodWhoseReleaseFailedIsNoReleaseWhenOthersDeleteIt) {
  CreateJob(
      Job(2, {{"spec", {{"runPolicy", {{"backoffLimit", 0}, {"recovery", "GangRestart"}}}}}}));
  client_.FailNext("create", "pods", Forbidden(kQuota403), 1, /*skip=*/1);
  client_.FailNext("delete", "pods", ringtrain::Status(StatusCode::kUnavailable, "etcd timeout"),
                   1);
  EXPECT_FALSE(reconciler_->Reconcile("default", "mnist").ok()) << "the release is retried";
  ASSERT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
  cache_.CatchUp(client_);
  auto whole = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok());
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ASSERT_EQ(Status()["phase"], "Running") << Status().dump();
  ASSERT_NE(Condition(Status(), "ReplicaFailure")["status"], "True") << "the mark is not trusted";

  EndOfADeletion("mnist-a0-0", 143);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  ExpectAnUncountedPodDeletedRestart(Status());
}

// A create refused for the controller's own configuration (its Role lacks a verb: the API's
// authorizer's 403; a PodGroup CRD not installed: 404) is the job's wait as any refusal, and also
// a reconcile error, so that RingtrainControllerReconcileErrors tells the cluster's admin; a
// refusal about the job (a quota, PodSecurity, an invalid pod) is not, and an outage (503) ends
// the pass in an error the work queue counts, not FailedCreate. Every refusal used to be
// uncounted: an RBAC mistake left every job waiting with the alert silent.
struct RefusalCase {
  const char* name;
  const char* plural;
  StatusCode code;
  const char* message;
  bool misconfigured;
};
class RefusalCountTest : public FailedCreateTest,
                         public ::testing::WithParamInterface<RefusalCase> {};

TEST_P(RefusalCountTest, OnlyTheControllersConfigurationIsAReconcileError) {
  const RefusalCase& c = GetParam();
  ControllerMetrics metrics;
  reconciler_ = MakeReconciler(std::chrono::hours(1), recorder_.get(), &metrics);
  client_.FailNext("create", c.plural, ringtrain::Status(c.code, c.message), 1);
  CreateJob(Job(2, {{"spec", {{"runPolicy", {{"podGroup", {{"type", "coscheduling"}}}}}}}}));
  auto r = reconciler_->Reconcile("default", "mnist");
  if (c.code == StatusCode::kUnavailable) {
    EXPECT_FALSE(r.ok()) << "retried by the work queue, which counts it";
  } else {
    ExpectARefusalWaits(r);
    EXPECT_EQ(Condition(Status(), "ReplicaFailure")["reason"],
              c.code == StatusCode::kInvalidArgument ? "PodInvalid" : "FailedCreate");
  }
  const std::string counted =
      std::string("ringtrain_controller_reconcile_errors_total ") + (c.misconfigured ? "1" : "0");
  EXPECT_NE(metrics.RenderText().find(counted), std::string::npos) << metrics.RenderText();
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Refusals, RefusalCountTest,
    ::testing::Values(
        RefusalCase{"RbacPods", "pods", StatusCode::kPermissionDenied, "pods \"mnist-a0-0\" is forbidden: User \"system:serviceaccount:ringtrain:ringtrain-controller\" cannot create resource \"pods\" in API group \"\" in the namespace \"default\"", true},
        RefusalCase{"RbacSecrets", "secrets", StatusCode::kPermissionDenied, "secrets is forbidden: User \"system:serviceaccount:ringtrain:ringtrain-controller\" cannot create resource \"secrets\" in API group \"\" in the namespace \"default\"", true},
        RefusalCase{"PodGroupCrdMissing", "podgroups", StatusCode::kNotFound, "the server could not find the requested resource", true},
        RefusalCase{"Quota", "pods", StatusCode::kPermissionDenied, "pods \"mnist-a0-1\" is forbidden: exceeded quota: pods-1, requested: pods=1, used: pods=1, limited: pods=1", false},
        RefusalCase{"PodSecurity", "pods", StatusCode::kPermissionDenied, "pods \"mnist-a0-0\" is forbidden: violates PodSecurity \"restricted:latest\": runAsNonRoot != true", false},
        RefusalCase{"NamespaceTerminating", "pods", StatusCode::kPermissionDenied, "pods \"mnist-a0-0\" is forbidden: unable to create new content in namespace default because it is being terminated", false},
        RefusalCase{"Invalid", "pods", StatusCode::kInvalidArgument, "Pod \"mnist-a0-0\" is invalid: spec.containers[0].image: Required value", false},
        RefusalCase{"Unavailable", "pods", StatusCode::kUnavailable, "etcdserver: request timed out", false}),
    [](const ::testing::TestParamInfo<RefusalCase>& info) { return std::string(info.param.name); });
// clang-format on

// A pod the API server refuses as invalid (422, its words as recorded in t2-07-pods.txt): every
// pod of the job is built alike, so the job fails on the next pass with the API's words and
// rank, and the partial gang goes; it used to be retried in the backoff until the scheduling
// timeout (600 s by default; never, with 0) failed it as SchedulingTimeout.
TEST_F(FailedCreateTest, APodTheApiFindsInvalidFailsTheJobAtOnce) {
  CreateJob(Job(2, {{"spec", {{"runPolicy", {{"schedulingTimeoutSeconds", 0}}}}}}));
  const std::string invalid =
      "Pod \"mnist-a0-1\" is invalid: spec.containers[0].resources.requests: Invalid value: "
      "\"2\": must be equal to nvidia.com/gpu limit of 1";
  client_.FailNext("create", "pods", ringtrain::Status(StatusCode::kInvalidArgument, invalid), 1,
                   /*skip=*/1);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  Json refused = Condition(Status(), "ReplicaFailure");
  ASSERT_TRUE(refused.is_object()) << Status().dump();
  EXPECT_EQ(refused["reason"], "PodInvalid");
  EXPECT_EQ(refused["message"], invalid);
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok()) << "rank 0 holds quota";

  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  const Json status = Status();
  EXPECT_EQ(status["phase"], "Failed") << status.dump();
  Json failed = Condition(status, "Failed");
  ASSERT_TRUE(failed.is_object()) << status.dump();
  EXPECT_EQ(failed["reason"], "PodInvalid");
  EXPECT_NE(failed.value("message", "").find(invalid), std::string::npos) << failed.dump();
  EXPECT_NE(failed.value("message", "").find("a restart cannot fix this"), std::string::npos);
  EXPECT_EQ(status["lastFailure"]["rank"], 1) << status.dump();
  EXPECT_EQ(status["lastFailure"]["reason"], "PodInvalid");
  EXPECT_EQ(status["restarts"], 0);
  int said = 0;  // once, as the job's end (not also as a wait that starts)
  for (const Json& e : Events()) said += e["reason"] == "PodInvalid" ? 1 : 0;
  EXPECT_EQ(said, 1);
  // Nothing is created for it again.
  RetryAtOnce();
  const int creates = client_.CountWrites("create", "pods");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("create", "pods"), creates);
  EXPECT_EQ(Status()["phase"], "Failed");
}

// The spec fixed before the pass that reads the refusal (kubectl edit right after the event):
// the job is not failed for the generation that was refused; the new one is created (review).
// And a pod of rank 0 refused so names rank 0.
TEST_F(FailedCreateTest, AnInvalidPodOfAnEarlierGenerationFailsNothing) {
  CreateJob(Job(2));
  const std::string invalid =
      "Pod \"mnist-a0-0\" is invalid: spec.containers[0].volumeMounts[0].name: Not found: "
      "\"nosuchvol\"";
  client_.FailNext("create", "pods", ringtrain::Status(StatusCode::kInvalidArgument, invalid), 1);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  ASSERT_EQ(Condition(Status(), "ReplicaFailure")["reason"], "PodInvalid");
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["train"]["epochs"] = 2;  // the fix
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  RetryAtOnce();
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Pending") << Status().dump();
  EXPECT_EQ(Condition(Status(), "ReplicaFailure")["status"], "False");
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok());
}

TEST_F(FailedCreateTest, AnInvalidPodOfRankZeroNamesRankZero) {
  CreateJob(Job(2));
  const std::string invalid =
      "Pod \"mnist-a0-0\" is invalid: metadata.labels: Invalid value: \"bad value!\"";
  client_.FailNext("create", "pods", ringtrain::Status(StatusCode::kInvalidArgument, invalid), 1);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Failed") << Status().dump();
  EXPECT_EQ(Status()["lastFailure"]["rank"], 0);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 0);
}

// Not the words of the API server's own validation (a webhook's 400, a 422 of another object),
// or a replacement's: the refusal is waited on as any other, bounded by the scheduling timeout.
TEST_F(FailedCreateTest, AnInvalidReplacementOrAnotherRefusalIsWaitedOn) {
  std::string survivor_uid;
  ASSERT_NO_FATAL_FAILURE(DeleteRankOneOfARunningGang(&survivor_uid));
  const std::string invalid =
      "Pod \"mnist-a0-1\" is invalid: spec.containers[0].env[0].name: Invalid value: \"1X\"";
  client_.FailNext("create", "pods", ringtrain::Status(StatusCode::kInvalidArgument, invalid), 1);
  cache_.CatchUp(client_);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  EXPECT_EQ(Condition(Status(), "ReplicaFailure")["reason"], "FailedCreate");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(client_.Get(kube::kPods, "default", "mnist-a0-0")->at("metadata").at("uid"),
            survivor_uid);
}
TEST_F(FailedCreateTest, AWebhooksDenialIsWaitedOn) {
  CreateJob(Job(2));
  client_.FailNext("create", "pods",
                   ringtrain::Status(StatusCode::kInvalidArgument,
                                     "admission webhook \"v.example.com\" denied the request: "
                                     "no team label"),
                   1);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Condition(Status(), "ReplicaFailure")["reason"], "FailedCreate") << Status().dump();
  EXPECT_EQ(Status()["phase"], "Pending") << Status().dump();
}

// A replacement the API refuses (a ResourceQuota here; on the real cluster an RBAC refusal did
// the same, s2b-ctlrestart) during an in-place recovery: the survivor keeps running with the
// gang's state, the job says why it waits (PodsReady False FailedCreate, the API's words), and
// the replacement is retried after the backoff. It used to delete the survivor, which made the
// free in-place recovery a counted gang restart.
TEST_F(FailedCreateTest, ARefusedReplacementKeepsTheSurvivorsAndIsRetried) {
  std::string survivor_uid;
  ASSERT_NO_FATAL_FAILURE(DeleteRankOneOfARunningGang(&survivor_uid));
  ASSERT_EQ(Status()["inPlaceRecoveries"], 1);
  const int deletes = client_.CountWrites("delete", "pods");

  const std::string quota =
      "pods \"mnist-a0-1\" is forbidden: exceeded quota: pods-1, requested: pods=1, used: "
      "pods=1, limited: pods=1";
  client_.FailNext("create", "pods", ringtrain::Status(StatusCode::kPermissionDenied, quota), 1);
  cache_.CatchUp(client_);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  EXPECT_EQ(client_.CountWrites("delete", "pods"), deletes) << "the survivor is kept";
  auto survivor = client_.Get(kube::kPods, "default", "mnist-a0-0");
  ASSERT_TRUE(survivor.ok());
  EXPECT_EQ(survivor->at("metadata").at("uid"), survivor_uid);
  Json refused = Condition(Status(), "ReplicaFailure");
  ASSERT_TRUE(refused.is_object()) << Status().dump();
  EXPECT_EQ(refused["reason"], "FailedCreate");
  EXPECT_EQ(refused["message"], quota);

  // Before the backoff: nothing is created, and the job says why it waits.
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok());
  Json ready = Condition(Status(), "PodsReady");
  ASSERT_TRUE(ready.is_object()) << Status().dump();
  EXPECT_EQ(ready["status"], "False");
  EXPECT_EQ(ready["reason"], "FailedCreate");
  EXPECT_NE(ready.value("message", "").find(quota), std::string::npos) << ready.dump();
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Status()["attempt"], 0);
  EXPECT_EQ(Status()["restarts"], 0);

  // After it: the same name comes back beside the same survivor; the gang runs again.
  RetryAtOnce();
  cache_.CatchUp(client_);
  auto retried = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  ASSERT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok());
  EXPECT_EQ(client_.Get(kube::kPods, "default", "mnist-a0-0")->at("metadata").at("uid"),
            survivor_uid);
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Running");
  EXPECT_EQ(Status()["attempt"], 0);
  EXPECT_EQ(Status()["restarts"], 0);
  EXPECT_EQ(Condition(Status(), "ReplicaFailure")["status"], "False");
  EXPECT_EQ(Condition(Status(), "PodsReady")["reason"], "AllPodsRunning");
}

// The survivors wait for a refused replacement no longer than runPolicy.schedulingTimeoutSeconds
// (their own recovery timeout, 120 s, usually ends it first: they fail and the gang restarts):
// then the job fails with the API's words, and the survivors are released.
TEST_F(FailedCreateTest, ARefusedReplacementIsBoundedByTheSchedulingTimeout) {
  ASSERT_NO_FATAL_FAILURE(
      RunTwoRankGang(Job(2, {{"spec", {{"runPolicy", {{"schedulingTimeoutSeconds", 60}}}}}})));
  cache_.CatchUp(client_);
  ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-1", {}).ok());
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  const std::string webhook =
      "admission webhook \"quota.example.com\" denied the request: team gpu budget spent";
  client_.FailNext("create", "pods", ringtrain::Status(StatusCode::kPermissionDenied, webhook),
                   100);
  cache_.CatchUp(client_);
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  ASSERT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok()) << "the survivor is kept";

  clock_.Advance(std::chrono::seconds(30));
  cache_.CatchUp(client_);
  {
    auto r = reconciler_->Reconcile("default", "mnist");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Condition(Status(), "PodsReady")["reason"], "FailedCreate");

  clock_.Advance(std::chrono::seconds(31));
  cache_.CatchUp(client_);
  {
    auto r = reconciler_->Reconcile("default", "mnist");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  EXPECT_EQ(Status()["phase"], "Failed") << Status().dump();
  Json failed = Condition(Status(), "Failed");
  EXPECT_EQ(failed["reason"], "SchedulingTimeout");
  EXPECT_NE(failed.value("message", "").find("FailedCreate: pod mnist-a0-1: " + webhook),
            std::string::npos)
      << failed.dump();
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok()) << "released";
  EXPECT_EQ(Status()["restarts"], 0);
}

// Issue 9 item 7: a new world is a new attempt, never a pod of it beside the old ranks.
TEST_F(ReconcilerTest, ResizeRestartsTheGangWithoutMixingWorlds) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2)));
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["replicas"] = 3;
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Status()["attempt"], 1);
  EXPECT_EQ(Status()["restarts"], 0);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 2) << "no WORLD_SIZE=3 pod beside the old";
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok());
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("create", "pods"), 5);
  auto pod = client_.Get(kube::kPods, "default", "mnist-a1-2");
  ASSERT_TRUE(pod.ok());
  // 3 -> 1: rank 0 is not left alone.
  for (int r = 0; r < 3; ++r) SetPodPhase("mnist-a1-" + std::to_string(r), "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["replicas"] = 1;
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["attempt"], 2);
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a1-0").ok());
}

// Recorded on a real cluster: train.epochs patched 40 -> 20 while the gang trained, then rank
// 1's pod deleted. The replacement used to be built from the new spec (--epochs 20) into the old
// gang (--epochs 40): it finished alone at step 9380 while rank 0 waited for it, and the job lost
// every step. The edit now restarts the gang as a whole from the new spec, not counted.
TEST_F(ReconcilerTest, AnEditOfWhatThePodsRunRestartsTheGangFromTheNewSpec) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2, {{"spec", {{"train", {{"epochs", 40}}}}}})));
  auto args = [](const Json& pod) { return pod["spec"]["containers"][0]["args"].dump(); };
  ASSERT_NE(args(*client_.Get(kube::kPods, "default", "mnist-a0-0")).find(R"("--epochs","40")"),
            std::string::npos);
  // The API server bumps the generation of an edited spec.
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["train"]["epochs"] = 20;
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  // kubectl delete pod mnist-a0-1, as the kubelet reported it: the runner answered SIGTERM.
  Json deleted = *client_.Get(kube::kPods, "default", "mnist-a0-1");
  deleted["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:30Z";
  deleted["status"] = Json::parse(R"({"phase": "Failed", "podIP": "10.244.0.40",
    "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"},
                   {"type": "PodScheduled", "status": "True"}],
    "containerStatuses": [{"name": "runner", "ready": false, "restartCount": 0,
      "state": {"terminated": {"exitCode": 143, "reason": "Error",
        "message": "CANCELLED: stopped by SIGTERM during training; asked to stop: the gang stopped with this rank after step 7792",
        "startedAt": "2027-01-15T08:00:00Z", "finishedAt": "2027-01-15T08:00:13Z"}}}]})");
  client_.Set(kube::kPods, "default", deleted);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Status()["attempt"], 1);
  EXPECT_EQ(Status().value("restarts", 0), 0) << "an edit is not a failure";
  EXPECT_EQ(Status().value("inPlaceRecoveries", 0), 0) << "no replacement into the old gang";
  EXPECT_EQ(Status()["observedGeneration"], 2);
  EXPECT_EQ(Condition(Status(), "Restarting")["reason"], "SpecChanged");
  EXPECT_EQ(client_.CountWrites("create", "pods"), 2) << "no pod of the new spec beside the old";
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
  // The whole new gang comes from the new spec.
  ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-1", {}).ok());
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("create", "pods"), 4);
  for (int r = 0; r < 2; ++r) {
    auto pod = client_.Get(kube::kPods, "default", "mnist-a1-" + std::to_string(r));
    ASSERT_TRUE(pod.ok());
    EXPECT_NE(args(*pod).find(R"("--epochs","20")"), std::string::npos) << args(*pod);
    EXPECT_EQ(pod->at("metadata").at("annotations").at(kSpecGenerationAnnotation), "2");
  }
}

// An edit that leaves the pods as they are (backoffLimit here) restarts nothing.
TEST_F(ReconcilerTest, AnEditThatLeavesThePodsAsTheyAreRestartsNothing) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2)));
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["runPolicy"]["backoffLimit"] = 9;
  job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 86400;
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Running");
  EXPECT_EQ(Status()["attempt"], 0);
  EXPECT_EQ(Status()["observedGeneration"], 2);
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a0-1").ok());
}

// An operator upgrade to a new default runner image restarts no running gang; but a rank lost
// after it is not replaced by a pod of the new runner beside a survivor of the old one: the gang
// restarts as a whole (OperatorUpgraded, not counted), all of it from the new operator.
TEST_F(ReconcilerTest, AfterAnUpgradeALostRankRestartsTheGangRatherThanMixRunnerBuilds) {
  ReconcilerOptions old_release;
  old_release.expectations_timeout = std::chrono::hours(1);
  old_release.pods.runner_image = "example.com/runner:1";
  reconciler_ =
      std::make_unique<Reconciler>(&client_, &cache_, &clock_, nullptr, nullptr, old_release,
                                   [](const std::string&, int, Duration) { return std::nullopt; });
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2)));
  ReconcilerOptions new_release = old_release;
  new_release.pods.runner_image = "example.com/runner:2";
  Reconciler upgraded(&client_, &cache_, &clock_, nullptr, nullptr, new_release,
                      [](const std::string&, int, Duration) { return std::nullopt; });
  cache_.CatchUp(client_);
  ASSERT_TRUE(upgraded.Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Running") << "an upgrade alone restarts nothing";
  ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-1", {}).ok());
  cache_.CatchUp(client_);
  ASSERT_TRUE(upgraded.Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Status()["attempt"], 1);
  EXPECT_EQ(Status().value("restarts", 0), 0);
  EXPECT_EQ(Status().value("inPlaceRecoveries", 0), 0);
  EXPECT_EQ(Condition(Status(), "Restarting")["reason"], "OperatorUpgraded");
  EXPECT_NE(Condition(Status(), "Restarting")["message"].get<std::string>().find(
                "mnist-a0-0 was built by another operator configuration (runner image "
                "example.com/runner:1 -> example.com/runner:2)"),
            std::string::npos)
      << Status().dump();
  EXPECT_EQ(client_.CountWrites("create", "pods"), 2) << "no pod of the new runner in attempt 0";
  cache_.CatchUp(client_);
  ASSERT_TRUE(upgraded.Reconcile("default", "mnist").ok());
  for (int r = 0; r < 2; ++r) {
    auto pod = client_.Get(kube::kPods, "default", "mnist-a1-" + std::to_string(r));
    ASSERT_TRUE(pod.ok());
    EXPECT_EQ(pod->at("spec").at("containers").at(0).at("image"), "example.com/runner:2");
  }
}

// kubectl edit adding a label to spec.template.metadata.labels of a training job: the pods get
// it in place and the gang trains on (it was a SpecChanged restart). An edit of what they run
// besides (the epochs) still restarts the gang.
TEST_F(ReconcilerTest, AnEditOfTheTemplatesLabelsRelabelsThePodsWithoutARestart) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(
      Job(2, {{"spec", {{"template", {{"metadata", {{"labels", {{"team", "a"}}}}}}}}}})));
  const std::string uid0 = client_.Get(kube::kPods, "default", "mnist-a0-0")->at("metadata")["uid"];
  const int gates = client_.CountWrites("patch", "pods");  // the gang gates opened
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["template"]["metadata"]["labels"] = {{"team", "b"}, {"cost-center", "42"}};
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Running") << Status().dump();
  EXPECT_EQ(Status()["attempt"], 0);
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 0);
  const api::TrainingJob edited = *api::ParseJobJson(job.dump());
  for (int r = 0; r < 2; ++r) {
    const Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    const Json& meta = pod["metadata"];
    EXPECT_EQ(meta["labels"]["team"], "b") << meta.dump();
    EXPECT_EQ(meta["labels"]["cost-center"], "42");
    EXPECT_EQ(meta["labels"]["ringtrain.dev/rank"], std::to_string(r));
    EXPECT_EQ(meta["annotations"][kSpecGenerationAnnotation], "2");
    EXPECT_EQ(meta["annotations"][kSpecHashAnnotation], PodSpecHash(edited, 0, r));
  }
  EXPECT_EQ(client_.Get(kube::kPods, "default", "mnist-a0-0")->at("metadata")["uid"], uid0);
  // Quiet from then on: on a cache that has not seen the patches yet (the real cluster showed a
  // second pass 11 ms later relabel a pod again, with a second event), and on one that has.
  const int patches = client_.CountWrites("patch", "pods");
  EXPECT_EQ(patches, gates + 2);
  cache_.job = *client_.Get(kube::kTrainingJobs, "default", "mnist");  // the pods lag behind
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("patch", "pods"), patches);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("patch", "pods"), patches);
  EXPECT_EQ(Status()["attempt"], 0);

  // Labels and the epochs: the gang restarts from the new spec.
  job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["template"]["metadata"]["labels"]["team"] = "c";
  job["spec"]["train"]["epochs"] = 3;
  job["metadata"]["generation"] = 3;
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["attempt"], 1);
  EXPECT_EQ(Condition(Status(), "Restarting")["reason"], "SpecChanged");
}

// A relabel the API refuses (a policy; a label value it finds invalid): said once, as
// RelabelFailed, and not as Relabeled; not patched again on every pass while the spec stays
// (review: a false Relabeled and a PATCH per pod every 5 s).
TEST_F(FailedCreateTest, ARefusedRelabelIsSaidOnceAndNotRetriedUntilTheSpecChanges) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(
      Job(2, {{"spec", {{"template", {{"metadata", {{"labels", {{"team", "a"}}}}}}}}}})));
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["template"]["metadata"]["labels"]["team"] = "b";
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  client_.FailNext(
      "patch", "pods",
      Forbidden(
          R"({"kind":"Status","message":"admission webhook \"labels.example.com\" denied the request: team is immutable"})"),
      100);
  for (int pass = 0; pass < 3; ++pass) {
    clock_.Advance(std::chrono::seconds(5));
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  }
  EXPECT_EQ(Status()["attempt"], 0) << "no restart either";
  int failed = 0;
  int relabeled = 0;
  for (const Json& e : Events()) {
    if (e["reason"] == "RelabelFailed") failed += e.value("count", 1);
    if (e["reason"] == "Relabeled") ++relabeled;
  }
  EXPECT_EQ(failed, 2) << "once per pod";
  EXPECT_EQ(relabeled, 0);
}

// An edit that leaves the pods as they are keeps the pods of an older generation in the gang for
// the rest of the attempt: what the spec builds for each rank is built once per generation, not
// on every pass.
TEST_F(ReconcilerTest, AnEditThatLeavesThePodsBuildsEachRanksHashOncePerGeneration) {
  std::map<std::pair<std::int64_t, int>, int> built;  // (generation, rank) -> builds
  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);
  options.spec_hash = [&built](const api::TrainingJob& job, int attempt, int rank) {
    ++built[{job.metadata.generation, rank}];
    return PodSpecHashes(job, attempt, rank);
  };
  reconciler_ =
      std::make_unique<Reconciler>(&client_, &cache_, &clock_, nullptr, nullptr, options,
                                   [](const std::string&, int, Duration) { return std::nullopt; });
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2)));
  EXPECT_TRUE(built.empty()) << "no edit, nothing to compare";
  for (const std::int64_t generation : {2, 3}) {
    Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
    job["spec"]["runPolicy"]["backoffLimit"] = 5 + generation;
    job["metadata"]["generation"] = generation;
    client_.Set(kube::kTrainingJobs, "default", job);
    for (int pass = 0; pass < 4; ++pass) {
      clock_.Advance(std::chrono::seconds(1));
      cache_.CatchUp(client_);
      ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
    }
    EXPECT_EQ(Status()["phase"], "Running");
    EXPECT_EQ(Status()["attempt"], 0);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ((built[{generation, rank}]), 1) << "generation " << generation << " rank " << rank;
    }
  }
  EXPECT_EQ(built.size(), 4u);
}

// Recorded on a real cluster: kubectl drain evicted both ranks and the operator at step 3752;
// the new operator re-created the pods as the same attempt, and nothing on the job said that
// anything had happened. A new operator (fresh memory) now restarts the gang, not counted.
TEST_F(ReconcilerTest, PodsLostWhileTheOperatorWasDownRestartTheGang) {
  ASSERT_NO_FATAL_FAILURE(RunTwoRankGang(Job(2)));
  // The drain: the operator and both pods go.
  ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-0", {}).ok());
  ASSERT_TRUE(client_.Delete(kube::kPods, "default", "mnist-a0-1", {}).ok());
  cache_.CatchUp(client_);
  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);
  Reconciler fresh(&client_, &cache_, &clock_, nullptr, nullptr, options,
                   [](const std::string&, int, Duration) { return std::nullopt; });
  ASSERT_TRUE(fresh.Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting");
  EXPECT_EQ(Status()["attempt"], 1);
  EXPECT_EQ(Status().value("restarts", 0), 0) << "a drain is a disruption";
  EXPECT_EQ(Status()["lastFailure"]["reason"], "Deleted");
  EXPECT_NE(Status()["lastFailure"]["message"].get<std::string>().find("mnist-a0-0, mnist-a0-1"),
            std::string::npos);
  EXPECT_EQ(client_.CountWrites("create", "pods"), 2) << "nothing re-created into attempt 0";
  cache_.CatchUp(client_);
  ASSERT_TRUE(fresh.Reconcile("default", "mnist").ok());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a1-0").ok());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "mnist-a1-1").ok());
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "mnist-a0-0").ok());
}

// Issue 9 item 10: a lost peer is not the cause; the gang waits to read rank 0's.
TEST_F(ReconcilerTest, FailedGangIsNotDeletedBeforeTheRootCauseIsRead) {
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  SetPodPhase("mnist-a0-0", "Running");
  Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-1");
  const std::string now = FormatRfc3339(clock_.Now());
  pod["status"] = {
      {"phase", "Failed"},
      {"containerStatuses",
       {{{"name", "runner"},
         {"state",
          {{"terminated",
            {{"exitCode", 138},
             {"reason", "Error"},
             {"finishedAt", now},
             {"message", "UNAVAILABLE: all-reduce: lost peer rank 0 (connection closed)"}}}}}}}}};
  client_.Set(kube::kPods, "default", pod);
  cache_.CatchUp(client_);
  auto r = reconciler_->Reconcile("default", "mnist");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 0);
  ASSERT_TRUE(r->requeue_after.has_value());
  EXPECT_LE(*r->requeue_after, Duration(std::chrono::seconds(30)));
  // Rank 0 ends with its own cause: it is the one on record.
  pod = *client_.Get(kube::kPods, "default", "mnist-a0-0");
  pod["status"] = {
      {"phase", "Failed"},
      {"containerStatuses",
       {{{"name", "runner"},
         {"state",
          {{"terminated",
            {{"exitCode", 1},
             {"finishedAt", now},
             {"message", "PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied\n"}}}}}}}}};
  client_.Set(kube::kPods, "default", pod);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Failed");
  EXPECT_EQ(Status()["lastFailure"]["rank"], 0);
  EXPECT_EQ(Status()["lastFailure"]["message"],
            "PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied");
  EXPECT_EQ(Status()["replicas"]["failed"], 2);
}

// Issue 9 item 12: rank 0's termination message on success is the final status.
TEST_F(ReconcilerTest, SuccessRecordsTheFinalStep) {
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  for (int r = 0; r < 2; ++r) {
    Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    Json term = {{"exitCode", 0}, {"reason", "Completed"}};
    if (r == 0) term["message"] = R"({"step":4690,"epoch":10,"samplesPerSecond":812.5,"loss":0.4})";
    pod["status"] = {
        {"phase", "Succeeded"},
        {"containerStatuses", {{{"name", "runner"}, {"state", {{"terminated", term}}}}}}};
    client_.Set(kube::kPods, "default", pod);
  }
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Succeeded");
  EXPECT_EQ(Status()["progress"]["step"], 4690);
  EXPECT_EQ(Status()["progress"]["epoch"], 10);
  EXPECT_EQ(Status()["replicas"]["succeeded"], 2);
}

// restartPolicy Never with a sidecar (istio-proxy): each pod stays Running after its runner
// ended. Rank 0's ended runner is not polled; once both ended the job succeeds and the pods
// (which still hold their nodes) are deleted under cleanPodPolicy Running.
TEST_F(ReconcilerTest, PodsWhoseSidecarOutlivesTheRunnerEndTheJob) {
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  auto set_pod = [&](int rank, bool runner_ended) {
    Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(rank));
    const Json runner_state = runner_ended
                                  ? Json{{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}}
                                  : Json{{"running", Json::object()}};
    pod["status"] = {{"phase", "Running"},
                     {"podIP", "10.0.0.1"},
                     {"containerStatuses",
                      {{{"name", "istio-proxy"}, {"state", {{"running", Json::object()}}}},
                       {{"name", "runner"}, {"state", runner_state}}}}};
    client_.Set(kube::kPods, "default", pod);
  };
  int polls = 0;
  auto counting = [&polls](const std::string&, int, Duration) {
    ++polls;
    return std::optional<reconcile::ObservedProgress>();
  };
  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);

  set_pod(0, false);
  set_pod(1, false);
  cache_.CatchUp(client_);
  ASSERT_TRUE(Reconciler(&client_, &cache_, &clock_, nullptr, nullptr, options, counting)
                  .Reconcile("default", "mnist")
                  .ok());
  EXPECT_EQ(polls, 1) << "rank 0's runner runs: polled";
  EXPECT_EQ(Status()["phase"], "Running");

  set_pod(0, true);
  cache_.CatchUp(client_);
  ASSERT_TRUE(Reconciler(&client_, &cache_, &clock_, nullptr, nullptr, options, counting)
                  .Reconcile("default", "mnist")
                  .ok());
  EXPECT_EQ(polls, 1) << "rank 0's runner ended: not polled";
  EXPECT_EQ(Status()["phase"], "Running");
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 0);

  set_pod(1, true);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Succeeded") << Status().dump();
  EXPECT_EQ(Status()["replicas"]["succeeded"], 2);
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 2);
}

// ---- placement: wait reasons from a real cluster, the gang gate, PodGroups, Kueue ----------

Json RecordedWaits() {
  std::ifstream in(std::string(RINGTRAIN_SOURCE_DIR) +
                   "/tests/integration/operator/testdata/real-pod-waits.json");
  return Json::parse(in);
}

Json JsonCondition(const Json& status, const std::string& type) {
  for (const auto& c : status.value("conditions", Json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return Json();
}

TEST(ReconcilerWaitTest, WaitReasonsRecordedOnARealClusterReachTheJob) {
  const Json recorded = RecordedWaits();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"big", "Unschedulable"},
      {"nopull", "ErrImagePull"},
      {"neverpull", "ErrImageNeverPull"},
      {"nosecret", "CreateContainerConfigError"},
      {"pvcwait", "PersistentVolumeClaimPending"},
      {"badname", "InvalidImageName"}};
  const kube::Resource claims{"", "v1", "persistentvolumeclaims"};
  for (const auto& [pod_name, want] : cases) {
    SCOPED_TRACE(pod_name);
    FakeKubeClient client;
    SnapshotCache cache;
    testing::FakeClock clock{kClockStart};
    ReconcilerOptions options;
    options.expectations_timeout = std::chrono::hours(1);
    Reconciler reconciler(&client, &cache, &clock, nullptr, nullptr, options,
                          [](const std::string&, int, Duration) { return std::nullopt; });
    const Json& claim = recorded["claim"];
    ASSERT_TRUE(client.Create(claims, "default", claim).ok());
    ASSERT_TRUE(client.Create(kube::kTrainingJobs, "default", Job(2)).ok());
    cache.CatchUp(client);
    ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
    Json rank0 = *client.Get(kube::kPods, "default", "mnist-a0-0");
    rank0["status"] = {{"phase", "Running"}, {"podIP", "10.0.0.1"}};
    client.Set(kube::kPods, "default", rank0);
    Json pod = *client.Get(kube::kPods, "default", "mnist-a0-1");
    pod["status"] = recorded[pod_name]["status"];
    if (recorded[pod_name]["spec"].contains("volumes")) {
      pod["spec"]["volumes"] = recorded[pod_name]["spec"]["volumes"];
    }
    client.Set(kube::kPods, "default", pod);
    cache.CatchUp(client);
    ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
    const Json status = client.Get(kube::kTrainingJobs, "default", "mnist")->at("status");
    const Json ready = JsonCondition(status, "PodsReady");
    ASSERT_TRUE(ready.is_object()) << status.dump();
    EXPECT_EQ(ready["status"], "False");
    EXPECT_EQ(ready["reason"], want) << ready.dump();
    const std::string message = ready.value("message", "");
    EXPECT_NE(message.find("mnist-a0-1: "), std::string::npos) << message;
    if (want == "Unschedulable") {
      EXPECT_NE(message.find("1 Insufficient cpu"), std::string::npos) << message;
    }
    if (want == "PersistentVolumeClaimPending") {
      EXPECT_NE(message.find("PersistentVolumeClaim claim is Pending: it names no StorageClass"),
                std::string::npos)
          << message;
    }
    if (want == "InvalidImageName") {
      EXPECT_EQ(status["phase"], "Failed");
    } else {
      EXPECT_EQ(status["phase"], "Pending");
      EXPECT_EQ(status.value("restarts", 0), 0);
      // Rank 0 runs, but its rendezvous clock has not started: its gate is still closed.
      rank0 = *client.Get(kube::kPods, "default", "mnist-a0-0");
      EXPECT_FALSE(rank0["metadata"]["annotations"].contains(kGangPlacedAnnotation));
    }
  }
}

// A claim that asks for no StorageClass (storageClassName "", which the real v1.28 server keeps
// as "": recorded in session 45) waits for a PersistentVolume made for it; the wait says so,
// not that the cluster lacks a default class.
TEST(ReconcilerWaitTest, AClaimOfNoStorageClassSaysItWaitsForAVolumeMadeForIt) {
  const Json recorded = RecordedWaits();
  const kube::Resource claims{"", "v1", "persistentvolumeclaims"};
  FakeKubeClient client;
  SnapshotCache cache;
  testing::FakeClock clock{kClockStart};
  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);
  Reconciler reconciler(&client, &cache, &clock, nullptr, nullptr, options,
                        [](const std::string&, int, Duration) { return std::nullopt; });
  Json claim = recorded["claim"];
  claim["spec"]["storageClassName"] = "";
  ASSERT_TRUE(client.Create(claims, "default", claim).ok());
  ASSERT_TRUE(client.Create(kube::kTrainingJobs, "default", Job(2)).ok());
  cache.CatchUp(client);
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  Json pod = *client.Get(kube::kPods, "default", "mnist-a0-1");
  pod["status"] = recorded["pvcwait"]["status"];
  pod["spec"]["volumes"] = recorded["pvcwait"]["spec"]["volumes"];
  client.Set(kube::kPods, "default", pod);
  cache.CatchUp(client);
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  const Json ready =
      JsonCondition(client.Get(kube::kTrainingJobs, "default", "mnist")->at("status"), "PodsReady");
  EXPECT_EQ(ready.value("reason", ""), "PersistentVolumeClaimPending") << ready.dump();
  EXPECT_NE(ready.value("message", "")
                .find("PersistentVolumeClaim claim is Pending: it asks for "
                      "no StorageClass (storageClassName \"\"), so only a "
                      "PersistentVolume made for it binds it"),
            std::string::npos)
      << ready.dump();
}

TEST_F(ReconcilerTest, TheGateOpensOnEveryPodOnceTheWholeGangRuns) {
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  for (int r = 0; r < 2; ++r) {
    Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    EXPECT_EQ(pod["metadata"]["annotations"][kGangGateAnnotation], "/etc/ringtrain/gang/placed");
  }
  SetPodPhase("mnist-a0-0", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("patch", "pods"), 0);
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  for (int r = 0; r < 2; ++r) {
    Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    EXPECT_EQ(pod["metadata"]["annotations"][kGangPlacedAnnotation], "true");
  }
  // Level-triggered: an open gate is not opened again.
  const int patches = client_.CountWrites("patch", "pods");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  EXPECT_EQ(client_.CountWrites("patch", "pods"), patches);
}

TEST_F(ReconcilerTest, APodGroupIsCreatedForTheGangScheduler) {
  CreateJob(Job(
      2, {{"spec",
           {{"runPolicy",
             {{"schedulingTimeoutSeconds", 120}, {"podGroup", {{"type", "coscheduling"}}}}}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  const kube::Resource groups{"scheduling.x-k8s.io", "v1alpha1", "podgroups"};
  auto pg = client_.Get(groups, "default", "mnist");
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  EXPECT_EQ((*pg)["spec"]["minMember"], 2);
  EXPECT_EQ((*pg)["spec"]["scheduleTimeoutSeconds"], 120);
  EXPECT_EQ((*pg)["metadata"]["ownerReferences"][0]["kind"], "TrainingJob");
  Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-1");
  EXPECT_EQ(pod["metadata"]["labels"][kCoschedulingPodGroupLabel], "mnist");
  EXPECT_EQ(pod["spec"]["schedulerName"], kCoschedulingSchedulerName);
}

TEST_F(ReconcilerTest, AVolcanoPodGroupCarriesTheQueueAndFollowsAResize) {
  CreateJob(Job(2, {{"spec",
                     {{"runPolicy",
                       {{"schedulerName", "my-volcano"},
                        {"podGroup", {{"type", "volcano"}, {"queue", "team-a"}}}}}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  const kube::Resource groups{"scheduling.volcano.sh", "v1beta1", "podgroups"};
  auto pg = client_.Get(groups, "default", "mnist");
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  EXPECT_EQ((*pg)["spec"]["minMember"], 2);
  EXPECT_EQ((*pg)["spec"]["queue"], "team-a");
  EXPECT_FALSE((*pg)["spec"].contains("scheduleTimeoutSeconds"));
  Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-0");
  EXPECT_EQ(pod["metadata"]["annotations"][kVolcanoGroupAnnotation], "mnist");
  EXPECT_EQ(pod["spec"]["schedulerName"], "my-volcano");

  // Three replicas: the next attempt's group needs three.
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["replicas"] = 3;
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  for (int r = 0; r < 2; ++r) {
    Json p = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    p["status"] = {{"phase", "Running"}};
    client_.Set(kube::kPods, "default", p);
  }
  for (int pass = 0; pass < 4; ++pass) {
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  }
  EXPECT_EQ(client_.Get(groups, "default", "mnist")->at("spec").at("minMember"), 3);
}

// A review found: a PodGroup of an earlier attempt deleted between the create's AlreadyExists and
// its patch answered the patch 404, which was taken for a cluster that serves no PodGroups (a
// ReplicaFailure naming the controller's configuration). It is gone: created again next time.
TEST_F(ReconcilerTest, APodGroupGoneBeforeItsPatchIsNoUnservedKind) {
  CreateJob(Job(2, {{"spec", {{"runPolicy", {{"podGroup", {{"type", "volcano"}}}}}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  const kube::Resource groups{"scheduling.volcano.sh", "v1beta1", "podgroups"};
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  job["spec"]["replicas"] = 3;
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  for (int r = 0; r < 2; ++r) SetPodPhase("mnist-a0-" + std::to_string(r), "Running");
  client_.FailNext("patch", "podgroups",
                   NotFound("podgroups.scheduling.volcano.sh \"mnist\" not found"), 1);
  bool unserved = false;
  for (int pass = 0; pass < 6; ++pass) {
    cache_.CatchUp(client_);
    (void)reconciler_->Reconcile("default", "mnist");
    const Json failure = JsonCondition(Status(), "ReplicaFailure");
    unserved =
        unserved || (failure.is_object() &&
                     failure.value("message", "").find("does not serve") != std::string::npos);
  }
  EXPECT_FALSE(unserved) << Status().dump();
  EXPECT_EQ(client_.Get(groups, "default", "mnist")->at("spec").at("minMember"), 3);
}

TEST_F(ReconcilerTest, APodGroupTheClusterCannotServeIsShownOnTheJob) {
  client_.FailNext("create", "podgroups",
                   NotFound("the server could not find the requested resource"), 1);
  CreateJob(Job(2, {{"spec", {{"runPolicy", {{"podGroup", {{"type", "coscheduling"}}}}}}}}));
  ExpectARefusalWaits(reconciler_->Reconcile("default", "mnist"));
  EXPECT_EQ(client_.CountWrites("create", "pods"), 0);
  const Json failure = JsonCondition(Status(), "ReplicaFailure");
  ASSERT_TRUE(failure.is_object()) << Status().dump();
  EXPECT_NE(
      failure.value("message", "").find("does not serve PodGroups of scheduling.x-k8s.io/v1alpha1"),
      std::string::npos)
      << failure.dump();
}

TEST_F(ReconcilerTest, AJobWithAKueueQueueMakesOneKueuePodGroup) {
  CreateJob(Job(2, {{"metadata", {{"labels", {{"kueue.x-k8s.io/queue-name", "team-a"}}}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  for (int r = 0; r < 2; ++r) {
    Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-" + std::to_string(r));
    EXPECT_EQ(pod["metadata"]["labels"][kKueueQueueLabel], "team-a");
    EXPECT_EQ(pod["metadata"]["labels"][kKueueGroupLabel], "mnist");
    EXPECT_EQ(pod["metadata"]["annotations"][kKueueGroupCountAnnotation], "2");
    // As Kueue's webhook leaves them: gated, PodScheduled=False SchedulingGated.
    pod["status"] = {{"phase", "Pending"},
                     {"conditions",
                      {{{"type", "PodScheduled"},
                        {"status", "False"},
                        {"reason", "SchedulingGated"},
                        {"message", "Scheduling is blocked due to non-empty scheduling gates"}}}}};
    client_.Set(kube::kPods, "default", pod);
  }
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  const Json queued = JsonCondition(Status(), "Queued");
  ASSERT_TRUE(queued.is_object()) << Status().dump();
  EXPECT_EQ(queued["status"], "True");
  EXPECT_NE(queued.value("message", "").find("queued in Kueue (LocalQueue team-a)"),
            std::string::npos);
}

// A /status that does not answer holds a shared worker for the read's timeout: reads of it back
// off (each failure doubles the wait, up to 8 intervals), so that many such jobs do not queue
// every other job behind them (review: 150 of them delayed a new job's pods by 13.6 s). A read
// that succeeds brings the interval back.
TEST_F(ReconcilerTest, ReadsOfAStatusThatDoesNotAnswerBackOff) {
  std::atomic<int> reads{0};
  std::atomic<bool> answers{false};
  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);
  Reconciler reconciler(&client_, &cache_, &clock_, nullptr, nullptr, options,
                        [&](const std::string&, int, Duration) {
                          ++reads;
                          reconcile::ObservedProgress p;
                          p.reachable = answers.load();
                          if (!p.reachable) p.error = "timed out";
                          return std::optional<reconcile::ObservedProgress>(p);
                        });
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  // One pass every 5 s (the progress interval) for 155 s: reads at 0, 10, 30, 70, 110, 150.
  for (int t = 0; t <= 155; t += 5) {
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
    clock_.Advance(std::chrono::seconds(5));
  }
  EXPECT_EQ(reads.load(), 6);
  // Answering again: read at 190 (the wait after the last failure), then every interval (195,
  // 200).
  answers = true;
  for (int t = 160; t <= 200; t += 5) {
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
    clock_.Advance(std::chrono::seconds(5));
  }
  EXPECT_EQ(reads.load(), 6 + 3);
  // Failing again, then another rank 0 (a replacement: another pod uid): read at once.
  answers = false;
  for (int t = 205; t <= 215; t += 5) {
    cache_.CatchUp(client_);
    ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
    clock_.Advance(std::chrono::seconds(5));
  }
  EXPECT_EQ(reads.load(), 9 + 2) << "205 and 215";
  Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-0");
  pod["metadata"]["uid"] = "the-replacement";
  client_.Set(kube::kPods, "default", pod);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  EXPECT_EQ(reads.load(), 9 + 3) << "at 220, not at 235";
}

// A read of rank 0's /status is made by a reader of its own (status_readers), not by the pass:
// a rank 0 that does not answer held a reconcile worker for the read's whole timeout, and many
// of them queued every other job behind them. The pass that asks goes on at once; the answer
// wakes the job (status_read), and its next pass takes it.
TEST_F(ReconcilerTest, AStatusReadThatHasNotAnsweredHoldsNoPass) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> reads{0};
  std::atomic<bool> answered{false};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> woken;
  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);
  options.status_readers = 1;
  options.status_read = [&](const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    woken.push_back(key);
    cv.notify_all();
  };
  Reconciler reconciler(&client_, &cache_, &clock_, nullptr, nullptr, options,
                        [&](const std::string&, int, Duration) {
                          ++reads;
                          // Bounded, so that a pass that waits for the read fails the test
                          // rather than hangs it.
                          const bool go = released.wait_for(std::chrono::seconds(60)) ==
                                          std::future_status::ready;
                          answered = true;
                          reconcile::ObservedProgress p;
                          p.step = go ? 42 : 1;
                          p.training = true;
                          p.state = "running";
                          p.start_step = 0;
                          p.samples_per_second = 100;
                          return std::optional<reconcile::ObservedProgress>(p);
                        });
  CreateJob(Job(2));
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  SetPodPhase("mnist-a0-0", "Running");
  SetPodPhase("mnist-a0-1", "Running");
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());  // asks for a read
  EXPECT_FALSE(answered.load()) << "the pass waited for the read";
  EXPECT_EQ(Status()["phase"], "Running");
  EXPECT_FALSE(Status().contains("progress"));
  // Due again while the first read is under way: no second read is asked.
  clock_.Advance(std::chrono::seconds(10));
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  EXPECT_FALSE(answered.load());
  release.set_value();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return !woken.empty(); }));
    EXPECT_EQ(woken, std::vector<std::string>{"default/mnist"});
  }
  EXPECT_EQ(reads.load(), 1);
  cache_.CatchUp(client_);
  ASSERT_TRUE(reconciler.Reconcile("default", "mnist").ok());
  ASSERT_TRUE(Status().contains("progress")) << Status().dump();
  EXPECT_EQ(Status()["progress"]["step"], 42);
}

// The answer of a read is the rank 0's it was asked of: one that ends while its read is under
// way, or is replaced (another pod uid), leaves no answer to the next rank 0 (StatusPoller).
TEST(StatusPollerTest, AnAnswerIsTakenOnceAndOnlyForThePodItWasAskedOf) {
  std::atomic<int> reads{0};
  StatusPoller polls(
      [&](const std::string& ip, int port, Duration) {
        reconcile::ObservedProgress p;
        p.step = ++reads;
        p.state = ip + ":" + std::to_string(port);
        return std::optional<reconcile::ObservedProgress>(p);
      },
      0);
  EXPECT_FALSE(polls.Take("ns/a", "uid-1"));
  ASSERT_TRUE(polls.Start("ns/a", "uid-1", "10.0.0.1", 8080, Duration(500)));
  auto answer = polls.Take("ns/a", "uid-1");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->step, 1);
  EXPECT_EQ(answer->state, "10.0.0.1:8080");
  EXPECT_FALSE(polls.Take("ns/a", "uid-1")) << "taken once";
  ASSERT_TRUE(polls.Start("ns/a", "uid-1", "10.0.0.1", 8080, Duration(500)));
  EXPECT_FALSE(polls.Take("ns/a", "uid-2")) << "another rank 0's answer";
  EXPECT_FALSE(polls.Take("ns/a", "uid-1")) << "dropped, not kept for the pod it was of";
  ASSERT_TRUE(polls.Start("ns/a", "uid-1", "10.0.0.1", 8080, Duration(500)));
  polls.Forget("ns/a");
  EXPECT_FALSE(polls.Take("ns/a", "uid-1"));
  polls.Stop();
  EXPECT_FALSE(polls.Start("ns/a", "uid-1", "10.0.0.1", 8080, Duration(500)));
  EXPECT_EQ(reads.load(), 3);
}

// A fetcher that throws (a library's exception) is a read that failed, on a reader thread as in
// the pass that asks: never a controller that terminates.
TEST(StatusPollerTest, AReadThatThrowsIsAReadThatFailed) {
  for (int threads : {0, 1}) {
    std::promise<void> read;
    StatusPoller polls(
        [](const std::string&, int, Duration) -> std::optional<reconcile::ObservedProgress> {
          throw std::runtime_error("bad json");
        },
        threads, [&read](const std::string&) { read.set_value(); });
    ASSERT_TRUE(polls.Start("ns/a", "uid-1", "10.0.0.1", 8080, Duration(500)));
    if (threads > 0) {
      ASSERT_EQ(read.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
    }
    auto answer = polls.Take("ns/a", "uid-1");
    ASSERT_TRUE(answer) << threads;
    EXPECT_FALSE(answer->reachable);
    EXPECT_EQ(answer->error, "reading /status threw: bad json");
  }
}

// A job forgotten (gone) while its read is under way keeps no answer of it, though its namesake
// asked anew; a stop waits for the read under way, then asks none. One reader: the namesake's
// read waits until the forgotten one has ended, and is held there while the test looks.
TEST(StatusPollerTest, AReadUnderWayOfAForgottenJobLeavesNoAnswer) {
  std::promise<void> release_first, release_second, begun, second_begun;
  std::shared_future<void> first = release_first.get_future().share();
  std::shared_future<void> second = release_second.get_future().share();
  std::atomic<int> reads{0};
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  StatusPoller polls(
      [&](const std::string&, int, Duration) {
        const int n = reads++;
        (n == 0 ? begun : second_begun).set_value();
        (n == 0 ? first : second).wait_for(std::chrono::seconds(60));
        reconcile::ObservedProgress p;
        p.step = n;
        return std::optional<reconcile::ObservedProgress>(p);
      },
      1,
      [&](const std::string&) {
        std::lock_guard<std::mutex> lock(mu);
        ++done;
        cv.notify_all();
      });
  ASSERT_TRUE(polls.Start("ns/a", "uid-1", "10.0.0.1", 8080, Duration(500)));
  ASSERT_EQ(begun.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_FALSE(polls.Start("ns/a", "uid-1", "10.0.0.1", 8080, Duration(500))) << "under way";
  polls.Forget("ns/a");
  ASSERT_TRUE(polls.Start("ns/a", "uid-9", "10.0.0.2", 8080, Duration(500)));
  release_first.set_value();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done >= 1; }));
  }
  EXPECT_FALSE(polls.Take("ns/a", "uid-1")) << "the forgotten job's answer was kept";
  EXPECT_FALSE(polls.Take("ns/a", "uid-9")) << "the namesake's read has not ended";
  ASSERT_EQ(second_begun.get_future().wait_for(std::chrono::seconds(60)),
            std::future_status::ready);
  release_second.set_value();
  polls.Stop();
  auto namesake = polls.Take("ns/a", "uid-9");
  ASSERT_TRUE(namesake) << "the read under way at the stop ends and is kept";
  EXPECT_EQ(namesake->step, 1);
  EXPECT_EQ(reads.load(), 2);
  EXPECT_FALSE(polls.Start("ns/b", "uid-3", "10.0.0.3", 8080, Duration(500)));
}

// Reads of ranks whose last read failed (suspect: each may hold a reader for its whole timeout)
// take at most half the readers: a rank that answers is read while they hang (review: with one
// queue, 320 silent ranks held all four readers and healthy jobs' reads waited minutes).
TEST(StatusPollerTest, ReadsOfSilentRanksLeaveReadersForRanksThatAnswer) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> hanging{0};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> done;
  StatusPoller polls(
      [&](const std::string& ip, int, Duration) {
        if (ip == "silent") {
          ++hanging;
          released.wait_for(std::chrono::seconds(60));
        }
        return std::optional<reconcile::ObservedProgress>(reconcile::ObservedProgress{});
      },
      2,
      [&](const std::string& key) {
        std::lock_guard<std::mutex> lock(mu);
        done.push_back(key);
        cv.notify_all();
      });
  ASSERT_TRUE(polls.Start("ns/s1", "u1", "silent", 9400, Duration(500), /*suspect=*/true));
  ASSERT_TRUE(polls.Start("ns/s2", "u2", "silent", 9400, Duration(500), /*suspect=*/true));
  ASSERT_TRUE(polls.Start("ns/ok", "u3", "answers", 9400, Duration(500)));
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return !done.empty(); }))
        << "the rank that answers waited behind the silent ones";
    EXPECT_EQ(done, std::vector<std::string>{"ns/ok"});
  }
  EXPECT_LE(hanging.load(), 1) << "at most one of two readers for the silent ranks";
  EXPECT_TRUE(polls.Take("ns/ok", "u3"));
  release.set_value();
  polls.Stop();
}

// Issue 10.4: past progressDeadlineSeconds, a rank 0 whose /status cannot be read (here: the
// real HTTP fetcher against a closed port) is reported as Stalled=Unknown, not restarted; the
// same deadline with a read that succeeds and shows no new step still restarts the gang.
TEST_F(ReconcilerTest, UnreadableStatusPastTheDeadlineIsReportedNotRestarted) {
  CreateJob(Job(1, {{"spec", {{"runPolicy", {{"progressDeadlineSeconds", 60}}}}}}));
  ASSERT_TRUE(reconciler_->Reconcile("default", "mnist").ok());
  Json pod = *client_.Get(kube::kPods, "default", "mnist-a0-0");
  pod["status"] = {{"phase", "Running"}, {"podIP", "127.0.0.1"}};
  pod["metadata"]["annotations"][kMetricsPortAnnotation] = "1";  // nothing listens on port 1
  client_.Set(kube::kPods, "default", pod);
  Json job = *client_.Get(kube::kTrainingJobs, "default", "mnist");
  const std::string long_ago = "2026-01-01T00:00:00Z";  // the fake clock is in 2027
  job["status"]["phase"] = "Running";
  job["status"]["conditions"] = {{{"type", "Running"},
                                  {"status", "True"},
                                  {"reason", "Running"},
                                  {"message", ""},
                                  {"lastTransitionTime", long_ago}}};
  job["status"]["progress"] = {{"step", 10},
                               {"epoch", 0},
                               {"samplesPerSecond", 1.0},
                               {"loss", 1.0},
                               {"updatedAt", long_ago}};
  client_.Set(kube::kTrainingJobs, "default", job);
  cache_.CatchUp(client_);

  ReconcilerOptions options;
  options.expectations_timeout = std::chrono::hours(1);
  Reconciler http_fetching(&client_, &cache_, &clock_, nullptr, nullptr, options);
  ASSERT_TRUE(http_fetching.Reconcile("default", "mnist").ok());
  Json st = Status();
  EXPECT_EQ(st["phase"], "Running") << st.dump();
  EXPECT_EQ(st.value("restarts", 0), 0);
  EXPECT_EQ(client_.CountWrites("delete", "pods"), 0);
  Json stalled;
  for (const auto& c : st["conditions"]) {
    if (c["type"] == "Stalled") stalled = c;
  }
  EXPECT_EQ(stalled.value("status", ""), "Unknown") << st.dump();
  EXPECT_EQ(stalled.value("reason", ""), "ProgressUnknown") << st.dump();
  EXPECT_EQ(st["progress"]["step"], 10);

  cache_.CatchUp(client_);
  Reconciler answering(&client_, &cache_, &clock_, nullptr, nullptr, options,
                       [](const std::string&, int, Duration) {
                         return std::optional<reconcile::ObservedProgress>(
                             reconcile::ObservedProgress{10, 0, 1.0, 1.0});
                       });
  ASSERT_TRUE(answering.Reconcile("default", "mnist").ok());
  EXPECT_EQ(Status()["phase"], "Restarting") << Status().dump();
}

TEST(WorkQueueTest, DeduplicatesAndNeverHandsOutAKeyTwice) {
  WorkQueue q;
  q.Add("a");
  q.Add("a");
  q.Add("b");
  EXPECT_EQ(q.Len(), 2u);
  auto a = q.Get();
  ASSERT_EQ(*a, "a");
  q.Add("a");  // while processing: held back until Done
  auto b = q.Get();
  ASSERT_EQ(*b, "b");
  EXPECT_EQ(q.Len(), 0u);
  q.Done("a");
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(*q.Get(), "a");
  q.Done("a");
  q.Done("b");
  q.AddAfter("c", Duration(10));
  EXPECT_EQ(*q.Get(), "c");  // blocks until due
  q.AddRateLimited("d");
  q.AddRateLimited("d");
  EXPECT_EQ(q.NumRequeues("d"), 2);
  q.Forget("d");
  EXPECT_EQ(q.NumRequeues("d"), 0);
  q.ShutDown();
  EXPECT_FALSE(q.Get().has_value());
}

}  // namespace
}  // namespace ringtrain::op
