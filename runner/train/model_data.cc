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
#include <vector>

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
  s.input = ds.flat ? model::Shape{ds.rows * ds.cols, 1, 1} : model::Shape{1, ds.rows, ds.cols};
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
  s.outputs_from = t.classes_from;
  return s;
}

StatusOr<TrainingData::Idx> LoadIdxSplits(const data::DatasetSpec& spec, int classes,
                                          std::string_view shape_field,
                                          std::string_view file_context) {
  auto load = [&](bool train) -> StatusOr<data::Dataset> {
    auto loaded = data::LoadFashionMnist(spec.train, train, data::kIdxLabelValues);
    if (!loaded.ok() && !file_context.empty()) return loaded.status().WithContext(file_context);
    return loaded;
  };
  TrainingData::Idx idx;
  // Labels against the dataset's classes in ValidateForModel: an error naming the file, the
  // classes, whatever their number, and what sets them (Fashion-MNIST's 10 unless said).
  const std::string_view hint =
      spec.classes > 0 ? " (spec.train.dataset.classes)"
                       : " (Fashion-MNIST's; spec.train.dataset.classes says how many there are)";
  ASSIGN_OR_RETURN(idx.train, load(true));
  RETURN_IF_ERROR(data::ValidateForModel(idx.train, idx.train.rows, idx.train.cols, classes,
                                         "the dataset's", hint));
  ASSIGN_OR_RETURN(idx.test, load(false));
  RETURN_IF_ERROR(data::ValidateForModel(idx.test, idx.train.rows, idx.train.cols, classes,
                                         "the dataset's", hint));
  RETURN_IF_ERROR(data::CheckDeclaredShape(spec.input_shape, shape_field, idx.train));
  // [features] or 4 dimensions: flat, as the operator reads it (api::DeclaredDataShape).
  idx.train.flat = idx.test.flat = data::DeclaredFlat(spec.input_shape);
  return idx;
}

StatusOr<TrainingData> LoadTrainingData(const data::DatasetSpec& spec, std::uint64_t seed,
                                        int idx_classes) {
  TrainingData out;
  out.spec = spec;
  switch (spec.format) {
    case data::DatasetFormat::kIdx: {
      const int classes = spec.classes > 0 ? spec.classes : idx_classes;
      ASSIGN_OR_RETURN(TrainingData::Idx idx, LoadIdxSplits(spec, classes, "dataset.inputShape"));
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
  auto checked =
      model::CheckAgainstDataset(spec, shape.input, task, shape.outputs, shape.outputs_from);
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

// The components of an absolute cgroup or mount path ("/a/b" -> {"a", "b"}; "/" -> {}); none
// for a path that is not absolute or has a "." or ".." component or a NUL (it could name a
// directory outside the hierarchy).
std::optional<std::vector<std::string>> PathComponents(std::string_view path) {
  if (path.empty() || path.front() != '/' || path.find('\0') != std::string_view::npos) {
    return std::nullopt;
  }
  std::vector<std::string> out;
  while (!path.empty()) {
    const std::size_t slash = path.find('/');
    const std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (part.empty()) continue;
    if (part == "." || part == "..") return std::nullopt;
    out.emplace_back(part);
  }
  return out;
}

// A mountinfo path field with its octal escapes (\040 for a blank) decoded; none for an escape
// that is not three octal digits of a byte.
std::optional<std::string> Unescaped(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\') {
      out.push_back(field[i]);
      continue;
    }
    int value = 0;
    for (std::size_t k = 1; k <= 3; ++k) {
      if (i + k >= field.size() || field[i + k] < '0' || field[i + k] > '7') return std::nullopt;
      value = value * 8 + (field[i + k] - '0');
    }
    if (value > 255) return std::nullopt;
    out.push_back(static_cast<char>(value));
    i += 3;
  }
  return out;
}

// Splits `text` at `sep` (empty parts kept).
std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const std::size_t at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return out;
    text.remove_prefix(at + 1);
  }
}

// Where one cgroup hierarchy is mounted: its directory under the probe's root, and which of the
// hierarchy's cgroups is mounted there (its path components; none when unknown).
struct CgroupMount {
  std::filesystem::path dir;
  std::string shown;  // the mount point as the machine names it
  std::optional<std::vector<std::string>> root;
};

// The last mount in `mountinfo` of the v2 hierarchy at /sys/fs/cgroup, or of the v1 hierarchy
// holding the memory controller (wherever it is mounted). Lines that do not parse are skipped.
std::optional<CgroupMount> FindCgroupMount(std::string_view mountinfo, bool v2,
                                           const std::filesystem::path& root) {
  std::optional<CgroupMount> found;
  for (std::string_view line : Split(mountinfo, '\n')) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
    const std::size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    const std::vector<std::string_view> before = Split(line.substr(0, dash), ' ');
    const std::vector<std::string_view> after = Split(line.substr(dash + 3), ' ');
    if (before.size() < 6 || after.size() < 3) continue;
    const std::optional<std::string> mount_root = Unescaped(before[3]);
    const std::optional<std::string> mount_point = Unescaped(before[4]);
    if (!mount_root || !mount_point) continue;
    const std::optional<std::vector<std::string>> point = PathComponents(*mount_point);
    if (!point) continue;
    if (v2) {
      if (after[0] != "cgroup2" || *mount_point != "/sys/fs/cgroup") continue;
    } else {
      const std::vector<std::string_view> options = Split(after[2], ',');
      if (after[0] != "cgroup" ||
          std::find(options.begin(), options.end(), "memory") == options.end()) {
        continue;
      }
    }
    CgroupMount m;
    m.dir = root;
    for (const std::string& part : *point) m.dir /= part;
    m.shown = *mount_point;
    m.root = PathComponents(*mount_root);
    found = std::move(m);
  }
  return found;
}

// This process's cgroup path in the v2 hierarchy ("0::PATH") or the v1 one holding the memory
// controller ("ID:...,memory,...:PATH"), from /proc/self/cgroup; none when no line is usable.
std::optional<std::vector<std::string>> OwnCgroupPath(std::string_view self_cgroup, bool v2) {
  for (std::string_view line : Split(self_cgroup, '\n')) {
    const std::size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    const std::size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, first);
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (!NumberOf(id)) continue;  // the hierarchy's number
    if (v2) {
      if (id != "0" || !controllers.empty()) continue;
    } else {
      const std::vector<std::string_view> list = Split(controllers, ',');
      if (id == "0" || std::find(list.begin(), list.end(), "memory") == list.end()) continue;
    }
    return PathComponents(path);
  }
  return std::nullopt;
}

// "/" + the components joined.
std::string JoinedPath(const std::vector<std::string>& parts, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) out += "/" + parts[i];
  return out.empty() ? "/" : out;
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

std::vector<MemoryCgroupDir> MemoryCgroupDirs(const MemoryProbe& probe) {
  const std::filesystem::path root(probe.root);
  const std::string mountinfo = ReadSmallFile(root / "proc/self/mountinfo");
  const std::string self_cgroup = ReadSmallFile(root / "proc/self/cgroup");
  std::vector<MemoryCgroupDir> out;
  for (const bool v2 : {true, false}) {
    std::optional<CgroupMount> mount = FindCgroupMount(mountinfo, v2, root);
    if (!mount) {
      // No mountinfo to tell: where it is mounted on most machines, its own part unknown.
      mount = CgroupMount{root / (v2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory"),
                          v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory", std::nullopt};
    }
    const std::optional<std::vector<std::string>> own = OwnCgroupPath(self_cgroup, v2);
    // Visible: the process's cgroup is the mounted one or below it.
    const bool visible = own && mount->root && own->size() >= mount->root->size() &&
                         std::equal(mount->root->begin(), mount->root->end(), own->begin());
    if (!visible) {
      out.push_back({v2, mount->dir, mount->shown});
      continue;
    }
    // The leaf, then each ancestor up to the mount point.
    for (std::size_t depth = own->size(); depth + 1 > mount->root->size(); --depth) {
      std::filesystem::path dir = mount->dir;
      for (std::size_t i = mount->root->size(); i < depth; ++i) dir /= (*own)[i];
      out.push_back({v2, dir, JoinedPath(*own, depth)});
      if (depth == 0) break;
    }
  }
  return out;
}

std::optional<std::uint64_t> ReadOomKillCount(const MemoryProbe& probe) {
  bool seen_v2 = false;
  bool seen_v1 = false;
  for (const MemoryCgroupDir& cg : MemoryCgroupDirs(probe)) {
    // The leaf of each hierarchy only: the first entry of each.
    bool& seen = cg.v2 ? seen_v2 : seen_v1;
    if (seen) continue;
    seen = true;
    const std::string text =
        ReadSmallFile(cg.dir / (cg.v2 ? "memory.events" : "memory.oom_control"));
    if (const std::optional<std::uint64_t> kills = FieldOf(text, "oom_kill")) return kills;
  }
  return std::nullopt;
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
  // The cgroup whose limit is the lowest below the machine's: the process's own or an ancestor,
  // v2 or v1 ("max", or v1's absurd value for none, is no limit). Its memory.stat tells what of
  // it is in use (both versions count the cgroup's descendants there).
  std::optional<std::uint64_t> in_use;
  bool cgroup_limit = false;
  for (const MemoryCgroupDir& cg : MemoryCgroupDirs(probe)) {
    const std::optional<std::uint64_t> limit =
        NumberIn(cg.dir / (cg.v2 ? "memory.max" : "memory.limit_in_bytes"));
    if (!limit || *limit == 0 || (out.limit != 0 && *limit >= out.limit)) continue;
    out.limit = *limit;
    out.cgroup = cg.name;
    cgroup_limit = true;
    const std::string stat = ReadSmallFile(cg.dir / "memory.stat");
    in_use = cg.v2 ? SumOf(stat, "anon", "shmem") : SumOf(stat, "total_rss", "total_shmem");
    // cgroup v1 without hierarchy accounting: the cgroup's own.
    if (!in_use && !cg.v2) in_use = SumOf(stat, "rss", "shmem");
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
  // What this process holds itself (its datasets): anonymous and shared memory, in kB. Either
  // line missing or no number, or a sum past 64 bits as bytes, is none (a machine-wide refusal
  // stays retryable, as it was).
  const std::string status = ReadSmallFile(root / "proc/self/status");
  const std::optional<std::uint64_t> anon_kib = FieldOf(status, "RssAnon:");
  const std::optional<std::uint64_t> shmem_kib = FieldOf(status, "RssShmem:");
  constexpr std::uint64_t kMaxKib = std::numeric_limits<std::uint64_t>::max() / 1024;
  if (anon_kib && shmem_kib && *anon_kib <= kMaxKib && *shmem_kib <= kMaxKib - *anon_kib) {
    out.process_bytes = (*anon_kib + *shmem_kib) * 1024;
  }
  if (out.machine_wide && out.in_use > 0) out.own_in_use = std::min(out.process_bytes, out.in_use);
  return out;
}

Status CheckGangFits(std::string_view field, int ranks, std::uint64_t per_rank,
                     std::uint64_t rank0_extra, std::string_view what, std::uint64_t available,
                     std::string_view where) {
  if (ranks <= 1 || available == 0) return Status::Ok();
  const std::uint64_t need =
      SaturatingAdd(SaturatingMul(static_cast<std::uint64_t>(ranks), per_rank), rank0_extra);
  if (need <= available) return Status::Ok();
  std::string message = std::string(field) + ": " + std::to_string(ranks) + " local ranks need " +
                        std::to_string(ranks) + " x " + FormatMegabytes(per_rank) + " (" +
                        std::string(what) + ")";
  if (rank0_extra > 0) {
    message += " and " + FormatMegabytes(rank0_extra) + " more for rank 0's checkpoint copy";
  }
  return InvalidArgument(message + ", " + FormatMegabytes(need) + " in all; " + std::string(where) +
                         " " + FormatMegabytes(available) + " available");
}

std::uint64_t TrainingDataBytes(const TrainingData& data) {
  std::uint64_t bytes = 0;
  const auto add = [&bytes](std::uint64_t more) { bytes = SaturatingAdd(bytes, more); };
  if (data.idx) {
    for (const data::Dataset* ds : {&data.idx->train, &data.idx->test}) {
      add(ds->images.size());
      add(ds->labels.size());
    }
  }
  if (data.table) {
    for (const data::Table* t : {&data.table->train, &data.table->test}) {
      add(SaturatingMul(t->x.size(), sizeof(float)));
      add(SaturatingMul(t->labels.size(), sizeof(std::int32_t)));
      add(SaturatingMul(t->targets.size(), sizeof(float)));
    }
  }
  return bytes;
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
