#include "common/poll_server.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace ringtrain::net {

void PollConn::Send(std::string_view bytes) {
  out.append(bytes);
  Flush();
}

void PollConn::Flush() {
  while (out_off < out.size()) {
    ssize_t n =
        ::send(sock.fd(), out.data() + out_off, out.size() - out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    dead = true;
    return;
  }
  out.clear();
  out_off = 0;
  if (closing) dead = true;
}

StatusOr<std::unique_ptr<PollServer>> PollServer::Start(Socket listener, PollHandler& handler,
                                                        PollServerOptions options) {
  if (!listener.valid()) return InvalidArgument(options.name + ": no listening socket");
  int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) return ErrnoStatus(StatusCode::kInternal, options.name + ": eventfd", errno);
  options.max_connections = std::max(1, options.max_connections);
  std::unique_ptr<PollServer> server(
      new PollServer(std::move(listener), wake, handler, std::move(options)));
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

PollServer::PollServer(Socket listener, int wake_fd, PollHandler& handler,
                       PollServerOptions options)
    : listener_(std::move(listener)),
      wake_fd_(wake_fd),
      handler_(handler),
      options_(std::move(options)),
      recv_buf_(64 * 1024, '\0') {}

PollServer::~PollServer() {
  Stop();
  ::close(wake_fd_);
}

void PollServer::Stop() {
  if (stop_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  const std::uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof(one)) < 0 && errno != EAGAIN) {
    spdlog::debug("{}: cannot wake the server: {}", options_.name, std::strerror(errno));
  }
  if (thread_.joinable()) thread_.join();
}

PollServerStats PollServer::stats() const { return {wakeups_.load(), accept_pauses_.value()}; }

void PollServer::Read(PollConn& c) {
  for (;;) {
    ssize_t n = ::recv(c.sock.fd(), recv_buf_.data(), recv_buf_.size(), MSG_DONTWAIT);
    if (n > 0) {
      c.in.append(recv_buf_.data(), static_cast<std::size_t>(n));
      handler_.OnData(c);
      if (c.dead || !c.reading) return;
      if (c.in.size() > options_.max_input_bytes) {
        handler_.OnOversize(c);
        return;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;  // closed or reset: a client that went away, nothing to answer
    return;
  }
}

void PollServer::Accept(SteadyTime now) {
  // Take every connection waiting in the backlog, so a flood cannot hide a real client behind
  // a full backlog.
  for (;;) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // EMFILE/ENFILE/ENOBUFS/ENOMEM: the connection stays queued and the listener readable.
        accept_pauses_.Bump();
        accept_paused_until_ = now + options_.accept_pause;
        handler_.OnAcceptPaused(errno);
      }
      return;
    }
    Socket sock(fd);
    const auto open =
        std::count_if(conns_.begin(), conns_.end(), [](const auto& c) { return !c->dead; });
    if (open >= options_.max_connections) {
      PollConn* victim = handler_.OnFull(sock, conns_);
      if (victim == nullptr) continue;  // refused: the socket closes here
      victim->dead = true;
    }
    auto conn = handler_.OnAccept(std::move(sock), conns_);
    if (conn != nullptr) conns_.push_back(std::move(conn));
  }
}

void PollServer::Loop() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    const SteadyTime now = std::chrono::steady_clock::now();
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({accepting ? listener_.fd() : -1, POLLIN, 0});
    SteadyTime wake_at = options_.max_poll_wait == Duration::max() ? SteadyTime::max()
                                                                   : now + options_.max_poll_wait;
    if (!accepting) wake_at = std::min(wake_at, accept_paused_until_);
    for (const auto& c : conns_) {
      short events = c->reading ? POLLIN : 0;
      if (c->out_off < c->out.size()) events = static_cast<short>(events | POLLOUT);
      fds.push_back({c->sock.fd(), events, 0});
      wake_at = std::min(wake_at, c->deadline);
    }
    int timeout_ms = -1;
    if (wake_at != SteadyTime::max()) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(wait, 0, 24 * 3600 * 1000));
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    wakeups_.fetch_add(1);
    if (ready < 0 && errno != EINTR) {
      spdlog::warn("{}: poll: {}", options_.name, std::strerror(errno));
      std::this_thread::sleep_for(options_.accept_pause);
      continue;
    }
    if (stop_.load()) break;

    // Connections accepted below are appended after the ones polled, so index i stays aligned.
    const std::size_t polled = conns_.size();
    for (std::size_t i = 0; i < polled; ++i) {
      PollConn& c = *conns_[i];
      const short ev = fds[i + 2].revents;
      if (ev == 0 || c.dead) continue;
      if (ev & (POLLERR | POLLNVAL)) {
        c.dead = true;
        continue;
      }
      if (ev & POLLOUT) c.Flush();
      if (c.dead) continue;
      if (c.reading && (ev & (POLLIN | POLLHUP))) {
        Read(c);
      } else if (ev & POLLHUP) {
        c.dead = true;
      }
    }
    handler_.AfterEvents(conns_);
    // Deadlines: a client that neither finishes its request nor takes its answer is cut off.
    const SteadyTime after = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      PollConn& c = *conns_[i];
      if (!c.dead && after >= c.deadline) handler_.OnDeadline(c);
    }
    // After the accepts: a connection evicted for a newcomer closes now, not at the next wake.
    if (fds[1].revents & POLLIN) Accept(after);
    std::erase_if(conns_, [](const auto& c) { return c->dead; });
  }
  conns_.clear();
  listener_.Close();
}

}  // namespace ringtrain::net
