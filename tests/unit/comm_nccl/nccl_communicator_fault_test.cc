// The NCCL watchdog: no rank may block in the driver. A stalled collective times out, a
// failure another rank recorded in the store (or the store itself gone) ends the wait, and
// Abort() from another thread ends it too; each time the communicator stays aborted and the
// root cause is in the store. A missing rank 0 or a rank that never joins fails Create in
// bounded time. The stall is a spinning kernel the test releases exactly when the watchdog has
// decided (see ObservedStore), so no assertion depends on timing. Assertions are on statuses
// only, never on wall-clock time.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runner/comm/nccl/nccl_communicator.h"
#include "runner/cuda/cuda_util.h"
#include "runner/rendezvous/memory_store.h"
#include "tests/unit/comm_nccl/nccl_test_util.h"
#include "tests/unit/comm_nccl/stall_kernel.h"

namespace ringtrain::comm {
namespace {

using namespace std::chrono_literals;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A world of one with a GPU stalled behind a spinning kernel on a caller's stream, and an
// event recorded after the stall that Wait cannot see complete until the flag is released.
struct Stalled {
  rendezvous::MemoryStore mem;
  testing::ObservedStore store{mem};
  std::unique_ptr<NcclCommunicator> comm;
  gpu::Stream stream;
  gpu::Event after_stall;
  testing::StallFlag flag;  // declared last: released (and freed) first

  Status Start(NcclCommOptions options) {
    ASSIGN_OR_RETURN(comm, NcclCommunicator::Create(store, options));
    RETURN_IF_ERROR(stream.Create());
    RETURN_IF_ERROR(after_stall.Create());
    RETURN_IF_ERROR(flag.Create());
    RETURN_IF_ERROR(gpu::CudaStatus(testing::LaunchStall(flag.device(), stream.get()), "stall"));
    return gpu::CudaStatus(cudaEventRecord(after_stall.get(), stream.get()), "cudaEventRecord");
  }
  // The GPU goes free the moment the watchdog writes or reads the "abort" key.
  void ReleaseOnAbortKey() {
    store.OnAbortKey([this] { flag.Release(); });
  }
  ~Stalled() {
    flag.Release();
    if (stream.get() != nullptr) (void)cudaStreamSynchronize(stream.get());
  }
};

// Every call on an aborted communicator fails fast with Aborted, naming the first failure.
void ExpectAbortedForGood(NcclCommunicator& comm, const std::string& cause) {
  std::vector<float> host(16, 1.0f);
  Status s = comm.AllReduce(host.data(), host.size(), ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), cause)) << s.message();
  EXPECT_EQ(comm.Barrier().code(), StatusCode::kAborted);
  EXPECT_EQ(comm.Broadcast(host.data(), 4, 0).code(), StatusCode::kAborted);
  EXPECT_EQ(comm.AllGather(host.data(), 4, host.data()).code(), StatusCode::kAborted);
  gpu::DeviceBuffer<float> dev;
  ASSERT_TRUE(dev.Allocate(16).ok());
  EXPECT_EQ(comm.AllReduceAsync(dev.data(), 16, ReduceOp::kAverage, nullptr).code(),
            StatusCode::kAborted);
}

TEST(NcclCommunicatorFaultTest, StalledCollectiveTimesOutAbortsAndRecordsTheReason) {
  RT_SKIP_WITHOUT_GPU();
  Stalled t;
  NcclCommOptions o;
  o.collective_timeout = 1s;
  o.abort_poll_interval = 100ms;
  ASSERT_TRUE(t.Start(o).ok());
  t.ReleaseOnAbortKey();

  Status s = t.comm->Wait(t.after_stall.get(), "gradient all-reduce");
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(s.retryable());
  EXPECT_TRUE(Contains(s.message(), "'gradient all-reduce' did not complete within 1s"))
      << s.message();
  EXPECT_GT(t.store.abort_reads(), 0) << "the watchdog polls the store while it waits";

  auto reason = t.mem.Get("abort", 0ms);
  ASSERT_TRUE(reason.ok()) << reason.status().ToString();
  EXPECT_TRUE(Contains(*reason, "did not complete within 1s")) << *reason;
  EXPECT_TRUE(Contains(*reason, "(detected by rank 0)")) << *reason;

  ExpectAbortedForGood(*t.comm, "did not complete within 1s");
  Status again = t.comm->Wait(t.after_stall.get(), "gradient all-reduce");
  EXPECT_EQ(again.code(), StatusCode::kAborted) << again.ToString();
}

TEST(NcclCommunicatorFaultTest, FailureRecordedByAnotherRankEndsTheWait) {
  RT_SKIP_WITHOUT_GPU();
  Stalled t;
  NcclCommOptions o;
  o.collective_timeout = 600s;  // only the store can end this wait
  o.abort_poll_interval = 20ms;
  ASSERT_TRUE(t.Start(o).ok());
  t.ReleaseOnAbortKey();
  const std::string theirs = "all-reduce: lost peer rank 2 (detected by rank 3)";
  std::thread other_rank([&] {
    // Once the watchdog has polled the key (finding nothing): the wait is under way.
    while (t.store.abort_reads() == 0) std::this_thread::yield();
    ASSERT_TRUE(t.mem.Set("abort", theirs).ok());
  });

  Status s = t.comm->Wait(t.after_stall.get(), "training step 7");
  other_rank.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_TRUE(s.retryable());
  EXPECT_TRUE(Contains(s.message(), "another rank failed")) << s.message();
  EXPECT_TRUE(Contains(s.message(), theirs)) << s.message();
  // The root cause stays the other rank's.
  auto reason = t.mem.Get("abort", 0ms);
  ASSERT_TRUE(reason.ok());
  EXPECT_EQ(*reason, theirs);
  ExpectAbortedForGood(*t.comm, theirs);
}

TEST(NcclCommunicatorFaultTest, LosingTheStoreEndsTheWait) {
  RT_SKIP_WITHOUT_GPU();
  Stalled t;
  NcclCommOptions o;
  o.collective_timeout = 600s;
  o.abort_poll_interval = 20ms;
  ASSERT_TRUE(t.Start(o).ok());
  t.ReleaseOnAbortKey();
  t.store.LoseAbortReads();  // rank 0, the store's host, is gone

  Status s = t.comm->Wait(t.after_stall.get(), "training step 3");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_TRUE(s.retryable());
  EXPECT_TRUE(Contains(s.message(), "lost the rendezvous store (rank 0)")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "Connection refused")) << s.message();
  ExpectAbortedForGood(*t.comm, "lost the rendezvous store");
}

TEST(NcclCommunicatorFaultTest, AbortFromAnotherThreadEndsThePendingWait) {
  RT_SKIP_WITHOUT_GPU();
  Stalled t;
  NcclCommOptions o;
  o.collective_timeout = 600s;
  o.abort_poll_interval = 0ms;  // no store polling: only Abort() can end this wait
  ASSERT_TRUE(t.Start(o).ok());
  std::thread signal_thread([&] {
    // Once the wait has found the event pending: Abort() must end a wait in progress.
    EXPECT_TRUE(t.comm->PendingWaitChecksForTest().AwaitAbove(0, 60s));
    t.comm->Abort();
    t.comm->Abort();   // idempotent
    t.flag.Release();  // after Abort(): the wait must still report the abort
  });

  Status s = t.comm->Wait(t.after_stall.get(), "training step 9");
  signal_thread.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_EQ(t.comm->Barrier().code(), StatusCode::kAborted);
  // Abort() is this process's decision, not a collective failure: nothing recorded.
  EXPECT_FALSE(t.mem.Get("abort", 0ms).ok());
}

TEST(NcclCommunicatorFaultTest, AbortBeforeAnyCollectiveThenDestroy) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto c = NcclCommunicator::Create(store, NcclCommOptions{});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  (*c)->Abort();
  EXPECT_EQ((*c)->Barrier().code(), StatusCode::kAborted);
  c->reset();  // the destructor neither finalizes nor aborts twice
}

TEST(NcclCommunicatorFaultTest, RankThatNeverJoinsFailsInitInBoundedTime) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  NcclCommOptions o;
  o.rank = 0;
  o.size = 2;  // rank 1 never comes
  o.init_timeout = 2s;
  auto c = NcclCommunicator::Create(store, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), "NCCL init did not complete within 2s"))
      << c.status().message();
  EXPECT_TRUE(Contains(c.status().message(), "rank 0 of 2")) << c.status().message();
  auto reason = store.Get("abort", 0ms);
  ASSERT_TRUE(reason.ok()) << "the timeout is recorded for the ranks that did join";
  EXPECT_TRUE(Contains(*reason, "NCCL init did not complete")) << *reason;
}

TEST(NcclCommunicatorFaultTest, InitGivesUpWhenAnotherRankRecordedAFailure) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  const std::string theirs = "cudaSetDevice(1): no CUDA-capable device (detected by rank 1)";
  ASSERT_TRUE(store.Set("abort", theirs).ok());
  NcclCommOptions o;
  o.rank = 0;
  o.size = 2;
  o.init_timeout = 600s;  // only the store can end this
  o.abort_poll_interval = 20ms;
  auto c = NcclCommunicator::Create(store, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kAborted) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), theirs)) << c.status().message();
}

// ---- No GPU needed: these run everywhere. ----

TEST(NcclCommunicatorFaultTest, MissingRankZeroTimesOutNamingTheUniqueId) {
  rendezvous::MemoryStore store;
  NcclCommOptions o;
  o.rank = 1;
  o.size = 2;
  o.init_timeout = 1s;
  auto c = NcclCommunicator::Create(store, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
  EXPECT_TRUE(c.status().retryable());
  EXPECT_TRUE(Contains(c.status().message(), "unique id")) << c.status().message();
  EXPECT_TRUE(Contains(c.status().message(), "nccl/id")) << c.status().message();
  EXPECT_TRUE(Contains(c.status().message(), "rank 1 of 2")) << c.status().message();
  EXPECT_TRUE(Contains(c.status().message(), "within 1s")) << c.status().message();
}

TEST(NcclCommunicatorFaultTest, MalformedUniqueIdIsDataLoss) {
  rendezvous::MemoryStore store;
  ASSERT_TRUE(store.Set("nccl/id", "not-a-unique-id").ok());
  NcclCommOptions o;
  o.rank = 1;
  o.size = 2;
  o.init_timeout = 1s;
  auto c = NcclCommunicator::Create(store, o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), "malformed NCCL unique id")) << c.status().message();
}

TEST(NcclCommunicatorFaultTest, InvalidOptionsAreRejectedBeforeAnythingElse) {
  rendezvous::MemoryStore store;
  auto create = [&](auto edit) {
    NcclCommOptions o;
    edit(o);
    return NcclCommunicator::Create(store, o).status();
  };
  EXPECT_EQ(create([](NcclCommOptions& o) {
              o.rank = 2;
              o.size = 2;
            }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(create([](NcclCommOptions& o) { o.rank = -1; }).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(create([](NcclCommOptions& o) { o.size = 0; }).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(create([](NcclCommOptions& o) { o.device = -1; }).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(create([](NcclCommOptions& o) { o.collective_timeout = 0ms; }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(create([](NcclCommOptions& o) { o.init_timeout = 0ms; }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store.size(), 0u) << "nothing published for a rejected configuration";
}

TEST(NcclCommunicatorFaultTest, WithoutAGpuCreateFailsCleanlyAndTellsThePeers) {
  if (gpu::VisibleDeviceCount() > 0) GTEST_SKIP() << "checks the no-GPU path; a GPU is visible";
  rendezvous::MemoryStore store;
  auto c = NcclCommunicator::Create(store, NcclCommOptions{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition) << c.status().ToString();
  EXPECT_TRUE(Contains(c.status().message(), "cudaSetDevice(0)")) << c.status().message();
  // Rank 0 had published its id: the others learn of the failure from the store.
  auto reason = store.Get("abort", 0ms);
  ASSERT_TRUE(reason.ok());
  EXPECT_TRUE(Contains(*reason, "cudaSetDevice(0)")) << *reason;
}

}  // namespace
}  // namespace ringtrain::comm
