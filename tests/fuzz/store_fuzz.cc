// Fuzz target: the rendezvous store's wire protocol, as the server sees it. A TcpStoreServer runs
// on loopback in this process; each input is one connection. The first byte picks the mode:
// even = the harness proves the token first (so the bytes reach the request parser), odd = the
// raw bytes go to the handshake. There is no pure parse function to call: the server's frame
// parser is private to tcp_store.cc, and driving the real server also covers parking, wakeups
// and replies. A sanitizer report in the server thread ends the process like one here.
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

void Restart() {
  Server().reset();
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

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  Restart();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ringtrain::fuzz;
  // A fresh store now and then, so the key space a long run fills stays bounded.
  static int inputs = 0;
  if (++inputs % 5000 == 0) Restart();
  if (size == 0) return 0;
  const bool authenticate = (data[0] & 1) == 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);

  int fd = ConnectLoopback(Server()->port());
  FUZZ_CHECK(fd >= 0);
  std::string hello = RecvExact(fd, kHelloBytes, 2000);
  FUZZ_CHECK(hello.size() == kHelloBytes);
  if (authenticate) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), kToken, static_cast<int>(std::strlen(kToken)),
         reinterpret_cast<const unsigned char*>(hello.data()) + 8, 32, mac, &len);
    SendAll(fd, Frame(std::string(reinterpret_cast<const char*>(mac), len)));
    std::string ok = RecvExact(fd, 5, 2000);
    FUZZ_CHECK(ok.size() == 5 && ok[4] == 0);  // frame of one byte: status ok
  }
  SendAll(fd, body);
  // Replies to what parsed; a parked Get/Wait is simply abandoned by closing.
  (void)RecvUntilQuiet(fd, 10);
  ::close(fd);
  return 0;
}
