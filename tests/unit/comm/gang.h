// Test helper: a gang of TcpCommunicators as threads of this process on loopback, sharing one
// store (gloo's test/base_test.h). Must not be used outside tests/unit/comm.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/rendezvous/memory_store.h"

namespace ringtrain::comm {

// Creates `n` communicators concurrently (Create blocks until the ring is connected).
inline std::vector<std::unique_ptr<TcpCommunicator>> MakeGang(rendezvous::Store& store, int n,
                                                              TcpCommOptions base = {}) {
  // spdlog's registry is a function-local static inside the uninstrumented libspdlog: first
  // created on one of the rank threads, ThreadSanitizer cannot see its guard and reports the
  // other threads' reads as a race. Create it here, before the threads.
  (void)spdlog::default_logger_raw();
  std::vector<std::unique_ptr<TcpCommunicator>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      TcpCommOptions o = base;
      o.rank = r;
      o.size = n;
      o.bind_host = "127.0.0.1";
      if (o.connect_timeout == kDefaultCommConnectTimeout)
        o.connect_timeout = std::chrono::seconds(20);
      auto c = TcpCommunicator::Create(store, o);
      EXPECT_TRUE(c.ok()) << "rank " << r << ": " << c.status().ToString();
      if (c.ok()) comms[r] = std::move(c).value();
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Runs fn(rank) on one thread per rank and returns each rank's status.
inline std::vector<Status> RunRanks(int n, const std::function<Status(int)>& fn) {
  std::vector<Status> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = fn(r); });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace ringtrain::comm
