// The connection-handling core shared by the servers that face the network (the HTTP server in
// common/http.h, the rendezvous store in runner/rendezvous/tcp_store.h): a listening socket,
// one thread multiplexing every connection with poll(2), a wake pipe (an eventfd) for Stop,
// non-blocking reads into a bounded input buffer, non-blocking writes, per-connection
// deadlines, a connection cap, and accepts paused (not spun on) when descriptors run out. It
// owns no protocol: a PollHandler parses what arrives, answers, sets deadlines and picks which
// connection to evict. Everything runs on the server's thread; handlers need no locking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/event_counter.h"
#include "common/net.h"
#include "common/status.h"

namespace ringtrain::net {

// One accepted connection. Protocols derive from it for their own state.
struct PollConn {
  virtual ~PollConn() = default;

  // Queues bytes and sends what the socket takes now.
  void Send(std::string_view bytes);
  // Sends what the socket takes now; marks the connection dead on an error, and once the output
  // is sent, if `closing`.
  void Flush();

  Socket sock;
  std::string in;  // received, not yet consumed by the handler
  std::string out;
  std::size_t out_off = 0;
  // The handler's OnDeadline runs once this passes; max = none.
  SteadyTime deadline = SteadyTime::max();
  bool reading = true;   // poll for input; false once the handler has all it wants
  bool closing = false;  // close once `out` is sent
  bool dead = false;     // close at the end of this loop iteration
};

using PollConns = std::vector<std::unique_ptr<PollConn>>;

// The protocol. Every call is on the server's thread. `conns` are the open connections, oldest
// first; dead ones go at the end of the loop iteration.
class PollHandler {
 public:
  virtual ~PollHandler() = default;
  // A newcomer (non-blocking, close-on-exec) below the cap: its state, or null to close it.
  // May mark open connections dead to make room.
  virtual std::unique_ptr<PollConn> OnAccept(Socket sock, PollConns& conns) = 0;
  // A newcomer at max_connections: the open connection that makes room, or null to refuse the
  // newcomer.
  virtual PollConn* OnFull(const Socket& newcomer, PollConns& conns) = 0;
  // New bytes were appended to c.in.
  virtual void OnData(PollConn& c) = 0;
  // c.in outgrew max_input_bytes with c.reading still set.
  virtual void OnOversize(PollConn& c) = 0;
  // c.deadline passed: set a new one, or end the connection.
  virtual void OnDeadline(PollConn& c) = 0;
  // After each round of I/O, before deadlines are checked.
  virtual void AfterEvents(PollConns& /*conns*/) {}
  // accept(2) failed with `err` (out of descriptors or memory): accepts pause for accept_pause.
  virtual void OnAcceptPaused(int /*err*/) {}
};

struct PollServerOptions {
  int max_connections = 128;
  std::size_t max_input_bytes = 16 * 1024;
  // After EMFILE/ENFILE the pending connection stays queued and the listener readable: stop
  // polling it this long instead of spinning on accept.
  Duration accept_pause{std::chrono::milliseconds(100)};
  // Upper bound on one poll, so a deadline computed before a clock jump still fires.
  Duration max_poll_wait = Duration::max();
  std::string name = "server";  // for log lines
};

// Counters for tests and diagnostics.
struct PollServerStats {
  std::uint64_t wakeups = 0;        // returns from poll(2)
  std::uint64_t accept_pauses = 0;  // accepts paused for want of descriptors or memory
};

class PollServer {
 public:
  // Serves `listener` (bound and listening) on a new thread until Stop. `handler` must outlive
  // the server.
  static StatusOr<std::unique_ptr<PollServer>> Start(Socket listener, PollHandler& handler,
                                                     PollServerOptions options);
  ~PollServer();
  PollServer(const PollServer&) = delete;
  PollServer& operator=(const PollServer&) = delete;

  // Wakes the thread at once and joins it; closes every connection and the listener.
  // Idempotent.
  void Stop();
  PollServerStats stats() const;
  // The accept pauses as an event a test can wait for (the server has met the limit).
  const EventCounter& accept_pause_events() const { return accept_pauses_; }

 private:
  PollServer(Socket listener, int wake_fd, PollHandler& handler, PollServerOptions options);
  void Loop();
  void Accept(SteadyTime now);
  void Read(PollConn& c);

  Socket listener_;
  int wake_fd_;
  PollHandler& handler_;
  PollServerOptions options_;
  PollConns conns_;  // only the thread touches these
  SteadyTime accept_paused_until_{};
  std::string recv_buf_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> wakeups_{0};
  EventCounter accept_pauses_;
  std::thread thread_;
};

}  // namespace ringtrain::net
