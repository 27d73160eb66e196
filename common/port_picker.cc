#include "common/port_picker.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/net.h"

namespace ringtrain::net {
namespace {

// Each try asks the kernel for a fresh port; a port handed out before costs one try. Far more
// than a kernel that hands out random ports ever needs, and a bound for one that does not.
constexpr int kMaxTries = 64;

}  // namespace

StatusOr<int> PortPicker::BindAndRelease() {
  ASSIGN_OR_RETURN(Socket s, Listen("127.0.0.1", 0));
  return LocalPort(s);
}

StatusOr<int> PortPicker::Pick() { return PickRange(1); }

StatusOr<int> PortPicker::PickRange(int n) {
  n = std::max(n, 1);
  std::lock_guard<std::mutex> lock(mu_);
  for (int attempt = 0; attempt < kMaxTries; ++attempt) {
    ASSIGN_OR_RETURN(const int base, probe_());
    if (base + n - 1 > 65535) continue;
    bool free = true;
    std::vector<Socket> held;  // held until all are known free
    for (int i = 0; i < n && free; ++i) {
      if (handed_out_.count(base + i) != 0) {
        free = false;
      } else if (i > 0) {
        auto s = Listen("127.0.0.1", base + i);
        free = s.ok();
        if (free) held.push_back(std::move(s).value());
      }
    }
    if (!free) continue;
    for (int i = 0; i < n; ++i) handed_out_.insert(base + i);
    return base;
  }
  return Unavailable(
      "no " + (n == 1 ? std::string("free port") : std::to_string(n) + " consecutive free ports") +
      " on 127.0.0.1 apart from those handed out before, in " + std::to_string(kMaxTries) +
      " tries");
}

}  // namespace ringtrain::net
