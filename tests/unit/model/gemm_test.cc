#include "runner/model/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

namespace ringtrain::model {
namespace {

struct GemmCase {
  bool ta, tb;
  int m, n, k;
  int pad;  // extra columns in every leading dimension
  float alpha, beta;
};

// C = alpha·op(A)·op(B) + beta·C in double, row-major, as the BLAS defines it.
std::vector<float> Reference(const GemmCase& g, const std::vector<float>& a, int lda,
                             const std::vector<float>& b, int ldb, std::vector<float> c, int ldc) {
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      double sum = 0;
      for (int p = 0; p < g.k; ++p) {
        const float av = g.ta ? a[static_cast<std::size_t>(p) * lda + i]
                              : a[static_cast<std::size_t>(i) * lda + p];
        const float bv = g.tb ? b[static_cast<std::size_t>(j) * ldb + p]
                              : b[static_cast<std::size_t>(p) * ldb + j];
        sum += static_cast<double>(av) * bv;
      }
      float& out = c[static_cast<std::size_t>(i) * ldc + j];
      // beta 0 means C is not read at all (BLAS), not multiplied by zero.
      const double prior = g.beta == 0.0f ? 0.0 : g.beta * static_cast<double>(out);
      out = static_cast<float>(g.alpha * sum + prior);
    }
  }
  return c;
}

class GemmBackends : public ::testing::TestWithParam<GemmBackend> {
 protected:
  void SetUp() override {
    SetKernelThreads(1);
    SetGemmBackend(GetParam());
  }
  void TearDown() override { SetGemmBackend(GemmBackend::kOneDnn); }
};

// Every transpose combination, leading dimensions wider than the matrices (padding untouched),
// beta 0 ignoring C (even NaN in it, as the BLAS specifies), beta 1 accumulating, odd sizes.
TEST_P(GemmBackends, MatchTheDefinitionForEveryLayoutTheLayersUse) {
  const GemmCase cases[] = {
      {false, true, 64, 256, 78, 0, 1.0f, 1.0f}, {true, false, 25, 78, 64, 3, 1.0f, 0.0f},
      {false, false, 64, 78, 25, 0, 1.0f, 0.0f}, {false, false, 32, 196, 9, 5, 1.0f, 1.0f},
      {false, true, 17, 9, 196, 1, 0.5f, 1.0f},  {true, true, 7, 13, 11, 2, -2.0f, 0.5f},
      {false, false, 1, 1, 1, 0, 1.0f, 0.0f},    {true, false, 288, 196, 64, 0, 1.0f, 0.0f},
  };
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const GemmCase& g : cases) {
    const int a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
    const int b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
    const int lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
    std::vector<float> a(static_cast<std::size_t>(a_rows) * lda);
    std::vector<float> b(static_cast<std::size_t>(b_rows) * ldb);
    std::vector<float> c(static_cast<std::size_t>(g.m) * ldc);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    for (float& v : c) v = g.beta == 0.0f ? std::nanf("") : dist(rng);
    std::vector<float> want = Reference(g, a, lda, b, ldb, c, ldc);
    Sgemm(g.ta ? Transpose::kYes : Transpose::kNo, g.tb ? Transpose::kYes : Transpose::kNo, g.m,
          g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta, c.data(), ldc);
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < ldc; ++j) {
        const std::size_t at = static_cast<std::size_t>(i) * ldc + j;
        if (j >= g.n) {  // padding: never written
          EXPECT_TRUE(std::isnan(c[at]) ? std::isnan(want[at]) : c[at] == want[at]);
          continue;
        }
        ASSERT_NEAR(c[at], want[at], 1e-4f * (1.0f + static_cast<float>(g.k)))
            << NameOf(GetParam()) << " m=" << g.m << " n=" << g.n << " k=" << g.k << " at " << i
            << "," << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmBackends,
                         ::testing::Values(GemmBackend::kOneDnn, GemmBackend::kOpenBlas),
                         [](const auto& info) { return std::string(NameOf(info.param)); });

TEST(GemmBackendTest, NamesRoundTripAndUnknownNamesAreRejected) {
  for (GemmBackend b : {GemmBackend::kOneDnn, GemmBackend::kOpenBlas}) {
    EXPECT_EQ(GemmBackendFromName(NameOf(b)), b);
  }
  EXPECT_EQ(GemmBackendFromName("mkl"), std::nullopt);
  EXPECT_EQ(GemmBackendFromName(""), std::nullopt);
}

// OpenMP's thread count belongs to each calling thread: a rank's thread that calls Sgemm must
// run with the process-wide count, not OpenMP's default of one thread per core.
TEST(GemmBackendTest, EveryCallingThreadAdoptsTheKernelThreadCount) {
  SetGemmBackend(GemmBackend::kOneDnn);
  SetKernelThreads(1);
  int seen = 0;
  std::thread t([&seen] {
    omp_set_num_threads(4);  // what a thread would otherwise inherit on a 4-core machine
    std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4);
    Sgemm(Transpose::kNo, Transpose::kNo, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(),
          2);
    seen = omp_get_max_threads();
  });
  t.join();
  EXPECT_EQ(seen, 1);
}

// The OpenMP workers of the kernels never take a stop signal (their stack pointer may lie in the
// heap, with no alternate stack: common/stop.cc); the calling thread still does.
TEST(GemmBackendTest, TheKernelTeamsWorkersBlockTheStopSignals) {
  SetGemmBackend(GemmBackend::kOneDnn);
  SetKernelThreads(3);
  std::vector<int> blocked;  // per team thread: 1 when SIGTERM and SIGINT are both blocked
  int caller_blocked = -1;
  std::thread t([&blocked, &caller_blocked] {
    std::vector<float> a(64 * 64, 1.0f), b(64 * 64, 1.0f), c(64 * 64);
    Sgemm(Transpose::kNo, Transpose::kNo, 64, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f,
          c.data(), 64);
    EXPECT_FLOAT_EQ(c[0], 64.0f);
    auto both_blocked = [] {
      sigset_t now;
      pthread_sigmask(SIG_BLOCK, nullptr, &now);
      return sigismember(&now, SIGTERM) == 1 && sigismember(&now, SIGINT) == 1 ? 1 : 0;
    };
    caller_blocked = both_blocked();
    // The same team (GNU OpenMP keeps a calling thread's workers) as the kernels ran on.
    blocked.assign(3, -1);
#pragma omp parallel num_threads(3)
    { blocked[static_cast<std::size_t>(omp_get_thread_num())] = both_blocked(); }
  });
  t.join();
  SetKernelThreads(1);
  EXPECT_EQ(caller_blocked, 0) << "the calling thread keeps the stop signals";
  ASSERT_EQ(blocked.size(), 3u);
  EXPECT_EQ(blocked[0], 0) << "the team's first thread is the caller";
  EXPECT_EQ(blocked[1], 1);
  EXPECT_EQ(blocked[2], 1);
}

}  // namespace
}  // namespace ringtrain::model
