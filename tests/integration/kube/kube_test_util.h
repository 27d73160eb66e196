// Shared by the kube client tests: a started fake API server, a client for it, and polling.
#pragma once

#include <spdlog/spdlog.h>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "controller/kube/kube_config.h"
#include "tests/integration/apiserver/fixtures.h"

namespace ringtrain::kube::testing {

using fake::testing::LoadManifest;

// Polls `done` every 20 ms until it holds or `timeout` passes; the bound is generous on purpose.
inline bool Eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

inline Json Pod(const std::string& name, const std::string& app = "demo") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", app}}}}},
          {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
}

class KubeTest : public fake::testing::FakeApiServerTest {
 protected:
  void SetUp() override {
    // spdlog's registry is built lazily inside the uninstrumented libspdlog: first created on a
    // test's background thread, ThreadSanitizer cannot see its guard (tests/unit/comm/gang.h).
    (void)spdlog::default_logger_raw();
    FakeApiServerTest::SetUp();
    client_ = NewClient();
  }

  std::unique_ptr<KubeClient> NewClient(ClientOptions options = {}) {
    KubeConfig config;
    config.server = server_->url();
    config.token = "test-token";
    options.request_timeout = std::chrono::seconds(5);
    auto c = NewKubeClient(config, options);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Creates the TrainingJob CRD from the repo's manifest and waits until it is served.
  void CreateCrd() {
    auto crd = client_->Create(kCustomResourceDefinitions, "",
                               LoadManifest("manifests/crd/trainingjobs.ringtrain.dev.yaml"));
    ASSERT_TRUE(crd.ok()) << crd.status().ToString();
    ASSERT_TRUE(Eventually([&] { return client_->List(kTrainingJobs, "default", {}).ok(); }));
  }

  std::unique_ptr<KubeClient> client_;
};

}  // namespace ringtrain::kube::testing
