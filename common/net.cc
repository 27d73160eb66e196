#include "common/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>

#include "common/backoff.h"
#include "common/stop.h"

namespace ringtrain::net {
namespace {

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Waits until fd is ready for `events`; DeadlineExceeded when the deadline passes, Cancelled
// when the process is asked to stop (SIGTERM must not wait out a rendezvous timeout).
Status WaitFor(int fd, short events, SteadyTime deadline, const char* what) {
  for (;;) {
    const bool stoppable = !StopExemptForThisThread();
    if (stoppable && StopRequested()) return StoppedStatus(what);
    pollfd p[2] = {{fd, events, 0}, {stoppable ? StopFdForBlockingPoll() : -1, POLLIN, 0}};
    int r = ::poll(p, stoppable ? 2 : 1, MillisLeft(deadline));
    if (r > 0 && p[0].revents != 0) return Status::Ok();
    if (r > 0) continue;  // the stop descriptor: reported at the top of the loop
    if (r == 0) return DeadlineExceeded(std::string(what) + ": timed out");
    if (errno != EINTR) return ErrnoStatus(StatusCode::kUnavailable, what, errno);
  }
}

std::string HostPort(const std::string& host, int port) {
  return host + ":" + std::to_string(port);
}

std::atomic<Resolver> g_resolver{&::getaddrinfo};

using AddrInfo = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// One lookup on a thread of its own, shared with the waiter: whichever lets go last frees it.
struct Lookup {
  int done_fd = -1;  // eventfd, written once the answer is in
  std::atomic<bool> done{false};
  int rc = 0;
  addrinfo* res = nullptr;
  ~Lookup() {
    if (res != nullptr) ::freeaddrinfo(res);
    if (done_fd >= 0) ::close(done_fd);
  }
};

// getaddrinfo with the deadline and the stop request of every other wait here. getaddrinfo
// itself waits out the resolver's own timeouts (5 s per server and attempt, for every search
// domain: a minute when the cluster's DNS is down) and no signal wakes it, so it runs on a
// thread of its own; a lookup given up on finishes there and frees itself. An IPv4 literal
// needs no lookup and takes none.
StatusOr<AddrInfo> ResolveWithin(const std::string& host, int port, SteadyTime deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  const std::string service = std::to_string(port);
  in_addr literal{};
  if (::inet_pton(AF_INET, host.c_str(), &literal) == 1) {
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) return Unavailable("resolve " + host + ": " + gai_strerror(rc));
    return AddrInfo(res, &::freeaddrinfo);
  }
  auto lookup = std::make_shared<Lookup>();
  lookup->done_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (lookup->done_fd < 0) return ErrnoStatus(StatusCode::kUnavailable, "resolve " + host, errno);
  const Resolver resolver = g_resolver.load();
  try {
    std::thread([lookup, host, service, hints, resolver] {
      addrinfo* res = nullptr;
      lookup->rc = resolver(host.c_str(), service.c_str(), &hints, &res);
      lookup->res = res;
      lookup->done.store(true, std::memory_order_release);
      const std::uint64_t one = 1;
      (void)!::write(lookup->done_fd, &one, sizeof one);
    }).detach();
  } catch (const std::system_error& e) {
    return Unavailable("resolve " + host + ": no thread for the lookup: " + e.what());
  }
  const std::string what = "resolve " + host;
  RETURN_IF_ERROR(WaitFor(lookup->done_fd, POLLIN, deadline, what.c_str()));
  if (!lookup->done.load(std::memory_order_acquire)) {
    return Internal(what + ": woken before the answer");
  }
  if (lookup->rc != 0) return Unavailable(what + ": " + gai_strerror(lookup->rc));
  return AddrInfo(std::exchange(lookup->res, nullptr), &::freeaddrinfo);
}

}  // namespace

Resolver SetResolverForTest(Resolver resolver) { return g_resolver.exchange(resolver); }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void Socket::Close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Socket::Shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

StatusOr<Socket> Listen(const std::string& host, int port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const char* node = (host.empty() || host == "0.0.0.0") ? nullptr : host.c_str();
  std::string service = std::to_string(port);
  int rc = getaddrinfo(node, service.c_str(), &hints, &res);
  if (rc != 0) {
    return Unavailable("listen " + HostPort(host, port) + ": " + gai_strerror(rc));
  }
  Socket s(::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol));
  if (!s.valid()) {
    freeaddrinfo(res);
    return ErrnoStatus(StatusCode::kUnavailable, "socket", errno);
  }
  int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s.fd(), res->ai_addr, res->ai_addrlen) != 0) {
    int err = errno;
    freeaddrinfo(res);
    if (err == EADDRINUSE) {
      return Unavailable("listen " + HostPort(host, port) + ": port " + std::to_string(port) +
                         " is already in use");
    }
    return ErrnoStatus(StatusCode::kUnavailable, "bind " + HostPort(host, port), err);
  }
  freeaddrinfo(res);
  if (::listen(s.fd(), backlog) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "listen " + HostPort(host, port), errno);
  }
  SetNonBlocking(s.fd());
  return s;
}

StatusOr<int> LocalPort(const Socket& s) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoStatus(StatusCode::kInternal, "getsockname", errno);
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

StatusOr<Socket> Accept(const Socket& listener, SteadyTime deadline) {
  for (;;) {
    RETURN_IF_ERROR(WaitFor(listener.fd(), POLLIN, deadline, "accept"));
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      SetNoDelay(fd);
      return Socket(fd);
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      continue;
    }
    return ErrnoStatus(StatusCode::kUnavailable, "accept", errno);
  }
}

StatusOr<Socket> Connect(const std::string& host, int port, SteadyTime deadline) {
  ASSIGN_OR_RETURN(const AddrInfo res, ResolveWithin(host, port, deadline));
  Status last = Unavailable("connect " + HostPort(host, port) + ": no address");
  for (addrinfo* ai = res.get(); ai != nullptr; ai = ai->ai_next) {
    Socket s(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!s.valid()) {
      last = ErrnoStatus(StatusCode::kUnavailable, "socket", errno);
      continue;
    }
    int r = ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno != EINPROGRESS) {
      last = ErrnoStatus(StatusCode::kUnavailable, "connect " + HostPort(host, port), errno);
      continue;
    }
    if (r != 0) {
      Status w = WaitFor(s.fd(), POLLOUT, deadline, "connect");
      if (!w.ok()) {
        last = w.WithContext(HostPort(host, port));
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = ErrnoStatus(StatusCode::kUnavailable, "connect " + HostPort(host, port), err);
        continue;
      }
    }
    SetNoDelay(s.fd());
    return s;
  }
  return last;
}

EventCounter& ConnectRetries() {
  static EventCounter retries;
  return retries;
}

const EventCounter& ConnectRetriesForTest() { return ConnectRetries(); }

namespace {

// ConnectAttempt, saying whether the attempt went unanswered short of the deadline.
StatusOr<Socket> Attempt(const std::string& host, int port, SteadyTime deadline,
                         Duration attempt_timeout, bool* unanswered) {
  const SteadyTime attempt_deadline =
      std::min(deadline, DeadlineAfter(std::max(attempt_timeout, Duration(1))));
  auto s = Connect(host, port, attempt_deadline);
  *unanswered =
      !s.ok() && s.status().code() == StatusCode::kDeadlineExceeded && attempt_deadline < deadline;
  if (*unanswered) {
    return Unavailable("connect " + HostPort(host, port) + ": no answer within " +
                       std::to_string(attempt_timeout.count()) + "ms");
  }
  return s;
}

}  // namespace

StatusOr<Socket> ConnectAttempt(const std::string& host, int port, SteadyTime deadline,
                                Duration attempt_timeout) {
  bool unanswered = false;
  return Attempt(host, port, deadline, attempt_timeout, &unanswered);
}

StatusOr<Socket> ConnectWithRetry(const std::string& host, int port, SteadyTime deadline,
                                  Duration attempt_timeout,
                                  const std::function<Status()>& between) {
  Backoff backoff;
  Status last = Unavailable("connect " + HostPort(host, port) + ": not attempted");
  Duration budget = std::max(attempt_timeout, Duration(1));
  int attempts = 0;
  for (;;) {
    ++attempts;
    bool unanswered = false;
    auto s = Attempt(host, port, deadline, budget, &unanswered);
    if (s.ok()) return s;
    last = s.status();
    if (s.status().code() == StatusCode::kCancelled) return s.status();
    if (between) RETURN_IF_ERROR(between());
    if (unanswered) {
      // Unanswered: resolve again at once, and give the next attempt longer.
      budget = std::min(budget * 2, kMaxConnectAttemptTimeout);
      continue;
    }
    auto wait = backoff.Next();
    if (std::chrono::steady_clock::now() + wait >= deadline) break;
    ConnectRetries().Bump();
    if (!SleepOrStop(wait)) return StoppedStatus("connect " + HostPort(host, port));
  }
  return DeadlineExceeded("gave up after " + std::to_string(attempts) +
                          (attempts == 1 ? " attempt: " : " attempts: ") + last.message());
}

Status SendAll(const Socket& s, const void* data, std::size_t len, SteadyTime deadline) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(s.fd(), p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      RETURN_IF_ERROR(WaitFor(s.fd(), POLLOUT, deadline, "send"));
      continue;
    }
    return ErrnoStatus(StatusCode::kUnavailable, "send", errno);
  }
  return Status::Ok();
}

Status RecvAll(const Socket& s, void* data, std::size_t len, SteadyTime deadline) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ASSIGN_OR_RETURN(std::size_t n, RecvSome(s, p, len, deadline));
    if (n == 0) return Unavailable("recv: connection closed by peer");
    p += n;
    len -= n;
  }
  return Status::Ok();
}

StatusOr<std::size_t> RecvSome(const Socket& s, void* data, std::size_t len, SteadyTime deadline) {
  for (;;) {
    ssize_t n = ::recv(s.fd(), data, len, 0);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      RETURN_IF_ERROR(WaitFor(s.fd(), POLLIN, deadline, "recv"));
      continue;
    }
    return ErrnoStatus(StatusCode::kUnavailable, "recv", errno);
  }
}

}  // namespace ringtrain::net
