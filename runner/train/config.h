// The runner's training configuration and the env contract of DESIGN.md, parsed from
// command-line flags and RINGTRAIN_* / torchrun variables. Errors name the flag or variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/runner_env.h"
#include "common/runner_flags.h"
#include "common/status.h"
#include "runner/data/dataset_spec.h"
#include "runner/model/model.h"
#include "runner/model/model_spec.h"
#include "runner/model/optimizer.h"

namespace ringtrain::train {

struct TrainConfig {
  model::ModelConfig model;
  model::OptimizerConfig optimizer;
  std::string dataset = "/usr/share/datasets/fashion-mnist";
  // --model-spec: a user-defined layer list (model_spec.h); unset = the preset model.name, built
  // as PresetSpec for the dataset's shape and classes.
  std::optional<model::ModelSpec> model_spec;
  // --dataset-spec (dataset_spec.h); unset = the IDX directory `dataset` (DatasetSpecOf).
  std::optional<data::DatasetSpec> dataset_spec;
  int epochs = 10;
  int batch_size = 64;  // per replica; the global batch is batch_size × world size
  double learning_rate = 0.001;
  contract::LrScaling lr_scaling = contract::LrScaling::kLinear;  // lr × world size (Goyal)
  double warmup_epochs = 1;                                       // ramp from lr to the scaled lr
  contract::LrSchedule lr_schedule = contract::LrSchedule::kCosine;  // decay to 0 after warmup
  std::uint64_t seed = 42;
  std::string checkpoint_dir;  // empty = no checkpoints
  std::int64_t checkpoint_every = 500;
  std::size_t bucket_cap_bytes = 256 * 1024;
  bool overlap = true;  // all-reduce buckets during backward, on the comm thread
  // Big weight gradients produced and all-reduced in row slices (train/bucket_plan.h), so even
  // the layer backward reaches last overlaps its own all-reduce.
  bool slice_gradients = true;
  int loader_workers = 1;
  int prefetch = 4;
  std::int64_t max_steps = -1;  // stop early (tests, benchmarks); -1 = all epochs
  bool eval_every_epoch = true;
  std::string result_file;         // rank 0 writes the final metrics here as JSON
  std::int64_t step_sleep_ms = 0;  // testing aid: slow each step so faults can be injected

  // Where and how to compute (GPU runner, issue 4).
  contract::Device device = contract::Device::kAuto;           // auto: cuda when a GPU is visible
  contract::Backend backend = contract::Backend::kAuto;        // auto: nccl on GPUs, one per rank
  contract::Precision precision = contract::Precision::kFp32;  // GEMM/conv math on the GPU
  contract::Input input = contract::Input::kDevice;  // dataset resident on the GPU, or pinned
  contract::CudaGraph cuda_graph = contract::CudaGraph::kAuto;  // capture the step in a graph
};

// The dataset to train on: --dataset-spec, else the IDX directory --dataset.
inline data::DatasetSpec DatasetSpecOf(const TrainConfig& c) {
  return c.dataset_spec ? *c.dataset_spec : data::IdxDatasetSpec(c.dataset);
}

// What must be identical on every rank of a gang, as one canonical line: the model (the
// resolved layer list when there is one), the dataset spec, epochs, batch size, learning rate
// and its schedule, seed, optimizer, checkpoint interval, gradient bucketing, max steps,
// evaluation, device, backend and precision. Left out is what is one rank's own or only how
// fast it computes: rank, addresses and ports (the env, not here), --checkpoint-dir and
// --result-file (rank 0's), --step-sleep-ms (a testing aid), --loader-workers, --prefetch,
// --input, --cuda-graph, and the model's per-rank fields (dropout seed, max batch).
std::string GangConfigString(const TrainConfig& config);
// The same, field by field ("batch_size", "64"), in the line's order: what rank 0 names when
// a rank's configuration differs from its own.
std::vector<std::pair<std::string, std::string>> GangConfigFields(const TrainConfig& config);
// 16 hex digits: FNV-1a (64 bits) of GangConfigString, the same on every platform and build.
std::string GangConfigDigest(const TrainConfig& config);

// The rank's identity and rendezvous (common/runner_env.h: one builder, one parser).
using RankEnv = contract::RankEnv;
inline StatusOr<RankEnv> RankEnvFromEnvironment() { return contract::RankEnvFromEnvironment(); }
// --flag=value or --flag value (common/flags.h); unknown flags are errors naming the flag.
StatusOr<TrainConfig> ParseTrainFlags(const std::vector<std::string>& args);
// The generated usage, every flag with its default.
std::string TrainFlagsHelp();
// The names of every flag ParseTrainFlags accepts (without "--").
std::vector<std::string> TrainFlagNames();

}  // namespace ringtrain::train
