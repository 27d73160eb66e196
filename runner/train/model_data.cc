#include "runner/train/model_data.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <utility>

#include "common/byte_format.h"
#include "runner/data/csv.h"
#include "runner/data/npy.h"

namespace ringtrain::train {
namespace {

// 1234567 as "1,234,567".
std::string Grouped(std::uint64_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

// Reads one file of a split and holds out the test split, standardising after the split.
StatusOr<data::TrainTest> Holdout(StatusOr<data::Table> all, const data::DatasetSpec& spec,
                                  std::uint64_t seed) {
  if (!all.ok()) return all.status();
  ASSIGN_OR_RETURN(data::TrainTest out,
                   data::SplitHoldout(std::move(*all), spec.test_fraction, seed));
  RETURN_IF_ERROR(data::ValidateTable(out.train));
  RETURN_IF_ERROR(data::ValidateTable(out.test, &out.train));
  if (spec.standardize) {
    out.scaling = data::FitStandardization(out.train);
    RETURN_IF_ERROR(data::ApplyStandardization(out.scaling, out.train));
    RETURN_IF_ERROR(data::ApplyStandardization(out.scaling, out.test));
  }
  return out;
}

data::Task TaskOf(const data::DatasetSpec& spec) {
  data::Task task;
  task.kind = spec.task;
  task.classes = spec.task == data::Task::Kind::kClassification ? spec.classes : 0;
  return task;
}

}  // namespace

DataShape ShapeOf(const data::Dataset& ds, int classes) {
  DataShape s;
  s.input = model::Shape{1, ds.rows, ds.cols};
  s.outputs = classes;
  return s;
}

StatusOr<DataShape> ShapeOf(const data::Table& t) {
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<int>::max());
  if (t.features == 0 || t.features > kMax) {
    return InvalidArgument(t.path + ": " + std::to_string(t.features) +
                           " features per sample, a model takes 1.." + std::to_string(kMax));
  }
  DataShape s;
  s.input = model::InputShapeOf(t.shape, t.features);
  s.regression = !t.task.classification();
  s.outputs = s.regression ? t.task.targets : t.task.classes;
  return s;
}

StatusOr<TrainingData> LoadTrainingData(const data::DatasetSpec& spec, std::uint64_t seed,
                                        int idx_classes) {
  TrainingData out;
  out.spec = spec;
  switch (spec.format) {
    case data::DatasetFormat::kIdx: {
      const int classes = spec.classes > 0 ? spec.classes : idx_classes;
      TrainingData::Idx idx;
      // Labels against the model's classes in ValidateForModel: an error naming the file and
      // the classes, whatever their number.
      ASSIGN_OR_RETURN(idx.train, data::LoadFashionMnist(spec.train, true, data::kIdxLabelValues));
      ASSIGN_OR_RETURN(idx.test, data::LoadFashionMnist(spec.train, false, data::kIdxLabelValues));
      RETURN_IF_ERROR(data::ValidateForModel(idx.train, idx.train.rows, idx.train.cols, classes));
      RETURN_IF_ERROR(data::ValidateForModel(idx.test, idx.train.rows, idx.train.cols, classes));
      RETURN_IF_ERROR(data::CheckDeclaredShape(spec.input_shape, "dataset.inputShape", idx.train));
      out.shape = ShapeOf(idx.train, classes);
      out.description = std::to_string(idx.train.count) + " training and " +
                        std::to_string(idx.test.count) + " test images from " + spec.train;
      out.idx = std::move(idx);
      break;
    }
    case data::DatasetFormat::kCsv: {
      data::CsvOptions o;
      o.delimiter = spec.delimiter;
      o.header = spec.header;
      o.label_name = spec.label_name;
      o.label_index = spec.label_index;
      o.task = TaskOf(spec);
      o.standardize = spec.standardize;
      const data::CsvSplitFiles train{spec.train, spec.train_labels};
      if (spec.test_fraction > 0) {
        ASSIGN_OR_RETURN(out.table, Holdout(data::ReadCsv(train, o), spec, seed));
      } else {
        ASSIGN_OR_RETURN(out.table,
                         data::LoadCsv(train, data::CsvSplitFiles{spec.test, spec.test_labels}, o));
      }
      break;
    }
    case data::DatasetFormat::kNpy: {
      data::NpyOptions o;
      o.task = TaskOf(spec);
      o.standardize = spec.standardize;
      const data::NpySplitFiles train{spec.train_x, spec.train_y};
      if (spec.test_fraction > 0) {
        ASSIGN_OR_RETURN(out.table, Holdout(data::ReadNpy(train, o), spec, seed));
      } else {
        ASSIGN_OR_RETURN(out.table,
                         data::LoadNpy(train, data::NpySplitFiles{spec.test_x, spec.test_y}, o));
      }
      break;
    }
  }
  if (out.table) {
    // The declared shape, as `ringtrain validate` applies it: an NPY of 8x8 images declared [64]
    // is what a model of 64 inputs takes.
    for (data::Table* t : {&out.table->train, &out.table->test}) {
      RETURN_IF_ERROR(data::ApplyDeclaredShape(spec.input_shape, "dataset.inputShape", *t));
    }
    ASSIGN_OR_RETURN(out.shape, ShapeOf(out.table->train));
    out.description = std::to_string(out.table->train.n) + " training and " +
                      std::to_string(out.table->test.n) + " test samples (" +
                      std::to_string(out.table->train.features) + " features, " +
                      (out.shape.regression ? std::to_string(out.shape.outputs) + " target(s)"
                                            : std::to_string(out.shape.outputs) + " classes") +
                      ") from " + out.table->train.path;
  }
  return out;
}

StatusOr<model::ModelSpec> ResolveModelSpec(const TrainConfig& config, const DataShape& shape) {
  model::ModelSpec spec;
  if (config.model_spec) {
    spec = *config.model_spec;
  } else {
    if (shape.regression) {
      return InvalidArgument("--model " + config.model.name +
                             ": a preset classifies, and the dataset is a regression one (give "
                             "a --model-spec with \"loss\": \"mse\")");
    }
    ASSIGN_OR_RETURN(spec, model::PresetSpec(config.model.name, shape.input, shape.outputs,
                                             config.model.hidden));
  }
  const model::Task task =
      shape.regression ? model::Task::kRegression : model::Task::kClassification;
  auto checked = model::CheckAgainstDataset(spec, shape.input, task, shape.outputs);
  if (!checked.ok()) {
    // The loss is a field of the spec: "model.loss: mse does not fit ...", as ParseModelSpec
    // names it; a layer or the input follows "model: ".
    const std::string& why = checked.status().message();
    if (why.rfind("loss: ", 0) == 0) return InvalidArgument("model." + why);
    return checked.status().WithContext("model");
  }
  return spec;
}

std::uint64_t TrainingStateBytes(std::uint64_t params, std::string_view optimizer,
                                 bool checkpoint_copy) {
  const std::uint64_t state_floats = optimizer == "adam" ? 2 : 1;
  const std::uint64_t copy_floats = checkpoint_copy ? 1 + state_floats : 0;
  return params * (2 + state_floats + copy_floats) * sizeof(float);
}

namespace {

Status DoesNotFit(std::uint64_t params, std::string_view optimizer, std::string_view why,
                  bool checkpoint_copy, BatchMemory batch, bool name_batch) {
  std::string need = "model.layers: " + Grouped(params) + " parameters need " +
                     FormatMegabytes(TrainingStateBytes(params, optimizer, checkpoint_copy)) +
                     " for weights, gradients and optimizer state (" + std::string(optimizer) + ")";
  if (checkpoint_copy) need += " and rank 0's copy of them for a checkpoint";
  if (name_batch) {
    need += std::string(checkpoint_copy ? "," : "") + " and " + FormatMegabytes(batch.bytes) +
            " for the activations and input buffers of a batch of " +
            std::to_string(batch.batch_size) + " (batchSizePerReplica)";
  }
  return InvalidArgument(need + "; " + std::string(why));
}

// Whether a batch's bytes are worth naming beside the state's: a tenth of them or more.
bool BatchIsLarge(std::uint64_t state_bytes, BatchMemory batch) {
  return batch.bytes > 0 && batch.bytes >= state_bytes / 10;
}

}  // namespace

Status TrainingStateDoesNotFit(std::uint64_t params, std::string_view optimizer,
                               std::string_view why, bool checkpoint_copy, BatchMemory batch) {
  const std::uint64_t state = TrainingStateBytes(params, optimizer, checkpoint_copy);
  return DoesNotFit(params, optimizer, why, checkpoint_copy, batch, BatchIsLarge(state, batch));
}

Status CheckTrainingStateFits(std::uint64_t params, std::string_view optimizer,
                              std::uint64_t memory_bytes, bool checkpoint_copy, BatchMemory batch) {
  const std::uint64_t state = TrainingStateBytes(params, optimizer, checkpoint_copy);
  if (memory_bytes == 0 || (state <= memory_bytes && batch.bytes <= memory_bytes - state)) {
    return Status::Ok();
  }
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GB", static_cast<double>(memory_bytes) / 1e9);
  // The batch is named when it is large, or when without it the state would fit.
  return DoesNotFit(params, optimizer, std::string("this process may use ") + memory + " in all",
                    checkpoint_copy, batch, BatchIsLarge(state, batch) || state <= memory_bytes);
}

std::uint64_t MemoryLimitBytes() {
  std::uint64_t limit = 0;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) limit = static_cast<std::uint64_t>(pages) * page;
  // cgroup v2, then v1 ("max" or an absurd v1 value: no limit).
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::uint64_t cgroup = 0;
    if (in >> cgroup && cgroup > 0 && (limit == 0 || cgroup < limit)) {
      limit = cgroup;
      break;
    }
  }
  return limit;
}

bool IsPreset(const TrainConfig& config, const DataShape& shape, const model::ModelSpec& spec) {
  if (shape.regression) return false;
  auto preset =
      model::PresetSpec(config.model.name, shape.input, shape.outputs, config.model.hidden);
  return preset.ok() && preset->init == spec.init &&
         model::CanonicalString(*preset) == model::CanonicalString(spec);
}

ExpectedModel CheckpointModelOf(const model::ModelSpec& spec, const DataShape& shape, bool preset) {
  ExpectedModel e;
  e.model.architecture = model::CanonicalString(spec);
  const model::Shape& s = shape.input;
  e.model.features = s.h == 1 && s.w == 1 ? std::to_string(s.c)
                                          : std::to_string(s.c) + "x" + std::to_string(s.h) + "x" +
                                                std::to_string(s.w);
  e.accept_unrecorded = preset;
  return e;
}

std::uint64_t DropoutSeed(std::uint64_t seed, int rank, int epoch, std::int64_t step) {
  std::uint64_t h = seed ^ 0x6A09E667F3BCC908ULL;
  for (const std::uint64_t v : {static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(epoch),
                                static_cast<std::uint64_t>(step)}) {
    h = (h ^ v) * 0x100000001B3ULL;  // FNV-style mixing, then splitmix64's finaliser
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBULL;
    h ^= h >> 31;
  }
  return h;
}

}  // namespace ringtrain::train
