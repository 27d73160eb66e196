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
#include "runner/data/table.h"

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

// n samples of `features` standard-normal floats with a learnable task: classification labels
// the argmax over `classes` fixed random projections, or (classes = 0) one regression target, a
// fixed projection plus a little noise. The same for the same seed.
inline data::Table SyntheticTable(std::size_t n, std::size_t features, int classes,
                                  std::uint64_t seed) {
  data::Table t;
  t.n = n;
  t.features = features;
  t.shape = {features};
  t.path = "/data/synthetic.csv";
  t.labels_path = t.path;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  // The projections depend on the shape only, so two tables of one shape share the task.
  std::mt19937_64 task_rng(features * 1000 + static_cast<std::size_t>(classes));
  const std::size_t outputs = classes > 0 ? static_cast<std::size_t>(classes) : 1;
  std::vector<float> w(outputs * features);
  for (auto& v : w) v = normal(task_rng);
  t.x.resize(n * features);
  for (auto& v : t.x) v = normal(rng);
  if (classes > 0) {
    t.task.kind = data::Task::Kind::kClassification;
    t.task.classes = classes;
  } else {
    t.task.kind = data::Task::Kind::kRegression;
    t.task.targets = 1;
  }
  for (std::size_t i = 0; i < n; ++i) {
    int best = 0;
    float best_score = 0;
    for (std::size_t k = 0; k < outputs; ++k) {
      float score = 0;
      for (std::size_t f = 0; f < features; ++f)
        score += w[k * features + f] * t.x[i * features + f];
      if (k == 0 || score > best_score) {
        best = static_cast<int>(k);
        best_score = score;
      }
    }
    if (classes > 0) {
      t.labels.push_back(best);
    } else {
      t.targets.push_back(best_score / static_cast<float>(features) + 0.01f * normal(rng));
    }
  }
  return t;
}

}  // namespace ringtrain::testing
