#include "common/http.h"

#include "common/poll_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

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

// HTTP on the poll-server core: one request head per connection, then the response, then close.
class Server::Protocol final : public net::PollHandler {
 public:
  Protocol(const Handlers& handlers, const ServerOptions& options)
      : handlers_(handlers), options_(options) {}

  std::unique_ptr<net::PollConn> OnAccept(net::Socket sock, net::PollConns& /*conns*/) override {
    auto c = std::make_unique<net::PollConn>();
    c->sock = std::move(sock);
    c->deadline = DeadlineAfter(options_.request_timeout);
    return c;
  }
  // Oldest first: at the cap, the first connection still waiting for its request goes; when
  // every slot is sending a response the newcomer waits for none.
  net::PollConn* OnFull(const net::Socket& /*newcomer*/, net::PollConns& conns) override {
    auto victim = std::find_if(conns.begin(), conns.end(),
                               [](const auto& c) { return !c->dead && c->reading; });
    return victim == conns.end() ? nullptr : victim->get();
  }
  void OnData(net::PollConn& c) override {
    const auto end = c.in.find("\r\n\r\n");
    if (end != std::string::npos && end + 4 <= options_.max_request_bytes) {
      Respond(c, RespondTo(std::string_view(c.in).substr(0, end + 4), handlers_));
    }
  }
  void OnOversize(net::PollConn& c) override {
    Respond(c, Serialize({431, "text/plain", "request too large\n"}, true));
  }
  void OnDeadline(net::PollConn& c) override { c.dead = true; }
  void OnAcceptPaused(int err) override {
    spdlog::debug("http: accept: {}; pausing", std::strerror(err));
  }

 private:
  void Respond(net::PollConn& c, const std::string& bytes) {
    c.reading = false;
    c.closing = true;
    c.deadline = DeadlineAfter(options_.response_timeout);
    c.Send(bytes);
  }

  const Handlers& handlers_;
  const ServerOptions& options_;
};

StatusOr<std::unique_ptr<Server>> Server::Create(const std::string& host, int port,
                                                 Handlers handlers, ServerOptions options) {
  ASSIGN_OR_RETURN(net::Socket listener, net::Listen(host, port));
  ASSIGN_OR_RETURN(int bound, net::LocalPort(listener));
  options.max_connections = std::max(1, options.max_connections);
  std::unique_ptr<Server> server(new Server(bound, std::move(handlers), options));
  net::PollServerOptions core;
  core.max_connections = options.max_connections;
  core.max_input_bytes = options.max_request_bytes;
  core.accept_pause = kAcceptPause;
  core.max_poll_wait = kMaxPollWait;
  core.name = "http";
  ASSIGN_OR_RETURN(server->core_,
                   net::PollServer::Start(std::move(listener), *server->protocol_, core));
  return server;
}

Server::Server(int port, Handlers handlers, ServerOptions options)
    : port_(port),
      handlers_(std::move(handlers)),
      options_(options),
      protocol_(std::make_unique<Protocol>(handlers_, options_)) {}

Server::~Server() { Stop(); }

void Server::Stop() {
  if (core_ != nullptr) core_->Stop();
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
  // The status line: "HTTP/1.1 200 OK"; a three-digit code after the first space.
  const std::string_view status_line(resp.data(), resp.find("\r\n"));
  const auto sp = status_line.find(' ');
  if (sp == std::string_view::npos || status_line.size() < sp + 4 ||
      !std::all_of(status_line.begin() + static_cast<std::ptrdiff_t>(sp) + 1,
                   status_line.begin() + static_cast<std::ptrdiff_t>(sp) + 4,
                   [](char c) { return c >= '0' && c <= '9'; }) ||
      (status_line.size() > sp + 4 && status_line[sp + 4] != ' ')) {
    return Unavailable("GET " + path + ": malformed HTTP status line");
  }
  GetResult r;
  r.code = (status_line[sp + 1] - '0') * 100 + (status_line[sp + 2] - '0') * 10 +
           (status_line[sp + 3] - '0');
  r.body = resp.substr(header_end + 4);
  return r;
}

}  // namespace ringtrain::http
