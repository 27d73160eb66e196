// Training throughput of the GPU runner on one GPU (world size 1, NCCL communicator, the
// dataset resident on the device, the step in a CUDA graph unless --cuda-graph off): samples/s,
// step time, our measured GPU busy fraction (kernel time / wall time from CUDA events) and
// NVML's utilization sampled while training. bench/gpu_compare.py runs it next to the same
// model in PyTorch (bench/torch_reference.py). Not a test: numbers only.
//   gpu_train_bench [--model mlp|cnn] [--batch-size 64] [--steps 2000] [--warmup 200]
//                   [--optimizer adam|sgd] [--precision fp32|tf32] [--input device|host]
//                   [--cuda-graph auto|on|off] [--data DIR] [--json FILE]
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runner/comm/nccl/nccl_communicator.h"
#include "runner/cuda/cuda_util.h"
#include "runner/data/idx.h"
#include "runner/metrics/gpu_monitor.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/train/config.h"

using namespace ringtrain;

namespace {

int Fail(const std::string& json_path, const std::string& why, int code) {
  std::fprintf(stderr, "gpu_train_bench: %s\n", why.c_str());
  if (!json_path.empty()) {
    std::ofstream(json_path) << nlohmann::json{{"error", why}}.dump(2) << "\n";
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> rest;
  std::string json_path;
  std::int64_t steps = 2000;
  std::int64_t warmup = 200;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--json") {
      json_path = value();
    } else if (a == "--steps") {
      steps = std::stoll(value());
    } else if (a == "--warmup") {
      warmup = std::stoll(value());
    } else if (a == "--data") {
      rest.push_back("--dataset");
      rest.push_back(value());
    } else {
      rest.push_back(a);
    }
  }
  auto config = train::ParseTrainFlags(rest);
  if (!config.ok()) return Fail(json_path, config.status().ToString(), 2);
  config->epochs = 1000;  // bounded by the step counts
  config->eval_every_epoch = false;
  config->checkpoint_dir.clear();
  config->warmup_epochs = 0;
  config->lr_schedule = contract::LrSchedule::kConstant;
  const int devices = gpu::VisibleDeviceCount();
  if (devices == 0) return Fail(json_path, "no CUDA device visible: nothing to measure", 0);

  auto train_set = data::LoadFashionMnist(config->dataset, true);
  if (!train_set.ok()) return Fail(json_path, train_set.status().ToString(), 1);

  rendezvous::MemoryStore store;
  comm::NcclCommOptions no;
  auto nccl = comm::NcclCommunicator::Create(store, no);
  if (!nccl.ok()) return Fail(json_path, nccl.status().ToString(), 1);

  metrics::RunnerMetrics metrics({"bench", "default", 0});
  std::unique_ptr<metrics::GpuMonitor> monitor;
  {
    char bus[64] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), 0) == cudaSuccess) {
      metrics::GpuMonitorOptions mo;
      mo.pci_bus_id = bus;
      mo.gpu_label = "0";
      mo.interval = std::chrono::milliseconds(100);
      auto m = metrics::GpuMonitor::Create(&metrics, mo);
      if (m.ok()) {
        monitor = std::move(*m);
      } else {
        std::fprintf(stderr, "NVML off: %s\n", m.status().ToString().c_str());
      }
    }
  }

  train::EngineDeps deps;
  deps.comm = nccl->get();
  deps.train = &*train_set;
  deps.metrics = &metrics;
  deps.device = 0;
  auto trainer = rank::Trainer::Create(*config, deps);
  if (!trainer.ok()) return Fail(json_path, trainer.status().ToString(), 1);
  auto warm = (*trainer)->Run(warmup);
  if (!warm.ok()) return Fail(json_path, warm.status().ToString(), 1);
  if (monitor) monitor->Reset();
  auto res = (*trainer)->Run(steps);
  if (!res.ok()) return Fail(json_path, res.status().ToString(), 1);
  const double util = monitor ? monitor->MeanUtilization().value_or(-1) : -1;

  const double sps = res->samples_per_second;
  const double step_ms = sps > 0 ? 1000.0 * config->batch_size / sps : 0;
  nlohmann::json j = {{"model", config->model.name},
                      {"batch_size", config->batch_size},
                      {"optimizer", config->optimizer.name},
                      {"precision", std::string(contract::NameOf(config->precision))},
                      {"input", std::string(contract::NameOf(config->input))},
                      {"cuda_graph", res->step_graph},
                      {"steps", res->steps_this_run},
                      {"samples_per_second", sps},
                      {"step_ms", step_ms},
                      {"busy_ratio", res->device_busy},
                      {"nvml_utilization", util},
                      {"device", gpu::DeviceDescription(0)}};
  std::printf("%-4s batch %5d  %10.0f samples/s  %7.3f ms/step  busy %.2f  nvml util %.2f  %s\n",
              config->model.name.c_str(), config->batch_size, sps, step_ms, res->device_busy, util,
              res->step_graph ? "graph" : "eager");
  if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
  return 0;
}
