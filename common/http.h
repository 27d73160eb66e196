// The HTTP server for /metrics, /status, /healthz (GET only, one request per connection) and a
// matching blocking GET client. One thread multiplexes every connection with poll(2), so a slow
// or idle client costs a slot, never the server: each connection has a request deadline and a
// request-size cap, the total is capped, and at the cap the oldest connection still waiting for
// its request is dropped for the newcomer. Not a general web server: no TLS, no keep-alive.
// Handlers run on the server's thread and must be thread-safe and quick.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/net.h"
#include "common/status.h"

namespace ringtrain::net {
class PollServer;
}  // namespace ringtrain::net

namespace ringtrain::http {

struct Response {
  int code = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using Handler = std::function<Response()>;
using Handlers = std::map<std::string, Handler>;

// Per-connection and total limits.
struct ServerOptions {
  int max_connections = 128;                  // open at once, idle ones included
  Duration request_timeout{2000};             // to send the whole request head
  Duration response_timeout{5000};            // to take the whole response
  std::size_t max_request_bytes = 16 * 1024;  // request line and headers
};

// One request head in (bytes up to and including the blank line), the whole response out:
// the server's request path without a socket, for tests and fuzzing. Matches the path without
// its query; answers 400, 404, 405 itself; never throws.
std::string RespondTo(std::string_view request_head, const Handlers& handlers);

class Server {
 public:
  // Binds host:port (host "" or "0.0.0.0" = any; port 0 = ephemeral) and starts serving.
  // Handlers are fixed at creation.
  static StatusOr<std::unique_ptr<Server>> Create(const std::string& host, int port,
                                                  Handlers handlers, ServerOptions options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  // Wakes the server thread at once and joins it; open connections are closed.
  void Stop();

 private:
  class Protocol;
  Server(int port, Handlers handlers, ServerOptions options);

  int port_;
  Handlers handlers_;
  ServerOptions options_;
  std::unique_ptr<Protocol> protocol_;     // declared before core_: outlives it
  std::unique_ptr<net::PollServer> core_;  // the thread (common/poll_server.h)
};

struct GetResult {
  int code = 0;
  std::string body;
};

// GET http://host:port/path with a deadline for the whole exchange; a response (head and
// body) over max_bytes is an error.
StatusOr<GetResult> Get(const std::string& host, int port, const std::string& path,
                        Duration timeout, std::size_t max_bytes = 16 * 1024 * 1024);

}  // namespace ringtrain::http
