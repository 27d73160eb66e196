// The TrainingJob API (ringtrain.dev/v1alpha1): types, defaults, validation with field paths,
// and conversion from YAML manifests and API-server JSON. Shared by `ringtrain run` and the
// operator; must not do I/O beyond reading the manifest file it is given.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/runner_flags.h"
#include "common/status.h"
#include "runner/data/dataset_spec.h"
#include "runner/model/model_spec.h"

namespace ringtrain::api {

inline constexpr char kGroup[] = "ringtrain.dev";
inline constexpr char kVersion[] = "v1alpha1";
inline constexpr char kApiVersion[] = "ringtrain.dev/v1alpha1";
inline constexpr char kKind[] = "TrainingJob";
// A TrainingJob with this label is queued in Kueue (its pods form one Kueue pod group).
inline constexpr char kKueueQueueLabel[] = "kueue.x-k8s.io/queue-name";
// The longest duration a runPolicy field takes (10 years): time points stay far from overflow.
inline constexpr std::int64_t kMaxPolicySeconds = 315'360'000;

// The closed sets of the spec, parsed from and written back to the names of
// contract::EnumNames below (the spelling of the manifest).
enum class CleanPodPolicy { kNone, kRunning, kAll };  // which pods a finished job deletes
enum class PodGroupType { kCoscheduling, kVolcano };  // scheduler-plugins or Volcano

// What the controller knows of a dataset's samples: the per-sample shape (nullopt = unknown),
// the number of outputs (classes, or target values for a regression; 0 = unknown) and the task
// (nullopt = unknown), which the model's loss must fit.
struct DataShape {
  std::optional<model::Shape> input;
  int outputs = 0;
  std::optional<model::Task> task;
  std::string outputs_from;  // data::Table::classes_from, when the files said the classes
};

struct TrainSpec {
  // spec.train.model: a preset name (mlp | cnn, built by the runner for its dataset), or "" when
  // it is a layer list (model_json set).
  std::string model = "mlp";
  // spec.train.model as a layer list (model_spec.h's JSON): as given (compact JSON), and parsed
  // and shape-checked once its input is known: from model.input, else the dataset's declared
  // inputShape, else (`ringtrain run`/`validate` only) the dataset's files (ResolveModel).
  std::string model_json;
  std::optional<model::ModelSpec> model_spec;
  // spec.train.dataset: an IDX directory (--dataset), or "" when it is an object: the files and
  // how to read them (dataset_spec.h's JSON, --dataset-spec).
  std::string dataset = "/usr/share/datasets/fashion-mnist";
  std::optional<data::DatasetSpec> dataset_spec;
  int epochs = 10;
  int batch_size_per_replica = 64;
  std::string optimizer = "adam";
  double learning_rate = 0.001;
  double momentum = 0.9;
  double weight_decay = 0;
  contract::LrScaling lr_scaling = contract::LrScaling::kLinear;
  double warmup_epochs = 1;
  contract::LrSchedule lr_schedule = contract::LrSchedule::kCosine;
  std::int64_t seed = 42;
};

// spec.checkpoint.volumeClaim: the operator creates the PVC <job>-checkpoints, owned by the job.
struct CheckpointVolumeClaim {
  std::string size = "1Gi";  // a quantity
  // nullopt: the cluster's default StorageClass; "" (given): none, as a PersistentVolumeClaim
  // reads it (a PersistentVolume made for the claim binds it, nothing is provisioned).
  std::optional<std::string> storage_class_name;
  std::vector<std::string> access_modes = {"ReadWriteOnce"};
  bool operator==(const CheckpointVolumeClaim&) const = default;
};

struct CheckpointSpec {
  std::string path;  // empty: `ringtrain run` uses its work dir; pods use /ckpt
  std::int64_t every_steps = 500;
  // At most one of the two (validated). With neither, pods get an emptyDir: a gang restart then
  // starts from step 0. `ringtrain run` ignores both.
  std::optional<CheckpointVolumeClaim> volume_claim;
  std::string volume_json;  // a core/v1 VolumeSource as JSON ("" = none)
};

// spec.resources of the runner container, quantities as strings ("1", "500m", "4Gi").
struct ResourceSpec {
  std::map<std::string, std::string> requests;
  std::map<std::string, std::string> limits;
};

// When spec.resources is absent: enough for the built-in models, and never BestEffort (the
// first evicted under memory pressure). No CPU limit: throttling slows every rank of a gang.
// CPU ranks request what lets a 2-rank gang fit a 2-CPU node beside the operator and a
// minikube control plane (500m, 512Mi; a rank of the MLP or CNN example peaks at 242-259 MiB
// and 0.73-0.91 of a core, bench/README.md); GPU ranks keep the larger defaults of before.
ResourceSpec DefaultResources(int gpus_per_replica);

// runPolicy.podGroup: a PodGroup for a gang scheduler, created and owned by the job, that
// places all of its pods or none (minMember = spec.replicas).
struct PodGroupSpec {
  PodGroupType type = PodGroupType::kCoscheduling;
  std::string queue;  // Volcano's queue ("" = Volcano's default)
  bool operator==(const PodGroupSpec&) const = default;
};

struct RunPolicy {
  int backoff_limit = 3;
  std::optional<std::int64_t> active_deadline_seconds;
  std::optional<std::int64_t> ttl_seconds_after_finished;
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::kRunning;
  bool suspend = false;
  std::string scheduler_name;
  std::int64_t progress_deadline_seconds = 300;  // 0 = no stall detection
  // How long part of the gang may wait to be placed (PodsReady=False) before the job fails
  // with the cluster's reason and its placed pods are released; 0 = as long as it may run.
  std::int64_t scheduling_timeout_seconds = 600;
  std::optional<PodGroupSpec> pod_group;
  // InPlace: a lost replica of the built-in runner is replaced alone and the survivors keep
  // their state (no step lost); GangRestart: every replica goes and the gang restarts from the
  // newest checkpoint. A spec.command image always restarts the gang.
  std::string recovery = "InPlace";  // InPlace | GangRestart
  // Which failed replicas a restart may heal (Kubeflow's restartPolicy names). ExitCode: exit
  // codes 128-255 (signals, the runner's retryable codes), evictions, lost nodes, OOM kills;
  // 1-127 fail the job. OnFailure: every failure but a program the runtime cannot find, within
  // backoffLimit (a program whose exit code does not say: torchrun exits 1 for a lost worker).
  std::string restart_policy = "ExitCode";  // ExitCode | OnFailure
};

struct JobSpec {
  int replicas = 1;
  int gpus_per_replica = 0;
  contract::Backend backend = contract::Backend::kAuto;
  std::string image = "ghcr.io/ringtrain/ringtrain-runner:0.1.0";
  TrainSpec train;
  CheckpointSpec checkpoint;
  std::vector<std::string> command;  // replaces the built-in trainer when set
  std::string pod_template_json;     // PodTemplateSpec merged into each pod, as JSON ("" = none)
  std::optional<ResourceSpec> resources;  // nullopt: DefaultResources(gpus_per_replica)
  RunPolicy run_policy;

  int world_size() const { return replicas * (gpus_per_replica > 1 ? gpus_per_replica : 1); }
};

struct ObjectMeta {
  std::string name;
  std::string ns = "default";
  std::string uid;
  std::string resource_version;
  std::int64_t generation = 0;
  std::string creation_timestamp;
  std::map<std::string, std::string> labels;
};

struct Condition {
  std::string type;
  std::string status;  // "True" | "False"
  std::string reason;
  std::string message;
  std::string last_transition_time;
  bool operator==(const Condition&) const = default;
};

struct Progress {
  std::int64_t step = 0;
  int epoch = 0;
  double samples_per_second = 0;
  double loss = 0;
  std::string updated_at;  // when step last changed
  // Rank 0's last evaluation of the test set (testAccuracy for classification models, testMSE
  // for regression; -1: none yet). Kept across restarts until the next evaluation; at the end
  // the final model's.
  double test_accuracy = -1;
  double test_mse = -1;
  bool operator==(const Progress&) const = default;
};

struct Failure {
  int rank = -1;
  int exit_code = 0;
  std::string reason;
  std::string message;
  bool operator==(const Failure&) const = default;
};

// A node a replica failed on for a cause of the node's own (lost, evicted for pressure, a
// device fault): the next attempts stay off it, required for a few attempts, then preferred.
// A node that only refused a pod (OutOfcpu, NodeAffinity, ...) is preferred against from the
// start.
struct AvoidedNode {
  std::string node;
  std::string reason;
  int attempt = 0;  // the attempt that failed there
  // false once relaxed (the gang could not be placed without it), or for a refusal
  bool required = true;
  bool operator==(const AvoidedNode&) const = default;
};

// What recoveries cost the job (goodput), by kind. In place: the gang's own account, read from
// rank 0's /status. A gang restart: the steps between the last progress seen before it and the
// step the new gang started from, and the time from that last progress (the restart, when none
// was seen) to the new gang's first progress (an upper bound, to within a poll: progress is
// polled).
struct RecoveryAccount {
  int in_place = 0;         // in-place recoveries completed (the gang trains again)
  int gang_restarts = 0;    // new gangs that trained again after a restart
  int from_checkpoint = 0;  // of those, from a checkpoint (not step 0)
  std::int64_t steps_lost = 0;
  double seconds_without_training = 0;
  // The current attempt's in-place totals already counted above (the runner's are per attempt).
  int attempt_in_place = 0;
  std::int64_t attempt_steps_lost = 0;
  double attempt_seconds = 0;
  // A gang restart waiting for its new gang's first progress: the step the old one had reached
  // (-1: none pending) and since when the job has not trained: the last progress seen before
  // the restart (status.progress.updatedAt), or the restart (or resume) when none was seen.
  std::int64_t restart_from_step = -1;
  std::string restarted_at;
  bool operator==(const RecoveryAccount&) const = default;
};

struct ReplicaCounts {
  int pending = 0;
  int running = 0;
  int succeeded = 0;
  int failed = 0;
  bool operator==(const ReplicaCounts&) const = default;
};

struct JobStatus {
  std::string phase;  // "" | Pending | Running | Restarting | Succeeded | Failed | Suspended
  std::vector<Condition> conditions;
  ReplicaCounts replicas;
  int restarts = 0;  // counted against backoffLimit
  int attempt = 0;   // gang generation: restarts plus disruptions
  std::string start_time;
  std::string completion_time;
  std::optional<Progress> progress;
  std::optional<Failure> last_failure;
  std::vector<AvoidedNode> avoided_nodes;  // oldest first, at most kMaxAvoidedNodes
  // In-place recoveries (a lost replica replaced alone; runPolicy.recovery InPlace), and the
  // pods of the current attempt replaced so (their loss is accounted for; at most
  // kMaxReplacedPods, cleared with each new attempt).
  int in_place_recoveries = 0;
  std::vector<std::string> replaced_pods;
  RecoveryAccount recovery;
  std::int64_t observed_generation = 0;
  bool operator==(const JobStatus&) const = default;
};

struct TrainingJob {
  ObjectMeta metadata;
  JobSpec spec;
  JobStatus status;
};

// Parses and validates a manifest; errors name the file and the field
// ("job.yaml: spec.replicas: must be at least 1, got 0").
StatusOr<TrainingJob> LoadManifestFile(const std::string& path);
StatusOr<TrainingJob> ParseManifestYaml(const std::string& yaml, const std::string& source);
// From the API server's JSON (status included).
StatusOr<TrainingJob> ParseJobJson(const std::string& json);
// spec.runPolicy.ttlSecondsAfterFinished of an API-server object alone, read as ParseJobJson
// reads it (an integer from 0, capped at kMaxPolicySeconds) whatever the rest of the object
// holds; nullopt when it is absent or not such an integer. For a job whose spec does not parse.
std::optional<std::int64_t> ReadTtlSecondsAfterFinished(const std::string& json);
std::string StatusToJson(const JobStatus& status);

// How long the survivors of a lost rank wait for its replacement (RINGTRAIN_RECOVERY_TIMEOUT_
// SECONDS, which the operator sets): with runPolicy.recovery InPlace, the built-in runner and CPU
// replicas, the plain value spec.template's runner container gives it when the runner would take
// it (0: none, the gang restarts; see IgnoredRecoveryTimeout), else contract::kRecoveryTimeout;
// 0 otherwise (the gang restarts).
Duration RecoveryTimeoutFor(const JobSpec& spec);
// One RINGTRAIN_RECOVERY_TIMEOUT_SECONDS value as the runner takes it (an integer from 0 to
// 86400, as strtoll reads the whole string); nullopt for "" (unset) and any other.
std::optional<Duration> ParseRecoveryTimeout(const std::string& value);
// How long a rank's collective waits on a peer before it fails (RINGTRAIN_COLLECTIVE_TIMEOUT_
// SECONDS; the operator sets none itself): the value spec.template's runner container gives it
// (a plain integer from 1 to 86400, as the runner reads it), else contract::kCollectiveTimeout
// (a reference, valueFrom or envFrom is not resolved here).
Duration CollectiveTimeoutFor(const JobSpec& spec);
// One RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS value as the runner takes it (an integer from 1 to
// 86400); nullopt for any other (the runner refuses to start with it).
std::optional<Duration> ParseCollectiveTimeout(const std::string& value);
// Whether spec.template gives a pod's termination grace work besides the runner's: a container
// other than the runner (a sidecar: a proxy draining, a log shipper flushing), a native sidecar
// (an init container with restartPolicy Always), or a preStop hook on the runner.
bool TemplateGivesTheGraceWork(const JobSpec& spec);
// Whether spec.template's runner container has an env entry named `name` (any value or
// reference).
bool TemplateRunnerSetsEnv(const JobSpec& spec, std::string_view name);
// Whether spec.template's runner container sets requests or limits of its own (the pod builder
// then takes them, not spec.resources).
bool TemplateRunnerSetsResources(const JobSpec& spec);
// Whether a lost rank of this spec may be recovered in place at all: the built-in runner on
// CPUs with runPolicy.recovery InPlace (how long the survivors wait aside).
bool MayRecoverInPlace(const JobSpec& spec);
// Whether a lost replica is replaced alone (see RecoveryTimeoutFor).
inline bool RecoversInPlace(const JobSpec& spec) { return RecoveryTimeoutFor(spec) > Duration(0); }

// What spec.train.dataset declares without being read: its task (always known: a directory is
// IDX, a classification; an object's task defaults to classification), and its inputShape and
// classes (a classification's) when it states them; a directory has 10 classes, as the ranks
// read it.
DataShape DeclaredDataShape(const TrainSpec& t);

// The layer list as the runner's --model-spec JSON, every default written out:
// ParseModelSpec(ModelSpecJson(s)) describes the same architecture as s.
std::string ModelSpecJson(const model::ModelSpec& spec);

// Completes and checks spec.train.model against `data` (what the dataset declares or a local
// read found; nullopt = unknown): a layer list without an input takes data's, then every
// layer's output shape and parameter count is computed and the loss and output checked against
// data's task and outputs (model::CheckAgainstDataset, as the runner checks them). Sets
// t->model_spec; errors name the field ("spec.train.model.layers[2] dense: ...",
// "spec.train.model.loss: mse does not fit a classification dataset ..."). A preset is checked
// as the runner builds it for `data` (Fashion-MNIST's 1x28x28, 10 classes when unknown) and
// refused for a regression dataset (a preset classifies).
StatusOr<model::ShapeReport> ResolveModel(TrainSpec* t, const std::optional<DataShape>& data);

// The runner's command line for the built-in trainer: identical for pods and local processes.
// A layer list goes as --model-spec JSON (model_spec must be set: ResolveModel), a preset as
// --model NAME; a dataset object as --dataset-spec JSON, a directory as --dataset DIR.
std::vector<std::string> RunnerArgs(const JobSpec& spec, const std::string& checkpoint_dir);

bool IsTerminal(const std::string& phase);

// spec.template's `runner` container sets `command` or `args`, which no replica runs (the
// operator sets that container's command and args: spec.command or the built-in runner, and
// `ringtrain run` runs the same): what to tell the user, naming the field; "" when it sets
// neither. Said by `ringtrain validate` and `ringtrain run`, and by the operator as a Warning
// event (TemplateCommandIgnored).
std::string IgnoredRunnerCommand(const JobSpec& spec);
// The runner container's RINGTRAIN_RECOVERY_TIMEOUT_SECONDS where the operator cannot pass it on
// (a value the runner would not take, or one set by reference): what to tell the user, naming
// the wait the survivors get instead; "" otherwise. Said where IgnoredRunnerCommand is, as the
// Warning event TemplateEnvIgnored.
std::string IgnoredRecoveryTimeout(const JobSpec& spec);
// "spec.train.momentum: 0.5 is not used: ..." for a job of optimizer adam that asks for another
// momentum than the default (the CRD's 0.9 is every job's), else "". Said where
// IgnoredRunnerCommand is.
std::string IgnoredMomentum(const JobSpec& spec);
// What spec.template asks for that no replica gets, each naming the field, a PyTorchJob's habits
// (review): the runner container's `image` (every replica runs spec.image), a `restartPolicy`
// other than Never (replicas are replaced, not restarted in place), and a container of another
// name that asks for GPUs (only the container named runner trains; another is a sidecar without
// the gang's environment, beside the built-in runner or spec.command). Said where
// IgnoredRunnerCommand is, as the Warning event TemplateFieldIgnored.
std::vector<std::string> IgnoredTemplateFields(const JobSpec& spec);

// The longest job name: it names the headless Service, which must be a DNS-1035 label, and
// prefixes the pod names <name>-a<attempt>-<rank>, which must stay within 63 characters.
inline constexpr std::size_t kMaxJobNameLength = 50;
inline constexpr std::size_t kMaxAvoidedNodes = 8;
inline constexpr std::size_t kMaxReplacedPods = 64;
// "" when `name` can name a job; else why not (the same rule as the CRD's CEL rule).
std::string JobNameProblem(const std::string& name);

}  // namespace ringtrain::api

namespace ringtrain::contract {

template <>
struct EnumNames<api::CleanPodPolicy> {
  static constexpr std::array<std::string_view, 3> kNames{"None", "Running", "All"};
};
template <>
struct EnumNames<api::PodGroupType> {
  static constexpr std::array<std::string_view, 2> kNames{"coscheduling", "volcano"};
};

}  // namespace ringtrain::contract
