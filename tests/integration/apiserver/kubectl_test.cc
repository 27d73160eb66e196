// The fake API server and the manifests driven by the real kubectl: discovery, apply (create
// and merge-patch), printer columns, schema rejection and built-in kinds are checked by a
// client nobody here wrote. Skipped when kubectl is not installed.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/apiserver/fixtures.h"

namespace ringtrain::fake::testing {
namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int rc;
  std::string output;  // stdout and stderr
};

class KubectlTest : public FakeApiServerTest {
 protected:
  void SetUp() override {
    if (std::system("command -v kubectl >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "kubectl is not installed";
    }
    FakeApiServerTest::SetUp();
    dir_ = fs::temp_directory_path() /
           ("ringtrain-kubectl-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::ofstream(dir_ / "kubeconfig") << "apiVersion: v1\nkind: Config\n"
                                          "clusters:\n- name: fake\n  cluster:\n    server: "
                                       << server_->url()
                                       << "\nusers:\n- name: test\n  user:\n    token: any\n"
                                          "contexts:\n- name: fake\n  context:\n    cluster: "
                                          "fake\n    user: test\n    namespace: default\n"
                                          "current-context: fake\n";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
    if (server_) FakeApiServerTest::TearDown();
  }

  // Runs kubectl against the fake; its own discovery cache keeps runs independent.
  CommandResult Kubectl(const std::string& args) {
    std::string cmd = "timeout 30 kubectl --kubeconfig " + (dir_ / "kubeconfig").string() +
                      " --cache-dir " + (dir_ / "cache").string() + " " + args + " 2>&1";
    CommandResult r{-1, ""};
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return r;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
    int status = ::pclose(pipe);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  }
  std::string Manifest(const std::string& relative) { return SourceDir() + "/" + relative; }
  void InstallCrd() {
    auto r = Kubectl("apply -f " + Manifest("manifests/crd/trainingjobs.ringtrain.dev.yaml"));
    ASSERT_EQ(r.rc, 0) << r.output;
    EXPECT_NE(r.output.find("customresourcedefinition.apiextensions.k8s.io/"
                            "trainingjobs.ringtrain.dev created"),
              std::string::npos)
        << r.output;
  }

  fs::path dir_;
};

TEST_F(KubectlTest, ApplyCrdAndExampleThenGetShowsPrinterColumns) {
  InstallCrd();
  auto r = Kubectl(
      "wait --for=condition=Established --timeout=10s "
      "crd/trainingjobs.ringtrain.dev");
  EXPECT_EQ(r.rc, 0) << r.output;

  r = Kubectl("apply -f " + Manifest("manifests/examples/fashion-mnist-mlp.yaml"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("trainingjob.ringtrain.dev/fashion-mnist-mlp created"), std::string::npos)
      << r.output;
  ASSERT_TRUE(
      server_
          ->PatchStatus({"ringtrain.dev", "trainingjobs"}, "default", "fashion-mnist-mlp",
                        {{"phase", "Running"},
                         {"restarts", 1},
                         {"progress",
                          {{"step", 420}, {"samplesPerSecond", 5120.5}, {"testAccuracy", 0.8528}}}})
          .ok());

  // The schema's defaults are stored, except spec.image's: unset, the operator picks the image
  // (its --runner-image), and a stored default showed one the pods did not run.
  r = Kubectl("get tj fashion-mnist-mlp -o jsonpath={.spec.image}/{.spec.runPolicy.recovery}");
  EXPECT_EQ(r.output, "/InPlace") << r.output;
  r = Kubectl("get tj");
  ASSERT_EQ(r.rc, 0) << r.output;
  std::istringstream lines(r.output);
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            "NAME                PHASE     REPLICAS   RESTARTS   STEP   SAMPLES/S   ACCURACY   "
            "PODS   AGE")
      << r.output;
  EXPECT_EQ(
      row.rfind(
          "fashion-mnist-mlp   Running   2          1          420    5120.5      0.8528     ", 0),
      0u)
      << r.output;

  // Re-applying is a no-op; a changed manifest is a merge patch that bumps generation.
  r = Kubectl("apply -f " + Manifest("manifests/examples/fashion-mnist-mlp.yaml"));
  EXPECT_NE(r.output.find("fashion-mnist-mlp unchanged"), std::string::npos) << r.output;
  std::string changed = (dir_ / "changed.yaml").string();
  ASSERT_EQ(std::system(("sed 's/replicas: 2/replicas: 3/' " +
                         Manifest("manifests/examples/fashion-mnist-mlp.yaml") + " > " + changed)
                            .c_str()),
            0);
  r = Kubectl("apply -f " + changed);
  EXPECT_NE(r.output.find("fashion-mnist-mlp configured"), std::string::npos) << r.output;
  r = Kubectl(
      "get tj fashion-mnist-mlp -o jsonpath={.metadata.generation},{.spec.replicas},"
      "{.status.phase}");
  EXPECT_EQ(r.output, "2,3,Running");

  r = Kubectl("get trainingjobs.ringtrain.dev -o name");
  EXPECT_EQ(r.output, "trainingjob.ringtrain.dev/fashion-mnist-mlp\n");
  r = Kubectl("delete tj fashion-mnist-mlp");
  EXPECT_EQ(r.rc, 0) << r.output;
  r = Kubectl("get tj");
  EXPECT_NE(r.output.find("No resources found in default namespace."), std::string::npos)
      << r.output;
}

TEST_F(KubectlTest, SchemaRejectsZeroReplicas) {
  InstallCrd();
  std::string bad = (dir_ / "bad.yaml").string();
  std::ofstream(bad) << "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\n"
                        "metadata:\n  name: bad-zero\nspec:\n  replicas: 0\n";
  auto r = Kubectl("apply -f " + bad);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("The TrainingJob \"bad-zero\" is invalid: spec.replicas: Invalid "
                          "value: 0: spec.replicas in body should be greater than or equal to 1"),
            std::string::npos)
      << r.output;
  std::ofstream(bad) << "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\n"
                        "metadata:\n  name: bad-enum\nspec:\n  replicas: 1\n  backend: mpi\n";
  r = Kubectl("apply -f " + bad);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(
      r.output.find(
          R"(spec.backend: Unsupported value: "mpi": supported values: "auto", "nccl", "tcp")"),
      std::string::npos)
      << r.output;
}

// What the operator cannot serve is refused at `kubectl apply` (CEL rules of the CRD), worded
// as kubectl shows the real server's answer (t3-01).
TEST_F(KubectlTest, CelRulesRefuseNamesAndSpecsAtApply) {
  InstallCrd();
  std::string bad = (dir_ / "bad.yaml").string();
  std::ofstream(bad) << "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\n"
                        "metadata:\n  name: 9lives\nspec:\n  replicas: 1\n";
  auto r = Kubectl("apply -f " + bad);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("The TrainingJob \"9lives\" is invalid: <nil>: Invalid value: "
                          "\"object\": metadata.name must be a DNS-1035 label of at most 50 "
                          "characters"),
            std::string::npos)
      << r.output;
  std::ofstream(bad) << "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\n"
                        "metadata:\n  name: nccl-cpu\nspec:\n  replicas: 1\n  backend: nccl\n";
  r = Kubectl("apply -f " + bad);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("The TrainingJob \"nccl-cpu\" is invalid: spec.backend: Invalid value: "
                          "\"object\": spec.backend nccl needs spec.gpusPerReplica of at least 1"),
            std::string::npos)
      << r.output;

  // spec.train.model and spec.train.dataset take a string or an object (issue 21): the layer
  // list of the Keras-style example is kept whole (no key pruned) and `get tj` still shows it.
  r = Kubectl("apply -f " + Manifest("manifests/examples/fashion-mnist-keras-cnn.yaml"));
  ASSERT_EQ(r.rc, 0) << r.output;
  r = Kubectl(
      "get tj fashion-mnist-keras-cnn -o jsonpath={.spec.train.model.layers[3].conv2d.filters},"
      "{.spec.train.model.layers[10].dropout.rate},{.spec.train.dataset.inputShape}");
  EXPECT_EQ(r.output, "64,0.5,[1,28,28]") << r.output;
  r = Kubectl("get tj fashion-mnist-keras-cnn");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("REPLICAS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fashion-mnist-keras-cnn"), std::string::npos) << r.output;
}

TEST_F(KubectlTest, RbacAndControllerManifestsApply) {
  auto r = Kubectl("apply -f " + Manifest("manifests/rbac/") + " -f " +
                   Manifest("manifests/controller/"));
  ASSERT_EQ(r.rc, 0) << r.output;
  for (const char* line : {"clusterrole.rbac.authorization.k8s.io/ringtrain-controller created",
                           "clusterrolebinding.rbac.authorization.k8s.io/ringtrain-controller "
                           "created",
                           "serviceaccount/ringtrain-controller created",
                           "deployment.apps/ringtrain-controller created",
                           "service/ringtrain-controller-metrics created"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  auto deployment =
      server_->GetObject({"apps", "deployments"}, "ringtrain-system", "ringtrain-controller");
  ASSERT_TRUE(deployment.has_value());
  const auto& c = (*deployment)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(c["args"], nlohmann::json({"controller", "--leader-elect"}));
  EXPECT_EQ(c["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"], "/readyz");
  r = Kubectl(
      "get deployment -n ringtrain-system ringtrain-controller -o "
      "jsonpath={.spec.template.spec.serviceAccountName}");
  EXPECT_EQ(r.output, "ringtrain-controller");
}

TEST_F(KubectlTest, GetPodsWatchPrintsChanges) {
  auto r = Kubectl("run probe --image=busybox:1.36 --restart=Never");
  ASSERT_EQ(r.rc, 0) << r.output;
  r = Kubectl("get pods");
  EXPECT_NE(r.output.find("probe"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Pending"), std::string::npos) << r.output;
  // `kubectl get -w` ends when the server ends the watch. Ordered by state, not by sleeps: the
  // change is made once kubectl's watch is open, and the server's watch loop writes every logged
  // event before it honours a close, so the change always reaches kubectl before the end.
  std::thread closer([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (server_->OpenWatchCount() == 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(server_->OpenWatchCount(), 1u) << "kubectl never opened its watch";
    EXPECT_TRUE(
        server_->PatchStatus({"", "pods"}, "default", "probe", {{"phase", "Running"}}).ok());
    server_->CloseAllWatches();
  });
  r = Kubectl("get pods -w --request-timeout=10s");
  closer.join();
  EXPECT_NE(r.output.find("Running"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ringtrain::fake::testing
