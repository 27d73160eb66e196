// Fuzz target: the operator reading a rank's /status (HttpProgressFetcher: the HTTP client's
// response parsing, then the JSON). A loopback server in the harness answers each request with
// the input. First byte: even = the rest is a JSON body behind a valid 200 response, odd = the
// rest is the whole raw response (status line, headers, body). A rank is untrusted: any answer
// must give progress or "none", never a crash or a wait past the fetcher's timeout.
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "controller/executors/kubernetes/reconciler.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::mutex g_mu;
std::string g_response;  // what the next connection is answered with
int g_port = 0;

void Serve(int listener) {
  for (;;) {
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // The request: read until the end of its headers (or 2 s of silence).
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 65536) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) break;
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      req.append(buf, static_cast<std::size_t>(n));
    }
    std::string resp;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      resp = g_response;
    }
    ringtrain::fuzz::SendAll(fd, resp);
    ::close(fd);
  }
}

void StartServer() {
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(l >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(::bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  FUZZ_CHECK(::listen(l, 16) == 0);
  socklen_t len = sizeof(addr);
  FUZZ_CHECK(::getsockname(l, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  g_port = ntohs(addr.sin_port);
  std::thread(Serve, l).detach();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  StartServer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string resp = (data[0] & 1)
                         ? rest
                         : "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           "Content-Length: " +
                               std::to_string(rest.size()) + "\r\nConnection: close\r\n\r\n" + rest;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_response = std::move(resp);
  }
  static const auto fetch = ringtrain::op::HttpProgressFetcher();
  (void)fetch("127.0.0.1", g_port, ringtrain::Duration(2000));
  return 0;
}
