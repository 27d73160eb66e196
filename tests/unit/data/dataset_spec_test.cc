// The --dataset-spec / spec.train.dataset contract: every format's keys, errors naming the field,
// canonical JSON that round-trips, and hostile input that is refused without crashing.
#include "runner/data/dataset_spec.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace ringtrain::data {
namespace {

DatasetSpec Parse(const std::string& json) {
  auto s = ParseDatasetSpec(json);
  EXPECT_TRUE(s.ok()) << json << ": " << s.status().ToString();
  return s.ok() ? *s : DatasetSpec{};
}

TEST(DatasetSpec, IdxIsADirectory) {
  const DatasetSpec s = Parse(R"({"format": "idx", "train": "/data/fmnist"})");
  EXPECT_EQ(s, IdxDatasetSpec("/data/fmnist"));
  EXPECT_EQ(s.format, DatasetFormat::kIdx);
  const DatasetSpec c = Parse(R"({"format": "idx", "train": "/d", "classes": 10,
                                  "inputShape": [1, 28, 28]})");
  EXPECT_EQ(c.classes, 10);
  EXPECT_EQ(c.input_shape, (std::vector<int>{1, 28, 28}));
}

TEST(DatasetSpec, CsvDefaultsAndEveryKey) {
  const DatasetSpec d = Parse(R"({"format": "csv", "train": "a.csv", "test": "b.csv"})");
  EXPECT_EQ(d.format, DatasetFormat::kCsv);
  EXPECT_EQ(d.train, "a.csv");
  EXPECT_EQ(d.test, "b.csv");
  EXPECT_EQ(d.header, CsvHeader::kAuto);
  EXPECT_EQ(d.delimiter, 0);
  EXPECT_EQ(d.label_index, -1);
  EXPECT_TRUE(d.label_name.empty());
  EXPECT_EQ(d.task, Task::Kind::kClassification);
  EXPECT_EQ(d.classes, 0);
  EXPECT_TRUE(d.standardize);
  EXPECT_EQ(d.test_fraction, 0);

  const DatasetSpec s = Parse(R"({"format": "csv", "train": "wine.csv", "header": "sklearn",
      "delimiter": ";", "label": "target", "classes": 3, "standardize": false,
      "testFraction": 0.25, "inputShape": [13]})");
  EXPECT_EQ(s.header, CsvHeader::kSklearnCounts);
  EXPECT_EQ(s.delimiter, ';');
  EXPECT_EQ(s.label_name, "target");
  EXPECT_EQ(s.classes, 3);
  EXPECT_FALSE(s.standardize);
  EXPECT_EQ(s.test_fraction, 0.25);
  EXPECT_TRUE(s.test.empty());
  // A table as wide as it is: [features] beyond one dimension's 65536.
  EXPECT_EQ(Parse(R"({"format": "csv", "train": "w.csv", "testFraction": 0.5,
      "inputShape": [70000]})")
                .input_shape,
            std::vector<int>{70000});

  const DatasetSpec r = Parse(R"({"format": "csv", "train": "x.csv", "trainLabels": "y.csv",
      "test": "xt.csv", "testLabels": "yt.csv", "task": "regression", "header": "none",
      "delimiter": " "})");
  EXPECT_EQ(r.task, Task::Kind::kRegression);
  EXPECT_EQ(r.train_labels, "y.csv");
  EXPECT_EQ(r.test_labels, "yt.csv");
  EXPECT_EQ(r.header, CsvHeader::kNone);
  EXPECT_EQ(r.delimiter, ' ');

  EXPECT_EQ(Parse(R"({"format": "csv", "train": "a", "test": "b", "label": 0})").label_index, 0);
  EXPECT_EQ(Parse(R"({"format": "csv", "train": "a", "test": "b", "label": -3})").label_index, -3);
}

TEST(DatasetSpec, NpyPairs) {
  const DatasetSpec s = Parse(R"({"format": "npy", "trainX": "x.npy", "trainY": "y.npy",
      "testX": "xt.npy", "testY": "yt.npy", "standardize": false})");
  EXPECT_EQ(s.format, DatasetFormat::kNpy);
  EXPECT_EQ(s.train_x, "x.npy");
  EXPECT_EQ(s.train_y, "y.npy");
  EXPECT_EQ(s.test_x, "xt.npy");
  EXPECT_EQ(s.test_y, "yt.npy");
  EXPECT_FALSE(s.standardize);
  const DatasetSpec h =
      Parse(R"({"format": "npy", "trainX": "x.npy", "trainY": "y.npy", "testFraction": 0.5})");
  EXPECT_EQ(h.test_fraction, 0.5);
}

TEST(DatasetSpec, ErrorsNameTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"train": "/d"})", "dataset.format: required"},
      {R"({"format": "parquet", "train": "/d"})", "dataset.format"},
      {R"({"format": "idx"})", "dataset.train: required"},
      {R"({"format": "idx", "train": "/d", "test": "/e"})",
       "dataset.test: not a key of format idx"},
      {R"({"format": "idx", "train": "/d", "standardize": true})", "dataset.standardize"},
      {R"({"format": "idx", "train": 7})", "dataset.train: must be a string"},
      {R"({"format": "csv", "train": "a"})", "dataset.test: required"},
      {R"({"format": "csv", "test": "b"})", "dataset.train: required"},
      {R"({"format": "csv", "train": "a", "test": "b", "trainX": "x"})",
       "dataset.trainX: not a key of format csv"},
      {R"({"format": "csv", "train": "a", "test": "b", "header": "yes"})", "dataset.header"},
      {R"({"format": "csv", "train": "a", "test": "b", "delimiter": "|"})", "dataset.delimiter"},
      {R"({"format": "csv", "train": "a", "test": "b", "label": 1.5})", "dataset.label"},
      {R"({"format": "csv", "train": "a", "test": "b", "label": ""})", "dataset.label"},
      {R"({"format": "csv", "train": "a", "test": "b", "label": 100000})", "dataset.label"},
      {R"({"format": "csv", "train": "a", "test": "b", "trainLabels": "y"})",
       "dataset.testLabels: required"},
      {R"({"format": "csv", "train": "a", "test": "b", "testLabels": "y"})",
       "dataset.trainLabels: required"},
      {R"({"format": "csv", "train": "a", "test": "b", "trainLabels": "y", "testLabels": "z",
           "label": 0})",
       "dataset.label: not with trainLabels"},
      {R"({"format": "csv", "train": "a", "test": "b", "testFraction": 0.2})",
       "dataset.test: not with testFraction"},
      {R"({"format": "csv", "train": "a", "testFraction": 1})", "dataset.testFraction"},
      {R"({"format": "csv", "train": "a", "testFraction": -0.1})", "dataset.testFraction"},
      {R"({"format": "csv", "train": "a", "testFraction": "half"})", "dataset.testFraction"},
      {R"({"format": "csv", "train": "a", "test": "b", "task": "ranking"})", "dataset.task"},
      {R"({"format": "csv", "train": "a", "test": "b", "task": "regression", "classes": 3})",
       "dataset.classes: only for task classification"},
      {R"({"format": "csv", "train": "a", "test": "b", "classes": -1})", "dataset.classes"},
      {R"({"format": "csv", "train": "a", "test": "b", "classes": 1000000})", "dataset.classes"},
      {R"({"format": "csv", "train": "a", "test": "b", "standardize": "yes"})",
       "dataset.standardize"},
      {R"({"format": "csv", "train": "a", "test": "b", "shuffle": true})",
       "dataset.shuffle: unknown field"},
      {R"({"format": "csv", "train": "a", "test": "b", "inputShape": []})", "dataset.inputShape"},
      {R"({"format": "csv", "train": "a", "test": "b", "inputShape": [1, 0]})",
       "dataset.inputShape[1]"},
      {R"({"format": "csv", "train": "a", "test": "b", "inputShape": [1, 2, 3, 4, 5]})",
       "dataset.inputShape"},
      {R"({"format": "csv", "train": "a", "test": "b", "inputShape": [18446744073709551615]})",
       "dataset.inputShape[0]"},
      {R"({"format": "csv", "train": "a", "test": "b", "inputShape": [2147483648]})",
       "dataset.inputShape[0]: must be 1..2147483647, got 2147483648"},
      {R"({"format": "csv", "train": "a", "test": "b", "inputShape": [70000, 1]})",
       "dataset.inputShape[0]: must be 1..65536, got 70000"},
      {R"({"format": "npy", "train": "a", "test": "b"})", "dataset.test: not a key of format npy"},
      {R"({"format": "npy", "train": "a"})", "dataset.train: format npy takes trainX"},
      {R"({"format": "npy", "trainX": "x", "testX": "a", "testY": "b"})",
       "dataset.trainY: required"},
      {R"({"format": "npy", "trainX": "x", "trainY": "y", "testX": "a"})",
       "dataset.testY: required"},
      {R"({"format": "npy", "trainX": "x", "trainY": "y", "testFraction": 0.1, "testY": "b"})",
       "dataset.testY: not with testFraction"},
      {R"({"format": "npy", "trainX": "x", "trainY": "y", "testX": "a", "testY": "b",
           "label": 0})",
       "dataset.label: not a key of format npy"},
      {"[1, 2]", "dataset: must be an object"},
      {"{", "dataset: not valid JSON"},
      {"", "dataset: not valid JSON"},
  };
  for (const auto& [json, want] : cases) {
    auto s = ParseDatasetSpec(json);
    ASSERT_FALSE(s.ok()) << json;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(want), std::string::npos)
        << json << "\n  got: " << s.status().message() << "\n  want: " << want;
  }
}

TEST(DatasetSpec, WhereNamesTheSource) {
  auto s = ParseDatasetSpec(R"({"format": "idx"})", "spec.train.dataset");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("spec.train.dataset.train"), std::string::npos);
}

TEST(DatasetSpec, CanonicalJsonRoundTrips) {
  const std::string specs[] = {
      R"({"format": "idx", "train": "/data/fmnist"})",
      R"({"format": "idx", "train": "/d", "classes": 10, "inputShape": [1, 28, 28]})",
      R"({"format": "csv", "train": "a.csv", "test": "b.csv"})",
      R"({"format": "csv", "train": "w.csv", "header": "sklearn", "delimiter": "\t",
          "label": "target", "classes": 3, "standardize": false, "testFraction": 0.3})",
      R"({"format": "csv", "train": "x", "trainLabels": "y", "testFraction": 0.2,
          "task": "regression", "delimiter": " ", "header": "none"})",
      R"({"format": "csv", "train": "x", "test": "t", "label": 4, "delimiter": ";",
          "header": "header"})",
      R"({"format": "npy", "trainX": "x", "trainY": "y", "testX": "a", "testY": "b",
          "task": "regression", "inputShape": [3, 8, 8]})",
  };
  for (const std::string& json : specs) {
    const DatasetSpec s = Parse(json);
    const std::string canonical = DatasetSpecJson(s);
    auto again = ParseDatasetSpec(canonical);
    ASSERT_TRUE(again.ok()) << canonical << ": " << again.status().ToString();
    EXPECT_EQ(*again, s) << canonical;
    EXPECT_EQ(DatasetSpecJson(*again), canonical);
  }
  // Key order and defaults written or not: the same spec, the same string.
  EXPECT_EQ(DatasetSpecJson(Parse(R"({"test": "b", "train": "a", "format": "csv"})")),
            DatasetSpecJson(Parse(R"({"format": "csv", "train": "a", "test": "b",
                                      "standardize": true, "label": -1})")));
  EXPECT_EQ(DatasetSpecJson(IdxDatasetSpec("/x")), R"({"format":"idx","train":"/x"})");
}

TEST(DatasetSpec, HostileInputNeverCrashes) {
  EXPECT_FALSE(ParseDatasetSpec(std::string(100000, '[')).ok());
  EXPECT_FALSE(ParseDatasetSpec(R"({"format": "csv", "train": "a", "test": "b", "inputShape": )" +
                                std::string(5000, '[') + std::string(5000, ']') + "}")
                   .ok());
  EXPECT_FALSE(ParseDatasetSpec(std::string("{\"format\": \"csv\0\"}", 18)).ok());
  EXPECT_FALSE(ParseDatasetSpec("{\"format\": \"\xff\xfe\"}").ok());
  // Random mutations of a valid spec: any answer but a crash.
  const std::string base =
      R"({"format": "csv", "train": "a.csv", "test": "b.csv", "label": "y", "testFraction": 0.5,
          "inputShape": [1, 2, 3], "header": "sklearn", "classes": 3})";
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          s.erase(at, 1);
          break;
        default:
          s.insert(at, 1, "[]{}\",:0-9e."[rng() % 13]);
      }
    }
    auto parsed = ParseDatasetSpec(s);
    if (parsed.ok()) {
      auto again = ParseDatasetSpec(DatasetSpecJson(*parsed));
      ASSERT_TRUE(again.ok()) << s;
      EXPECT_EQ(*again, *parsed) << s;
    }
  }
}

}  // namespace
}  // namespace ringtrain::data
