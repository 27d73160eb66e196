// The runner's GPU entry: device and backend selection (`--device`, `--backend`), the NCCL or
// TCP communicator, NVML metrics for this rank's GPU, and the GPU training loop.
#pragma once

#include <atomic>
#include <functional>

#include "common/status.h"
#include "runner/data/idx.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/rendezvous/store.h"
#include "runner/train/config.h"
#include "runner/train/trainer.h"

namespace ringtrain::gpu {

struct Placement {
  bool cuda = false;
  std::string backend = "tcp";  // nccl | tcp
  int device = 0;
  std::string reason;  // why, for the log
};

// Resolves --device/--backend against what this process sees: `auto` picks CUDA when a GPU
// is visible, and NCCL when every rank of this node gets its own GPU (NCCL refuses two ranks
// on one GPU). Explicit choices that cannot work are permanent errors naming the flag.
StatusOr<Placement> ChoosePlacement(const train::TrainConfig& config, int local_rank,
                                    int local_world_size, int visible_devices);

struct GpuRunDeps {
  rendezvous::Store* store = nullptr;  // the job's prefixed store, after the rendezvous
  const data::Dataset* train = nullptr;
  const data::Dataset* test = nullptr;
  metrics::RunnerMetrics* metrics = nullptr;
  const std::atomic<bool>* stop = nullptr;
  std::string advertise_host;  // for the TCP backend
  // Called with a failure before the communicator closes (publishes the root cause).
  std::function<void(const Status&)> report_failure;
};

StatusOr<train::TrainResult> TrainOnGpu(const train::RankEnv& env, const train::TrainConfig& config,
                                        const Placement& placement, const GpuRunDeps& deps);

}  // namespace ringtrain::gpu
