#pragma once

#include <optional>
#include <string_view>

// The dense kernels' one seam: every matrix product of the CPU model goes through Sgemm, which
// runs on the backend measured fastest for this machine kind (bench/kernel_bench, issue 13).
//
// oneDNN's sgemm is the default: it picks its JIT kernel from CPUID features at run time, so a
// CPU newer than the distribution's libraries still gets its AVX-512 code path. OpenBLAS 0.3.21
// chooses its kernels from a table of CPU models and falls back to SSE3 ("Prescott") on models
// it does not know (Sapphire/Emerald Rapids), 4-5x slower here. It stays selectable for the
// benchmarks and as the reference the equivalence tests compare against.
namespace ringtrain::model {

enum class Transpose { kNo, kYes };

enum class GemmBackend { kOneDnn, kOpenBlas };

// C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C, all row-major with leading dimensions
// lda, ldb, ldc (of the stored, untransposed matrices).
void Sgemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// Process-wide; set once at start-up (the runner and benchmarks), before any Sgemm.
void SetGemmBackend(GemmBackend backend);
GemmBackend CurrentGemmBackend();
std::string_view NameOf(GemmBackend backend);
std::optional<GemmBackend> GemmBackendFromName(std::string_view name);

// Threads every kernel may use per calling thread (1 per rank by default: ranks already fill the
// cores). Applies to OpenBLAS and to oneDNN's OpenMP runtime, on every thread that calls Sgemm.
void SetKernelThreads(int threads);

}  // namespace ringtrain::model
