// A tiny HTTP/1.1 server for /metrics, /status, /healthz (GET only, one request per
// connection) and a matching blocking GET client. Not a general web server: no TLS, no
// keep-alive, requests over 16 KiB are refused. Owns one thread; handlers must be thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/net.h"
#include "common/status.h"

namespace ringtrain::http {

struct Response {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using Handler = std::function<Response()>;

class Server {
 public:
  // Binds host:port (0 = ephemeral) and starts serving. Handlers are fixed at creation.
  static StatusOr<std::unique_ptr<Server>> Create(const std::string& host, int port,
                                                  std::map<std::string, Handler> handlers);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  void Stop();

 private:
  Server(net::Socket listener, int port, std::map<std::string, Handler> handlers);
  void Loop();
  void Serve(net::Socket conn);

  net::Socket listener_;
  int port_;
  std::map<std::string, Handler> handlers_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct GetResult {
  int code = 0;
  std::string body;
};

// GET http://host:port/path with a deadline for the whole exchange.
StatusOr<GetResult> Get(const std::string& host, int port, const std::string& path,
                        Duration timeout);

}  // namespace ringtrain::http
