// What a real cluster asks of the operator's pods and children: restricted-compliant pods with
// resource requests (admitted by the fake API server in a PodSecurity "restricted" namespace,
// where the pods of before were refused with the recorded message), and checkpoint storage (the
// job's PVC, a user volume, or an emptyDir with a Warning and a condition).
#include <gtest/gtest.h>

#include <set>

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

// A template whose fields have the wrong types (the CRD keeps the template as free-form JSON)
// must not throw out of the pod builder: such fields read as absent, and the pod still carries
// everything the runner needs.
TEST(PodBuilderTest, WrongTypedTemplateFieldsNeverThrow) {
  const Json hostile_runners[] = {
      {{"name", "runner"}, {"env", {"x", 5, {{"name", 7}}, {{"name", "RANK"}, {"value", "9"}}}}},
      {{"name", "runner"}, {"ports", {"p", 3, {{"containerPort", "9400"}}}}},
      {{"name", "runner"}, {"resources", "lots"}},
      {{"name", "runner"}, {"resources", {{"requests", "1"}, {"limits", 5}}}},
      {{"name", "runner"}, {"securityContext", "privileged"}},
      {{"name", "runner"}, {"volumeMounts", "none"}},
      {{"name", 42}},
  };
  for (const Json& runner : hostile_runners) {
    for (int gpus : {0, 2}) {
      Json tmpl_spec = {{"containers", Json::array({runner, "sidecar"})}, {"volumes", "none"}};
      Json tmpl = {{"metadata", {{"labels", "x"}, {"annotations", 3}}}, {"spec", tmpl_spec}};
      Json spec = {{"replicas", 2}, {"gpusPerReplica", gpus}, {"template", tmpl}};
      if (gpus > 0) spec["backend"] = "nccl";
      api::TrainingJob job = ParseJob("hostile", "default", spec);
      Json pod;
      ASSERT_NO_THROW(pod = BuildPod(job, 0, 1, PodOptions{})) << runner.dump();
      const Json& c = pod["spec"]["containers"][0];
      EXPECT_EQ(c["name"], "runner");
      bool has_rank = false;
      for (const auto& e : c["env"]) {
        if (e.is_object() && e.value("name", Json()) == "RANK") {
          EXPECT_EQ(e["value"], std::to_string(gpus > 0 ? gpus : 1)) << "ours wins";
          has_rank = true;
        }
      }
      EXPECT_TRUE(has_rank) << runner.dump();
      EXPECT_EQ(pod["metadata"]["labels"]["ringtrain.dev/rank"], "1");
    }
  }
}

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

TEST(PodSecurityTest, PodIsRestrictedAndTheTemplateMayOverride) {
  Json pod = BuildPod(ParseJob("j", "default", {{"replicas", 1}}), 0, 0, PodOptions{});
  EXPECT_EQ(pod["spec"]["securityContext"],
            Json({{"runAsNonRoot", true},
                  {"runAsUser", 65532},
                  {"runAsGroup", 65532},
                  {"fsGroup", 65532},
                  {"fsGroupChangePolicy", "OnRootMismatch"},
                  {"seccompProfile", {{"type", "RuntimeDefault"}}}}));
  EXPECT_EQ(pod["spec"]["automountServiceAccountToken"], false);
  EXPECT_EQ(pod["spec"]["containers"][0]["securityContext"],
            Json({{"allowPrivilegeEscalation", false}, {"capabilities", {{"drop", {"ALL"}}}}}));

  // A user image that must run as root says so in the template; we do not contradict it.
  Json root = BuildPod(
      ParseJob("j", "default",
               {{"replicas", 1},
                {"template",
                 {{"spec",
                   {{"securityContext", {{"runAsUser", 0}}},
                    {"automountServiceAccountToken", true},
                    {"containers",
                     {{{"name", "runner"},
                       {"securityContext", {{"capabilities", {{"add", {"SYS_PTRACE"}}}}}}}}}}}}}}),
      0, 0, PodOptions{});
  EXPECT_EQ(root["spec"]["securityContext"]["runAsUser"], 0);
  EXPECT_FALSE(root["spec"]["securityContext"].contains("runAsNonRoot"));
  EXPECT_EQ(root["spec"]["automountServiceAccountToken"], true);
  EXPECT_EQ(root["spec"]["containers"][0]["securityContext"]["capabilities"],
            Json({{"add", {"SYS_PTRACE"}}}));
}

TEST(PodSecurityTest, ResourcesComeFromTheSpecWithDefaults) {
  auto runner = [](Json spec) {
    spec["replicas"] = 1;
    return BuildPod(ParseJob("j", "default", spec), 0, 0,
                    PodOptions{})["spec"]["containers"][0]["resources"];
  };
  // A CPU gang of two fits a 2-CPU node beside the operator and a control plane.
  EXPECT_EQ(runner(Json::object()), Json({{"requests", {{"cpu", "500m"}, {"memory", "512Mi"}}},
                                          {"limits", {{"memory", "2Gi"}}}}));
  EXPECT_EQ(runner({{"resources", {{"requests", {{"cpu", 3}}}}}}),
            Json({{"requests", {{"cpu", "3"}}}}));
  Json gpu = runner({{"gpusPerReplica", 2}});
  EXPECT_EQ(gpu["limits"]["nvidia.com/gpu"], 2);
  EXPECT_EQ(gpu["limits"]["memory"], "4Gi");
  EXPECT_EQ(gpu["requests"]["cpu"], "1");
  // The template's runner container with its own resources wins.
  Json templated = runner(
      {{"template",
        {{"spec",
          {{"containers",
            {{{"name", "runner"}, {"resources", {{"requests", {{"memory", "9Gi"}}}}}}}}}}}}});
  EXPECT_EQ(templated, Json({{"requests", {{"memory", "9Gi"}}}}));
}

// The checkpoint volume and its mount on pod `index`, or nulls.
std::pair<Json, Json> CheckpointMount(const Json& pod, const std::string& path) {
  Json volume, mount;
  for (const auto& v : pod["spec"].value("volumes", Json::array())) {
    if (v["name"] == kCheckpointVolume) volume = v;
  }
  for (const auto& m : pod["spec"]["containers"][0].value("volumeMounts", Json::array())) {
    if (m["mountPath"] == path) mount = m;
  }
  return {volume, mount};
}

TEST(CheckpointStorageTest, ClaimIsOwnedByTheJobAndMountedWhereRankZeroRuns) {
  api::TrainingJob job = ParseJob(
      "ckpt-job", "ml",
      {{"replicas", 2},
       {"checkpoint", {{"volumeClaim", {{"size", "5Gi"}, {"storageClassName", "fast"}}}}}});
  auto claim = BuildCheckpointClaim(job);
  ASSERT_TRUE(claim.has_value());
  EXPECT_EQ((*claim)["metadata"]["name"], "ckpt-job-checkpoints");
  EXPECT_EQ((*claim)["metadata"]["namespace"], "ml");
  EXPECT_EQ((*claim)["metadata"]["ownerReferences"][0], OwnerReference(job));
  EXPECT_EQ((*claim)["spec"], Json({{"accessModes", {"ReadWriteOnce"}},
                                    {"resources", {{"requests", {{"storage", "5Gi"}}}}},
                                    {"storageClassName", "fast"}}));
  auto [volume, mount] = CheckpointMount(BuildPod(job, 0, 0, PodOptions{}), "/ckpt");
  EXPECT_EQ(volume, Json({{"name", kCheckpointVolume},
                          {"persistentVolumeClaim", {{"claimName", "ckpt-job-checkpoints"}}}}));
  EXPECT_EQ(mount, Json({{"name", kCheckpointVolume}, {"mountPath", "/ckpt"}}));
  // ReadWriteOnce: the pod of rank 1 (maybe on another node) must not claim it.
  auto [v1, m1] = CheckpointMount(BuildPod(job, 0, 1, PodOptions{}), "/ckpt");
  EXPECT_TRUE(v1.is_null());
  EXPECT_TRUE(m1.is_null());

  api::TrainingJob rwx = ParseJob(
      "shared", "ml",
      {{"replicas", 2},
       {"checkpoint", {{"path", "/out"}, {"volumeClaim", {{"accessModes", {"ReadWriteMany"}}}}}}});
  EXPECT_FALSE(CheckpointMount(BuildPod(rwx, 0, 1, PodOptions{}), "/out").second.is_null());
}

TEST(CheckpointStorageTest, UserVolumeOrElseAnEmptyDir) {
  api::TrainingJob nfs = ParseJob(
      "n", "default",
      {{"replicas", 2},
       {"checkpoint", {{"volume", {{"nfs", {{"server", "nas"}, {"path", "/exports"}}}}}}}});
  EXPECT_FALSE(BuildCheckpointClaim(nfs).has_value());
  EXPECT_FALSE(CheckpointsAreEphemeral(nfs.spec));
  auto [volume, mount] = CheckpointMount(BuildPod(nfs, 0, 0, PodOptions{}), "/ckpt");
  EXPECT_EQ(volume, Json({{"name", kCheckpointVolume},
                          {"nfs", {{"server", "nas"}, {"path", "/exports"}}}}));
  EXPECT_FALSE(mount.is_null());

  api::TrainingJob none = ParseJob("e", "default", {{"replicas", 1}});
  EXPECT_TRUE(CheckpointsAreEphemeral(none.spec));
  auto [empty, empty_mount] = CheckpointMount(BuildPod(none, 0, 0, PodOptions{}), "/ckpt");
  EXPECT_EQ(empty, Json({{"name", kCheckpointVolume}, {"emptyDir", Json::object()}}));
  EXPECT_FALSE(empty_mount.is_null());

  // A mount the template already puts at the path is left alone.
  api::TrainingJob own =
      ParseJob("o", "default",
               {{"replicas", 1},
                {"template",
                 {{"spec",
                   {{"volumes", {{{"name", "mine"}, {"emptyDir", Json::object()}}}},
                    {"containers",
                     {{{"name", "runner"},
                       {"volumeMounts", {{{"name", "mine"}, {"mountPath", "/ckpt"}}}}}}}}}}}});
  Json pod = BuildPod(own, 0, 0, PodOptions{});
  int checkpoint_volumes = 0;
  for (const auto& v : pod["spec"]["volumes"]) {
    checkpoint_volumes += v["name"] == kCheckpointVolume || v["name"] == "mine" ? 1 : 0;
  }
  EXPECT_EQ(checkpoint_volumes, 1);
  int ckpt_mounts = 0;
  for (const auto& m : pod["spec"]["containers"][0]["volumeMounts"]) {
    ckpt_mounts += m["mountPath"] == "/ckpt" ? 1 : 0;
  }
  EXPECT_EQ(ckpt_mounts, 1);
  // ... and an emptyDir of the template's is as ephemeral as ours.
  EXPECT_TRUE(CheckpointsAreEphemeral(own.spec));

  // The template's own volume at the path keeps the checkpoints: no NoCheckpointVolume warning.
  api::TrainingJob pvc = ParseJob(
      "p", "default",
      {{"replicas", 1},
       {"template",
        {{"spec",
          {{"volumes", {{{"name", "mine"}, {"persistentVolumeClaim", {{"claimName", "c"}}}}}},
           {"containers",
            {{{"name", "runner"},
              {"volumeMounts", {{{"name", "mine"}, {"mountPath", "/ckpt"}}}}}}}}}}}});
  EXPECT_FALSE(CheckpointsAreEphemeral(pvc.spec));

  // A template of the wrong shape never throws out of the builder: the API server refuses it.
  Json odd_runner = {{"name", "runner"}, {"volumeMounts", Json::array({"x"})}};
  Json odd_spec = {{"securityContext", {{"runAsUser", "0"}}},
                   {"volumes", "none"},
                   {"containers", Json::array({odd_runner, "junk"})}};
  api::TrainingJob odd =
      ParseJob("odd", "default", {{"replicas", 1}, {"template", {{"spec", odd_spec}}}});
  EXPECT_NO_THROW(BuildPod(odd, 0, 0, PodOptions{}));
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

}  // namespace
}  // namespace ringtrain::op
