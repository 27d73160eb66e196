// What `ringtrain run` and `ringtrain validate` know of a job's dataset on this machine, to
// check the model before any rank starts: the IDX files' shape, the CSV/NPY training split's
// shape and classes when the files are here (with the test split checked against it as the ranks
// check it, when that is here too), else what spec.train.dataset declares. The operator never
// reads a dataset (api::DeclaredDataShape only).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/api/training_job.h"
#include "runner/train/model_data.h"

namespace ringtrain::executors {

struct LocalDataShape {
  std::optional<api::DataShape> shape;  // files not here: what the spec declares (the task)
  std::string source;                   // where it came from, for the summary
};

// Where the ranks will read the dataset.
enum class DatasetLocation {
  // Maybe elsewhere (`ringtrain validate`: the job may run on a cluster, its data inside the
  // image or on a volume): files not on this machine fall back to what the spec declares.
  kMaybeElsewhere,
  // On this machine (`ringtrain run`), in this process's working directory: a file or
  // directory the spec names that is not here is refused, naming the field and the path, before
  // any rank starts. A path with a $(VAR) reference (the ranks' arguments expand it from the
  // container's env) is not judged.
  kThisMachine,
  // On this machine, in another working directory (spec.template's workingDir): as kThisMachine
  // for an absolute path; a relative one is the ranks' to open there, not judged here.
  kThisMachineElsewhereDir,
};

// Reads what the files give (a corrupt file is an error naming it); files that are not on this
// machine fall back to what the spec declares (api::DeclaredDataShape), unless `where` is
// kThisMachine. A path that is there but of the wrong kind (a directory for a CSV file) is
// refused either way, naming the field (spec.train.dataset, spec.train.dataset.train, ...).
StatusOr<LocalDataShape> ReadLocalDataShape(
    const api::TrainSpec& t, DatasetLocation where = DatasetLocation::kMaybeElsewhere);

// The dataset's paths (as "field: path") that are not on this machine, where `ringtrain validate`
// checks only what the spec declares. Paths it cannot judge ($(VAR); a relative one when
// `relative_elsewhere`: the template's workingDir is another) are left out.
std::vector<std::string> DatasetPathsNotHere(const api::TrainSpec& t,
                                             bool relative_elsewhere = false);

// Resolves and checks spec.train.model against ReadLocalDataShape (api::ResolveModel) and
// returns a Keras-like summary: one line per layer with its output shape and parameters, then
// the total. Sets t->model_spec for a layer list. Errors name the field or the layer.
StatusOr<std::string> CheckModelLocally(api::TrainSpec* t,
                                        DatasetLocation where = DatasetLocation::kMaybeElsewhere);

// `ringtrain run`'s ranks all run on this machine and share nothing: refuses, before any starts,
// spec.replicas CPU ranks that together need more memory than `probe` shows available (the
// limit of this process's cgroup or an ancestor's less what is in use, else the machine's
// MemAvailable: train::ReadMemoryBudget). Each rank's need is the runner's own arithmetic
// (train::CpuRankMemoryOf on the config the ranks get, api::RunnerArgs, and the datasets they
// load, train::LoadTrainingData), rank 0's checkpoint copy besides. InvalidArgument naming
// spec.replicas (train::CheckGangFits). Nothing is refused for a spec.command, GPU ranks, one
// replica (its own check is the runner's), data that is not here or does not load (the ranks
// report it), or memory that does not read. Call after CheckModelLocally (it sets the layer
// list the ranks get).
Status CheckLocalGangMemory(const api::JobSpec& spec, const train::MemoryProbe& probe = {});

}  // namespace ringtrain::executors
