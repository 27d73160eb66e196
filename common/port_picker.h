// Free ports on 127.0.0.1 for processes that this one starts and that bind them later: the
// ranks of a local gang (ringtrain run, the test kubelet), which all share the address. Owns
// which ports it has handed out; must not hold them (the children bind them).
//
// A port is found by binding port 0 and letting go; the kernel may hand that same port to a
// later bind(0) (Linux picks odd ports of the lower half of ip_local_port_range for a
// SO_REUSEADDR bind: one time in about 7000). Two ports found that way for two processes can
// be the same, and the process that binds second fails ("port N is already in use"), or, with
// the rendezvous port taken by a peer's metrics server, talks to the wrong server. So a picker
// never hands out a port twice.
#pragma once

#include <functional>
#include <mutex>
#include <set>
#include <utility>

#include "common/status.h"

namespace ringtrain::net {

class PortPicker {
 public:
  // A port free now on 127.0.0.1, released before it returns: the kernel's bind(0) by default;
  // tests script a kernel that hands a port out again.
  using Probe = std::function<StatusOr<int>()>;
  static StatusOr<int> BindAndRelease();

  explicit PortPicker(Probe probe = &PortPicker::BindAndRelease) : probe_(std::move(probe)) {}

  // A free port that this picker has not handed out before. Thread-safe.
  StatusOr<int> Pick();
  // The first of `n` consecutive free ports, none handed out before (the local launcher gives
  // local rank i base + i).
  StatusOr<int> PickRange(int n);

 private:
  Probe probe_;
  std::mutex mu_;
  std::set<int> handed_out_;
};

}  // namespace ringtrain::net
