// TcpStore specifics: the job token, port errors, a dead server, parked requests, retries.
#include "runner/rendezvous/tcp_store.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "common/net.h"
#include "common/stop.h"
#include "runner/rendezvous/store_auth.h"
#include "runner/rendezvous/store_codec.h"

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

// A listener whose accept queue is full: SYNs to it are dropped, like those to a replaced
// pod's old IP that DNS still returns. Holds the port until destroyed.
struct Blackhole {
  net::Socket listener;
  net::Socket filler;  // the one connection a backlog of 0 queues
};
Blackhole BlackholeAt(int port) {
  Blackhole b;
  auto l = net::Listen("127.0.0.1", port, 0);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return b;
  b.listener = std::move(l).value();
  auto f = net::Connect("127.0.0.1", port, DeadlineAfter(5s));
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (f.ok()) b.filler = std::move(f).value();
  return b;
}

TEST(TcpStoreTest, AReconnectToAnUnansweringAddressIsUnavailableAndTheNextReachesANewStore) {
  auto server = StartServer();
  const int port = server->port();
  TcpStoreClientOptions o{"127.0.0.1", port, kToken, 5s, 5s};
  o.connect_attempt_timeout = 100ms;
  auto client = TcpStoreClient::Create(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ASSERT_TRUE((*client)->Set("k", "v").ok());
  server.reset();  // rank 0 is lost; its address answers nothing
  {
    Blackhole hole = BlackholeAt(port);
    // The first call finds the old connection closed; the next one connects again.
    EXPECT_EQ((*client)->Set("k", "v2").code(), StatusCode::kUnavailable);
    Status s = (*client)->Set("k", "v2");
    // Not the call's 5 s deadline spent on one SYN: Unavailable, which the rounds retry.
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find("no answer within 100ms"), std::string::npos) << s.ToString();
  }
  // The replacement hosts a fresh store at the same address: the next call reaches it.
  auto replacement = StartServer(port);
  ASSERT_NE(replacement, nullptr);
  ASSERT_TRUE((*client)->Set("k", "v3").ok());
  auto got = (*client)->Get("k", 1s);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "v3");
}

TEST(TcpStoreTest, AFirstConnectRetriesAnUnansweringAddressInsteadOfWaitingOnIt) {
  int port = 0;
  {
    auto l = net::Listen("127.0.0.1", 0);
    ASSERT_TRUE(l.ok());
    port = *net::LocalPort(*l);
  }
  Blackhole hole = BlackholeAt(port);
  auto s = net::ConnectWithRetry("127.0.0.1", port, DeadlineAfter(1s), 100ms);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded) << s.status().ToString();
  // Several attempts (100, 200, 400 ms, then what is left), each resolving the name again; not
  // one attempt that waited out the whole deadline.
  EXPECT_EQ(s.status().message().find("gave up after 1 attempt:"), std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find("gave up after"), std::string::npos) << s.status().ToString();
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
  // The server starts once the client has been refused and backs off: the retry is tested,
  // not a first attempt that happened to come late.
  const std::uint64_t retries = net::ConnectRetriesForTest().value();
  std::thread late([&] {
    EXPECT_TRUE(net::ConnectRetriesForTest().AwaitAbove(retries, 60s));
    server = StartServer(port);
  });
  auto client = Connect(port, kToken, 20s);
  late.join();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
}

// A store that closes a connection before its hello (a rank's handshake evicted as the oldest
// unproved connection from its address, the store's host going away and coming back): the
// first connect tries again within its timeout instead of failing the rank.
TEST(TcpStoreTest, AFirstConnectRetriesAStoreThatClosedItBeforeItsHello) {
  auto closer = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(closer.ok());
  const int port = *net::LocalPort(*closer);
  std::unique_ptr<TcpStoreServer> server;
  std::thread store([&] {
    auto first = net::Accept(*closer, DeadlineAfter(20s));
    EXPECT_TRUE(first.ok()) << first.status().ToString();
    if (first.ok()) first->Close();  // no hello
    closer->Close();
    server = StartServer(port);
  });
  auto client = Connect(port, kToken, 20s);
  store.join();
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

// Another service at the store's address is retryable whatever its first bytes say: an SSH
// server's banner read as a frame's length (1.4 GB) was DataLoss, permanent, where a 5-byte
// frame of garbage was Unavailable.
TEST(TcpStoreTest, AnotherServiceAtTheStoresAddressIsRetryableWhateverItSends) {
  for (const std::string& banner :
       {std::string("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"), std::string("\0\0\0\5hello", 9)}) {
    SCOPED_TRACE(banner.substr(0, 8));
    auto listener = net::Listen("127.0.0.1", 0);
    ASSERT_TRUE(listener.ok());
    std::atomic<bool> done{false};
    std::thread service([&] {
      while (!done.load()) {
        auto c = net::Accept(*listener, DeadlineAfter(100ms));
        if (c.ok()) (void)net::SendAll(*c, banner.data(), banner.size(), DeadlineAfter(1s));
      }
    });
    auto client = Connect(*net::LocalPort(*listener), kToken, 1s);
    done.store(true);
    service.join();
    ASSERT_FALSE(client.ok());
    EXPECT_TRUE(client.status().retryable()) << client.status().ToString();
    EXPECT_NE(client.status().message().find("not a ringtrain rendezvous store"), std::string::npos)
        << client.status().ToString();
  }
}

// A client that proved the token and pipelines Gets of a large value without reading the answers
// holds at most about a megabyte of them on the store host: its further requests wait unread
// (a Set queued behind them is not applied) until it reads, and are then answered in order.
// Before, all 300 answers were queued at once (+309 MB on rank 0).
TEST(TcpStoreTest, AClientThatDoesNotReadItsAnswersGetsNoMoreAnswered) {
  auto server = StartServer();
  auto writer = Connect(server->port());
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const std::string big(1 << 20, 'v');
  ASSERT_TRUE((*writer)->Set("big", big).ok());

  auto flood = net::Connect("127.0.0.1", server->port(), DeadlineAfter(5s));
  ASSERT_TRUE(flood.ok());
  ASSERT_TRUE(auth::ClientHandshake(*flood, kToken, DeadlineAfter(5s), "flood").ok());
  constexpr int kGets = 300;
  std::string requests;
  for (int i = 0; i < kGets; ++i) {
    std::string get(1, static_cast<char>(codec::Op::kGet));
    codec::PutString(get, "big");
    codec::PutU64(get, 1000);
    requests += codec::Frame(get);
  }
  std::string set(1, static_cast<char>(codec::Op::kSet));
  codec::PutString(set, "after-the-gets");
  codec::PutString(set, "1");
  requests += codec::Frame(set);
  ASSERT_TRUE(net::SendAll(*flood, requests.data(), requests.size(), DeadlineAfter(5s)).ok());

  // The Set behind the unread answers is not applied...
  auto early = (*writer)->Get("after-the-gets", 2s);
  EXPECT_EQ(early.status().code(), StatusCode::kDeadlineExceeded) << early.status().ToString();
  // ...until the client reads: every answer then comes, whole and in order, and the Set too.
  for (int i = 0; i < kGets; ++i) {
    auto reply = codec::RecvFrame(*flood, DeadlineAfter(10s));
    ASSERT_TRUE(reply.ok()) << "answer " << i << ": " << reply.status().ToString();
    ASSERT_EQ(reply->size(), big.size() + 1) << "answer " << i;
    EXPECT_EQ((*reply)[0], static_cast<char>(StatusCode::kOk));
  }
  auto set_reply = codec::RecvFrame(*flood, DeadlineAfter(10s));
  ASSERT_TRUE(set_reply.ok()) << set_reply.status().ToString();
  auto late = (*writer)->Get("after-the-gets", 10s);
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ(*late, "1");
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

TEST(TcpStoreTest, AddOverflowIsAnErrorAndLeavesTheValue) {
  auto server = StartServer();
  auto client = Connect(server->port());
  ASSERT_TRUE(client.ok());
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  ASSERT_EQ(*(*client)->Add("n", kMax), kMax);
  auto over = (*client)->Add("n", 1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument) << over.status().ToString();
  EXPECT_NE(over.status().message().find("overflow"), std::string::npos);
  EXPECT_EQ(*(*client)->Get("n", 1s), std::to_string(kMax));
  ASSERT_EQ(*(*client)->Add("m", kMin), kMin);
  EXPECT_EQ((*client)->Add("m", -1).status().code(), StatusCode::kInvalidArgument);
  // The connection is still good.
  EXPECT_EQ(*(*client)->Add("n", -1), kMax - 1);
}

// Whether the server closed a connection that never sent the token: its hello, then EOF.
bool ClosedByServer(const net::Socket& s) {
  char buf[256];
  for (;;) {
    auto n = net::RecvSome(s, buf, sizeof(buf), DeadlineAfter(500ms));
    if (!n.ok()) return n.status().code() != StatusCode::kDeadlineExceeded;
    if (*n == 0) return true;
  }
}

TEST(TcpStoreTest, StrangersCannotHoldMoreThanTheirShareOfConnections) {
  TcpStoreServerLimits limits;
  limits.max_unauthenticated_per_peer = 4;
  auto server = TcpStoreServer::Create("127.0.0.1", 0, kToken, limits);
  ASSERT_TRUE(server.ok());
  constexpr int kStrangers = 20;
  std::vector<net::Socket> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    auto s = net::Connect("127.0.0.1", (*server)->port(), DeadlineAfter(2s));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    strangers.push_back(std::move(s).value());
  }
  // A rank still gets in past the idle strangers and is served.
  auto client = Connect((*server)->port());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
  int closed = 0;
  for (const auto& s : strangers) closed += ClosedByServer(s) ? 1 : 0;
  EXPECT_GE(closed, kStrangers - limits.max_unauthenticated_per_peer);
}

// 2,000 probes once made 1,274 warning lines: a stranger must not be able to flood the log.
TEST(TcpStoreTest, WrongTokensAreLoggedAtARate) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  {
    auto server = StartServer();
    for (int i = 0; i < 20; ++i) {
      auto c = Connect(server->port(), "wrong");
      ASSERT_EQ(c.status().code(), StatusCode::kPermissionDenied);
    }
    auto good = Connect(server->port());
    ASSERT_TRUE(good.ok()) << good.status().ToString();
  }
  spdlog::set_default_logger(previous);
  std::string text = log.str();
  int lines = 0;
  for (auto at = text.find("wrong job token"); at != std::string::npos;
       at = text.find("wrong job token", at + 1)) {
    ++lines;
  }
  EXPECT_GE(lines, 1) << text;
  EXPECT_LE(lines, 2) << text;
}

int OpenDescriptors() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n - 3;  // ".", ".." and the directory's own descriptor
}

// Out of descriptors, the listener stays readable: the server must wait, not spin on accept,
// and serve again once descriptors are back.
TEST(TcpStoreTest, OutOfDescriptorsDoesNotSpinAndRecovers) {
  auto server = StartServer();
  (void)StopFd();  // created now, not while no descriptor can be had
  constexpr int kPending = 4;
  std::vector<int> socks;
  for (int i = 0; i < kPending; ++i) socks.push_back(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(server->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  const int open_now = OpenDescriptors();
  ASSERT_GT(open_now, 0);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_now);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  for (int fd : socks) {
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  // Synchronise on the server meeting the limit, not on time.
  ASSERT_NE(server->accept_pause_events(), nullptr);
  EXPECT_TRUE(server->accept_pause_events()->AwaitAbove(0, 60s));
  const std::uint64_t paused = server->accept_pauses();
  const std::uint64_t wakeups0 = server->poll_wakeups();
  // The one sleep left on purpose: "waits instead of spinning" is a rate, wakeups per stretch
  // of time, and the serving loop reads the steady clock itself (no fake clock to step). Counts
  // per pause cannot tell: a spinning server pauses on every failed accept too. Only the
  // stretch's length is timed, and a slow machine only lowers the count.
  std::this_thread::sleep_for(1s);
  const std::uint64_t wakeups = server->poll_wakeups() - wakeups0;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_GE(paused, 1u);
  // Counted, not timed: a paused server wakes about twice per accept pause (200 ms) while the
  // backlog waits, a spinning one once per failed accept, thousands of times over the same
  // stretch. A slow or loaded machine only lowers the count.
  EXPECT_LE(wakeups, 50u) << "the serving thread woke " << wakeups << " times";
  auto client = Connect(server->port());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
  for (int fd : socks) ::close(fd);
}

}  // namespace
}  // namespace ringtrain::rendezvous
