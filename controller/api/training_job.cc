// Defaults and serialisation of the TrainingJob API: status as JSON, the runner's flags, the
// default resources and the name rule. Parsing lives in training_job_parse.cc.
#include "controller/api/training_job.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/env.h"
#include "common/flags.h"
#include "common/json_fields.h"
#include "common/runner_env.h"
#include "common/runner_flags.h"
#include "common/saturating.h"
#include "common/utf8.h"

namespace ringtrain::api {

using nlohmann::json;

std::string StatusToJson(const JobStatus& s) {
  json j = json::object();
  if (!s.phase.empty()) j["phase"] = s.phase;
  j["conditions"] = json::array();
  for (const auto& c : s.conditions) {
    j["conditions"].push_back({{"type", c.type},
                               {"status", c.status},
                               {"reason", c.reason},
                               {"message", c.message},
                               {"lastTransitionTime", c.last_transition_time}});
  }
  j["replicas"] = {{"pending", s.replicas.pending},
                   {"running", s.replicas.running},
                   {"succeeded", s.replicas.succeeded},
                   {"failed", s.replicas.failed}};
  j["restarts"] = s.restarts;
  j["attempt"] = s.attempt;
  if (!s.start_time.empty()) j["startTime"] = s.start_time;
  if (!s.completion_time.empty()) j["completionTime"] = s.completion_time;
  if (s.observed_generation > 0) j["observedGeneration"] = s.observed_generation;
  if (s.progress) {
    j["progress"] = {{"step", s.progress->step},
                     {"epoch", s.progress->epoch},
                     {"samplesPerSecond", s.progress->samples_per_second},
                     {"loss", s.progress->loss},
                     {"updatedAt", s.progress->updated_at}};
    if (s.progress->test_accuracy >= 0) j["progress"]["testAccuracy"] = s.progress->test_accuracy;
    if (s.progress->test_mse >= 0) j["progress"]["testMSE"] = s.progress->test_mse;
  }
  if (!s.avoided_nodes.empty()) {
    json list = json::array();
    for (const auto& a : s.avoided_nodes) {
      list.push_back({{"node", a.node},
                      {"reason", a.reason},
                      {"attempt", a.attempt},
                      {"required", a.required}});
    }
    j["avoidedNodes"] = list;
  }
  if (s.in_place_recoveries > 0) j["inPlaceRecoveries"] = s.in_place_recoveries;
  if (!s.replaced_pods.empty()) j["replacedPods"] = s.replaced_pods;
  if (const RecoveryAccount& r = s.recovery; r != RecoveryAccount{}) {
    j["recovery"] = {{"inPlace", r.in_place},
                     {"gangRestarts", r.gang_restarts},
                     {"fromCheckpoint", r.from_checkpoint},
                     {"stepsLost", r.steps_lost},
                     {"secondsWithoutTraining", r.seconds_without_training},
                     {"attempt",
                      {{"inPlace", r.attempt_in_place},
                       {"stepsLost", r.attempt_steps_lost},
                       {"seconds", r.attempt_seconds}}}};
    if (r.restart_from_step >= 0) {
      j["recovery"]["pendingRestart"] = {{"fromStep", r.restart_from_step}, {"at", r.restarted_at}};
    }
  }
  if (s.last_failure) {
    j["lastFailure"] = {{"rank", s.last_failure->rank},
                        {"exitCode", s.last_failure->exit_code},
                        {"reason", s.last_failure->reason},
                        {"message", s.last_failure->message}};
  }
  return j.dump();
}

std::string ModelSpecJson(const model::ModelSpec& spec) {
  using model::LayerKind;
  json input = json::array({spec.input.c});
  if (spec.input.h != 1 || spec.input.w != 1) input = {spec.input.c, spec.input.h, spec.input.w};
  json layers = json::array();
  for (const model::LayerSpec& l : spec.layers) {
    const std::string name(model::NameOf(l.kind));
    switch (l.kind) {
      case LayerKind::kDense:
        layers.push_back({{name, {{"units", l.units}}}});
        break;
      case LayerKind::kConv2d:
        layers.push_back({{name,
                           {{"filters", l.filters},
                            {"kernel", l.kernel},
                            {"stride", l.stride},
                            {"padding", l.padding == model::Padding::kSame ? "same" : "valid"}}}});
        break;
      case LayerKind::kMaxPool2d:
      case LayerKind::kAvgPool2d:
        layers.push_back({{name, {{"pool", l.pool}, {"stride", l.stride}}}});
        break;
      case LayerKind::kDropout:
        layers.push_back({{name, {{"rate", l.rate}}}});
        break;
      default:
        layers.push_back(name);
        break;
    }
  }
  return json{{"input", input}, {"layers", layers}, {"loss", std::string(model::NameOf(spec.loss))}}
      .dump();
}

DataShape DeclaredDataShape(const TrainSpec& t) {
  // The task is always known from the spec, as the runner takes it: a directory is IDX
  // (classification), an object says it or defaults to classification. So the loss is checked
  // against it even when neither the sample shape nor the classes are declared.
  DataShape shape;
  shape.task = model::Task::kClassification;
  // A directory of IDX files: the ranks give the model 10 classes (runner --model's, which the
  // operator never sets), and refuse labels beyond them. Left unknown, a layer list of another
  // width was created as pods that every rank refused (review).
  if (!t.dataset_spec) {
    shape.outputs = 10;
    return shape;
  }
  const data::DatasetSpec& d = *t.dataset_spec;
  const std::vector<int>& dims = d.input_shape;
  // As the ranks read the data (model::InputShapeOf): [h, w] is one channel of h x w, [c, h, w]
  // as it is, [features] and any other rank flat.
  if (!dims.empty()) {
    std::vector<std::size_t> sizes(dims.begin(), dims.end());
    std::size_t values = 1;
    for (const std::size_t d : sizes) values = SaturatingMul(values, d);
    if (values <= static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      shape.input = model::InputShapeOf(sizes, values);
    }
  }
  if (d.task == data::Task::Kind::kClassification) shape.outputs = d.classes;
  // IDX files without `classes`: the ranks' 10, as for a directory.
  if (d.format == data::DatasetFormat::kIdx && shape.outputs <= 0) shape.outputs = 10;
  if (d.task != data::Task::Kind::kClassification) shape.task = model::Task::kRegression;
  return shape;
}

StatusOr<model::ShapeReport> ResolveModel(TrainSpec* t, const std::optional<DataShape>& data) {
  const std::string root = "spec.train.model";
  auto in_field = [&](const Status& st) { return InvalidArgument(root + "." + st.message()); };
  if (t->model_json.empty()) {
    // A preset: the runner builds it for its dataset (Fashion-MNIST when nothing says otherwise)
    // and refuses it for a regression.
    if (data && data->task == model::Task::kRegression) {
      return InvalidArgument(root + ": the preset " + t->model +
                             " classifies, and the dataset is a regression one (give a layer "
                             "list with \"loss: mse\")");
    }
    const model::Shape input = data && data->input ? *data->input : model::Shape{1, 28, 28};
    const int classes = data && data->outputs > 0 ? data->outputs : 10;
    auto preset = model::PresetSpec(t->model, input, classes);
    if (!preset.ok()) {
      // "model: unknown preset ..." or a layer that does not fit the input ("layers[5] ...").
      const std::string& why = preset.status().message();
      if (why.rfind("model: ", 0) == 0) return InvalidArgument(root + why.substr(5));
      return in_field(preset.status());
    }
    auto report = model::CheckAgainstDataset(*preset, input, model::Task::kClassification, classes);
    if (!report.ok()) return in_field(report.status());
    return report;
  }
  json doc = json::parse(t->model_json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return InvalidArgument(root + ": must be an object");
  if (auto it = doc.find("input"); it == doc.end() || it->is_null()) {
    if (!data || !data->input) {
      return InvalidArgument(root +
                             ".input: required: the dataset's sample shape is not known here "
                             "(give spec.train.model.input or spec.train.dataset.inputShape)");
    }
    const model::Shape& in = *data->input;
    doc["input"] = in.h == 1 && in.w == 1 ? json::array({in.c}) : json::array({in.c, in.h, in.w});
  }
  ASSIGN_OR_RETURN(model::ModelSpec spec, model::ParseModelSpec(doc.dump(), root));
  StatusOr<model::ShapeReport> report = model::InferShapes(spec);
  if (report.ok() && data) {
    // Unknown outputs: the output is checked for being flat only; an unknown task, the loss not.
    const model::Task loss_task =
        spec.loss == model::Loss::kMse ? model::Task::kRegression : model::Task::kClassification;
    const model::Task task = data->task.value_or(loss_task);
    if (data->outputs == 0 && task == model::Task::kClassification && report->output.c < 2 &&
        report->output.h == 1 && report->output.w == 1 && spec.loss != model::Loss::kMse) {
      // The dataset's classes are not declared: the model's own width is what falls short.
      report = InvalidArgument(
          "loss: softmax_cross_entropy needs at least 2 classes, the model "
          "outputs " +
          std::to_string(report->output.c) + " unit(s)");
    } else {
      report = model::CheckAgainstDataset(spec, data->input.value_or(spec.input), task,
                                          data->outputs > 0 ? data->outputs : report->output.c,
                                          data->outputs_from);
    }
  }
  if (!report.ok()) return in_field(report.status());
  // The list goes to each rank as one argument (--model-spec), which Linux caps at 128 KiB
  // (MAX_ARG_STRLEN, with its NUL): a longer one would fail every start with E2BIG.
  constexpr std::size_t kMaxArgBytes = 128 * 1024;
  if (const std::size_t bytes = ModelSpecJson(spec).size(); bytes >= kMaxArgBytes) {
    return InvalidArgument(root + ".layers: " + std::to_string(spec.layers.size()) +
                           " layers make " + std::to_string(bytes) +
                           " bytes of the ranks' --model-spec argument, and Linux takes at most " +
                           std::to_string(kMaxArgBytes - 1) + " in one argument");
  }
  t->model_spec = std::move(spec);
  return report;
}

std::vector<std::string> RunnerArgs(const JobSpec& spec, const std::string& checkpoint_dir) {
  const TrainSpec& t = spec.train;
  const auto num = [](double v) { return flags::ShortestNumber(v); };
  std::vector<std::string> args;
  if (t.model_spec) {
    args = {"--model-spec", ModelSpecJson(*t.model_spec)};
  } else if (!t.model_json.empty()) {
    args = {"--model-spec", t.model_json};  // not resolved: the runner names what is missing
  } else {
    args = {"--model", t.model};
  }
  if (t.dataset_spec) {
    args.insert(args.end(), {"--dataset-spec", data::DatasetSpecJson(*t.dataset_spec)});
  } else {
    args.insert(args.end(), {"--dataset", t.dataset});
  }
  std::vector<std::string> rest = {
      "--epochs", std::to_string(t.epochs), "--batch-size",
      std::to_string(t.batch_size_per_replica), "--optimizer", t.optimizer, "--learning-rate",
      num(t.learning_rate), "--momentum", num(t.momentum), "--weight-decay", num(t.weight_decay),
      "--lr-scaling", std::string(contract::NameOf(t.lr_scaling)), "--warmup-epochs",
      num(t.warmup_epochs), "--lr-schedule", std::string(contract::NameOf(t.lr_schedule)), "--seed",
      std::to_string(t.seed), "--checkpoint-every", std::to_string(spec.checkpoint.every_steps),
      // gpusPerReplica 0 = CPU; otherwise every rank owns a GPU.
      "--device",
      std::string(contract::NameOf(spec.gpus_per_replica > 0 ? contract::Device::kCuda
                                                             : contract::Device::kCpu)),
      "--backend", std::string(contract::NameOf(spec.backend))};
  args.insert(args.end(), rest.begin(), rest.end());
  if (!checkpoint_dir.empty()) {
    args.push_back("--checkpoint-dir");
    args.push_back(checkpoint_dir);
  }
  return args;
}

namespace {

// spec.template's pod spec; nullopt when there is none (or it is no object).
std::optional<json> TemplatePodSpec(const JobSpec& spec) {
  if (spec.pod_template_json.empty()) return std::nullopt;
  json tmpl = json::parse(spec.pod_template_json, nullptr, /*allow_exceptions=*/false);
  if (!tmpl.is_object()) return std::nullopt;
  const auto pod = tmpl.find("spec");
  if (pod == tmpl.end() || !pod->is_object()) return std::nullopt;
  return std::move(*pod);
}

// spec.template's runner container: the last container named "runner", as the pod builder
// takes it; nullopt when there is none.
std::optional<json> TemplateRunner(const JobSpec& spec) {
  const std::optional<json> pod = TemplatePodSpec(spec);
  if (!pod) return std::nullopt;
  const auto containers = pod->find("containers");
  if (containers == pod->end() || !containers->is_array()) return std::nullopt;
  const json* runner = nullptr;
  for (const auto& c : *containers) {
    if (c.is_object() && c.value("name", json()) == "runner") runner = &c;
  }
  if (runner == nullptr) return std::nullopt;
  return *runner;
}

// spec.template's runner container's env entry for the variable `name`: the last entry of the
// name, the one a container gets; nullopt when it has none.
std::optional<json> TemplateRunnerEnvEntry(const JobSpec& spec, std::string_view name) {
  const std::optional<json> runner = TemplateRunner(spec);
  if (!runner) return std::nullopt;
  const auto env = runner->find("env");
  if (env == runner->end() || !env->is_array()) return std::nullopt;
  const json* set = nullptr;
  for (const auto& e : *env) {
    if (e.is_object() && e.value("name", json()) == name) set = &e;
  }
  if (set == nullptr) return std::nullopt;
  return *set;
}

// The plain value that entry gives; nullopt when none, or only a reference (valueFrom, envFrom:
// not resolved here).
std::optional<std::string> TemplateRunnerEnv(const JobSpec& spec, std::string_view name) {
  const std::optional<json> set = TemplateRunnerEnvEntry(spec, name);
  if (!set) return std::nullopt;
  const auto value = set->find("value");
  if (value == set->end() || !value->is_string()) return std::nullopt;
  return value->get<std::string>();
}

// A runner's seconds variable as the runner reads it: an integer from `min` to 86400.
std::optional<Duration> EnvSeconds(const std::string& value, int min) {
  if (value.empty() || value.size() > 5 ||
      value.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int seconds = std::stoi(value);
  if (seconds < min || seconds > 86400) return std::nullopt;
  return std::chrono::seconds(seconds);
}

}  // namespace

Duration CollectiveTimeoutFor(const JobSpec& spec) {
  const auto value = TemplateRunnerEnv(spec, contract::kEnvCollectiveTimeout);
  if (!value) return contract::kCollectiveTimeout;
  return ParseCollectiveTimeout(*value).value_or(contract::kCollectiveTimeout);
}

std::optional<Duration> ParseRecoveryTimeout(const std::string& value) {
  // As the runner reads it (common/runner_env.cc): "" is unset, else strtoll's whole string.
  if (value.empty()) return std::nullopt;
  const auto seconds = ParseInt(value, contract::kEnvRecoveryTimeout);
  if (!seconds.ok() || *seconds < 0 || *seconds > 86400) return std::nullopt;
  return std::chrono::seconds(*seconds);
}

bool TemplateGivesTheGraceWork(const JobSpec& spec) {
  const std::optional<json> pod = TemplatePodSpec(spec);
  if (!pod) return false;
  if (const auto cs = pod->find("containers"); cs != pod->end() && cs->is_array()) {
    for (const auto& c : *cs) {
      if (!c.is_object()) continue;
      if (c.value("name", json()) != "runner") return true;  // a sidecar
      const auto life = c.find("lifecycle");
      if (life != c.end() && life->is_object() && life->contains("preStop")) return true;
    }
  }
  // A native sidecar: an init container that runs beside the others.
  if (const auto init = pod->find("initContainers"); init != pod->end() && init->is_array()) {
    for (const auto& c : *init) {
      if (c.is_object() && c.value("restartPolicy", json()) == "Always") return true;
    }
  }
  return false;
}

bool TemplateRunnerSetsEnv(const JobSpec& spec, std::string_view name) {
  return TemplateRunnerEnvEntry(spec, name).has_value();
}

bool TemplateRunnerSetsResources(const JobSpec& spec) {
  const std::optional<json> runner = TemplateRunner(spec);
  if (!runner) return false;
  const auto r = runner->find("resources");
  if (r == runner->end() || !r->is_object()) return false;
  for (const char* kind : {"requests", "limits"}) {
    const auto k = r->find(kind);
    if (k != r->end() && k->is_object() && !k->empty()) return true;
  }
  return false;
}

bool MayRecoverInPlace(const JobSpec& spec) {
  // spec.command images know no recovery protocol; the CUDA engine cannot recover in place yet.
  return spec.command.empty() && spec.run_policy.recovery == "InPlace" &&
         spec.gpus_per_replica == 0;
}

Duration RecoveryTimeoutFor(const JobSpec& spec) {
  if (!MayRecoverInPlace(spec)) return Duration(0);
  // The template's own value, which the operator passes on (0: no in-place recovery).
  if (const auto value = TemplateRunnerEnv(spec, contract::kEnvRecoveryTimeout)) {
    if (const auto set = ParseRecoveryTimeout(*value)) return *set;
  }
  return contract::kRecoveryTimeout;
}

std::optional<Duration> ParseCollectiveTimeout(const std::string& value) {
  return EnvSeconds(value, 1);
}

bool IsTerminal(const std::string& phase) { return phase == "Succeeded" || phase == "Failed"; }

std::string IgnoredRunnerCommand(const JobSpec& spec) {
  const std::optional<json> runner = TemplateRunner(spec);
  if (!runner) return "";
  const json& c = *runner;
  // An empty or null list (a Helm template's unset value) asks for nothing.
  std::vector<std::string> set;
  for (const char* field : {"command", "args"}) {
    if (const auto it = c.find(field); it != c.end() && it->is_array() && !it->empty()) {
      set.emplace_back(field);
    }
  }
  if (set.empty()) return "";
  const std::string what = set.size() == 2 ? "command and args are" : set[0] + " is";
  return "spec.template.spec.containers[runner]: " + what + " ignored: every replica runs " +
         (spec.command.empty() ? "the built-in runner on spec.train (set spec.command to run a "
                                 "program of your own)"
                               : "spec.command, which is its whole command line");
}

std::string IgnoredMomentum(const JobSpec& spec) {
  const TrainSpec& t = spec.train;
  // The default (0.9, Adam's own beta1) is every job's: only another value was asked for.
  if (!spec.command.empty() || t.optimizer != "adam" || t.momentum == TrainSpec{}.momentum) {
    return "";
  }
  char value[32];
  std::snprintf(value, sizeof(value), "%g", t.momentum);
  return std::string("spec.train.momentum: ") + value +
         " is not used: it is optimizer sgd's; adam's first-moment decay (beta1) is 0.9";
}

namespace {

// The runner container's env entries of the names every replica gets from the operator (its
// rank, the world, the master, torchrun's settings for a program of the user's, the gang's
// token, POD_IP): replaced by the operator's values, in pods and under `ringtrain run`, named
// once each. RINGTRAIN_RECOVERY_TIMEOUT_SECONDS is not (it is passed on: IgnoredRecoveryTimeout),
// nor a timeout the operator leaves at its default (the template's is the rank's).
std::string ShadowedRunnerEnv(const JobSpec& spec) {
  const std::optional<json> runner = TemplateRunner(spec);
  if (!runner) return "";
  const auto env = runner->find("env");
  if (env == runner->end() || !env->is_array()) return "";
  contract::RankEnv rank_env;
  rank_env.token = "set";
  rank_env.gang_gate = "set";
  rank_env.image = "set";
  rank_env.launcher = !spec.command.empty();
  // The gang gate's wait, whenever the placement is bounded (schedulingTimeoutSeconds, 600 by
  // default, or a deadline): the pod builder's own value then.
  if (spec.run_policy.scheduling_timeout_seconds > 0 || spec.run_policy.active_deadline_seconds) {
    rank_env.gang_gate_timeout = contract::kGangGateTimeout + std::chrono::seconds(1);
  }
  std::set<std::string> ours = {contract::kEnvToken, "POD_IP"};
  for (const auto& [name, value] : contract::RankEnvVars(rank_env)) ours.insert(name);
  ours.erase(contract::kEnvRecoveryTimeout);
  std::vector<std::string> named;
  for (const auto& e : *env) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) continue;
    const std::string name = e["name"].get<std::string>();
    if (ours.contains(name) && std::find(named.begin(), named.end(), name) == named.end()) {
      named.push_back(name);
    }
  }
  if (named.empty()) return "";
  std::string list;
  for (const auto& n : named) list += (list.empty() ? "" : ", ") + n;
  return "spec.template.spec.containers[runner].env: " + list +
         (named.size() == 1 ? " is" : " are") +
         " ignored: every replica gets the operator's value (its rank, the gang's world and "
         "master" +
         (spec.command.empty() ? "" : ", torchrun's settings") + ")";
}

}  // namespace

std::vector<std::string> IgnoredTemplateFields(const JobSpec& spec) {
  std::vector<std::string> out;
  const std::optional<json> pod = TemplatePodSpec(spec);
  if (!pod) return out;
  const std::string trains = !spec.command.empty() ? "spec.command, in spec.image"
                                                   : "the built-in runner on spec.train (set "
                                                     "spec.image and spec.command to run a "
                                                     "program of your own)";
  if (const std::optional<json> runner = TemplateRunner(spec)) {
    if (const auto image = runner->find("image");
        image != runner->end() && image->is_string() && !image->get<std::string>().empty()) {
      out.push_back("spec.template.spec.containers[runner].image: " + image->get<std::string>() +
                    " is ignored: every replica runs " + trains);
    }
  }
  if (const auto policy = pod->find("restartPolicy");
      policy != pod->end() && policy->is_string() && *policy != "Never") {
    out.push_back("spec.template.spec.restartPolicy: " + policy->get<std::string>() +
                  " is ignored: a replica's pod is never restarted in place (restartPolicy "
                  "Never); a failed replica is replaced, or its gang restarted "
                  "(runPolicy.recovery, backoffLimit; runPolicy.restartPolicy: OnFailure for "
                  "every failure but a missing program, not only exit codes 128-255)");
  }
  if (std::string env = ShadowedRunnerEnv(spec); !env.empty()) out.push_back(std::move(env));
  const auto containers = pod->find("containers");
  if (containers == pod->end() || !containers->is_array()) return out;
  for (const auto& c : *containers) {
    if (!c.is_object() || c.value("name", json()) == "runner") continue;
    const auto resources = c.find("resources");
    if (resources == c.end() || !resources->is_object()) continue;
    std::string gpu;
    for (const char* kind : {"limits", "requests"}) {
      const auto amounts = resources->find(kind);
      if (amounts == resources->end() || !amounts->is_object()) continue;
      for (const auto& [key, value] : amounts->items()) {
        if (gpu.empty() && key.ends_with("/gpu")) gpu = key;
      }
    }
    if (gpu.empty()) continue;
    const json name = c.value("name", json());
    const std::string named = name.is_string() ? name.get<std::string>() : name.dump();
    out.push_back("spec.template.spec.containers[" + named + "] asks for " + gpu +
                  " but does not train: only the container named runner does, running " + trains +
                  "; " + named + " runs beside it as a sidecar, without the gang's environment");
  }
  return out;
}

std::string IgnoredRecoveryTimeout(const JobSpec& spec) {
  const std::optional<json> set = TemplateRunnerEnvEntry(spec, contract::kEnvRecoveryTimeout);
  if (!set) return "";
  const std::string what =
      std::string("spec.template.spec.containers[runner].env ") + contract::kEnvRecoveryTimeout;
  if (!MayRecoverInPlace(spec)) {
    // The ranks get 0 in its place. A template that asks for none ("0", or "" for unset) was
    // not ignored.
    if (const auto value = set->find("value"); value != set->end() && value->is_string()) {
      const std::string text = value->get<std::string>();
      const std::optional<Duration> wait = ParseRecoveryTimeout(text);
      if (text.empty() || (wait && *wait == Duration::zero())) return "";
    } else if (!set->contains("valueFrom")) {
      return "";
    }
    const std::string why = !spec.command.empty() ? "a spec.command program does not recover in "
                                                    "place"
                            : spec.gpus_per_replica > 0
                                ? "GPU replicas do not recover in place yet"
                                : "runPolicy.recovery is " + spec.run_policy.recovery +
                                      " (a lost rank restarts the whole gang)";
    return what + " is not passed on: " + why +
           ", so no survivor waits for a replacement (the ranks get 0)";
  }
  const std::string wait =
      std::to_string(
          std::chrono::duration_cast<std::chrono::seconds>(RecoveryTimeoutFor(spec)).count()) +
      "s";
  const auto value = set->find("value");
  if (value == set->end() || !value->is_string()) {
    if (!set->contains("valueFrom")) return "";
    return what + " is set by reference (valueFrom), which the operator does not resolve: the " +
           "survivors of a lost rank wait " + wait + " (give a plain value)";
  }
  const std::string text = value->get<std::string>();
  if (text.empty() || ParseRecoveryTimeout(text)) return "";
  return what + ": \"" + text.substr(0, Utf8Cut(text, 64)) +
         "\" is no whole number of seconds from 0 to 86400: the survivors of a lost rank wait " +
         wait;
}

ResourceSpec DefaultResources(int gpus_per_replica) {
  if (gpus_per_replica > 0) return {{{"cpu", "1"}, {"memory", "1Gi"}}, {{"memory", "4Gi"}}};
  return {{{"cpu", "500m"}, {"memory", "512Mi"}}, {{"memory", "2Gi"}}};
}

std::string JobNameProblem(const std::string& name) {
  bool ok = !name.empty() && name.size() <= kMaxJobNameLength && name.front() >= 'a' &&
            name.front() <= 'z' && name.back() != '-';
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  if (ok) return "";
  return QuoteJson(json(name)) + " must be a DNS-1035 label of at most " +
         std::to_string(kMaxJobNameLength) +
         " characters (lower case letters, digits and '-', starting with a letter and ending "
         "with a letter or digit): it names the job's Service and its pods "
         "<name>-a<attempt>-<rank>";
}

}  // namespace ringtrain::api
