// Fuzz target: the rendezvous store's wire protocol, as the server sees it. A TcpStoreServer runs
// on loopback in this process; each input is one connection. The first byte picks the mode:
// even = the harness proves the token first (so the bytes reach the request parser), odd = the
// raw bytes go to the handshake. There is no pure parse function to call: the server's frame
// parser is private to tcp_store_server.cc, and driving the real server also covers parking,
// wakeups and replies. A sanitizer report in the server thread ends the process like one here.
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "runner/rendezvous/tcp_store.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr char kToken[] = "fuzz-token";
constexpr std::size_t kHelloBytes = 4 + 4 + 32;  // frame length, magic, nonce

std::unique_ptr<ringtrain::rendezvous::TcpStoreServer>& Server() {
  static std::unique_ptr<ringtrain::rendezvous::TcpStoreServer> server;
  return server;
}

void Start() {
  auto s = ringtrain::rendezvous::TcpStoreServer::Create("127.0.0.1", 0, kToken);
  if (!s.ok()) {
    std::fprintf(stderr, "store_fuzz: %s\n", s.status().ToString().c_str());
    std::abort();
  }
  Server() = std::move(s).value();
}

std::string Frame(const std::string& payload) {
  std::uint32_t be = htonl(static_cast<std::uint32_t>(payload.size()));
  return std::string(reinterpret_cast<const char*>(&be), 4) + payload;
}

// Connects, reads the server's nonce and, if asked, proves the token.
int Connect(bool authenticate) {
  using namespace ringtrain::fuzz;
  int fd = ConnectLoopback(Server()->port());
  FUZZ_CHECK(fd >= 0);
  std::string hello = RecvExact(fd, kHelloBytes, 5000);
  FUZZ_CHECK(hello.size() == kHelloBytes);
  if (authenticate) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), kToken, static_cast<int>(std::strlen(kToken)),
         reinterpret_cast<const unsigned char*>(hello.data()) + 8, 32, mac, &len);
    SendAll(fd, Frame(std::string(reinterpret_cast<const char*>(mac), len)));
    std::string ok = RecvExact(fd, 5, 5000);
    FUZZ_CHECK(ok.size() == 5 && ok[4] == 0);  // frame of one byte: status ok
  }
  return fd;
}

// Two round trips of a Set on a connection of our own. The input's bytes were already in the
// server's socket buffer when the first was sent, and the server handles every readable
// connection in each poll round, so after the second reply the input has been handled: a report
// belongs to this input, not the next, and a wedged server fails here instead of going unseen.
int g_barrier_fd = -1;

void Barrier() {
  using namespace ringtrain::fuzz;
  if (g_barrier_fd < 0) g_barrier_fd = Connect(true);
  const int fd = g_barrier_fd;
  static const std::string set =
      Frame(std::string("\x01") + std::string("\0\0\0\x07", 4) + "barrier" + std::string(4, '\0'));
  for (int i = 0; i < 2; ++i) {
    FUZZ_CHECK(SendAll(fd, set));
    std::string reply = RecvExact(fd, 5, 10000);
    FUZZ_CHECK(reply.size() == 5 && reply[4] == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  Start();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain::fuzz;
  // A fresh store now and then, so the key space of a long run stays bounded.
  static int inputs = 0;
  if (++inputs % 20000 == 0) {
    ::close(g_barrier_fd);
    g_barrier_fd = -1;
    Server().reset();
    Start();
  }
  if (size == 0) return 0;
  const bool authenticate = (data[0] & 1) == 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);

  int fd = Connect(authenticate);
  SendAll(fd, body);
  Barrier();
  // A parked Get/Wait is simply abandoned by closing.
  CloseAbortive(fd);
  return 0;
}
