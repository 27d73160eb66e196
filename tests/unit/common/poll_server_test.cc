// The poll-server core (common/poll_server.h) under a line-echo protocol: delivery, closing
// after the answer, deadlines, the connection cap and eviction, the input bound and Stop.
#include "common/poll_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

using namespace std::chrono_literals;

namespace ringtrain::net {
namespace {

// Echoes each line; "bye" answers and closes. Connections get `idle` to send a line.
class Echo final : public PollHandler {
 public:
  explicit Echo(Duration idle = Duration::max()) : idle_(idle) {}

  std::unique_ptr<PollConn> OnAccept(Socket sock, PollConns& /*conns*/) override {
    auto c = std::make_unique<PollConn>();
    c->sock = std::move(sock);
    if (idle_ != Duration::max()) c->deadline = DeadlineAfter(idle_);
    accepted.fetch_add(1);
    return c;
  }
  PollConn* OnFull(const Socket& /*newcomer*/, PollConns& conns) override {
    full.fetch_add(1);
    if (!evict_oldest || conns.empty()) return nullptr;
    return conns.front().get();
  }
  void OnData(PollConn& c) override {
    for (auto nl = c.in.find('\n'); nl != std::string::npos; nl = c.in.find('\n')) {
      std::string line = c.in.substr(0, nl + 1);
      c.in.erase(0, nl + 1);
      if (line == "bye\n") {
        c.closing = true;
        c.reading = false;
      }
      c.Send(line);
    }
  }
  void OnOversize(PollConn& c) override {
    oversize.fetch_add(1);
    c.dead = true;
  }
  void OnDeadline(PollConn& c) override {
    deadlines.fetch_add(1);
    c.dead = true;
  }

  bool evict_oldest = false;
  std::atomic<int> accepted{0};
  std::atomic<int> full{0};
  std::atomic<int> oversize{0};
  std::atomic<int> deadlines{0};

 private:
  Duration idle_;
};

constexpr Duration kPatience = 30s;  // only bounds a hung test; nothing asserts on it

std::unique_ptr<PollServer> Serve(Echo& echo, PollServerOptions options, int* port) {
  auto listener = Listen("127.0.0.1", 0);
  EXPECT_TRUE(listener.ok()) << listener.status().ToString();
  auto bound = LocalPort(*listener);
  EXPECT_TRUE(bound.ok());
  *port = *bound;
  auto server = PollServer::Start(std::move(listener).value(), echo, std::move(options));
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return std::move(server).value();
}

Socket Dial(int port) {
  auto s = Connect("127.0.0.1", port, DeadlineAfter(kPatience));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

void Write(const Socket& s, const std::string& bytes) {
  ASSERT_TRUE(SendAll(s, bytes.data(), bytes.size(), DeadlineAfter(kPatience)).ok());
}

// Everything the server sends until it closes the connection; "<open>" if it never does.
std::string ReadToEnd(const Socket& s) {
  std::string got;
  char buf[256];
  for (;;) {
    auto n = RecvSome(s, buf, sizeof(buf), DeadlineAfter(kPatience));
    if (!n.ok()) return n.status().code() == StatusCode::kDeadlineExceeded ? "<open>" : got;
    if (*n == 0) return got;
    got.append(buf, *n);
  }
}

std::string ReadLine(const Socket& s) {
  std::string got;
  char ch = 0;
  while (got.empty() || got.back() != '\n') {
    auto n = RecvSome(s, &ch, 1, DeadlineAfter(kPatience));
    if (!n.ok() || *n == 0) break;
    got.push_back(ch);
  }
  return got;
}

TEST(PollServerTest, DeliversBytesAndClosesOnceTheAnswerIsSent) {
  Echo echo;
  int port = 0;
  auto server = Serve(echo, {}, &port);
  Socket s = Dial(port);
  Write(s, "one\ntw");
  EXPECT_EQ(ReadLine(s), "one\n");
  Write(s, "o\nbye\n");
  EXPECT_EQ(ReadToEnd(s), "two\nbye\n");
  EXPECT_EQ(echo.accepted.load(), 1);
}

TEST(PollServerTest, DeadlineEndsAnIdleConnection) {
  Echo echo(50ms);
  int port = 0;
  auto server = Serve(echo, {}, &port);
  Socket s = Dial(port);
  Write(s, "partial line without its end");
  EXPECT_EQ(ReadToEnd(s), "");  // closed by the deadline, never answered
  EXPECT_EQ(echo.deadlines.load(), 1);
}

TEST(PollServerTest, InputBeyondTheBoundIsTheHandlersToRefuse) {
  Echo echo;
  PollServerOptions options;
  options.max_input_bytes = 16;
  int port = 0;
  auto server = Serve(echo, options, &port);
  Socket s = Dial(port);
  Write(s, std::string(64, 'x'));  // no newline: the handler keeps it all
  EXPECT_EQ(ReadToEnd(s), "");
  EXPECT_EQ(echo.oversize.load(), 1);
}

TEST(PollServerTest, AtTheCapTheNewcomerIsRefused) {
  Echo echo;
  PollServerOptions options;
  options.max_connections = 1;
  int port = 0;
  auto server = Serve(echo, options, &port);
  Socket first = Dial(port);
  Write(first, "hi\n");
  EXPECT_EQ(ReadLine(first), "hi\n");  // accepted and served
  Socket second = Dial(port);
  EXPECT_EQ(ReadToEnd(second), "");
  EXPECT_EQ(echo.full.load(), 1);
  Write(first, "still\n");
  EXPECT_EQ(ReadLine(first), "still\n");
}

TEST(PollServerTest, AtTheCapTheHandlersVictimMakesRoom) {
  Echo echo;
  echo.evict_oldest = true;
  PollServerOptions options;
  options.max_connections = 1;
  int port = 0;
  auto server = Serve(echo, options, &port);
  Socket first = Dial(port);
  Write(first, "hi\n");
  EXPECT_EQ(ReadLine(first), "hi\n");
  Socket second = Dial(port);
  EXPECT_EQ(ReadToEnd(first), "");  // evicted for the newcomer
  Write(second, "me\n");
  EXPECT_EQ(ReadLine(second), "me\n");
  EXPECT_EQ(echo.accepted.load(), 2);
}

TEST(PollServerTest, StopClosesConnectionsAndTheListener) {
  Echo echo;
  int port = 0;
  auto server = Serve(echo, {}, &port);
  Socket s = Dial(port);
  Write(s, "hi\n");
  EXPECT_EQ(ReadLine(s), "hi\n");
  server->Stop();
  EXPECT_EQ(ReadToEnd(s), "");
  EXPECT_FALSE(Connect("127.0.0.1", port, DeadlineAfter(1s)).ok());
  server->Stop();  // idempotent
}

TEST(PollServerTest, IdleServerBlocksInPoll) {
  Echo echo;  // no deadlines, no max_poll_wait: nothing to wake for
  int port = 0;
  auto server = Serve(echo, {}, &port);
  Socket s = Dial(port);
  Write(s, "hi\n");
  EXPECT_EQ(ReadLine(s), "hi\n");
  const auto before = server->stats().wakeups;
  // A sleep on purpose: "nothing wakes the loop" is a property of a stretch of time; no event
  // marks it. A loop that wakes on its own (a timeout, a spin) fails, however fast the machine.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(server->stats().wakeups, before);
}

TEST(PollServerTest, RejectsAClosedListener) {
  Echo echo;
  EXPECT_FALSE(PollServer::Start(Socket(), echo, {}).ok());
}

}  // namespace
}  // namespace ringtrain::net
