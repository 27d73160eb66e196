// All-reduce bandwidth of the TCP ring, nccl-tests style: a sweep of sizes for each world size
// (ranks are threads on loopback with a real TcpStore), next to a single-stream socket copy of
// the same sizes as the baseline. Prints numbers; asserts nothing.
//
//   allreduce_bench [--chunk=BYTES] [--max-bytes=BYTES] [WORLD_SIZE...]   (default: 2 4 8)
//
// One rank of a multi-process run (bench/netns_allreduce.sh runs one per network namespace):
//
//   allreduce_bench --rank=R --world=N --master=HOST:PORT --addr=MY_IP [--chunk=BYTES]
//                   [--sizes=BYTES,BYTES,...] [--iters=K] [--sockbuf=BYTES]
//
// --sockbuf sets SO_SNDBUF/SO_RCVBUF of the ring connections (0, the default: autotuning).
//
// Rank 0 hosts the store at --master. Rank 0 prints one line per size:
//   size_bytes seconds_per_op busbw_gbit_s cpu_ns_per_byte
// where cpu is this process's getrusage user+sys over the timed iterations divided by the
// bytes all-reduced, and busbw = 2(n-1)/n * bytes / time, as nccl-tests and the Gloo script.
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/net.h"
#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/rendezvous/prefix_store.h"
#include "runner/rendezvous/tcp_store.h"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t kMinBytes = 4;
// Each size runs about this many bytes through the collective, within [kMinIters, kMaxIters].
constexpr std::size_t kBytesPerSize = std::size_t{512} << 20;
constexpr int kMinIters = 5;
constexpr int kMaxIters = 200;

int ItersFor(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>(kBytesPerSize / bytes, kMinIters, kMaxIters));
}

std::vector<std::size_t> Sizes(std::size_t max_bytes) {
  std::vector<std::size_t> sizes;
  for (std::size_t b = kMinBytes; b <= max_bytes; b *= 4) sizes.push_back(b);
  return sizes;
}

void Die(const Status& s, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// Seconds per all-reduce for each size: the slowest rank's average, since a collective is done
// only when every rank is.
void BenchWorld(int n, std::size_t chunk, const std::vector<std::size_t>& sizes) {
  auto server = rendezvous::TcpStoreServer::Create("127.0.0.1", 0, "bench-token");
  if (!server.ok()) Die(server.status(), "store");
  std::vector<std::vector<double>> seconds(n, std::vector<double>(sizes.size()));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      auto client = rendezvous::TcpStoreClient::Create(
          {"127.0.0.1", (*server)->port(), "bench-token", 30s, 30s});
      if (!client.ok()) Die(client.status(), "store client");
      rendezvous::PrefixStore store(**client, "bench/" + std::to_string(n) + "/");
      comm::TcpCommOptions o;
      o.rank = r;
      o.size = n;
      o.bind_host = "127.0.0.1";
      o.chunk_bytes = chunk;
      o.collective_timeout = 300s;
      auto c = comm::TcpCommunicator::Create(store, o);
      if (!c.ok()) Die(c.status(), "communicator");
      std::vector<float> buf(sizes.back() / sizeof(float), 1.0f);
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        std::size_t count = sizes[i] / sizeof(float);
        int iters = ItersFor(sizes[i]);
        for (int w = 0; w < 2; ++w) {
          Status s = (*c)->AllReduce(buf.data(), count, comm::ReduceOp::kSum);
          if (!s.ok()) Die(s, "warm-up");
        }
        if (Status s = (*c)->Barrier(); !s.ok()) Die(s, "barrier");
        auto t0 = Clock::now();
        for (int it = 0; it < iters; ++it) {
          // Average keeps the values bounded over many iterations.
          Status s = (*c)->AllReduce(buf.data(), count, comm::ReduceOp::kAverage);
          if (!s.ok()) Die(s, "all-reduce");
        }
        seconds[r][i] = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      }
    });
  }
  for (auto& t : ranks) t.join();

  std::printf("#\n# all-reduce, world size %d (threads on loopback, TcpStore), chunk %zu B\n", n,
              chunk);
  std::printf("# %12s %12s %6s %6s %12s %12s %12s\n", "size(B)", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    double t = 0;
    for (int r = 0; r < n; ++r) t = std::max(t, seconds[r][i]);
    double algbw = static_cast<double>(sizes[i]) / t / 1e9;
    double busbw = algbw * 2.0 * (n - 1) / n;
    std::printf("  %12zu %12zu %6s %6s %12.1f %12.3f %12.3f\n", sizes[i], sizes[i] / sizeof(float),
                "float", "avg", t * 1e6, algbw, busbw);
  }
  std::fflush(stdout);
}

// The ceiling one TCP stream reaches here: copy `bytes` from one thread to another over
// loopback and wait for a one-byte ack, like a collective that completes per call.
void BenchBaseline(const std::vector<std::size_t>& sizes) {
  auto listener = net::Listen("127.0.0.1", 0);
  if (!listener.ok()) Die(listener.status(), "listen");
  int port = *net::LocalPort(*listener);
  std::vector<char> src(sizes.back(), 1);
  std::vector<char> dst(sizes.back());
  std::vector<double> seconds(sizes.size());
  std::thread receiver([&] {
    auto s = net::Accept(*listener, DeadlineAfter(30s));
    if (!s.ok()) Die(s.status(), "accept");
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      for (int it = 0; it < ItersFor(sizes[i]) + 2; ++it) {
        if (Status st = net::RecvAll(*s, dst.data(), sizes[i], DeadlineAfter(300s)); !st.ok()) {
          Die(st, "recv");
        }
        char ack = 1;
        if (Status st = net::SendAll(*s, &ack, 1, DeadlineAfter(300s)); !st.ok()) Die(st, "ack");
      }
    }
  });
  auto sock = net::Connect("127.0.0.1", port, DeadlineAfter(30s));
  if (!sock.ok()) Die(sock.status(), "connect");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    int iters = ItersFor(sizes[i]);
    Clock::time_point t0;
    for (int it = 0; it < iters + 2; ++it) {
      if (it == 2) t0 = Clock::now();  // two warm-up copies
      if (Status st = net::SendAll(*sock, src.data(), sizes[i], DeadlineAfter(300s)); !st.ok()) {
        Die(st, "send");
      }
      char ack;
      if (Status st = net::RecvAll(*sock, &ack, 1, DeadlineAfter(300s)); !st.ok()) Die(st, "ack");
    }
    seconds[i] = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  }
  receiver.join();
  std::printf("#\n# baseline: single-stream socket copy between two threads over loopback\n");
  std::printf("# %12s %12s %12s\n", "size(B)", "time(us)", "GB/s");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::printf("  %12zu %12.1f %12.3f\n", sizes[i], seconds[i] * 1e6,
                static_cast<double>(sizes[i]) / seconds[i] / 1e9);
  }
  std::fflush(stdout);
}

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

struct RankArgs {
  int rank = -1;
  int world = 0;
  std::string master;  // host:port of rank 0's store
  std::string addr;    // this rank's address, bound and advertised
  std::vector<std::size_t> sizes;
  int iters = 0;            // 0: ItersFor(size)
  std::size_t sockbuf = 0;  // SO_SNDBUF/SO_RCVBUF of the ring; 0: autotuning
};

// Parses a comma-separated list of byte counts; false on anything else.
bool ParseSizes(const std::string& list, std::vector<std::size_t>* out) {
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(pos, end - pos);
    char* rest = nullptr;
    unsigned long long v = std::strtoull(item.c_str(), &rest, 10);
    if (item.empty() || *rest != '\0' || v < sizeof(float)) return false;
    out->push_back(static_cast<std::size_t>(v));
    pos = end + 1;
  }
  return !out->empty();
}

int RunRank(const RankArgs& a, std::size_t chunk) {
  auto colon = a.master.rfind(':');
  std::string host = a.master.substr(0, colon);
  int port = std::atoi(a.master.c_str() + colon + 1);
  std::unique_ptr<rendezvous::TcpStoreServer> server;
  if (a.rank == 0) {
    auto s = rendezvous::TcpStoreServer::Create(host, port, "bench-token");
    if (!s.ok()) Die(s.status(), "store");
    server = std::move(s).value();
  }
  auto client = rendezvous::TcpStoreClient::Create({host, port, "bench-token", 120s, 120s});
  if (!client.ok()) Die(client.status(), "store client");
  comm::TcpCommOptions o;
  o.rank = a.rank;
  o.size = a.world;
  o.bind_host = a.addr;
  o.advertise_host = a.addr;
  o.chunk_bytes = chunk;
  o.socket_buffer_bytes = a.sockbuf;
  o.collective_timeout = 300s;
  auto c = comm::TcpCommunicator::Create(**client, o);
  if (!c.ok()) Die(c.status(), "communicator");
  std::size_t max_bytes = *std::max_element(a.sizes.begin(), a.sizes.end());
  std::vector<float> buf(max_bytes / sizeof(float), 1.0f);
  for (std::size_t bytes : a.sizes) {
    std::size_t count = bytes / sizeof(float);
    int iters = a.iters > 0 ? a.iters : std::clamp(ItersFor(bytes), kMinIters, 20);
    for (int w = 0; w < 2; ++w) {
      if (Status s = (*c)->AllReduce(buf.data(), count, comm::ReduceOp::kSum); !s.ok()) {
        Die(s, "warm-up");
      }
    }
    if (Status s = (*c)->Barrier(); !s.ok()) Die(s, "barrier");
    double cpu0 = CpuSeconds();
    auto t0 = Clock::now();
    for (int it = 0; it < iters; ++it) {
      if (Status s = (*c)->AllReduce(buf.data(), count, comm::ReduceOp::kAverage); !s.ok()) {
        Die(s, "all-reduce");
      }
    }
    // The barrier makes rank 0's time the collective's: it ends when the slowest rank is done.
    if (Status s = (*c)->Barrier(); !s.ok()) Die(s, "barrier");
    double t = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    double cpu = CpuSeconds() - cpu0;
    double busbw = static_cast<double>(count * sizeof(float)) / t * 2.0 * (a.world - 1) / a.world;
    if (a.rank == 0) {
      std::printf("%zu %.6f %.4f %.3f\n", count * sizeof(float), t, busbw * 8 / 1e9,
                  cpu * 1e9 / (static_cast<double>(count * sizeof(float)) * iters));
      std::fflush(stdout);
    }
  }
  // Rank 0's store must outlive the others' last barrier.
  if (Status s = (*c)->Barrier(); !s.ok()) Die(s, "final barrier");
  return 0;
}

}  // namespace
}  // namespace ringtrain

int main(int argc, char** argv) {
  std::size_t chunk = ringtrain::comm::kDefaultChunkBytes;
  ringtrain::RankArgs rank_args;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::vector<int> worlds;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--chunk=", 0) == 0) {
      chunk = std::strtoull(a.c_str() + 8, nullptr, 10);
    } else if (a.rfind("--max-bytes=", 0) == 0) {
      max_bytes = std::strtoull(a.c_str() + 12, nullptr, 10);
    } else if (a.rfind("--rank=", 0) == 0) {
      rank_args.rank = std::atoi(a.c_str() + 7);
    } else if (a.rfind("--world=", 0) == 0) {
      rank_args.world = std::atoi(a.c_str() + 8);
    } else if (a.rfind("--master=", 0) == 0) {
      rank_args.master = a.substr(9);
    } else if (a.rfind("--addr=", 0) == 0) {
      rank_args.addr = a.substr(7);
    } else if (a.rfind("--sockbuf=", 0) == 0) {
      rank_args.sockbuf = std::strtoull(a.c_str() + 10, nullptr, 10);
    } else if (a.rfind("--iters=", 0) == 0) {
      rank_args.iters = std::atoi(a.c_str() + 8);
    } else if (a.rfind("--sizes=", 0) == 0) {
      if (!ringtrain::ParseSizes(a.substr(8), &rank_args.sizes)) {
        std::fprintf(stderr, "--sizes: want comma-separated byte counts >= 4, got '%s'\n",
                     a.c_str() + 8);
        return 2;
      }
    } else if (int n = std::atoi(a.c_str()); n >= 1) {
      worlds.push_back(n);
    } else {
      std::fprintf(stderr, "usage: %s [--chunk=BYTES] [--max-bytes=BYTES] [WORLD_SIZE...]\n",
                   argv[0]);
      return 2;
    }
  }
  if (chunk < sizeof(float)) {
    std::fprintf(stderr, "--chunk: want a byte count >= 4\n");
    return 2;
  }
  if (rank_args.rank >= 0 || rank_args.world > 0) {
    const auto& r = rank_args;
    std::string why;
    if (r.world < 2) why = "--world: want 2 or more ranks";
    if (why.empty() && (r.rank < 0 || r.rank >= r.world)) why = "--rank: want 0 <= rank < world";
    if (why.empty() && r.master.rfind(':') == std::string::npos) {
      why = "--master: want HOST:PORT";
    }
    if (why.empty() && r.addr.empty()) why = "--addr: want this rank's IP address";
    if (!why.empty()) {
      std::fprintf(stderr, "%s\n", why.c_str());
      return 2;
    }
    if (rank_args.sizes.empty()) rank_args.sizes = {1u << 20, 4u << 20, 64u << 20, 256u << 20};
    spdlog::set_level(spdlog::level::warn);
    return ringtrain::RunRank(rank_args, chunk);
  }
  if (worlds.empty()) worlds = {2, 4, 8};
  spdlog::set_level(spdlog::level::warn);
  auto sizes = ringtrain::Sizes(std::max(max_bytes, ringtrain::kMinBytes));
  std::printf("# hardware threads: %u\n", std::thread::hardware_concurrency());
  ringtrain::BenchBaseline(sizes);
  for (int n : worlds) ringtrain::BenchWorld(n, chunk, sizes);
  return 0;
}
