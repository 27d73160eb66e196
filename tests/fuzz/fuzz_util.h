// Helpers shared by the fuzz targets: a private temp directory, file writing and a raw loopback
// client. Plain POSIX on purpose: the targets must not depend on the code they attack.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

namespace ringtrain::fuzz {

// A directory of our own for the process's lifetime (the driver and libFuzzer run inputs in one
// process, one at a time), removed at exit.
inline const std::string& TempDir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/ringtrain-fuzz.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string path;
    path = tmpl;
    std::atexit([] {
      std::string cmd = "rm -rf '" + path + "'";
      if (std::system(cmd.c_str()) != 0)
        std::fprintf(stderr, "could not remove %s\n", path.c_str());
    });
    return tmpl;
  }();
  return dir;
}

inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::perror(path.c_str());
    std::abort();
  }
}

// Connects to 127.0.0.1:port; -1 on failure.
inline int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    std::perror("fuzz: socket");
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // libFuzzer's once-a-second timer signal interrupts blocking calls (EINTR): the harness's own
  // I/O below retries, and an interrupted connect goes on in the background until writable.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    if (err == EINTR) {
      pollfd p{fd, POLLOUT, 0};
      while (::poll(&p, 1, 10000) < 0 && errno == EINTR) {
      }
      socklen_t len = sizeof err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (p.revents == 0) err = ETIMEDOUT;
    }
    if (err != 0) {
      errno = err;
      std::perror("fuzz: connect to loopback");
      ::close(fd);
      return -1;
    }
  }
  return fd;
}

// Closes with a reset instead of a FIN: the closing side keeps no TIME_WAIT entry, so a run of
// thousands of connections a second never runs out of loopback ports (28k, 60 s each).
inline void CloseAbortive(int fd) {
  const linger abortive{1, 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  ::close(fd);
}

inline bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads until the peer closes, `idle_ms` pass without data, or `max_bytes` arrived.
inline std::string RecvUntilQuiet(int fd, int idle_ms, std::size_t max_bytes = 1 << 20) {
  std::string out;
  char buf[8192];
  while (out.size() < max_bytes) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, idle_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Exactly `n` bytes, or fewer if the peer closes or stays quiet for `idle_ms`.
inline std::string RecvExact(int fd, std::size_t n, int idle_ms) {
  std::string out;
  char buf[4096];
  while (out.size() < n) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, idle_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t got = ::recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    out.append(buf, static_cast<std::size_t>(got));
  }
  return out;
}

// A violated invariant of the code under test: abort so both engines report the input.
#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

}  // namespace ringtrain::fuzz
