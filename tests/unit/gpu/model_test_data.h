// Random parameters and batches for comparing GpuModel with the CPU model, shared by the
// device test (gpu_model_test.cc) and the host-side check of its TF32 error budget
// (tf32_budget_test.cc).
//
// Why two kinds of random data. ReLU and max-pooling are discontinuous: where a pre-activation
// lies within rounding distance of 0, or two values of a pooling window lie within rounding
// distance of each other, the GPU and the CPU may legitimately decide differently, and one such
// decision moves a whole sample's gradient between elements (a relative error of ~1e-2, far
// above any bound). In float32 that distance is ~1e-7 relative, so small continuous-random
// cases hit it with probability ~1e-4 (kContinuous). TF32 rounds GEMM inputs to 11 significant
// bits (~2e-4), which would flip several decisions in every realistic case, so the realistic
// shapes use kExactForward: random inputs and first-layer weights drawn from small dyadic
// grids (x = a/4, w = b/2^k with small integers a, b), so that every product and partial sum
// feeding a ReLU or a pool is exact in float32 and every GEMM input there is exact in TF32. The
// forward decisions are then identical on both sides and the comparison measures only the
// rounding of the continuous parts (logits and the whole backward pass). The cnn's 3136→128
// layer gets a bias of about +2.5 (its pre-activations stay far above 0), because its input is
// not TF32-exact; continuous weights are rounded to TF32 (so only activations get rounded).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runner/model/model.h"

namespace ringtrain::gpu::testing {

// FP32 bounds the GPU must meet against the CPU model; TF32 bounds follow from the number of
// TF32-rounded operands between the loss and a gradient (up to six in the cnn, each ~2e-4
// relative, systematic if the hardware truncates instead of rounding): see tf32_budget_test.cc,
// which emulates both conversions on the CPU and checks that these bounds hold.
inline constexpr double kFp32Tolerance = 1e-5;
inline constexpr double kTf32LossTolerance = 1e-3;
inline constexpr double kTf32GradTolerance = 4e-3;

enum class Data { kContinuous, kExactForward };

// float → TF32 (10 explicit mantissa bits): round to nearest even, or truncate (what a tensor
// core does with raw float32 operands). Finite inputs only.
inline float RoundToTf32(float v) {
  auto bits = std::bit_cast<std::uint32_t>(v);
  bits += 0x0FFFu + ((bits >> 13) & 1u);
  bits &= ~0x1FFFu;
  return std::bit_cast<float>(bits);
}
inline float TruncateToTf32(float v) {
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) & ~0x1FFFu);
}

// Output features of each parameterized layer, in forward order (model.cc's stacks).
inline std::vector<int> OutFeatures(const model::ModelConfig& c) {
  if (c.name == "mlp") return {c.hidden, c.classes};
  return {32, 64, 128, c.classes};
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  float Uniform(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(engine_);
  }
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(engine_); }
  // k/denominator with k uniform in [-max_k, max_k]: exact in float and in TF32.
  float Dyadic(int max_k, float denominator) {
    return static_cast<float>(Int(-max_k, max_k)) / denominator;
  }

 private:
  std::mt19937_64 engine_;
};

// Fresh random parameters for every layer (see the file comment for kExactForward).
inline std::vector<float> RandomParams(const model::ModelConfig& c,
                                       const std::vector<model::ParamRange>& ranges, Data data,
                                       Rng& rng) {
  std::vector<float> p(ranges.back().offset + ranges.back().count);
  const std::vector<int> outs = OutFeatures(c);
  for (std::size_t l = 0; l < ranges.size(); ++l) {
    const model::ParamRange& r = ranges[l];
    const std::size_t out = static_cast<std::size_t>(outs[l]);
    const std::size_t w_count = r.count - out;
    const float bound = 1.0f / std::sqrt(static_cast<float>(w_count / out));
    float* w = p.data() + r.offset;
    float* b = w + w_count;
    auto continuous = [&](float shift) {
      for (std::size_t i = 0; i < w_count; ++i) w[i] = RoundToTf32(rng.Uniform(-bound, bound));
      for (std::size_t i = 0; i < out; ++i) b[i] = RoundToTf32(shift + rng.Uniform(-bound, bound));
    };
    if (data == Data::kContinuous) {
      for (std::size_t i = 0; i < w_count; ++i) w[i] = rng.Uniform(-bound, bound);
      for (std::size_t i = 0; i < out; ++i) b[i] = rng.Uniform(-bound, bound);
      continue;
    }
    if (c.name == "mlp") {
      if (l == 0) {  // products k/256, |z| < 2^6: exact
        for (std::size_t i = 0; i < w_count; ++i) w[i] = rng.Dyadic(2, 64.0f);
        for (std::size_t i = 0; i < out; ++i) b[i] = rng.Dyadic(2, 64.0f);
      } else {
        continuous(0.0f);
      }
      continue;
    }
    switch (l) {
      case 0:  // conv1: outputs k/32, |z| ≤ 3.5 (7 significant bits: TF32-exact)
        for (std::size_t i = 0; i < w_count; ++i) w[i] = rng.Dyadic(3, 8.0f);
        for (std::size_t i = 0; i < out; ++i) b[i] = rng.Dyadic(4, 32.0f);
        break;
      case 1:  // conv2: products k/2048, |z| < 64: exact in float32 in any order
        for (std::size_t i = 0; i < w_count; ++i) w[i] = rng.Dyadic(4, 64.0f);
        for (std::size_t i = 0; i < out; ++i) b[i] = rng.Dyadic(64, 2048.0f);
        break;
      case 2:  // dense: pre-activations ≈ 2.5 ± 0.3, never near the ReLU's kink
        continuous(2.5f);
        break;
      default:
        continuous(0.0f);
        break;
    }
  }
  return p;
}

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

inline Batch RandomBatch(const model::ModelConfig& c, int n, Data data, Rng& rng) {
  Batch b;
  b.x.resize(static_cast<std::size_t>(n) * c.channels * c.height * c.width);
  for (float& v : b.x) {
    v = data == Data::kContinuous ? rng.Uniform(-1.0f, 2.0f) : rng.Dyadic(4, 4.0f);
  }
  for (int i = 0; i < n; ++i) b.y.push_back(rng.Int(0, c.classes - 1));
  return b;
}

inline model::ModelConfig Config(const char* name, int h, int w, int max_batch) {
  model::ModelConfig c;
  c.name = name;
  c.height = h;
  c.width = w;
  c.max_batch = max_batch;
  return c;
}

}  // namespace ringtrain::gpu::testing
