// A training step (DeviceDataset::Gather + GpuModel::ForwardBackward + GpuOptimizer::Step)
// captured once in a CUDA graph and replayed for several steps, with SetStep moving the data
// cursor and the optimizer's scalars between replays, computes what the same steps launched
// eagerly compute. Capture itself fails if anything in the step allocates, synchronizes or
// copies to the host; a graph that baked in host values (the step, the learning rate, Adam's
// bias corrections, a dropout seed) would diverge from the second replay on.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runner/data/cuda/device_data.h"
#include "runner/model/cuda/gpu_model.h"
#include "runner/model/cuda/gpu_optimizer.h"
#include "runner/model/model_spec.h"
#include "tests/unit/gpu/gpu_test_util.h"

namespace ringtrain::gpu {
namespace {

using testing::Download;
using testing::RelErr;
using testing::TestStream;

data::Dataset RandomImages(std::size_t count, std::uint64_t seed) {
  data::Dataset ds;
  ds.count = count;
  ds.rows = 28;
  ds.cols = 28;
  std::mt19937_64 rng(seed);
  ds.images.resize(count * 784);
  for (auto& p : ds.images) p = static_cast<std::uint8_t>(rng());
  for (std::size_t i = 0; i < count; ++i)
    ds.labels.push_back(static_cast<std::uint8_t>(rng() % 10));
  return ds;
}

constexpr int kBatch = 32;

struct Rig {
  TestStream stream;
  std::unique_ptr<GpuModel> model;
  std::unique_ptr<GpuOptimizer> opt;
  std::unique_ptr<DeviceDataset> data;
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  DeviceBuffer<double> loss;

  Status Init(const model::ModelSpec* spec, const model::ModelConfig& mc, MathMode math,
              const model::OptimizerConfig& oc, const data::Dataset& ds) {
    RETURN_IF_ERROR(stream.status());
    if (spec != nullptr) {
      ASSIGN_OR_RETURN(model, GpuModel::Create(*spec, mc, math, stream.get()));
    } else {
      ASSIGN_OR_RETURN(model, GpuModel::Create(mc, math, stream.get()));
    }
    ASSIGN_OR_RETURN(opt, GpuOptimizer::Create(oc, model->num_params(), stream.get()));
    ASSIGN_OR_RETURN(data, DeviceDataset::Create(ds, 1, 2, kBatch, 77, stream.get()));
    RETURN_IF_ERROR(x.Allocate(static_cast<std::size_t>(kBatch) * 784));
    RETURN_IF_ERROR(y.Allocate(kBatch));
    RETURN_IF_ERROR(loss.Allocate(1));
    RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(loss.data(), 0, sizeof(double), stream.get()));
    return data->Shuffle(3);
  }

  // The capturable body of a step.
  Status Body() {
    RETURN_IF_ERROR(data->Gather(x.data(), y.data(), kBatch));
    RETURN_IF_ERROR(model->ForwardBackward(x.data(), y.data(), kBatch, loss.data(), nullptr));
    return opt->Step(model->params(), model->grads());
  }
};

// A preset by name, or (spec not null) a layer list, whose dropout masks the graph must draw
// from the seed uploaded before each replay.
void RunCase(const char* name, MathMode math, const model::ModelSpec* spec = nullptr) {
  SCOPED_TRACE(std::string(name) + (math == MathMode::kTf32 ? " tf32" : " fp32"));
  model::ModelConfig mc;
  mc.name = spec != nullptr ? "mlp" : name;
  mc.max_batch = kBatch;
  model::OptimizerConfig oc;
  oc.name = "adam";
  oc.weight_decay = 1e-3;
  const data::Dataset ds = RandomImages(500, 4);
  Rig eager;
  Rig graph;
  RT_ASSERT_OK(eager.Init(spec, mc, math, oc, ds));
  RT_ASSERT_OK(graph.Init(spec, mc, math, oc, ds));

  const double lrs[] = {1e-3, 3e-3, 2e-3};
  const std::int64_t steps[] = {0, 4, 1};
  auto eager_step = [&](int s) -> Status {
    RETURN_IF_ERROR(eager.data->SetStep(steps[s]));
    RETURN_IF_ERROR(eager.opt->SetStep(lrs[s]));
    RETURN_IF_ERROR(eager.model->SeedDropout(1000 + static_cast<std::uint64_t>(s)));
    return eager.Body();
  };
  // Eager work first, so that every kernel is loaded and the libraries have initialized
  // whatever they do lazily before anything is captured: the eager rig's first step, and a
  // forward/backward of the graph rig (which changes no parameters or optimizer state).
  RT_ASSERT_OK(eager_step(0));
  RT_ASSERT_OK(graph.data->SetStep(0));
  RT_ASSERT_OK(graph.data->Gather(graph.x.data(), graph.y.data(), kBatch));
  RT_ASSERT_OK(graph.model->ForwardBackward(graph.x.data(), graph.y.data(), kBatch,
                                            graph.loss.data(), nullptr));
  RT_ASSERT_CUDA(cudaMemsetAsync(graph.loss.data(), 0, sizeof(double), graph.stream.get()));
  RT_ASSERT_OK(graph.stream.Sync());

  RT_ASSERT_CUDA(cudaStreamBeginCapture(graph.stream.get(), cudaStreamCaptureModeThreadLocal));
  const Status body = graph.Body();
  cudaGraph_t g = nullptr;
  const cudaError_t end = cudaStreamEndCapture(graph.stream.get(), &g);
  RT_ASSERT_OK(body);
  RT_ASSERT_CUDA(end);
  cudaGraphExec_t exec = nullptr;
  RT_ASSERT_CUDA(cudaGraphInstantiate(&exec, g, 0));

  for (int s = 0; s < 3; ++s) {
    if (s > 0) RT_ASSERT_OK(eager_step(s));
    RT_ASSERT_OK(graph.data->SetStep(steps[s]));
    RT_ASSERT_OK(graph.opt->SetStep(lrs[s]));
    RT_ASSERT_OK(graph.model->SeedDropout(1000 + static_cast<std::uint64_t>(s)));
    RT_ASSERT_CUDA(cudaGraphLaunch(exec, graph.stream.get()));
  }
  RT_ASSERT_OK(eager.stream.Sync());
  RT_ASSERT_OK(graph.stream.Sync());
  RT_ASSERT_CUDA(cudaGraphExecDestroy(exec));
  RT_ASSERT_CUDA(cudaGraphDestroy(g));

  const std::size_t n = eager.model->num_params();
  std::vector<float> pe, pg, ge, gg, se, sg;
  std::vector<double> le, lg;
  RT_ASSERT_OK(Download(eager.model->params(), n, pe));
  RT_ASSERT_OK(Download(graph.model->params(), n, pg));
  RT_ASSERT_OK(Download(eager.model->grads(), n, ge));
  RT_ASSERT_OK(Download(graph.model->grads(), n, gg));
  RT_ASSERT_OK(Download(eager.opt->state(), eager.opt->state_size(), se));
  RT_ASSERT_OK(Download(graph.opt->state(), graph.opt->state_size(), sg));
  RT_ASSERT_OK(Download(eager.loss.data(), 1, le));
  RT_ASSERT_OK(Download(graph.loss.data(), 1, lg));
  ASSERT_TRUE(testing::AllFinite(pe));
  const double p_err = RelErr(pg, pe);
  const double g_err = RelErr(gg, ge);
  const double s_err = RelErr(sg, se);
  const double l_err = std::fabs(lg[0] - le[0]) / std::fabs(le[0]);
  std::printf(
      "[ measured ] graph vs eager, %s %s: params %.3g (%s), grads %.3g (%s), state "
      "%.3g, loss %.3g\n",
      name, math == MathMode::kTf32 ? "tf32" : "fp32", p_err,
      testing::BitwiseEqual(pg, pe) ? "bitwise equal" : "not bitwise equal", g_err,
      testing::BitwiseEqual(gg, ge) ? "bitwise equal" : "not bitwise equal", s_err, l_err);
  // Every kernel and library call in the step is deterministic, so these are expected to be
  // bitwise equal; a graph that read a stale cursor or learning rate would be off by ~1.
  EXPECT_LE(p_err, 1e-6);
  EXPECT_LE(g_err, 1e-6);
  EXPECT_LE(s_err, 1e-6);
  EXPECT_LE(l_err, 1e-6);
  EXPECT_EQ(graph.opt->steps(), 3);
}

TEST(GpuGraph, CapturedStepReplaysTheEagerSteps) {
  RT_REQUIRE_GPU();
  for (const char* name : {"mlp", "cnn"}) {
    for (const MathMode math : {MathMode::kFp32, MathMode::kTf32}) RunCase(name, math);
  }
  // A Keras-style CNN with dropout and an asymmetric strided "same" convolution.
  auto spec = model::ParseModelSpec(R"({"input": [1, 28, 28], "layers": [
      {"conv2d": {"filters": 8, "kernel": 4, "stride": 2, "padding": "same"}}, "relu",
      {"max_pool2d": {"pool": 2}}, {"dropout": {"rate": 0.25}}, "flatten",
      {"dense": {"units": 32}}, "gelu", {"dropout": {"rate": 0.5}}, {"dense": {"units": 10}}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  RunCase("layer list with dropout", MathMode::kFp32, &*spec);
}

}  // namespace
}  // namespace ringtrain::gpu
