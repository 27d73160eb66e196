#include "runner/train/trainer.h"

namespace ringtrain::train {

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, TrainerDeps deps) {
  CpuEngineDeps ed;
  ed.comm = deps.comm;
  ed.train = deps.train;
  ed.test = deps.test;
  ed.metrics = deps.metrics;
  ed.collective_timeout = deps.collective_timeout;
  ASSIGN_OR_RETURN(auto engine, CpuEngine::Create(config, ed));
  LoopDeps ld;
  ld.comm = deps.comm;
  ld.engine = engine.get();
  ld.evaluate = deps.test != nullptr;
  ld.metrics = deps.metrics;
  ld.stop = deps.stop;
  ld.attempt = deps.attempt;
  TrainingLoop loop(config, ld);
  return std::unique_ptr<Trainer>(new Trainer(std::move(engine), std::move(loop)));
}

}  // namespace ringtrain::train
