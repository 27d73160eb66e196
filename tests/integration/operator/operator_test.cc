// The operator end to end: the real kube client over HTTP against the fake API server, and a
// kubelet stand-in that runs every pod as a local process (real ringtrain-runner training
// Fashion-MNIST, or `sleep` where only the gang's shape matters). Waits are bounded polls;
// nothing asserts on durations.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "common/port_picker.h"
#include "controller/executors/kubernetes/operator.h"
#include "controller/kube/kube_config.h"
#include "tests/fakes/kubelet/fake_kubelet.h"
#include "tests/integration/apiserver/fixtures.h"

namespace ringtrain::op {
namespace {

using fake::ResourceId;
using kube::KubeClient;
using kube::Resource;

const ResourceId kPodsId{"", "pods"};
const ResourceId kJobsId{"ringtrain.dev", "trainingjobs"};

bool Eventually(const std::function<bool()>& done,
                std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// Forwards to a real client, counting writes by resource, and can "die": after
// `die_after_pod_creates` pod creates every call fails, as if the process were killed.
class RecordingClient final : public KubeClient {
 public:
  explicit RecordingClient(std::unique_ptr<KubeClient> inner) : inner_(std::move(inner)) {}

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& n) override {
    RETURN_IF_ERROR(Alive());
    return inner_->Get(r, ns, n);
  }
  StatusOr<Json> List(const Resource& r, const std::string& ns,
                      const kube::ListOptions& o) override {
    RETURN_IF_ERROR(Alive());
    return inner_->List(r, ns, o);
  }
  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& obj) override {
    RETURN_IF_ERROR(Write(r));
    const std::string name = obj["metadata"].value("name", "");
    if (r.plural == "pods" && name.ends_with("-1") && refuse_rank1_pods > 0) {
      --refuse_rank1_pods;
      // The real answer when a ResourceQuota lets rank 0 in and not rank 1
      // (tests/fakes/apiserver/transcripts/t3-04-resourcequota-partial-gang.txt).
      return Status(StatusCode::kPermissionDenied,
                    "pods \"" + name +
                        "\" is forbidden: exceeded quota: pods-1, requested: pods=1, used: "
                        "pods=1, limited: pods=1");
    }
    if (r.plural == "pods") {
      std::lock_guard<std::mutex> lock(mu_);
      pod_create_names_.push_back(name);
    }
    auto out = inner_->Create(r, ns, obj);
    if (r.plural == "pods" && out.ok()) ++pod_creates_;
    return out;
  }
  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& obj) override {
    RETURN_IF_ERROR(Write(r));
    return inner_->Update(r, ns, obj);
  }
  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns, const Json& o) override {
    RETURN_IF_ERROR(Write(r));
    return inner_->UpdateStatus(r, ns, o);
  }
  StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& n,
                       const Json& p, kube::PatchType t, bool status) override {
    RETURN_IF_ERROR(Write(r));
    return inner_->Patch(r, ns, n, p, t, status);
  }
  Status Delete(const Resource& r, const std::string& ns, const std::string& n,
                const kube::DeleteOptions& o) override {
    RETURN_IF_ERROR(Write(r));
    return inner_->Delete(r, ns, n, o);
  }
  StatusOr<std::unique_ptr<kube::WatchStream>> Watch(const Resource& r, const std::string& ns,
                                                     const kube::WatchOptions& o) override {
    RETURN_IF_ERROR(Alive());
    return inner_->Watch(r, ns, o);
  }

  // Writes other than to the leader Lease.
  int NonLeaseWrites() const { return non_lease_writes_; }
  // Pod creates asked for (answered or not) whose name starts with `prefix`.
  int PodCreatesOf(const std::string& prefix) const {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& name : pod_create_names_) n += name.starts_with(prefix) ? 1 : 0;
    return n;
  }
  std::atomic<int> die_after_pod_creates{-1};
  // The next this many creates of a rank-1 pod are refused by "quota".
  std::atomic<int> refuse_rank1_pods{0};

 private:
  Status Alive() const {
    int limit = die_after_pod_creates;
    if (limit >= 0 && pod_creates_ >= limit) return Unavailable("killed");
    return Status::Ok();
  }
  Status Write(const Resource& r) {
    RETURN_IF_ERROR(Alive());
    if (r.plural != "leases") ++non_lease_writes_;
    return Status::Ok();
  }

  std::unique_ptr<KubeClient> inner_;
  std::atomic<int> pod_creates_{0};
  mutable std::mutex mu_;
  std::vector<std::string> pod_create_names_;
  std::atomic<int> non_lease_writes_{0};
};

class OperatorTest : public fake::testing::FakeApiServerTest {
 protected:
  void SetUp() override {
    FakeApiServerTest::SetUp();
    workdir_ = std::filesystem::temp_directory_path() /
               ("ringtrain-operator-test-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(workdir_);
    std::filesystem::create_directories(workdir_);
    admin_ = NewClient("admin");
    auto crd = admin_->Create(
        kube::kCustomResourceDefinitions, "",
        fake::testing::LoadManifest("manifests/crd/trainingjobs.ringtrain.dev.yaml"));
    ASSERT_TRUE(crd.ok()) << crd.status().ToString();
    ASSERT_TRUE(Eventually([&] { return admin_->List(kube::kTrainingJobs, "default", {}).ok(); }));
    fake::FakeKubeletOptions kopts;
    kopts.runner_path = std::string(RINGTRAIN_BUILD_DIR) + "/bin/ringtrain-runner";
    kopts.workdir = workdir_.string();
    kubelet_ = std::make_unique<fake::FakeKubelet>(server_.get(), kopts);
    kubelet_->Start();
  }

  void TearDown() override {
    for (auto& op : ops_) op->Stop();
    kubelet_->Stop();
    ops_.clear();
    clients_.clear();
    FakeApiServerTest::TearDown();
    if (!HasFailure()) std::filesystem::remove_all(workdir_);
  }

  std::unique_ptr<KubeClient> NewClient(const std::string& who) {
    kube::KubeConfig config;
    config.server = server_->url();
    kube::ClientOptions options;
    options.request_timeout = std::chrono::seconds(5);
    options.qps = 1000;
    options.burst = 1000;
    options.user_agent = "ringtrain-test/" + who;
    auto c = kube::NewKubeClient(config, options);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(c).value();
  }

  // A controller in this process with its own client; `lease` turns on leader election.
  Operator* StartController(const std::string& identity, bool lease = false) {
    clients_.push_back(std::make_unique<RecordingClient>(NewClient(identity)));
    OperatorOptions options;
    options.workers = 2;
    options.watch_timeout_seconds = 30;
    options.reconciler.progress_interval = std::chrono::milliseconds(200);
    options.reconciler.expectations_timeout = std::chrono::seconds(10);
    options.leader_elect = lease;
    options.election.identity = identity;
    options.election.lease_namespace = "default";
    options.election.lease_duration = std::chrono::milliseconds(4000);
    options.election.renew_deadline = std::chrono::milliseconds(3000);
    options.election.retry_period = std::chrono::milliseconds(300);
    metrics_.push_back(std::make_unique<ControllerMetrics>());
    auto op = Operator::Create(clients_.back().get(), options, metrics_.back().get());
    EXPECT_TRUE(op.ok()) << op.status().ToString();
    ops_.push_back(std::move(*op));
    ops_.back()->Start();
    return ops_.back().get();
  }

  // A 2-replica Fashion-MNIST MLP, 1 epoch, checkpoints in the work dir.
  Json TrainingJob(const std::string& name, int replicas = 2) {
    return {{"apiVersion", "ringtrain.dev/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", name}, {"namespace", "default"}}},
            {"spec",
             {{"replicas", replicas},
              {"train",
               {{"model", "mlp"},
                {"dataset", "/usr/share/datasets/fashion-mnist"},
                {"epochs", 1},
                {"batchSizePerReplica", 64}}},
              {"checkpoint", {{"path", (workdir_ / name).string()}, {"everySteps", 100}}},
              {"runPolicy", {{"backoffLimit", 2}}}}}};
  }

  // Pods that only sleep: the gang's shape without training.
  Json SleepJob(const std::string& name, int replicas) {
    Json j = TrainingJob(name, replicas);
    j["spec"]["command"] = {"/bin/sleep", "600"};
    return j;
  }

  Json Create(const Json& job) {
    auto r = admin_->Create(kube::kTrainingJobs, "default", job);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }

  Json Status(const std::string& name) {
    auto j = server_->GetObject(kJobsId, "default", name);
    return j ? j->value("status", Json::object()) : Json::object();
  }

  bool WaitPhase(const std::string& name, const std::string& phase,
                 std::chrono::seconds timeout = std::chrono::seconds(90)) {
    bool ok = Eventually([&] { return Status(name).value("phase", "") == phase; }, timeout);
    if (!ok) ADD_FAILURE() << name << " never reached " << phase << ": " << Status(name).dump();
    return ok;
  }

  std::vector<Json> Pods(const std::string& job) {
    return server_->ListObjects(kPodsId, "default", "ringtrain.dev/job=" + job);
  }

  // The invariant under faults: exactly `replicas` live pods, all of one attempt, none twice.
  ::testing::AssertionResult ExactGang(const std::string& job, int replicas) {
    auto pods = Pods(job);
    std::set<std::string> names, attempts;
    for (const auto& p : pods) {
      if (p["metadata"].contains("deletionTimestamp")) continue;
      names.insert(p["metadata"]["name"].get<std::string>());
      attempts.insert(p["metadata"]["labels"]["ringtrain.dev/attempt"].get<std::string>());
    }
    if (static_cast<int>(names.size()) != replicas || attempts.size() != 1) {
      std::string s;
      for (const auto& n : names) s += n + " ";
      return ::testing::AssertionFailure() << "pods of " << job << ": " << s;
    }
    return ::testing::AssertionSuccess();
  }

  std::filesystem::path workdir_;
  std::unique_ptr<KubeClient> admin_;
  std::unique_ptr<fake::FakeKubelet> kubelet_;
  std::vector<std::unique_ptr<RecordingClient>> clients_;
  std::vector<std::unique_ptr<ControllerMetrics>> metrics_;
  std::vector<std::unique_ptr<Operator>> ops_;
};

TEST_F(OperatorTest, TwoReplicaFashionMnistSucceedsWithTruthfulStatus) {
  StartController("c1");
  Create(TrainingJob("mnist"));
  ASSERT_TRUE(WaitPhase("mnist", "Succeeded", std::chrono::seconds(300)));
  Json st = Status("mnist");
  EXPECT_EQ(st["replicas"]["succeeded"], 2) << st.dump();
  EXPECT_EQ(st["restarts"], 0);
  EXPECT_FALSE(st.value("completionTime", "").empty());
  EXPECT_FALSE(st.value("startTime", "").empty());
  ASSERT_TRUE(st.contains("progress")) << st.dump();
  EXPECT_GT(st["progress"]["step"].get<int>(), 0);
  // The final model's test accuracy, from rank 0's termination message (1 epoch: about 0.85).
  ASSERT_TRUE(st["progress"].contains("testAccuracy")) << st.dump();
  const double accuracy = st["progress"]["testAccuracy"].get<double>();
  EXPECT_GT(accuracy, 0.7) << st.dump();
  EXPECT_LE(accuracy, 1.0);
  EXPECT_EQ(kubelet_->Started(), (std::set<std::string>{"mnist-a0-0", "mnist-a0-1"}));
  // The rendezvous plumbing the pods got.
  auto svc = server_->GetObject({"", "services"}, "default", "mnist");
  ASSERT_TRUE(svc.has_value());
  EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
  EXPECT_TRUE(server_->GetObject({"", "secrets"}, "default", "mnist-token").has_value());
  auto pod = server_->GetObject(kPodsId, "default", "mnist-a0-1");
  ASSERT_TRUE(pod.has_value());
  EXPECT_EQ((*pod)["spec"]["subdomain"], "mnist");
  // Events on the transitions reached the API.
  EXPECT_TRUE(Eventually([&] {
    for (const auto& e : server_->ListObjects({"", "events"}, "default")) {
      if (e.value("reason", "") == "Succeeded") return true;
    }
    return false;
  }));
  std::string text = metrics_[0]->RenderText();
  EXPECT_NE(text.find("ringtrain_controller_pods_created_total 2"), std::string::npos) << text;
  EXPECT_NE(text.find("ringtrain_controller_jobs{phase=\"Succeeded\"} 1"), std::string::npos);
  // The job's own series, its final figures included, while the TrainingJob exists.
  EXPECT_NE(text.find(R"(ringtrain_controller_job_phase{job="mnist",namespace="default",)"
                      R"(phase="Succeeded"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(ringtrain_controller_job_step{job="mnist",namespace="default"} )" +
                      std::to_string(st["progress"]["step"].get<int>())),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(ringtrain_controller_job_test_accuracy_ratio{job="mnist",)"),
            std::string::npos)
      << text;
  ASSERT_TRUE(admin_->Delete(kube::kTrainingJobs, "default", "mnist", {}).ok());
  EXPECT_TRUE(Eventually([&] {
    return metrics_[0]->RenderText().find(R"(job="mnist")") == std::string::npos;
  })) << metrics_[0]->RenderText();
}

// The flake this once was: the kubelet found the rendezvous port by binding port 0 and letting
// go, and the kernel handed that same port to the next bind(0), for rank 1's metrics port.
// Rank 1's metrics server took it first; rank 0 failed twice with "port ... is already in use"
// and rank 1, connecting to its own metrics server, with "handshake: recv: connection closed
// by peer", past backoffLimit. Here the kernel is scripted to repeat itself that way.
TEST_F(OperatorTest, RendezvousPortTheKernelHandsOutAgainGoesToNoMetricsServer) {
  auto first = net::PortPicker::BindAndRelease();
  auto second = net::PortPicker::BindAndRelease();
  ASSERT_TRUE(first.ok() && second.ok());
  kubelet_->Stop();
  fake::FakeKubeletOptions kopts;
  kopts.runner_path = std::string(RINGTRAIN_BUILD_DIR) + "/bin/ringtrain-runner";
  kopts.workdir = workdir_.string();
  // The rendezvous port, rank 0's metrics port, then the rendezvous port again for rank 1's.
  kopts.port_probe = [script =
                          std::deque<int>{*first, *second, *first}]() mutable -> StatusOr<int> {
    if (script.empty()) return net::PortPicker::BindAndRelease();
    const int port = script.front();
    script.pop_front();
    return port;
  };
  kubelet_ = std::make_unique<fake::FakeKubelet>(server_.get(), kopts);
  kubelet_->Start();
  StartController("c1");
  Create(TrainingJob("repeat"));
  ASSERT_TRUE(WaitPhase("repeat", "Succeeded", std::chrono::seconds(300)));
  Json st = Status("repeat");
  EXPECT_EQ(st["restarts"], 0) << st.dump();
  EXPECT_EQ(kubelet_->Started(), (std::set<std::string>{"repeat-a0-0", "repeat-a0-1"}));
}

TEST_F(OperatorTest, KilledRankRestartsTheGangWhichThenSucceeds) {
  StartController("c1");
  Json job = TrainingJob("kill");
  job["spec"]["runPolicy"]["recovery"] = "GangRestart";
  Create(job);
  ASSERT_TRUE(WaitPhase("kill", "Running"));
  ASSERT_TRUE(Eventually([&] { return kubelet_->Signal("default", "kill-a0-1", SIGKILL); }));
  ASSERT_TRUE(WaitPhase("kill", "Succeeded", std::chrono::seconds(300)));
  Json st = Status("kill");
  EXPECT_EQ(st["restarts"], 1) << st.dump();
  EXPECT_EQ(st["attempt"], 1);
  EXPECT_EQ(st["lastFailure"]["rank"], 1);
  EXPECT_EQ(st["lastFailure"]["exitCode"], 137);
  auto started = kubelet_->Started();
  EXPECT_TRUE(started.count("kill-a1-0") && started.count("kill-a1-1"));
  EXPECT_EQ(started.size(), 4u);
  EXPECT_NE(metrics_[0]->RenderText().find("ringtrain_controller_gang_restarts_total 1"),
            std::string::npos);
}

// The default, runPolicy.recovery InPlace, with real runners: the killed rank alone comes back
// (same name, same attempt), the survivor keeps its pod and its state, and the job succeeds.
TEST_F(OperatorTest, KilledRankIsReplacedInPlaceWhichThenSucceeds) {
  StartController("c1");
  Create(TrainingJob("heal"));
  ASSERT_TRUE(WaitPhase("heal", "Running"));
  auto before = server_->GetObject(kPodsId, "default", "heal-a0-0");
  ASSERT_TRUE(before.has_value());
  ASSERT_TRUE(Eventually([&] { return kubelet_->Signal("default", "heal-a0-1", SIGKILL); }));
  ASSERT_TRUE(WaitPhase("heal", "Succeeded", std::chrono::seconds(300)));
  Json st = Status("heal");
  EXPECT_EQ(st["attempt"], 0) << st.dump();
  EXPECT_EQ(st["inPlaceRecoveries"], 1) << st.dump();
  EXPECT_EQ(st["restarts"], 1) << "a crash counts against backoffLimit";
  EXPECT_EQ(st["lastFailure"]["rank"], 1);
  EXPECT_EQ(st["lastFailure"]["exitCode"], 137);
  EXPECT_EQ(kubelet_->Started(), (std::set<std::string>{"heal-a0-0", "heal-a0-1"}));
  auto after = server_->GetObject(kPodsId, "default", "heal-a0-0");
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ((*after)["metadata"]["uid"], (*before)["metadata"]["uid"]) << "the survivor stayed";
}

TEST_F(OperatorTest, ZeroReplicasIsRejectedByTheSchema) {
  Json job = TrainingJob("zero");
  job["spec"]["replicas"] = 0;
  auto r = admin_->Create(kube::kTrainingJobs, "default", job);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("spec.replicas"), std::string::npos);
}

TEST_F(OperatorTest, SpecThePlannerRejectsFailsWithTheReason) {
  StartController("c1");
  Json job = TrainingJob("nccl");
  job["spec"]["backend"] = "nccl";  // nccl needs GPUs
  // The CRD's CEL rule refuses it at the API server...
  auto refused = admin_->Create(kube::kTrainingJobs, "default", job);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(
      refused.status().message().find("spec.backend nccl needs spec.gpusPerReplica of at least 1"),
      std::string::npos)
      << refused.status().ToString();
  // ...and the operator's own check is the second line: a cluster with an older CRD (without
  // the rule) admits it, and the operator fails it with the reason.
  auto crd = admin_->Get(kube::kCustomResourceDefinitions, "", "trainingjobs.ringtrain.dev");
  ASSERT_TRUE(crd.ok()) << crd.status().ToString();
  (*crd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].erase(
      "x-kubernetes-validations");
  ASSERT_TRUE(admin_->Update(kube::kCustomResourceDefinitions, "", *crd).ok());
  Create(job);
  ASSERT_TRUE(WaitPhase("nccl", "Failed"));
  Json st = Status("nccl");
  bool found = false;
  for (const auto& c : st["conditions"]) {
    if (c["type"] == "Failed") {
      found = true;
      EXPECT_EQ(c["reason"], "InvalidSpec");
      EXPECT_NE(c["message"].get<std::string>().find("spec.backend"), std::string::npos);
    }
  }
  EXPECT_TRUE(found) << st.dump();
  EXPECT_TRUE(Pods("nccl").empty());
}

// Issue 21: a layer list and a dataset object pass the CRD whole (no key pruned), and a list
// that does not fit the dataset's declared shape fails the job naming the layer, no pod created.
TEST_F(OperatorTest, LayerListThatDoesNotFitTheDatasetFailsWithoutAPod) {
  StartController("c1");
  const Json dataset = {{"format", "idx"},
                        {"train", "/usr/share/datasets/fashion-mnist"},
                        {"inputShape", {1, 28, 28}},
                        {"classes", 10}};
  auto list = [](int units) {
    return Json{{"layers",
                 {{{"conv2d", {{"filters", 4}, {"kernel", 3}, {"padding", "same"}}}},
                  "relu",
                  {{"max_pool2d", {{"pool", 2}}}},
                  "flatten",
                  {{"dropout", {{"rate", 0.25}}}},
                  {{"dense", {{"units", units}}}},
                  "softmax"}},
                {"loss", "softmax_cross_entropy"}};
  };
  // A list that fits (its input from the dataset's inputShape): the gang is created. The pods
  // only sleep: this is about the spec, not the training.
  Json fits = SleepJob("fits", 2);
  fits["spec"]["train"]["model"] = list(10);
  fits["spec"]["train"]["dataset"] = dataset;
  Json created = Create(fits);
  EXPECT_EQ(created["spec"]["train"]["model"], list(10)) << created.dump();
  EXPECT_EQ(created["spec"]["train"]["dataset"], dataset) << created.dump();
  ASSERT_TRUE(WaitPhase("fits", "Running"));
  EXPECT_TRUE(ExactGang("fits", 2));

  Json bad = TrainingJob("misfit");
  bad["spec"]["train"]["model"] = list(12);  // 12 outputs for 10 classes
  bad["spec"]["train"]["dataset"] = dataset;
  Create(bad);
  ASSERT_TRUE(WaitPhase("misfit", "Failed"));
  Json st = Status("misfit");
  bool found = false;
  for (const auto& c : st["conditions"]) {
    if (c["type"] != "Failed") continue;
    found = true;
    EXPECT_EQ(c["reason"], "InvalidSpec");
    EXPECT_NE(c["message"].get<std::string>().find(
                  "spec.train.model.layers[5] dense: output 12 units but the dataset has 10 "
                  "classes"),
              std::string::npos)
        << c.dump();
  }
  EXPECT_TRUE(found) << st.dump();
  EXPECT_EQ(clients_.front()->PodCreatesOf("misfit-"), 0);
  EXPECT_TRUE(Pods("misfit").empty());
}

TEST_F(OperatorTest, SuspendDeletesThePodsAndResumeRecreatesThem) {
  StartController("c1");
  Create(SleepJob("nap", 2));
  ASSERT_TRUE(WaitPhase("nap", "Running"));
  ASSERT_TRUE(admin_
                  ->Patch(kube::kTrainingJobs, "default", "nap",
                          {{"spec", {{"runPolicy", {{"suspend", true}}}}}}, kube::PatchType::kMerge)
                  .ok());
  ASSERT_TRUE(WaitPhase("nap", "Suspended"));
  EXPECT_TRUE(Eventually([&] { return Pods("nap").empty(); }));
  // No pod runs: PODS (PodsReady's reason) says so, not AllPodsRunning.
  bool ready_false = false;
  for (const auto& c : Status("nap").value("conditions", Json::array())) {
    if (c.value("type", "") != "PodsReady") continue;
    ready_false = c.value("status", "") == "False" && c.value("reason", "") == "Suspended";
  }
  EXPECT_TRUE(ready_false) << Status("nap").dump();
  // The resume starts a new gang: its cost is accounted from the resume.
  ASSERT_TRUE(admin_
                  ->Patch(kube::kTrainingJobs, "default", "nap",
                          {{"spec", {{"runPolicy", {{"suspend", false}}}}}},
                          kube::PatchType::kMerge)
                  .ok());
  ASSERT_TRUE(WaitPhase("nap", "Running"));
  EXPECT_TRUE(ExactGang("nap", 2));
  EXPECT_EQ(Status("nap")["restarts"], 0);
  const Json recovery = Status("nap").value("recovery", Json::object());
  EXPECT_TRUE(recovery.contains("pendingRestart") || recovery.value("gangRestarts", 0) == 1)
      << recovery.dump();
  EXPECT_TRUE(server_->GetObject(kPodsId, "default", "nap-a1-0").has_value());
}

TEST_F(OperatorTest, DeletedPodRestartsTheWholeGang) {
  StartController("c1");
  Create(SleepJob("del", 3));
  ASSERT_TRUE(WaitPhase("del", "Running"));
  ASSERT_TRUE(admin_->Delete(kube::kPods, "default", "del-a0-2").ok());
  ASSERT_TRUE(Eventually([&] { return Status("del").value("attempt", 0) == 1; }));
  ASSERT_TRUE(WaitPhase("del", "Running"));
  EXPECT_TRUE(ExactGang("del", 3));
  EXPECT_EQ(Status("del")["lastFailure"]["reason"], "Deleted");
  EXPECT_EQ(Status("del")["restarts"], 0) << "deleted by someone: not counted against backoffLimit";
  EXPECT_TRUE(server_->GetObject(kPodsId, "default", "del-a1-2").has_value());
}

// Issue 9 item 7: a resize is a new attempt of the whole gang at the new world, uncounted; a
// pod of one world never runs beside ranks of another.
TEST_F(OperatorTest, ResizeRestartsTheGangAtTheNewWorld) {
  StartController("c1");
  Create(SleepJob("resize", 2));
  ASSERT_TRUE(WaitPhase("resize", "Running"));
  auto resize = [&](int replicas) {
    for (int i = 0; i < 10; ++i) {  // a status write may race ours: retry on conflict
      auto job = admin_->Get(kube::kTrainingJobs, "default", "resize");
      ASSERT_TRUE(job.ok());
      Json obj = *job;
      obj["spec"]["replicas"] = replicas;
      if (admin_->Update(kube::kTrainingJobs, "default", obj).ok()) return;
    }
    FAIL() << "could not update spec.replicas";
  };
  auto world_sizes = [&](const std::string& attempt) {
    std::set<std::string> worlds;
    for (const auto& p : Pods("resize")) {
      if (p["metadata"]["labels"]["ringtrain.dev/attempt"] != attempt) continue;
      for (const auto& e : p["spec"]["containers"][0]["env"]) {
        if (e["name"] == "WORLD_SIZE") worlds.insert(e["value"].get<std::string>());
      }
    }
    return worlds;
  };
  resize(3);
  ASSERT_TRUE(Eventually([&] { return Status("resize").value("attempt", 0) == 1; }));
  ASSERT_TRUE(WaitPhase("resize", "Running"));
  EXPECT_TRUE(ExactGang("resize", 3));
  EXPECT_EQ(world_sizes("1"), (std::set<std::string>{"3"}));
  EXPECT_EQ(Status("resize")["restarts"], 0);
  EXPECT_EQ(kubelet_->Started().count("resize-a0-2"), 0u) << "a WORLD_SIZE=3 pod beside 2";
  resize(1);
  ASSERT_TRUE(Eventually([&] { return Status("resize").value("attempt", 0) == 2; }));
  ASSERT_TRUE(WaitPhase("resize", "Running"));
  EXPECT_TRUE(ExactGang("resize", 1));
  EXPECT_EQ(world_sizes("2"), (std::set<std::string>{"1"}));
  EXPECT_EQ(Status("resize")["restarts"], 0);
}

// Issue 9 item 5: quota lets 1 of 2 pods in; the job says so, lets go of the one pod, and the
// whole gang starts once the quota allows it.
TEST_F(OperatorTest, PartialGangIsReleasedAndShownUntilTheQuotaAllowsIt) {
  StartController("c1");
  clients_[0]->refuse_rank1_pods = 2;
  Create(SleepJob("quota-job", 2));
  const std::string quota =
      "pods \"quota-job-a0-1\" is forbidden: exceeded quota: pods-1, requested: pods=1, used: "
      "pods=1, limited: pods=1";
  ASSERT_TRUE(Eventually([&] {
    for (const auto& c : Status("quota-job").value("conditions", Json::array())) {
      if (c.value("type", "") == "ReplicaFailure" && c.value("message", "") == quota) return true;
    }
    return false;
  }));
  ASSERT_TRUE(WaitPhase("quota-job", "Running", std::chrono::seconds(60)));
  EXPECT_TRUE(ExactGang("quota-job", 2));
  Json st = Status("quota-job");
  EXPECT_EQ(st["attempt"], 0);
  EXPECT_EQ(st["restarts"], 0);
  for (const auto& c : st["conditions"]) {
    if (c["type"] == "ReplicaFailure") {
      EXPECT_EQ(c["status"], "False") << st.dump();
    }
  }
  // One Warning, counted, with the API's words.
  EXPECT_TRUE(Eventually([&] {
    int events = 0;
    int count = 0;
    for (const auto& e : server_->ListObjects({"", "events"}, "default")) {
      if (e.value("reason", "") != "FailedCreate") continue;
      ++events;
      count = e.value("count", 0);
      if (e.value("message", "") != "Error creating: " + quota) return false;
      if (e.value("type", "") != "Warning") return false;
    }
    return events == 1 && count == 2;
  }));
}

TEST_F(OperatorTest, WatchCutsAndApiServerRestartsLoseNoPodAndDuplicateNone) {
  StartController("c1");
  Create(SleepJob("cut", 3));
  ASSERT_TRUE(WaitPhase("cut", "Running"));
  for (int round = 0; round < 3; ++round) {
    server_->CloseAllWatches();
    EXPECT_TRUE(ExactGang("cut", 3));
    ASSERT_TRUE(server_->Restart(/*keep_state=*/true).ok());
    EXPECT_TRUE(ExactGang("cut", 3));
    server_->ForceCompaction();
    server_->CloseAllWatches();
    // A job created while the watches are down still gets exactly its gang.
    const std::string late = "cut" + std::to_string(round);
    Create(SleepJob(late, 2));
    // Until the operator has caught up (the new job's gang exists, not a guessed delay), the
    // running job keeps exactly its gang.
    ASSERT_TRUE(Eventually([&] {
      EXPECT_TRUE(ExactGang("cut", 3));
      return static_cast<bool>(ExactGang(late, 2));
    }));
  }
  for (int round = 0; round < 3; ++round) {
    const std::string name = "cut" + std::to_string(round);
    ASSERT_TRUE(WaitPhase(name, "Running"));
    EXPECT_TRUE(ExactGang(name, 2));
  }
  EXPECT_TRUE(ExactGang("cut", 3));
  EXPECT_EQ(Status("cut")["attempt"], 0);
  EXPECT_EQ(kubelet_->Started().size(), 3u + 3 * 2);
}

TEST_F(OperatorTest, ControllerKilledMidReconcileLeavesExactlyTheGang) {
  StartController("c1");
  clients_[0]->die_after_pod_creates = 2;
  Create(SleepJob("crash", 5));
  ASSERT_TRUE(Eventually([&] { return Pods("crash").size() == 2; }));
  ops_[0]->Stop();
  EXPECT_EQ(Pods("crash").size(), 2u);
  StartController("c2");
  ASSERT_TRUE(WaitPhase("crash", "Running"));
  EXPECT_TRUE(ExactGang("crash", 5));
  EXPECT_EQ(Status("crash")["restarts"], 0);
  EXPECT_EQ(kubelet_->Started().size(), 5u);
}

TEST_F(OperatorTest, OfTwoControllersOnlyTheLeaderWrites) {
  Operator* a = StartController("a", /*lease=*/true);
  Operator* b = StartController("b", /*lease=*/true);
  ASSERT_TRUE(Eventually([&] { return a->IsLeader() || b->IsLeader(); }));
  ASSERT_TRUE(Eventually([&] { return a->Ready() && b->Ready(); }));
  const int leader = a->IsLeader() ? 0 : 1;
  const int follower = 1 - leader;
  EXPECT_FALSE(ops_[follower]->IsLeader());
  Create(SleepJob("lead", 2));
  ASSERT_TRUE(WaitPhase("lead", "Running"));
  EXPECT_TRUE(ExactGang("lead", 2));
  EXPECT_GT(clients_[leader]->NonLeaseWrites(), 0);
  EXPECT_EQ(clients_[follower]->NonLeaseWrites(), 0);

  // The leader steps down (releasing the lease); the other takes over and runs new jobs.
  ops_[leader]->Stop();
  ASSERT_TRUE(Eventually([&] { return ops_[follower]->IsLeader(); }));
  Create(SleepJob("next", 2));
  ASSERT_TRUE(WaitPhase("next", "Running"));
  EXPECT_TRUE(ExactGang("next", 2));
  EXPECT_TRUE(ExactGang("lead", 2));
  EXPECT_GT(clients_[follower]->NonLeaseWrites(), 0);
  EXPECT_EQ(kubelet_->Started().size(), 4u);
}

}  // namespace
}  // namespace ringtrain::op
