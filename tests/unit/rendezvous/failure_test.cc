// The gang's first failure, agreed through the store: the root cause reaches every rank's
// termination message (contract: "caused by rank R: <cause>") with the first failure's exit
// code, while a rank that failed on its own keeps its own cause.
#include "runner/rendezvous/failure.h"

#include <gtest/gtest.h>

#include "common/runner_contract.h"
#include "common/stop.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/rendezvous/tcp_store.h"

namespace ringtrain::rendezvous {
namespace {

using namespace std::chrono_literals;

TEST(FailureTest, RecordRoundTrips) {
  FailureRecord r{2, "PERMISSION_DENIED: checkpoint dir /ckpt (x): Permission denied", 1};
  auto back = ParseFailure(EncodeFailure(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rank, 2);
  EXPECT_EQ(back->cause, r.cause);
  EXPECT_EQ(back->exit_code, 1);
}

TEST(FailureTest, CommunicatorRecordsHaveNoExitCode) {
  auto r = ParseFailure("all-reduce: lost peer rank 2 (detected by rank 3)");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->cause, "all-reduce: lost peer rank 2");
  EXPECT_FALSE(r->exit_code.has_value());
  EXPECT_FALSE(ParseFailure("garbage").has_value());
  EXPECT_FALSE(ParseFailure("x (detected by rank -1)").has_value());
  EXPECT_FALSE(ParseFailure("x (detected by rank 1, exit code 999)").has_value());
}

TEST(FailureTest, ConsequencesReportTheFirstCauseAndItsExitCode) {
  rendezvous::MemoryStore store;
  Status root = PermissionDenied("checkpoint dir /ckpt: Permission denied");
  FailureReport r0 = ResolveFailure(store, 0, root, 1);
  EXPECT_EQ(r0.message, "PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied");
  EXPECT_EQ(r0.exit_code, 1);

  FailureReport r1 = ResolveFailure(
      store, 1, Unavailable("all-reduce: lost peer rank 0 (connection closed)"), kExitRetryable);
  EXPECT_EQ(r1.message, std::string(contract::kCausedByPrefix) +
                            "0: PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied");
  EXPECT_EQ(r1.exit_code, 1);
}

// A rank that already knows its failure is another's (rank 0's start failure, broadcast to the
// others before any step): it reports it as that rank's, and publishes it as that rank's, even
// when it gets to the store first.
TEST(FailureTest, AFailureKnownToBeAnothersIsThatRanks) {
  rendezvous::MemoryStore store;
  const std::string cause = "FAILED_PRECONDITION: checkpoint dir /tmp/afile: Not a directory";
  FailureReport r1 = ResolveFailure(
      store, 1, FailedPrecondition(std::string(contract::kCausedByPrefix) + "0: " + cause), 1);
  EXPECT_EQ(r1.message, std::string(contract::kCausedByPrefix) + "0: " + cause);
  EXPECT_EQ(r1.exit_code, 1);
  auto stored = store.Get(kFailureKey, 0ms);
  ASSERT_TRUE(stored.ok());
  auto parsed = ParseFailure(*stored);
  ASSERT_TRUE(parsed.has_value()) << *stored;
  EXPECT_EQ(parsed->rank, 0);
  EXPECT_EQ(parsed->cause, cause);
  // A lost peer seen by rank 2 then names rank 0.
  FailureReport r2 = ResolveFailure(store, 2, Unavailable("lost peer rank 1"), kExitRetryable);
  EXPECT_EQ(r2.message, std::string(contract::kCausedByPrefix) + "0: " + cause);
  // A message that only looks like it is this rank's own.
  rendezvous::MemoryStore other;
  for (const std::string odd : {"caused by rank : x", "caused by rank x: y",
                                "caused by rank 12345678901: y", "caused by rank 3"}) {
    FailureReport r = ResolveFailure(other, 1, FailedPrecondition(odd), 1);
    EXPECT_EQ(r.message, "FAILED_PRECONDITION: " + odd);
  }
}

TEST(FailureTest, UnknownExitCodeIsRetryable) {
  rendezvous::MemoryStore store;
  ASSERT_TRUE(store.Set(kFailureKey, "all-reduce: lost peer rank 2 (detected by rank 3)").ok());
  FailureReport r = ResolveFailure(store, 1, Aborted("the communicator was aborted"), 138);
  EXPECT_EQ(r.message, "caused by rank 3: all-reduce: lost peer rank 2");
  EXPECT_EQ(r.exit_code, kExitRetryable);
}

TEST(FailureTest, AnOwnFailureKeepsItsCauseEvenWhenSecond) {
  rendezvous::MemoryStore store;
  (void)ResolveFailure(store, 0, DataLoss("bad file"), 1);
  FailureReport r = ResolveFailure(store, 1, InvalidArgument("bad flag"), 1);
  EXPECT_EQ(r.message, "INVALID_ARGUMENT: bad flag");
  EXPECT_EQ(r.exit_code, 1);
}

// A rank stopped by SIGTERM still publishes why, so its peers report the stop, not a lost peer.
TEST(FailureTest, PublishesAfterAStopRequest) {
  auto server = TcpStoreServer::Create("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok());
  auto client = TcpStoreClient::Create({"127.0.0.1", (*server)->port(), "tok", 5s, 5s});
  ASSERT_TRUE(client.ok());
  ResetStopForTest();
  RequestStop(15);
  FailureReport r = ResolveFailure(**client, 1, StoppedStatus("training"), 143);
  ResetStopForTest();
  EXPECT_EQ(r.exit_code, 143);
  auto stored = (*client)->Get(kFailureKey, 0ms);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  auto parsed = ParseFailure(*stored);
  ASSERT_TRUE(parsed.has_value()) << *stored;
  EXPECT_EQ(parsed->rank, 1);
  EXPECT_EQ(parsed->exit_code, 143);
  EXPECT_NE(parsed->cause.find("SIGTERM"), std::string::npos) << parsed->cause;
}

// The communicators' side (TCP ring, NCCL): one GangFailure.
TEST(GangFailure, TheFirstPublisherIsTheRootCauseForEveryRank) {
  rendezvous::MemoryStore store;
  GangFailure rank2(store, 2);
  GangFailure rank3(store, 3);
  auto first = rank2.Publish(Unavailable("all-reduce: lost peer rank 1"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->rank, 2);
  EXPECT_FALSE(first->exit_code.has_value()) << "a communicator knows no exit code";
  auto second = rank3.Publish(Aborted("the communicator was aborted"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->rank, 2) << "the second publisher learns the first failure";
  EXPECT_EQ(second->cause, "UNAVAILABLE: all-reduce: lost peer rank 1");
  EXPECT_EQ(GangFailure::Describe(*second), "UNAVAILABLE: all-reduce: lost peer rank 1 (rank 2)");
  // ...and the runner's side reads the same record.
  FailureReport r = ResolveFailure(store, 3, Aborted("aborted"), 138);
  EXPECT_EQ(r.message, std::string(contract::kCausedByPrefix) +
                           "2: UNAVAILABLE: all-reduce: lost peer rank 1");
}

TEST(GangFailure, ProbeSeesNothingThenTheRecordedFailure) {
  rendezvous::MemoryStore store;
  GangFailure watcher(store, 0);
  auto none = watcher.Probe();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(GangFailure(store, 1).Publish(DeadlineExceeded("step 7: timed out")).ok());
  auto some = watcher.Probe();
  ASSERT_TRUE(some.ok());
  ASSERT_TRUE(some->has_value());
  EXPECT_EQ((*some)->rank, 1);
  EXPECT_EQ(EncodeFailure(**some), "DEADLINE_EXCEEDED: step 7: timed out (detected by rank 1)");
}

TEST(GangFailure, ARecordInAnUnknownFormatIsKeptVerbatim) {
  rendezvous::MemoryStore store;
  ASSERT_TRUE(store.Set(kFailureKey, "something else entirely").ok());
  auto first = GangFailure(store, 0).Publish(Unavailable("x"));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->rank, -1);
  EXPECT_EQ(GangFailure::Describe(*first), "something else entirely");
}

// A store whose every call fails as a client does once rank 0 (its host) is gone.
class GoneStore final : public Store {
 public:
  Status Set(const std::string&, const std::string&) override { return Gone(); }
  StatusOr<std::string> Get(const std::string&, Duration) override { return Gone(); }
  StatusOr<std::int64_t> Add(const std::string&, std::int64_t) override { return Gone(); }
  StatusOr<std::string> CompareSet(const std::string&, const std::string&,
                                   const std::string&) override {
    return Gone();
  }
  Status Wait(const std::vector<std::string>&, Duration) override { return Gone(); }
  int gets = 0;

 private:
  Status Gone() {
    ++gets;
    return Unavailable("store connection reset");
  }
};

TEST(GangFailure, AStoreThatFailsTwiceInARowIsLost) {
  GoneStore store;
  auto probe = GangFailure(store, 1).Probe();
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(probe.status().message().find("lost the rendezvous store (rank 0)"), std::string::npos)
      << probe.status().message();
  EXPECT_EQ(store.gets, 2) << "one reconnect is allowed before the store counts as lost";
  EXPECT_FALSE(GangFailure(store, 1).Publish(Unavailable("x")).ok());
}

TEST(GangFailure, AwaitingTheRootCauseReturnsOnceItIsRecorded) {
  rendezvous::MemoryStore store;
  ASSERT_TRUE(GangFailure(store, 0).Publish(Unavailable("first")).ok());
  // Recorded already: returns at once, and works while the rank is being stopped.
  ResetStopForTest();
  RequestStop(15);
  GangFailure(store, 1).AwaitRootCause();
  ResetStopForTest();
  auto probe = GangFailure(store, 1).Probe();
  ASSERT_TRUE(probe.ok() && probe->has_value());
  EXPECT_EQ((*probe)->rank, 0);
}

}  // namespace
}  // namespace ringtrain::rendezvous
