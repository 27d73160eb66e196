// The CUDA step engine under train::TrainingLoop: one GPU per rank, the same contract as the
// CPU engine (runner/train/cpu_engine.h) with the step on the device:
//  - input gathered and normalized on the GPU (dataset resident) or copied from pinned buffers;
//  - gradient buckets (train::BucketPlan, the CPU engine's plan) all-reduced by NCCL on a
//    dedicated stream, each ordered after its bucket's backward by a CUDA event, so
//    communication overlaps the rest of backward; the optimizer waits for the last bucket;
//  - the whole step (gather, forward, backward, all-reduces, fused optimizer) captured in a CUDA
//    graph and replayed (--cuda-graph), leaving the host one step ahead of the GPU;
//  - every wait on the GPU is bounded (NCCL watchdog or event polling), never a blocking sync.
// With a host communicator (--backend tcp) gradients are staged through host memory after
// backward, without overlap.
#pragma once

#include <atomic>
#include <memory>

#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/data/idx.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/train/config.h"
#include "runner/train/step_engine.h"
#include "runner/train/training_loop.h"

namespace ringtrain::comm {
class NcclCommunicator;
}

namespace ringtrain::gpu {

struct GpuTrainerDeps {
  comm::Communicator* comm = nullptr;      // any backend
  comm::NcclCommunicator* nccl = nullptr;  // the same object when the backend is NCCL
  const data::Dataset* train = nullptr;
  const data::Dataset* test = nullptr;        // may be null: no evaluation
  metrics::RunnerMetrics* metrics = nullptr;  // may be null
  const std::atomic<bool>* stop = nullptr;
  int attempt = 0;
  int device = 0;  // CUDA device (LOCAL_RANK)
  Duration collective_timeout = comm::kDefaultCollectiveTimeout;
};

class CudaEngine;

// The GPU trainer: train::TrainingLoop over the CUDA engine.
class GpuTrainer {
 public:
  static StatusOr<std::unique_ptr<GpuTrainer>> Create(const train::TrainConfig& config,
                                                      GpuTrainerDeps deps);
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  StatusOr<train::TrainResult> Run();
  // The same with another step limit (benchmarks: a warm-up run, then a measured one; each run
  // starts at the first batch again unless a checkpoint says otherwise).
  StatusOr<train::TrainResult> Run(std::int64_t max_steps);
  // Fraction of wall time the GPU spent executing this rank's steps (CUDA events), last run.
  double busy_ratio() const { return busy_ratio_; }
  bool graph_used() const;

 private:
  GpuTrainer(std::unique_ptr<CudaEngine> engine, train::TrainingLoop loop);
  std::unique_ptr<CudaEngine> engine_;
  train::TrainingLoop loop_;
  double busy_ratio_ = 0;
};

}  // namespace ringtrain::gpu
