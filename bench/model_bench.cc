// Single-threaded samples/s of Model::ForwardBackward (and one optimizer step per batch) for the
// built-in models on MNIST-shaped random data. Reports numbers only; nothing here is asserted.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runner/model/gemm.h"
#include "runner/model/model.h"
#include "runner/model/model_spec.h"
#include "runner/model/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;

// via_spec: the same preset built by Model::Create(PresetSpec(name)), the generic layer-list
// path, instead of today's Model::Create(config).
int Run(const char* name, int batch, double seconds, bool via_spec) {
  namespace mdl = ringtrain::model;
  mdl::ModelConfig config;
  config.name = name;
  config.max_batch = batch;
  auto model = [&]() -> ringtrain::StatusOr<std::unique_ptr<mdl::Model>> {
    if (!via_spec) return mdl::Model::Create(config);
    auto spec = mdl::PresetSpec(name, {config.channels, config.height, config.width},
                                config.classes, config.hidden);
    if (!spec.ok()) return spec.status();
    return mdl::Model::Create(*spec, config);
  }();
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  auto& m = **model;
  auto optimizer = ringtrain::model::Optimizer::Create({}, m.params().size());
  if (!optimizer.ok()) return 1;

  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(batch) * config.height * config.width);
  for (float& v : x) v = pixel(rng);
  std::vector<std::int32_t> y(batch);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>(i % config.classes);

  for (int i = 0; i < 3; ++i) m.ForwardBackward(x.data(), y.data(), batch, {});
  long steps = 0;
  double fb_seconds = 0;
  double opt_seconds = 0;
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    const auto t0 = Clock::now();
    m.ForwardBackward(x.data(), y.data(), batch, {});
    const auto t1 = Clock::now();
    (*optimizer)->Step(m.params(), m.grads(), 1e-4);
    const auto t2 = Clock::now();
    fb_seconds += std::chrono::duration<double>(t1 - t0).count();
    opt_seconds += std::chrono::duration<double>(t2 - t1).count();
    ++steps;
  }
  std::printf(
      "%-4s %-6s batch %d params %zu: ForwardBackward %.0f samples/s (%.2f ms/batch), adam step "
      "%.3f ms\n",
      name, via_spec ? "spec" : "config", batch, m.params().size(), steps * batch / fb_seconds,
      1e3 * fb_seconds / steps, 1e3 * opt_seconds / steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace model = ringtrain::model;
  model::SetKernelThreads(1);
  // RINGTRAIN_GEMM=openblas|onednn picks the matrix-product backend, as in the runner.
  if (const char* name = std::getenv("RINGTRAIN_GEMM"); name != nullptr) {
    auto backend = model::GemmBackendFromName(name);
    if (!backend) {
      std::fprintf(stderr, "RINGTRAIN_GEMM: unknown backend '%s' (onednn, openblas)\n", name);
      return 2;
    }
    model::SetGemmBackend(*backend);
  }
  std::printf("gemm backend: %s\n",
              std::string(model::NameOf(model::CurrentGemmBackend())).c_str());
  const int batch = argc > 1 ? std::atoi(argv[1]) : 64;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  const std::string only = argc > 3 ? argv[3] : "";  // mlp or cnn; both when absent
  // Each preset through today's path and through its layer list, alternated, so both see the
  // same machine state; the order swaps every round.
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 1;
  int rc = 0;
  for (int round = 0; round < rounds; ++round) {
    for (const char* name : {"mlp", "cnn"}) {
      if (!only.empty() && only != name) continue;
      const bool spec_first = round % 2 == 1;  // neither path always runs second
      rc |= Run(name, batch, seconds, spec_first);
      rc |= Run(name, batch, seconds, !spec_first);
    }
  }
  return rc;
}
