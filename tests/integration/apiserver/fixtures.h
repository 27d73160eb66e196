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

inline nlohmann::json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& n : node) arr.push_back(YamlToJson(n));
      return arr;
    }
    case YAML::NodeType::Map: {
      nlohmann::json obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.Scalar()] = YamlToJson(kv.second);
      return obj;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return s;
      if (s == "true") return true;
      if (s == "false") return false;
      if (s == "null" || s == "~") return nullptr;
      auto parsed = nlohmann::json::parse(s, nullptr, false);
      if (!parsed.is_discarded() && parsed.is_number()) return parsed;
      return s;
    }
    default:
      return nullptr;
  }
}

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
