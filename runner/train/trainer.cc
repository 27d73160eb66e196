#include "runner/train/trainer.h"

namespace ringtrain::train {

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, TrainerDeps deps) {
  ASSIGN_OR_RETURN(auto engine, CpuEngine::Create(config, deps));
  TrainingLoop loop(config, LoopDepsFor(deps, engine.get()));
  return std::unique_ptr<Trainer>(new Trainer(std::move(engine), std::move(loop)));
}

}  // namespace ringtrain::train
