#include "runner/model/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace ringtrain::gpu {
namespace {

// The pointer type matches the header's declaration (the C++ header also declares an inline
// cublasGemmEx taking a cudaDataType compute type: the cast picks the library's own). Unevaluated:
// no reference to the symbol reaches the linker.
static_assert(
    std::is_same_v<decltype(static_cast<CublasApi::GemmExFn>(&cublasGemmEx)), CublasApi::GemmExFn>);

#define RT_STRINGIFY2(x) #x
#define RT_STRINGIFY(x) RT_STRINGIFY2(x)

struct Loaded {
  CublasApi api;
  Status status;
};

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn& out, Status& status) {
  dlerror();
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    const char* err = dlerror();
    status = FailedPrecondition(std::string("cuBLAS: ") + CublasLibraryName() + " has no " + name +
                                (err != nullptr ? std::string(" (") + err + ")" : std::string()));
    return false;
  }
  out = reinterpret_cast<Fn>(p);
  return true;
}

Loaded Load() {
  Loaded l;
  void* lib = dlopen(CublasLibraryName(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    l.status = FailedPrecondition(
        std::string("cuBLAS: ") + (err != nullptr ? err : CublasLibraryName()) +
        " (the CUDA runtime libraries are missing from this image or from LD_LIBRARY_PATH)");
    return l;
  }
  // The names as cublas_v2.h spells them after its macros (cublasCreate is cublasCreate_v2).
  CublasApi& a = l.api;
  if (Resolve(lib, RT_STRINGIFY(cublasCreate), a.create, l.status) &&
      Resolve(lib, RT_STRINGIFY(cublasDestroy), a.destroy, l.status) &&
      Resolve(lib, RT_STRINGIFY(cublasSetStream), a.set_stream, l.status) &&
      Resolve(lib, RT_STRINGIFY(cublasSetWorkspace), a.set_workspace, l.status) &&
      Resolve(lib, "cublasSetMathMode", a.set_math_mode, l.status) &&
      Resolve(lib, "cublasGetStatusName", a.status_name, l.status) &&
      Resolve(lib, "cublasGetStatusString", a.status_string, l.status) &&
      Resolve(lib, "cublasGemmEx", a.gemm_ex, l.status)) {
    l.status = Status::Ok();
  }
  return l;
}

}  // namespace

const char* CublasLibraryName() { return "libcublas.so." RT_STRINGIFY(CUBLAS_VER_MAJOR); }

StatusOr<const CublasApi*> Cublas() {
  static const Loaded loaded = Load();
  if (!loaded.status.ok()) return loaded.status;
  return &loaded.api;
}

}  // namespace ringtrain::gpu
