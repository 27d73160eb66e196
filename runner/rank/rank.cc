#include "runner/rank/rank.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/runner_contract.h"
#include "common/stop.h"
#include "common/version.h"

#include "runner/rendezvous/rounds.h"
#include "runner/train/cpu_engine.h"
#ifdef RINGTRAIN_WITH_CUDA
#include "runner/comm/nccl/nccl_communicator.h"
#include "runner/cuda/cuda_util.h"
#include "runner/metrics/gpu_monitor.h"
#include "runner/train/cuda/cuda_engine.h"
#endif

namespace ringtrain::rank {
namespace {

constexpr bool kCudaBuilt =
#ifdef RINGTRAIN_WITH_CUDA
    true;
#else
    false;
#endif

#ifdef RINGTRAIN_WITH_CUDA
// NVML metrics for this rank's GPU: best effort, a rank trains without them.
std::unique_ptr<metrics::GpuMonitor> StartGpuMonitor(metrics::RunnerMetrics* m, int device) {
  if (m == nullptr) return nullptr;
  char bus_id[64] = {};
  Status bus = gpu::CudaStatus(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device),
                               "cudaDeviceGetPCIBusId");
  if (!bus.ok()) {
    spdlog::warn("GPU metrics off: {}", bus.ToString());
    return nullptr;
  }
  metrics::GpuMonitorOptions mo;
  mo.pci_bus_id = bus_id;  // CUDA and NVML number devices differently
  mo.gpu_label = std::to_string(device);
  auto monitor = metrics::GpuMonitor::Create(m, mo);
  if (!monitor.ok()) {
    spdlog::warn("GPU metrics off: {}", monitor.status().ToString());
    return nullptr;
  }
  return std::move(*monitor);
}
#endif

// Turns a drain request into a stop when the gang has not agreed on a step boundary within
// `timeout` (a peer stuck in a collective must not hold this rank past its grace period).
class DrainWatchdog {
 public:
  DrainWatchdog(const std::atomic<bool>& drain, Duration timeout) {
    thread_ = std::thread([this, &drain, timeout] {
      std::unique_lock lock(mu_);
      while (!done_ && !drain.load()) cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (done_) return;
      if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
        spdlog::warn("asked to stop, and the gang did not stop together within {}: stopping now",
                     FormatDuration(timeout));
        EscalateDrain();
      }
    });
  }
  ~DrainWatchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  DrainWatchdog(const DrainWatchdog&) = delete;
  DrainWatchdog& operator=(const DrainWatchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// A lost peer (the communication errors, never a stop) is worth a next round; a retryable
// failure of rank 0's checkpoint I/O is not (contract::kCheckpointIoFailed): the rank exits and
// the gang restarts.
bool IsPeerLoss(const Status& s) {
  if (s.message().find(contract::kCheckpointIoFailed) != std::string::npos) return false;
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted;
}

bool Stopping(const RankDeps& deps) { return deps.stop != nullptr && deps.stop->load(); }

// Runs the trainer; with the process's own drain flag, in a DrainScope under the watchdog. A GPU
// rank stops at once on SIGTERM, as before: its drain vote (a host all-gather between NCCL's
// stream-ordered steps) has never run on a GPU.
StatusOr<train::TrainResult> RunDraining(Trainer& trainer, const RankDeps& deps, bool cuda) {
  if (deps.drain != &DrainFlag() || cuda) return trainer.Run();
  DrainScope draining;
  DrainWatchdog watchdog(DrainFlag(), contract::kDrainTimeout);
  auto result = trainer.Run();
  if (!result.ok() && result.status().code() == StatusCode::kCancelled && DrainFlag().load()) {
    // The drain is over: the signal that asked for it is now this rank's stop (exit 128 + it).
    EscalateDrain();
    return Cancelled(StoppedStatus("training").message() + "; " + result.status().message());
  }
  return result;
}

}  // namespace

const char* BackendName(Backend backend) { return backend == Backend::kNccl ? "nccl" : "tcp"; }

GpuSlot GpuSlotOf(const train::RankEnv& env) {
  if (env.host_ranks <= 0) return {env.local_rank, env.local_world_size};
  return {env.host_rank_base + env.local_rank, env.host_ranks};
}

StatusOr<Placement> ChoosePlacement(const train::TrainConfig& config, int index, int sharers,
                                    int visible_devices, bool cuda_built) {
  Placement p;
  if (!cuda_built) {
    if (config.device == contract::Device::kCuda || config.backend == contract::Backend::kNccl) {
      return FailedPrecondition(
          "--device cuda / --backend nccl: this runner was built without CUDA (configure with "
          "nvcc available, RINGTRAIN_CUDA=ON)");
    }
    p.reason = "built without CUDA";
    return p;
  }
  if (config.device == contract::Device::kCpu ||
      (config.device == contract::Device::kAuto && visible_devices == 0)) {
    if (config.backend == contract::Backend::kNccl) {
      return InvalidArgument(config.device == contract::Device::kCpu
                                 ? "--backend: nccl needs --device cuda"
                                 : "--backend: nccl needs a GPU, and no CUDA device is visible");
    }
    p.reason = config.device == contract::Device::kCpu ? "--device cpu" : "no CUDA device visible";
    return p;
  }
  if (visible_devices <= 0) {
    return FailedPrecondition("--device: cuda was asked for, but no CUDA device is visible");
  }
  p.cuda = true;
  // NCCL refuses two ranks on one GPU.
  const bool own_gpu = sharers > 0 && visible_devices >= sharers;
  if (config.backend == contract::Backend::kNccl && !own_gpu) {
    return FailedPrecondition("--backend: nccl needs one GPU per rank, but " +
                              std::to_string(sharers) + " ranks share " +
                              std::to_string(visible_devices) +
                              " visible GPU(s) here (NCCL refuses two ranks on one GPU)");
  }
  if (config.backend == contract::Backend::kTcp ||
      (config.backend == contract::Backend::kAuto && !own_gpu)) {
    p.backend = Backend::kTcp;
    p.device = index % visible_devices;
    p.reason = config.backend == contract::Backend::kTcp
                   ? "--backend tcp"
                   : std::to_string(sharers) + " ranks share " + std::to_string(visible_devices) +
                         " GPU(s): NCCL needs one GPU per rank";
  } else {
    p.backend = Backend::kNccl;
    p.device = index;
    p.reason = "one GPU per rank";
  }
  return p;
}

StatusOr<Placement> PlaceThisRank(const train::TrainConfig& config, const train::RankEnv& env) {
  int visible = 0;
#ifdef RINGTRAIN_WITH_CUDA
  if (config.device != contract::Device::kCpu) visible = gpu::VisibleDeviceCount();
#endif
  const GpuSlot slot = GpuSlotOf(env);
  ASSIGN_OR_RETURN(Placement p,
                   ChoosePlacement(config, slot.index, slot.sharers, visible, kCudaBuilt));
  if (!p.cuda) spdlog::info("computing on the CPU ({})", p.reason);
  return p;
}

comm::TcpCommOptions TcpRingOptions(const train::RankEnv& env, const std::string& advertise_host) {
  comm::TcpCommOptions o;
  o.rank = env.rank;
  o.size = env.world_size;
  o.bind_host = env.bind_addr;
  o.advertise_host = advertise_host;
  o.connect_timeout = env.rendezvous_timeout;
  o.collective_timeout = env.collective_timeout;
  return o;
}

StatusOr<std::unique_ptr<comm::Communicator>> MakeCommunicator(rendezvous::Store& store,
                                                               const train::RankEnv& env,
                                                               const Placement& placement,
                                                               const std::string& advertise_host) {
  if (placement.backend == Backend::kNccl) {
#ifdef RINGTRAIN_WITH_CUDA
    comm::NcclCommOptions o;
    o.rank = env.rank;
    o.size = env.world_size;
    o.device = placement.device;
    o.init_timeout = env.rendezvous_timeout;
    o.collective_timeout = env.collective_timeout;
    ASSIGN_OR_RETURN(auto nccl, comm::NcclCommunicator::Create(store, o));
    return std::unique_ptr<comm::Communicator>(std::move(nccl));
#else
    return FailedPrecondition("--backend: nccl: this runner was built without NCCL");
#endif
  }
  ASSIGN_OR_RETURN(auto tcp,
                   comm::TcpCommunicator::Create(store, TcpRingOptions(env, advertise_host)));
  return std::unique_ptr<comm::Communicator>(std::move(tcp));
}

StatusOr<std::unique_ptr<train::StepEngine>> MakeEngine(const train::TrainConfig& config,
                                                        const train::EngineDeps& deps) {
  if (deps.device < 0) {
    ASSIGN_OR_RETURN(auto cpu, train::CpuEngine::Create(config, deps));
    return std::unique_ptr<train::StepEngine>(std::move(cpu));
  }
#ifdef RINGTRAIN_WITH_CUDA
  return gpu::MakeCudaEngine(config, deps);
#else
  return FailedPrecondition("CUDA device " + std::to_string(deps.device) +
                            ": this runner was built without CUDA");
#endif
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const train::TrainConfig& config,
                                                   const train::EngineDeps& deps) {
  ASSIGN_OR_RETURN(auto engine, MakeEngine(config, deps));
  train::TrainingLoop loop(config, train::LoopDepsFor(deps, engine.get()));
  return std::unique_ptr<Trainer>(new Trainer(std::move(engine), std::move(loop)));
}

rendezvous::GangFingerprint FingerprintOf(const train::RankEnv& env,
                                          const train::TrainConfig& config) {
  rendezvous::GangFingerprint fp;
  fp.protocol = kGangProtocolVersion;
  fp.runner = std::string(BuildVersion());
  fp.image = env.image;
  fp.config = train::GangConfigDigest(config);
  fp.config_fields = train::GangConfigFields(config);
  return fp;
}

StatusOr<train::TrainResult> TrainRank(const train::RankEnv& env, const train::TrainConfig& config,
                                       const Placement& placement, const RankDeps& deps) {
  if (deps.store == nullptr || (deps.train == nullptr) == (deps.train_table == nullptr)) {
    return InvalidArgument("TrainRank needs the attempt's store and a training set");
  }
#ifdef RINGTRAIN_WITH_CUDA
  std::unique_ptr<metrics::GpuMonitor> monitor;
  if (placement.cuda) {
    RT_CUDA_RETURN_IF_ERROR(cudaSetDevice(placement.device));
    spdlog::info("GPU {}: {}; backend {} ({})", placement.device,
                 gpu::DeviceDescription(placement.device), BackendName(placement.backend),
                 placement.reason);
    monitor = StartGpuMonitor(deps.metrics, placement.device);
  }
#endif
  // The CUDA engine cannot rebind to a new communicator yet: a GPU rank restarts with its gang.
  const bool may_recover =
      env.recovery_timeout > Duration::zero() && env.world_size > 1 && !placement.cuda;
  auto make = deps.make_communicator ? deps.make_communicator : MakeCommunicator;
  // The communicator of the round being trained, and that round's key space, which it reports
  // failures to: they go together. Declared before the trainer so that they outlive it: the
  // engine holds the communicator (the CPU reducer's thread, the CUDA graphs that captured its
  // NCCL all-reduces, which NCCL's finalize waits for), and must be gone first.
  std::unique_ptr<rendezvous::Store> comm_store;
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<Trainer> trainer;
  std::optional<int> failed_round;
  Status lost;  // what made this rank look for a next round
  const rendezvous::GangFingerprint fingerprint =
      deps.fingerprint ? *deps.fingerprint : FingerprintOf(env, config);
  // Rank 0 gives up an in-place recovery (from BeginRecovery until a Run trains again: the loop
  // knows whether it recovers and what it kept): it saves the state it kept, the gang's as of
  // the last step it completed, which no checkpoint may hold yet, whatever ended the recovery:
  // a stop (a SIGTERM: the job suspended, a node drained), no next round within the recovery
  // timeout, a round that failed to form or to train. The gang restart then resumes from that
  // step. A write that fails is logged; the failure stays the one reported.
  // The same save when a rank is lost while the gang trains and this rank does not recover in
  // place (no recovery timeout, runPolicy.recovery GangRestart, a stop beside the loss): the
  // state as of the gang's last completed step, which the gang restart resumes from. Not on a
  // GPU, whose step (its NCCL all-reduce and the update) is one graph.
  auto save_kept_state = [&trainer](bool stopped, bool lost_while_training) {
    if (trainer == nullptr) return;
    if (lost_while_training) {
      const std::string_view why = stopped ? "stopped after losing a peer while training"
                                           : "lost a peer while training (no in-place recovery)";
      if (Status saved = trainer->CheckpointLastStep(why); !saved.ok()) {
        spdlog::error("{}; the state of the last completed step is not saved: {}", why,
                      saved.ToString());
      }
      return;
    }
    const std::string_view why =
        stopped ? "stopped while recovering in place" : "in-place recovery failed";
    if (Status saved = trainer->CheckpointKeptState(why); !saved.ok()) {
      spdlog::error("{}; the state this rank kept is not saved: {}", why, saved.ToString());
    }
  };
  // Reports this rank's failure `s` to `round_store` and saves the state it kept. Stopped, it
  // saves first: the state is worth more than the report, and the pod's grace is short. A
  // failure reports first, so the gang agrees on its root cause as promptly as without the save.
  auto give_up = [&deps, &save_kept_state](rendezvous::Store& round_store, const Status& s,
                                           bool lost_while_training = false) {
    const bool stopped = Stopping(deps);
    if (stopped) save_kept_state(stopped, lost_while_training);
    if (deps.report_failure) deps.report_failure(round_store, s);
    if (!stopped) save_kept_state(stopped, lost_while_training);
    return s;
  };
  for (;;) {
    rendezvous::RoundOptions ro;
    ro.rank = env.rank;
    ro.world_size = env.world_size;
    ro.failed_round = failed_round;
    ro.timeout = failed_round ? env.recovery_timeout : env.rendezvous_timeout;
    ro.fingerprint = fingerprint;
    auto round = rendezvous::JoinRound(*deps.store, ro);
    if (!round.ok()) {
      if (!failed_round) return round.status();
      // Recovery itself failed: the original loss is the cause, the gang restarts. Reported to
      // the round that lost the peer, where its first failure is recorded: the attempt's own
      // key space (round 0) may hold an older failure, long recovered from.
      Status s(lost.code(), lost.message() + std::string(contract::kRecoveryFailedMarker) +
                                round.status().message());
      return give_up(*rendezvous::RoundStore(*deps.store, *failed_round), s);
    }
    std::unique_ptr<rendezvous::Store> round_store = rendezvous::RoundStore(*deps.store, *round);
    rendezvous::Store& this_round = *round_store;
    // A failure is reported while `comm` is still up (it closes after this).
    auto failed = [&this_round, &give_up](const Status& s) { return give_up(this_round, s); };
    // Every rank of the round runs the same runner on the same configuration, or none trains:
    // a replacement from a newer image beside survivors of an older one is refused here, not
    // met as a wire error in the ring or as replicas that silently diverge.
    auto verdict =
        rendezvous::AgreeOnFingerprints(this_round, env.rank, env.world_size, fingerprint);
    if (!verdict.ok()) {
      // Rank 0 lost before its verdict: as a replacement lost while the ring forms, below.
      if (failed_round && IsPeerLoss(verdict.status()) && !Stopping(deps)) {
        lost = verdict.status();
        failed_round = *round;
        continue;
      }
      return failed(verdict.status());
    }
    if (!verdict->agreed()) {
      spdlog::error("this rank runs {}; its training configuration (digest {}): {}",
                    rendezvous::DescribeFingerprint(fingerprint), fingerprint.config,
                    train::GangConfigString(config));
      // Retryable (Aborted, 138) for a runner and a configuration difference alike: the
      // operator builds every pod of an attempt from one spec and one runner image, so a
      // difference is a pod built before an edit or an upgrade beside pods built after it (an
      // in-place replacement), and the gang restart builds them all alike. A permanent code
      // would fail a job that a restart heals; a gang started by hand with two configurations
      // fails again at its next start, and backoffLimit bounds the restarts.
      return failed(Aborted("the gang refused to train together: " + verdict->refusal));
    }
    auto made = make(this_round, env, placement, deps.advertise_host);
    if (!made.ok()) {
      // A replacement lost while the ring forms: the survivors try the next round.
      if (failed_round && IsPeerLoss(made.status()) && !Stopping(deps)) {
        lost = made.status();
        failed_round = *round;
        continue;
      }
      return failed(made.status());
    }
    std::unique_ptr<comm::Communicator> next = std::move(*made);
    spdlog::info("{} communicator ready: rank {}/{} (attempt {}{})", BackendName(placement.backend),
                 env.rank, env.world_size, env.attempt,
                 *round > 0 ? ", recovery round " + std::to_string(*round) : std::string());
    if (trainer == nullptr) {
      train::EngineDeps ed;
      ed.comm = next.get();
      ed.train = deps.train;
      ed.test = deps.test;
      ed.train_table = deps.train_table;
      ed.test_table = deps.test_table;
      ed.metrics = deps.metrics;
      ed.stop = deps.stop;
      ed.drain = placement.cuda ? nullptr : deps.drain;
      ed.attempt = env.attempt;
      ed.device = placement.cuda ? placement.device : -1;
      ed.collective_timeout = env.collective_timeout;
      ed.checkpoint_timeout = env.checkpoint_timeout;
      // The ranks of this job on this machine: `ringtrain run`'s (RINGTRAIN_HOST_RANKS), else the
      // pod's (LOCAL_WORLD_SIZE), which share its memory limit.
      ed.host_ranks = GpuSlotOf(env).sharers;
      auto created = Trainer::Create(config, ed);
      if (!created.ok()) return failed(created.status());
      trainer = std::move(*created);
    } else {
      Status rejoined = trainer->Rejoin(next.get());
      if (!rejoined.ok())
        return failed(lost.WithContext("in-place recovery: " + rejoined.message()));
    }
    // The last round's communicator goes only now, then the key space it reported to.
    comm = std::move(next);
    comm_store = std::move(round_store);
    auto result = RunDraining(*trainer, deps, placement.cuda);
    if (result.ok()) {
      if (placement.cuda) {
        spdlog::info("GPU busy {:.2f} of the training time; CUDA graph {}", result->device_busy,
                     result->step_graph ? "used" : "not used");
      }
      return result;
    }
    const Status& s = result.status();
    if (!may_recover || !IsPeerLoss(s) || Stopping(deps)) {
      return give_up(this_round, s, IsPeerLoss(s) && !placement.cuda);
    }
    spdlog::warn(
        "lost a peer in round {}: {}; keeping this rank's state and waiting up to {} for the "
        "gang to form again (the lost rank's replacement, or the rank itself if it lives)",
        *round, s.message(), FormatDuration(env.recovery_timeout));
    trainer->BeginRecovery(s.message());
    lost = s;
    failed_round = *round;
  }
}

}  // namespace ringtrain::rank
