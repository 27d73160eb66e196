#include "runner/train/cuda/gpu_run.h"

#include <spdlog/spdlog.h>

#include "runner/comm/nccl/nccl_communicator.h"
#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/cuda/cuda_util.h"
#include "runner/metrics/gpu_monitor.h"
#include "runner/train/cuda/cuda_engine.h"
#include "runner/train/ring_options.h"

namespace ringtrain::gpu {

StatusOr<Placement> ChoosePlacement(const train::TrainConfig& config, int local_rank,
                                    int local_world_size, int visible_devices) {
  Placement p;
  if (config.device == contract::Device::kCpu ||
      (config.device == contract::Device::kAuto && visible_devices == 0)) {
    if (config.backend == contract::Backend::kNccl) {
      return InvalidArgument(config.device == contract::Device::kCpu
                                 ? "--backend: nccl needs --device cuda"
                                 : "--backend: nccl needs a GPU, and no CUDA device is visible");
    }
    p.reason = config.device == contract::Device::kCpu ? "--device cpu" : "no CUDA device visible";
    return p;
  }
  if (visible_devices == 0) {
    return FailedPrecondition("--device: cuda was asked for, but no CUDA device is visible");
  }
  p.cuda = true;
  const bool own_gpu = comm::NcclUsable(visible_devices, local_world_size);
  if (config.backend == contract::Backend::kNccl && !own_gpu) {
    return FailedPrecondition("--backend: nccl needs one GPU per rank, but " +
                              std::to_string(local_world_size) + " ranks share " +
                              std::to_string(visible_devices) +
                              " visible GPU(s) on this node (NCCL refuses two ranks on one GPU)");
  }
  if (config.backend == contract::Backend::kTcp ||
      (config.backend == contract::Backend::kAuto && !own_gpu)) {
    p.backend = "tcp";
    p.device = local_rank % visible_devices;
    p.reason = config.backend == contract::Backend::kTcp
                   ? "--backend tcp"
                   : std::to_string(local_world_size) + " ranks share " +
                         std::to_string(visible_devices) + " GPU(s): NCCL needs one GPU per rank";
  } else {
    p.backend = "nccl";
    p.device = local_rank;
    p.reason = "one GPU per rank";
  }
  return p;
}

StatusOr<train::TrainResult> TrainOnGpu(const train::RankEnv& env, const train::TrainConfig& config,
                                        const Placement& placement, const GpuRunDeps& deps) {
  RT_CUDA_RETURN_IF_ERROR(cudaSetDevice(placement.device));
  spdlog::info("GPU {}: {}; backend {} ({})", placement.device, DeviceDescription(placement.device),
               placement.backend, placement.reason);

  std::unique_ptr<metrics::GpuMonitor> monitor;
  if (deps.metrics != nullptr) {
    char bus_id[64] = {};
    Status bus = CudaStatus(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), placement.device),
                            "cudaDeviceGetPCIBusId");
    if (bus.ok()) {
      metrics::GpuMonitorOptions mo;
      mo.pci_bus_id = bus_id;  // CUDA and NVML number devices differently
      mo.gpu_label = std::to_string(placement.device);
      auto m = metrics::GpuMonitor::Create(deps.metrics, mo);
      if (m.ok()) {
        monitor = std::move(*m);
      } else {
        spdlog::warn("GPU metrics off: {}", m.status().ToString());
      }
    } else {
      spdlog::warn("GPU metrics off: {}", bus.ToString());
    }
  }

  std::unique_ptr<comm::Communicator> comm;
  comm::NcclCommunicator* nccl = nullptr;
  if (placement.backend == "nccl") {
    comm::NcclCommOptions o;
    o.rank = env.rank;
    o.size = env.world_size;
    o.device = placement.device;
    o.init_timeout = env.rendezvous_timeout;
    o.collective_timeout = env.collective_timeout;
    ASSIGN_OR_RETURN(auto c, comm::NcclCommunicator::Create(*deps.store, o));
    nccl = c.get();
    comm = std::move(c);
  } else {
    ASSIGN_OR_RETURN(comm, comm::TcpCommunicator::Create(
                               *deps.store, train::TcpRingOptions(env, deps.advertise_host)));
  }
  spdlog::info("{} communicator ready: rank {}/{} (attempt {})", placement.backend, env.rank,
               env.world_size, env.attempt);

  GpuTrainerDeps td;
  td.comm = comm.get();
  td.nccl = nccl;
  td.train = deps.train;
  td.test = deps.test;
  td.metrics = deps.metrics;
  td.stop = deps.stop;
  td.attempt = env.attempt;
  td.device = placement.device;
  td.collective_timeout = env.collective_timeout;
  // A failure is reported while `comm` is still up, as on the CPU path.
  auto report = [&deps](const Status& s) {
    if (deps.report_failure) deps.report_failure(s);
    return s;
  };
  auto trainer = GpuTrainer::Create(config, td);
  if (!trainer.ok()) return report(trainer.status());
  auto result = (*trainer)->Run();
  if (!result.ok()) return report(result.status());
  const auto& gpu_trainer = *trainer;
  spdlog::info("GPU busy {:.2f} of the training time; CUDA graph {}", gpu_trainer->busy_ratio(),
               gpu_trainer->graph_used() ? "used" : "not used");
  return result;
}

}  // namespace ringtrain::gpu
