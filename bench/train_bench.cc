// Training throughput on Fashion-MNIST for 1, 2 and 4 ranks (threads on loopback, TCP ring),
// with and without bucketed all-reduce overlapped with backward. Reports samples/s and the
// fraction of step time spent waiting for all-reduce and for data. Not a test: numbers only.
//   bench/train_bench [--model mlp|cnn] [--steps N] [--batch B] [--ranks 1,2,4]
//                     [--bucket-cap BYTES] [--slices on|off] [--drain on|off]
// --drain on runs the SIGTERM handshake's vote every train::kDrainVoteSteps steps, as the runner
// always does (a drain flag that is never set): its cost is the difference to --drain off.

#include <atomic>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/data/idx.h"
#include "runner/model/gemm.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/memory_store.h"

using namespace ringtrain;

namespace {

struct Row {
  double samples_per_second = 0;
  double allreduce_fraction = 0;
  double data_fraction = 0;
  double seconds = 0;
  // Of the time the collectives took, the share the step waited for after backward (1 = none
  // hidden by backward, 0 = all hidden).
  double unhidden = 0;
};

Row Run(const data::Dataset& ds, int world, const train::TrainConfig& base, bool drain_vote) {
  rendezvous::MemoryStore store;
  const std::atomic<bool> never{false};
  std::vector<train::TrainResult> results(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      comm::TcpCommOptions o;
      o.rank = r;
      o.size = world;
      auto comm = comm::TcpCommunicator::Create(store, o);
      if (!comm.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, comm.status().ToString().c_str());
        std::exit(1);
      }
      train::EngineDeps deps;
      deps.comm = comm->get();
      deps.train = &ds;
      if (drain_vote) deps.drain = &never;
      auto t = rank::Trainer::Create(base, deps);
      auto res = t.ok() ? (*t)->Run() : StatusOr<train::TrainResult>(t.status());
      if (!res.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, res.status().ToString().c_str());
        std::exit(1);
      }
      results[r] = *res;
    });
  }
  for (auto& t : threads) t.join();
  Row row;
  const auto& r0 = results[0];
  row.samples_per_second = r0.samples_per_second;
  row.seconds = r0.wall_seconds;
  double ar = 0, dw = 0, total = 0;
  for (const auto& r : results) {
    ar += r.allreduce_wait_seconds;
    dw += r.data_wait_seconds;
    total += r.allreduce_seconds;
  }
  row.unhidden = total > 0 ? ar / total : 0;
  row.allreduce_fraction = ar / world / r0.wall_seconds;
  row.data_fraction = dw / world / r0.wall_seconds;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp", ranks = "1,2,4", dataset = "/usr/share/datasets/fashion-mnist";
  long steps = 300;
  int batch = 64;
  std::size_t bucket_cap = train::TrainConfig{}.bucket_cap_bytes;
  bool slices = true;
  bool drain_vote = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch"))
      batch = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ranks"))
      ranks = argv[i + 1];
    else if (!std::strcmp(argv[i], "--slices"))
      slices = std::strcmp(argv[i + 1], "off") != 0;
    else if (!std::strcmp(argv[i], "--bucket-cap"))
      bucket_cap = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--drain"))
      drain_vote = std::strcmp(argv[i + 1], "off") != 0;
    else if (!std::strcmp(argv[i], "--dataset"))
      dataset = argv[i + 1];
  }
  model::SetKernelThreads(1);
  auto ds = data::LoadFashionMnist(dataset, true);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "# model %s, per-rank batch %d, %ld steps per rank, bucket cap %zu bytes, slices %s, drain "
      "vote %s, %u cores\n",
      model.c_str(), batch, steps, bucket_cap, slices ? "on" : "off", drain_vote ? "on" : "off",
      std::thread::hardware_concurrency());
  std::printf("%6s %8s %12s %14s %10s %9s %8s\n", "ranks", "overlap", "samples/s", "allreduce_wait",
              "data_wait", "unhidden", "seconds");
  std::stringstream ss(ranks);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    int world = std::atoi(tok.c_str());
    for (bool overlap : {true, false}) {
      if (world == 1 && !overlap) continue;
      train::TrainConfig c;
      c.model.name = model;
      c.batch_size = batch;
      c.max_steps = steps;
      c.epochs = 100;
      c.eval_every_epoch = false;
      c.overlap = overlap;
      c.bucket_cap_bytes = bucket_cap;
      c.slice_gradients = slices;
      Row row = Run(*ds, world, c, drain_vote);
      std::printf("%6d %8s %12.0f %13.1f%% %9.1f%% %9.2f %8.2f\n", world, overlap ? "yes" : "no",
                  row.samples_per_second, 100 * row.allreduce_fraction, 100 * row.data_fraction,
                  row.unhidden, row.seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}
