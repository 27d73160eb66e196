#include "runner/train/config.h"

#include <functional>
#include <map>
#include <set>
#include <type_traits>

#include "common/env.h"

namespace ringtrain::train {
namespace {

using Setter = std::function<Status(const std::string&, const std::string&)>;

// Every runner flag, by name, writing into `c`: the one list the parser, the help test and the
// controller's RunnerArgs test agree on.
std::map<std::string, Setter> Flags(TrainConfig& c) {
  auto str = [](std::string* out) -> Setter {
    return [out](const std::string&, const std::string& v) {
      *out = v;
      return Status::Ok();
    };
  };
  auto integer = [](auto* out, std::int64_t min) -> Setter {
    return [out, min](const std::string& f, const std::string& v) {
      ASSIGN_OR_RETURN(std::int64_t n, ParseInt(v, "--" + f));
      if (n < min) return InvalidArgument("--" + f + ": must be at least " + std::to_string(min));
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(n);
      return Status::Ok();
    };
  };
  auto number = [](double* out, double min) -> Setter {
    return [out, min](const std::string& f, const std::string& v) {
      ASSIGN_OR_RETURN(double n, ParseDouble(v, "--" + f));
      if (!(n >= min))
        return InvalidArgument("--" + f + ": must be at least " + std::to_string(min));
      *out = n;
      return Status::Ok();
    };
  };
  auto boolean = [](bool* out) -> Setter {
    return [out](const std::string& f, const std::string& v) {
      if (v == "true" || v == "1")
        *out = true;
      else if (v == "false" || v == "0")
        *out = false;
      else
        return InvalidArgument("--" + f + ": expected true or false, got '" + v + "'");
      return Status::Ok();
    };
  };
  auto one_of = [](std::string* out, std::vector<std::string> allowed) -> Setter {
    return [out, allowed](const std::string& f, const std::string& v) {
      for (const auto& a : allowed) {
        if (a == v) {
          *out = v;
          return Status::Ok();
        }
      }
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return InvalidArgument("--" + f + ": '" + v + "' is not one of " + list);
    };
  };
  // A mode: parsed here once into its enum, by the names flags and manifests share.
  auto mode = [one_of](auto* out) -> Setter {
    using E = std::remove_pointer_t<decltype(out)>;
    return [out, one_of](const std::string& f, const std::string& v) {
      if (auto e = contract::EnumFromName<E>(v)) {
        *out = *e;
        return Status::Ok();
      }
      std::string ignored;
      return one_of(&ignored, contract::NamesOf<E>())(f, v);
    };
  };
  return {
      {"model", one_of(&c.model.name, contract::ModelNames())},
      {"dataset", str(&c.dataset)},
      {"model-spec",
       [&c](const std::string& f, const std::string& v) -> Status {
         ASSIGN_OR_RETURN(c.model_spec, model::ParseModelSpec(v, "--" + f));
         return Status::Ok();
       }},
      {"dataset-spec",
       [&c](const std::string& f, const std::string& v) -> Status {
         ASSIGN_OR_RETURN(c.dataset_spec, data::ParseDatasetSpec(v, "--" + f));
         return Status::Ok();
       }},
      {"epochs", integer(&c.epochs, 1)},
      {"batch-size", integer(&c.batch_size, 1)},
      {"optimizer", one_of(&c.optimizer.name, contract::OptimizerNames())},
      {"learning-rate", number(&c.learning_rate, 0)},
      {"momentum", number(&c.optimizer.momentum, 0)},
      {"weight-decay", number(&c.optimizer.weight_decay, 0)},
      {"lr-scaling", mode(&c.lr_scaling)},
      {"warmup-epochs", number(&c.warmup_epochs, 0)},
      {"lr-schedule", mode(&c.lr_schedule)},
      {"seed", integer(&c.seed, 0)},
      {"checkpoint-dir", str(&c.checkpoint_dir)},
      {"checkpoint-every", integer(&c.checkpoint_every, 1)},
      {"bucket-cap-bytes", integer(&c.bucket_cap_bytes, 4)},
      {"overlap", boolean(&c.overlap)},
      {"slice-gradients", boolean(&c.slice_gradients)},
      {"loader-workers", integer(&c.loader_workers, 1)},
      {"prefetch", integer(&c.prefetch, 2)},
      {"max-steps", integer(&c.max_steps, -1)},
      {"eval-every-epoch", boolean(&c.eval_every_epoch)},
      {"result-file", str(&c.result_file)},
      {"step-sleep-ms", integer(&c.step_sleep_ms, 0)},
      {"device", mode(&c.device)},
      {"backend", mode(&c.backend)},
      {"precision", mode(&c.precision)},
      {"input", mode(&c.input)},
      {"cuda-graph", mode(&c.cuda_graph)},
  };
}

}  // namespace

std::vector<std::string> TrainFlagNames() {
  TrainConfig ignored;
  std::vector<std::string> names;
  for (const auto& [name, setter] : Flags(ignored)) names.push_back(name);
  return names;
}

StatusOr<TrainConfig> ParseTrainFlags(const std::vector<std::string>& args) {
  TrainConfig c;
  const std::map<std::string, Setter> flags = Flags(c);
  std::set<std::string> given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) return InvalidArgument("unexpected argument '" + a + "'");
    std::string name = a.substr(2);
    std::string value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return InvalidArgument("--" + name + ": missing value");
    }
    auto it = flags.find(name);
    if (it == flags.end()) return InvalidArgument("--" + name + ": unknown flag");
    RETURN_IF_ERROR(it->second(name, value));
    given.insert(name);
  }
  // A layer list replaces the preset, a dataset spec the IDX directory: both at once is a
  // contradiction (--model mlp, the default, is no contradiction).
  if (given.count("model-spec") != 0 && c.model.name != TrainConfig{}.model.name) {
    return InvalidArgument("--model-spec: not with --model " + c.model.name +
                           " (a preset; the spec is the model)");
  }
  if (given.count("dataset-spec") != 0 && given.count("dataset") != 0) {
    return InvalidArgument("--dataset-spec: not with --dataset (the spec names the files)");
  }
  return c;
}

std::string TrainFlagsHelp() {
  return "usage: ringtrain-runner [--model mlp|cnn] [--dataset DIR] [--epochs N]\n"
         "  [--model-spec JSON (a layer list, instead of --model)]\n"
         "  [--dataset-spec JSON (idx/csv/npy files, instead of --dataset)]\n"
         "  [--batch-size N (per replica)] [--optimizer sgd|adam] [--learning-rate X]\n"
         "  [--momentum X] [--weight-decay X] [--lr-scaling linear|none] [--warmup-epochs X]\n"
         "  [--lr-schedule constant|cosine] [--seed N] [--checkpoint-dir DIR]\n"
         "  [--checkpoint-every STEPS] [--bucket-cap-bytes N] [--overlap true|false]\n"
         "  [--slice-gradients true|false]\n"
         "  [--loader-workers N] [--prefetch N] [--max-steps N] [--result-file PATH]\n"
         "  [--eval-every-epoch true|false] [--step-sleep-ms N (testing aid)]\n"
         "  [--device auto|cpu|cuda] [--backend auto|nccl|tcp] [--precision fp32|tf32]\n"
         "  [--input device|host] [--cuda-graph auto|on|off]\n"
         "Rank and rendezvous come from RINGTRAIN_* (or torchrun's RANK, WORLD_SIZE,\n"
         "MASTER_ADDR, MASTER_PORT) environment variables.\n";
}

}  // namespace ringtrain::train
