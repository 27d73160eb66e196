#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/runner_env.h"
#include "common/yaml_to_json.h"
#include "controller/api/training_job.h"

namespace ringtrain::api {
namespace {

using Json = nlohmann::json;

constexpr char kMinimal[] = R"(
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: demo
spec:
  replicas: 3
)";

std::string WithSpec(const std::string& spec_lines) {
  return "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: demo\n"
         "spec:\n" +
         spec_lines;
}

TEST(Manifest, DefaultsApply) {
  auto job = ParseManifestYaml(kMinimal, "t.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->metadata.name, "demo");
  EXPECT_EQ(job->metadata.ns, "default");
  EXPECT_EQ(job->spec.replicas, 3);
  EXPECT_EQ(job->spec.world_size(), 3);
  EXPECT_EQ(job->spec.train.model, "mlp");
  EXPECT_EQ(job->spec.train.epochs, 10);
  EXPECT_EQ(job->spec.run_policy.backoff_limit, 3);
  EXPECT_EQ(job->spec.run_policy.clean_pod_policy, api::CleanPodPolicy::kRunning);
  EXPECT_EQ(job->spec.run_policy.restart_policy, "ExitCode");
  // An empty image (a Helm value left empty) is the default, as an unset one.
  auto empty = ParseManifestYaml(WithSpec("  image: \"\"\n"), "t.yaml");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->spec.image, api::JobSpec{}.image);
}

// metadata.generateName (kubectl create -f; Argo's manifests): named as the API server names
// it, the prefix and 5 characters of its alphabet; a name given wins; a prefix that cannot make
// a job name is refused naming the field. It used to be refused as "metadata.name: required".
TEST(Manifest, GenerateNameNamesTheJobAsTheApiServerWould) {
  auto parse = [](const std::string& meta) {
    return ParseManifestYaml("apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n" +
                                 meta + "spec:\n  replicas: 2\n",
                             "job.yaml");
  };
  auto a = parse("  generateName: mnist-\n");
  auto b = ParseManifestYaml(
      "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  generateName: "
      "mnist-\nspec:\n  replicas: 2\n",
      "other.yaml");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const std::string& name = a->metadata.name;
  ASSERT_EQ(name.size(), 11u) << name;
  EXPECT_TRUE(name.starts_with("mnist-")) << name;
  EXPECT_EQ(name.substr(6).find_first_not_of("bcdfghjklmnpqrstvwxz2456789"), std::string::npos)
      << name;
  EXPECT_NE(a->metadata.name, b->metadata.name) << "another manifest, another name";
  // The same manifest, the same name: a rerun resumes from the checkpoints named after the job.
  EXPECT_EQ(parse("  generateName: mnist-\n")->metadata.name, name);
  auto named = parse("  name: fixed\n  generateName: mnist-\n");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->metadata.name, "fixed");
  auto bad = parse("  generateName: MNIST-\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("metadata.generateName: \"MNIST-"), std::string::npos)
      << bad.status().ToString();
  auto long_prefix = parse("  generateName: " + std::string(46, 'a') + "\n");
  ASSERT_FALSE(long_prefix.ok());
  EXPECT_NE(long_prefix.status().message().find(
                "metadata.generateName: \"" + std::string(46, 'a') +
                "\" is 46 characters; at most 45 (the job's name is it and 5 more, at most 50)"),
            std::string::npos)
      << long_prefix.status().ToString();
  EXPECT_TRUE(parse("  generateName: " + std::string(45, 'a') + "\n").ok());
  auto number = parse("  generateName: 7\n");
  ASSERT_FALSE(number.ok());
  EXPECT_NE(
      number.status().message().find("metadata.generateName: must be a string, got an integer 7"),
      std::string::npos)
      << number.status().ToString();
  // The same file by another path: the same name.
  const auto dir = std::filesystem::temp_directory_path() / "ringtrain-generate-name";
  std::filesystem::create_directories(dir / "sub");
  const std::string yaml =
      "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  generateName: g-\n"
      "spec:\n  replicas: 2\n";
  auto direct = ParseManifestYaml(yaml, (dir / "job.yaml").string());
  auto around = ParseManifestYaml(yaml, (dir / "sub" / ".." / "job.yaml").string());
  ASSERT_TRUE(direct.ok() && around.ok());
  EXPECT_EQ(direct->metadata.name, around->metadata.name);
  std::filesystem::remove_all(dir);
  auto none = parse("  labels: {a: b}\n");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("metadata.name: required"), std::string::npos);
}

// A template's value of a variable every replica gets from the operator was replaced without a
// word (review: PET_NNODES, MASTER_PORT); it is named, once, where the other template fields no
// replica gets are. The recovery timeout (passed on) and a timeout of the user's are not.
TEST(Manifest, ATemplateEnvTheOperatorReplacesIsNamed) {
  const std::string tmpl =
      "  template:\n    spec:\n      containers:\n        - name: runner\n          env:\n"
      "            - {name: MASTER_PORT, value: \"29500\"}\n"
      "            - {name: PET_NNODES, value: \"4\"}\n"
      "            - {name: MASTER_PORT, value: \"29501\"}\n"
      "            - {name: RINGTRAIN_RECOVERY_TIMEOUT_SECONDS, value: \"60\"}\n"
      "            - {name: RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS, value: \"600\"}\n"
      "            - {name: NCCL_SOCKET_IFNAME, value: eth0}\n"
      "            - {name: RINGTRAIN_GANG_GATE_TIMEOUT_SECONDS, value: \"60\"}\n";
  auto said = [](const api::JobSpec& spec) {
    std::string env;
    for (const std::string& s : api::IgnoredTemplateFields(spec)) {
      if (s.starts_with("spec.template.spec.containers[runner].env: ")) env += s;
    }
    return env;
  };
  auto runner = ParseManifestYaml(WithSpec("  replicas: 2\n" + tmpl), "job.yaml");
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  EXPECT_EQ(said(runner->spec),
            "spec.template.spec.containers[runner].env: MASTER_PORT, "
            "RINGTRAIN_GANG_GATE_TIMEOUT_SECONDS are ignored: every replica gets the operator's "
            "value (its rank, the gang's world and master)");
  auto torchrun = ParseManifestYaml(
      WithSpec("  replicas: 2\n  image: example.com/t:1\n  command: [torchrun, train.py]\n" + tmpl),
      "job.yaml");
  ASSERT_TRUE(torchrun.ok()) << torchrun.status().ToString();
  EXPECT_EQ(said(torchrun->spec),
            "spec.template.spec.containers[runner].env: MASTER_PORT, PET_NNODES, "
            "RINGTRAIN_GANG_GATE_TIMEOUT_SECONDS are ignored: every replica gets the operator's "
            "value (its rank, the gang's world and master, torchrun's settings)");
  auto plain = ParseManifestYaml(WithSpec("  replicas: 2\n"), "job.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(said(plain->spec), "");
}

TEST(Manifest, ShippedExamplesAreValid) {
  for (const char* name : {"fashion-mnist-mlp.yaml", "fashion-mnist-cnn.yaml",
                           "fashion-mnist-keras-cnn.yaml", "fashion-mnist-gpu.yaml"}) {
    auto job = LoadManifestFile(std::string(RINGTRAIN_SOURCE_DIR) + "/manifests/examples/" + name);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    const bool gpu = std::string(name) == "fashion-mnist-gpu.yaml";
    EXPECT_EQ(job->spec.replicas, gpu ? 1 : 2);
    EXPECT_EQ(job->spec.gpus_per_replica, gpu ? 1 : 0);
  }
}

struct BadCase {
  const char* spec;
  const char* expected;  // substring of the error
};

class BadManifest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadManifest, ErrorNamesTheField) {
  auto job = ParseManifestYaml(WithSpec(GetParam().spec), "job.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find(GetParam().expected), std::string::npos)
      << job.status().message();
  EXPECT_NE(job.status().message().find("job.yaml"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadManifest,
    ::testing::Values(
        BadCase{"  replicas: 0\n", "spec.replicas: must be at least 1, got 0"},
        BadCase{"  replicas: two\n", "spec.replicas: must be an integer"},
        BadCase{"  replicas: 1\n  gpusPerReplica: -1\n", "spec.gpusPerReplica"},
        BadCase{"  backend: mpi\n", "spec.backend: must be one of auto, nccl, tcp"},
        BadCase{"  train:\n    epochs: 0\n", "spec.train.epochs: must be at least 1"},
        BadCase{"  train:\n    model: resnet\n",
                "spec.train.model: must be a preset name (mlp, cnn) or a layer list written in "
                "the manifest (an object: {input: [...], layers: [...], loss: ...}; not a string "
                "of JSON, nor a file), got \"resnet\""},
        BadCase{"  train:\n    dataset: {format: csv, train: t.csv, test: s.csv, label: no}\n",
                "spec.train.dataset.label: must be a column name or an integer index, got a "
                "boolean false (YAML reads y, n, yes, no, on, off, true and false as booleans: "
                "quote a column of such a name)"},
        BadCase{"  train:\n    learningRate: 0\n", "spec.train.learningRate: must be greater"},
        BadCase{"  train:\n    optimizer: sgd\n    momentum: 1\n",
                "spec.train.momentum: must be less than 1 (optimizer sgd), got 1"},
        BadCase{"  train:\n    optimizer: sgd\n    momentum: 1.5\n",
                "spec.train.momentum: must be less than 1 (optimizer sgd), got 1.5"},
        BadCase{"  train:\n    momentum: -0.1\n", "spec.train.momentum: must be at least 0"},
        BadCase{"  train:\n    epoch: 3\n", "spec.train.epoch: unknown field"},
        BadCase{"  replica: 3\n", "spec.replica: unknown field"},
        BadCase{"  runPolicy:\n    cleanPodPolicy: Sometimes\n",
                "spec.runPolicy.cleanPodPolicy: must be one of None, Running, All"},
        BadCase{"  runPolicy:\n    backoffLimit: -2\n", "spec.runPolicy.backoffLimit"},
        BadCase{"  train:\n    dataset: /data/train.csv\n",
                "spec.train.dataset: \"/data/train.csv\": a string names a directory of IDX files "
                "(Fashion-MNIST's); for a CSV file write the dataset as an object: {format: csv, "
                "train: /data/train.csv, label: <column>}"},
        BadCase{"  train:\n    dataset: x.npy\n", "{format: npy, trainX: x.npy, trainY: ...}"},
        BadCase{"  runPolicy:\n    restartPolicy: Always\n",
                "spec.runPolicy.restartPolicy: must be one of ExitCode, OnFailure"},
        BadCase{"  runPolicy:\n    schedulingTimeoutSeconds: -1\n",
                "spec.runPolicy.schedulingTimeoutSeconds: must be at least 0"},
        BadCase{"  runPolicy:\n    podGroup: {queue: q}\n",
                "spec.runPolicy.podGroup.type: required"},
        BadCase{"  runPolicy:\n    podGroup: {type: yunikorn}\n",
                "spec.runPolicy.podGroup.type: must be one of coscheduling, volcano"},
        BadCase{"  runPolicy:\n    podGroup: {type: coscheduling, queue: q}\n",
                "spec.runPolicy.podGroup.queue: only a volcano PodGroup has a queue"},
        BadCase{"  runPolicy:\n    podGroup: {type: volcano, minMember: 1}\n",
                "spec.runPolicy.podGroup.minMember: unknown field"},
        BadCase{"  runPolicy:\n    activeDeadlineSeconds: 0\n",
                "spec.runPolicy.activeDeadlineSeconds: must be at least 1"},
        BadCase{"  runPolicy:\n    progressDeadlineSeconds: 315360001\n",
                "spec.runPolicy.progressDeadlineSeconds: must be at most 315360000"},
        BadCase{"  command: run\n", "spec.command: must be a list"},
        BadCase{"  backend: nccl\n", "spec.backend: nccl needs spec.gpusPerReplica"},
        BadCase{"  gpusPerReplica: 17\n", "spec.gpusPerReplica"},
        BadCase{"  train: [1, 2]\n", "spec.train: must be an object"},
        BadCase{"  checkpoint:\n    volumeClaim: {size: 1Gi}\n    volume: {emptyDir: {}}\n",
                "spec.checkpoint: takes volumeClaim or volume, not both"},
        BadCase{"  checkpoint:\n    volumeClaim: {size: lots}\n",
                "spec.checkpoint.volumeClaim.size: must be a non-negative quantity"},
        BadCase{"  checkpoint:\n    volumeClaim: {accessModes: [ReadOnlyMany]}\n",
                "spec.checkpoint.volumeClaim.accessModes[0]: must be one of"},
        BadCase{"  checkpoint:\n    volumeClaim: {sise: 1Gi}\n",
                "spec.checkpoint.volumeClaim.sise: unknown field"},
        BadCase{"  checkpoint:\n    volume: {nfs: {server: a, path: /x}, hostPath: {path: /y}}\n",
                "spec.checkpoint.volume: must be one volume source"},
        BadCase{"  checkpoint:\n    volume: {name: ckpt, persistentVolumeClaim: {claimName: c}}\n",
                "spec.checkpoint.volume: give the volume source only, not a name"},
        BadCase{"  checkpoint:\n    path: ckpt\n",
                "spec.checkpoint.path: must be an absolute path"},
        BadCase{"  resources:\n    requests: {cpu: fast}\n",
                "spec.resources.requests.cpu: must be a non-negative quantity"},
        BadCase{"  resources:\n    request: {cpu: 1}\n", "spec.resources.request: unknown field"},
        BadCase{"  resources:\n    requests: {memory: 4Gi}\n    limits: {memory: 2048Mi}\n",
                "spec.resources.requests.memory: 4Gi is more than its limit, "
                "spec.resources.limits.memory: 2048Mi"},
        BadCase{"  resources:\n    requests: {cpu: 1500m}\n    limits: {cpu: 1}\n",
                "spec.resources.requests.cpu: 1500m is more than its limit"},
        BadCase{"  template:\n    spec:\n      containers:\n        - name: runner\n"
                "          env: [{name: A, value: a}, {name: NUM, value: 3}]\n",
                "spec.template.spec.containers[runner].env[1].value: must be a string (quote "
                "it), got an integer 3"},
        BadCase{"  template:\n    spec:\n      containers:\n        - name: sidecar\n"
                "          env: [{name: T, value: true}]\n",
                "spec.template.spec.containers[sidecar].env[0].value: must be a string (quote "
                "it), got a boolean true"},
        // The shape the API server would refuse at the pods' creation.
        BadCase{"  template:\n    spec:\n      containers:\n        - env: [{name: T, value: a}]\n",
                "spec.template.spec.containers[0].name: required, a non-empty string"},
        BadCase{"  template:\n    spec:\n      containers: {name: runner, env: [{name: X, "
                "value: a}]}\n",
                "spec.template.spec.containers: must be a list, got an object (each container "
                "is a '- name: ...' item)"},
        BadCase{"  template: {spec: 5}\n", "spec.template.spec: must be an object, got an integer"},
        BadCase{"  template:\n    spec:\n      containers: [runner]\n",
                "spec.template.spec.containers[0]: must be an object, got a string"},
        BadCase{"  template:\n    spec:\n      containers:\n        - name: runner\n"
                "          env: {X: 1}\n",
                "spec.template.spec.containers[runner].env: must be a list, got an object"},
        BadCase{"  template:\n    spec:\n      containers:\n        - name: runner\n"
                "          env: [{value: a}]\n",
                "spec.template.spec.containers[runner].env[0].name: required, a non-empty "
                "string"},
        BadCase{"  template:\n    spec:\n      containers:\n        - name: runner\n"
                "          workingDir: 5\n",
                "spec.template.spec.containers[runner].workingDir: must be a string, got an "
                "integer"},
        BadCase{"  template:\n    spec:\n      containers:\n        - name: runner\n"
                "          args: --lr\n",
                "spec.template.spec.containers[runner].args: must be a list of strings"},
        BadCase{"  template:\n    spec:\n      initContainers:\n        - name: fetch\n"
                "          env: [{name: NUM, value: {a: 1}}]\n",
                "spec.template.spec.initContainers[fetch].env[0].value: must be a string"}));

// The operator reads the same checks from the API object: a job with a non-string env value
// fails naming the field before any pod is built (the API server would refuse the pod).
TEST(Manifest, TheOperatorRefusesANonStringEnvValueNamingIt) {
  const std::string doc =
      R"({"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"j"},)"
      R"("spec":{"template":{"spec":{"containers":[{"name":"runner","env":[)"
      R"({"name":"A","value":"a"},{"name":"B","value":null},{"name":"N","value":3}]}]}}}})";
  auto job = ParseJobJson(doc);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find(
                "spec.template.spec.containers[runner].env[2].value: must be a string"),
            std::string::npos)
      << job.status().message();
}

TEST(Manifest, ARunnerCommandInTheTemplateIsNamedAsIgnored) {
  const auto with = [](const std::string& runner, std::vector<std::string> command = {}) {
    JobSpec spec;
    spec.pod_template_json =
        R"({"spec":{"containers":[{"name":"side","command":["x"]},)" + runner + "]}}";
    spec.command = std::move(command);
    return IgnoredRunnerCommand(spec);
  };
  EXPECT_EQ(with(R"({"name":"runner","args":["--x"]})"),
            "spec.template.spec.containers[runner]: args is ignored: every replica runs the "
            "built-in runner on spec.train (set spec.command to run a program of your own)");
  EXPECT_EQ(with(R"({"name":"runner","command":["python3"]})", {"sh", "-c", "true"}),
            "spec.template.spec.containers[runner]: command is ignored: every replica runs "
            "spec.command, which is its whole command line");
  // A sidecar's command runs (in its own container); a runner without one says nothing.
  EXPECT_EQ(with(R"({"name":"runner","image":"x"})"), "");
  EXPECT_EQ(with(R"({"name":"other","command":["x"]})"), "");
  // Empty or null (as Helm renders an unset value) asks for nothing.
  EXPECT_EQ(with(R"({"name":"runner","command":null,"args":[]})"), "");
  // Two runner containers: the last one is the pod's, as the pod builder takes it.
  EXPECT_EQ(with(R"({"name":"runner","command":["x"]},{"name":"runner"})"), "");
  EXPECT_NE(with(R"({"name":"runner"},{"name":"runner","args":["x"]})"), "");
  EXPECT_EQ(IgnoredRunnerCommand(JobSpec{}), "");
}

// The collective timeout a job's ranks run with, as the operator can know it: the runner
// container's own RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS (the operator sets none), when it is a
// plain value the runner accepts; else the runner's default.
TEST(Manifest, TheCollectiveTimeoutIsTheRunnerContainersOrTheDefault) {
  const auto with = [](const std::string& env) {
    JobSpec spec;
    spec.pod_template_json =
        R"({"spec":{"containers":[{"name":"side","env":[{"name":"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS","value":"5"}]},{"name":"runner","env":[)" +
        env + "]}]}}";
    return CollectiveTimeoutFor(spec);
  };
  const Duration fallback = contract::kCollectiveTimeout;
  EXPECT_EQ(CollectiveTimeoutFor(JobSpec{}), fallback);
  EXPECT_EQ(with(R"({"name":"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS","value":"120"})"),
            std::chrono::seconds(120));
  EXPECT_EQ(with(R"({"name":"OTHER","value":"120"})"), fallback);
  for (const char* odd : {R"("0")", R"("86401")", R"("1m")", R"x("$(T)")x", R"("")", "120"}) {
    EXPECT_EQ(
        with(std::string(R"({"name":"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS","value":)") + odd + "}"),
        fallback)
        << odd;
  }
  EXPECT_EQ(with(R"({"name":"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS","valueFrom":{}})"), fallback);
}

// On the real cluster a user's RINGTRAIN_RECOVERY_TIMEOUT_SECONDS (60) in the runner container
// was replaced by the operator's 120, unsaid: the template's value is the one the survivors wait
// with (and the planner says), read as the runner reads it, 0 turning in-place recovery off. One
// the operator cannot pass on is said (IgnoredRecoveryTimeout), never a refusal of the spec: a
// running job's template the operator ignored before an upgrade must not fail the job after it.
TEST(Manifest, TheRecoveryTimeoutIsTheRunnerContainersOrTheDefault) {
  const auto spec_with = [](const std::string& entry) {
    JobSpec spec;
    spec.pod_template_json = R"({"spec":{"containers":[{"name":"runner","env":[)" + entry + "]}]}}";
    return spec;
  };
  const auto value = [&spec_with](const std::string& v) {
    return spec_with(R"({"name":"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS","value":")" + v + R"("})");
  };
  EXPECT_EQ(RecoveryTimeoutFor(JobSpec{}), contract::kRecoveryTimeout);
  EXPECT_EQ(RecoveryTimeoutFor(value("60")), std::chrono::seconds(60));
  EXPECT_EQ(RecoveryTimeoutFor(value("+60")), std::chrono::seconds(60)) << "as strtoll reads it";
  EXPECT_EQ(RecoveryTimeoutFor(value("0")), Duration(0));
  EXPECT_EQ(IgnoredRecoveryTimeout(value("60")), "");
  EXPECT_EQ(RecoveryTimeoutFor(value("")), contract::kRecoveryTimeout) << "unset";
  EXPECT_EQ(IgnoredRecoveryTimeout(value("")), "");
  for (const char* odd : {"-1", "86401", "120s", "$(T)"}) {
    const JobSpec spec = value(odd);
    EXPECT_EQ(RecoveryTimeoutFor(spec), contract::kRecoveryTimeout) << odd;
    EXPECT_EQ(IgnoredRecoveryTimeout(spec),
              "spec.template.spec.containers[runner].env RINGTRAIN_RECOVERY_TIMEOUT_SECONDS: \"" +
                  std::string(odd) +
                  "\" is no whole number of seconds from 0 to 86400: the survivors of a lost rank "
                  "wait 120s")
        << odd;
  }
  const JobSpec by_reference = spec_with(
      R"({"name":"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS","valueFrom":{"configMapKeyRef":{"name":"c","key":"k"}}})");
  EXPECT_NE(IgnoredRecoveryTimeout(by_reference).find("set by reference (valueFrom)"),
            std::string::npos);
  // The last entry of the name is the one the container gets.
  EXPECT_EQ(
      RecoveryTimeoutFor(spec_with(
          R"({"name":"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS","value":"x"},{"name":"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS","value":"30"})")),
      std::chrono::seconds(30));
  // Where no rank recovers in place (a gang restart policy, a spec.command program, GPU
  // replicas), the ranks get 0: a template that asks for a wait is told it is not passed on
  // (it was not, unsaid), one that asks for none ("0", "") is not.
  for (const char* wait : {"60", "120s"}) {
    JobSpec gang_restart = value(wait);
    gang_restart.run_policy.recovery = "GangRestart";
    EXPECT_EQ(RecoveryTimeoutFor(gang_restart), Duration(0));
    EXPECT_EQ(IgnoredRecoveryTimeout(gang_restart),
              "spec.template.spec.containers[runner].env RINGTRAIN_RECOVERY_TIMEOUT_SECONDS is not "
              "passed on: runPolicy.recovery is GangRestart (a lost rank restarts the whole "
              "gang), so no survivor waits for a replacement (the ranks get 0)")
        << wait;
  }
  for (const char* none : {"0", ""}) {
    JobSpec gang_restart = value(none);
    gang_restart.run_policy.recovery = "GangRestart";
    EXPECT_EQ(IgnoredRecoveryTimeout(gang_restart), "") << none;
  }
  JobSpec own_program = value("60");
  own_program.command = {"python3", "train.py"};
  EXPECT_NE(IgnoredRecoveryTimeout(own_program).find("a spec.command program does not recover"),
            std::string::npos);
  JobSpec gpus = value("60");
  gpus.gpus_per_replica = 1;
  EXPECT_NE(IgnoredRecoveryTimeout(gpus).find("GPU replicas do not recover in place yet"),
            std::string::npos);
  JobSpec gpus_by_reference = by_reference;
  gpus_by_reference.gpus_per_replica = 1;
  EXPECT_NE(IgnoredRecoveryTimeout(gpus_by_reference).find("is not passed on"), std::string::npos);
  // No value refuses the spec (it did, for a day: a job running before the upgrade failed).
  for (const char* any : {"120s", "", "x"}) {
    EXPECT_TRUE(ParseManifestYaml(
                    WithSpec("  template:\n    spec:\n      containers:\n      - name: runner\n"
                             "        env:\n        - name: RINGTRAIN_RECOVERY_TIMEOUT_SECONDS\n"
                             "          value: \"" +
                             std::string(any) + "\"\n"),
                    "job.yaml")
                    .ok())
        << any;
  }
}

// SGD's momentum up to (not including) 1, as the runner's optimizer takes it; adam ignores it.
TEST(Manifest, MomentumBelowOneForSgdAnyForAdam) {
  auto sgd =
      ParseManifestYaml(WithSpec("  train:\n    optimizer: sgd\n    momentum: 0.999\n"), "a.yaml");
  ASSERT_TRUE(sgd.ok()) << sgd.status().ToString();
  EXPECT_DOUBLE_EQ(sgd->spec.train.momentum, 0.999);
  auto adam =
      ParseManifestYaml(WithSpec("  train:\n    optimizer: adam\n    momentum: 1\n"), "a.yaml");
  EXPECT_TRUE(adam.ok()) << adam.status().ToString();
}

// Every runPolicy duration taken up to 10 years (the CRD's maximum for the two it bounds).
TEST(Manifest, RunPolicyDurationsTakeUpToTenYears) {
  auto job = ParseManifestYaml(WithSpec("  runPolicy:\n    activeDeadlineSeconds: 315360000\n"
                                        "    ttlSecondsAfterFinished: 315360000\n"
                                        "    progressDeadlineSeconds: 315360000\n"
                                        "    schedulingTimeoutSeconds: 315360000\n"),
                               "job.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.run_policy.active_deadline_seconds, kMaxPolicySeconds);
  EXPECT_EQ(job->spec.run_policy.ttl_seconds_after_finished, kMaxPolicySeconds);
  EXPECT_EQ(job->spec.run_policy.progress_deadline_seconds, kMaxPolicySeconds);
  EXPECT_EQ(job->spec.run_policy.scheduling_timeout_seconds, kMaxPolicySeconds);
  // Jobs stored before the CRD bounded these two ("no deadline", "keep forever") are capped,
  // not refused: an upgraded operator must not fail them.
  auto stored = ParseManifestYaml(WithSpec("  runPolicy:\n    activeDeadlineSeconds: 999999999999\n"
                                           "    ttlSecondsAfterFinished: 99999999999\n"),
                                  "job.yaml");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->spec.run_policy.active_deadline_seconds, kMaxPolicySeconds);
  EXPECT_EQ(stored->spec.run_policy.ttl_seconds_after_finished, kMaxPolicySeconds);
}

// The ttl of a job whose spec does not parse, read alone as the parser reads it.
TEST(Manifest, TtlSecondsAfterFinishedIsReadAloneFromAnInvalidObject) {
  auto ttl = [](const std::string& run_policy) {
    return ReadTtlSecondsAfterFinished(
        R"({"metadata":{"name":"j"},"spec":{"replicas":0,"backend":"nccl","runPolicy":)" +
        run_policy + "}}");
  };
  EXPECT_EQ(ttl(R"({"ttlSecondsAfterFinished":30,"cleanPodPolicy":"Sometimes"})"), 30);
  EXPECT_EQ(ttl(R"({"ttlSecondsAfterFinished":0})"), 0);
  EXPECT_EQ(ttl(R"({"ttlSecondsAfterFinished":99999999999})"), kMaxPolicySeconds);
  for (const char* bad :
       {R"({})", R"({"ttlSecondsAfterFinished":null})", R"({"ttlSecondsAfterFinished":-1})",
        R"({"ttlSecondsAfterFinished":"30"})", R"({"ttlSecondsAfterFinished":1.5})",
        R"({"ttlSecondsAfterFinished":true})",
        R"({"ttlSecondsAfterFinished":18446744073709551615})", R"([30])",
        R"("ttlSecondsAfterFinished")"}) {
    EXPECT_EQ(ttl(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(ReadTtlSecondsAfterFinished(R"({"spec":[]})"), std::nullopt);
  EXPECT_EQ(ReadTtlSecondsAfterFinished("not json"), std::nullopt);
  EXPECT_EQ(ReadTtlSecondsAfterFinished("[]"), std::nullopt);
}

TEST(Manifest, NamesTheServiceCannotTakeAreRefusedWithTheReason) {
  auto named = [](const std::string& name) {
    return ParseManifestYaml(
        "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: "
        "{name: \"" +
            name + "\"}\nspec: {replicas: 1}\n",
        "n.yaml");
  };
  // A leading digit is a valid pod name but not a Service name (DNS-1035).
  auto digit = named("9lives");
  ASSERT_FALSE(digit.ok());
  EXPECT_NE(digit.status().message().find(
                "n.yaml: metadata.name: \"9lives\" must be a DNS-1035 label of at most 50"),
            std::string::npos)
      << digit.status().message();
  EXPECT_NE(digit.status().message().find("starting with a letter"), std::string::npos);
  // 50 characters leave room for the pod names <name>-a<attempt>-<rank> within 63.
  EXPECT_TRUE(named(std::string(50, 'a')).ok());
  EXPECT_FALSE(named(std::string(51, 'a')).ok());
  EXPECT_FALSE(named("ends-").ok());
  EXPECT_TRUE(named("lives9").ok());
  EXPECT_EQ(JobNameProblem("lives9"), "");
}

// The metadata a manifest gets wrong is named with what is wrong (a number for the name read as
// "required" before; a bad namespace or label was dropped or taken).
TEST(Manifest, MetadataOfTheWrongTypeOrShapeIsNamed) {
  auto with_metadata = [](const std::string& metadata) {
    return ParseManifestYaml("apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: " +
                                 metadata + "\nspec: {replicas: 1}\n",
                             "m.yaml");
  };
  const std::pair<const char*, const char*> cases[] = {
      {"{name: 123}", "m.yaml: metadata.name: must be a string, got an integer"},
      {"{name: [a]}", "m.yaml: metadata.name: must be a string, got a list"},
      {"{name: j, namespace: 7}", "m.yaml: metadata.namespace: must be a string, got an integer"},
      {"{name: j, namespace: Bad_NS}",
       "m.yaml: metadata.namespace: \"Bad_NS\" is not a DNS-1123 label"},
      {"{name: j, namespace: -ml}", "metadata.namespace: \"-ml\" is not a DNS-1123 label"},
      {"{name: j, labels: [a]}", "m.yaml: metadata.labels: must be an object, got a list"},
      {"{name: j, labels: {team: 5}}",
       "m.yaml: metadata.labels.team: must be a string, got an integer"},
  };
  for (const auto& [metadata, want] : cases) {
    auto job = with_metadata(metadata);
    ASSERT_FALSE(job.ok()) << metadata;
    EXPECT_NE(job.status().message().find(want), std::string::npos)
        << metadata << " -> " << job.status().message();
  }
  auto ok = with_metadata("{name: j, namespace: ml-team-2, labels: {team: a}}");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->metadata.ns, "ml-team-2");
  EXPECT_TRUE(with_metadata("{name: j, namespace: " + std::string(63, 'a') + "}").ok());
  EXPECT_FALSE(with_metadata("{name: j, namespace: " + std::string(64, 'a') + "}").ok());
}

TEST(Manifest, CheckpointVolumesAndResourcesParse) {
  auto job = ParseManifestYaml(WithSpec("  checkpoint:\n    volumeClaim: {storageClassName: fast}\n"
                                        "  resources:\n    requests: {cpu: 2, memory: 3Gi}\n"
                                        "    limits: {memory: 6Gi}\n"),
                               "c.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(job->spec.checkpoint.volume_claim.has_value());
  EXPECT_EQ(job->spec.checkpoint.volume_claim->size, "1Gi");
  EXPECT_EQ(job->spec.checkpoint.volume_claim->storage_class_name, "fast");
  EXPECT_EQ(job->spec.checkpoint.volume_claim->access_modes,
            std::vector<std::string>{"ReadWriteOnce"});
  ASSERT_TRUE(job->spec.resources.has_value());
  EXPECT_EQ(job->spec.resources->requests.at("cpu"), "2");
  EXPECT_EQ(job->spec.resources->requests.at("memory"), "3Gi");
  EXPECT_EQ(job->spec.resources->limits.at("memory"), "6Gi");

  auto nfs = ParseManifestYaml(
      WithSpec("  checkpoint:\n    volume: {nfs: {server: nas, path: /exports/ckpt}}\n"), "v.yaml");
  ASSERT_TRUE(nfs.ok()) << nfs.status().ToString();
  EXPECT_EQ(nfs->spec.checkpoint.volume_json, R"({"nfs":{"path":"/exports/ckpt","server":"nas"}})");
  EXPECT_FALSE(nfs->spec.checkpoint.volume_claim.has_value());
  EXPECT_FALSE(nfs->spec.resources.has_value());  // the operator then uses DefaultResources()
}

TEST(Manifest, PlacementPolicyParses) {
  auto plain = ParseManifestYaml(kMinimal, "t.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->spec.run_policy.scheduling_timeout_seconds, 600);
  EXPECT_FALSE(plain->spec.run_policy.pod_group.has_value());
  auto job = ParseManifestYaml(WithSpec("  runPolicy:\n    schedulingTimeoutSeconds: 0\n"
                                        "    podGroup: {type: volcano, queue: team-a}\n"),
                               "g.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.run_policy.scheduling_timeout_seconds, 0);
  ASSERT_TRUE(job->spec.run_policy.pod_group.has_value());
  EXPECT_EQ(job->spec.run_policy.pod_group->type, PodGroupType::kVolcano);
  EXPECT_EQ(job->spec.run_policy.pod_group->queue, "team-a");
}

TEST(Manifest, ClosedSetsParseToEnumsAndWriteBackTheirNames) {
  auto job = ParseManifestYaml(WithSpec("  backend: tcp\n"
                                        "  train: {dataset: /d, lrScaling: none, "
                                        "lrSchedule: constant}\n"
                                        "  runPolicy: {cleanPodPolicy: All}\n"),
                               "e.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.backend, contract::Backend::kTcp);
  EXPECT_EQ(job->spec.train.lr_scaling, contract::LrScaling::kNone);
  EXPECT_EQ(job->spec.train.lr_schedule, contract::LrSchedule::kConstant);
  EXPECT_EQ(job->spec.run_policy.clean_pod_policy, CleanPodPolicy::kAll);
  const std::vector<std::string> args = RunnerArgs(job->spec, "");
  auto after = [&](const std::string& flag) {
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == flag) return args[i + 1];
    }
    return std::string("<missing>");
  };
  EXPECT_EQ(after("--backend"), "tcp");
  EXPECT_EQ(after("--lr-scaling"), "none");
  EXPECT_EQ(after("--lr-schedule"), "constant");
}

TEST(Manifest, WrongKindAndNameAreRejected) {
  auto job = ParseManifestYaml("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n", "f");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("apiVersion"), std::string::npos);
  job = ParseManifestYaml(
      "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: Bad_Name}\n"
      "spec: {}\n",
      "f");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("metadata.name"), std::string::npos);
}

TEST(Manifest, NotYamlAndMissingFile) {
  auto job = ParseManifestYaml("spec: [unclosed", "broken.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("broken.yaml: not valid YAML"), std::string::npos);
  auto missing = LoadManifestFile("/nonexistent/job.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/job.yaml"), std::string::npos);
  // Why is said.
  EXPECT_NE(missing.status().message().find("No such file or directory"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = LoadManifestFile("/tmp");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().message(), "/tmp: a directory, not a manifest file");
}

// A review found a manifest that meant one thing here and another to the cluster: kubectl
// types plain scalars as YAML 1.1 does (sigs.k8s.io/yaml, go-yaml v2), so `replicas: 010` ran 10
// ranks under `ringtrain run` and 8 in the cluster, and `suspend: yes` or a merge key (<<) were
// refused here and taken there. The same file means the same job everywhere now.
TEST(Manifest, PlainScalarsAreTypedAsKubectlTypesThem) {
  auto typed = [](const std::string& scalar) {
    auto j = YamlToJson("v: " + scalar + "\n", "t.yaml", "test");
    EXPECT_TRUE(j.ok()) << scalar << ": " << j.status().ToString();
    return j.ok() ? (*j)["v"] : Json();
  };
  EXPECT_EQ(typed("010"), 8);
  EXPECT_EQ(typed("0o10"), 8);
  EXPECT_EQ(typed("0x10"), 16);
  EXPECT_EQ(typed("-0x10"), -16);
  EXPECT_EQ(typed("0b101"), 5);
  EXPECT_EQ(typed("1_000"), 1000);
  EXPECT_EQ(typed("08"), 8) << "no octal: the float 8, which JSON writes as 8";
  EXPECT_EQ(typed("0"), 0);
  EXPECT_EQ(typed("1e1"), 10);
  EXPECT_TRUE(typed("1e1").is_number_integer());
  EXPECT_EQ(typed("2.0"), 2);
  EXPECT_EQ(typed("0.5"), 0.5);
  EXPECT_EQ(typed(".5"), 0.5);
  EXPECT_EQ(typed("-.5"), -0.5);
  EXPECT_EQ(typed("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(typed("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(typed("1e400"), "1e400") << "beyond float64: Go keeps the text";
  for (const char* yes : {"y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True"}) {
    EXPECT_EQ(typed(yes), true) << yes;
  }
  for (const char* no : {"n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "FALSE"}) {
    EXPECT_EQ(typed(no), false) << no;
  }
  for (const char* null : {"~", "null", "Null", "NULL"}) EXPECT_TRUE(typed(null).is_null());
  for (const char* text :
       {"\"010\"", "'yes'", "10.0.0.1", "1.2.3", "2026-11-29", "yess", "0x", "+", "nope"}) {
    EXPECT_TRUE(typed(text).is_string()) << text;
  }
  // The manifest as kubectl would create it.
  auto job =
      ParseManifestYaml(WithSpec("  replicas: 010\n  runPolicy: {suspend: yes}\n"), "q.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.replicas, 8);
  EXPECT_TRUE(job->spec.run_policy.suspend);
  // A merge key merges where it stands (go-yaml v2): over the keys before it, under the keys
  // after it; of a list of maps, the earlier wins.
  auto merged = YamlToJson(
      "base: &b {x: 1, w: 2}\nmore: &m {w: 3, z: 4}\none: {<<: *b, x: 9}\n"
      "two: {<<: [*m, *b]}\nthree: {x: 7, <<: *b}\nquoted: {\"<<\": 1}\n",
      "m.yaml", "test");
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ((*merged)["one"], (Json{{"x", 9}, {"w", 2}}));
  EXPECT_EQ((*merged)["two"], (Json{{"x", 1}, {"w", 3}, {"z", 4}}));
  EXPECT_EQ((*merged)["three"], (Json{{"x", 1}, {"w", 2}}));
  EXPECT_EQ((*merged)["quoted"], (Json{{"<<", 1}}));
  for (const char* bad_merge : {"a: {<<: 3}\n", "a: {<<: ~}\n", "a: {<<: [1]}\n"}) {
    auto bad = YamlToJson(bad_merge, "m.yaml", "test");
    ASSERT_FALSE(bad.ok()) << bad_merge;
    EXPECT_EQ(bad.status().message(), "m.yaml: a.<<: a merge key takes a map or a list of maps");
  }
  // Keys are typed, then written as text, as sigs.k8s.io/yaml writes them.
  auto keys =
      YamlToJson("k: {y: a, 010: c, 1e3: d, 1.5: e, 1e7: f, \"on\": g}\n", "k.yaml", "test");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(
      (*keys)["k"],
      (Json{{"true", "a"}, {"8", "c"}, {"1000", "d"}, {"1.5", "e"}, {"1e+07", "f"}, {"on", "g"}}));
  auto null_key = YamlToJson("k: {~: a}\n", "k.yaml", "test");
  ASSERT_FALSE(null_key.ok());
  EXPECT_EQ(null_key.status().message(), "k.yaml: k: a key is null");
  EXPECT_EQ(typed("0xFFFFFFFFFFFFFFFF"), UINT64_MAX);
  EXPECT_TRUE(typed("0o").is_string()) << "a prefix without digits is no number";
  EXPECT_TRUE(typed("+18446744073709551615").is_number_float()) << "ParseUint takes no sign";
  EXPECT_EQ(typed(".5_5"), 0.55);
  EXPECT_TRUE(typed("._5").is_string());
  EXPECT_TRUE(typed("9.2e18").is_number_integer());
  EXPECT_TRUE(typed("9.3e18").is_number_float());
}

// The comparison is exact (review: 1000m read as less than 1 and a request equal to its limit
// was refused), and only validate and run say it: the operator (an object of the API server)
// must not fail a job that ran under an earlier operator, and a template runner's own resources
// are the ones used.
TEST(Manifest, ARequestAboveItsLimitIsComparedExactly) {
  auto check = [](const std::string& request, const std::string& limit) {
    return ParseManifestYaml(WithSpec("  resources:\n    requests: {cpu: \"" + request +
                                      "\"}\n    limits: {cpu: \"" + limit + "\"}\n"),
                             "r.yaml")
        .ok();
  };
  EXPECT_TRUE(check("1", "1000m"));
  EXPECT_TRUE(check("1000m", "1"));
  EXPECT_TRUE(check("0.5", "500m"));
  EXPECT_TRUE(check("1Gi", "1024Mi"));
  EXPECT_TRUE(check("1073741824", "1Gi"));
  EXPECT_TRUE(check("1e3", "1k"));
  EXPECT_TRUE(check("0.001", "1m"));
  EXPECT_FALSE(check("1001m", "1"));
  EXPECT_FALSE(check("1Gi", "1G"));
  EXPECT_FALSE(check("1.5", "1"));
  const std::string json = R"({"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob",)"
                           R"("metadata":{"name":"j","namespace":"ml"},"spec":{"replicas":1,)"
                           R"("resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}}}})";
  EXPECT_TRUE(ParseJobJson(json).ok()) << "the operator leaves it to the API server";
  auto own = ParseManifestYaml(
      WithSpec("  resources:\n    requests: {cpu: 2}\n    limits: {cpu: 1}\n  template:\n"
               "    spec:\n      containers:\n        - name: runner\n"
               "          resources: {requests: {cpu: 1}}\n"),
      "r.yaml");
  EXPECT_TRUE(own.ok()) << "the template's runner sets its own: " << own.status().ToString();
}

TEST(Manifest, QuotedNumbersStayStrings) {
  auto job = ParseManifestYaml(WithSpec("  replicas: \"2\"\n"), "q.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("must be an integer, got a string"), std::string::npos);
}

TEST(Json, StatusRoundTrips) {
  JobStatus s;
  s.phase = "Running";
  s.restarts = 2;
  s.attempt = 3;
  s.start_time = "2026-11-21T10:00:00Z";
  s.conditions.push_back(
      {"Running", "True", "Running", "all replicas running", "2026-11-21T10:00:05Z"});
  s.replicas = {0, 4, 0, 0};
  s.progress = Progress{120, 1, 5000.5, 0.25, "2026-11-21T10:01:00Z"};
  s.progress->test_accuracy = 0.8945;
  s.last_failure = Failure{1, 137, "OOMKilled", "out of memory"};
  s.avoided_nodes = {{"node-a", "NodeLost", 1, true}, {"node-b", "Evicted", 2, false}};
  s.in_place_recoveries = 2;
  s.replaced_pods = {"j-a3-1"};
  s.recovery = {2, 1, 1, 1501, 12.3, 1, 1, 4.25, 118, "2026-11-21T10:02:00Z"};
  std::string doc = R"({"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob",)"
                    R"("metadata":{"name":"j","namespace":"ml","generation":4},)"
                    R"("spec":{"replicas":4},"status":)" +
                    StatusToJson(s) + "}";
  auto job = ParseJobJson(doc);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->metadata.ns, "ml");
  EXPECT_EQ(job->status, s);
  EXPECT_NE(StatusToJson(s).find(R"("testAccuracy":0.8945)"), std::string::npos);
  EXPECT_EQ(StatusToJson(s).find("testMSE"), std::string::npos) << "none: not written";
  // A regression model's.
  s.progress->test_accuracy = -1;
  s.progress->test_mse = 0.0123;
  job = ParseJobJson(R"({"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob",)"
                     R"("metadata":{"name":"j"},"spec":{"replicas":4},"status":)" +
                     StatusToJson(s) + "}");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->status.progress, s.progress);
}

TEST(RunnerArgs, CarryTheTrainSpec) {
  auto job =
      ParseManifestYaml(WithSpec("  train:\n    model: cnn\n    learningRate: 0.005\n"), "a.yaml");
  ASSERT_TRUE(job.ok());
  auto args = RunnerArgs(job->spec, "/ckpt");
  auto value = [&](const std::string& flag) {
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == flag) return args[i + 1];
    }
    return std::string("<missing>");
  };
  EXPECT_EQ(value("--model"), "cnn");
  EXPECT_EQ(value("--learning-rate"), "0.005");
  EXPECT_EQ(value("--checkpoint-dir"), "/ckpt");
  EXPECT_EQ(value("--device"), "cpu");  // gpusPerReplica defaults to 0
  EXPECT_EQ(value("--backend"), "auto");
}

TEST(RunnerArgs, GpusSelectTheDeviceAndMultiplyTheWorld) {
  auto job = ParseManifestYaml(WithSpec("  replicas: 2\n  gpusPerReplica: 4\n  backend: nccl\n"),
                               "g.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.world_size(), 8);  // one rank per GPU
  auto args = RunnerArgs(job->spec, "");
  auto has = [&](const std::string& flag, const std::string& v) {
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == flag && args[i + 1] == v) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("--device", "cuda"));
  EXPECT_TRUE(has("--backend", "nccl"));
}

// A Keras-style CNN for 1x28x28 inputs and 10 classes, as YAML under spec.train.
constexpr char kLayerList[] = R"(  train:
    model:
      input: [1, 28, 28]
      layers:
        - conv2d: {filters: 32, kernel: 3, padding: same}
        - relu
        - max_pool2d: {pool: 2}
        - flatten
        - dropout: {rate: 0.5}
        - dense: {units: 10}
        - softmax
      loss: softmax_cross_entropy
)";

std::string ArgValue(const std::vector<std::string>& args, const std::string& flag) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) return args[i + 1];
  }
  return "<missing>";
}

TEST(ModelList, ParsesWithShapesAndGoesToTheRunnerAsModelSpec) {
  auto job = ParseManifestYaml(WithSpec(kLayerList), "list.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const TrainSpec& t = job->spec.train;
  EXPECT_EQ(t.model, "");
  ASSERT_TRUE(t.model_spec.has_value());
  EXPECT_EQ(t.model_spec->layers.size(), 7u);
  EXPECT_EQ(t.model_spec->input, (model::Shape{1, 28, 28}));
  const auto args = RunnerArgs(job->spec, "");
  EXPECT_EQ(ArgValue(args, "--model"), "<missing>");
  const std::string spec_json = ArgValue(args, "--model-spec");
  // The runner reads back the same architecture, every default written out.
  auto back = model::ParseModelSpec(spec_json);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << " " << spec_json;
  EXPECT_EQ(model::CanonicalString(*back), model::CanonicalString(*t.model_spec));
  EXPECT_NE(spec_json.find(R"("stride":1)"), std::string::npos) << spec_json;
  EXPECT_NE(spec_json.find(R"("rate":0.5)"), std::string::npos) << spec_json;
}

TEST(ModelList, PresetNamesStayFlagsAndOtherTypesAreRefused) {
  auto job = ParseManifestYaml(WithSpec("  train:\n    model: cnn\n"), "p.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_FALSE(job->spec.train.model_spec.has_value());
  EXPECT_EQ(ArgValue(RunnerArgs(job->spec, ""), "--model"), "cnn");
  EXPECT_EQ(ArgValue(RunnerArgs(job->spec, ""), "--model-spec"), "<missing>");
  job = ParseManifestYaml(WithSpec("  train:\n    model: [dense]\n"), "p.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("p.yaml: spec.train.model: must be a preset name (mlp, "
                                        "cnn) or a layer list"),
            std::string::npos)
      << job.status().message();
}

class BadModelList : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadModelList, ErrorNamesTheFieldOrTheLayer) {
  auto job = ParseManifestYaml(WithSpec(std::string("  train:\n    model:\n") + GetParam().spec),
                               "m.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find(GetParam().expected), std::string::npos)
      << job.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadModelList,
    ::testing::Values(
        BadCase{"      input: [1, 28, 28]\n      layers: [flatten, {dense: {units: 10}}, "
                "{conv2d: {filters: 8, kernel: 0}}]\n",
                "m.yaml: spec.train.model.layers[2].conv2d.kernel: must be 1..15, got 0"},
        BadCase{"      input: [1, 28, 28]\n      layers: [{dense: {units: 10}}]\n",
                "spec.train.model.layers[0] dense: input is 1x28x28, needs a flat input"},
        BadCase{"      input: [1, 4, 4]\n      layers: [{conv2d: {filters: 2, kernel: 5}}, "
                "flatten]\n",
                "spec.train.model.layers[0] conv2d: input 1x4x4 is smaller than the kernel 5x5"},
        BadCase{"      input: [4]\n      layers: [{dense: {units: 3}}]\n      loss: hinge\n",
                "spec.train.model.loss: must be \"softmax_cross_entropy\" or \"mse\""},
        BadCase{"      input: [4]\n      layers: [{lstm: {units: 3}}]\n",
                "spec.train.model.layers[0]: unknown layer \"lstm\""},
        BadCase{"      input: [4]\n      layers: [{dense: {units: 3}}]\n      optimizer: sgd\n",
                "spec.train.model.optimizer: unknown option"},
        BadCase{"      input: [4]\n", "spec.train.model.layers: required"}));

TEST(ModelList, WithoutAnInputAManifestWaitsForTheDataAndTheApiRefuses) {
  const std::string spec = "  train:\n    model:\n      layers: [flatten, {dense: {units: 10}}]\n";
  // A local manifest: `ringtrain run`/`validate` read the dataset's shape (ResolveModel).
  auto job = ParseManifestYaml(WithSpec(spec), "n.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_FALSE(job->spec.train.model_spec.has_value());
  TrainSpec t = job->spec.train;
  auto report = ResolveModel(&t, DataShape{model::Shape{1, 28, 28}, 10});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(t.model_spec.has_value());
  EXPECT_EQ(t.model_spec->input, (model::Shape{1, 28, 28}));
  EXPECT_EQ(report->params, 7850u);  // 784 x 10 + 10
  t = job->spec.train;
  report = ResolveModel(&t, DataShape{model::Shape{13, 1, 1}, 3});
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("spec.train.model.layers[1] dense: output 10 units but "
                                           "the dataset has 3 classes"),
            std::string::npos)
      << report.status().message();
  // The operator reads the object from the API server and never the dataset: the input must be
  // in the manifest.
  const std::string doc =
      R"({"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"j"},)"
      R"("spec":{"train":{"model":{"layers":["flatten",{"dense":{"units":10}}]}}}})";
  auto api = ParseJobJson(doc);
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.status().message().find("spec.train.model.input: required"), std::string::npos)
      << api.status().message();
}

TEST(ModelList, PresetsAreCheckedAsTheRunnerBuildsThem) {
  TrainSpec t;
  t.model = "cnn";
  auto report = ResolveModel(&t, std::nullopt);  // Fashion-MNIST
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  // conv 32: 320, conv 64: 18496, dense 3136->128: 401536, dense 128->10: 1290.
  EXPECT_EQ(report->params, 421642u);
  EXPECT_FALSE(t.model_spec.has_value());  // still --model cnn
  report = ResolveModel(&t, DataShape{model::Shape{1, 2, 2}, 10});
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("spec.train.model.layers[5] max_pool2d"),
            std::string::npos)
      << report.status().message();
}

// A list longer than one argument of a process may be (128 KiB) is refused naming its size,
// not left to an E2BIG at every start (retried up to the backoffLimit); a long list that fits
// trains as before.
TEST(ModelList, AListLongerThanOneArgumentIsRefused) {
  const auto relus = [](int n) {
    std::string json = R"({"input": [4], "layers": [)";
    for (int i = 0; i < n; ++i) json += i == 0 ? "\"relu\"" : ", \"relu\"";
    return json + "]}";
  };
  TrainSpec fits;
  fits.model_json = relus(5000);
  ASSERT_TRUE(ResolveModel(&fits, std::nullopt).ok());
  const auto args = RunnerArgs(JobSpec{.train = fits}, "");
  EXPECT_LT(ArgValue(args, "--model-spec").size(), 128u * 1024);
  TrainSpec long_list;
  long_list.model_json = relus(20000);  // "relu", 7 bytes each: 140 KB
  auto report = ResolveModel(&long_list, std::nullopt);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("spec.train.model.layers: 20000 layers make "),
            std::string::npos)
      << report.status().message();
  EXPECT_NE(report.status().message().find("Linux takes at most 131071 in one argument"),
            std::string::npos)
      << report.status().message();
}

TEST(Json, ApiObjectsCarryBothModelForms) {
  for (const std::string& model :
       {std::string(R"("cnn")"),
        std::string(R"({"input":[784],"layers":[{"dense":{"units":8}},"tanh",)"
                    R"({"dense":{"units":10}},"softmax"]})")}) {
    const std::string doc =
        R"({"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"j"},)"
        R"("spec":{"train":{"model":)" +
        model + R"(}},"status":{"phase":"Running"}})";
    auto job = ParseJobJson(doc);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_EQ(job->status.phase, "Running");
    const auto args = RunnerArgs(job->spec, "");
    if (model.front() == '"') {
      EXPECT_EQ(ArgValue(args, "--model"), "cnn");
    } else {
      ASSERT_TRUE(job->spec.train.model_spec.has_value());
      EXPECT_EQ(job->spec.train.model_spec->layers.size(), 4u);
      EXPECT_NE(ArgValue(args, "--model-spec").find(R"("input":[784])"), std::string::npos);
    }
  }
}

constexpr char kWineDataset[] = R"(    dataset:
      format: csv
      train: /data/wine_train.csv
      test: /data/wine_test.csv
      header: auto
      label: target
      task: classification
      standardize: true
      inputShape: [13]
      classes: 3
)";

TEST(DatasetObject, ParsesAndGoesToTheRunnerAsDatasetSpec) {
  auto job = ParseManifestYaml(WithSpec(std::string("  train:\n") + kWineDataset), "w.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const TrainSpec& t = job->spec.train;
  ASSERT_TRUE(t.dataset_spec.has_value());
  EXPECT_EQ(t.dataset, "");
  EXPECT_EQ(t.dataset_spec->format, data::DatasetFormat::kCsv);
  EXPECT_EQ(t.dataset_spec->label_name, "target");
  EXPECT_EQ(t.dataset_spec->classes, 3);
  const auto args = RunnerArgs(job->spec, "");
  EXPECT_EQ(ArgValue(args, "--dataset"), "<missing>");  // the runner takes one of the two
  auto back = data::ParseDatasetSpec(ArgValue(args, "--dataset-spec"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *t.dataset_spec);
  // A directory stays --dataset.
  job = ParseManifestYaml(WithSpec("  train:\n    dataset: /data/fm\n"), "d.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(ArgValue(RunnerArgs(job->spec, ""), "--dataset"), "/data/fm");
  EXPECT_EQ(ArgValue(RunnerArgs(job->spec, ""), "--dataset-spec"), "<missing>");
}

TEST(DatasetObject, ErrorsNameTheField) {
  for (const auto& [spec, expected] : std::vector<std::pair<std::string, std::string>>{
           {"    dataset: {format: csv, train: /a.csv, test: /b.csv, testFraction: 1.5}\n",
            "d.yaml: spec.train.dataset.testFraction"},
           {"    dataset: {format: parquet, train: /a}\n", "d.yaml: spec.train.dataset.format"},
           {"    dataset: {format: csv, train: /a.csv, test: /b.csv, trainX: /x.npy}\n",
            "spec.train.dataset.trainX"},
           {"    dataset: 7\n", "spec.train.dataset: must be an IDX directory or a dataset object"},
           {"    dataset: \"\"\n", "spec.train.dataset: must not be empty"}}) {
    auto job = ParseManifestYaml(WithSpec("  train:\n" + spec), "d.yaml");
    ASSERT_FALSE(job.ok()) << spec;
    EXPECT_NE(job.status().message().find(expected), std::string::npos) << job.status().message();
  }
}

// A directory of IDX files (the default dataset among them), or an IDX object without `classes`,
// has the 10 classes the ranks give it:
// a layer list of another width is refused before any pod, as `ringtrain validate` refuses it
// with the files. Before, the operator created the pods and every rank refused the model.
TEST(ModelList, ADirectoryOfIdxFilesHasTenClasses) {
  const std::string twelve =
      "  train:\n    model:\n      input: [1, 28, 28]\n      layers: [flatten, {dense: {units: "
      "12}}]\n";
  for (const std::string& dataset :
       {std::string(), std::string("    dataset: /data/my-mnist\n"),
        std::string("    dataset: {format: idx, train: /data/my-mnist}\n")}) {
    auto job = ParseManifestYaml(WithSpec(twelve + dataset), "m.yaml");
    ASSERT_FALSE(job.ok()) << dataset;
    EXPECT_NE(job.status().message().find("m.yaml: spec.train.model.layers[1] dense: output 12 "
                                          "units but the dataset has 10 classes"),
              std::string::npos)
        << job.status().message();
  }
  auto ten = ParseManifestYaml(
      WithSpec("  train:\n    model:\n      input: [1, 28, 28]\n      layers: [flatten, "
               "{dense: {units: 10}}]\n"),
      "m.yaml");
  EXPECT_TRUE(ten.ok()) << ten.status().ToString();
}

TEST(DatasetObject, DeclaredShapeCompletesAndChecksTheModel) {
  // No model.input: the dataset's inputShape gives it, in the API server's objects too.
  const std::string fits =
      "  train:\n    model:\n      layers: [{dense: {units: 16}}, relu, {dense: {units: 3}}]\n" +
      std::string(kWineDataset);
  auto job = ParseManifestYaml(WithSpec(fits), "w.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(job->spec.train.model_spec.has_value());
  EXPECT_EQ(job->spec.train.model_spec->input, (model::Shape{13, 1, 1}));
  // 10 outputs for 3 classes: refused naming the layer that sets the width.
  const std::string wrong =
      "  train:\n    model:\n      layers: [{dense: {units: 16}}, relu, {dense: {units: 10}}]\n" +
      std::string(kWineDataset);
  job = ParseManifestYaml(WithSpec(wrong), "w.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("w.yaml: spec.train.model.layers[2] dense: output 10 "
                                        "units but the dataset has 3 classes"),
            std::string::npos)
      << job.status().message();
  // An input that contradicts the declared inputShape.
  const std::string images =
      "  train:\n    model:\n      input: [1, 8, 8]\n      layers: [flatten, {dense: {units: "
      "3}}]\n" +
      std::string(kWineDataset);
  job = ParseManifestYaml(WithSpec(images), "w.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("spec.train.model.input: the model takes 1x8x8 per "
                                        "sample but the dataset has 13 features"),
            std::string::npos)
      << job.status().message();
  // The declared task against the loss, as every rank would refuse it.
  const std::string mse =
      "  train:\n    model:\n      layers: [{dense: {units: 3}}]\n      loss: mse\n" +
      std::string(kWineDataset);
  job = ParseManifestYaml(WithSpec(mse), "w.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("w.yaml: spec.train.model.loss: mse does not fit a "
                                        "classification dataset"),
            std::string::npos)
      << job.status().message();
}

// Every inputShape the dataset object takes (1 to 4 dimensions) gives the model its input as the
// ranks read the data (model::InputShapeOf): [h, w] one channel of h x w, [c, h, w] as it is,
// [features] and 4 dimensions flat. Before, 2 and 4 were ignored: "model.input: required" though
// inputShape was given, and a model.input of another layout ([100] for [8, 8]) passed.
TEST(DatasetObject, EveryDeclaredShapeGivesTheModelItsInput) {
  const auto manifest = [](const std::string& input, const std::string& shape) {
    return "  train:\n    model:\n" + input +
           "      layers: [flatten, {dense: {units: 10}}, softmax]\n"
           "    dataset: {format: npy, trainX: /no/x.npy, trainY: /no/y.npy, testX: /no/tx.npy, "
           "testY: /no/ty.npy, inputShape: " +
           shape + ", classes: 10}\n";
  };
  for (const auto& [shape, want] :
       std::vector<std::pair<std::string, model::Shape>>{{"[64]", {64, 1, 1}},
                                                         {"[8, 8]", {1, 8, 8}},
                                                         {"[3, 8, 8]", {3, 8, 8}},
                                                         {"[1, 2, 4, 8]", {64, 1, 1}}}) {
    auto job = ParseManifestYaml(WithSpec(manifest("", shape)), "s.yaml");
    ASSERT_TRUE(job.ok()) << shape << ": " << job.status().ToString();
    ASSERT_TRUE(job->spec.train.model_spec.has_value()) << shape;
    EXPECT_EQ(job->spec.train.model_spec->input, want) << shape;
  }
  auto job = ParseManifestYaml(WithSpec(manifest("      input: [100]\n", "[8, 8]")), "s.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(
      job.status().message().find("spec.train.model.input: the model takes 100 features per sample "
                                  "but the dataset has 1x8x8"),
      std::string::npos)
      << job.status().message();
}

// Without inputShape (nor classes) the dataset still says its task (an object's, classification
// by default; a directory is IDX): a loss that does not fit it, or a preset over a regression, is
// refused by the operator naming the field, not by every rank of a created gang (a permanent
// failure). As the operator reads the object (ParseJobJson) and as `ringtrain run` reads a
// manifest whose files are not here.
TEST(DatasetObject, TheDeclaredTaskChecksTheLossWithoutAnInputShape) {
  const std::string regression = R"({"format":"csv","train":"/d/r.csv","test":"/d/t.csv",)"
                                 R"("label":"y","task":"regression"})";
  const std::string classification = R"({"format":"csv","train":"/d/c.csv","test":"/d/t.csv"})";
  const std::string cross_entropy = R"({"input":[6],"layers":[{"dense":{"units":3}}]})";
  const std::string mse = R"({"input":[6],"layers":[{"dense":{"units":1}}],"loss":"mse"})";
  for (const auto& [model, dataset, expected] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {cross_entropy, regression,
            "spec.train.model.loss: softmax_cross_entropy does not fit a regression dataset"},
           {R"("mlp")", regression,
            "spec.train.model: the preset mlp classifies, and the dataset is a regression one"},
           {mse, classification, "spec.train.model.loss: mse does not fit a classification"},
           {mse, R"("/data/fashion-mnist")",
            "spec.train.model.loss: mse does not fit a classification"},
           // No classes declared: the model's own width falls short, not the dataset's.
           {R"({"input":[6],"layers":[{"dense":{"units":1}}]})", classification,
            "spec.train.model.loss: softmax_cross_entropy needs at least 2 classes, the model "
            "outputs 1 unit(s)"}}) {
    const std::string doc =
        R"({"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"j"},)"
        R"("spec":{"train":{"model":)" +
        model + R"(,"dataset":)" + dataset + "}}}";
    auto job = ParseJobJson(doc);
    ASSERT_FALSE(job.ok()) << doc;
    EXPECT_NE(job.status().message().find(expected), std::string::npos) << job.status().message();
  }
  // What fits is accepted.
  for (const auto& [model, dataset] : std::vector<std::pair<std::string, std::string>>{
           {mse, regression}, {cross_entropy, classification}, {R"("mlp")", classification}}) {
    const std::string doc =
        R"({"apiVersion":"ringtrain.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"j"},)"
        R"("spec":{"train":{"model":)" +
        model + R"(,"dataset":)" + dataset + "}}}";
    auto job = ParseJobJson(doc);
    EXPECT_TRUE(job.ok()) << doc << ": " << job.status().ToString();
  }
  // A local manifest: refused when parsed, before any file is read.
  auto local = ParseManifestYaml(
      WithSpec("  train:\n    model:\n      input: [6]\n      layers: [{dense: {units: 3}}]\n"
               "    dataset: {format: npy, trainX: /x.npy, trainY: /y.npy, testFraction: 0.2, "
               "task: regression}\n"),
      "r.yaml");
  ASSERT_FALSE(local.ok());
  EXPECT_NE(local.status().message().find("r.yaml: spec.train.model.loss: softmax_cross_entropy "
                                          "does not fit a regression dataset"),
            std::string::npos)
      << local.status().message();
}

}  // namespace
}  // namespace ringtrain::api
