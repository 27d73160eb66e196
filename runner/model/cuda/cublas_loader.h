// cuBLAS, loaded with dlopen when the first GpuModel is created instead of linked into the
// runner. libcublasLt (which libcublas needs) holds about 88 MB of zero-initialised data that is
// touched as it loads (RssAnon +94 MB, measured on CUDA 13.0): linked, every rank of a CUDA build
// paid for it, CPU ranks too, which never call cuBLAS and whose memory the gang's pre-check
// (CheckLocalGangMemory) estimates without it.
#pragma once

#include <cublas_v2.h>

#include "common/status.h"

namespace ringtrain::gpu {

// The cuBLAS functions GpuModel calls, resolved from the loaded library.
struct CublasApi {
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void*, const void*, cudaDataType, int,
                                      const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  GemmExFn gemm_ex = nullptr;
};

// The library's file name: libcublas.so.<CUBLAS_VER_MAJOR> of the headers built against.
const char* CublasLibraryName();

// This process's cuBLAS, loaded (RTLD_NOW, never unloaded) and resolved on the first call, from
// any thread; the same answer after. A library or function that does not load is
// FailedPrecondition (permanent: a restart on the same image finds the same files), naming the
// library and dlerror()'s words, e.g. "cuBLAS: libcublas.so.13: cannot open shared object file:
// No such file or directory (the CUDA runtime libraries are missing from this image or from
// LD_LIBRARY_PATH)".
StatusOr<const CublasApi*> Cublas();

}  // namespace ringtrain::gpu
