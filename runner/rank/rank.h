// One rank's wiring, written once for every engine and backend: where it computes (placement),
// its communicator (the TCP ring or NCCL), its step engine (CPU or CUDA) under the one
// train::TrainingLoop, the device's metrics, and its failure published through the gang-failure
// protocol while the communicator is still up. The runner's main, the tests and the benchmarks
// build trainers only through here; the engines and communicators never see each other's types.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/rendezvous/fingerprint.h"
#include "runner/rendezvous/store.h"
#include "runner/train/config.h"
#include "runner/train/step_engine.h"
#include "runner/train/training_loop.h"

namespace ringtrain::rank {

enum class Backend { kTcp, kNccl };
const char* BackendName(Backend backend);

// Where a rank computes and how it talks to its peers.
struct Placement {
  bool cuda = false;
  Backend backend = Backend::kTcp;
  int device = -1;     // the CUDA device; -1 on the CPU
  std::string reason;  // why, for the log
};

// This rank's place among the ranks that share the GPUs this process sees: its index and their
// number. In a pod, LOCAL_RANK of LOCAL_WORLD_SIZE (its GPUs are its own); under `ringtrain run`,
// which starts every replica on one machine, RINGTRAIN_HOST_RANK_BASE + LOCAL_RANK of
// RINGTRAIN_HOST_RANKS.
struct GpuSlot {
  int index = 0;
  int sharers = 1;
};
GpuSlot GpuSlotOf(const train::RankEnv& env);

// Resolves --device/--backend against what this process sees: `auto` picks CUDA when a GPU is
// visible (and this binary was built with CUDA), and NCCL when each of the `sharers` ranks gets
// its own GPU (NCCL refuses two ranks on one GPU); rank `index` computes on GPU index, or index
// mod the visible GPUs when they are shared. Explicit choices that cannot work are permanent
// errors naming the flag. Pure: `visible_devices` and `cuda_built` are the caller's.
StatusOr<Placement> ChoosePlacement(const train::TrainConfig& config, int index, int sharers,
                                    int visible_devices, bool cuda_built);
// The same with this process's devices, build and slot.
StatusOr<Placement> PlaceThisRank(const train::TrainConfig& config, const train::RankEnv& env);

// The TCP ring's options from the env contract: the bind address (RINGTRAIN_BIND_ADDR), the
// advertised host and the timeouts, for a CPU or a GPU rank alike.
comm::TcpCommOptions TcpRingOptions(const train::RankEnv& env, const std::string& advertise_host);

// The communicator of `placement`, formed over the attempt's store: the TCP ring (bound to
// env.bind_addr, advertising `advertise_host`) or NCCL on placement.device.
StatusOr<std::unique_ptr<comm::Communicator>> MakeCommunicator(rendezvous::Store& store,
                                                               const train::RankEnv& env,
                                                               const Placement& placement,
                                                               const std::string& advertise_host);

// The engine for deps.device: the CPU engine (-1) or the CUDA engine.
StatusOr<std::unique_ptr<train::StepEngine>> MakeEngine(const train::TrainConfig& config,
                                                        const train::EngineDeps& deps);

// An engine under the training loop.
class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(const train::TrainConfig& config,
                                                   const train::EngineDeps& deps);
  StatusOr<train::TrainResult> Run() { return loop_.Run(); }
  // The same with another step limit (benchmarks: a warm-up run, then a measured one; each run
  // starts at the first batch again unless a checkpoint says otherwise).
  StatusOr<train::TrainResult> Run(std::int64_t max_steps) {
    loop_.set_max_steps(max_steps);
    return loop_.Run();
  }
  // After Run failed on a lost rank: keep this rank's state and go on with the next round's
  // communicator (TrainingLoop::Rejoin).
  Status Rejoin(comm::Communicator* comm) { return loop_.Rejoin(comm); }
  // After Run failed on a lost rank, before waiting for the next round
  // (TrainingLoop::BeginRecovery).
  void BeginRecovery(std::string_view cause) { loop_.BeginRecovery(cause); }
  // Giving up an in-place recovery (stopped, or the recovery failed; `why` says which): rank 0
  // saves the state it kept (TrainingLoop::CheckpointKeptState).
  Status CheckpointKeptState(std::string_view why) { return loop_.CheckpointKeptState(why); }
  // Lost a peer while training, not recovering in place: rank 0 saves the state as of the
  // gang's last completed step (TrainingLoop::CheckpointLastStep).
  Status CheckpointLastStep(std::string_view why) { return loop_.CheckpointLastStep(why); }
  train::StepEngine& engine() { return *engine_; }

 private:
  Trainer(std::unique_ptr<train::StepEngine> engine, train::TrainingLoop loop)
      : engine_(std::move(engine)), loop_(std::move(loop)) {}
  std::unique_ptr<train::StepEngine> engine_;
  train::TrainingLoop loop_;
};

// What this rank publishes for its gang to compare (rendezvous/fingerprint.h): the gang
// protocol (common/version.h), this build's release, env.image and the digest of `config`
// (train::GangConfigDigest).
rendezvous::GangFingerprint FingerprintOf(const train::RankEnv& env,
                                          const train::TrainConfig& config);

// What TrainRank needs besides the env contract and the flags.
struct RankDeps {
  rendezvous::Store* store = nullptr;  // the attempt's prefixed store (rounds.h keys under it)
  // IDX images, or Tables (CSV/NPY) as in train::EngineDeps: one training set.
  const data::Dataset* train = nullptr;
  const data::Dataset* test = nullptr;
  const data::Table* train_table = nullptr;
  const data::Table* test_table = nullptr;
  metrics::RunnerMetrics* metrics = nullptr;
  const std::atomic<bool>* stop = nullptr;
  // The drain request (common/stop.h DrainFlag()): with the process's own flag, training runs
  // in a DrainScope, so a SIGTERM stops the gang at an agreed step boundary (a watchdog stops
  // the rank at once after contract::kDrainTimeout). Tests pass their own flag per rank.
  const std::atomic<bool>* drain = nullptr;
  std::string advertise_host;  // what peers dial (the TCP ring)
  // Called with this rank's final failure before the communicator closes, so the cause reaches
  // the store while the peers still see the ring up (then they report it rather than a lost
  // peer). `round_store` is the key space of the round it failed in, where its communicator
  // published what it saw (rendezvous/failure.h).
  std::function<void(rendezvous::Store& round_store, const Status&)> report_failure;
  // Tests: replaces FingerprintOf(env, config) (a rank of another release).
  std::optional<rendezvous::GangFingerprint> fingerprint;
  // Tests: replaces MakeCommunicator (same arguments).
  std::function<StatusOr<std::unique_ptr<comm::Communicator>>(
      rendezvous::Store&, const train::RankEnv&, const Placement&, const std::string&)>
      make_communicator;
};

// The whole rank: the rendezvous (rendezvous/rounds.h) and the gang's agreement on its
// fingerprints (refused: Aborted, naming the ranks and what differs), device metrics,
// communicator, engine, loop. With env.recovery_timeout > 0 and a peer lost (a communication error,
// not a stop), the rank keeps its state, joins the next round within the recovery timeout and
// trains on with the lost rank's replacement (in place); otherwise, or when that fails, the failure
// is reported.
StatusOr<train::TrainResult> TrainRank(const train::RankEnv& env, const train::TrainConfig& config,
                                       const Placement& placement, const RankDeps& deps);

}  // namespace ringtrain::rank
