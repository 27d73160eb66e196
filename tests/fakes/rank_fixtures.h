// What tests of one rank's wiring and training share: a rank's environment from a map (parsed as
// the runner parses its process environment) and a synthetic image dataset. Owns no sockets.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "common/runner_env.h"
#include "runner/data/idx.h"

namespace ringtrain::testing {

inline contract::RankEnv RankEnvOf(const std::map<std::string, std::string>& vars) {
  auto env = contract::ParseRankEnv([&vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
  EXPECT_TRUE(env.ok()) << env.status().ToString();
  return env.ok() ? *env : contract::RankEnv{};
}

// n random images of rows × cols with random labels in [0, 10), the same for the same seed.
inline data::Dataset SyntheticImages(std::size_t n, int rows, int cols, std::uint64_t seed) {
  data::Dataset ds;
  ds.count = n;
  ds.rows = rows;
  ds.cols = cols;
  ds.images_path = "/data/images";
  ds.labels_path = "/data/labels";
  std::mt19937_64 rng(seed);
  ds.images.resize(n * static_cast<std::size_t>(rows * cols));
  for (auto& p : ds.images) p = static_cast<std::uint8_t>(rng() % 256);
  ds.labels.resize(n);
  for (auto& l : ds.labels) l = static_cast<std::uint8_t>(rng() % 10);
  return ds;
}

}  // namespace ringtrain::testing
