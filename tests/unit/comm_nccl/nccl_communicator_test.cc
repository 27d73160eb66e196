// The NCCL backend's collectives, in a world of one (NCCL refuses two ranks on one GPU, and
// one GPU is what CI has): results must be bit-exact, for device, pinned, managed and pageable
// host buffers, on the communicator's stream, on a caller's stream, and replayed from a CUDA
// graph. Every test here needs a GPU and skips without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runner/comm/nccl/nccl_communicator.h"
#include "runner/cuda/cuda_util.h"
#include "runner/rendezvous/memory_store.h"
#include "tests/unit/comm_nccl/nccl_test_util.h"

namespace ringtrain::comm {
namespace {

std::vector<float> RandomFloats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::vector<std::uint8_t> RandomBytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<std::uint8_t> v(n);
  for (auto& x : v) x = static_cast<std::uint8_t>(dist(gen));
  return v;
}

// Bitwise, so that -0.0f / NaN payloads would not hide a wrong copy.
bool SameBits(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

std::unique_ptr<NcclCommunicator> WorldOfOne(rendezvous::Store& store) {
  auto c = NcclCommunicator::Create(store, NcclCommOptions{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(NcclCommunicatorTest, CreatesAWorldOfOneAndPublishesTheUniqueId) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_NE(comm->stream(), nullptr);
  auto id = store.Get("nccl/id", std::chrono::milliseconds(0));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->size(), 2u * 128u) << "the 128-byte ncclUniqueId, hex-encoded";
}

TEST(NcclCommunicatorTest, AllReduceOnDeviceMemoryIsExact) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  constexpr std::size_t n = 100'003;  // not a multiple of anything NCCL likes
  gpu::DeviceBuffer<float> buf;
  ASSERT_TRUE(buf.Allocate(n).ok());
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    const auto want = RandomFloats(n, op == ReduceOp::kSum ? 1 : 2);
    ASSERT_EQ(cudaMemcpy(buf.data(), want.data(), n * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    // A pageable copy may return before it lands; NCCL's stream does not wait for it.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Status s = comm->AllReduce(buf.data(), n, op);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<float> got(n);
    ASSERT_EQ(cudaMemcpy(got.data(), buf.data(), n * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(SameBits(want, got.data())) << (op == ReduceOp::kSum ? "sum" : "average");
  }
  EXPECT_TRUE(comm->AllReduce(buf.data(), 0, ReduceOp::kSum).ok());
}

TEST(NcclCommunicatorTest, AllReduceStagesPageableHostMemoryAndGrowsTheStagingBuffer) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  // Small, then much larger than the first staging buffer, then small again.
  for (std::size_t n : {std::size_t{17}, std::size_t{1} << 22, std::size_t{1000}}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      const auto want = RandomFloats(n, static_cast<unsigned>(n));
      auto data = want;
      Status s = comm->AllReduce(data.data(), n, op);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(SameBits(want, data.data())) << "n=" << n;
    }
  }
}

TEST(NcclCommunicatorTest, AllReduceOnPinnedAndManagedMemory) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  constexpr std::size_t n = 4099;
  const auto want = RandomFloats(n, 7);

  gpu::PinnedBuffer<float> pinned;
  ASSERT_TRUE(pinned.Allocate(n).ok());
  std::memcpy(pinned.data(), want.data(), n * sizeof(float));
  Status s = comm->AllReduce(pinned.data(), n, ReduceOp::kAverage);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(SameBits(want, pinned.data()));

  float* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, n * sizeof(float)), cudaSuccess);
  std::memcpy(managed, want.data(), n * sizeof(float));
  s = comm->AllReduce(managed, n, ReduceOp::kSum);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(SameBits(want, managed));
  EXPECT_EQ(cudaFree(managed), cudaSuccess);
}

TEST(NcclCommunicatorTest, BroadcastFromRootOnDeviceAndHost) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  constexpr std::size_t bytes = 12'345;
  const auto want = RandomBytes(bytes, 3);

  auto host = want;
  Status s = comm->Broadcast(host.data(), bytes, 0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(host, want);

  gpu::DeviceBuffer<std::uint8_t> dev;
  ASSERT_TRUE(dev.Allocate(bytes).ok());
  ASSERT_EQ(cudaMemcpy(dev.data(), want.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  // A pageable copy may return before it lands; NCCL's stream does not wait for it.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  s = comm->Broadcast(dev.data(), bytes, 0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<std::uint8_t> got(bytes);
  ASSERT_EQ(cudaMemcpy(got.data(), dev.data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, want);

  // A bad root is the caller's bug: rejected without breaking the communicator.
  s = comm->Broadcast(host.data(), bytes, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = comm->Barrier();
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(NcclCommunicatorTest, AllGatherWithEveryMixOfHostAndDeviceBuffers) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  constexpr std::size_t bytes = 1001;  // world of one: out is exactly `bytes`
  const auto want = RandomBytes(bytes, 11);
  gpu::DeviceBuffer<std::uint8_t> din, dout;
  ASSERT_TRUE(din.Allocate(bytes).ok());
  ASSERT_TRUE(dout.Allocate(bytes).ok());
  ASSERT_EQ(cudaMemcpy(din.data(), want.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  // A pageable copy may return before it lands; NCCL's stream does not wait for it.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto read_dout = [&] {
    std::vector<std::uint8_t> v(bytes);
    EXPECT_EQ(cudaMemcpy(v.data(), dout.data(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemset(dout.data(), 0, bytes), cudaSuccess);
    return v;
  };

  std::vector<std::uint8_t> out(bytes, 0);
  Status s = comm->AllGather(want.data(), bytes, out.data());  // host -> host
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, want);

  s = comm->AllGather(want.data(), bytes, dout.data());  // host -> device
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(read_dout(), want);

  std::fill(out.begin(), out.end(), 0);
  s = comm->AllGather(din.data(), bytes, out.data());  // device -> host
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, want);

  s = comm->AllGather(din.data(), bytes, dout.data());  // device -> device
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(read_dout(), want);

  auto in_place = want;  // host, in == out + rank * bytes
  s = comm->AllGather(in_place.data(), bytes, in_place.data());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(in_place, want);
}

TEST(NcclCommunicatorTest, BarrierAndEmptyCollectivesSucceed) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  for (int i = 0; i < 3; ++i) {
    Status s = comm->Barrier();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::vector<std::uint8_t> v(8);
  EXPECT_TRUE(comm->Broadcast(v.data(), 0, 0).ok());
  EXPECT_TRUE(comm->AllGather(v.data(), 0, v.data()).ok());
}

TEST(NcclCommunicatorTest, AllReduceAsyncOnACallersStreamThenWait) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  gpu::Stream stream;
  ASSERT_TRUE(stream.Create().ok());
  gpu::Event done;
  ASSERT_TRUE(done.Create().ok());
  constexpr std::size_t n = 65'537;
  const auto want = RandomFloats(n, 5);
  gpu::DeviceBuffer<float> buf;
  ASSERT_TRUE(buf.Allocate(n).ok());
  ASSERT_EQ(cudaMemcpy(buf.data(), want.data(), n * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  // A pageable copy may return before it lands; NCCL's stream does not wait for it.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    Status s = comm->AllReduceAsync(buf.data(), n, op, stream.get());
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_EQ(cudaEventRecord(done.get(), stream.get()), cudaSuccess);
  Status s = comm->Wait(done.get(), "async all-reduce");
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<float> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), buf.data(), n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(SameBits(want, got.data()));
  EXPECT_TRUE(comm->AllReduceAsync(buf.data(), 0, ReduceOp::kSum, stream.get()).ok());
}

TEST(NcclCommunicatorTest, AllReduceAsyncCapturedInACudaGraphReplays) {
  RT_SKIP_WITHOUT_GPU();
  rendezvous::MemoryStore store;
  auto comm = WorldOfOne(store);
  ASSERT_NE(comm, nullptr);
  gpu::Stream stream;
  ASSERT_TRUE(stream.Create().ok());
  gpu::Event done;
  ASSERT_TRUE(done.Create().ok());
  constexpr std::size_t n = 8192;
  gpu::DeviceBuffer<float> src, data;
  ASSERT_TRUE(src.Allocate(n).ok());
  ASSERT_TRUE(data.Allocate(n).ok());

  // The graph holds the NCCL communicator: it is destroyed (here, first) before the
  // communicator.
  struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~Graph() {
      if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
    }
  } g;
  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  // The copy makes each replay observable: the all-reduce of one rank is the identity.
  cudaError_t copy = cudaMemcpyAsync(data.data(), src.data(), n * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream.get());
  Status enqueued = comm->AllReduceAsync(data.data(), n, ReduceOp::kAverage, stream.get());
  cudaError_t end = cudaStreamEndCapture(stream.get(), &g.graph);
  ASSERT_EQ(copy, cudaSuccess) << cudaGetErrorString(copy);
  ASSERT_TRUE(enqueued.ok()) << enqueued.ToString();
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  ASSERT_EQ(cudaGraphInstantiate(&g.exec, g.graph, 0), cudaSuccess);

  for (unsigned replay = 0; replay < 3; ++replay) {
    const auto want = RandomFloats(n, 100 + replay);
    ASSERT_EQ(cudaMemcpyAsync(src.data(), want.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                              stream.get()),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(g.exec, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(done.get(), stream.get()), cudaSuccess);
    Status s = comm->Wait(done.get(), "graph replay " + std::to_string(replay));
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<float> got(n);
    ASSERT_EQ(cudaMemcpy(got.data(), data.data(), n * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(SameBits(want, got.data())) << "replay " << replay;
  }
}

TEST(NcclCommunicatorTest, CommunicatorsCanBeCreatedAgainAfterDestruction) {
  RT_SKIP_WITHOUT_GPU();
  // A gang restart in the same process (tests, benchmarks): a fresh store prefix, a fresh
  // communicator; the old one finalized cleanly.
  for (int attempt = 0; attempt < 2; ++attempt) {
    rendezvous::MemoryStore store;
    auto comm = WorldOfOne(store);
    ASSERT_NE(comm, nullptr);
    std::vector<float> v(10, 1.5f);
    Status s = comm->AllReduce(v.data(), v.size(), ReduceOp::kSum);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(v[9], 1.5f);
  }
}

}  // namespace
}  // namespace ringtrain::comm
