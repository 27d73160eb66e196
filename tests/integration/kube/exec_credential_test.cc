// Exec credential plugins end to end: a shell script written by the test plays the plugin (it
// counts its runs in a file and records what it was given), the fake API server requires a
// bearer token, and the client is built from a kubeconfig as the controller builds it.
#include "controller/kube/exec_credential.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "controller/kube/kube_config.h"
#include "controller/kube/leader_election.h"
#include "controller/runtime/event_recorder.h"
#include "tests/fakes/fake_clock.h"
#include "tests/integration/kube/kube_test_util.h"

namespace ringtrain::kube {
namespace {

namespace fs = std::filesystem;

// "2030-01-01T00:00:00Z" as a wall time, for the fake clock.
WallTime At(const std::string& rfc3339) {
  std::tm tm{};
  EXPECT_NE(::strptime(rfc3339.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm), nullptr) << rfc3339;
  return WallTime(std::chrono::seconds(::timegm(&tm)));
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Passes every call through to `inner` and keeps what each returned, in order.
class RecordingClient final : public KubeClient {
 public:
  explicit RecordingClient(KubeClient* inner) : inner_(inner) {}

  std::vector<Status> Statuses() {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_;
  }

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    return Keep(inner_->Get(r, ns, name));
  }
  StatusOr<Json> List(const Resource& r, const std::string& ns,
                      const ListOptions& options) override {
    return Keep(inner_->List(r, ns, options));
  }
  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) override {
    return Keep(inner_->Create(r, ns, object));
  }
  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) override {
    return Keep(inner_->Update(r, ns, object));
  }
  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                              const Json& object) override {
    return Keep(inner_->UpdateStatus(r, ns, object));
  }
  StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                       const Json& patch, PatchType type, bool status) override {
    return Keep(inner_->Patch(r, ns, name, patch, type, status));
  }
  Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                const DeleteOptions& options) override {
    Status s = inner_->Delete(r, ns, name, options);
    std::lock_guard<std::mutex> lock(mu_);
    statuses_.push_back(s);
    return s;
  }
  StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                               const WatchOptions& options) override {
    return inner_->Watch(r, ns, options);
  }

 private:
  StatusOr<Json> Keep(StatusOr<Json> result) {
    std::lock_guard<std::mutex> lock(mu_);
    statuses_.push_back(result.status());
    return result;
  }

  KubeClient* inner_;
  std::mutex mu_;
  std::vector<Status> statuses_;
};

class ExecCredentialTest : public testing::KubeTest {
 protected:
  void SetUp() override {
    KubeTest::SetUp();
    dir_ = fs::temp_directory_path() /
           ("rt-exec-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    clock_.SetWall(At("2029-06-01T00:00:00Z"));
  }
  void TearDown() override {
    fs::remove_all(dir_);
    KubeTest::TearDown();
  }

  // An executable script in the test's folder; `body` runs under sh with $D the folder.
  std::string Script(const std::string& name, const std::string& body) {
    fs::path p = dir_ / name;
    std::ofstream(p) << "#!/bin/sh\nD='" << dir_.string() << "'\n" << body;
    ::chmod(p.c_str(), 0755);
    return p.string();
  }

  // A plugin printing the token in $D/token (v1 ExecCredential), counting its runs in $D/runs
  // and keeping its arguments, its FOO variable and KUBERNETES_EXEC_INFO.
  std::string TokenPlugin(const std::string& expiration = "") {
    std::string status = "\"token\":\"'\"$(cat \"$D/token\")\"'\"";
    if (!expiration.empty()) status += ",\"expirationTimestamp\":\"" + expiration + "\"";
    return Script("plugin.sh",
                  "echo run >> \"$D/runs\"\n"
                  "echo \"$@\" > \"$D/args\"\n"
                  "echo \"$FOO\" > \"$D/foo\"\n"
                  "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$D/info\"\n"
                  "[ -t 0 ] && echo tty > \"$D/stdin\"\n"
                  "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                  "\"kind\":\"ExecCredential\",\"status\":{" +
                      status + "}}'\n");
  }

  // A plugin printing the token in $D/token, counting its runs in $D/runs; once $D/hang exists
  // it touches $D/started and hangs instead (a login prompt nobody answers).
  std::string HangingPlugin() {
    return Script(
        "hanging.sh",
        "echo run >> \"$D/runs\"\n"
        "if [ -e \"$D/hang\" ]; then touch \"$D/started\"; exec sleep 600; fi\n"
        "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
        "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"'\"$(cat \"$D/token\")\"'\"}}'\n");
  }
  void HangFromNowOn() { std::ofstream(dir_ / "hang") << "1"; }
  bool PluginHangs() {
    return testing::Eventually([&] { return fs::exists(dir_ / "started"); });
  }

  void SetToken(const std::string& token) { std::ofstream(dir_ / "token") << token; }

  int Runs() {
    std::ifstream in(dir_ / "runs");
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }

  // The controller's path: a kubeconfig naming the plugin, loaded, then a client.
  std::unique_ptr<KubeClient> ClientWithPlugin(const std::string& command,
                                               const std::string& extra = "",
                                               ClientOptions options = {}) {
    std::ofstream(dir_ / "kubeconfig")
        << "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        << "clusters: [{name: k, cluster: {server: \"" << server_->url() << "\"}}]\n"
        << "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        << "users:\n- name: u\n  user:\n    exec:\n"
        << "      apiVersion: client.authentication.k8s.io/v1\n"
        << "      command: " << command << "\n"
        << "      args: [get-token, --cluster, k]\n"
        << "      env: [{name: FOO, value: bar}]\n"
        << "      interactiveMode: Never\n"
        << extra;
    auto config = LoadKubeconfig((dir_ / "kubeconfig").string());
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    if (!config.ok()) return nullptr;
    options.clock = &clock_;
    options.max_retries = 0;
    auto c = NewKubeClient(*config, options);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  fs::path dir_;
  ringtrain::testing::FakeClock clock_;
};

TEST_F(ExecCredentialTest, TokenFromThePluginIsUsedAndCachedUntilItExpires) {
  server_->RequireBearerTokens({"plugin-token-1"});
  SetToken("plugin-token-1");
  auto client = ClientWithPlugin(TokenPlugin("2030-01-01T00:00:00Z"));
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 3; ++i) {
    auto list = client->List(kPods, "default", {});
    ASSERT_TRUE(list.ok()) << list.status().ToString();
  }
  EXPECT_EQ(Runs(), 1);  // cached: three requests, one run
  EXPECT_EQ(Slurp(dir_ / "args"), "get-token --cluster k\n");
  EXPECT_EQ(Slurp(dir_ / "foo"), "bar\n");
  EXPECT_FALSE(fs::exists(dir_ / "stdin"));  // stdin is not a terminal
  auto info = nlohmann::json::parse(Slurp(dir_ / "info"), nullptr, false);
  EXPECT_EQ(info, nlohmann::json::parse(R"({"apiVersion":"client.authentication.k8s.io/v1",
      "kind":"ExecCredential","spec":{"interactive":false}})"));

  // Past expirationTimestamp the plugin runs again and its new token is sent.
  server_->RequireBearerTokens({"plugin-token-2"});
  SetToken("plugin-token-2");
  clock_.SetWall(At("2030-01-01T00:00:01Z"));
  auto list = client->List(kPods, "default", {});
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(Runs(), 2);
  EXPECT_EQ(server_->UnauthorizedCount(), 0);
}

TEST_F(ExecCredentialTest, A401RunsThePluginOnceAndSendsTheRequestAgain) {
  server_->RequireBearerTokens({"old"});
  SetToken("old");
  auto client = ClientWithPlugin(TokenPlugin());  // no expiration: valid until a 401
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->List(kPods, "default", {}).ok());
  EXPECT_EQ(Runs(), 1);

  // The server revoked "old"; the plugin now hands out "new". A write is safe to resend: a 401
  // is refused before anything is done.
  server_->RequireBearerTokens({"new"});
  SetToken("new");
  auto created = client->Create(kPods, "default", testing::Pod("p1"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(Runs(), 2);
  EXPECT_EQ(server_->UnauthorizedCount(), 1);
  EXPECT_EQ(server_->RequestCount("POST", "pods"), 2);

  // A watch refreshes the same way.
  server_->RequireBearerTokens({"newer"});
  SetToken("newer");
  auto watch = client->Watch(kPods, "default", {});
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  (*watch)->Close();
  EXPECT_EQ(Runs(), 3);

  // A plugin whose fresh token is refused too: one refresh, then the 401 is the answer.
  SetToken("still-wrong");
  server_->RequireBearerTokens({"something-else"});
  auto list = client->List(kPods, "default", {});
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(Runs(), 4);
}

TEST_F(ExecCredentialTest, NoCredentialIsAnonymousAndForbiddenAsTheRealServerSays) {
  server_->RequireBearerTokens({"x"});
  KubeConfig config;
  config.server = server_->url();
  auto c = NewKubeClient(config);
  ASSERT_TRUE(c.ok());
  auto list = (*c)->List(kTrainingJobs, "default", {});
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(list.status().message(),
            "trainingjobs is forbidden: User \"system:anonymous\" cannot list resource "
            "\"trainingjobs\" in API group \"ringtrain.dev\" in the namespace \"default\"");
}

TEST_F(ExecCredentialTest, AFailingPluginIsNamedWithItsStderr) {
  std::string plugin =
      Script("failing.sh", "echo 'token expired, run aws sso login' >&2\nexit 3\n");
  auto client = ClientWithPlugin(plugin);
  ASSERT_NE(client, nullptr);
  auto list = client->List(kPods, "default", {});
  ASSERT_FALSE(list.ok());
  const std::string& m = list.status().message();
  EXPECT_NE(m.find(plugin), std::string::npos) << m;
  EXPECT_NE(m.find("exit code 3"), std::string::npos) << m;
  EXPECT_NE(m.find("token expired, run aws sso login"), std::string::npos) << m;
  EXPECT_EQ(server_->RequestCount("", ""), 0);  // nothing was sent anonymously
}

TEST_F(ExecCredentialTest, BadOutputIsRefusedWithTheReason) {
  struct Case {
    std::string stdout_text;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"not json", "decoding stdout"},
      {"", "stdout was empty"},
      {R"({"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",
          "status":{"token":"t"}})",
       "plugin returned version"},
      {R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"})",
       "didn't return a status field"},
      {R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}})",
       "didn't return a token or cert/key pair"},
      {R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
          "status":{"clientCertificateData":"x"}})",
       "only certificate or key"},
      {R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
          "status":{"clientCertificateData":"x","clientKeyData":"y"}})",
       "failed parsing client key/certificate"},
      {R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
          "status":{"token":"t","expirationTimestamp":"tomorrow"}})",
       "expirationTimestamp"},
      {R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
          "status":{"token":7}})",
       "token is not a string"},
  };
  for (const auto& c : cases) {
    auto cred = ParseExecCredential(c.stdout_text, kExecApiV1, "/bin/plugin");
    ASSERT_FALSE(cred.ok()) << c.stdout_text;
    EXPECT_NE(cred.status().message().find(c.expected), std::string::npos)
        << c.stdout_text << " → " << cred.status().message();
    EXPECT_NE(cred.status().message().find("/bin/plugin"), std::string::npos);
  }
  auto ok = ParseExecCredential(
      R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
          "status":{"token":"t","expirationTimestamp":"2030-01-01T02:00:00+02:00"}})",
      kExecApiV1, "p");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->token, "t");
  clock_.SetWall(At("2030-01-01T00:00:00Z"));
  EXPECT_EQ(*ok->expiration, clock_.Now());

  // Years outside what system_clock holds are clamped, not overflowed (found by fuzzing).
  for (const char* when : {"9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"}) {
    auto far = ParseExecCredential(
        std::string(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
          "status":{"token":"t","expirationTimestamp":")") +
            when + "\"}}",
        kExecApiV1, "p");
    ASSERT_TRUE(far.ok()) << far.status().ToString();
    EXPECT_EQ(*far->expiration > clock_.Now(), when[0] == '9') << when;
  }
}

TEST_F(ExecCredentialTest, AMissingCommandShowsTheInstallHint) {
  auto client = ClientWithPlugin("aws-iam-authenticator-not-installed",
                                 "      installHint: brew install aws-iam-authenticator\n");
  ASSERT_NE(client, nullptr);
  auto list = client->List(kPods, "default", {});
  ASSERT_FALSE(list.ok());
  const std::string& m = list.status().message();
  EXPECT_NE(m.find("exec: executable aws-iam-authenticator-not-installed not found"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("brew install aws-iam-authenticator"), std::string::npos) << m;
}

TEST_F(ExecCredentialTest, AHungPluginTimesOutAndAStopRequestWakesIt) {
  ExecConfig config;
  config.command = Script("hang.sh",
                          "echo waiting for a browser login >&2\ntouch \"$D/started\"\n"
                          "exec sleep 600\n");
  config.api_version = kExecApiV1;
  config.interactive_mode = "Never";
  config.timeout = Duration(300);
  auto cred = RunExecPlugin(config);
  ASSERT_FALSE(cred.ok());
  EXPECT_EQ(cred.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(cred.status().message().find("waiting for a browser login"), std::string::npos)
      << cred.status().message();

  config.timeout = Duration(600'000);
  std::atomic<bool> stop{false};
  fs::remove(dir_ / "started");
  std::thread stopper([&] {
    // Once this run of the plugin has started (and hangs), not after a guessed delay.
    EXPECT_TRUE(testing::Eventually([&] { return fs::exists(dir_ / "started"); }));
    stop = true;
  });
  cred = RunExecPlugin(config, &stop);
  stopper.join();
  ASSERT_FALSE(cred.ok());
  EXPECT_EQ(cred.status().code(), StatusCode::kCancelled) << cred.status().ToString();
}

TEST_F(ExecCredentialTest, ProvideClusterInfoPassesTheClusterAndItsExtension) {
  std::string plugin = Script("info.sh",
                              "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$D/info\"\n"
                              "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\","
                              "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n");
  std::ofstream(dir_ / "kubeconfig")
      << "current-context: c\n"
      << "clusters:\n- name: k\n  cluster:\n    server: " << server_->url() << "\n"
      << "    extensions:\n    - name: client.authentication.k8s.io/exec\n"
      << "      extension: {audience: 06e3fbd18de8, scopes: [a, b]}\n"
      << "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
      << "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
      << "command: " << plugin << ", provideClusterInfo: true}}}]\n";
  auto config = LoadKubeconfig((dir_ / "kubeconfig").string());
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_TRUE(config->exec.has_value());
  EXPECT_EQ(config->exec->interactive_mode, "IfAvailable");  // v1beta1's default
  auto cred = RunExecPlugin(*config->exec);
  ASSERT_TRUE(cred.ok()) << cred.status().ToString();
  auto info = nlohmann::json::parse(Slurp(dir_ / "info"), nullptr, false);
  ASSERT_TRUE(info.is_object());
  EXPECT_EQ(info["apiVersion"], kExecApiV1beta1);
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_EQ(info["spec"]["cluster"]["server"], server_->url());
  EXPECT_EQ(info["spec"]["cluster"]["config"],
            nlohmann::json::parse(R"({"audience":"06e3fbd18de8","scopes":["a","b"]})"));
}

TEST_F(ExecCredentialTest, ARotatedTokenFileIsReadAgainAfterA401) {
  server_->RequireBearerTokens({"sa-1"});
  std::ofstream(dir_ / "sa-token") << "sa-1\n";
  std::ofstream(dir_ / "kubeconfig")
      << "current-context: c\n"
      << "clusters: [{name: k, cluster: {server: \"" << server_->url() << "\"}}]\n"
      << "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
      << "users: [{name: u, user: {tokenFile: sa-token}}]\n";
  auto config = LoadKubeconfig((dir_ / "kubeconfig").string());
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto c = NewKubeClient(*config);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->List(kPods, "default", {}).ok());
  // The kubelet rotated the projected token.
  server_->RequireBearerTokens({"sa-2"});
  std::ofstream(dir_ / "sa-token") << "sa-2\n";
  auto list = (*c)->List(kPods, "default", {});
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(server_->UnauthorizedCount(), 1);
}

// ClientOptions::exec_stop, the flag of a client whose last writes go out after the stop (the
// lease's release, the last Events): set, it kills the plugin but cancels no request.
TEST_F(ExecCredentialTest, ExecStopKillsThePluginButNotTheRequests) {
  server_->RequireBearerTokens({"t1"});
  SetToken("t1");
  std::atomic<bool> exec_stop{false};
  ClientOptions options;
  options.exec_stop = &exec_stop;
  auto client = ClientWithPlugin(HangingPlugin(), "", options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->List(kPods, "default", {}).ok());
  exec_stop = true;
  auto cached = client->List(kPods, "default", {});
  EXPECT_TRUE(cached.ok()) << "a request with the cached credential still goes out: "
                           << cached.status().ToString();
  EXPECT_EQ(Runs(), 1);

  // A client whose plugin hangs: set once the plugin runs, the flag kills it.
  exec_stop = false;
  HangFromNowOn();
  auto hung = ClientWithPlugin(HangingPlugin(), "", options);
  ASSERT_NE(hung, nullptr);
  std::thread stopper([&] {
    EXPECT_TRUE(PluginHangs());
    exec_stop = true;
  });
  auto list = hung->List(kPods, "default", {});
  stopper.join();
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kCancelled) << list.status().ToString();
  EXPECT_NE(list.status().message().find("stopped while the plugin was running"), std::string::npos)
      << list.status().message();
}

// The lease's client at shutdown: its renewal waits in a plugin that hangs (the server refused
// the cached token). Stop() gives the release its budget, then sets calls_abandoned, which kills
// the plugin: the stuck call ends kCancelled rather than at the plugin's 60 s timeout.
TEST_F(ExecCredentialTest, AStoppedElectorKillsTheLeaseClientsHungPlugin) {
  server_->RequireBearerTokens({"t1"});
  SetToken("t1");
  std::atomic<bool> abandoned{false};
  ClientOptions options;
  options.exec_stop = &abandoned;
  auto lease_client = ClientWithPlugin(HangingPlugin(), "", options);
  ASSERT_NE(lease_client, nullptr);
  RecordingClient recording(lease_client.get());
  LeaderElectionConfig config;
  config.lease_name = "ringtrain-test-leader";
  config.identity = "a";
  config.lease_duration = std::chrono::milliseconds(4000);
  config.renew_deadline = std::chrono::milliseconds(3000);
  config.retry_period = std::chrono::milliseconds(300);
  config.release_timeout = std::chrono::milliseconds(300);
  config.calls_abandoned = &abandoned;
  auto elector = LeaderElector::Create(&recording, config);
  ASSERT_TRUE(elector.ok()) << elector.status().ToString();
  (*elector)->Start();
  ASSERT_TRUE(testing::Eventually([&] { return (*elector)->IsLeader(); }));
  HangFromNowOn();
  server_->RequireBearerTokens({"t2"});
  ASSERT_TRUE(PluginHangs());
  EXPECT_FALSE(abandoned.load()) << "set only once the release has had its budget";
  (*elector)->Stop();
  EXPECT_TRUE(abandoned.load());
  const std::vector<Status> statuses = recording.Statuses();
  ASSERT_FALSE(statuses.empty());
  EXPECT_EQ(statuses.back().code(), StatusCode::kCancelled) << statuses.back().ToString();
  EXPECT_NE(statuses.back().message().find("stopped while the plugin was running"),
            std::string::npos)
      << statuses.back().ToString();
}

// The Events' client at shutdown: the write in flight waits in a plugin that hangs. Flush() gives
// the queue its budget, then sets writes_abandoned, which kills the plugin: the write ends
// kCancelled rather than at the plugin's 60 s timeout.
TEST_F(ExecCredentialTest, AFlushedEventRecorderKillsItsClientsHungPlugin) {
  server_->RequireBearerTokens({"t1"});
  SetToken("t1");
  HangFromNowOn();
  std::atomic<bool> abandoned{false};
  ClientOptions options;
  options.exec_stop = &abandoned;
  auto events_client = ClientWithPlugin(HangingPlugin(), "", options);
  ASSERT_NE(events_client, nullptr);
  RecordingClient recording(events_client.get());
  op::EventRecorder recorder(&recording, "ringtrain-controller", "test",
                             op::EventRecorder::kMaxQueued, &abandoned);
  recorder.Record(testing::Pod("p1"), "Normal", "Created", "Created pod p1");
  ASSERT_TRUE(PluginHangs());
  EXPECT_FALSE(abandoned.load()) << "set only once the flush has had its budget";
  recorder.Flush(std::chrono::milliseconds(100));
  EXPECT_TRUE(abandoned.load());
  const std::vector<Status> statuses = recording.Statuses();
  ASSERT_EQ(statuses.size(), 1u);
  EXPECT_EQ(statuses[0].code(), StatusCode::kCancelled) << statuses[0].ToString();
}

}  // namespace
}  // namespace ringtrain::kube
