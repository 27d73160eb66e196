#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <random>
#include <vector>

namespace ringtrain {

std::string RandomToken(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
      break;  // ENOSYS on a kernel older than 3.17: fall back below
    }
  }
  if (got < bytes) {
    // std::random_device reads the same kernel CSPRNG (/dev/urandom or RDRAND) on Linux.
    std::random_device rd;
    for (std::size_t i = got; i < bytes; ++i) raw[i] = static_cast<unsigned char>(rd());
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace ringtrain
