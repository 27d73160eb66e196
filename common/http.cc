#include "common/http.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <vector>

namespace ringtrain::http {
namespace {

// After EMFILE/ENFILE the pending connection stays in the backlog and the listener stays
// readable: pause accepting instead of spinning on it.
constexpr Duration kAcceptPause{100};
// Upper bound on one poll, so that a deadline computed before a clock jump still fires.
constexpr Duration kMaxPollWait{1000};

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string Serialize(const Response& resp, bool with_body) {
  std::string out = "HTTP/1.1 " + std::to_string(resp.code) + " " + Reason(resp.code) +
                    "\r\nContent-Type: " + resp.content_type +
                    "\r\nContent-Length: " + std::to_string(resp.body.size()) +
                    "\r\nConnection: close\r\n\r\n";
  if (with_body) out += resp.body;
  return out;
}

bool IsTokenChar(char c) { return c > ' ' && c < 127; }

}  // namespace

std::string RespondTo(std::string_view head, const Handlers& handlers) {
  // Request line: METHOD SP request-target SP HTTP-version CRLF (RFC 9112 section 3).
  const auto eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  const Response bad{400, "text/plain", "bad request\n"};
  if (eol == std::string_view::npos || sp1 == std::string_view::npos || sp1 == 0 ||
      sp2 == std::string_view::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    return Serialize(bad, true);
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (target.empty() || target[0] != '/' ||
      !std::all_of(method.begin(), method.end(), IsTokenChar) ||
      !std::all_of(target.begin(), target.end(), IsTokenChar)) {
    return Serialize(bad, true);
  }
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    return Serialize({405, "text/plain", "only GET is served\n"}, true);
  }
  if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  auto it = handlers.find(std::string(target));
  if (it == handlers.end()) return Serialize({404, "text/plain", "not found\n"}, !head_only);
  Response resp;
  try {  // a handler's exception must not end the server thread
    resp = it->second();
  } catch (const std::exception& e) {
    spdlog::warn("http: the handler of {} threw: {}", it->first, e.what());
    resp = {500, "text/plain", "internal error\n"};
  }
  return Serialize(resp, !head_only);
}

struct Server::Connection {
  net::Socket sock;
  SteadyTime deadline;
  std::string in;
  std::string out;
  std::size_t sent = 0;
  bool responding = false;
};

StatusOr<std::unique_ptr<Server>> Server::Create(const std::string& host, int port,
                                                 Handlers handlers, ServerOptions options) {
  ASSIGN_OR_RETURN(net::Socket listener, net::Listen(host, port));
  ASSIGN_OR_RETURN(int bound, net::LocalPort(listener));
  int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) return Internal(std::string("eventfd: ") + std::strerror(errno));
  options.max_connections = std::max(1, options.max_connections);
  return std::unique_ptr<Server>(
      new Server(std::move(listener), bound, wake, std::move(handlers), options));
}

Server::Server(net::Socket listener, int port, int wake_fd, Handlers handlers,
               ServerOptions options)
    : listener_(std::move(listener)),
      port_(port),
      wake_fd_(wake_fd),
      handlers_(std::move(handlers)),
      options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

Server::~Server() {
  Stop();
  ::close(wake_fd_);
}

void Server::Stop() {
  stop_ = true;
  const std::uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof(one)) < 0 && errno != EAGAIN) {
    spdlog::debug("http: cannot wake the server: {}", std::strerror(errno));
  }
  if (thread_.joinable()) thread_.join();
}

void Server::Loop() {
  // Oldest first: at the cap, the front connection still waiting for its request goes.
  std::list<Connection> conns;
  SteadyTime accept_paused_until{};
  std::vector<pollfd> fds;
  std::vector<std::list<Connection>::iterator> polled;
  char buf[4096];

  auto start_response = [&](Connection& c, std::string bytes) {
    c.out = std::move(bytes);
    c.sent = 0;
    c.responding = true;
    c.deadline = DeadlineAfter(options_.response_timeout);
  };
  // Sends what the socket takes now; true when the connection is finished (sent or failed).
  auto flush = [&](Connection& c) {
    while (c.sent < c.out.size()) {
      ssize_t n = ::send(c.sock.fd(), c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
    return true;
  };
  // Reads what has arrived; true when the connection is finished.
  auto receive = [&](Connection& c) {
    for (;;) {
      ssize_t n = ::recv(c.sock.fd(), buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) {
        if (errno == EINTR) continue;
        return !(errno == EAGAIN || errno == EWOULDBLOCK);
      }
      c.in.append(buf, static_cast<std::size_t>(n));
      const auto end = c.in.find("\r\n\r\n");
      if (end != std::string::npos && end + 4 <= options_.max_request_bytes) {
        start_response(c, RespondTo(std::string_view(c.in).substr(0, end + 4), handlers_));
        return flush(c);
      }
      if (c.in.size() > options_.max_request_bytes) {
        start_response(c, Serialize({431, "text/plain", "request too large\n"}, true));
        return flush(c);
      }
    }
  };

  while (!stop_) {
    const SteadyTime now = std::chrono::steady_clock::now();
    fds.clear();
    polled.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = now >= accept_paused_until;
    fds.push_back({accepting ? listener_.fd() : -1, POLLIN, 0});
    SteadyTime wake_at = now + kMaxPollWait;
    if (!accepting) wake_at = std::min(wake_at, accept_paused_until);
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      fds.push_back({it->sock.fd(), static_cast<short>(it->responding ? POLLOUT : POLLIN), 0});
      polled.push_back(it);
      wake_at = std::min(wake_at, it->deadline);
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count();
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(0, wait)));
    if (ready < 0 && errno != EINTR) {
      spdlog::warn("http: poll: {}", std::strerror(errno));
      std::this_thread::sleep_for(kAcceptPause);
      continue;
    }
    if (stop_) break;
    for (std::size_t i = 0; i < polled.size(); ++i) {
      const short ev = fds[i + 2].revents;
      if (ev == 0) continue;
      Connection& c = *polled[i];
      bool done = false;
      if (c.responding) {
        done = (ev & (POLLERR | POLLHUP | POLLNVAL)) != 0 || flush(c);
      } else {
        done = receive(c) || (ev & (POLLERR | POLLNVAL)) != 0;
      }
      if (done) conns.erase(polled[i]);
    }
    // Deadlines: a client that neither finishes its request nor takes its response is cut off.
    const SteadyTime after = std::chrono::steady_clock::now();
    for (auto it = conns.begin(); it != conns.end();) {
      it = after >= it->deadline ? conns.erase(it) : std::next(it);
    }
    if ((fds[1].revents & POLLIN) == 0) continue;
    // Take every connection waiting in the backlog, so that a flood cannot hide a real client
    // behind a full backlog.
    for (;;) {
      int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          spdlog::debug("http: accept: {}; pausing", std::strerror(errno));
          accept_paused_until = after + kAcceptPause;
        }
        break;
      }
      if (conns.size() >= static_cast<std::size_t>(options_.max_connections)) {
        auto victim = std::find_if(conns.begin(), conns.end(),
                                   [](const Connection& c) { return !c.responding; });
        if (victim == conns.end()) {
          ::close(fd);  // every slot is sending a response: the newcomer waits for none
          continue;
        }
        conns.erase(victim);
      }
      conns.push_back(Connection{net::Socket(fd), after + options_.request_timeout});
    }
  }
}

StatusOr<GetResult> Get(const std::string& host, int port, const std::string& path,
                        Duration timeout, std::size_t max_bytes) {
  auto deadline = DeadlineAfter(timeout);
  ASSIGN_OR_RETURN(net::Socket s, net::Connect(host, port, deadline));
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  RETURN_IF_ERROR(net::SendAll(s, req.data(), req.size(), deadline));
  std::string resp;
  char buf[8192];
  for (;;) {
    ASSIGN_OR_RETURN(std::size_t n, net::RecvSome(s, buf, sizeof(buf), deadline));
    if (n == 0) break;
    resp.append(buf, n);
    if (resp.size() > max_bytes) {  // a peer must not make us buffer without bound
      return Unavailable("GET " + path + ": response larger than " + std::to_string(max_bytes) +
                         " bytes");
    }
  }
  auto header_end = resp.find("\r\n\r\n");
  if (resp.compare(0, 5, "HTTP/") != 0 || header_end == std::string::npos) {
    return Unavailable("GET " + path + ": malformed HTTP response");
  }
  auto sp = resp.find(' ');
  GetResult r;
  r.code = std::atoi(resp.c_str() + sp + 1);
  r.body = resp.substr(header_end + 4);
  return r;
}

}  // namespace ringtrain::http
