#include "controller/executors/local/local_executor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/port_picker.h"
#include "common/process.h"
#include "common/random.h"
#include "common/runner_env.h"
#include "common/runner_status.h"
#include "controller/reconcile/observe_status.h"
#include "controller/reconcile/planner.h"
#include "runner/train/model_data.h"

extern char** environ;

namespace ringtrain::executors {
namespace {

using reconcile::ObservedReplica;
using reconcile::ReplicaPhase;

constexpr int kExitStartError = 128;

struct Process {
  std::string name;
  int rank = 0;
  int attempt = 0;
  ChildProcess child;
  bool exited = false;
  WallTime exited_at{};
  int exit_code = 0;
  std::string reason;
  bool deleting = false;
  std::string message;  // the termination message, once exited
  std::string termination_log;
  std::string log;
  int metrics_port = -1;
  int world_size = 0;
  int nproc_per_node = 0;
};

// At most `max_bytes` of a file a rank (or a user's program) wrote, from its head or its tail
// (a rank's log can be long), read without trusting what is at the path: opened without
// blocking and read only when it is a regular file, so a FIFO put in its place (a program's own
// mkfifo) cannot stop the supervision loop until a writer comes, nor a device feed it forever.
// "" when missing, unreadable or not a regular file.
std::string ReadRankFile(const std::string& path, std::size_t max_bytes, bool tail = false) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const std::uint64_t from = tail && size > max_bytes ? size - max_bytes : 0;
    out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(size - from, max_bytes)));
    std::size_t got = 0;
    while (got < out.size()) {
      const ssize_t n =
          ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(from + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    out.resize(got);
  }
  ::close(fd);
  return out;
}

EnvMap HostEnvironment() {
  EnvMap env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

// The env a pod's runner container declares besides the template's: the rank contract (with the
// bind address a local gang needs) and POD_IP (the runner advertises it; loopback here).
constexpr char kEnvPodIp[] = "POD_IP";

std::set<std::string> InjectedNames() {
  contract::RankEnv sample;
  sample.token = "-";      // named whenever the gang has one
  sample.launcher = true;  // and a user's program's
  // A local gang starts together and has no gate: never inherit one from the host.
  std::set<std::string> names = {kEnvPodIp, contract::kEnvGangGate, contract::kEnvGangGateTimeout};
  for (const auto& [name, value] : contract::RankEnvVars(sample, /*with_bind_addr=*/true)) {
    names.insert(name);
  }
  return names;
}

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "localhost";
  return host;
}

class LocalRun {
 public:
  LocalRun(const api::TrainingJob& job, const LocalRunOptions& options, LocalContainer container)
      : job_(job), options_(options), container_(std::move(container)) {}

  StatusOr<LocalRunResult> Run(const std::atomic<bool>* interrupted);

 private:
  Status Spawn(int rank, int attempt);
  // A replica whose process could not be started at all (fork, its log file, a port): kept as
  // one that failed at once with reason StartError, as a program that could not be exec'd is,
  // so the planner decides (retry, backoffLimit, fail) and the other ranks stop with their grace.
  void RecordStartFailure(int rank, int attempt, const Status& error);
  void Reap();
  std::optional<std::uint64_t> OomKills() const {
    return options_.oom_kills ? options_.oom_kills() : train::ReadOomKillCount();
  }
  // SIGTERM, then SIGKILL after `grace` (at most the run's own grace; nullopt: the run's).
  void Kill(Process& p, std::optional<Duration> grace = std::nullopt);
  std::vector<ObservedReplica> Observe() const;
  std::optional<reconcile::ObservedProgress> PollProgress();
  // What the planner is given now: the job, its replicas as observed, the clocks and what it
  // remembers; `progress` is this pass's read of rank 0's /status, if any.
  reconcile::PlanInput PlanInputNow(std::optional<reconcile::ObservedProgress> progress) const;
  void PrintProgress(bool force);
  // Where the built-in runner keeps this job's checkpoints: spec.checkpoint.path, else a folder
  // of the work directory named after the job, so another job in the same work directory
  // never resumes from them.
  std::string CheckpointDir() const {
    return job_.spec.checkpoint.path.empty()
               ? options_.workdir + "/checkpoints/" + job_.metadata.name
               : job_.spec.checkpoint.path;
  }
  // Named after the job, as its checkpoints are: another job in the same work directory never
  // reads or removes it.
  std::string ResultPath(int attempt) const {
    return options_.workdir + "/" + ResultPrefix() + std::to_string(attempt) + ".json";
  }
  std::string ResultPrefix() const { return "result-" + job_.metadata.name + "-attempt-"; }
  // Results an earlier run left in a reused work directory: never read as this run's.
  void RemoveStaleResults() const;
  // Checkpoints an earlier version kept for every job in checkpoints/ itself: said, not used
  // (which job wrote them is not known).
  void WarnOfSharedCheckpoints() const;
  // Says on the console, once, that the first attempt resumed from a checkpoint (a gang restart
  // says so in its GangRestarted event).
  // `ended`: learnt from the result, after the run.
  void AnnounceResume(std::int64_t step, bool ended);
  // A line on the console between progress lines.
  void Say(const std::string& line, bool warning) const;
  bool AnyAlive() const {
    for (const auto& [name, p] : procs_) {
      if (!p.exited) return true;
    }
    return false;
  }

  const api::TrainingJob& job_;
  const LocalRunOptions& options_;
  const LocalContainer container_;
  const EnvMap host_env_ = HostEnvironment();
  const std::string host_name_ = HostName();
  // The collective timeout the ranks run with: the template's, else the one they inherit from
  // this process's environment; zero when neither gives one (the planner reads the spec).
  const Duration collective_timeout_ = RanksCollectiveTimeout();
  Duration RanksCollectiveTimeout() const {
    const LocalRankExec exec = LocalRankExecFor(container_, {}, host_env_, {}, {});
    const auto it = exec.env.find(contract::kEnvCollectiveTimeout);
    if (it == exec.env.end()) return Duration::zero();
    return api::ParseCollectiveTimeout(it->second).value_or(Duration::zero());
  }
  api::TrainingJob state_;
  // The planner's memory between passes (the same decisions as for pods: a process is only
  // ever gone after the planner's delete, so its vanished-replica policy never fires here).
  reconcile::PlanMemory memory_;
  std::map<std::string, Process> procs_;
  // The cgroup's OOM kills counted so far (LocalRunOptions::oom_kills): each one above it is
  // one SIGKILLed rank's cause.
  std::optional<std::uint64_t> oom_kills_seen_;
  // Every rank binds 127.0.0.1: a port goes to one process only, the rendezvous port of one
  // attempt never to a metrics server as well (port_picker.h).
  net::PortPicker ports_;
  std::map<int, int> master_port_;      // per attempt
  std::map<std::string, int> spawned_;  // processes started under each name (in-place replacements)
  std::string token_ = RandomToken();
  std::optional<reconcile::ObservedProgress> progress_;
  SteadyTime next_poll_{};
  SteadyTime next_print_{};
  int printed_attempt_ = -1;
  bool announced_resume_ = false;   // or decided there was nothing to announce
  std::int64_t resumed_from_ = -1;  // what it announced (LocalRunResult::resumed_from)
};

void LocalRun::RemoveStaleResults() const {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.workdir, ec)) {
    const std::string name = entry.path().filename().string();
    // Also what an earlier version wrote (result-attempt-N.json, whatever the job).
    if (name.starts_with(ResultPrefix()) || name.starts_with("result-attempt-")) {
      // A directory by that name (not ours to empty) is moved aside, saying so: left there, rank
      // 0's rename of its result onto it failed, retryably, after all the training (review: a
      // job that trained to the end used up its restarts on it).
      if (std::filesystem::symlink_status(entry.path(), ec).type() ==
          std::filesystem::file_type::directory) {
        const std::string aside = entry.path().string() + ".moved-aside";
        std::filesystem::rename(entry.path(), aside, ec);
        Say(entry.path().string() + " is a directory where rank 0 writes its result: " +
                (ec ? "it cannot be moved aside (" + ec.message() + "), so the result will fail"
                    : "moved aside to " + aside),
            true);
        continue;
      }
      std::filesystem::remove(entry.path(), ec);
    }
  }
}

void LocalRun::WarnOfSharedCheckpoints() const {
  if (!job_.spec.checkpoint.path.empty() || !job_.spec.command.empty()) return;
  std::error_code ec;
  if (std::filesystem::exists(CheckpointDir(), ec)) return;
  const std::string shared = options_.workdir + "/checkpoints";
  for (const auto& entry : std::filesystem::directory_iterator(shared, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("ckpt-") && name.ends_with(".bin")) {
      Say(shared +
              " holds checkpoints of an earlier ringtrain (one folder for every job): this "
              "job's are kept in " +
              CheckpointDir() + "; move the ckpt-*.bin files there to resume from them",
          true);
      return;
    }
  }
}

void LocalRun::Say(const std::string& line, bool warning) const {
  if (options_.tty) std::fputs("\r\033[K", stdout);
  std::fflush(stdout);
  if (warning) {
    spdlog::warn("{}", line);
  } else {
    spdlog::info("{}", line);
  }
}

void LocalRun::AnnounceResume(std::int64_t step, bool ended) {
  // The first training read of attempt 0 decides: a later start step is an in-place recovery's
  // (rank 0 reports the step it recovered at), not a checkpoint's.
  if (announced_resume_ || !job_.spec.command.empty()) return;
  announced_resume_ = true;
  if (step <= 0) return;
  resumed_from_ = step;
  Say(std::string(ended ? "resumed" : "resuming") + " from step " + std::to_string(step) + " of " +
          CheckpointDir(),
      false);
}

Status LocalRun::Spawn(int rank, int attempt) {
  const api::JobSpec& spec = job_.spec;
  if (!master_port_.count(attempt)) {
    ASSIGN_OR_RETURN(master_port_[attempt], ports_.Pick());
  }
  const int gpus = spec.gpus_per_replica > 1 ? spec.gpus_per_replica : 1;
  ASSIGN_OR_RETURN(int metrics_port, ports_.PickRange(gpus));
  Process p;
  p.name = reconcile::ReplicaName(job_.metadata.name, attempt, rank);
  p.rank = rank;
  p.attempt = attempt;
  p.metrics_port = metrics_port;
  p.termination_log = options_.workdir + "/" + p.name + ".termination-log";
  std::remove(p.termination_log.c_str());
  p.log = options_.workdir + "/" + p.name + ".log";
  // A replacement (in-place recovery) keeps the lost process's log beside its own: <name>.log.N.
  if (const int before = spawned_[p.name]++; before > 0) {
    std::rename(p.log.c_str(), (p.log + "." + std::to_string(before)).c_str());
  }

  // One process per replica; with several GPUs it starts one rank per GPU (local launcher).
  contract::RankEnv rank_env;
  rank_env.job = job_.metadata.name;
  rank_env.ns = job_.metadata.ns;
  rank_env.rank = rank * gpus;
  rank_env.node_rank = rank;
  rank_env.local_world_size = gpus;
  rank_env.world_size = spec.world_size();
  rank_env.master_addr = "127.0.0.1";
  // A local gang listens on loopback only (store, ring, metrics): nothing off this host joins.
  rank_env.bind_addr = "127.0.0.1";
  rank_env.master_port = master_port_[attempt];
  rank_env.attempt = attempt;
  rank_env.token = token_;
  rank_env.metrics_port = metrics_port;
  rank_env.termination_log = p.termination_log;
  rank_env.recovery_timeout = api::RecoveryTimeoutFor(spec);
  // As in the operator's pods, ours replaces the template's, 0 included (a GangRestart job's
  // survivor must not wait for a replacement that a gang restart never starts); and, said always,
  // one this host exports too.
  rank_env.say_recovery_timeout = true;
  // Every replica runs on this machine and sees all its GPUs (no device plugin hands each its
  // own): each rank picks its GPU, and NCCL or the TCP ring, by its place among all of them.
  rank_env.host_ranks = spec.world_size();
  rank_env.host_rank_base = rank * gpus;
  rank_env.launcher = !spec.command.empty();
  auto injected = contract::RankEnvVars(rank_env, /*with_bind_addr=*/true);
  injected.emplace_back(kEnvPodIp, "127.0.0.1");
  injected.emplace_back(contract::kEnvGangGate, "");  // no gate: set empty over any inherited one
  p.world_size = spec.world_size();
  p.nproc_per_node = gpus;

  std::vector<std::string> command;
  if (!spec.command.empty()) {
    command = spec.command;
  } else {
    command.push_back(options_.runner_path);
    for (auto& a : api::RunnerArgs(spec, CheckpointDir())) command.push_back(a);
    if (rank == 0) {
      const std::string result = ResultPath(attempt);
      std::remove(result.c_str());  // only what this process writes is this attempt's result
      command.push_back("--result-file");
      command.push_back(result);
    }
  }
  // Everything else as the rank's pod would have it: the template's env and workingDir, $(VAR)
  // expanded, the program found on the rank's PATH.
  LocalRankExec exec = LocalRankExecFor(container_, command, host_env_, injected,
                                        {p.name, job_.metadata.ns, host_name_});
  SpawnOptions spawn;
  spawn.log_path = p.log;
  spawn.working_dir = container_.working_dir;
  // Own process group: the terminal's Ctrl-C reaches ringtrain, which stops the gang itself.
  spawn.new_process_group = true;
  ASSIGN_OR_RETURN(p.child, options_.spawn(exec.argv, exec.env, spawn));
  if (!p.child.start_error().empty()) {
    // What a program writes when it fails, so the replica fails as any other: the planner
    // reads it as the termination message (a pod shows its runtime's error the same way).
    std::ofstream(p.termination_log, std::ios::trunc) << p.child.start_error() << "\n";
    spdlog::debug("{}: {}", p.name, p.child.start_error());
  }
  spdlog::debug("started {} (pid {}), log {}", p.name, p.child.pid(), p.log);
  if (spec.command.empty()) {
    // Where to look while it trains (a spec.command program may serve nothing there).
    if (gpus > 1) {
      spdlog::info("{}: ranks {}-{}, metrics http://127.0.0.1:{}-{}/metrics", p.name, rank_env.rank,
                   rank_env.rank + gpus - 1, metrics_port, metrics_port + gpus - 1);
    } else {
      spdlog::info("{}: rank {}, metrics http://127.0.0.1:{}/metrics", p.name, rank_env.rank,
                   metrics_port);
    }
  }
  procs_[p.name] = std::move(p);
  return Status::Ok();
}

void LocalRun::RecordStartFailure(int rank, int attempt, const Status& error) {
  Process p;
  p.name = reconcile::ReplicaName(job_.metadata.name, attempt, rank);
  p.rank = rank;
  p.attempt = attempt;
  p.world_size = job_.spec.world_size();
  p.nproc_per_node = job_.spec.gpus_per_replica > 1 ? job_.spec.gpus_per_replica : 1;
  p.exited = true;
  p.exited_at = options_.clock->Now();
  // The kubelet's exit code for a container whose runtime could not start it.
  p.exit_code = kExitStartError;
  p.reason = "StartError";
  p.message = "cannot start the process: " + error.message();
  spdlog::debug("{}: {}", p.name, p.message);  // the planner's event says it
  procs_[p.name] = std::move(p);
}

// Also sends the SIGKILL of a Kill whose grace has passed (ChildProcess::Poll).
void LocalRun::Reap() {
  for (auto& [name, p] : procs_) {
    if (p.exited || !p.child.Poll()) continue;
    p.exited = true;
    p.exited_at = options_.clock->Now();
    p.exit_code = p.child.exit_code();
    if (!p.child.start_error().empty()) {
      p.reason = "StartError";  // Kubernetes' reason for a container whose command never ran
    } else if (p.child.term_signal() == 0) {
      p.reason = p.exit_code == 0 ? "Completed" : "Error";
    } else {
      p.reason = p.child.term_signal() == SIGKILL ? "Killed" : "Signaled";
    }
    if (p.reason == "Killed" && !p.deleting && oom_kills_seen_) {
      const std::optional<std::uint64_t> kills = OomKills();
      if (kills && *kills > *oom_kills_seen_) {
        p.reason = "OOMKilled";
        ++*oom_kills_seen_;
      }
    }
    if (p.deleting) p.reason = "Deleted";
    // Read once, as the kubelet does when the container ends (FallbackToLogsOnError).
    p.message = TerminationMessage(
        ReadRankFile(p.termination_log, kTerminationMessageMaxBytes),
        p.exit_code != 0 ? ReadRankFile(p.log, kLogFallbackMaxBytes, /*tail=*/true) : "",
        p.exit_code);
  }
}

void LocalRun::Kill(Process& p, std::optional<Duration> grace) {
  if (p.exited || p.deleting) return;
  p.deleting = true;
  p.child.RequestTerminate(grace ? std::min(*grace, options_.grace) : options_.grace);
}

std::vector<ObservedReplica> LocalRun::Observe() const {
  std::vector<ObservedReplica> out;
  for (const auto& [name, p] : procs_) {
    if (p.deleting && p.exited) continue;  // deleted and gone, like a pod removed from the API
    ObservedReplica r;
    r.name = p.name;
    r.rank = p.rank;
    r.attempt = p.attempt;
    r.terminating = p.deleting;
    r.world_size = p.world_size;
    r.nproc_per_node = p.nproc_per_node;
    if (!p.exited) {
      r.phase = ReplicaPhase::kRunning;
    } else {
      r.phase = p.exit_code == 0 ? ReplicaPhase::kSucceeded : ReplicaPhase::kFailed;
      r.exit_code = p.exit_code;
      r.reason = p.reason;
      r.message = p.message;
      r.finished_at = p.exited_at;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<reconcile::ObservedProgress> LocalRun::PollProgress() {
  auto now = options_.clock->SteadyNow();
  if (now < next_poll_) return std::nullopt;
  next_poll_ = now + std::chrono::seconds(1);
  const std::string rank0 = reconcile::ReplicaName(job_.metadata.name, state_.status.attempt, 0);
  auto it = procs_.find(rank0);
  if (it == procs_.end() || it->second.exited) return std::nullopt;
  reconcile::ObservedProgress p = reconcile::ObserveRunnerStatus(
      contract::FetchRunnerStatus("127.0.0.1", it->second.metrics_port, Duration(500)));
  // What the progress line shows: the last good read; a rank 0 that does not train (starting
  // after a restart, recovering) keeps the last step seen, at no speed.
  if (p.reachable && (!p.idle || !progress_)) {
    progress_ = p;
  } else if (p.reachable) {
    progress_->samples_per_second = 0;
    progress_->state = p.state;
  }
  // The first attempt starts fresh or from a checkpoint (later ones may start from survivors).
  if (p.reachable && p.training && state_.status.attempt == 0 &&
      state_.status.in_place_recoveries == 0) {
    AnnounceResume(p.start_step, false);
  }
  return p;
}

void LocalRun::PrintProgress(bool force) {
  auto now = options_.clock->SteadyNow();
  if (!force && now < next_print_) return;
  next_print_ = now + (options_.tty ? std::chrono::milliseconds(500) : std::chrono::seconds(10));
  const std::string line = FormatProgressLine(state_, progress_);
  if (options_.tty) {
    std::fprintf(stdout, "\r\033[K%s", line.c_str());
  } else {
    std::fprintf(stdout, "%s\n", line.c_str());
  }
  std::fflush(stdout);
}

reconcile::PlanInput LocalRun::PlanInputNow(
    std::optional<reconcile::ObservedProgress> progress) const {
  reconcile::PlanInput in;
  in.job = &state_;
  in.progress = std::move(progress);
  in.replicas = Observe();
  in.now = options_.clock->Now();
  in.steady_now = options_.clock->SteadyNow();
  in.memory = memory_;
  in.collective_timeout = collective_timeout_;
  return in;
}

StatusOr<LocalRunResult> LocalRun::Run(const std::atomic<bool>* interrupted) {
  const SteadyTime start = options_.clock->SteadyNow();
  state_ = job_;
  LocalRunResult result;
  bool killed_now = false;
  RemoveStaleResults();
  WarnOfSharedCheckpoints();
  oom_kills_seen_ = OomKills();
  for (;;) {
    Reap();
    if (interrupted != nullptr && interrupted->load()) {
      // A job that had finished keeps its outcome: the interrupt only cuts short the grace of
      // the ranks still stopping.
      const bool finished = api::IsTerminal(state_.status.phase);
      if (!result.interrupted && !finished) {
        result.interrupted = true;
        for (auto& [name, p] : procs_) Kill(p);
        if (AnyAlive()) {
          Say("interrupted: stopping the ranks (SIGTERM; SIGKILL after " +
                  FormatDuration(options_.grace) +
                  ", or at once on another Ctrl-C a second or more from now)",
              true);
        }
      }
      if ((finished || (options_.kill_now != nullptr && options_.kill_now->load())) &&
          !killed_now) {
        killed_now = true;
        if (AnyAlive()) {
          Say(finished ? "interrupted: the job has " + state_.status.phase +
                             "; killing the ranks still stopping (SIGKILL)"
                       : "interrupted again: killing the ranks (SIGKILL)",
              true);
        }
        for (auto& [name, p] : procs_) {
          if (!p.exited) p.child.RequestTerminate(Duration::zero());
        }
      }
      if (!AnyAlive()) {
        // Ranks that had already finished when the interrupt came (all exited 0, rank 0's
        // result written) make a job that Succeeded, not one interrupted (review: a run whose
        // ranks trained to the end was reported Interrupted, with a resume command and exit 130).
        const bool all_completed =
            !procs_.empty() && std::all_of(procs_.begin(), procs_.end(), [&](const auto& e) {
              const Process& p = e.second;
              return p.attempt != state_.status.attempt || (p.exited && p.exit_code == 0);
            });
        if (result.interrupted && !finished && all_completed) {
          // They exited 0 on their own account: observed as completed, not as deleted.
          for (auto& [name, p] : procs_) {
            if (p.attempt == state_.status.attempt) {
              p.deleting = false;
              p.reason = "Completed";
            }
          }
          const reconcile::Plan plan = reconcile::PlanReconcile(PlanInputNow(std::nullopt));
          if (plan.status.phase == "Succeeded") {
            state_.status = plan.status;
            result.interrupted = false;
            Say("interrupted, but every rank had already finished: the job Succeeded", true);
          }
        }
        break;
      }
      std::this_thread::sleep_for(options_.poll);
      continue;
    }
    // This pass's read only: the planner judges each read once.
    reconcile::Plan plan = reconcile::PlanReconcile(PlanInputNow(PollProgress()));
    memory_ = plan.memory;
    if (plan.status.attempt != state_.status.attempt) progress_.reset();
    state_.status = plan.status;
    for (const auto& e : plan.events) {
      // A message of several lines (a log's end) is shown whole in the summary, not here.
      std::string message = e.message;
      if (const auto nl = message.find('\n'); nl != std::string::npos) {
        const auto more =
            std::count(message.begin() + static_cast<std::ptrdiff_t>(nl), message.end(), '\n');
        message = message.substr(0, nl) + " (" + std::to_string(more) + " more lines)";
      }
      Say(e.reason + ": " + message, e.type == "Warning");
    }
    for (const auto& a : plan.actions) {
      switch (a.kind) {
        case reconcile::Action::Kind::kCreateReplica:
          // Never an end of the run: the ranks already running would be killed outright.
          if (Status spawned = Spawn(a.rank, a.attempt); !spawned.ok()) {
            RecordStartFailure(a.rank, a.attempt, spawned);
          }
          break;
        case reconcile::Action::Kind::kDeleteReplica:
          reconcile::RecordReplicaDeleted(&memory_, a.name);
          if (auto it = procs_.find(a.name); it != procs_.end()) {
            // A finished process is simply forgotten, as a deleted pod that had ended.
            if (it->second.exited) {
              procs_.erase(it);
            } else {
              Kill(it->second, a.grace);
            }
          }
          break;
        case reconcile::Action::Kind::kDeleteJob:
          break;  // nothing to delete locally
        case reconcile::Action::Kind::kOpenGate:
          break;  // local ranks start together: they have no gate
        case reconcile::Action::Kind::kRelabel:
          break;  // local ranks have no labels (and no run hash: never planned)
      }
    }
    if (api::IsTerminal(state_.status.phase)) {
      // Nothing outlives `ringtrain run`, whatever cleanPodPolicy says for a cluster.
      for (auto& [name, p] : procs_) Kill(p);
      if (!AnyAlive()) break;
    }
    if (state_.status.attempt != printed_attempt_) {
      printed_attempt_ = state_.status.attempt;
      PrintProgress(true);
    } else {
      PrintProgress(false);
    }
    std::this_thread::sleep_for(options_.poll);
  }
  if (options_.tty) std::fputs("\n", stdout);
  result.status = state_.status;
  result.wall_seconds = std::chrono::duration<double>(options_.clock->SteadyNow() - start).count();
  // Rank 0's result: a few hundred bytes; more is no result of ours.
  result.result_json = ReadRankFile(ResultPath(state_.status.attempt), 1 << 20);
  if (job_.spec.command.empty()) {
    result.checkpoint_dir = CheckpointDir();
    if (auto newest = NewestCheckpointFile(result.checkpoint_dir)) {
      std::tie(result.checkpoint_step, result.checkpoint_path) = *newest;
    }
  }
  if (state_.status.attempt == 0 && state_.status.in_place_recoveries == 0 &&
      !result.result_json.empty()) {
    // A run that ended before a /status read saw it train: its result says where it started
    // (unless ranks recovered in place: their start is the recovery's).
    const auto r = nlohmann::json::parse(result.result_json, nullptr, false);
    auto integer = [&r](const char* key) {
      const auto it = r.find(key);
      return it != r.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
    };
    if (r.is_object() && r.contains("resumed") && r["resumed"] == true) {
      AnnounceResume(integer("steps") - integer("steps_this_run"), true);
    }
  }
  result.resumed_from = resumed_from_;
  return result;
}

}  // namespace

std::string FormatProgressLine(const api::TrainingJob& job,
                               const std::optional<reconcile::ObservedProgress>& progress) {
  const auto& st = job.status;
  char line[256];
  if (progress) {
    // Only the words a runner says of itself when it trains without progress: a reply is
    // untrusted, and this line must stay one short line.
    const bool held = progress->state == "stalled" || progress->state == "recovering";
    // The last evaluation: this read's, else the one the job keeps (a restarted rank 0 has
    // not evaluated yet).
    double accuracy = progress->test_accuracy;
    double mse = progress->test_mse;
    if (accuracy < 0 && mse < 0 && st.progress) {
      accuracy = st.progress->test_accuracy;
      mse = st.progress->test_mse;
    }
    char evaluation[64] = "";
    if (accuracy >= 0) {
      std::snprintf(evaluation, sizeof(evaluation), " | test accuracy %.4f", accuracy);
    } else if (mse >= 0) {
      std::snprintf(evaluation, sizeof(evaluation), " | test MSE %.4g", mse);
    }
    std::snprintf(line, sizeof(line),
                  "%s | attempt %d | epoch %d/%d | step %lld | loss %.4f%s | %.0f samples/s%s%s | "
                  "restarts %d",
                  st.phase.c_str(), st.attempt,
                  std::min(progress->epoch + 1, job.spec.train.epochs), job.spec.train.epochs,
                  static_cast<long long>(progress->step), progress->loss, evaluation,
                  progress->samples_per_second, held ? ", " : "",
                  held ? progress->state.c_str() : "", st.restarts);
  } else {
    std::snprintf(line, sizeof(line), "%s | attempt %d | starting %d replicas | restarts %d",
                  st.phase.c_str(), st.attempt, job.spec.replicas, st.restarts);
  }
  return line;
}

std::optional<std::pair<std::int64_t, std::string>> NewestCheckpointFile(const std::string& dir) {
  std::optional<std::pair<std::int64_t, std::string>> newest;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // The runner's names: ckpt-<step>.bin (a temporary file or a .corrupt one is none).
    if (!name.starts_with("ckpt-") || !name.ends_with(".bin")) continue;
    const std::string digits = name.substr(5, name.size() - 9);
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const std::int64_t step = std::stoll(digits);
    if (!newest || step > newest->first) newest.emplace(step, entry.path().string());
  }
  return newest;
}

StatusOr<WorkDirLock> WorkDirLock::Acquire(const std::string& dir, int (*flock)(int, int)) {
  const std::string path = dir + "/" + kFileName;
  // Not through a symbolic link: the pid is written into it (a link there made that write land
  // in the link's target).
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return ErrnoStatus(StatusCode::kFailedPrecondition, "work directory lock " + path, errno);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == ENOLCK || err == EOPNOTSUPP) {
      ::close(fd);
      return WorkDirLock(-1, "work directory " + dir + " cannot be locked (" +
                                 std::string(std::strerror(err)) +
                                 "): another `ringtrain run` there would not be noticed");
    }
    if (err != EWOULDBLOCK) {
      ::close(fd);
      return ErrnoStatus(StatusCode::kFailedPrecondition, "work directory lock " + path, err);
    }
    // Who holds it, as it wrote itself there (only said: the lock is the flock).
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    const bool numeric = !pid.empty() && std::all_of(pid.begin(), pid.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    return FailedPrecondition(
        "work directory " + dir + " is in use by another `ringtrain run`" +
        (numeric ? " (pid " + pid + ")" : std::string()) +
        ": two runs there would overwrite each other's logs and resume from "
        "each other's checkpoints; wait for it to end, or pass another --workdir");
  }
  // Ours now: say who holds it, for the message above.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  return WorkDirLock(fd);
}

StatusOr<WorkDirLock> LockCheckpointDir(const api::JobSpec& spec, const std::string& workdir) {
  if (spec.checkpoint.path.empty() || !spec.command.empty()) return WorkDirLock();
  std::error_code ec;
  std::filesystem::create_directories(spec.checkpoint.path, ec);
  // One the ranks cannot use either: they say why, naming the field.
  if (ec) return WorkDirLock();
  const auto dir = std::filesystem::weakly_canonical(spec.checkpoint.path, ec);
  const auto work = std::filesystem::weakly_canonical(workdir, ec);
  if (ec) return WorkDirLock();
  const auto [w, d] = std::mismatch(work.begin(), work.end(), dir.begin(), dir.end());
  if (w == work.end()) return WorkDirLock();  // inside the work directory
  auto lock = WorkDirLock::Acquire(dir.string());
  if (lock.ok() || lock.status().code() != StatusCode::kFailedPrecondition) return lock;
  const std::string& m = lock.status().message();
  const std::string in_use = " is in use by another `ringtrain run`";
  const std::size_t at = m.find(in_use);
  if (at == std::string::npos) return lock.status();
  const std::size_t until = m.find(": two runs", at);
  return FailedPrecondition(
      "spec.checkpoint.path " + spec.checkpoint.path +
      m.substr(at, until == std::string::npos ? std::string::npos : until - at) +
      ": two runs there would resume from and remove each other's checkpoints; wait for it to "
      "end, or give this one another checkpoint.path");
}

WorkDirLock::~WorkDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

WorkDirLock& WorkDirLock::operator=(WorkDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    unheld_ = std::move(other.unheld_);
  }
  return *this;
}

StatusOr<LocalContainer> LocalContainerForRun(const api::JobSpec& spec) {
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  return LocalContainerFromSpec(spec, HostEnvironment(), ec ? "/" : cwd.string(), InjectedNames());
}

Status CheckRunsLocally(const api::JobSpec& spec) {
  if (spec.run_policy.suspend) {
    return FailedPrecondition(
        "spec.runPolicy.suspend: true holds the job until it is resumed on a cluster, and "
        "`ringtrain run` cannot resume it: set it to false (or remove it) to run the job here");
  }
  return Status::Ok();
}

StatusOr<LocalRunResult> RunLocal(const api::TrainingJob& job, const LocalRunOptions& options,
                                  const std::atomic<bool>* interrupted) {
  RETURN_IF_ERROR(CheckRunsLocally(job.spec));
  ASSIGN_OR_RETURN(LocalContainer container, LocalContainerForRun(job.spec));
  LocalRun run(job, options, std::move(container));
  return run.Run(interrupted);
}

}  // namespace ringtrain::executors
