// Shared by the API-server tests: the repo's manifests as JSON, and a started fake server.
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/fakes/apiserver/fake_apiserver.h"

namespace ringtrain::fake::testing {

// The tree these tests were built from (ringtrain_test defines it).
inline std::string SourceDir() { return RINGTRAIN_SOURCE_DIR; }

// The first document of a manifest under the source tree, as JSON.
inline nlohmann::json LoadManifest(const std::string& relative_path) {
  return YamlToJson(YAML::LoadFile(SourceDir() + "/" + relative_path));
}

class FakeApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServerOptions options;
    options.bookmark_interval = std::chrono::milliseconds(500);
    server_ = FakeApiServer::Create(options);
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override { server_->Stop(); }

  std::unique_ptr<FakeApiServer> server_;
};

}  // namespace ringtrain::fake::testing
