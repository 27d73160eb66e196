// The CPU trainer: train::TrainingLoop over the CPU step engine (runner/train/cpu_engine.h).
// Owns no sockets or processes: the communicator, datasets and metrics are injected.
#pragma once

#include <atomic>
#include <memory>

#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/data/idx.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/model/model.h"
#include "runner/train/config.h"
#include "runner/train/cpu_engine.h"
#include "runner/train/training_loop.h"

namespace ringtrain::train {

struct TrainerDeps {
  comm::Communicator* comm = nullptr;
  const data::Dataset* train = nullptr;
  const data::Dataset* test = nullptr;        // may be null: no evaluation
  metrics::RunnerMetrics* metrics = nullptr;  // may be null
  const std::atomic<bool>* stop = nullptr;    // set by a signal handler; may be null
  int attempt = 0;
  Duration collective_timeout = comm::kDefaultCollectiveTimeout;
};

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config, TrainerDeps deps);
  StatusOr<TrainResult> Run() { return loop_.Run(); }
  model::Model& model() { return engine_->model(); }

 private:
  Trainer(std::unique_ptr<CpuEngine> engine, TrainingLoop loop)
      : engine_(std::move(engine)), loop_(std::move(loop)) {}
  std::unique_ptr<CpuEngine> engine_;
  TrainingLoop loop_;
};

}  // namespace ringtrain::train
