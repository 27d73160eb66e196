#include "common/http.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace ringtrain::http {
namespace {

constexpr std::size_t kMaxRequest = 16 * 1024;
constexpr Duration kRequestTimeout{5000};
constexpr Duration kPollInterval{200};

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
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::Create(const std::string& host, int port,
                                                 std::map<std::string, Handler> handlers) {
  ASSIGN_OR_RETURN(net::Socket listener, net::Listen(host, port));
  ASSIGN_OR_RETURN(int bound, net::LocalPort(listener));
  return std::unique_ptr<Server>(new Server(std::move(listener), bound, std::move(handlers)));
}

Server::Server(net::Socket listener, int port, std::map<std::string, Handler> handlers)
    : listener_(std::move(listener)), port_(port), handlers_(std::move(handlers)) {
  thread_ = std::thread([this] { Loop(); });
}

Server::~Server() { Stop(); }

void Server::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Server::Loop() {
  while (!stop_) {
    // Short accept deadlines let Stop() take effect promptly without a wake-up pipe.
    auto conn = net::Accept(listener_, DeadlineAfter(kPollInterval));
    if (!conn.ok()) continue;
    Serve(std::move(conn).value());
  }
}

void Server::Serve(net::Socket conn) {
  auto deadline = DeadlineAfter(kRequestTimeout);
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos) {
    if (req.size() > kMaxRequest) return;
    auto n = net::RecvSome(conn, buf, sizeof(buf), deadline);
    if (!n.ok() || *n == 0) return;
    req.append(buf, *n);
  }
  Response resp;
  auto sp1 = req.find(' ');
  auto sp2 = req.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) {
    resp = {400, "text/plain", "bad request\n"};
  } else if (req.compare(0, sp1, "GET") != 0) {
    resp = {405, "text/plain", "only GET is served\n"};
  } else {
    std::string path = req.substr(sp1 + 1, sp2 - sp1 - 1);
    if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
    auto it = handlers_.find(path);
    if (it == handlers_.end()) {
      resp = {404, "text/plain", "not found\n"};
    } else {
      resp = it->second();
    }
  }
  std::string out = "HTTP/1.1 " + std::to_string(resp.code) + " " + Reason(resp.code) +
                    "\r\nContent-Type: " + resp.content_type +
                    "\r\nContent-Length: " + std::to_string(resp.body.size()) +
                    "\r\nConnection: close\r\n\r\n" + resp.body;
  Status s = net::SendAll(conn, out.data(), out.size(), deadline);
  if (!s.ok()) spdlog::debug("http: {}", s.ToString());
}

StatusOr<GetResult> Get(const std::string& host, int port, const std::string& path,
                        Duration timeout) {
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
