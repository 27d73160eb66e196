// Host-only check of the TF32 comparison's design (runs without a GPU): the CPU layers, fed
// TF32-converted GEMM operands the way a tensor core sees them (float32 accumulation), stand in
// for GpuModel in kTf32 mode. With model_test_data.h's exact-forward data, (1) every value that
// feeds a ReLU or pooling decision comes out bitwise equal to the float32 computation, (2) the
// cnn's dense ReLU input stays far from 0, and (3) the loss and gradient errors against the CPU
// model stay within the bounds gpu_model_test.cc applies, whether the hardware rounds its TF32
// operands to nearest or truncates them (truncation biases every rounded operand the same way,
// so its errors add up along the backward chain: ~2e-3 at the cnn's first layer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "runner/model/gemm.h"
#include "runner/model/layers.h"
#include "runner/model/model.h"
#include "tests/unit/gpu/gpu_test_util.h"
#include "tests/unit/gpu/model_test_data.h"

namespace ringtrain::gpu::testing {
namespace {

using model::Conv2d;
using model::Layer;
using model::Linear;
using model::ModelConfig;
using model::Shape;

using Convert = float (*)(float);

float Identity(float v) { return v; }

// model.cc's stack, on the CPU layers, with every GEMM operand passed through `convert`.
class EmulatedModel {
 public:
  EmulatedModel(const ModelConfig& c, const std::vector<float>& params, Convert convert)
      : params_(params), grads_(params.size()), convert_(convert), classes_(c.classes) {
    Shape s{c.channels, c.height, c.width};
    auto add = [&](std::unique_ptr<Layer> layer) {
      s = layer->out_shape();
      layers_.push_back(std::move(layer));
    };
    if (c.name == "mlp") {
      add(std::make_unique<Linear>(static_cast<int>(s.size()), c.hidden));
      add(std::make_unique<model::ReLU>(s));
      add(std::make_unique<Linear>(c.hidden, c.classes));
    } else {
      for (const int channels : {32, 64}) {
        add(std::make_unique<Conv2d>(s, channels, 3, 1));
        add(std::make_unique<model::ReLU>(s));
        add(std::make_unique<model::MaxPool2d>(s, c.max_batch));
      }
      add(std::make_unique<model::Flatten>(s));
      add(std::make_unique<Linear>(s.c, 128));
      add(std::make_unique<model::ReLU>(s));
      add(std::make_unique<Linear>(s.c, c.classes));
    }
    std::size_t offset = 0;
    for (auto& layer : layers_) {
      if (layer->num_params() == 0) continue;
      layer->Bind(params_.data() + offset, grads_.data() + offset);
      offset += layer->num_params();
    }
    outputs_.resize(layers_.size());
    inputs_.resize(layers_.size());
  }

  bool IsGemm(std::size_t i) const {
    return dynamic_cast<Linear*>(layers_[i].get()) != nullptr ||
           dynamic_cast<Conv2d*>(layers_[i].get()) != nullptr;
  }
  bool IsRelu(std::size_t i) const {
    return dynamic_cast<model::ReLU*>(layers_[i].get()) != nullptr;
  }

  std::vector<float> Converted(const float* v, std::size_t n) const {
    std::vector<float> out(v, v + n);
    for (float& f : out) f = convert_(f);
    return out;
  }

  double ForwardBackward(const float* x, const std::int32_t* y, int n) {
    const float* in = x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const std::size_t in_size = layers_[i]->in_shape().size() * n;
      inputs_[i] = IsGemm(i) ? Converted(in, in_size) : std::vector<float>(in, in + in_size);
      outputs_[i].assign(layers_[i]->out_shape().size() * n, 0.0f);
      layers_[i]->Forward(inputs_[i].data(), outputs_[i].data(), n);
      in = outputs_[i].data();
    }
    std::vector<float> dy(static_cast<std::size_t>(n) * classes_);
    const model::EvalResult r = model::SoftmaxCrossEntropy(in, y, n, classes_, dy.data());
    std::vector<float> dx;
    for (std::size_t i = layers_.size(); i-- > 0;) {
      dx.assign(layers_[i]->in_shape().size() * n, 0.0f);
      float* dx_ptr = i == 0 ? nullptr : dx.data();
      if (IsGemm(i)) {
        const std::vector<float> dy_t = Converted(dy.data(), dy.size());
        layers_[i]->Backward(inputs_[i].data(), dy_t.data(), dx_ptr, n);
      } else {
        layers_[i]->Backward(inputs_[i].data(), dy.data(), dx_ptr, n);
      }
      dy.swap(dx);
    }
    return r.loss_sum / n;
  }

  const std::vector<float>& output(std::size_t i) const { return outputs_[i]; }
  std::size_t size() const { return layers_.size(); }
  const std::vector<float>& grads() const { return grads_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<float> params_;
  std::vector<float> grads_;
  Convert convert_;
  int classes_;
  std::vector<std::vector<float>> inputs_;
  std::vector<std::vector<float>> outputs_;
};

TEST(Tf32Budget, ExactForwardDataKeepsDecisionsAndErrorsWithinBounds) {
  model::SetKernelThreads(1);
  struct Mode {
    const char* name;
    Convert convert;
  };
  for (const Mode mode :
       {Mode{"round-to-nearest", RoundToTf32}, Mode{"truncate", TruncateToTf32}}) {
    for (const char* name : {"mlp", "cnn"}) {
      const bool cnn = std::string(name) == "cnn";
      const ModelConfig c = Config(name, 28, 28, cnn ? 8 : 64);
      auto cpu_or = model::Model::Create(c);
      ASSERT_TRUE(cpu_or.ok());
      model::Model& cpu = **cpu_or;
      double worst_grad = 0;
      double worst_loss = 0;
      for (std::uint64_t seed = 1; seed <= 6; ++seed) {
        SCOPED_TRACE(std::string(mode.name) + " " + name + " seed " + std::to_string(seed));
        Rng rng(seed);
        const std::vector<float> params =
            RandomParams(c, cpu.layer_ranges(), Data::kExactForward, rng);
        for (float p : params) ASSERT_EQ(p, RoundToTf32(p)) << "a weight is not TF32-exact";
        const Batch batch = RandomBatch(c, c.max_batch, Data::kExactForward, rng);
        std::copy(params.begin(), params.end(), cpu.params().begin());
        const float cpu_loss =
            cpu.ForwardBackward(batch.x.data(), batch.y.data(), c.max_batch, nullptr);

        EmulatedModel tf32(c, params, mode.convert);
        EmulatedModel fp32(c, params, Identity);
        const double loss = tf32.ForwardBackward(batch.x.data(), batch.y.data(), c.max_batch);
        fp32.ForwardBackward(batch.x.data(), batch.y.data(), c.max_batch);

        // (1) Everything up to the last ReLU/pool decision on exact values is bitwise equal:
        // the mlp's first layer; the cnn's two conv/relu/pool blocks.
        const std::size_t exact_layers = cnn ? 6 : 1;
        for (std::size_t i = 0; i < exact_layers; ++i) {
          ASSERT_TRUE(BitwiseEqual(tf32.output(i), fp32.output(i))) << "layer " << i;
        }
        // (2) The cnn's dense ReLU (layer 8) sees inputs far above 0.
        if (cnn) {
          const auto& z = tf32.output(7);
          EXPECT_GT(*std::min_element(z.begin(), z.end()), 1.0f);
        }
        // (3) The errors the GPU test bounds.
        worst_loss = std::max(worst_loss, std::fabs(loss - cpu_loss) / std::fabs(cpu_loss));
        const std::vector<int> outs = OutFeatures(c);
        for (std::size_t l = 0; l < cpu.layer_ranges().size(); ++l) {
          const auto& r = cpu.layer_ranges()[l];
          const std::size_t w_count = r.count - static_cast<std::size_t>(outs[l]);
          const std::span<const float> g(tf32.grads().data() + r.offset, r.count);
          const std::span<const float> want = cpu.grads().subspan(r.offset, r.count);
          worst_grad = std::max({worst_grad, RelErr(g.first(w_count), want.first(w_count)),
                                 RelErr(g.subspan(w_count), want.subspan(w_count))});
        }
      }
      std::printf(
          "[ emulated ] tf32 %s, %s: worst loss rel err %.3g (bound %.0e), worst "
          "gradient rel err %.3g (bound %.0e)\n",
          mode.name, name, worst_loss, kTf32LossTolerance, worst_grad, kTf32GradTolerance);
      EXPECT_LE(worst_loss, kTf32LossTolerance);
      // Half the bound: the real hardware also accumulates in a different order.
      EXPECT_LE(worst_grad, kTf32GradTolerance / 1.5);
    }
  }
}

}  // namespace
}  // namespace ringtrain::gpu::testing
