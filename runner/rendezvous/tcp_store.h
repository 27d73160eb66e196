// The TCP rendezvous store: a server (hosted by rank 0) and a client implementing Store, with
// every connection proving the job token. Must not know about ranks. The pieces: the wire
// codec (store_codec.h), the token handshake (store_auth.h), the server
// (tcp_store_server.cc, on common/poll_server.h) and the client (tcp_store_client.cc).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/event_counter.h"
#include "common/net.h"
#include "common/status.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::net {
class PollServer;
}  // namespace ringtrain::net

namespace ringtrain::rendezvous {

// How long one non-blocking store operation (Set, Add, CompareSet), or the handshake of a
// reconnect, may wait for its answer. The server answers each in microseconds from its own
// poll thread, which no training work holds up, so a store host silent this long is hung (a
// SIGSTOPped rank 0, a frozen node), not slow: as long as the server gives a client to prove
// its token, no longer. A survivor of a hung rank 0 tries an in-place recovery against its
// store and gives up after this (30 s before: 49 s from the hang to the gang restart under
// `ringtrain run` with a 10 s collective timeout, 29 s at 10 s).
inline constexpr Duration kDefaultStoreOpTimeout{std::chrono::seconds(10)};
// A blocking Get/Wait is answered by the server when its timeout passes; the client waits this
// much longer for that answer (or less, if op_timeout is shorter) before calling the server
// unresponsive, so Get(key, 1s) takes about 1s even when the store host hangs.
inline constexpr Duration kStoreReplySlack{std::chrono::seconds(2)};
// How long the server gives a fresh connection to prove the token before dropping it.
inline constexpr Duration kStoreAuthTimeout{std::chrono::seconds(10)};
static_assert(kDefaultStoreOpTimeout <= kStoreAuthTimeout);

// What the server holds open at most: a port reachable by strangers must not let them use up
// its descriptors. Connections that have not proved the token yet are dropped oldest first
// when a newcomer would exceed a limit (a rank's handshake takes milliseconds, a flood's idle
// connection waits for its timeout); above max_connections newcomers are refused.
struct TcpStoreServerLimits {
  int max_connections = 4096;
  int max_unauthenticated = 256;
  int max_unauthenticated_per_peer = 32;
};

// Serves the store from one poll() thread. Blocking Get/Wait requests are parked, not waited
// on, so one slow rank never stalls the others; a Set wakes the requests it satisfies.
class TcpStoreServer {
 public:
  // Binds host:port (port 0 picks a free one, see port()); a busy port is Unavailable with
  // "port N is already in use". `token` is the job secret every client must prove.
  static StatusOr<std::unique_ptr<TcpStoreServer>> Create(
      const std::string& host, int port, const std::string& token,
      const TcpStoreServerLimits& limits = TcpStoreServerLimits());
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // Closes every connection and joins the serving thread; idempotent.
  void Stop();

  // For tests of the serving loop: how often its thread has returned from poll(2), and how
  // often it paused accepting for want of descriptors (it must wait then, not spin).
  std::uint64_t poll_wakeups() const;
  std::uint64_t accept_pauses() const;
  // The accept pauses as an event to wait for; null before the server has started.
  const EventCounter* accept_pause_events() const;

 private:
  struct State;  // the protocol: tcp_store_server.cc
  TcpStoreServer(int port, std::unique_ptr<State> state);

  int port_;
  std::unique_ptr<State> state_;           // declared before core_: outlives it
  std::unique_ptr<net::PollServer> core_;  // the serving thread (common/poll_server.h)
};

struct TcpStoreClientOptions {
  std::string host;
  int port = 0;
  std::string token;
  // DNS and connect, and a handshake the store closes before it is through, are retried with
  // jittered backoff for this long: the rendezvous timeout, since rank 0 may start after the
  // others.
  Duration connect_timeout = kDefaultStoreTimeout;
  Duration op_timeout = kDefaultStoreOpTimeout;
  // One connect attempt waits this long for an answer (net::ConnectWithRetry doubles it on a
  // first connect). A reconnect inside a call makes one attempt: unanswered, it is Unavailable,
  // not the call's whole deadline spent on a stale address, and the caller's retry resolves
  // the name again (rank 0 lost: its replacement hosts the store at a new IP).
  Duration connect_attempt_timeout = net::kConnectAttemptTimeout;
};

// Thread-safe: one request in flight at a time; waiting for the connection counts against the
// caller's timeout. After an I/O error the connection is dropped and the next call
// reconnects once, so a dead server reads as Unavailable, promptly, on every call.
class TcpStoreClient final : public Store {
 public:
  static StatusOr<std::unique_ptr<TcpStoreClient>> Create(const TcpStoreClientOptions& options);

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, Duration timeout) override;
  StatusOr<std::int64_t> Add(const std::string& key, std::int64_t delta) override;
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired) override;
  Status Wait(const std::vector<std::string>& keys, Duration timeout) override;
  StatusOr<std::string> CompareSetWithin(const std::string& key, const std::string& expected,
                                         const std::string& desired, Duration timeout) override;

 private:
  explicit TcpStoreClient(TcpStoreClientOptions options) : options_(std::move(options)) {}
  // Sends one request and returns the ok reply's body, or the server's error.
  StatusOr<std::string> Call(const std::string& request, SteadyTime deadline);
  Status ConnectLocked(SteadyTime deadline, bool retry);
  Duration ReplySlack() const { return std::min(options_.op_timeout, kStoreReplySlack); }

  TcpStoreClientOptions options_;
  // A busy flag under a condition variable rather than a timed_mutex: the wait for the
  // connection is bounded by the caller's deadline, and ThreadSanitizer understands it.
  std::mutex mu_;
  std::condition_variable idle_;
  bool busy_ = false;
  net::Socket socket_;  // owned by whoever set busy_; invalid after an I/O error
};

}  // namespace ringtrain::rendezvous
