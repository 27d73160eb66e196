// ringtrain: the TrainingJob CLI. `ringtrain run JOB.yaml` runs a job on this machine as local
// runner processes under the same planner the operator uses; `ringtrain validate JOB.yaml`
// checks a manifest. Exit code 0 = the job succeeded, 1 = it failed or the input was bad,
// 128 + the signal = interrupted (130 for Ctrl-C, 143 for SIGTERM, 129 for a closed terminal).
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/env.h"
#include "common/flags.h"
#include "common/group_janitor.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/runner_contract.h"
#include "controller/api/training_job.h"
#include "controller/controller_command.h"
#include "controller/executors/local/local_dataset.h"
#include "controller/executors/local/local_executor.h"
#include "runner/train/checkpoint.h"

namespace ringtrain {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_kill_now{false};  // a second stop signal while the ranks stop
std::atomic<std::int64_t> g_first_signal_ns{0};
std::atomic<int> g_first_signal{0};  // the signal that interrupted the run: its exit code

// What stops a run: Ctrl-C, SIGTERM, the terminal closed (SIGHUP) and SIGQUIT, as torchrun's
// agent takes them. A second signal kills the ranks at once only when it comes a second or more
// after the first: one stop may arrive twice at once (GNU timeout signals its child, then its
// own process group).
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

void OnSignal(int sig) {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  const std::int64_t ns = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  if (!g_interrupted.exchange(true)) {
    g_first_signal_ns = ns;
    g_first_signal = sig;
  } else if (ns - g_first_signal_ns.load() >= 1'000'000'000) {
    g_kill_now = true;
  }
}

constexpr char kUsage[] =
    "usage:\n"
    "  ringtrain run JOB.yaml [--summary-json FILE] [--workdir DIR] [--runner PATH]\n"
    "                         [--grace-period SECONDS]\n"
    "  ringtrain validate JOB.yaml\n"
    "  ringtrain controller [--kubeconfig PATH] [--namespace NS] [--leader-elect] ...\n"
    "      (the Kubernetes operator; `ringtrain controller --help` lists its flags)\n";

std::string DefaultRunnerPath() {
  if (auto env = GetEnv("RINGTRAIN_RUNNER")) return *env;
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "ringtrain-runner";
  buf[n] = '\0';
  return (std::filesystem::path(buf).parent_path() / "ringtrain-runner").string();
}

// Whether `path` can be written (created, or appended to), found by trying: a file this makes
// is removed again. The error names the path and why.
Status CheckWritable(const std::string& path) {
  // Not a regular file (a FIFO, /dev/stdout): opening it could block or end a reader's input,
  // so only the permission is checked. A directory is no file to write.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return FailedPrecondition(path + ": is a directory");
  }
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (::access(path.c_str(), W_OK) != 0) {
      return ErrnoStatus(StatusCode::kFailedPrecondition, path, errno);
    }
    return Status::Ok();
  }
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(StatusCode::kFailedPrecondition, path, errno);
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return Status::Ok();
}

// `word` as one shell word: as it is when it is plain, else in single quotes.
std::string ShellQuote(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::strchr("_./-=:,+@%", c) != nullptr;
  });
  if (plain) return word;
  std::string out = "'";
  for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Parses a subcommand's flags: -1 to go on, else the exit code (0 after --help, 2 on bad flags,
// the error and the usage printed).
int ParseOrUsage(flags::FlagSet& set, const std::vector<std::string>& args) {
  if (Status s = set.Parse(args); !s.ok()) {
    std::fprintf(stderr, "error: %s\n%s", s.message().c_str(), set.Usage().c_str());
    return 2;
  }
  if (set.help_requested()) {
    std::fputs(set.Usage().c_str(), stdout);
    return 0;
  }
  return -1;
}

int Validate(const std::vector<std::string>& args) {
  std::string manifest;
  flags::FlagSet set("ringtrain validate JOB.yaml");
  set.Positional("JOB.yaml", &manifest, "the TrainingJob manifest");
  if (int rc = ParseOrUsage(set, args); rc >= 0) return rc;
  auto job = api::LoadManifestFile(manifest);
  if (!job.ok()) {
    std::fprintf(stderr, "error: %s\n", job.status().message().c_str());
    return 1;
  }
  std::string summary;
  if (job->spec.command.empty()) {  // else its own trainer: no model of ours to check
    // The model against the dataset as this machine sees it: every layer's shape and parameters.
    auto checked = executors::CheckModelLocally(&job->spec.train);
    if (!checked.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", manifest.c_str(), checked.status().message().c_str());
      return 1;
    }
    summary = *std::move(checked);
  }
  // Files that are not here were not read: said, since `ringtrain run` here would refuse them
  // (a misspelt test file), and only a cluster whose ranks have them can run the job.
  std::vector<std::string> not_here;
  if (job->spec.command.empty()) {
    // A relative path under the template's workingDir is the ranks' to open there.
    const auto container = executors::LocalContainerForRun(job->spec);
    not_here = executors::DatasetPathsNotHere(job->spec.train,
                                              container.ok() && !container->working_dir.empty());
  }
  std::printf("%s: TrainingJob %s is valid (world size %d)\n%s", manifest.c_str(),
              job->metadata.name.c_str(), job->spec.world_size(), summary.c_str());
  for (const std::string& path : not_here) {
    std::printf(
        "note: %s: not on this machine, so not read (`ringtrain run` here will refuse it; "
        "ranks that have it elsewhere read it)\n",
        path.c_str());
  }
  if (const std::string ignored = api::IgnoredRunnerCommand(job->spec); !ignored.empty()) {
    std::printf("note: %s\n", ignored.c_str());
  }
  if (const std::string ignored = api::IgnoredRecoveryTimeout(job->spec); !ignored.empty()) {
    std::printf("note: %s\n", ignored.c_str());
  }
  if (const std::string ignored = api::IgnoredMomentum(job->spec); !ignored.empty()) {
    std::printf("note: %s\n", ignored.c_str());
  }
  for (const std::string& ignored : api::IgnoredTemplateFields(job->spec)) {
    std::printf("note: %s\n", ignored.c_str());
  }
  // Valid for a cluster; only this machine's `ringtrain run` cannot do it.
  if (Status local = executors::CheckRunsLocally(job->spec); !local.ok()) {
    std::printf("note: `ringtrain run` will refuse this job: %s\n", local.message().c_str());
  } else if (auto container = executors::LocalContainerForRun(job->spec); !container.ok()) {
    // The template's runner container as local ranks would get it (a Secret, a ConfigMap).
    std::printf("note: `ringtrain run` will refuse this job: %s\n",
                container.status().message().c_str());
  }
  if (const api::DataShape declared = api::DeclaredDataShape(job->spec.train);
      !job->spec.train.model_json.empty() && !declared.input) {
    // The operator reads the job from the API server and never the dataset.
    api::TrainSpec strict = job->spec.train;
    strict.model_spec.reset();
    if (auto st = api::ResolveModel(&strict, declared); !st.ok()) {
      std::printf("note: the operator will refuse this job: %s\n", st.status().message().c_str());
    }
  }
  return 0;
}

int Run(const std::vector<std::string>& args) {
  std::string manifest, summary_path, workdir, runner = DefaultRunnerPath();
  flags::FlagSet set("ringtrain run JOB.yaml [flags]");
  set.Positional("JOB.yaml", &manifest, "the TrainingJob manifest");
  set.String("summary-json", &summary_path, "write the job's summary here as JSON", "FILE");
  set.String("workdir", &workdir, "the ranks' logs and files (default: a new temporary one)",
             "DIR");
  set.String("runner", &runner, "the runner binary (else $RINGTRAIN_RUNNER)", "PATH");
  std::int64_t grace_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(contract::kTerminationGracePeriod).count();
  set.Int("grace-period", &grace_seconds,
          "seconds a rank has to stop after SIGTERM (Ctrl-C, a failed peer) before SIGKILL, as a "
          "pod's terminationGracePeriodSeconds; a second Ctrl-C kills at once",
          {0, 3600});
  if (int rc = ParseOrUsage(set, args); rc >= 0) return rc;
  // Before anything is loaded (the janitor is a fork of this process, small now): what the
  // ranks start is stopped even after a kill -9 of this process (common/group_janitor.h).
  if (Status janitor = StartGroupJanitor(std::chrono::seconds(grace_seconds)); !janitor.ok()) {
    spdlog::warn("{}: a kill -9 of ringtrain run would leave what its ranks start running",
                 janitor.message());
  }
  auto job = api::LoadManifestFile(manifest);
  if (!job.ok()) {
    std::fprintf(stderr, "error: %s\n", job.status().message().c_str());
    return 1;
  }
  if (Status local = executors::CheckRunsLocally(job->spec); !local.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", manifest.c_str(), local.message().c_str());
    return 1;
  }
  // The runner container of spec.template as local ranks get it: refused here, before any rank
  // starts, when it needs the cluster (a Secret, a ConfigMap).
  auto container = executors::LocalContainerForRun(job->spec);
  if (!container.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", manifest.c_str(), container.status().message().c_str());
    return 1;
  }
  for (const auto& note : container->notes) spdlog::warn("{}: {}", manifest, note);
  if (const std::string ignored = api::IgnoredMomentum(job->spec); !ignored.empty()) {
    spdlog::warn("{}: {}", manifest, ignored);
  }
  // The model is checked against the dataset before any rank starts (a layer list without an
  // input takes the dataset's).
  if (job->spec.command.empty()) {
    // The ranks read the dataset on this machine: a path that is not here is refused now.
    auto summary = executors::CheckModelLocally(
        &job->spec.train, container->working_dir.empty()
                              ? executors::DatasetLocation::kThisMachine
                              : executors::DatasetLocation::kThisMachineElsewhereDir);
    if (!summary.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", manifest.c_str(), summary.status().message().c_str());
      return 1;
    }
    // All the ranks on this machine together, before any starts: each rank's own check cannot
    // see the siblings that have not allocated yet (they start at once).
    if (Status fits = executors::CheckLocalGangMemory(job->spec); !fits.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", manifest.c_str(), fits.message().c_str());
      return 1;
    }
  }
  // Found here as the ranks will start it: a bare name on PATH, a path as it is (made absolute
  // below, so the ranks' own PATH and working directory do not matter).
  if (job->spec.command.empty()) {
    if (std::optional<std::string> found = LookPath(runner, ProcessSearchPath())) {
      runner = *found;
    } else {
      struct stat st {};
      const bool bare = runner.find('/') == std::string::npos;
      const char* why = bare                               ? "not found on PATH"
                        : ::stat(runner.c_str(), &st) != 0 ? "not found"
                        : !S_ISREG(st.st_mode)             ? "not a regular file"
                                                           : "not executable";
      std::fprintf(stderr, "error: runner binary %s: %s (set --runner or RINGTRAIN_RUNNER)\n",
                   runner.c_str(), why);
      return 1;
    }
  }
  // Where the summary goes is known writable before any rank starts, not after the job.
  if (!summary_path.empty()) {
    if (Status writable = CheckWritable(summary_path); !writable.ok()) {
      std::fprintf(stderr, "error: --summary-json %s\n", writable.message().c_str());
      return 1;
    }
  }
  if (workdir.empty()) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("ringtrain-" + job->metadata.name + "-XXXXXX"))
            .string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "error: cannot create a work directory under %s\n",
                   std::filesystem::temp_directory_path().c_str());
      return 1;
    }
    workdir = tmpl;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(workdir, ec);
    if (ec) {
      std::fprintf(stderr, "error: --workdir %s: %s\n", workdir.c_str(), ec.message().c_str());
      return 1;
    }
  }
  // Ranks may run in another directory (spec.template's workingDir): paths handed to them are
  // absolute.
  workdir = std::filesystem::absolute(workdir).string();
  // One run per work directory, held until this process ends.
  auto workdir_lock = executors::WorkDirLock::Acquire(workdir);
  if (!workdir_lock.ok()) {
    std::fprintf(stderr, "error: %s\n", workdir_lock.status().message().c_str());
    return 1;
  }
  if (!workdir_lock->unheld().empty()) spdlog::warn("{}", workdir_lock->unheld());
  // And the job's own checkpoint directory, which runs in other work directories may share.
  auto checkpoint_lock = executors::LockCheckpointDir(job->spec, workdir);
  if (!checkpoint_lock.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", manifest.c_str(),
                 checkpoint_lock.status().message().c_str());
    return 1;
  }
  if (!checkpoint_lock->unheld().empty()) spdlog::warn("{}", checkpoint_lock->unheld());
  if (runner.find('/') != std::string::npos) runner = std::filesystem::absolute(runner).string();
  spdlog::info("TrainingJob {}: {} replicas (world size {}), logs in {}", job->metadata.name,
               job->spec.replicas, job->spec.world_size(), workdir);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  // None interrupts the handler of another: the first signal's time is set before a second one
  // is looked at.
  sigemptyset(&sa.sa_mask);
  for (const int sig : kStopSignals) sigaddset(&sa.sa_mask, sig);
  for (const int sig : kStopSignals) {
    // A hang-up (or quit) this process was started to ignore stays ignored: `nohup ringtrain run`
    // outlives the terminal it was started from. Ctrl-C and SIGTERM always stop it, as before.
    struct sigaction was {};
    if ((sig == SIGHUP || sig == SIGQUIT) && sigaction(sig, nullptr, &was) == 0 &&
        was.sa_handler == SIG_IGN) {
      continue;
    }
    sigaction(sig, &sa, nullptr);
  }
  signal(SIGPIPE, SIG_IGN);

  executors::LocalRunOptions opts;
  opts.runner_path = runner;
  opts.workdir = workdir;
  opts.tty = ::isatty(STDOUT_FILENO) != 0;
  opts.grace = std::chrono::seconds(grace_seconds);
  opts.kill_now = &g_kill_now;
  // A checkpoint written since (by this run's rank 0) is one of this run's lineage: an older
  // one may be of a model this run could not resume from.
  const auto run_started = std::filesystem::file_time_type::clock::now();
  auto result = executors::RunLocal(*job, opts, &g_interrupted);
  if (!result.ok()) {
    std::fprintf(stderr, "error: %s\n", result.status().ToString().c_str());
    return 1;
  }
  const auto& st = result->status;
  nlohmann::json summary = nlohmann::json::object();
  if (!result->result_json.empty()) {
    auto r = nlohmann::json::parse(result->result_json, nullptr, false);
    if (r.is_object()) summary = r;
  }
  // A job that ended without rank 0's result (failed, interrupted): how far it got is the last
  // progress seen in rank 0's /status, said as such (from_last_progress), not left out.
  if (!summary.contains("steps") && st.progress) {
    const api::Progress& p = *st.progress;
    summary["steps"] = p.step;
    summary["epochs"] = p.epoch;
    summary["samples_per_second"] = p.samples_per_second;
    if (p.test_accuracy >= 0) summary["test_accuracy"] = p.test_accuracy;
    if (p.test_mse >= 0) summary["test_mse"] = p.test_mse;
    summary["from_last_progress"] = true;
  }
  summary["job"] = job->metadata.name;
  summary["phase"] = result->interrupted ? "Interrupted" : st.phase;
  if (result->interrupted) {
    const int sig = g_first_signal.load() > 0 ? g_first_signal.load() : SIGINT;
    summary["reason"] = "Interrupted";
    const char* name = sig == SIGINT    ? "SIGINT"
                       : sig == SIGTERM ? "SIGTERM"
                       : sig == SIGHUP  ? "SIGHUP"
                                        : "SIGQUIT";
    summary["message"] = std::string("ringtrain run got ") + name + " and stopped the ranks";
  }
  summary["restarts"] = st.restarts;
  summary["in_place_recoveries"] = st.in_place_recoveries;
  const api::RecoveryAccount& account = st.recovery;
  summary["recovery"] = {{"in_place", account.in_place},
                         {"gang_restarts", account.gang_restarts},
                         {"from_checkpoint", account.from_checkpoint},
                         {"steps_lost", account.steps_lost},
                         {"seconds_without_training", account.seconds_without_training}};
  summary["attempts"] = st.attempt + 1;
  summary["world_size"] = job->spec.world_size();
  summary["wall_seconds"] = result->wall_seconds;
  summary["workdir"] = workdir;
  // Why the job ended, as its condition says it (DeadlineExceeded, BackoffLimitExceeded, ...).
  for (const auto& c : st.conditions) {
    if (c.type == st.phase && c.status == "True" && !result->interrupted) {
      summary["reason"] = c.reason;
      summary["message"] = c.message;
    }
  }
  // The newest checkpoint, and for a job that did not succeed, how to resume from it: the work
  // directory holds it (unless spec.checkpoint.path does), and a run without --workdir gets a
  // new one.
  std::string resume_command;
  if (!result->checkpoint_path.empty()) {
    summary["checkpoint_step"] = result->checkpoint_step;
    summary["checkpoint_path"] = result->checkpoint_path;
    // Without rank 0's result, a checkpoint newer than the last progress seen (an interrupt
    // within a /status read's second of the last one, or before any) is how far the job got:
    // its header's step and epoch, not "steps": 0 beside "checkpoint_step": 256 (review).
    const std::int64_t seen = summary.contains("steps") && summary["steps"].is_number_integer()
                                  ? summary["steps"].get<std::int64_t>()
                                  : -1;
    if ((!summary.contains("steps") || summary.contains("from_last_progress")) &&
        result->checkpoint_step > seen) {
      std::error_code ec;
      const auto written = std::filesystem::last_write_time(result->checkpoint_path, ec);
      auto at = ec || written < run_started
                    ? StatusOr<train::CheckpointPosition>(FailedPrecondition("written before"))
                    : train::ReadCheckpointHeader(result->checkpoint_path);
      if (at.ok() && at->global_step == result->checkpoint_step) {
        summary["steps"] = at->global_step;
        summary["epochs"] = at->epoch;
        summary["from_checkpoint"] = true;
        // A rate of 0 is the last read's "not known yet", not a measurement.
        if (summary.contains("samples_per_second") && summary["samples_per_second"] == 0.0) {
          summary.erase("samples_per_second");
        }
      }
    }
    if (result->interrupted || st.phase != "Succeeded") {
      resume_command = "ringtrain run " + ShellQuote(manifest);
      if (job->spec.checkpoint.path.empty()) resume_command += " --workdir " + ShellQuote(workdir);
      summary["resume_command"] = resume_command;
    }
  }
  // Rank 0's result says whether it resumed; without it (interrupted), what the run announced.
  if (!summary.contains("resumed") && result->resumed_from > 0) {
    summary["resumed"] = true;
    if (summary.contains("steps") && summary["steps"].is_number_integer()) {
      summary["steps_this_run"] =
          std::max<std::int64_t>(0, summary["steps"].get<std::int64_t>() - result->resumed_from);
    }
  }
  // The job failed on that very checkpoint: the resume command would fail the same way.
  const bool of_another_model =
      st.last_failure &&
      st.last_failure->message.find(contract::kCheckpointOfAnotherModel) != std::string::npos;
  if (of_another_model) summary.erase("resume_command");
  if (st.last_failure) {
    summary["last_failure"] = {{"rank", st.last_failure->rank},
                               {"exit_code", st.last_failure->exit_code},
                               {"reason", st.last_failure->reason},
                               {"message", st.last_failure->message}};
  }
  // Replacements ordered (status.inPlaceRecoveries) and recoveries completed (rank 0's account)
  // differ when a replacement's gang restarted before it rejoined: said side by side then, not
  // as one "in-place recoveries" here and another count on the next line.
  const std::string in_place = account.in_place == st.in_place_recoveries
                                   ? std::to_string(st.in_place_recoveries)
                                   : std::to_string(st.in_place_recoveries) + " ordered, " +
                                         std::to_string(account.in_place) + " completed";
  std::printf("TrainingJob %s %s in %.1fs: world size %d, restarts %d, in-place recoveries %s\n",
              job->metadata.name.c_str(), summary["phase"].get<std::string>().c_str(),
              result->wall_seconds, job->spec.world_size(), st.restarts, in_place.c_str());
  if (account.in_place + account.gang_restarts > 0) {
    std::printf(
        "  recoveries: %d in place, %d gang restart(s) (%d from a checkpoint): %lld step(s) lost, "
        "%.1fs without training\n",
        account.in_place, account.gang_restarts, account.from_checkpoint,
        static_cast<long long>(account.steps_lost), account.seconds_without_training);
  }
  // A value the summary holds as null is one JSON cannot write (a NaN loss): "nan", not 0.
  auto number = [&summary](const char* key) {
    auto it = summary.find(key);
    if (it == summary.end()) return 0.0;
    return it->is_number() ? it->get<double>() : std::numeric_limits<double>::quiet_NaN();
  };
  if (summary.contains("from_last_progress") || summary.contains("from_checkpoint")) {
    // No final result: how far the job got as its progress last said it (no test loss there),
    // or its newest checkpoint, when that is newer.
    std::string line =
        std::string(summary.contains("from_checkpoint") ? "  trained to step "
                                                        : "  last progress seen: step ") +
        std::to_string(summary["steps"].get<long long>());
    if (summary.contains("from_checkpoint")) line += " (its newest checkpoint)";
    if (summary.contains("test_accuracy")) {
      char acc[64];
      std::snprintf(acc, sizeof(acc), ", test accuracy %.4f", number("test_accuracy"));
      line += acc;
    } else if (summary.contains("test_mse")) {
      char mse[64];
      std::snprintf(mse, sizeof(mse), ", test MSE %.4f", number("test_mse"));
      line += mse;
    }
    std::printf("%s\n", line.c_str());
  } else if (summary.contains("test_accuracy")) {
    std::printf("  test accuracy %.4f, test loss %.4f, %.0f steps, %.0f samples/s\n",
                number("test_accuracy"), number("test_loss"), number("steps"),
                number("samples_per_second"));
  } else if (summary.contains("test_mse")) {  // a regression
    std::printf("  test MSE %.4f, %.0f steps, %.0f samples/s\n", number("test_mse"),
                number("steps"), number("samples_per_second"));
  }
  // Rank 0 found checkpoints but could resume from none: the job trained from step 0.
  if (summary.contains("resume_warning")) {
    std::printf("  warning: no checkpoint could be resumed: %s\n",
                summary["resume_warning"].get<std::string>().c_str());
  }
  if (st.last_failure && st.phase == "Failed") {
    const std::string& message = st.last_failure->message;
    std::printf("  last failure: rank %d exit code %d (%s)", st.last_failure->rank,
                st.last_failure->exit_code, st.last_failure->reason.c_str());
    if (message.empty()) {
      std::printf("\n");
    } else if (message.find('\n') == std::string::npos) {
      std::printf(": %s\n", message.c_str());
    } else {
      // Several lines (the end of the rank's log): each on its own, indented under the line.
      std::printf(":\n");
      std::size_t start = 0;
      while (start <= message.size()) {
        std::size_t end = message.find('\n', start);
        if (end == std::string::npos) end = message.size();
        std::printf("    %s\n", message.substr(start, end - start).c_str());
        start = end + 1;
      }
    }
  }
  if (!resume_command.empty() && !of_another_model) {
    std::printf("  newest checkpoint: step %lld, %s\n  to resume from it: %s\n",
                static_cast<long long>(result->checkpoint_step), result->checkpoint_path.c_str(),
                resume_command.c_str());
  } else if (!resume_command.empty()) {
    std::printf(
        "  newest checkpoint: step %lld, %s: of another model (the failure above), so this job "
        "cannot resume from it: move it away to train from step 0, or run the manifest it was "
        "written for\n",
        static_cast<long long>(result->checkpoint_step), result->checkpoint_path.c_str());
  }
  if (!summary_path.empty()) {
    std::ofstream out(summary_path, std::ios::trunc);
    if (out) out << summary.dump(2) << "\n";
    if (out) out.close();  // a full disk (or /dev/full) fails here, not at the open
    if (!out) {
      const int err = errno;
      std::fprintf(stderr, "error: cannot write %s: %s\n", summary_path.c_str(),
                   err != 0 ? std::strerror(err) : "the write failed");
      return 1;
    }
  }
  if (result->interrupted)
    return 128 + (g_first_signal.load() > 0 ? g_first_signal.load() : SIGINT);
  return st.phase == "Succeeded" ? 0 : 1;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  std::string cmd = args[0];
  args.erase(args.begin());
  if (cmd != "controller") InitLogging("ringtrain");  // the operator sets up its own
  if (cmd == "run") return Run(args);
  if (cmd == "validate") return Validate(args);
  if (cmd == "controller") return op::RunControllerCommand(args);
  std::fprintf(stderr, "error: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}

}  // namespace
}  // namespace ringtrain

int main(int argc, char** argv) { return ringtrain::Main(argc, argv); }
