#include "runner/train/grad_reducer.h"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

namespace ringtrain::train {
namespace {

using model::ParamRange;

// Records the collectives the reducer issues (from its comm thread) and averages with an
// imaginary peer whose gradients are all 1: x → (x + 1) / 2. Can be told to fail.
class RecordingComm final : public comm::Communicator {
 public:
  explicit RecordingComm(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  Status AllReduce(float* data, std::size_t count, comm::ReduceOp op) override {
    std::lock_guard lock(mu_);
    calls_.push_back({static_cast<std::size_t>(data - base_), count});
    if (fail_) return Unavailable("peer lost");
    for (std::size_t i = 0; i < count; ++i) {
      data[i] = op == comm::ReduceOp::kAverage ? (data[i] + 1.0f) / 2 : data[i] + 1.0f;
    }
    return Status::Ok();
  }
  Status Broadcast(void*, std::size_t, int) override { return Status::Ok(); }
  Status Barrier() override { return Status::Ok(); }
  Status AllGather(const void*, std::size_t, void*) override { return Status::Ok(); }
  void Abort() override {}

  void set_base(const float* base) { base_ = base; }
  void set_fail(bool fail) {
    std::lock_guard lock(mu_);
    fail_ = fail;
  }
  std::vector<ParamRange> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  int size_;
  const float* base_ = nullptr;
  std::mutex mu_;
  std::vector<ParamRange> calls_;
  bool fail_ = false;
};

struct Fixture {
  explicit Fixture(int world, std::size_t cap_bytes = 4 * sizeof(float)) : comm(world) {
    grads.assign(12, 3.0f);
    comm.set_base(grads.data());
    ReducerOptions o;
    o.bucket_cap_bytes = cap_bytes;
    auto r = GradReducer::Create(&comm, grads, ranges, std::move(o));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    reducer = std::move(r).value();
  }
  // Three ranges of 4: with a cap of 4 floats, three buckets, from the end.
  std::vector<ParamRange> ranges{{0, 4}, {4, 4}, {8, 4}};
  RecordingComm comm;
  std::vector<float> grads;
  std::unique_ptr<GradReducer> reducer;
};

TEST(GradReducer, ReducesEveryBucketInOrderWhateverTheReportOrder) {
  Fixture f(2);
  ASSERT_EQ(f.reducer->num_buckets(), 3u);
  for (int step = 0; step < 2; ++step) {
    f.reducer->OnRangeReady({0, 4});  // the first range ready first: launched last anyway
    f.reducer->OnRangeReady({8, 4});
    f.reducer->OnRangeReady({4, 4});
    ASSERT_TRUE(f.reducer->Finish().ok());
  }
  const std::vector<ParamRange> calls = f.comm.calls();
  ASSERT_EQ(calls.size(), 6u);
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(calls[3 * step + 0].offset, 8u);
    EXPECT_EQ(calls[3 * step + 1].offset, 4u);
    EXPECT_EQ(calls[3 * step + 2].offset, 0u);
  }
  // Averaged twice with the peer's ones: 3 → 2 → 1.5.
  for (float g : f.grads) EXPECT_FLOAT_EQ(g, 1.5f);
}

TEST(GradReducer, MissingRangeFailsFinishWithoutHanging) {
  Fixture f(2);
  f.reducer->OnRangeReady({8, 4});
  f.reducer->OnRangeReady({0, 4});
  Status s = f.reducer->Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("not ready"), std::string::npos) << s.ToString();
  // Only the launchable bucket went out, and the next step starts clean.
  EXPECT_EQ(f.comm.calls().size(), 1u);
  for (const ParamRange& r : f.ranges) f.reducer->OnRangeReady(r);
  EXPECT_TRUE(f.reducer->Finish().ok());
}

TEST(GradReducer, UnknownOrRepeatedReportFailsTheStepOnEveryWorldSize) {
  for (int world : {1, 2}) {
    Fixture f(world);
    f.reducer->OnRangeReady({1, 3});
    for (const ParamRange& r : f.ranges) f.reducer->OnRangeReady(r);
    Status s = f.reducer->Finish();
    EXPECT_EQ(s.code(), StatusCode::kInternal) << "world " << world;
    EXPECT_NE(s.message().find("unknown range"), std::string::npos) << s.ToString();

    for (const ParamRange& r : f.ranges) f.reducer->OnRangeReady(r);
    f.reducer->OnRangeReady({8, 4});
    s = f.reducer->Finish();
    EXPECT_NE(s.message().find("twice"), std::string::npos) << "world " << world;
  }
}

TEST(GradReducer, CollectiveFailureIsReturnedByFinish) {
  Fixture f(2);
  f.comm.set_fail(true);
  for (const ParamRange& r : f.ranges) f.reducer->OnRangeReady(r);
  Status s = f.reducer->Finish();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

TEST(GradReducer, WorldOfOneIssuesNoCollective) {
  Fixture f(1);
  for (const ParamRange& r : f.ranges) f.reducer->OnRangeReady(r);
  EXPECT_TRUE(f.reducer->Finish().ok());
  EXPECT_TRUE(f.comm.calls().empty());
  for (float g : f.grads) EXPECT_EQ(g, 3.0f);
}

TEST(GradReducer, RangesThatDoNotCoverTheGradientsAreRejected) {
  RecordingComm comm(2);
  std::vector<float> grads(10);
  auto r = GradReducer::Create(&comm, grads, {{0, 4}, {4, 4}}, ReducerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain::train
