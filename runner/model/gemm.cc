#include "runner/model/gemm.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "common/stop.h"

namespace ringtrain::model {
namespace {

std::atomic<GemmBackend> g_backend{GemmBackend::kOneDnn};
std::atomic<int> g_threads{1};

// OpenMP's thread count is an attribute of the calling thread, and ranks (benchmarks, tests)
// call from threads of their own: each thread adopts the process-wide count on its first call.
thread_local int t_threads = 0;

// oneDNN's JIT kernels run with the stack pointer inside a heap block, where a signal's frame
// would be written over the heap (common/stop.cc). The calling thread takes the stop signals (the
// runner's main thread has an alternate signal stack for them); the other threads of its OpenMP
// team block them. GNU OpenMP keeps a calling thread's team threads for its later regions, and a
// thread inherits its creator's mask: the region that starts them runs with the signals blocked
// in the caller as well (its mask is restored after), and each worker blocks them itself in case
// it existed before.
void KeepStopSignalsOffTheTeam(int threads) {
  sigset_t previous;
  BlockStopSignalsOnThisThread(&previous);
#pragma omp parallel num_threads(threads)
  {
    if (omp_get_thread_num() != 0) BlockStopSignalsOnThisThread();
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

void AdoptThreadCount() {
  const int want = g_threads.load(std::memory_order_relaxed);
  if (t_threads == want) return;
  omp_set_num_threads(want);
  t_threads = want;
  if (want > 1) KeepStopSignalsOffTheTeam(want);
}

}  // namespace

void Sgemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (g_backend.load(std::memory_order_relaxed) == GemmBackend::kOpenBlas) {
    cblas_sgemm(CblasRowMajor, ta == Transpose::kYes ? CblasTrans : CblasNoTrans,
                tb == Transpose::kYes ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc);
    return;
  }
  AdoptThreadCount();
  const dnnl_status_t status =
      dnnl_sgemm(ta == Transpose::kYes ? 'T' : 'N', tb == Transpose::kYes ? 'T' : 'N', m, n, k,
                 alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    // Only invalid arguments fail, which the layers never pass: a bug, not an input error.
    std::fprintf(stderr, "dnnl_sgemm(%d, %d, %d) failed with status %d\n", m, n, k,
                 static_cast<int>(status));
    std::abort();
  }
}

void SetGemmBackend(GemmBackend backend) { g_backend.store(backend); }

GemmBackend CurrentGemmBackend() { return g_backend.load(); }

std::string_view NameOf(GemmBackend backend) {
  return backend == GemmBackend::kOneDnn ? "onednn" : "openblas";
}

std::optional<GemmBackend> GemmBackendFromName(std::string_view name) {
  if (name == "onednn") return GemmBackend::kOneDnn;
  if (name == "openblas") return GemmBackend::kOpenBlas;
  return std::nullopt;
}

void SetKernelThreads(int threads) {
  g_threads.store(threads < 1 ? 1 : threads);
  openblas_set_num_threads(threads < 1 ? 1 : threads);
}

}  // namespace ringtrain::model
