// The element-wise reduce kernels of the TCP ring (dst += src, and the scaled last step of an
// average), one per x86 vector ISA, picked at run time from CPUID: the binary is built without
// -march, so a CPU with AVX-512 must not be left running the SSE baseline. Owns no I/O.
#pragma once

#include <cstddef>
#include <vector>

namespace ringtrain::comm {

enum class ReduceIsa { kScalar, kSse, kAvx2, kAvx512 };

struct ReduceKernels {
  ReduceIsa isa = ReduceIsa::kScalar;
  // dst[i] += src[i]
  void (*sum)(float* dst, const float* src, std::size_t n) = nullptr;
  // dst[i] = (dst[i] + src[i]) * scale
  void (*sum_scale)(float* dst, const float* src, std::size_t n, float scale) = nullptr;
};

const char* ReduceIsaName(ReduceIsa isa);
// Whether this CPU (and this build's target) can run `isa`.
bool CpuSupports(ReduceIsa isa);
// Every ISA this CPU can run, scalar first: what the kernel tests iterate over.
std::vector<ReduceIsa> SupportedReduceIsas();
// The kernels of `isa`; the caller checks CpuSupports first (an unsupported ISA faults).
ReduceKernels ReduceKernelsFor(ReduceIsa isa);
// The widest supported ISA's kernels, decided once per process.
const ReduceKernels& BestReduceKernels();

}  // namespace ringtrain::comm
