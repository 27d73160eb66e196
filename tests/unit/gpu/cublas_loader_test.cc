// cuBLAS is loaded by the first GPU model, not at a process's start: a CPU rank of a CUDA build
// does not hold libcublasLt's ~94 MB (cublas_loader.h). Runs without a GPU: loading and resolving
// need none.
#include "runner/model/cuda/cublas_loader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

namespace ringtrain::gpu {
namespace {

bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

// In a fresh process (the threadsafe death-test style runs this test alone in a new one): no
// cuBLAS before the first call, every function resolved after it, and a second call the same.
TEST(CublasLoader, LoadsOnTheFirstCallNotAtTheStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (Mapped("libcublas")) {
          std::fputs("libcublas is mapped before the first call\n", stderr);
          std::_Exit(1);
        }
        const StatusOr<const CublasApi*> api = Cublas();
        if (!api.ok()) {
          std::fprintf(stderr, "%s\n", api.status().ToString().c_str());
          std::_Exit(2);
        }
        const CublasApi& a = **api;
        if (a.create == nullptr || a.destroy == nullptr || a.set_stream == nullptr ||
            a.set_workspace == nullptr || a.set_math_mode == nullptr || a.status_name == nullptr ||
            a.status_string == nullptr || a.gemm_ex == nullptr) {
          std::fputs("a function is not resolved\n", stderr);
          std::_Exit(3);
        }
        if (!Mapped("libcublasLt") || std::string(a.status_name(CUBLAS_STATUS_NOT_SUPPORTED)) !=
                                          "CUBLAS_STATUS_NOT_SUPPORTED") {
          std::fputs("cuBLAS does not answer after loading\n", stderr);
          std::_Exit(4);
        }
        const StatusOr<const CublasApi*> again = Cublas();
        std::_Exit(again.ok() && *again == *api ? 0 : 5);
      },
      testing::ExitedWithCode(0), "");
}

// The runner itself does not ask the dynamic loader for cuBLAS (no DT_NEEDED entry), so none of
// its ranks maps it before a GPU model is made.
TEST(CublasLoader, TheRunnerDoesNotLinkCublas) {
  const std::string runner = std::string(RINGTRAIN_BUILD_DIR) + "/bin/ringtrain-runner";
  const std::string cmd = "readelf -d '" + runner + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p.get()) != nullptr) out += buf;
  ASSERT_NE(out.find("(NEEDED)"), std::string::npos) << cmd << ":\n" << out;
  EXPECT_NE(out.find("libcudnn"), std::string::npos) << "not the CUDA build's runner:\n" << out;
  EXPECT_EQ(out.find("libcublas"), std::string::npos) << out;
}

TEST(CublasLoader, TheLibraryIsTheHeadersMajorVersion) {
  EXPECT_EQ(std::string(CublasLibraryName()), "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
}

}  // namespace
}  // namespace ringtrain::gpu
