// What a real cluster asks of the operator's pods and children: restricted-compliant pods
// (admitted by the fake API server in a PodSecurity "restricted" namespace, where the pods of
// before were refused with the recorded message), and checkpoint storage reconciled (the job's
// PVC, or a Warning and a condition without one). The pod builder's pure rules are tested in
// tests/unit/executors/kubernetes/pod_builder_test.cc.
#include <gtest/gtest.h>

#include <algorithm>

#include "controller/executors/kubernetes/pod_builder.h"
#include "controller/executors/kubernetes/reconciler.h"
#include "controller/runtime/event_recorder.h"
#include "tests/fakes/apiserver/fake_apiserver.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_kube_client.h"
#include "tests/integration/apiserver/raw_http.h"

namespace ringtrain::op {
namespace {

using fake::testing::RawConnection;
using kube::testing::FakeKubeClient;

api::TrainingJob ParseJob(const std::string& name, const std::string& ns, Json spec) {
  Json raw = {{"apiVersion", "ringtrain.dev/v1alpha1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"uid", "u1"}}},
              {"spec", spec}};
  auto job = api::ParseJobJson(raw.dump());
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return job.ok() ? *job : api::TrainingJob{};
}

// The pod as the operator built it before: no securityContext, no token opt-out, no resources.
Json WithoutSecurityDefaults(Json pod) {
  pod["spec"].erase("securityContext");
  pod["spec"].erase("automountServiceAccountToken");
  for (auto& c : pod["spec"]["containers"]) {
    c.erase("securityContext");
    c.erase("resources");
  }
  return pod;
}

// The recorded 403 (t3-03) for the runner pod psa-job-a0-0.
constexpr char kRecordedRefusal[] =
    R"rec({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"psa-job-a0-0\" is forbidden: violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"runner\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"runner\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"runner\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"runner\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")","reason":"Forbidden","details":{"name":"psa-job-a0-0","kind":"pods"},"code":403})rec";

TEST(PodSecurityTest, DefaultPodIsAdmittedInARestrictedNamespaceWhereTheOldOneWasRefused) {
  auto server = fake::FakeApiServer::Create();
  ASSERT_TRUE(server->Start().ok());
  RawConnection conn(server->port());
  Json ns = {{"apiVersion", "v1"},
             {"kind", "Namespace"},
             {"metadata",
              {{"name", "psa-demo"},
               {"labels",
                {{"pod-security.kubernetes.io/enforce", "restricted"},
                 {"pod-security.kubernetes.io/enforce-version", "latest"}}}}}};
  ASSERT_EQ(conn.Do("POST", "/api/v1/namespaces", ns.dump()).code, 201);

  api::TrainingJob job = ParseJob("psa-job", "psa-demo", {{"replicas", 2}});
  Json old_pod = WithoutSecurityDefaults(BuildPod(job, 0, 0, PodOptions{}));
  auto r = conn.Do("POST", "/api/v1/namespaces/psa-demo/pods", old_pod.dump());
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.body, std::string(kRecordedRefusal) + "\n");

  for (int rank : {0, 1}) {
    r = conn.Do("POST", "/api/v1/namespaces/psa-demo/pods",
                BuildPod(job, 0, rank, PodOptions{}).dump());
    ASSERT_EQ(r.code, 201) << r.body;
    // Requests set: not BestEffort, the first class evicted under memory pressure.
    EXPECT_EQ(Json::parse(r.body)["status"]["qosClass"], "Burstable") << r.body;
  }
  // A user's sidecar gets the container defaults too.
  api::TrainingJob with_sidecar = ParseJob(
      "psa-side", "psa-demo",
      {{"replicas", 1},
       {"template", {{"spec", {{"containers", {{{"name", "log"}, {"image", "busybox"}}}}}}}}});
  r = conn.Do("POST", "/api/v1/namespaces/psa-demo/pods",
              BuildPod(with_sidecar, 0, 0, PodOptions{}).dump());
  EXPECT_EQ(r.code, 201) << r.body;
  server->Stop();
}

// The shared fake clock (tests/fakes/fake_clock.h) starts here, in 2027, and moves only when a
// test says so.
const WallTime kClockStart{std::chrono::seconds(1'800'000'000)};

class OneJobCache final : public ClusterCache {
 public:
  explicit OneJobCache(FakeKubeClient* client) : client_(client) {}
  std::optional<Json> GetJob(const std::string& ns, const std::string& name) const override {
    auto j = client_->Get(kube::kTrainingJobs, ns, name);
    return j.ok() ? std::optional<Json>(*j) : std::nullopt;
  }
  std::vector<Json> JobPods(const std::string& ns, const std::string& job) const override {
    auto list = client_->List(kube::kPods, ns, {std::string(kJobLabel) + "=" + job});
    return list->at("items").get<std::vector<Json>>();
  }

 private:
  FakeKubeClient* client_;
};

class CheckpointReconcileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ReconcilerOptions options;
    options.expectations_timeout = std::chrono::hours(1);
    reconciler_ = std::make_unique<Reconciler>(
        &client_, &cache_, &clock_, &events_, nullptr, options,
        [](const std::string&, int, Duration) { return std::nullopt; });
  }
  void Create(const std::string& name, Json spec) {
    Json job = {{"apiVersion", "ringtrain.dev/v1alpha1"},
                {"kind", "TrainingJob"},
                {"metadata", {{"name", name}, {"namespace", "default"}, {"generation", 1}}},
                {"spec", spec}};
    ASSERT_TRUE(client_.Create(kube::kTrainingJobs, "default", job).ok());
  }
  std::vector<Json> Events() {
    events_.Flush();
    return client_.List(kube::kEvents, "default", {})->at("items").get<std::vector<Json>>();
  }
  // Events() of one reason (read once, at the end: it stops the recorder).
  std::vector<Json> EventsWithReason(const std::string& reason) {
    std::vector<Json> out;
    for (const auto& e : Events()) {
      if (e["reason"] == reason) out.push_back(e);
    }
    return out;
  }
  Json Conditions(const std::string& name) {
    return client_.Get(kube::kTrainingJobs, "default", name)->at("status")["conditions"];
  }

  FakeKubeClient client_;
  OneJobCache cache_{&client_};
  testing::FakeClock clock_{kClockStart};
  EventRecorder events_{&client_, "ringtrain-controller", "test"};
  std::unique_ptr<Reconciler> reconciler_;
};

TEST_F(CheckpointReconcileTest, JobWithAClaimGetsItsPvcOnceAndItGoesWithTheJob) {
  Create("ckpt", {{"replicas", 2}, {"checkpoint", {{"volumeClaim", {{"size", "2Gi"}}}}}});
  ASSERT_TRUE(reconciler_->Reconcile("default", "ckpt").ok());
  ASSERT_TRUE(reconciler_->Reconcile("default", "ckpt").ok());
  EXPECT_EQ(client_.CountWrites("create", "persistentvolumeclaims"), 1);
  auto pvc = client_.Get({"", "v1", "persistentvolumeclaims"}, "default", "ckpt-checkpoints");
  ASSERT_TRUE(pvc.ok());
  EXPECT_EQ((*pvc)["spec"]["resources"]["requests"]["storage"], "2Gi");
  for (const auto& c : Conditions("ckpt")) EXPECT_NE(c["type"], "CheckpointsEphemeral");
  for (const auto& e : Events()) EXPECT_NE(e["reason"], "NoCheckpointVolume");

  ASSERT_TRUE(client_.Delete(kube::kTrainingJobs, "default", "ckpt", kube::DeleteOptions{}).ok());
  ASSERT_TRUE(reconciler_->Reconcile("default", "ckpt").ok());
  EXPECT_EQ(client_.CountWrites("delete", "persistentvolumeclaims"), 1);
}

TEST_F(CheckpointReconcileTest, AClaimOfTheSameNameThatIsNotOursIsNeverDeleted) {
  Json mine = {{"apiVersion", "v1"},
               {"kind", "PersistentVolumeClaim"},
               {"metadata", {{"name", "keep-checkpoints"}, {"namespace", "default"}}}};
  ASSERT_TRUE(client_.Create({"", "v1", "persistentvolumeclaims"}, "default", mine).ok());
  Create("keep",
         {{"replicas", 1},
          {"checkpoint",
           {{"volume", {{"persistentVolumeClaim", {{"claimName", "keep-checkpoints"}}}}}}}});
  ASSERT_TRUE(reconciler_->Reconcile("default", "keep").ok());
  ASSERT_TRUE(client_.Delete(kube::kTrainingJobs, "default", "keep", kube::DeleteOptions{}).ok());
  ASSERT_TRUE(reconciler_->Reconcile("default", "keep").ok());
  EXPECT_EQ(client_.CountWrites("delete", "persistentvolumeclaims"), 0);
}

TEST_F(CheckpointReconcileTest, WithoutACheckpointVolumeAWarningAndAConditionSaySo) {
  Create("eph", {{"replicas", 1}});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reconciler_->Reconcile("default", "eph").ok());
  int found = 0;
  for (const auto& c : Conditions("eph")) {
    if (c["type"] != "CheckpointsEphemeral") continue;
    ++found;
    EXPECT_EQ(c["status"], "True");
    EXPECT_EQ(c["reason"], "NoCheckpointVolume");
    EXPECT_NE(c["message"].get<std::string>().find("a gang restart starts from step 0"),
              std::string::npos);
  }
  EXPECT_EQ(found, 1);
  int warnings = 0;
  for (const auto& e : Events()) {
    warnings += e["reason"] == "NoCheckpointVolume" && e["type"] == "Warning" ? 1 : 0;
  }
  EXPECT_EQ(warnings, 1);  // once, not once per pass
  EXPECT_EQ(client_.CountWrites("create", "persistentvolumeclaims"), 0);
}

// A Kubeflow user writes the program into the pod template; no pod runs it (the operator sets
// the runner container's command and args): a Warning event says so, once per generation,
// rather than the job training something else in silence.
TEST_F(CheckpointReconcileTest, ATemplateCommandNoPodRunsIsAWarningOncePerGeneration) {
  const Json tmpl = {{"spec",
                      {{"containers",
                        {{{"name", "runner"},
                          {"command", {"python3", "train.py"}},
                          {"args", {"--epochs", "3"}}}}}}}};
  Create("cmd", {{"replicas", 1}, {"template", tmpl}});
  Create("plain", {{"replicas", 1}});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(reconciler_->Reconcile("default", "cmd").ok());
    ASSERT_TRUE(reconciler_->Reconcile("default", "plain").ok());
  }
  // An edit that keeps the command: said again for the new generation, once.
  Json job = *client_.Get(kube::kTrainingJobs, "default", "cmd");
  job["metadata"]["generation"] = 2;
  job["spec"]["replicas"] = 2;
  ASSERT_TRUE(client_.Update(kube::kTrainingJobs, "default", job).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(reconciler_->Reconcile("default", "cmd").ok());

  const std::vector<Json> events = EventsWithReason("TemplateCommandIgnored");
  ASSERT_EQ(events.size(), 1u) << "only the job that sets a command";
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_EQ(events[0]["count"], 2) << "once per generation (2), not once per pass (5)";
  EXPECT_EQ(events[0]["involvedObject"]["name"], "cmd");
  EXPECT_EQ(events[0]["message"],
            "spec.template.spec.containers[runner]: command and args are ignored: every replica "
            "runs the built-in runner on spec.train (set spec.command to run a program of your "
            "own)");
}

// A recovery timeout the operator cannot pass on (a value the runner would not take) is said
// the same way, the job running with the default: never a refusal of a job that ran before.
TEST_F(CheckpointReconcileTest, ARecoveryTimeoutNoPodGetsIsAWarning) {
  const Json tmpl = {
      {"spec",
       {{"containers",
         {{{"name", "runner"},
           {"env", {{{"name", "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"}, {"value", "2m"}}}}}}}}}};
  Create("odd", {{"replicas", 1}, {"template", tmpl}});
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(reconciler_->Reconcile("default", "odd").ok());
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "odd-a0-0").ok()) << "the job runs";
  const std::vector<Json> events = EventsWithReason("TemplateEnvIgnored");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_EQ(events[0]["message"],
            "spec.template.spec.containers[runner].env RINGTRAIN_RECOVERY_TIMEOUT_SECONDS: \"2m\" "
            "is no whole number of seconds from 0 to 86400: the survivors of a lost rank wait "
            "120s");
}

// A momentum asked of adam, which has none, is said once, not refused (a job that ran before).
TEST_F(CheckpointReconcileTest, AMomentumAdamDoesNotUseIsAWarning) {
  Create("adam", {{"replicas", 1}, {"train", {{"optimizer", "adam"}, {"momentum", 0.5}}}});
  // The default (the CRD's 0.9, on every job) and sgd's are used: nothing said of them.
  Create("sgd", {{"replicas", 1}, {"train", {{"optimizer", "sgd"}, {"momentum", 0.5}}}});
  Create("plain", {{"replicas", 1}});
  for (const char* name : {"adam", "sgd", "plain"}) {
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(reconciler_->Reconcile("default", name).ok());
  }
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "adam-a0-0").ok()) << "the job runs";
  const std::vector<Json> events = EventsWithReason("MomentumIgnored");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["involvedObject"]["name"], "adam");
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_EQ(events[0]["message"],
            "spec.train.momentum: 0.5 is not used: it is optimizer sgd's; adam's first-moment "
            "decay (beta1) is 0.9");
}

// A review found a PyTorchJob's template taken in silence: its trainer container (named pytorch,
// with the GPU) became a sidecar beside the built-in runner, and the runner's image and the
// pod's restartPolicy were replaced. Each is said once, naming the field; the job runs.
TEST_F(CheckpointReconcileTest, WhatATemplateAsksForThatNoReplicaGetsIsAWarning) {
  const Json tmpl = {{"spec",
                      {{"restartPolicy", "OnFailure"},
                       {"containers",
                        {{{"name", "pytorch"},
                          {"image", "example.com/pytorch-mnist:1"},
                          {"command", {"python3", "mnist.py"}},
                          {"resources", {{"limits", {{"nvidia.com/gpu", 1}}}}}},
                         {{"name", "runner"}, {"image", "example.com/mine:1"}},
                         {{"name", "logs"}, {"image", "example.com/shipper:1"}}}}}}};
  Create("pt", {{"replicas", 1}, {"template", tmpl}});
  Create("plain", {{"replicas", 1}});
  for (const char* name : {"pt", "plain"}) {
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(reconciler_->Reconcile("default", name).ok());
  }
  EXPECT_TRUE(client_.Get(kube::kPods, "default", "pt-a0-0").ok()) << "the job runs";
  std::vector<std::string> said;
  for (const Json& e : EventsWithReason("TemplateFieldIgnored")) {
    EXPECT_EQ(e["involvedObject"]["name"], "pt");
    EXPECT_EQ(e["type"], "Warning");
    said.push_back(e["message"]);
  }
  const std::string trains =
      "the built-in runner on spec.train (set spec.image and spec.command to run a program of "
      "your own)";
  EXPECT_EQ(
      said,
      (std::vector<std::string>{
          "spec.template.spec.containers[runner].image: example.com/mine:1 is ignored: every "
          "replica runs " +
              trains,
          "spec.template.spec.restartPolicy: OnFailure is ignored: a replica's pod is never "
          "restarted in place (restartPolicy Never); a failed replica is replaced, or its "
          "gang restarted (runPolicy.recovery, backoffLimit; runPolicy.restartPolicy: OnFailure "
          "for every failure but a missing program, not only exit codes 128-255)",
          "spec.template.spec.containers[pytorch] asks for nvidia.com/gpu but does not "
          "train: only the container named runner does, running " +
              trains +
              "; pytorch runs beside it as a sidecar, without the gang's "
              "environment"}));
}

// A review found a job that failed as InvalidSpec, its spec then fixed, staying Failed with the
// old error and no word of why; so does any finished job edited. Said once, as a Warning.
TEST_F(CheckpointReconcileTest, AnEditOfAFinishedJobIsSaidToRunNothing) {
  Create("fixed", {{"replicas", 1}, {"train", {{"optimizer", "sgd"}, {"momentum", 1.5}}}});
  ASSERT_TRUE(reconciler_->Reconcile("default", "fixed").ok());
  Json job = *client_.Get(kube::kTrainingJobs, "default", "fixed");
  ASSERT_EQ(job["status"]["phase"], "Failed");
  job["spec"]["train"]["momentum"] = 0.9;
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reconciler_->Reconcile("default", "fixed").ok());
  EXPECT_EQ(client_.Get(kube::kTrainingJobs, "default", "fixed")->at("status")["phase"], "Failed");
  EXPECT_FALSE(client_.Get(kube::kPods, "default", "fixed-a0-0").ok()) << "it runs no more";
  // A job that finished (here: marked Succeeded) and is edited after.
  Create("done", {{"replicas", 1}});
  ASSERT_TRUE(reconciler_->Reconcile("default", "done").ok());
  job = *client_.Get(kube::kTrainingJobs, "default", "done");
  job["status"]["phase"] = "Succeeded";
  job["status"]["observedGeneration"] = 1;
  job["spec"]["train"]["epochs"] = 3;
  job["metadata"]["generation"] = 2;
  client_.Set(kube::kTrainingJobs, "default", job);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reconciler_->Reconcile("default", "done").ok());
  std::vector<std::string> said;
  for (const Json& e : EventsWithReason("SpecEditedAfterEnd")) said.push_back(e["message"]);
  std::sort(said.begin(), said.end());
  EXPECT_EQ(said, (std::vector<std::string>{
                      "the spec is valid now (generation 2), but the job failed as InvalidSpec: a "
                      "finished job does not run again; delete and re-create it to run the new "
                      "spec",
                      "the spec was edited (generation 1 -> 2) after the job succeeded: a "
                      "finished job does not run again; delete and re-create it to run the new "
                      "spec"}));
}

// A wait in a GangRestart job's template reached no rank (the pods get 0), unsaid: said now,
// and the pod's env says 0.
TEST_F(CheckpointReconcileTest, ARecoveryWaitOfAGangRestartJobIsAWarning) {
  const Json tmpl = {
      {"spec",
       {{"containers",
         {{{"name", "runner"},
           {"env", {{{"name", "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"}, {"value", "60"}}}}}}}}}};
  Create("gang",
         {{"replicas", 1}, {"template", tmpl}, {"runPolicy", {{"recovery", "GangRestart"}}}});
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(reconciler_->Reconcile("default", "gang").ok());
  const auto pod = client_.Get(kube::kPods, "default", "gang-a0-0");
  ASSERT_TRUE(pod.ok());
  std::vector<std::string> waits;
  for (const auto& e : (*pod)["spec"]["containers"][0]["env"]) {
    if (e["name"] == "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS") waits.push_back(e["value"]);
  }
  EXPECT_EQ(waits, std::vector<std::string>{"0"});
  const std::vector<Json> events = EventsWithReason("TemplateEnvIgnored");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_EQ(events[0]["message"],
            "spec.template.spec.containers[runner].env RINGTRAIN_RECOVERY_TIMEOUT_SECONDS is not "
            "passed on: runPolicy.recovery is GangRestart (a lost rank restarts the whole gang), "
            "so no survivor waits for a replacement (the ranks get 0)");
}

}  // namespace
}  // namespace ringtrain::op
