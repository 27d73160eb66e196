// The pod builder alone (controller/executors/kubernetes/pod_builder.h): pods, their env
// contract, placement, restricted security defaults, resources and checkpoint storage, and
// what is observed back from a pod. Pure functions of a TrainingJob: no API server, no client.
#include "controller/executors/kubernetes/pod_builder.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/time_format.h"
#include "controller/reconcile/observe_status.h"
#include "controller/reconcile/planner.h"

namespace ringtrain::op {
namespace {

api::TrainingJob ParseJob(const std::string& name, const std::string& ns, Json spec) {
  Json raw = {{"apiVersion", "ringtrain.dev/v1alpha1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"uid", "u1"}}},
              {"spec", spec}};
  auto job = api::ParseJobJson(raw.dump());
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return job.ok() ? *job : api::TrainingJob{};
}

// A job with a template the parser refuses (spec.template's shape: api::ParseJobJson), as the
// builder would meet it if one got past: the builder's own defence.
api::TrainingJob WithUncheckedTemplate(const std::string& name, Json spec, const Json& tmpl) {
  Json checked = spec;
  checked["template"] = tmpl;
  EXPECT_FALSE(api::ParseJobJson(Json{{"apiVersion", "ringtrain.dev/v1alpha1"},
                                      {"kind", "TrainingJob"},
                                      {"metadata", {{"name", name}, {"namespace", "default"}}},
                                      {"spec", checked}}
                                     .dump())
                   .ok())
      << "the parser takes " << tmpl.dump();
  api::TrainingJob job = ParseJob(name, "default", std::move(spec));
  job.spec.pod_template_json = tmpl.dump();
  return job;
}

// A TrainingJob named mnist in default, as the API server stores it.
Json Job(int replicas, Json extra = Json::object()) {
  Json j = {{"apiVersion", "ringtrain.dev/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", "mnist"}, {"namespace", "default"}, {"generation", 1}}},
            {"spec", {{"replicas", replicas}, {"train", {{"epochs", 1}}}}}};
  j.merge_patch(extra);
  return j;
}

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
      Json spec = {{"replicas", 2}, {"gpusPerReplica", gpus}};
      if (gpus > 0) spec["backend"] = "nccl";
      api::TrainingJob job = WithUncheckedTemplate("hostile", spec, tmpl);
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

// Each pod says what it was built from: a hash of the pod as built and the spec's generation. An
// edit that changes what a replica runs changes the hash; one that does not (backoffLimit, the
// deadlines that only bound the gang gate's wait, status.avoidedNodes) keeps it.
TEST(PodBuilderTest, APodCarriesTheHashOfWhatItWasBuiltFrom) {
  auto build = [](Json patch, int rank = 1, int generation = 1) {
    Json spec = {{"replicas", 2}, {"train", {{"epochs", 40}}}};
    spec.merge_patch(patch);
    api::TrainingJob job = ParseJob("mnist", "default", spec);
    job.metadata.generation = generation;
    return BuildPod(job, 0, rank, PodOptions{});
  };
  auto hash = [](const Json& pod) {
    return pod["metadata"]["annotations"][kSpecHashAnnotation].get<std::string>();
  };
  const Json pod = build(Json::object());
  ASSERT_EQ(hash(pod).size(), 16u);
  EXPECT_EQ(pod["metadata"]["annotations"][kSpecGenerationAnnotation], "1");
  EXPECT_EQ(hash(build(Json::object(), 1, 2)), hash(pod)) << "a build is reproducible";
  EXPECT_NE(hash(build({{"train", {{"epochs", 20}}}})), hash(pod));
  EXPECT_NE(hash(build({{"image", "example.com/other:1"}})), hash(pod));
  EXPECT_NE(hash(build(Json::object(), 0)), hash(pod)) << "each rank's own pod";
  EXPECT_EQ(hash(build({{"runPolicy", {{"backoffLimit", 7}}}})), hash(pod));
  EXPECT_EQ(hash(build({{"runPolicy", {{"activeDeadlineSeconds", 9000}}}})), hash(pod));
  EXPECT_EQ(hash(build({{"runPolicy", {{"schedulingTimeoutSeconds", 600}}}})), hash(pod));
  // Node avoidance follows the status, not the spec.
  api::TrainingJob avoiding =
      ParseJob("mnist", "default", {{"replicas", 2}, {"train", {{"epochs", 40}}}});
  avoiding.metadata.generation = 1;
  avoiding.status.avoided_nodes.push_back({"node-7", "NodeLost", 0, true});
  const Json avoided = BuildPod(avoiding, 0, 1, PodOptions{});
  ASSERT_TRUE(avoided["spec"].contains("affinity"));
  EXPECT_EQ(hash(avoided), hash(pod));
  EXPECT_EQ(PodSpecHash(avoiding, 0, 1), hash(pod));
  // Read back from the pod.
  const reconcile::ObservedReplica r = ObserveReplica(build(Json::object(), 1, 3));
  EXPECT_EQ(r.spec_hash, hash(pod));
  EXPECT_EQ(r.spec_generation, 3);
  Json unstamped = pod;
  unstamped["metadata"]["annotations"].erase(kSpecHashAnnotation);
  unstamped["metadata"]["annotations"].erase(kSpecGenerationAnnotation);
  EXPECT_EQ(ObserveReplica(unstamped).spec_hash, "");
  EXPECT_EQ(ObserveReplica(unstamped).spec_generation, 0);
}

// The run hash leaves the labels out: an edit of the template's labels alone changes the spec
// hash and not the run hash (the operator relabels such pods in place); anything else, an
// annotation included (a webhook may act on it at admission), changes both.
TEST(PodBuilderTest, ThePodsRunHashLeavesItsLabelsOut) {
  auto build = [](const Json& tmpl_meta, int rank = 1) {
    Json spec = {
        {"replicas", 2}, {"train", {{"epochs", 40}}}, {"template", {{"metadata", tmpl_meta}}}};
    api::TrainingJob job = ParseJob("mnist", "default", spec);
    job.metadata.generation = 2;
    return BuildPod(job, 0, rank, PodOptions{});
  };
  auto ann = [](const Json& pod, const char* key) {
    return pod["metadata"]["annotations"][key].get<std::string>();
  };
  const Json base = build({{"labels", {{"team", "a"}}}});
  ASSERT_EQ(ann(base, kRunHashAnnotation).size(), 16u);
  const Json relabeled = build({{"labels", {{"team", "b"}, {"cost", "x"}}}});
  EXPECT_NE(ann(relabeled, kSpecHashAnnotation), ann(base, kSpecHashAnnotation));
  EXPECT_EQ(ann(relabeled, kRunHashAnnotation), ann(base, kRunHashAnnotation));
  const Json annotated =
      build({{"labels", {{"team", "a"}}}, {"annotations", {{"sidecar.istio.io/inject", "false"}}}});
  EXPECT_NE(ann(annotated, kSpecHashAnnotation), ann(base, kSpecHashAnnotation));
  EXPECT_NE(ann(annotated, kRunHashAnnotation), ann(base, kRunHashAnnotation));
  EXPECT_NE(ann(build({{"labels", {{"team", "a"}}}}, 0), kRunHashAnnotation),
            ann(base, kRunHashAnnotation))
      << "each rank's own pod";
  EXPECT_EQ(ObserveReplica(base).run_hash, ann(base, kRunHashAnnotation));
  api::TrainingJob job = ParseJob("mnist", "default",
                                  {{"replicas", 2},
                                   {"train", {{"epochs", 40}}},
                                   {"template", {{"metadata", {{"labels", {{"team", "a"}}}}}}}});
  const PodHashes hashes = PodSpecHashes(job, 0, 1);
  EXPECT_EQ(hashes.spec, ann(base, kSpecHashAnnotation));
  EXPECT_EQ(hashes.run, ann(base, kRunHashAnnotation));
  EXPECT_EQ(PodSpecHash(job, 0, 1), hashes.spec);
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

// The template's init containers, a native sidecar among them, get the same defaults: the
// "restricted" standard checks them too, and one without refused the whole pod (review). A field
// an init container sets still wins.
TEST(PodSecurityTest, InitContainersAreRestrictedToo) {
  Json pod = BuildPod(
      ParseJob("j", "default",
               {{"replicas", 1},
                {"template",
                 {{"spec",
                   {{"initContainers",
                     {{{"name", "init"}, {"image", "busybox"}},
                      {{"name", "nat"}, {"image", "proxy"}, {"restartPolicy", "Always"}},
                      {{"name", "own"},
                       {"image", "busybox"},
                       {"securityContext", {{"capabilities", {{"add", {"NET_ADMIN"}}}}}}}}}}}}}}),
      0, 0, PodOptions{});
  const Json restricted = {{"allowPrivilegeEscalation", false},
                           {"capabilities", {{"drop", {"ALL"}}}}};
  const Json& init = pod["spec"]["initContainers"];
  ASSERT_EQ(init.size(), 3u) << init.dump();
  EXPECT_EQ(init[0]["securityContext"], restricted);
  EXPECT_EQ(init[1]["securityContext"], restricted);
  EXPECT_EQ(init[2]["securityContext"], Json({{"allowPrivilegeEscalation", false},
                                              {"capabilities", {{"add", {"NET_ADMIN"}}}}}));
  // What a container asks for that the defaults contradict, it keeps (review): a privileged
  // one, or one adding SYS_ADMIN, gets no allowPrivilegeEscalation: false (the API server
  // refuses "cannot set allowPrivilegeEscalation to false and privileged to true"), and an init
  // container that runs as root keeps root's capabilities (a chown needs CAP_CHOWN).
  Json own =
      BuildPod(ParseJob("j", "default",
                        {{"replicas", 1},
                         {"template",
                          {{"spec",
                            {{"initContainers",
                              {{{"name", "sysctl"},
                                {"image", "busybox"},
                                {"securityContext", {{"privileged", true}}}},
                               {{"name", "mount"},
                                {"image", "busybox"},
                                {"securityContext", {{"capabilities", {{"add", {"SYS_ADMIN"}}}}}}},
                               {{"name", "chown"},
                                {"image", "busybox"},
                                {"securityContext", {{"runAsUser", 0}}}}}}}}}}}),
               0, 0, PodOptions{});
  const Json& asked = own["spec"]["initContainers"];
  EXPECT_EQ(asked[0]["securityContext"], Json({{"privileged", true}}));
  EXPECT_EQ(asked[1]["securityContext"], Json({{"capabilities", {{"add", {"SYS_ADMIN"}}}}}));
  EXPECT_EQ(asked[2]["securityContext"],
            Json({{"runAsUser", 0}, {"allowPrivilegeEscalation", false}}));
  // The runner container keeps its defaults as before.
  EXPECT_EQ(own["spec"]["containers"][0]["securityContext"], restricted);
  // No template, no init containers made up.
  EXPECT_FALSE(
      BuildPod(ParseJob("j", "default", {{"replicas", 1}}), 0, 0, PodOptions{})["spec"].contains(
          "initContainers"));
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

// storageClassName as a PersistentVolumeClaim reads it: not given, the cluster's default class;
// "" given, no class (a PersistentVolume made for the claim binds it). The "" was dropped, so the
// default class provisioned a new volume beside the one made for the job (review).
TEST(CheckpointStorageTest, AnEmptyStorageClassNameAsksForNone) {
  const auto claim_spec = [](const Json& claim) {
    api::TrainingJob job =
        ParseJob("c", "ml", {{"replicas", 1}, {"checkpoint", {{"volumeClaim", claim}}}});
    return (*BuildCheckpointClaim(job))["spec"];
  };
  const Json none = claim_spec({{"storageClassName", ""}});
  ASSERT_TRUE(none.contains("storageClassName")) << none.dump();
  EXPECT_EQ(none["storageClassName"], "");
  EXPECT_FALSE(claim_spec(Json::object()).contains("storageClassName"));
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
  // A program of the user's keeps its state where it chooses: none is known lost.
  api::TrainingJob command = own;
  command.spec.command = {"python3", "train.py"};
  EXPECT_FALSE(CheckpointsAreEphemeral(command.spec));

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

  // A template of the wrong shape never throws out of the builder (the parser refuses it first).
  Json odd_runner = {{"name", "runner"}, {"volumeMounts", Json::array({"x"})}};
  Json odd_spec = {{"securityContext", {{"runAsUser", "0"}}},
                   {"volumes", "none"},
                   {"containers", Json::array({odd_runner, "junk"})}};
  api::TrainingJob odd = WithUncheckedTemplate("odd", {{"replicas", 1}}, {{"spec", odd_spec}});
  EXPECT_NO_THROW(BuildPod(odd, 0, 0, PodOptions{}));
}

TEST(PodBuilderTest, AvoidedNodesBecomeNodeAffinityOnTheNodesName) {
  const Json tmpl = Json::parse(R"({"spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
      "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}}}}}})");
  auto job = api::ParseJobJson(Job(2, tmpl).dump());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  job->status.avoided_nodes = {{"old", "NodeLost", 0, true}, {"bad", "Evicted", 3, true}};
  Json pod = BuildPod(*job, 4, 0, PodOptions{});
  const Json& affinity = pod["spec"]["affinity"]["nodeAffinity"];
  const Json& term =
      affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
  // The user's term keeps its expression and gains ours (ANDed).
  EXPECT_EQ(term["matchExpressions"][0]["key"], "pool");
  EXPECT_EQ(term["matchFields"][0],
            Json({{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"bad"}}}));
  // Four attempts after it failed there, "old" is only preferred against.
  EXPECT_EQ(affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
                    ["matchFields"][0]["values"],
            Json({"old"}));
  // No avoided node: no affinity added.
  job->status.avoided_nodes.clear();
  Json plain = BuildPod(*job, 4, 0, PodOptions{});
  EXPECT_FALSE(plain["spec"]["affinity"]["nodeAffinity"]
                    ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                        .contains("matchFields"));
}

// A node that only refused a pod (required false) is preferred against from the next attempt
// on: no required term, so a one-node cluster still places the gang there.
TEST(PodBuilderTest, ANodeOnlyPreferredAgainstAddsNoRequiredTerm) {
  auto job = api::ParseJobJson(Job(2).dump());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  job->status.avoided_nodes = {{"node-0", "OutOfcpu", 0, false}};
  Json pod = BuildPod(*job, 1, 0, PodOptions{});
  const Json& affinity = pod["spec"]["affinity"]["nodeAffinity"];
  EXPECT_FALSE(affinity.contains("requiredDuringSchedulingIgnoredDuringExecution"))
      << affinity.dump();
  ASSERT_EQ(affinity["preferredDuringSchedulingIgnoredDuringExecution"].size(), 1u);
  const Json& preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"][0];
  EXPECT_EQ(preferred["weight"], 100);
  EXPECT_EQ(preferred["preference"]["matchFields"][0],
            Json({{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"node-0"}}}));
}

TEST(PodBuilderTest, PodCarriesTheEnvContractAndTheUserTemplate) {
  Json raw = Job(
      4, {{"metadata", {{"uid", "u1"}, {"namespace", "ml"}}},
          {"spec",
           {{"gpusPerReplica", 1},
            {"runPolicy", {{"schedulerName", "volcano"}}},
            {"template",
             {{"metadata", {{"labels", {{"team", "a"}}}}},
              {"spec",
               {{"nodeSelector", {{"gpu", "a100"}}},
                {"containers",
                 {{{"name", "runner"},
                   {"env",
                    {{{"name", "EXTRA"}, {"value", "1"}}, {{"name", "RANK"}, {"value", "bogus"}}}},
                   {"volumeMounts", {{{"name", "data"}, {"mountPath", "/d"}}}}},
                  {{"name", "sidecar"}, {"image", "busybox"}}}}}}}}}}});
  auto job = api::ParseJobJson(raw.dump());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  Json pod = BuildPod(*job, 2, 3, PodOptions{});
  EXPECT_EQ(pod["metadata"]["name"], "mnist-a2-3");
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(pod["metadata"]["labels"]["ringtrain.dev/rank"], "3");
  EXPECT_EQ(pod["metadata"]["labels"]["ringtrain.dev/attempt"], "2");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], "u1");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["hostname"], "mnist-a2-3");
  EXPECT_EQ(pod["spec"]["subdomain"], "mnist");
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["gpu"], "a100");
  ASSERT_EQ(pod["spec"]["containers"].size(), 2u);
  const Json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["name"], "runner");
  EXPECT_EQ(c["command"][0], "ringtrain-runner");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], 1);
  EXPECT_EQ(c["terminationMessagePolicy"], "FallbackToLogsOnError");
  EXPECT_EQ(c["volumeMounts"][0]["name"], "data");
  std::map<std::string, Json> env;
  for (const auto& e : c["env"]) env[e["name"]] = e;
  EXPECT_EQ(env["RINGTRAIN_MASTER_ADDR"]["value"], "mnist-a2-0.mnist.ml.svc");
  EXPECT_EQ(env["MASTER_ADDR"]["value"], "mnist-a2-0.mnist.ml.svc");
  EXPECT_EQ(env["RINGTRAIN_MASTER_PORT"]["value"], "29500");
  EXPECT_EQ(env["RANK"]["value"], "3");  // ours win over the template's
  EXPECT_EQ(env["WORLD_SIZE"]["value"], "4");
  EXPECT_EQ(env["RINGTRAIN_ATTEMPT"]["value"], "2");
  EXPECT_EQ(env["RINGTRAIN_TOKEN"]["valueFrom"]["secretKeyRef"]["name"], "mnist-token");
  EXPECT_EQ(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
  EXPECT_EQ(env["RINGTRAIN_METRICS_PORT"]["value"], "9400");
  EXPECT_EQ(env["RINGTRAIN_IMAGE"]["value"], c["image"]);  // in the gang's fingerprint
  EXPECT_EQ(env["EXTRA"]["value"], "1");
  EXPECT_FALSE(env.contains("PET_NNODES")) << "the runner is no torchrun";
  Json svc = BuildService(*job);
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
}

// A review found: `command: [torchrun, train.py]` (the CRD's own example) trained a world of one
// in every pod (torchrun reads its nodes, node rank and master from flags or PET_*, not from
// RANK/WORLD_SIZE, which it overwrites), and a program with gpusPerReplica 2 was told
// WORLD_SIZE 4 with no word of how many processes its replica was to start.
TEST(PodBuilderTest, AProgramOfTheUsersGetsTorchrunsSettings) {
  api::TrainingJob job =
      ParseJob("mnist", "ml",
               {{"replicas", 2}, {"gpusPerReplica", 2}, {"command", {"torchrun", "train.py"}}});
  Json pod = BuildPod(job, 1, 1, PodOptions{});
  std::map<std::string, std::string> env;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e.contains("value")) env[e["name"]] = e["value"];
  }
  EXPECT_EQ(env["PET_NNODES"], "2");
  EXPECT_EQ(env["PET_NODE_RANK"], "1");
  EXPECT_EQ(env["PET_NPROC_PER_NODE"], "2");
  EXPECT_EQ(env["PET_MASTER_ADDR"], "mnist-a1-0.mnist.ml.svc");
  EXPECT_EQ(env["PET_MASTER_PORT"], "29500");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["RANK"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
}

TEST(PodBuilderTest, SeveralGpusMakeOnePodANodeOfRanks) {
  Json raw = Job(3, {{"metadata", {{"uid", "u1"}}}, {"spec", {{"gpusPerReplica", 4}}}});
  auto job = api::ParseJobJson(raw.dump());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  Json pod = BuildPod(*job, 0, 2, PodOptions{});
  const Json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], 4);
  std::map<std::string, Json> env;
  for (const auto& e : c["env"]) env[e["name"]] = e;
  EXPECT_EQ(env["WORLD_SIZE"]["value"], "12");
  EXPECT_EQ(env["RINGTRAIN_NPROC_PER_NODE"]["value"], "4");  // the runner starts 4 ranks
  EXPECT_EQ(env["RINGTRAIN_NODE_RANK"]["value"], "2");
  EXPECT_EQ(env["RANK"]["value"], "8");  // its first rank: ranks 8..11 live in this pod
  std::set<int> ports;
  for (const auto& p : c["ports"]) ports.insert(p["containerPort"].get<int>());
  EXPECT_EQ(ports, (std::set<int>{29500, 9400, 9401, 9402, 9403}));
  bool device_cuda = false;
  for (std::size_t i = 0; i + 1 < c["args"].size(); ++i) {
    if (c["args"][i] == "--device" && c["args"][i + 1] == "cuda") device_cuda = true;
  }
  EXPECT_TRUE(device_cuda);
}

TEST(PodBuilderTest, ObservesExitCodesDisruptionsAndDeletion) {
  Json pod = {{"metadata",
               {{"name", "j-a1-0"},
                {"labels", {{"ringtrain.dev/rank", "0"}, {"ringtrain.dev/attempt", "1"}}},
                {"deletionTimestamp", "2026-01-01T00:00:00Z"}}},
              {"status",
               {{"phase", "Failed"},
                {"conditions", {{{"type", "DisruptionTarget"}, {"status", "True"}}}},
                {"containerStatuses",
                 {{{"name", "runner"},
                   {"state",
                    {{"terminated",
                      {{"exitCode", 137}, {"reason", "OOMKilled"}, {"message", "oom\n"}}}}}}}}}}};
  auto r = ObserveReplica(pod);
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.attempt, 1);
  EXPECT_EQ(r.phase, reconcile::ReplicaPhase::kFailed);
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_EQ(r.reason, "OOMKilled");
  EXPECT_EQ(r.message, "oom");
  EXPECT_TRUE(r.disruption);
  EXPECT_TRUE(r.terminating);
  EXPECT_FALSE(r.deleted_by_executor);
  // The operator's mark before its own delete (a released partial gang), in the cache too.
  pod["metadata"]["annotations"] = {{kDeletedByOperatorAnnotation, "released"}};
  EXPECT_TRUE(ObserveReplica(pod).deleted_by_executor);
  EXPECT_TRUE(ObserveReplica(TrimPodForCache(pod)).deleted_by_executor);
  pod["status"] = {{"phase", "Failed"}, {"reason", "Evicted"}, {"message", "low memory"}};
  r = ObserveReplica(pod);
  EXPECT_EQ(r.reason, "Evicted");
  EXPECT_TRUE(reconcile::IsRetryable(r));
  pod["metadata"]["labels"]["ringtrain.dev/attempt"] = "x";
  EXPECT_EQ(ObserveReplica(pod).rank, -1);
}

// restartPolicy Never and a sidecar (istio-proxy, or one of spec.template's): the pod stays
// Running after the runner ended; the runner's exit is the replica's.
TEST(PodBuilderTest, ARunnerThatEndedBesideARunningSidecarEndsTheReplica) {
  auto pod_with_runner = [](Json terminated) {
    return Json{{"metadata",
                 {{"name", "j-a0-0"},
                  {"labels", {{"ringtrain.dev/rank", "0"}, {"ringtrain.dev/attempt", "0"}}}}},
                {"status",
                 {{"phase", "Running"},
                  {"containerStatuses",
                   {{{"name", "istio-proxy"}, {"state", {{"running", Json::object()}}}},
                    {{"name", "runner"}, {"state", {{"terminated", terminated}}}}}}}}};
  };
  Json ok = pod_with_runner({{"exitCode", 0}, {"reason", "Completed"}, {"message", "{}"}});
  auto r = ObserveReplica(ok);
  EXPECT_EQ(r.phase, reconcile::ReplicaPhase::kSucceeded);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.message, "{}");
  EXPECT_TRUE(r.pod_running);

  Json oom = pod_with_runner(
      {{"exitCode", 137}, {"reason", "OOMKilled"}, {"finishedAt", "2026-01-01T00:00:05Z"}});
  r = ObserveReplica(oom);
  EXPECT_EQ(r.phase, reconcile::ReplicaPhase::kFailed);
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_EQ(r.reason, "OOMKilled");
  EXPECT_TRUE(r.finished_at.has_value());
  EXPECT_TRUE(r.pod_running);
  EXPECT_TRUE(reconcile::IsRetryable(r));

  // A stop in progress (deleted, disrupted): an exit 0 on SIGTERM is no success.
  ok["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_EQ(ObserveReplica(ok).phase, reconcile::ReplicaPhase::kRunning);
  ok["metadata"].erase("deletionTimestamp");
  ok["status"]["conditions"] = {{{"type", "DisruptionTarget"}, {"status", "True"}}};
  EXPECT_EQ(ObserveReplica(ok).phase, reconcile::ReplicaPhase::kRunning);
  // The kubelet's eviction without PodDisruptionConditions: a pod-level reason only.
  ok["status"].erase("conditions");
  ok["status"]["reason"] = "Evicted";
  EXPECT_EQ(ObserveReplica(ok).phase, reconcile::ReplicaPhase::kRunning);
  ok["status"].erase("reason");

  // The sidecar ran alone: the pod reads as its phase.
  Json running = pod_with_runner(Json::object());
  running["status"]["containerStatuses"][1]["state"] = {{"running", Json::object()}};
  r = ObserveReplica(running);
  EXPECT_EQ(r.phase, reconcile::ReplicaPhase::kRunning);
  EXPECT_FALSE(r.pod_running);
}

// A real v1.28 kubelet writes the runner's terminated state about a second before the pod's
// terminal phase: a pod of one container then reads Running with nothing running in it. Its
// replica has ended, and the pod holds nothing (cleanPodPolicy Running must leave it, and its
// log, alone); only a container still running or waiting beside the runner holds the pod.
TEST(PodBuilderTest, APodWhoseOnlyContainerEndedRunsNothingBeforeItsPhaseSaysSo) {
  auto pod = [](int exit_code) {
    return Json{{"metadata",
                 {{"name", "j-a0-1"},
                  {"labels", {{"ringtrain.dev/rank", "1"}, {"ringtrain.dev/attempt", "0"}}}}},
                {"status",
                 {{"phase", "Running"},
                  {"containerStatuses",
                   {{{"name", "runner"},
                     {"ready", false},
                     {"state",
                      {{"terminated",
                        {{"exitCode", exit_code},
                         {"reason", exit_code == 0 ? "Completed" : "Error"}}}}}}}}}}};
  };
  for (int code : {0, 3}) {
    auto r = ObserveReplica(pod(code));
    EXPECT_EQ(r.phase,
              code == 0 ? reconcile::ReplicaPhase::kSucceeded : reconcile::ReplicaPhase::kFailed);
    EXPECT_FALSE(r.pod_running) << "exit " << code;
  }
  // A sidecar that has ended too holds nothing; one still running, one waiting to start, and
  // a native sidecar (an init container that keeps running) hold the pod.
  Json sidecar = pod(3);
  sidecar["status"]["containerStatuses"].push_back(
      {{"name", "log-shipper"}, {"state", {{"terminated", {{"exitCode", 0}}}}}});
  EXPECT_FALSE(ObserveReplica(sidecar).pod_running);
  sidecar["status"]["containerStatuses"][1]["state"] = {{"running", Json::object()}};
  EXPECT_TRUE(ObserveReplica(sidecar).pod_running);
  sidecar["status"]["containerStatuses"][1]["state"] = {
      {"waiting", {{"reason", "ContainerCreating"}}}};
  EXPECT_TRUE(ObserveReplica(sidecar).pod_running);
  Json native = pod(0);
  native["status"]["initContainerStatuses"] = {
      {{"name", "istio-proxy"}, {"state", {{"running", Json::object()}}}}};
  EXPECT_TRUE(ObserveReplica(native).pod_running);
}

// The sidecar crashed after the runner had finished: the pod is Failed, the replica succeeded.
// Not when the pod was stopped from outside (evicted, deleted, disrupted).
TEST(PodBuilderTest, ASidecarThatFailedAfterTheRunnerFinishedLeavesTheReplicaSucceeded) {
  Json pod = {{"metadata",
               {{"name", "j-a0-0"},
                {"labels", {{"ringtrain.dev/rank", "0"}, {"ringtrain.dev/attempt", "0"}}}}},
              {"status",
               {{"phase", "Failed"},
                {"containerStatuses",
                 {{{"name", "istio-proxy"},
                   {"state", {{"terminated", {{"exitCode", 2}, {"reason", "Error"}}}}}},
                  {{"name", "runner"},
                   {"state", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}}}}}}}}};
  auto r = ObserveReplica(pod);
  EXPECT_EQ(r.phase, reconcile::ReplicaPhase::kSucceeded);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.pod_running);

  Json evicted = pod;
  evicted["status"]["reason"] = "Evicted";
  EXPECT_EQ(ObserveReplica(evicted).phase, reconcile::ReplicaPhase::kFailed);
  Json deleted = pod;
  deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_EQ(ObserveReplica(deleted).phase, reconcile::ReplicaPhase::kFailed);
  Json disrupted = pod;
  disrupted["status"]["conditions"] = {{{"type", "DisruptionTarget"}, {"status", "True"}}};
  EXPECT_EQ(ObserveReplica(disrupted).phase, reconcile::ReplicaPhase::kFailed);
  // The runner failed too: the pod's failure is the runner's.
  Json both = pod;
  both["status"]["containerStatuses"][1]["state"]["terminated"]["exitCode"] = 1;
  r = ObserveReplica(both);
  EXPECT_EQ(r.phase, reconcile::ReplicaPhase::kFailed);
  EXPECT_EQ(r.exit_code, 1);
  // No exit code written: nothing says the runner succeeded.
  Json unknown = pod;
  unknown["status"]["containerStatuses"][1]["state"]["terminated"].erase("exitCode");
  EXPECT_EQ(ObserveReplica(unknown).phase, reconcile::ReplicaPhase::kFailed);
}

// A Failed pod none of whose containers started was refused by its node (kubelet admission):
// retryable, whatever exit code it lacks; one whose init container or runner ran is not that.
TEST(PodBuilderTest, APodRejectedBeforeItRanIsRetryable) {
  Json pod = {{"metadata",
               {{"name", "j-a0-1"},
                {"labels", {{"ringtrain.dev/rank", "1"}, {"ringtrain.dev/attempt", "0"}}}}},
              {"status",
               {{"phase", "Failed"},
                {"reason", "OutOfnvidia.com/gpu"},
                {"message",
                 "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: "
                 "1, used: 1, capacity: 1"}}}};
  auto r = ObserveReplica(pod);
  EXPECT_EQ(r.phase, reconcile::ReplicaPhase::kFailed);
  EXPECT_EQ(r.reason, "OutOfnvidia.com/gpu");
  EXPECT_TRUE(r.never_ran);
  EXPECT_TRUE(reconcile::IsRetryable(r));
  // Still waiting to start (a status the kubelet wrote before it gave up): it never ran.
  pod["status"]["containerStatuses"] = {
      {{"name", "runner"}, {"state", {{"waiting", {{"reason", "ContainerCreating"}}}}}}};
  EXPECT_TRUE(ObserveReplica(pod).never_ran);

  // A user's init container failed: its code is the job's, not the node's.
  pod["status"] = {
      {"phase", "Failed"},
      {"initContainerStatuses",
       {{{"name", "fetch"}, {"state", {{"terminated", {{"exitCode", 1}}}}}}}},
      {"containerStatuses",
       {{{"name", "runner"}, {"state", {{"waiting", {{"reason", "PodInitializing"}}}}}}}}};
  r = ObserveReplica(pod);
  EXPECT_FALSE(r.never_ran);
  EXPECT_FALSE(reconcile::IsRetryable(r));
  // The runner ran and failed permanently.
  pod["status"] = {{"phase", "Failed"},
                   {"containerStatuses",
                    {{{"name", "runner"}, {"state", {{"terminated", {{"exitCode", 2}}}}}}}}};
  r = ObserveReplica(pod);
  EXPECT_FALSE(r.never_ran);
  EXPECT_FALSE(reconcile::IsRetryable(r));
}

}  // namespace
}  // namespace ringtrain::op

namespace ringtrain::op {
namespace {

// An operator upgrade changes its --runner-image (the chart follows its appVersion); a later
// edit that leaves the pods as they are (backoffLimit) must restart nothing, though the pods
// were stamped by the previous release. Found by the final review of this change.
TEST(PodBuilderTest, AnUpgradeThenAnEditThatLeavesThePodsRestartsNothing) {
  Json spec = {{"replicas", 2}, {"train", {{"epochs", 40}}}};
  api::TrainingJob job = ParseJob("mnist", "default", spec);
  job.metadata.generation = 1;
  const PodOptions old_release{"ghcr.io/ringtrain/ringtrain-runner:0.1.0"};
  std::vector<reconcile::ObservedReplica> replicas;
  for (int rank = 0; rank < 2; ++rank) {
    Json pod = BuildPod(job, 0, rank, old_release);
    pod["status"] = {{"phase", "Running"}};
    replicas.push_back(ObserveReplica(pod));
  }
  spec["runPolicy"] = {{"backoffLimit", 7}};
  api::TrainingJob edited = ParseJob("mnist", "default", spec);
  edited.metadata.generation = 2;
  edited.status.phase = "Running";
  reconcile::PlanInput in;
  in.job = &edited;
  in.replicas = replicas;
  in.now = std::chrono::system_clock::now();
  for (int rank = 0; rank < 2; ++rank) in.spec_hashes.push_back(PodSpecHash(edited, 0, rank));
  const reconcile::Plan p = reconcile::PlanReconcile(in);
  EXPECT_NE(p.status.phase, "Restarting");
  EXPECT_EQ(p.status.attempt, 0);
  // The pod an upgraded operator builds carries the same hash as the old release's, and tells
  // its runner the new image (a replacement of it beside the old pods is refused, naming both).
  const Json upgraded = BuildPod(job, 0, 1, PodOptions{"ghcr.io/ringtrain/ringtrain-runner:0.2.0"});
  EXPECT_EQ(replicas[1].spec_hash, ObserveReplica(upgraded).spec_hash);
  std::map<std::string, Json> env;
  for (const auto& e : upgraded["spec"]["containers"][0]["env"]) env[e["name"]] = e;
  EXPECT_EQ(env["RINGTRAIN_IMAGE"]["value"], "ghcr.io/ringtrain/ringtrain-runner:0.2.0");
}

// The spec hash of a pod is what every later release computes for the same spec: an operator
// upgraded over running gangs must find their pods built from the spec it reads, or the next
// edit restarts them (SpecChanged) for nothing. These are the stamps the release at 273f2e2 put
// on this job's pods, before RINGTRAIN_IMAGE joined the runner's environment.
TEST(PodBuilderTest, TheSpecHashOfAPodIsTheOneEarlierReleasesStamped) {
  Json spec = {{"replicas", 2}, {"train", {{"epochs", 40}}}};
  api::TrainingJob job = ParseJob("mnist", "default", spec);
  job.metadata.generation = 1;
  EXPECT_EQ(PodSpecHash(job, 0, 0), "2af2a92d6086c6e9");
  EXPECT_EQ(PodSpecHash(job, 0, 1), "37bbac12fb1e3984");
}

// Jobs whose pods had no recovery-timeout entry before session 45 (GangRestart, a program of the
// user's own) keep the hash those operators stamped, though the entry is now said ("0"): an
// upgrade followed by any edit restarted such a gang as SpecChanged (review). The hashes are
// the ones f3a85c5's builder stamped.
TEST(PodBuilderTest, TheSpecHashOfAGangRestartOrCommandPodIsTheOneEarlierReleasesStamped) {
  api::TrainingJob gang =
      ParseJob("mnist", "default", {{"replicas", 2}, {"runPolicy", {{"recovery", "GangRestart"}}}});
  gang.metadata.generation = 1;
  EXPECT_EQ(PodSpecHash(gang, 0, 1), "2854104282b0d234");
  api::TrainingJob command =
      ParseJob("mnist", "default", {{"replicas", 2}, {"command", {"python3", "train.py"}}});
  command.metadata.generation = 1;
  EXPECT_EQ(PodSpecHash(command, 0, 1), "0bcee38468d41e63");
  // A template that set a launcher variable itself (a torchrun user's own PET_NNODES before the
  // operator set it): hashed as it stood then, though the operator's entry now shadows it.
  api::TrainingJob own = ParseJob(
      "mnist", "default",
      {{"replicas", 2},
       {"command", {"torchrun", "train.py"}},
       {"template",
        {{"spec",
          {{"containers",
            {{{"name", "runner"}, {"env", {{{"name", "PET_NNODES"}, {"value", "2"}}}}}}}}}}}});
  own.metadata.generation = 1;
  EXPECT_EQ(PodSpecHash(own, 0, 1), "ea358c3d125cd33a");
}

// The second stamp: what the operator's own options (which the spec hash leaves out) made of
// the pod, as far as they decide it for this job.
TEST(PodBuilderTest, APodCarriesTheHashOfTheOptionsThatBuiltIt) {
  auto stamp = [](const Json& spec, const PodOptions& options) {
    const Json pod = BuildPod(ParseJob("mnist", "default", spec), 0, 1, options);
    return pod["metadata"]["annotations"][kOptionsHashAnnotation].get<std::string>();
  };
  const Json plain = {{"replicas", 2}};
  const PodOptions old_release{"example.com/runner:1"};
  const PodOptions new_image{"example.com/runner:2"};
  const PodOptions new_binary{"example.com/runner:1", "/opt/ringtrain/bin/ringtrain-runner"};
  const PodOptions new_dir{"example.com/runner:1", "ringtrain-runner", "/checkpoints"};
  ASSERT_EQ(stamp(plain, old_release).size(), 16u);
  EXPECT_EQ(stamp(plain, old_release), stamp(plain, old_release));
  EXPECT_EQ(stamp(plain, old_release),
            PodOptionsHash(ParseJob("mnist", "default", plain), old_release));
  EXPECT_NE(stamp(plain, new_image), stamp(plain, old_release));
  EXPECT_NE(stamp(plain, new_binary), stamp(plain, old_release));
  EXPECT_NE(stamp(plain, new_dir), stamp(plain, old_release));
  EXPECT_NE(stamp(plain, PodOptions{}), stamp(plain, old_release)) << "the built-in image";
  // What the spec sets itself is not the options' to decide.
  const Json own_image = {{"replicas", 2}, {"image", "example.com/mine:3"}};
  EXPECT_EQ(stamp(own_image, new_image), stamp(own_image, old_release));
  const Json own_command = {{"replicas", 2}, {"command", {"python", "train.py"}}};
  EXPECT_EQ(stamp(own_command, new_binary), stamp(own_command, old_release));
  const Json own_path = {{"replicas", 2}, {"checkpoint", {{"path", "/data/ckpt"}}}};
  EXPECT_EQ(stamp(own_path, new_dir), stamp(own_path, old_release));
  // An edit that names what the options gave builds the same pod, and stamps it alike.
  const Json named_defaults = {
      {"replicas", 2}, {"image", "example.com/runner:1"}, {"checkpoint", {{"path", "/ckpt"}}}};
  const Json named_path = {{"replicas", 2}, {"checkpoint", {{"path", "/ckpt"}}}};
  EXPECT_EQ(stamp(named_path, old_release), stamp(plain, old_release));
  EXPECT_EQ(stamp(named_defaults, old_release), stamp(plain, old_release));
  // Read back from the pod, with the runner's image.
  api::TrainingJob job = ParseJob("mnist", "default", plain);
  const reconcile::ObservedReplica r = ObserveReplica(BuildPod(job, 0, 1, new_image));
  EXPECT_EQ(r.options_hash, stamp(plain, new_image));
  EXPECT_EQ(r.image, "example.com/runner:2");
  EXPECT_EQ(RunnerImage(job.spec, new_image), "example.com/runner:2");
  EXPECT_EQ(RunnerImage(job.spec, PodOptions{}), api::JobSpec{}.image);
}

// The operator's pod index keeps a trimmed pod: what ObserveReplica reads of it must survive the
// trim, the runner's image included (an older operator's pod, without the options stamp, is
// told built otherwise by it alone).
TEST(PodBuilderTest, ATrimmedPodReadsAsTheWholePod) {
  Json tmpl = {
      {"spec", {{"containers", {{{"name", "sidecar"}, {"image", "example.com/proxy:1"}}}}}}};
  api::TrainingJob job = ParseJob("mnist", "default", {{"replicas", 2}, {"template", tmpl}});
  job.metadata.generation = 4;
  Json pod = BuildPod(job, 3, 1, PodOptions{"example.com/runner:1"});
  pod["metadata"]["annotations"].erase(kOptionsHashAnnotation);  // an older operator's
  pod["spec"]["nodeName"] = "node-2";
  pod["status"] = {
      {"phase", "Running"},
      {"podIP", "10.0.0.7"},
      {"containerStatuses",
       {{{"name", "sidecar"}, {"image", "x"}, {"state", {{"running", Json::object()}}}},
        {{"name", "runner"}, {"image", "x"}, {"state", {{"running", Json::object()}}}}}}};
  for (const bool stamped : {false, true}) {
    if (stamped) pod["metadata"]["annotations"][kOptionsHashAnnotation] = "0123456789abcdef";
    const reconcile::ObservedReplica whole = ObserveReplica(pod);
    const reconcile::ObservedReplica trimmed = ObserveReplica(TrimPodForCache(pod));
    EXPECT_EQ(whole.image, "example.com/runner:1");
    EXPECT_EQ(trimmed.image, whole.image) << stamped;
    EXPECT_EQ(trimmed.options_hash, whole.options_hash) << stamped;
    EXPECT_EQ(trimmed.spec_hash, whole.spec_hash);
    EXPECT_EQ(trimmed.spec_generation, 4);
    EXPECT_EQ(trimmed.rank, 1);
    EXPECT_EQ(trimmed.attempt, 3);
    EXPECT_EQ(trimmed.node, "node-2");
    EXPECT_EQ(trimmed.world_size, whole.world_size);
    EXPECT_EQ(trimmed.gated, whole.gated);
    EXPECT_EQ(trimmed.phase, reconcile::ReplicaPhase::kRunning);
  }
  // Only the containers' names and images are kept of their specs, and the recovery wait of
  // their env.
  const Json kept = TrimPodForCache(pod)["spec"]["containers"];
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0],
            (Json{{"name", "runner"},
                  {"image", "example.com/runner:1"},
                  {"env", {{{"name", "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"}, {"value", "120"}}}}}));
  EXPECT_EQ(kept[1], (Json{{"name", "sidecar"}, {"image", "example.com/proxy:1"}}));
}

// Recorded by the last review: after an upgrade to a new default runner image, a lost rank was
// replaced in place by a pod of the new runner beside survivors of the old one. The gang now
// restarts as a whole (OperatorUpgraded, not counted) instead; pods of an older operator,
// without the options stamp, count as built otherwise only when their runner image differs.
TEST(PodBuilderTest, AnUpgradeThenALostRankRestartsTheGangRatherThanMixRunnerBuilds) {
  api::TrainingJob job = ParseJob("mnist", "default", {{"replicas", 2}});
  job.metadata.generation = 1;
  job.status.phase = "Running";
  const PodOptions old_release{"ghcr.io/ringtrain/ringtrain-runner:0.1.0"};
  const PodOptions new_release{"ghcr.io/ringtrain/ringtrain-runner:0.2.0"};
  auto plan = [&job, &new_release](const PodOptions& built_by, bool stamped) {
    std::vector<reconcile::ObservedReplica> replicas;
    for (int rank = 0; rank < 2; ++rank) {
      Json pod = BuildPod(job, 0, rank, built_by);
      if (!stamped) pod["metadata"]["annotations"].erase(kOptionsHashAnnotation);
      pod["status"] = {{"phase", "Running"}};
      if (rank == 1) {
        pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:30Z";
        pod["status"] = {
            {"phase", "Failed"},
            {"containerStatuses",
             {{{"name", "runner"},
               {"state", {{"terminated", {{"exitCode", 143}, {"reason", "Error"}}}}}}}}};
      }
      replicas.push_back(ObserveReplica(pod));
    }
    reconcile::PlanInput in;
    in.job = &job;
    in.replicas = replicas;
    in.now = std::chrono::system_clock::now();
    in.options_hash = PodOptionsHash(job, new_release);
    in.image = RunnerImage(job.spec, new_release);
    return reconcile::PlanReconcile(in);
  };
  for (const bool stamped : {true, false}) {
    const reconcile::Plan p = plan(old_release, stamped);
    EXPECT_EQ(p.status.phase, "Restarting") << stamped;
    EXPECT_EQ(p.status.attempt, 1) << stamped;
    EXPECT_EQ(p.status.restarts, 0) << stamped;
    EXPECT_EQ(p.status.in_place_recoveries, 0) << stamped;
    bool event = false;
    for (const auto& e : p.events) {
      event = event || (e.reason == "OperatorUpgraded" &&
                        e.message.find("mnist-a0-0 was built by another operator configuration "
                                       "(runner image ghcr.io/ringtrain/ringtrain-runner:0.1.0 -> "
                                       "ghcr.io/ringtrain/ringtrain-runner:0.2.0); new attempt "
                                       "from the newest checkpoint, not counted against "
                                       "backoffLimit") != std::string::npos);
    }
    EXPECT_TRUE(event) << stamped;
  }
  // Built by this very configuration, or unstamped with the same runner image: in place.
  for (const bool stamped : {true, false}) {
    const reconcile::Plan p = plan(new_release, stamped);
    EXPECT_EQ(p.status.attempt, 0) << stamped;
    EXPECT_EQ(p.status.in_place_recoveries, 1) << stamped;
  }
}

// The runner container's own recovery wait reaches the pod (it was replaced by the default).
TEST(PodBuilderTest, TheTemplatesRecoveryTimeoutReachesThePod) {
  const api::TrainingJob job = ParseJob(
      "mnist", "default",
      {{"replicas", 2},
       {"template",
        {{"spec",
          {{"containers",
            {{{"name", "runner"},
              {"env", {{{"name", "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"}, {"value", "60"}}}}}}}}}}}});
  const Json pod = BuildPod(job, 0, 1, PodOptions{});
  std::vector<std::string> values;
  for (const auto& e : pod["spec"]["containers"][0]["env"]) {
    if (e.value("name", "") == "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS") values.push_back(e["value"]);
  }
  EXPECT_EQ(values, std::vector<std::string>{"60"});
  // The wait is no change of what a replica runs: pods of an operator that passed 120 on for the
  // same template keep their hash (an edit of anything else restarted the gang after an upgrade).
  api::TrainingJob older = job;
  older.spec.pod_template_json =
      R"({"spec":{"containers":[{"name":"runner","env":[{"name":"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS","value":"120"}]}]}})";
  EXPECT_EQ(BuildPod(older, 0, 1, PodOptions{})["metadata"]["annotations"][kSpecHashAnnotation],
            pod["metadata"]["annotations"][kSpecHashAnnotation]);
}

// Recorded on the real cluster (s41, job e): the template's RINGTRAIN_RECOVERY_TIMEOUT_SECONDS
// edited from "0" to "60" restarted the gang (SpecChanged) though the hash ignores the value: at
// 0 the operator left its own entry out and the template's stayed at the end of the list, in
// another place than the operator's entry of any other wait. Now the operator's value replaces
// the template's at the operator's place, 0 included; with runPolicy.recovery GangRestart a
// template's wait no longer reaches the runner (its lost peer is never replaced alone).
TEST(PodBuilderTest, AnEditOfTheTemplatesRecoveryWaitToOrFromZeroRestartsNoPod) {
  auto with = [](const std::string& seconds, const std::string& recovery) {
    return ParseJob(
        "e", "default",
        {{"replicas", 2},
         {"runPolicy", {{"recovery", recovery}}},
         {"template",
          {{"spec",
            {{"containers",
              {{{"name", "runner"},
                {"env",
                 {{{"name", "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"}, {"value", seconds}},
                  {{"name", "RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS"}, {"value", "20"}}}}}}}}}}}});
  };
  const auto waits = [](const Json& pod) {
    std::vector<std::string> values;
    for (const auto& e : pod["spec"]["containers"][0]["env"]) {
      if (e.value("name", "") == "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS") values.push_back(e["value"]);
    }
    return values;
  };
  for (int rank = 0; rank < 2; ++rank) {
    const Json zero = BuildPod(with("0", "InPlace"), 0, rank, PodOptions{});
    const Json sixty = BuildPod(with("60", "InPlace"), 0, rank, PodOptions{});
    EXPECT_EQ(waits(zero), std::vector<std::string>{"0"});
    EXPECT_EQ(waits(sixty), std::vector<std::string>{"60"});
    EXPECT_EQ(zero["metadata"]["annotations"][kSpecHashAnnotation],
              sixty["metadata"]["annotations"][kSpecHashAnnotation])
        << "rank " << rank << ": the edit restarts nothing";
    EXPECT_EQ(waits(BuildPod(with("60", "GangRestart"), 0, rank, PodOptions{})),
              std::vector<std::string>{"0"});
  }
  // A template that does not name it: 0 said all the same, where no rank recovers in place
  // (GangRestart, a program of the user's own), as `ringtrain run` says it. Left out, an image's
  // own ENV of it reached a runner whose lost peer is never replaced alone (review).
  api::TrainingJob plain = ParseJob("e", "default", {{"replicas", 2}});
  plain.spec.run_policy.recovery = "GangRestart";
  EXPECT_EQ(waits(BuildPod(plain, 0, 1, PodOptions{})), std::vector<std::string>{"0"});
  api::TrainingJob command = ParseJob("e", "default", {{"replicas", 2}});
  command.spec.command = {"python3", "train.py"};
  EXPECT_EQ(waits(BuildPod(command, 0, 1, PodOptions{})), std::vector<std::string>{"0"});
}

// Recorded on the real cluster (s40, job e2): the template's RINGTRAIN_RECOVERY_TIMEOUT_SECONDS
// edited from 20 to 60 on a running job restarts no pod (the hash ignores the value), so the
// pods wait 20 s; the operator said "it waits up to 60s" from the spec, and the job failed 15 s
// after it said so. The wait is read from the pod, through the operator's trimmed index too.
TEST(PodBuilderTest, TheRecoveryWaitSaidIsTheRunningPodsNotTheEditedSpecs) {
  auto with_wait = [](const std::string& seconds) {
    api::TrainingJob job = ParseJob(
        "e2", "default",
        {{"replicas", 2},
         {"runPolicy", {{"recovery", "InPlace"}}},
         {"template",
          {{"spec",
            {{"containers",
              {{{"name", "runner"},
                {"env",
                 {{{"name", "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"}, {"value", seconds}}}}}}}}}}}});
    job.status.phase = "Running";
    job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-28T17:37:00Z"});
    job.status.progress = api::Progress{63784, 3, 50000, 0.3, "2026-11-28T17:38:31Z"};
    return job;
  };
  const api::TrainingJob built = with_wait("20");
  api::TrainingJob edited = with_wait("60");
  edited.metadata.generation = 2;
  std::vector<reconcile::ObservedReplica> replicas;
  for (int rank = 0; rank < 2; ++rank) {
    Json pod = BuildPod(built, 0, rank, PodOptions{});
    EXPECT_EQ(
        pod["metadata"]["annotations"][kSpecHashAnnotation],
        BuildPod(edited, 0, rank, PodOptions{})["metadata"]["annotations"][kSpecHashAnnotation])
        << "the edit restarts nothing";
    pod["status"] = {{"phase", "Running"}};
    const reconcile::ObservedReplica observed = ObserveReplica(TrimPodForCache(pod));
    ASSERT_TRUE(observed.recovery_timeout.has_value());
    EXPECT_EQ(*observed.recovery_timeout, std::chrono::seconds(20));
    replicas.push_back(observed);
  }
  contract::RunnerStatus read;
  read.state = "recovering";
  read.step = 63784;
  read.start_step = 0;
  read.recovery_cause =
      "step 63839: gradient all-reduce: all-reduce: timed out after 10s waiting for rank 1";
  read.recovering_seconds = 15;
  reconcile::PlanInput in;
  in.job = &edited;
  in.replicas = replicas;
  in.now = *ParseRfc3339("2026-11-28T17:38:46Z");
  in.progress = reconcile::ObserveRunnerStatus(read);
  const reconcile::Plan plan = reconcile::PlanReconcile(in);
  const api::Condition* stalled = nullptr;
  for (const auto& c : plan.status.conditions) {
    if (c.type == "Stalled") stalled = &c;
  }
  ASSERT_NE(stalled, nullptr);
  EXPECT_NE(stalled->message.find("it waits up to 20s for the gang to form again"),
            std::string::npos)
      << stalled->message;
  // What a pod's env says, as the runner reads it: a reference is not resolved (the spec's is
  // taken), "" is unset (none).
  Json pod = BuildPod(built, 0, 0, PodOptions{});
  Json& env = pod["spec"]["containers"][0]["env"];
  for (auto& e : env) {
    if (e["name"] == "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS") {
      e = {{"name", "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"},
           {"valueFrom", {{"configMapKeyRef", {{"name", "c"}, {"key", "k"}}}}}};
    }
  }
  EXPECT_FALSE(ObserveReplica(pod).recovery_timeout.has_value());
  env.push_back({{"name", "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"}, {"value", ""}});
  EXPECT_EQ(ObserveReplica(pod).recovery_timeout, Duration::zero());
}

}  // namespace
}  // namespace ringtrain::op
