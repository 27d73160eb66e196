// TcpStore specifics: the job token, port errors, a dead server, parked requests, retries.
#include "runner/rendezvous/tcp_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/net.h"

namespace ringtrain::rendezvous {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "s3cret-job-token";

std::unique_ptr<TcpStoreServer> StartServer(int port = 0) {
  auto server = TcpStoreServer::Create("127.0.0.1", port, kToken);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(server).value() : nullptr;
}

StatusOr<std::unique_ptr<TcpStoreClient>> Connect(int port, std::string token = kToken,
                                                  Duration connect_timeout = 5s) {
  return TcpStoreClient::Create({"127.0.0.1", port, std::move(token), connect_timeout, 5s});
}

TEST(TcpStoreTest, WrongTokenIsRefused) {
  auto server = StartServer();
  auto client = Connect(server->port(), "not-the-token");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kPermissionDenied) << client.status().ToString();
  EXPECT_FALSE(client.status().retryable());
  EXPECT_NE(client.status().message().find("rendezvous store refused the job token"),
            std::string::npos)
      << client.status().message();
  // The server keeps serving the right token.
  auto good = Connect(server->port());
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE((*good)->Set("k", "v").ok());
}

TEST(TcpStoreTest, EmptyTokenIsInvalid) {
  EXPECT_EQ(TcpStoreServer::Create("127.0.0.1", 0, "").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(TcpStoreTest, BusyPortIsReportedAsAlreadyInUse) {
  auto first = StartServer();
  auto second = TcpStoreServer::Create("127.0.0.1", first->port(), kToken);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("already in use"), std::string::npos)
      << second.status().message();
}

TEST(TcpStoreTest, DeadServerIsUnavailable) {
  auto server = StartServer();
  auto client = Connect(server->port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Set("k", "v").ok());
  server->Stop();
  Status s = (*client)->Set("k", "v2");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  // Still Unavailable on the next call (it reconnects once and is refused), not a hang.
  EXPECT_EQ((*client)->Get("k", 10s).status().code(), StatusCode::kUnavailable);
}

TEST(TcpStoreTest, ParkedGetDoesNotBlockOtherClients) {
  auto server = StartServer();
  auto waiter = Connect(server->port());
  auto writer = Connect(server->port());
  ASSERT_TRUE(waiter.ok() && writer.ok());
  std::thread blocked([&] {
    auto got = (*waiter)->Get("release", 10s);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
  });
  // These complete while the other client's Get is parked on the server.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*writer)->Set("k" + std::to_string(i), "v").ok());
    ASSERT_TRUE((*writer)->Get("k" + std::to_string(i), 1s).ok());
  }
  ASSERT_TRUE((*writer)->Set("release", "now").ok());
  blocked.join();
}

TEST(TcpStoreTest, ClientRetriesUntilTheServerStarts) {
  int port;
  {
    auto probe = net::Listen("127.0.0.1", 0);
    ASSERT_TRUE(probe.ok());
    port = *net::LocalPort(*probe);
  }
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    server = StartServer(port);
  });
  auto client = Connect(port, kToken, 20s);
  late.join();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
}

TEST(TcpStoreTest, ClientGivesUpAfterConnectTimeout) {
  int port;
  {
    auto probe = net::Listen("127.0.0.1", 0);
    ASSERT_TRUE(probe.ok());
    port = *net::LocalPort(*probe);
  }
  auto client = Connect(port, kToken, 300ms);
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(client.status().retryable()) << client.status().ToString();
}

TEST(TcpStoreTest, SilentServerTimesOutTheHandshake) {
  // Accepts (through the kernel backlog) but never speaks: a hung store host.
  auto silent = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(silent.ok());
  auto client = TcpStoreClient::Create({"127.0.0.1", *net::LocalPort(*silent), kToken, 5s, 200ms});
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kDeadlineExceeded) << client.status().ToString();
  EXPECT_NE(client.status().message().find("handshake"), std::string::npos);
}

TEST(TcpStoreTest, GarbageFromAStrangerDoesNotHurtTheServer) {
  auto server = StartServer();
  auto stranger = net::Connect("127.0.0.1", server->port(), DeadlineAfter(1s));
  ASSERT_TRUE(stranger.ok());
  const char junk[] = "\xff\xff\xff\xffGET / HTTP/1.1\r\n\r\n";
  ASSERT_TRUE(net::SendAll(*stranger, junk, sizeof(junk), DeadlineAfter(1s)).ok());
  auto client = Connect(server->port());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
  EXPECT_EQ(*(*client)->Get("k", 1s), "v");
}

TEST(TcpStoreTest, ServerTimeoutAnswersButKeepsTheConnection) {
  auto server = StartServer();
  auto client = Connect(server->port());
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Get("missing", 20ms).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*client)->Set("missing", "now").ok());
  EXPECT_EQ(*(*client)->Get("missing", 20ms), "now");
}

}  // namespace
}  // namespace ringtrain::rendezvous
