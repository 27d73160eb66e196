// TCP sockets with deadlines: listen (port 0 allowed), accept, connect with DNS and connect
// retries under jittered backoff, and send/receive of whole buffers. Every call that can block
// takes a deadline; nothing here knows about stores, rings or HTTP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/event_counter.h"
#include "common/status.h"

struct addrinfo;  // <netdb.h>

namespace ringtrain::net {

// Owns a file descriptor; closes it on destruction. Always non-blocking, TCP_NODELAY.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { Close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Close();
  // Wakes any thread blocked in poll on this socket (both directions) without closing the fd.
  void Shutdown();

 private:
  int fd_ = -1;
};

// Binds host:port (host "" or "0.0.0.0" = any; port 0 = ephemeral). A port in use is reported
// as Unavailable("... port N is already in use").
StatusOr<Socket> Listen(const std::string& host, int port, int backlog = 128);
StatusOr<int> LocalPort(const Socket& s);
StatusOr<Socket> Accept(const Socket& listener, SteadyTime deadline);

// How long one connect attempt of ConnectWithRetry waits for an answer at first. A SYN to an
// address with no host behind it (a replaced pod's old IP, still in DNS for a few seconds) is
// never answered: a later attempt resolves the name again instead of waiting out the deadline
// on a stale address. Doubles after each unanswered attempt, up to kMaxConnectAttemptTimeout
// (a slow network still connects).
inline constexpr Duration kConnectAttemptTimeout{std::chrono::seconds(2)};
inline constexpr Duration kMaxConnectAttemptTimeout{std::chrono::seconds(30)};

// One attempt: resolve and connect, bounded by the deadline; the name lookup too (on a thread
// of its own: getaddrinfo heeds neither), which a stop request also ends.
StatusOr<Socket> Connect(const std::string& host, int port, SteadyTime deadline);
// getaddrinfo's signature: what Connect resolves names with (tests make it block).
using Resolver = int (*)(const char*, const char*, const ::addrinfo*, ::addrinfo**);
// Replaces the resolver (getaddrinfo) for names that are not IPv4 literals; returns the old one.
Resolver SetResolverForTest(Resolver resolver);
// One attempt bounded by `attempt_timeout` as well: an attempt that got no answer before the
// deadline is Unavailable ("no answer within ..."), for the caller to try again (a fresh lookup).
StatusOr<Socket> ConnectAttempt(const std::string& host, int port, SteadyTime deadline,
                                Duration attempt_timeout);
// Retries resolution and connection with jittered backoff until the deadline, each attempt
// bounded as above; the last error is reported with the number of attempts. `between`, when
// given, runs after each failed attempt: its error ends the retries (another rank failed, and
// the one dialled will never answer).
StatusOr<Socket> ConnectWithRetry(const std::string& host, int port, SteadyTime deadline,
                                  Duration attempt_timeout = kConnectAttemptTimeout,
                                  const std::function<Status()>& between = {});
// Counts ConnectWithRetry's failed attempts, each as it starts to back off: a test starts the
// server only once a client has been refused (the retry, not a lucky first try, is tested).
const EventCounter& ConnectRetriesForTest();

Status SendAll(const Socket& s, const void* data, std::size_t len, SteadyTime deadline);
Status RecvAll(const Socket& s, void* data, std::size_t len, SteadyTime deadline);
// Reads whatever is available (at least 1 byte) before the deadline; 0 means the peer closed.
StatusOr<std::size_t> RecvSome(const Socket& s, void* data, std::size_t len, SteadyTime deadline);

}  // namespace ringtrain::net
