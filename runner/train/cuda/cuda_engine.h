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
// backward, without overlap. The engine knows no backend: it reaches NCCL's stream-ordered
// collectives through the Communicator seam (comm::DeviceCollectives).
#pragma once

#include <memory>

#include "common/status.h"
#include "runner/train/config.h"
#include "runner/train/step_engine.h"

namespace ringtrain::gpu {

// The CUDA engine on deps.device (set current here), its model uploaded and its CUDA graph
// choice made: --cuda-graph on needs device collectives or a world of one.
StatusOr<std::unique_ptr<train::StepEngine>> MakeCudaEngine(const train::TrainConfig& config,
                                                            const train::EngineDeps& deps);

}  // namespace ringtrain::gpu
