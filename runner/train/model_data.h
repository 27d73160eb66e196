// The data a rank trains on, of any format (data::DatasetSpec), and the model that fits it: loads
// IDX as uint8 images (normalised per batch) and CSV/NPY into data::Tables, and resolves the
// model (--model-spec, or the preset --model built for the data's shape and classes), checked
// against the data before any rendezvous work. Owns no training.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runner/data/dataset_spec.h"
#include "runner/data/idx.h"
#include "runner/data/table.h"
#include "runner/model/model_spec.h"
#include "runner/train/checkpoint.h"
#include "runner/train/config.h"

namespace ringtrain::train {

// What a model sees of a dataset: each sample's shape and what it predicts.
struct DataShape {
  model::Shape input;
  int outputs = 0;  // classes, or target values per sample
  bool regression = false;
  std::string outputs_from;  // data::Table::classes_from
};

// The IDX images: 1 × rows × cols, `classes` outputs.
DataShape ShapeOf(const data::Dataset& ds, int classes);
// A Table's sample shape ({features}, {h, w} or {c, h, w}; more dimensions are flattened) and
// task. InvalidArgument naming the file for a shape no model input can take.
StatusOr<DataShape> ShapeOf(const data::Table& t);

// One rank's training and test data, loaded once: exactly one of `idx` and `table` is set.
struct TrainingData {
  data::DatasetSpec spec;
  struct Idx {
    data::Dataset train;
    data::Dataset test;
  };
  std::optional<Idx> idx;
  std::optional<data::TrainTest> table;
  DataShape shape;
  std::string description;  // for the log: "60000 training and 10000 test samples from DIR"

  const data::Dataset* idx_train() const { return idx ? &idx->train : nullptr; }
  const data::Dataset* idx_test() const { return idx ? &idx->test : nullptr; }
  const data::Table* table_train() const { return table ? &table->train : nullptr; }
  const data::Table* table_test() const { return table ? &table->test : nullptr; }
};

// An IDX directory's two splits, as every rank loads them and `ringtrain validate`/`run` check
// them: the labels against `classes`, the test images against the training images' size, a
// declared inputShape (its errors naming `shape_field`) against the images, which it may make
// flat (data::DeclaredFlat). A file that cannot be read is named under `file_context` when
// given ("spec.train.dataset.train").
StatusOr<TrainingData::Idx> LoadIdxSplits(const data::DatasetSpec& spec, int classes,
                                          std::string_view shape_field,
                                          std::string_view file_context = {});

// Loads `spec`: IDX with `idx_classes` classes (the spec's `classes` when set), CSV through
// data::LoadCsv and NPY through data::LoadNpy, a held-out test split (testFraction) drawn from
// `seed` and standardised with the training split's statistics. The spec's inputShape, when
// given, must be the data's (InvalidArgument naming dataset.inputShape).
StatusOr<TrainingData> LoadTrainingData(const data::DatasetSpec& spec, std::uint64_t seed,
                                        int idx_classes);

// The model to train on data of `shape`: config.model_spec, else the preset config.model.name
// (model::PresetSpec with the data's shape and classes); checked against the data (a permanent
// InvalidArgument naming the layer that does not fit) and its task (softmax_cross_entropy for
// classes, mse for regression).
StatusOr<model::ModelSpec> ResolveModelSpec(const TrainConfig& config, const DataShape& shape);

// The bytes a CPU rank's training state takes: weights, gradients and the optimizer's state
// (adam: two moments, sgd: a momentum buffer), one float each; with `checkpoint_copy` (rank 0
// with a checkpoint dir), also the copy of the weights and optimizer state a checkpoint is
// written from. What a batch takes is not counted here: see BatchMemory. Saturating: a count no
// memory holds is UINT64_MAX bytes, never a small wrapped number.
std::uint64_t TrainingStateBytes(std::uint64_t params, std::string_view optimizer,
                                 bool checkpoint_copy = false);

// What a CPU rank allocates, besides its training state, for batches of batch_size samples
// (config.batch_size, the job's batchSizePerReplica): the model's activations and backward
// buffers (model::ActivationBytes), the loader's prefetched batches and the evaluation's batch.
struct BatchMemory {
  int batch_size = 0;
  std::uint64_t bytes = 0;
};

// What the gradient reducer holds besides the gradients it reduces in place: the bookkeeping of
// its `ranges` gradient ranges and their buckets (GradReducer::MemoryBytes), which the bucket
// cap (--bucket-cap-bytes) and the slicing of big layers decide.
struct ReducerMemory {
  std::uint64_t ranges = 0;
  std::uint64_t bytes = 0;
};

// What this process may use (`limit`, MemoryLimitBytes; 0 = unknown) and how much of it is
// already in use and cannot be reclaimed when a model is checked (`in_use`, less than `limit`):
// the datasets loaded before it, and the other processes that share the limit.
struct MemoryBudget {
  std::uint64_t limit = 0;
  std::uint64_t in_use = 0;
  // `in_use` is the machine's (no limit of this process's own: `ringtrain run`, a pod without
  // resources.limits.memory): other processes hold part of it, and may free it. A model refused
  // only for what they hold is a retryable error, not a permanent one.
  bool machine_wide = false;
  // Of a machine-wide `in_use`, what this process holds itself (its datasets, loaded before the
  // model is checked; /proc/self/status RssAnon + RssShmem; never more than `in_use`): a
  // restart loads it again, so a model refused for it is refused permanently. Sibling ranks of
  // `ringtrain run` on the same machine are other processes here (their datasets too).
  std::uint64_t own_in_use = 0;
  // Whose limit `limit` is: the cgroup as /proc/self/cgroup names it ("/kubepods/pod1/c2"), or
  // the directory it was read from when the process's own cgroup path is unknown
  // ("/sys/fs/cgroup/memory"); empty when the machine's memory is the limit.
  std::string cgroup;
  // This process's own anonymous and shared memory (/proc/self/status RssAnon + RssShmem) in
  // any scope, 0 when it does not read: what a sibling rank of the same job holds too (its
  // datasets, its runtime) before its model is allocated.
  std::uint64_t process_bytes = 0;
};

// Where ReadMemoryBudget reads: `root` holds sys/fs/cgroup/..., proc/meminfo, proc/self/status,
// proc/self/cgroup and proc/self/mountinfo ("/" but in a test); `physical_bytes` is the
// machine's memory (0: sysconf's).
struct MemoryProbe {
  std::string root = "/";
  std::uint64_t physical_bytes = 0;
};

// This process's memory cgroups as this machine shows them: for cgroup v2 (the unified
// hierarchy at /sys/fs/cgroup) and v1 (the hierarchy with the memory controller), the process's
// own cgroup (from /proc/self/cgroup) as a directory under that hierarchy's mount point (from
// /proc/self/mountinfo: the part of the hierarchy mounted there), then each ancestor up to the
// mount point, leaf first. A process whose cgroup is not visible under the mount (or whose
// /proc/self/cgroup or mountinfo does not read or parse) gets the mount point alone: a
// container's own cgroup mounted at its root, as before. Every line is checked (a path with "."
// or ".." components, a field missing, a bad escape is no reading); a hierarchy not mounted
// has no entry. Nothing is checked to exist.
struct MemoryCgroupDir {
  bool v2 = false;
  std::filesystem::path dir;  // under the probe's root
  std::string name;           // the cgroup path, else the directory as the machine names it
};
std::vector<MemoryCgroupDir> MemoryCgroupDirs(const MemoryProbe& probe = {});

// How many processes the kernel's OOM killer has killed in this process's own cgroup (its leaf:
// cgroup v2 memory.events oom_kill, else v1 memory.oom_control oom_kill, Linux 4.13 and later);
// none when neither reads. Children started since share the count.
std::optional<std::uint64_t> ReadOomKillCount(const MemoryProbe& probe = {});

// This process's MemoryBudget: the limit is the smallest of the machine's memory and the limits
// (cgroup v2 memory.max, v1 memory.limit_in_bytes: a pod's resources.limits.memory) of its own
// cgroup and each ancestor that is visible (MemoryCgroupDirs), so a limit set on a parent (Slurm,
// systemd-run, a pod above its container) counts; what
// is in use is what reclaim cannot free, of the same scope as the limit: the cgroup's anonymous
// and shared memory (v2 memory.stat anon + shmem, v1 total_rss + total_shmem), or, when the
// machine's memory is the limit, MemTotal - MemAvailable of /proc/meminfo, of which this
// process's own is RssAnon + RssShmem of /proc/self/status (`own_in_use`). A file missing or
// unreadable, a value that is no number, or one that leaves nothing of the limit counts nothing
// in use: a job is never refused on a guess (nor refused permanently: an own figure that does
// not read counts none of what is in use as this process's own).
MemoryBudget ReadMemoryBudget(const MemoryProbe& probe = {});

// A model whose training state, with what its batches take, cannot be held: InvalidArgument,
// permanent (a restarted pod gets the same memory), naming the parameters and the bytes:
// "model.layers: 4,347,133,962 parameters need 69.6 GB for weights, gradients and optimizer state
// (adam); <why>". The batch's bytes are named beside the state's when they are at least a tenth
// of them: "... (adam) and 3.3 GB for the activations and input buffers of a batch of 4096
// (batchSizePerReplica); <why>"; the reducer's likewise: "... and 1.1 GB for the gradient
// reducer's bookkeeping of 20,000,000 ranges (--bucket-cap-bytes)".
Status TrainingStateDoesNotFit(std::uint64_t params, std::string_view optimizer,
                               std::string_view why, bool checkpoint_copy = false,
                               BatchMemory batch = {}, ReducerMemory reducer = {});

// Refuses, before anything is allocated, a training state that, with `batch`'s and `reducer`'s
// bytes, is larger than what `memory` leaves of its limit (a limit of 0: nothing is refused; an
// in-use figure not below the limit is no reading: the limit alone counts). Sums saturate.
// The message names the batch (and the reducer) also when the state alone would fit, and what
// is already in use when without it all would fit: "...; this process may use 2.0 GB in all,
// 1.2 GB of it already in use (the datasets and other processes)". That refusal is permanent
// (InvalidArgument) within a limit of the process's own (its cgroup holds its datasets, which a
// restart loads again). When what is in use is the machine's it is retryable (ResourceExhausted)
// only if all would fit once other processes freed theirs (need <= limit - own_in_use); if this
// process's own memory alone leaves too little it is permanent, and says so: "...; 11.0 GB of
// it this process's own (its datasets), which leaves too little even if other processes free
// theirs".
Status CheckTrainingStateFits(std::uint64_t params, std::string_view optimizer, MemoryBudget memory,
                              bool checkpoint_copy = false, BatchMemory batch = {},
                              ReducerMemory reducer = {});
// The same against `memory_bytes` with nothing of it in use.
Status CheckTrainingStateFits(std::uint64_t params, std::string_view optimizer,
                              std::uint64_t memory_bytes, bool checkpoint_copy = false,
                              BatchMemory batch = {}, ReducerMemory reducer = {});

// Refuses a gang of `ranks` ranks of one job that share one memory: `per_rank` bytes each and
// `rank0_extra` more for rank 0, against `available` bytes. InvalidArgument naming `field`
// (what sets the count): "spec.replicas: 2 local ranks need 2 x 542.3 MB (<what>) and 135.6 MB
// more for rank 0's checkpoint copy; <where> 1.1 GB available". Ranks of 1 or fewer, or an
// `available` of 0 (unknown), refuse nothing. Sums saturate.
Status CheckGangFits(std::string_view field, int ranks, std::uint64_t per_rank,
                     std::uint64_t rank0_extra, std::string_view what, std::uint64_t available,
                     std::string_view where);

// What the datasets of `data` hold in memory: the IDX images and labels, the tables' features,
// labels and targets, both splits.
std::uint64_t TrainingDataBytes(const TrainingData& data);

// The memory this process may use: ReadMemoryBudget().limit; 0 when unknown.
std::uint64_t MemoryLimitBytes();

// Whether `spec` is the preset config.model.name for data of `shape` (same architecture and
// initialisation): what old checkpoints, which record no architecture, may resume.
bool IsPreset(const TrainConfig& config, const DataShape& shape, const model::ModelSpec& spec);

// What a checkpoint of `spec` trained on data of `shape` records, and what its resume accepts.
ExpectedModel CheckpointModelOf(const model::ModelSpec& spec, const DataShape& shape, bool preset);

// The dropout seed of a step (model::Model::SeedDropout, GpuModel::SeedDropout): it depends only
// on the job's seed, the rank and the step's position in the data (epoch, step), so a resumed
// or recovered rank draws the masks it would have drawn, on either engine.
std::uint64_t DropoutSeed(std::uint64_t seed, int rank, int epoch, std::int64_t step);

}  // namespace ringtrain::train
