// An in-memory table of samples (float features, integer labels or float targets) read from
// CSV or NPY files; owns the layout and the feature scaling, not the file formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ringtrain::data {

// What the model predicts: one of `classes` labels, or `targets` real values per sample.
struct Task {
  enum class Kind { kClassification, kRegression };
  Kind kind = Kind::kClassification;
  // Classification: the number of classes; 0 when reading means "take it from the data" (the
  // class names of a sklearn counts line, else the largest training label + 1).
  int classes = 0;
  // Regression: values per sample; 0 when reading means "as many as the file has".
  int targets = 0;
  bool classification() const { return kind == Kind::kClassification; }
};

// A cell or a name as messages quote it: "...", at most 64 bytes, a control character as '?'
// and a byte that is no part of a UTF-8 character (a Latin-1 header) as \xNN.
std::string QuoteText(std::string_view s);

// The most classes a label may select: a label of 10^9 is a corrupt file, not a softmax width.
inline constexpr int kMaxClasses = 1 << 16;

// n samples of `features` floats each (C order, n × features, already scaled: a Gather is a
// plain copy), with n labels (classification) or n × task.targets targets (regression).
struct Table {
  std::vector<float> x;
  std::vector<std::int32_t> labels;  // classification only: each in [0, task.classes)
  std::vector<float> targets;        // regression only: n × task.targets, C order
  std::size_t n = 0;
  std::size_t features = 0;
  // Each sample's shape as stored (e.g. {28, 28} for an NPY of images, {features} for CSV);
  // its product is `features`.
  std::vector<std::size_t> shape;
  Task task;
  // The features' names, from a CSV header line (empty without one): a test split whose header
  // names other columns, or the same in another order, is refused rather than read by position.
  std::vector<std::string> feature_names;
  std::string path;         // where x came from, for error messages
  std::string labels_path;  // where the labels/targets came from (== path for one CSV file)
  // Where task.classes came from when the labels said it (the largest + 1), for a message that
  // finds the model's width short of it: one stray label of 65535 makes 65536 classes.
  std::string classes_from;
};

// Per-feature standardisation: x' = (x - mean) * scale, scale = 1/std (1 for a column whose
// training values are all equal, so it becomes all zeros instead of a division by zero).
struct FeatureScaling {
  std::vector<float> mean;
  std::vector<float> scale;
};

// Mean and population standard deviation of each feature over `t` (in double precision).
FeatureScaling FitStandardization(const Table& t);
// Applies `s` in place; `s` must have t.features entries (InvalidArgument naming t.path if not).
Status ApplyStandardization(const FeatureScaling& s, Table& t);

// A training and a test table with the same features and task.
struct TrainTest {
  Table train;
  Table test;
  FeatureScaling scaling;  // what was applied to both (empty when not standardised)
};

// Reads one split of a dataset: the training split with `train_task` null, the test split with
// the training split's task.
using SplitReader = std::function<StatusOr<Table>(const Task* train_task)>;
// The two splits of any format: the test split takes the training split's task, each is
// validated (the test split against the training split), and both are standardised with the
// training split's statistics when `standardize`.
StatusOr<TrainTest> LoadTrainTest(const SplitReader& read, bool standardize);

// Whether `t` is self-consistent (sizes, labels below task.classes, finite values) and, when
// `reference` is given, has its features (by name too, when both have names) and task (a test split
// of another width or with a label the model cannot output is InvalidArgument naming the file,
// checked once at load because Gather trusts the shape and the indices).
Status ValidateTable(const Table& t, const Table* reference = nullptr);

// A declared per-sample shape as errors quote it ("[1, 28, 28]") and the values it holds (0 when
// a dimension is not positive).
struct DeclaredShape {
  std::string text;
  std::size_t values = 0;
};
DeclaredShape DescribeDeclaredShape(const std::vector<int>& declared);

// The per-sample shape a dataset declares (spec.train.dataset.inputShape; empty: none), one rule
// for the runner and for `ringtrain validate`/`run`: a shape holding as many values as a sample
// becomes the table's sample shape (a CSV row of 784 pixels as [1, 28, 28], an NPY of 8x8 images
// as [64]); another number of values is InvalidArgument naming `field` (where the shape was
// declared, e.g. "spec.train.dataset.inputShape") and the file.
Status ApplyDeclaredShape(const std::vector<int>& declared, std::string_view field, Table& t);

// Deterministic holdout: moves a `test_fraction` of `all` (at least one sample each side) into
// the test table, the order drawn from std::mt19937_64(seed); for datasets shipped as one file.
StatusOr<TrainTest> SplitHoldout(Table all, double test_fraction, std::uint64_t seed);

// Copies samples idx[0..n) into x (n × t.features) and their labels into `labels`
// (classification) or targets into `targets` (n × task.targets, regression); the other output
// may be null. Every idx[i] must be below t.n; no checks on this hot path.
void Gather(const Table& t, const std::size_t* idx, int n, float* x, std::int32_t* labels,
            float* targets);

}  // namespace ringtrain::data
