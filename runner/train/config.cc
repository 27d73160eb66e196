#include "runner/train/config.h"

#include "common/flags.h"
#include "common/fnv.h"
#include "runner/data/dataset_spec.h"
#include "runner/model/model_spec.h"

namespace ringtrain::train {
namespace {

constexpr char kEpilogue[] =
    "Rank and rendezvous come from RINGTRAIN_* (or torchrun's RANK, WORLD_SIZE,\n"
    "MASTER_ADDR, MASTER_PORT) environment variables.\n";

// The two specs as given (JSON), parsed once the flags are read.
struct SpecFlags {
  std::string model;
  std::string dataset;
};

// Every runner flag, one line each, writing into `c` (and `specs`): the one table the parser,
// the usage, the help test and the controller's RunnerArgs test agree on.
flags::FlagSet Flags(TrainConfig& c, SpecFlags& specs) {
  flags::FlagSet f("ringtrain-runner [flags]", kEpilogue);
  f.Choice("model", &c.model.name, contract::ModelNames(), "a preset model");
  f.String("model-spec", &specs.model, "a layer list (model_spec.h), instead of --model", "JSON");
  f.String("dataset", &c.dataset, "the dataset's directory (IDX)", "DIR");
  f.String("dataset-spec", &specs.dataset, "idx/csv/npy files, instead of --dataset", "JSON");
  f.Int("epochs", &c.epochs, "passes over the training set", {.min = 1});
  f.Int("batch-size", &c.batch_size, "samples per step, per replica", {.min = 1});
  f.Choice("optimizer", &c.optimizer.name, contract::OptimizerNames(), "the optimizer");
  f.Double("learning-rate", &c.learning_rate, "before scaling", {.min = 0});
  f.Double("momentum", &c.optimizer.momentum, "SGD momentum", {.min = 0});
  f.Double("weight-decay", &c.optimizer.weight_decay, "L2 penalty", {.min = 0});
  f.Enum("lr-scaling", &c.lr_scaling, "the learning rate times the world size, or not");
  f.Double("warmup-epochs", &c.warmup_epochs, "ramp to the scaled learning rate", {.min = 0});
  f.Enum("lr-schedule", &c.lr_schedule, "after warmup");
  f.Int("seed", &c.seed, "model init and shuffling", {.min = 0});
  f.String("checkpoint-dir", &c.checkpoint_dir, "empty = no checkpoints", "DIR");
  f.Int("checkpoint-every", &c.checkpoint_every, "steps between checkpoints", {.min = 1});
  f.Int("bucket-cap-bytes", &c.bucket_cap_bytes, "gradient bucket size", {.min = 4});
  f.Bool("overlap", &c.overlap, "all-reduce buckets during backward");
  f.Bool("slice-gradients", &c.slice_gradients, "all-reduce big gradients in row slices");
  f.Int("loader-workers", &c.loader_workers, "batch-assembling threads", {.min = 1});
  f.Int("prefetch", &c.prefetch, "batches assembled ahead", {.min = 2});
  f.Int("max-steps", &c.max_steps, "stop early; -1 = all epochs", {.min = -1});
  f.Bool("eval-every-epoch", &c.eval_every_epoch, "evaluate the test set after each epoch");
  f.String("result-file", &c.result_file, "rank 0 writes the final metrics here", "PATH");
  f.Int("step-sleep-ms", &c.step_sleep_ms, "testing aid: slow each step", {.min = 0});
  f.Enum("device", &c.device, "auto: cuda when a GPU is visible");
  f.Enum("backend", &c.backend, "auto: nccl on GPUs");
  f.Enum("precision", &c.precision, "GEMM/conv math on the GPU");
  f.Enum("input", &c.input, "the dataset resident on the GPU, or pinned host memory");
  f.Enum("cuda-graph", &c.cuda_graph, "capture the step in a CUDA graph");
  return f;
}

}  // namespace

std::vector<std::string> TrainFlagNames() {
  TrainConfig ignored;
  SpecFlags specs;
  return Flags(ignored, specs).Names();
}

StatusOr<TrainConfig> ParseTrainFlags(const std::vector<std::string>& args) {
  TrainConfig c;
  SpecFlags specs;
  flags::FlagSet f = Flags(c, specs);
  RETURN_IF_ERROR(f.Parse(args));
  // Callers that print the usage for --help ask flags::HelpRequested first (runner/main.cc);
  // anywhere else the usage is the answer.
  if (f.help_requested()) return InvalidArgument(f.Usage());
  // A layer list replaces the preset, a dataset spec the IDX directory: both at once is a
  // contradiction (--model mlp, the default, is no contradiction).
  if (!specs.model.empty()) {
    if (c.model.name != TrainConfig{}.model.name) {
      return InvalidArgument("--model-spec: not with --model " + c.model.name +
                             " (a preset; the spec is the model)");
    }
    ASSIGN_OR_RETURN(c.model_spec, model::ParseModelSpec(specs.model, "--model-spec"));
  }
  if (!specs.dataset.empty()) {
    if (c.dataset != TrainConfig{}.dataset) {
      return InvalidArgument("--dataset-spec: not with --dataset (the spec names the files)");
    }
    ASSIGN_OR_RETURN(c.dataset_spec, data::ParseDatasetSpec(specs.dataset, "--dataset-spec"));
  }
  return c;
}

std::vector<std::pair<std::string, std::string>> GangConfigFields(const TrainConfig& c) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto add = [&out](std::string_view key, std::string_view value) {
    out.emplace_back(std::string(key), std::string(value));
  };
  const auto num = [](double v) { return flags::ShortestNumber(v); };
  // The resolved layer list is the model (the runner resolves a preset against the data before
  // the rendezvous); without one, the preset and what it is built from. Initial weights are
  // not compared: rank 0 broadcasts its own.
  if (c.model_spec) {
    add("model", "[" + model::CanonicalString(*c.model_spec) + "]");
  } else {
    add("model", c.model.name);
    add("input", std::to_string(c.model.channels) + "x" + std::to_string(c.model.height) + "x" +
                     std::to_string(c.model.width));
    add("classes", std::to_string(c.model.classes));
    add("hidden", std::to_string(c.model.hidden));
  }
  add("dataset", data::DatasetSpecJson(DatasetSpecOf(c)));
  add("epochs", std::to_string(c.epochs));
  add("batch_size", std::to_string(c.batch_size));
  add("learning_rate", num(c.learning_rate));
  add("lr_scaling", contract::NameOf(c.lr_scaling));
  add("warmup_epochs", num(c.warmup_epochs));
  add("lr_schedule", contract::NameOf(c.lr_schedule));
  add("seed", std::to_string(c.seed));
  add("optimizer", c.optimizer.name);
  add("momentum", num(c.optimizer.momentum));
  add("beta1", num(c.optimizer.beta1));
  add("beta2", num(c.optimizer.beta2));
  add("eps", num(c.optimizer.eps));
  add("weight_decay", num(c.optimizer.weight_decay));
  // Every rank flushes its pipeline at a checkpoint step and evaluates together: the order of
  // collectives depends on these, as it does on the bucketing and the step count.
  add("checkpoint_every", std::to_string(c.checkpoint_every));
  add("bucket_cap_bytes", std::to_string(c.bucket_cap_bytes));
  add("overlap", c.overlap ? "true" : "false");
  add("slice_gradients", c.slice_gradients ? "true" : "false");
  add("max_steps", std::to_string(c.max_steps));
  add("eval_every_epoch", c.eval_every_epoch ? "true" : "false");
  add("device", contract::NameOf(c.device));
  add("backend", contract::NameOf(c.backend));
  add("precision", contract::NameOf(c.precision));
  return out;
}

std::string GangConfigString(const TrainConfig& c) {
  std::string out;
  for (const auto& [key, value] : GangConfigFields(c)) {
    if (!out.empty()) out += ';';
    out += key;
    out += '=';
    out += value;
  }
  return out;
}

std::string GangConfigDigest(const TrainConfig& config) {
  return Fnv1aHex(GangConfigString(config));
}

std::string TrainFlagsHelp() {
  TrainConfig defaults;
  SpecFlags specs;
  return Flags(defaults, specs).Usage();
}

}  // namespace ringtrain::train
