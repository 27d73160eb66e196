#include "controller/executors/local/local_dataset.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "common/byte_format.h"
#include "common/saturating.h"

#include "runner/data/csv.h"
#include "runner/data/idx.h"
#include "runner/data/npy.h"
#include "runner/train/config.h"
#include "runner/train/cpu_engine.h"

namespace ringtrain::executors {
namespace {

constexpr char kDataset[] = "spec.train.dataset";
constexpr char kInputShape[] = "spec.train.dataset.inputShape";

bool Exists(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::exists(path, ec);
}

std::string ShapeText(const model::Shape& s) {
  if (s.h == 1 && s.w == 1) return std::to_string(s.c);
  return std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

// 1234567 as "1,234,567".
std::string Grouped(std::size_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

// The field that names `key` of the dataset: spec.train.dataset for a plain IDX directory, else
// spec.train.dataset.<key>.
std::string DatasetField(const api::TrainSpec& t, const char* key) {
  return t.dataset_spec ? std::string(kDataset) + "." + key : std::string(kDataset);
}

// One path the spec names: there and of the right kind, or, where the ranks read it on this
// machine, refused when missing; a path missing otherwise is left to the caller's fallback. Not
// judged where this process does not see what the ranks will open: a $(VAR) is expanded in
// the ranks' arguments from the container's env, and a relative path under another workingDir
// is opened there.
bool SeesWhatRanksOpen(const std::string& path, DatasetLocation where) {
  if (path.empty() || path.find("$(") != std::string::npos) return false;
  return where != DatasetLocation::kThisMachineElsewhereDir ||
         std::filesystem::path(path).is_absolute();
}

Status CheckDatasetPath(const std::string& field, const std::string& path, bool directory,
                        DatasetLocation where) {
  if (!SeesWhatRanksOpen(path, where)) return Status::Ok();
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) {
    if (where == DatasetLocation::kMaybeElsewhere) return Status::Ok();
    return FailedPrecondition(field + ": " + path +
                              ": no such file or directory (`ringtrain run` starts the ranks on "
                              "this machine, and they read the dataset here)");
  }
  if (directory && !std::filesystem::is_directory(st)) {
    return FailedPrecondition(field + ": " + path + ": not a directory (an IDX directory holds " +
                              "the four Fashion-MNIST files)");
  }
  if (!directory && !std::filesystem::is_regular_file(st)) {
    return FailedPrecondition(field + ": " + path + ": not a regular file" +
                              (std::filesystem::is_directory(st) ? " (a directory)" : ""));
  }
  return Status::Ok();
}

// A CSV or NPY dataset's files as (field, path), the test split's only when it has its own
// files (no testFraction); an IDX dataset's directory.
std::vector<std::pair<std::string, std::string>> TableFiles(const api::TrainSpec& t,
                                                            const data::DatasetSpec& spec) {
  const bool test_files = spec.test_fraction == 0;
  std::vector<std::pair<std::string, std::string>> files;
  const auto add = [&](const char* key, const std::string& path, bool test) {
    if (!test || test_files) files.emplace_back(DatasetField(t, key), path);
  };
  switch (spec.format) {
    case data::DatasetFormat::kIdx:
      add("train", spec.train, false);
      break;
    case data::DatasetFormat::kCsv:
      add("train", spec.train, false);
      add("trainLabels", spec.train_labels, false);
      add("test", spec.test, true);
      add("testLabels", spec.test_labels, true);
      break;
    case data::DatasetFormat::kNpy:
      add("trainX", spec.train_x, false);
      add("trainY", spec.train_y, false);
      add("testX", spec.test_x, true);
      add("testY", spec.test_y, true);
      break;
  }
  return files;
}

// What the ranks will open, checked as far as the path goes: every file of the format, in the
// fields that name them.
Status CheckDatasetPaths(const api::TrainSpec& t, const data::DatasetSpec& spec,
                         DatasetLocation where) {
  switch (spec.format) {
    case data::DatasetFormat::kIdx: {
      const std::string field = DatasetField(t, "train");
      RETURN_IF_ERROR(CheckDatasetPath(field, spec.train, /*directory=*/true, where));
      // A directory that is here is read here (ReadLocalDataShape), by `validate` too: what it
      // lacks is said in these words, not as the loader's ENOENT of the first file (review).
      std::error_code ec;
      if (!SeesWhatRanksOpen(spec.train, where) || !std::filesystem::is_directory(spec.train, ec)) {
        return Status::Ok();
      }
      for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
        const std::string base = spec.train + "/" + name;
        if (!std::filesystem::exists(base, ec) && !std::filesystem::exists(base + ".gz", ec)) {
          return FailedPrecondition(field + ": " + spec.train + " has no " + name +
                                    "[.gz] (an IDX directory holds the four Fashion-MNIST files)");
        }
      }
      return Status::Ok();
    }
    case data::DatasetFormat::kCsv:
    case data::DatasetFormat::kNpy:
      for (const auto& [field, path] : TableFiles(t, spec)) {
        RETURN_IF_ERROR(CheckDatasetPath(field, path, false, where));
      }
      return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> DatasetPathsNotHere(const api::TrainSpec& t, bool relative_elsewhere) {
  const data::DatasetSpec spec = t.dataset_spec ? *t.dataset_spec : data::IdxDatasetSpec(t.dataset);
  std::vector<std::string> out;
  for (const auto& [field, path] : TableFiles(t, spec)) {
    const DatasetLocation where = relative_elsewhere ? DatasetLocation::kThisMachineElsewhereDir
                                                     : DatasetLocation::kMaybeElsewhere;
    if (SeesWhatRanksOpen(path, where) && !Exists(path)) {
      out.push_back(field + ": " + path);
    }
  }
  return out;
}

StatusOr<LocalDataShape> ReadLocalDataShape(const api::TrainSpec& t, DatasetLocation where) {
  const api::DataShape declared = api::DeclaredDataShape(t);
  const data::DatasetSpec spec = t.dataset_spec ? *t.dataset_spec : data::IdxDatasetSpec(t.dataset);
  RETURN_IF_ERROR(CheckDatasetPaths(t, spec, where));
  // Files not here: what the spec declares (its task at least).
  LocalDataShape out{declared,
                     declared.input || declared.outputs > 0 ? "spec.train.dataset (declared)" : ""};
  data::Task task;
  task.kind = spec.task;
  task.classes = spec.classes;
  data::Table table;
  switch (spec.format) {
    case data::DatasetFormat::kIdx: {
      if (!Exists(spec.train)) return out;
      // Both splits, read and checked as every rank reads them (train::LoadTrainingData): the
      // labels against the classes the runner will use (the spec's, else 10), the test images
      // against the training images' size (data::ValidateForModel). Reading the training split
      // too (a quarter of a second for Fashion-MNIST's) refuses now what every rank would: a
      // truncated or corrupt training file, a label out of range there.
      api::DataShape shape;
      shape.outputs = spec.classes > 0 ? spec.classes : 10;
      shape.task = model::Task::kClassification;
      ASSIGN_OR_RETURN(
          const train::TrainingData::Idx idx,
          train::LoadIdxSplits(spec, shape.outputs, kInputShape, DatasetField(t, "train")));
      shape.input = train::ShapeOf(idx.train, shape.outputs).input;
      return LocalDataShape{shape, spec.train + " (IDX)"};
    }
    case data::DatasetFormat::kCsv: {
      if (!Exists(spec.train)) return out;
      data::CsvOptions options;
      options.delimiter = spec.delimiter;
      options.header = spec.header;
      options.label_name = spec.label_name;
      options.label_index = spec.label_index;
      options.task = task;
      options.standardize = false;
      const data::CsvSplitFiles train{spec.train, spec.train_labels};
      const data::CsvSplitFiles test{spec.test, spec.test_labels};
      // Both splits when both are here, under the ranks' own rule (data::LoadTrainTest): a test
      // file whose header or columns differ is refused now, not on every rank.
      if (spec.test_fraction == 0 && Exists(test.features) &&
          (test.labels.empty() || Exists(test.labels))) {
        ASSIGN_OR_RETURN(data::TrainTest both, data::LoadCsv(train, test, options));
        table = std::move(both.train);
      } else {
        ASSIGN_OR_RETURN(table, data::ReadCsv(train, options));
        RETURN_IF_ERROR(data::ValidateTable(table));
      }
      break;
    }
    case data::DatasetFormat::kNpy: {
      if (!Exists(spec.train_x) || !Exists(spec.train_y)) return out;
      data::NpyOptions options;
      options.task = task;
      options.standardize = false;
      const data::NpySplitFiles train{spec.train_x, spec.train_y};
      const data::NpySplitFiles test{spec.test_x, spec.test_y};
      if (spec.test_fraction == 0 && Exists(test.x) && Exists(test.y)) {
        ASSIGN_OR_RETURN(data::TrainTest both, data::LoadNpy(train, test, options));
        table = std::move(both.train);
      } else {
        ASSIGN_OR_RETURN(table, data::ReadNpy(train, options));
        RETURN_IF_ERROR(data::ValidateTable(table));
      }
      break;
    }
  }
  // The declared shape applied as the runner applies it (an NPY of 8x8 images declared [64] is
  // 64 flat inputs on both sides).
  RETURN_IF_ERROR(data::ApplyDeclaredShape(spec.input_shape, kInputShape, table));
  api::DataShape shape;
  shape.input = model::InputShapeOf(table.shape, table.features);
  shape.outputs = table.task.classification() ? table.task.classes : table.task.targets;
  shape.outputs_from = table.classes_from;
  shape.task =
      table.task.classification() ? model::Task::kClassification : model::Task::kRegression;
  return LocalDataShape{shape, table.path + " (" + std::to_string(table.n) + " samples)"};
}

StatusOr<std::string> CheckModelLocally(api::TrainSpec* t, DatasetLocation where) {
  ASSIGN_OR_RETURN(LocalDataShape data, ReadLocalDataShape(*t, where));
  auto resolved = api::ResolveModel(t, data.shape);
  if (!resolved.ok() && where == DatasetLocation::kMaybeElsewhere) {
    // Files this check could not read: named, as the likelier cause of a shape it did not know
    // (a misspelt trainY) than the model.
    std::string absent;
    for (const std::string& p : DatasetPathsNotHere(*t)) absent += (absent.empty() ? "" : "; ") + p;
    if (!absent.empty()) {
      return Status(
          resolved.status().code(),
          resolved.status().message() + " (not on this machine, so not read: " + absent + ")");
    }
  }
  ASSIGN_OR_RETURN(model::ShapeReport report, std::move(resolved));
  model::Shape input{1, 28, 28};
  if (t->model_spec) {
    input = t->model_spec->input;
  } else if (data.shape && data.shape->input) {
    input = *data.shape->input;
  }
  std::string out = "Model: " + (t->model_spec ? std::string("layer list") : t->model) + ", loss " +
                    std::string(model::NameOf(t->model_spec ? t->model_spec->loss
                                                            : model::Loss::kSoftmaxCrossEntropy)) +
                    "\nDataset: " + (data.source.empty() ? "not read here" : data.source) + "\n";
  char line[160];
  std::snprintf(line, sizeof(line), "%-26s %-16s %12s\n", "Layer", "Output shape", "Params");
  out += line;
  std::snprintf(line, sizeof(line), "%-26s %-16s %12s\n", "input", ShapeText(input).c_str(), "0");
  out += line;
  for (const model::LayerInfo& l : report.layers) {
    std::snprintf(line, sizeof(line), "%-26s %-16s %12s\n", l.label.c_str(),
                  ShapeText(l.out).c_str(), Grouped(l.params).c_str());
    out += line;
  }
  out += "Total params: " + Grouped(report.params) + "\n";
  return out;
}

Status CheckLocalGangMemory(const api::JobSpec& spec, const train::MemoryProbe& probe) {
  if (!spec.command.empty() || spec.gpus_per_replica > 0 || spec.replicas <= 1) {
    return Status::Ok();
  }
  // The configuration each rank parses from the command line it gets. A local run always has a
  // checkpoint dir (the job's own, else one under the work directory): rank 0 holds the copy.
  const std::string checkpoint_dir =
      spec.checkpoint.path.empty() ? "checkpoints" : spec.checkpoint.path;
  ASSIGN_OR_RETURN(const train::TrainConfig config,
                   train::ParseTrainFlags(api::RunnerArgs(spec, checkpoint_dir)));
  if (config.device == contract::Device::kCuda) return Status::Ok();
  std::uint64_t data_bytes = 0;
  std::optional<train::CpuRankMemory> need;
  {
    // The datasets as each rank loads them; released before the memory is read.
    auto data =
        train::LoadTrainingData(train::DatasetSpecOf(config), config.seed, config.model.classes);
    if (!data.ok()) return Status::Ok();
    auto model = train::ResolveModelSpec(config, data->shape);
    if (!model.ok()) return Status::Ok();
    ASSIGN_OR_RETURN(need, train::CpuRankMemoryOf(config, *model, data->shape));
    data_bytes = train::TrainingDataBytes(*data);
  }
  const train::MemoryBudget memory = train::ReadMemoryBudget(probe);
  if (memory.limit == 0) return Status::Ok();
  const std::string& optimizer = config.optimizer.name;
  const std::uint64_t state = train::TrainingStateBytes(need->params, optimizer);
  const std::uint64_t copy = train::TrainingStateBytes(need->params, optimizer, true) - state;
  const std::string what =
      "weights, gradients and " + optimizer + " state of " + Grouped(need->params) +
      " parameters, batches of " + std::to_string(config.batch_size) +
      " (batchSizePerReplica), the gradient reducer, " + FormatMegabytes(data_bytes) +
      " of datasets each rank loads, and " + FormatMegabytes(train::kCpuRankRuntimeBytes) +
      " of the runner's own (libraries, threads, heap)";
  const std::string where = memory.cgroup.empty()
                                ? "this machine has (MemAvailable)"
                                : "this machine's cgroup " + memory.cgroup + " (limit " +
                                      FormatMegabytes(memory.limit) + ", " +
                                      FormatMegabytes(memory.in_use) + " in use) has";
  return train::CheckGangFits(
      "spec.replicas", spec.replicas,
      SaturatingAdd(SaturatingAdd(need->Bytes(optimizer, false), data_bytes),
                    train::kCpuRankRuntimeBytes),
      copy, what, memory.limit - memory.in_use, where);
}

}  // namespace ringtrain::executors
