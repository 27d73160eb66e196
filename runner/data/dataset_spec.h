// Where a dataset is and how to read it: the runner's --dataset-spec and the TrainingJob's
// spec.train.dataset object (its YAML converts to this JSON one to one, camelCase keys). Light
// header: no JSON library, no file I/O; the loaders are idx.h, csv.h and npy.h.
//
// JSON shape (every key other than "format" and the files has a default; unknown keys, and keys
// another format does not use, are errors naming the field):
//
//   {"format": "idx", "train": "/data/fashion-mnist"}
//       The IDX directory of Fashion-MNIST (train-images-idx3-ubyte[.gz] and the other three
//       files, idx.h); `--dataset DIR` is exactly this.
//
//   {"format": "csv",
//    "train": "train.csv", "test": "test.csv",        // features and, by default, the label
//    "trainLabels": "y_train.csv", "testLabels": "y_test.csv",  // optional: labels in own files
//    "header": "auto",        // auto | none | header | sklearn (the sklearn counts line, csv.h)
//    "delimiter": "auto",     // auto | "," | ";" | "\t" | " " (any run of blanks)
//    "label": -1,             // the label column: a header name, or an index (negative from the
//                             // end); not allowed with trainLabels
//    ...common keys}
//
//   {"format": "npy",
//    "trainX": "x_train.npy", "trainY": "y_train.npy",  // x: (n, ...), y: (n,) or (n, t)
//    "testX": "x_test.npy", "testY": "y_test.npy",
//    ...common keys}
//
// Common keys of csv and npy:
//   "task": "classification" | "regression"   (classification)
//   "classes": 0..65536   classification only; 0 = infer (a sklearn counts line's class names,
//                         else the largest training label + 1)
//   "standardize": true   per-feature mean/std of the training split applied to both splits
//   "testFraction": 0     0: the test files are the test split; in (0, 1): no test files, that
//                         fraction of the training file is held out (data::SplitHoldout, drawn
//                         from the job's seed, so every rank holds out the same samples)
// Every format:
//   "inputShape": [c, h, w] or [features]   optional: the per-sample shape the data must have
//                         (checked after loading; the operator checks a model against it before
//                         creating a pod)
//   "classes" is also accepted by idx, checked against the data (10 for Fashion-MNIST).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runner/data/csv.h"
#include "runner/data/table.h"

namespace ringtrain::data {

enum class DatasetFormat { kIdx, kCsv, kNpy };

struct DatasetSpec {
  DatasetFormat format = DatasetFormat::kIdx;
  // idx: the directory. csv: the training and test files (test empty when test_fraction > 0).
  std::string train;
  std::string test;
  // csv only: labels (regression: targets) in their own files, every column a label; empty: the
  // `label` column of train/test.
  std::string train_labels;
  std::string test_labels;
  // npy only: the x and y arrays of each split (test_* empty when test_fraction > 0).
  std::string train_x;
  std::string train_y;
  std::string test_x;
  std::string test_y;
  // csv only.
  CsvHeader header = CsvHeader::kAuto;
  char delimiter = 0;                             // 0 = auto (csv.h CsvOptions::delimiter)
  std::string label_name;                         // the label column by header name, when set
  int label_index = -1;                           // else by index, negative from the end
  Task::Kind task = Task::Kind::kClassification;  // csv, npy (idx: classification)
  int classes = 0;                                // 0 = infer (idx: checked when set)
  bool standardize = true;                        // csv, npy
  double test_fraction = 0;                       // csv, npy: 0 or in (0, 1)
  std::vector<int> input_shape;                   // empty = not stated

  bool operator==(const DatasetSpec&) const = default;
};

std::string_view NameOf(DatasetFormat format);

// Parses the JSON above; errors name the path from `where` down, e.g.
// "dataset.testFraction: must be in [0, 1), got 1.5" or "dataset.trainX: not a key of format csv".
StatusOr<DatasetSpec> ParseDatasetSpec(std::string_view json, std::string_view where = "dataset");

// The spec as canonical JSON (sorted keys, only the keys its format uses, defaults written out):
// ParseDatasetSpec(DatasetSpecJson(s)) == s, and equal specs give equal strings.
std::string DatasetSpecJson(const DatasetSpec& spec);

// The IDX directory of `--dataset DIR`.
inline DatasetSpec IdxDatasetSpec(std::string dir) {
  DatasetSpec s;
  s.train = std::move(dir);
  return s;
}

}  // namespace ringtrain::data
