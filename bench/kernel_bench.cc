// GFLOP/s of every matrix product the CPU models run (runner/model/layers.cc), per backend, one
// thread: the measurement behind runner/model/gemm.h's choice of oneDNN. Numbers only.
//   build/bin/kernel_bench [--backends onednn,openblas,blis] [--seconds S]
// OpenBLAS runs with the core type it picked for this CPU (printed; OPENBLAS_CORETYPE=SkylakeX
// and the like force another, as a user would have to). BLIS is Debian's libblis (OpenMP
// build), loaded with dlopen when installed: its CBLAS symbols would collide with OpenBLAS's
// if linked.
#include <cblas.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "runner/model/gemm.h"

namespace {

using Clock = std::chrono::steady_clock;
using CblasSgemm = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float,
                            const float*, int, const float*, int, float, float*, int);

struct Op {
  const char* name;
  bool ta, tb;
  int m, n, k;
};

// Batch 64; the per-sample convolution products are what Conv2d runs 64 times per batch.
constexpr Op kOps[] = {
    {"mlp fc1 forward", false, true, 64, 256, 784},
    {"mlp fc1 dW", true, false, 256, 784, 64},
    {"mlp fc1 dx", false, false, 64, 784, 256},
    {"cnn conv1 forward (per sample)", false, false, 32, 784, 9},
    {"cnn conv1 dW (per sample)", false, true, 32, 9, 784},
    {"cnn conv2 forward (per sample)", false, false, 64, 196, 288},
    {"cnn conv2 dW (per sample)", false, true, 64, 288, 196},
    {"cnn conv2 dcol (per sample)", true, false, 288, 196, 64},
    {"cnn fc1 forward", false, true, 64, 128, 3136},
    {"cnn fc1 dW", true, false, 128, 3136, 64},
    {"cnn fc1 dx", false, false, 64, 3136, 128},
};

double Measure(const std::function<void()>& fn, double flops, double seconds) {
  fn();
  fn();
  long iters = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++iters;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return flops * static_cast<double>(iters) / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  namespace model = ringtrain::model;
  std::string backends = "onednn,openblas,blis";
  double seconds = 0.3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--backends")) {
      backends = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--seconds")) {
      seconds = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: kernel_bench [--backends onednn,openblas,blis] [--seconds S]\n");
      return 2;
    }
  }
  model::SetKernelThreads(1);
  CblasSgemm blis = nullptr;
  std::vector<std::string> names;
  std::stringstream list(backends);
  for (std::string name; std::getline(list, name, ',');) {
    if (name == "blis") {
      void* lib = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (lib != nullptr) blis = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
      if (blis == nullptr) {
        std::printf("blis: not installed (apt-get install libblis-dev), skipped\n");
        continue;
      }
      if (auto* threads =
              reinterpret_cast<void (*)(int)>(dlsym(lib, "bli_thread_set_num_threads"))) {
        threads(1);
      }
    } else if (!model::GemmBackendFromName(name)) {
      std::fprintf(stderr, "kernel_bench: unknown backend '%s'\n", name.c_str());
      return 2;
    }
    names.push_back(name);
  }
  std::printf("openblas core type: %s\n", openblas_get_corename());
  std::printf("%-32s", "op (m x n x k), GFLOP/s");
  for (const auto& name : names) std::printf(" %9s", name.c_str());
  std::printf("\n");
  for (const Op& op : kOps) {
    const std::size_t lda = op.ta ? op.m : op.k;
    const std::size_t ldb = op.tb ? op.k : op.n;
    std::vector<float> a(static_cast<std::size_t>(op.m) * op.k, 0.5f);
    std::vector<float> b(static_cast<std::size_t>(op.k) * op.n, 0.25f);
    std::vector<float> c(static_cast<std::size_t>(op.m) * op.n);
    const double flops = 2.0 * op.m * op.n * op.k;
    std::printf("%-32s", op.name);
    for (const auto& name : names) {
      std::function<void()> fn;
      if (name == "blis") {
        fn = [&] {
          blis(CblasRowMajor, op.ta ? CblasTrans : CblasNoTrans, op.tb ? CblasTrans : CblasNoTrans,
               op.m, op.n, op.k, 1.0f, a.data(), static_cast<int>(lda), b.data(),
               static_cast<int>(ldb), 0.0f, c.data(), op.n);
        };
      } else {
        model::SetGemmBackend(*model::GemmBackendFromName(name));
        fn = [&] {
          model::Sgemm(op.ta ? model::Transpose::kYes : model::Transpose::kNo,
                       op.tb ? model::Transpose::kYes : model::Transpose::kNo, op.m, op.n, op.k,
                       1.0f, a.data(), static_cast<int>(lda), b.data(), static_cast<int>(ldb), 0.0f,
                       c.data(), op.n);
        };
      }
      std::printf(" %9.1f", Measure(fn, flops, seconds));
    }
    std::printf("   (%d x %d x %d)\n", op.m, op.n, op.k);
  }
  return 0;
}
