// The gang's first failure, agreed through the store: the root cause reaches every rank's
// termination message (contract: "caused by rank R: <cause>") with the first failure's exit
// code, while a rank that failed on its own keeps its own cause.
#include "runner/rendezvous/failure.h"

#include <gtest/gtest.h>

#include "common/runner_contract.h"
#include "common/stop.h"
#include "runner/rendezvous/tcp_store.h"
#include "tests/fakes/in_memory_store.h"

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
  testing::InMemoryStore store;
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

TEST(FailureTest, UnknownExitCodeIsRetryable) {
  testing::InMemoryStore store;
  ASSERT_TRUE(store.Set(kFailureKey, "all-reduce: lost peer rank 2 (detected by rank 3)").ok());
  FailureReport r = ResolveFailure(store, 1, Aborted("the communicator was aborted"), 138);
  EXPECT_EQ(r.message, "caused by rank 3: all-reduce: lost peer rank 2");
  EXPECT_EQ(r.exit_code, kExitRetryable);
}

TEST(FailureTest, AnOwnFailureKeepsItsCauseEvenWhenSecond) {
  testing::InMemoryStore store;
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

}  // namespace
}  // namespace ringtrain::rendezvous
