// Peer connections prove the job token: only a holder of the gang's ring key (agreed through
// the token-authenticated store) can take a neighbour's place.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "common/net.h"
#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/rendezvous/memory_store.h"

namespace ringtrain::comm {
namespace {

TEST(TcpCommunicatorAuthTest, ImpostorWithoutTheRingKeyIsDropped) {
  rendezvous::MemoryStore store;
  // Rank 1 starts alone and publishes its address; an impostor claiming to be rank 0 (its left
  // neighbour) connects first with a well-formed hello but the wrong key.
  StatusOr<std::unique_ptr<TcpCommunicator>> rank1 = Internal("not run");
  std::thread t1([&] {
    TcpCommOptions o;
    o.rank = 1;
    o.size = 2;
    o.connect_timeout = std::chrono::seconds(30);
    rank1 = TcpCommunicator::Create(store, o);
  });
  auto addr = store.Get("comm/addr/1", std::chrono::seconds(30));
  ASSERT_TRUE(addr.ok()) << addr.status().ToString();
  auto colon = addr->rfind(':');
  auto impostor = net::Connect(addr->substr(0, colon), std::atoi(addr->c_str() + colon + 1),
                               DeadlineAfter(std::chrono::seconds(10)));
  ASSERT_TRUE(impostor.ok()) << impostor.status().ToString();
  struct {
    std::uint32_t magic, rank, size;
    unsigned char key[32];
  } hello{htonl(0x52545247), htonl(0), htonl(2), {}};
  std::memset(hello.key, 'x', sizeof(hello.key));
  ASSERT_TRUE(
      net::SendAll(*impostor, &hello, sizeof(hello), DeadlineAfter(std::chrono::seconds(5))).ok());
  // The real rank 0 arrives after the impostor: rank 1 accepts in arrival order, so it must
  // reject the impostor to form the ring.
  TcpCommOptions o;
  o.rank = 0;
  o.size = 2;
  o.connect_timeout = std::chrono::seconds(30);
  auto rank0 = TcpCommunicator::Create(store, o);
  t1.join();
  ASSERT_TRUE(rank0.ok()) << rank0.status().ToString();
  ASSERT_TRUE(rank1.ok()) << rank1.status().ToString();
  // The impostor was hung up on, without a reply.
  char reply = 0;
  auto n = net::RecvSome(*impostor, &reply, 1, DeadlineAfter(std::chrono::seconds(10)));
  EXPECT_NE(n.status().code(), StatusCode::kDeadlineExceeded) << "the impostor is still connected";
  EXPECT_TRUE(!n.ok() || *n == 0) << "the impostor got a reply";

  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  std::thread r1([&] { EXPECT_TRUE((*rank1)->AllReduce(b, 3, ReduceOp::kSum).ok()); });
  EXPECT_TRUE((*rank0)->AllReduce(a, 3, ReduceOp::kSum).ok());
  r1.join();
  EXPECT_EQ(a[2], 33);
  EXPECT_EQ(b[0], 11);
}

}  // namespace
}  // namespace ringtrain::comm
