// The CPU trainer: train::TrainingLoop over the CPU step engine (runner/train/cpu_engine.h).
// Owns no sockets or processes: the communicator, datasets and metrics are injected.
#pragma once

#include <memory>

#include "runner/train/cpu_engine.h"
#include "runner/train/training_loop.h"

namespace ringtrain::train {

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
