// `ringtrain controller` start-up with the kubeconfigs users bring: a managed cluster's exec
// plugin gets the operator to ready against an API server that requires a token (issue 9 item 8:
// it used to run as system:anonymous with /readyz stuck at "informers not synced"); a broken
// kubeconfig or plugin ends start-up with exit 1, never an abort (issue 10 item 9). That a
// hung plugin wakes on a stop request is shown in exec_credential_test.cc.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>

#include "common/http.h"
#include "common/net.h"
#include "controller/controller_command.h"
#include "tests/integration/kube/kube_test_util.h"

namespace ringtrain::kube {
namespace {

namespace fs = std::filesystem;

class ControllerStartupTest : public testing::KubeTest {
 protected:
  void SetUp() override {
    KubeTest::SetUp();
    dir_ = fs::temp_directory_path() /
           ("rt-startup-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    KubeTest::TearDown();
  }

  std::string Write(const std::string& name, const std::string& text, bool executable = false) {
    std::ofstream(dir_ / name) << text;
    if (executable) ::chmod((dir_ / name).c_str(), 0755);
    return (dir_ / name).string();
  }

  std::string ExecKubeconfig(const std::string& command) {
    return Write("kubeconfig", "current-context: c\nclusters: [{name: k, cluster: {server: \"" +
                                   server_->url() +
                                   "\"}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
                                   "users: [{name: u, user: {exec: {apiVersion: "
                                   "client.authentication.k8s.io/v1, interactiveMode: Never, "
                                   "command: " +
                                   command + "}}}]\n");
  }

  // Runs the controller on `kubeconfig` with no HTTP servers until it exits or `stop` is set.
  std::future<int> Start(const std::string& kubeconfig, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--kubeconfig", kubeconfig, "--metrics-addr", ""};
    args.insert(args.end(), extra.begin(), extra.end());
    if (std::find(extra.begin(), extra.end(), "--health-addr") == extra.end()) {
      args.insert(args.end(), {"--health-addr", ""});
    }
    return std::async(std::launch::async,
                      [this, args] { return op::RunControllerCommand(args, &stop_); });
  }

  fs::path dir_;
  std::atomic<bool> stop_{false};
};

TEST_F(ControllerStartupTest, ExecPluginCredentialGetsTheOperatorReady) {
  server_->RequireBearerTokens({"test-token", "from-the-plugin"});  // test-token: client_
  CreateCrd();
  std::string plugin = Write("plugin.sh",
                             "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                             "\"kind\":\"ExecCredential\",\"status\":{\"token\":"
                             "\"from-the-plugin\"}}'\n",
                             true);
  auto listener = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  int port = *net::LocalPort(*listener);
  listener->Close();
  auto run = Start(ExecKubeconfig(plugin), {"--health-addr", "127.0.0.1:" + std::to_string(port)});
  EXPECT_TRUE(testing::Eventually([&] {
    auto r = http::Get("127.0.0.1", port, "/readyz", Duration(1000));
    return r.ok() && r->code == 200;
  })) << "the operator never became ready";
  EXPECT_EQ(server_->UnauthorizedCount(), 0);
  stop_ = true;
  EXPECT_EQ(run.get(), 0);
}

TEST_F(ControllerStartupTest, BrokenKubeconfigsEndStartUpWithAnError) {
  const std::string head = "current-context: c\nclusters: [{name: k, cluster: {server: \"" +
                           server_->url() +
                           "\"}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n";
  // Each used to abort the process (uncaught yaml-cpp exception) or run anonymously.
  for (const std::string& users : {std::string("users: [{name: u, user: alice}]\n"),
                                   std::string("users: [{name: u, user: {auth-provider: "
                                               "{name: gcp}}}]\n"),
                                   std::string("users: [{name: u, user: [1, 2]}]\n")}) {
    auto run = Start(Write("kubeconfig", head + users));
    EXPECT_EQ(run.get(), 1) << users;
  }
  auto run = Start(Write("garbage", std::string("\x01\x02\xff{[", 5)));
  EXPECT_EQ(run.get(), 1);
}

TEST_F(ControllerStartupTest, AFailingOrMissingPluginEndsStartUp) {
  auto run = Start(ExecKubeconfig(Write("fail.sh", "#!/bin/sh\nexit 1\n", true)));
  EXPECT_EQ(run.get(), 1);
  run = Start(ExecKubeconfig("no-such-credential-plugin"));
  EXPECT_EQ(run.get(), 1);
}

}  // namespace
}  // namespace ringtrain::kube
