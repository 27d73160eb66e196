#include "runner/train/model_data.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "common/byte_format.h"
#include "common/saturating.h"
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
  return SaturatingMul(params, (2 + state_floats + copy_floats) * sizeof(float));
}

namespace {

// Whether bytes are worth naming beside the state's: a tenth of them or more.
bool IsLarge(std::uint64_t state_bytes, std::uint64_t bytes) {
  return bytes > 0 && bytes >= state_bytes / 10;
}

Status DoesNotFit(std::uint64_t params, std::string_view optimizer, std::string_view why,
                  bool checkpoint_copy, BatchMemory batch, bool name_batch, ReducerMemory reducer,
                  bool name_reducer) {
  std::string need = "model.layers: " + Grouped(params) + " parameters need " +
                     FormatMegabytes(TrainingStateBytes(params, optimizer, checkpoint_copy)) +
                     " for weights, gradients and optimizer state (" + std::string(optimizer) + ")";
  bool named = false;  // an "and" so far: the next one follows a comma
  if (checkpoint_copy) {
    need += " and rank 0's copy of them for a checkpoint";
    named = true;
  }
  if (name_batch) {
    need += std::string(named ? "," : "") + " and " + FormatMegabytes(batch.bytes) +
            " for the activations and input buffers of a batch of " +
            std::to_string(batch.batch_size) + " (batchSizePerReplica)";
    named = true;
  }
  if (name_reducer) {
    need += std::string(named ? "," : "") + " and " + FormatMegabytes(reducer.bytes) +
            " for the gradient reducer's bookkeeping of " + Grouped(reducer.ranges) +
            " ranges (--bucket-cap-bytes)";
  }
  return InvalidArgument(need + "; " + std::string(why));
}

// A decimal number and nothing else: no sign, no fraction, no unit, not past 64 bits.
std::optional<std::uint64_t> NumberOf(std::string_view word) {
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (word.empty() || ec != std::errc() || ptr != word.data() + word.size()) return std::nullopt;
  return value;
}

// The first line of `text` that starts with `key` and a blank: the number its next word is.
// None for anything else.
std::optional<std::uint64_t> FieldOf(std::string_view text, std::string_view key) {
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (line.size() <= key.size() || line.substr(0, key.size()) != key ||
        (line[key.size()] != ' ' && line[key.size()] != '\t')) {
      continue;
    }
    line.remove_prefix(key.size());
    const std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos) return std::nullopt;
    line.remove_prefix(first);
    return NumberOf(line.substr(0, line.find_first_of(" \t\r")));
  }
  return std::nullopt;
}

// A small file of the kernel's, whole (at most 1 MiB: these are a few KB); empty if unreadable.
std::string ReadSmallFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text(std::size_t{1} << 20, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return text;
}

// A file holding one number and a newline (memory.max, memory.limit_in_bytes); none for "max".
std::optional<std::uint64_t> NumberIn(const std::filesystem::path& path) {
  const std::string text = ReadSmallFile(path);
  std::string_view number(text);
  const std::size_t end = number.find_last_not_of(" \t\r\n");
  number = number.substr(0, end == std::string_view::npos ? 0 : end + 1);
  return NumberOf(number.substr(std::min(number.find_first_not_of(" \t"), number.size())));
}

// Adds field `b` of a stat file, when present, to field `a`, which must be.
std::optional<std::uint64_t> SumOf(std::string_view stat, std::string_view a, std::string_view b) {
  const std::optional<std::uint64_t> first = FieldOf(stat, a);
  if (!first) return std::nullopt;
  return SaturatingAdd(*first, FieldOf(stat, b).value_or(0));
}

}  // namespace

Status TrainingStateDoesNotFit(std::uint64_t params, std::string_view optimizer,
                               std::string_view why, bool checkpoint_copy, BatchMemory batch,
                               ReducerMemory reducer) {
  const std::uint64_t state = TrainingStateBytes(params, optimizer, checkpoint_copy);
  return DoesNotFit(params, optimizer, why, checkpoint_copy, batch, IsLarge(state, batch.bytes),
                    reducer, IsLarge(state, reducer.bytes));
}

Status CheckTrainingStateFits(std::uint64_t params, std::string_view optimizer, MemoryBudget memory,
                              bool checkpoint_copy, BatchMemory batch, ReducerMemory reducer) {
  if (memory.limit == 0) return Status::Ok();
  const std::uint64_t in_use = memory.in_use < memory.limit ? memory.in_use : 0;
  const std::uint64_t available = memory.limit - in_use;
  const std::uint64_t state = TrainingStateBytes(params, optimizer, checkpoint_copy);
  const std::uint64_t with_batch = SaturatingAdd(state, batch.bytes);
  const std::uint64_t need = SaturatingAdd(with_batch, reducer.bytes);
  if (need <= available) return Status::Ok();
  std::string why = "this process may use " + FormatMegabytes(memory.limit) + " in all";
  // What is in use is named when it is why: without it, all would fit.
  const bool for_in_use = in_use > 0 && need <= memory.limit;
  // Machine-wide, what is in use is retried only when other processes hold enough of it that
  // all would fit once they freed theirs: this process's own (its datasets) a restart loads
  // again. (Sibling ranks of `ringtrain run` count as other processes.)
  const std::uint64_t own = std::min(memory.own_in_use, in_use);
  const bool retryable = for_in_use && memory.machine_wide && need <= memory.limit - own;
  if (for_in_use) {
    why +=
        ", " + FormatMegabytes(in_use) + " of it already in use (the datasets and other processes)";
    // Other processes of the machine may free it: a later try may fit.
    if (retryable) {
      why += "; retried, as other processes may free it";
    } else if (memory.machine_wide) {
      why += "; " + FormatMegabytes(own) +
             " of it this process's own (its datasets), which leaves too little even if other "
             "processes free theirs";
    }
  }
  // The batch and the reducer are named when large, or when what comes before them would fit.
  const Status refused =
      DoesNotFit(params, optimizer, why, checkpoint_copy, batch,
                 IsLarge(state, batch.bytes) || state <= available, reducer,
                 IsLarge(state, reducer.bytes) || (reducer.bytes > 0 && with_batch <= available));
  if (retryable) {
    return Status(StatusCode::kResourceExhausted, refused.message());
  }
  return refused;
}

Status CheckTrainingStateFits(std::uint64_t params, std::string_view optimizer,
                              std::uint64_t memory_bytes, bool checkpoint_copy, BatchMemory batch,
                              ReducerMemory reducer) {
  return CheckTrainingStateFits(params, optimizer, MemoryBudget{memory_bytes, 0}, checkpoint_copy,
                                batch, reducer);
}

MemoryBudget ReadMemoryBudget(const MemoryProbe& probe) {
  MemoryBudget out;
  out.limit = probe.physical_bytes;
  if (out.limit == 0) {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
      out.limit =
          SaturatingMul(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page));
    }
  }
  const std::filesystem::path root(probe.root);
  const std::filesystem::path cgroup = root / "sys/fs/cgroup";
  // The cgroup whose limit is below the machine's: v2, then v1 ("max", or v1's absurd value for
  // none, is no limit). Its memory.stat tells what of it is in use.
  struct Source {
    std::filesystem::path limit;
    std::filesystem::path stat;
    std::string_view anon;
    std::string_view shmem;
  };
  const Source sources[] = {
      {cgroup / "memory.max", cgroup / "memory.stat", "anon", "shmem"},
      {cgroup / "memory/memory.limit_in_bytes", cgroup / "memory/memory.stat", "total_rss",
       "total_shmem"},
  };
  std::optional<std::uint64_t> in_use;
  bool cgroup_limit = false;
  for (const Source& source : sources) {
    const std::optional<std::uint64_t> limit = NumberIn(source.limit);
    if (!limit || *limit == 0 || (out.limit != 0 && *limit >= out.limit)) continue;
    out.limit = *limit;
    cgroup_limit = true;
    const std::string stat = ReadSmallFile(source.stat);
    in_use = SumOf(stat, source.anon, source.shmem);
    // cgroup v1 without hierarchy accounting: the cgroup's own.
    if (!in_use && source.anon == "total_rss") in_use = SumOf(stat, "rss", "shmem");
    break;
  }
  if (!cgroup_limit) {
    // The machine's memory is the limit: what reclaim cannot free of it (MemAvailable counts the
    // page cache and reclaimable slab as free).
    const std::string meminfo = ReadSmallFile(root / "proc/meminfo");
    const std::optional<std::uint64_t> total = FieldOf(meminfo, "MemTotal:");
    const std::optional<std::uint64_t> available = FieldOf(meminfo, "MemAvailable:");
    if (total && available && *available <= *total) {
      const std::uint64_t kib = *total - *available;
      if (kib <= std::numeric_limits<std::uint64_t>::max() / 1024) in_use = kib * 1024;
    }
    out.machine_wide = true;
  }
  // A reading that leaves this running process nothing is no reading.
  if (in_use && *in_use < out.limit) out.in_use = *in_use;
  if (out.machine_wide && out.in_use > 0) {
    // What of it this process holds itself (its datasets): anonymous and shared memory, in kB.
    // Either line missing or no number, or a sum past 64 bits as bytes, is none (a refusal
    // stays retryable, as it was).
    const std::string status = ReadSmallFile(root / "proc/self/status");
    const std::optional<std::uint64_t> anon_kib = FieldOf(status, "RssAnon:");
    const std::optional<std::uint64_t> shmem_kib = FieldOf(status, "RssShmem:");
    constexpr std::uint64_t kMaxKib = std::numeric_limits<std::uint64_t>::max() / 1024;
    if (anon_kib && shmem_kib && *anon_kib <= kMaxKib && *shmem_kib <= kMaxKib - *anon_kib) {
      out.own_in_use = std::min((*anon_kib + *shmem_kib) * 1024, out.in_use);
    }
  }
  return out;
}

std::uint64_t MemoryLimitBytes() { return ReadMemoryBudget().limit; }

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
