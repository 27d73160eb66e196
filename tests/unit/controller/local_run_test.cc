// `ringtrain run`'s executor with real processes (sh -c as spec.command): a replica whose
// process cannot be started at all (fork fails, its log cannot be opened) is a failed replica
// with reason StartError that the planner judges like any other, never the end of the run:
// the ranks already running get SIGTERM and their grace, and the run ends with its summary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/process.h"
#include "controller/api/training_job.h"
#include "controller/executors/local/local_executor.h"

namespace ringtrain::executors {
namespace {

namespace fs = std::filesystem;

class LocalRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ringtrain-local-run-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/work");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Two replicas of sh: rank 0 of attempt 0 says it is ready and waits, writing its attempt to
  // `terms` when it gets SIGTERM; any other process exits 0 at once.
  api::TrainingJob Job(int backoff_limit) const {
    const std::string script =
        "[ $RINGTRAIN_ATTEMPT = 0 ] && [ $RINGTRAIN_RANK = 0 ] || exit 0; "
        "trap 'echo $RINGTRAIN_ATTEMPT >> " +
        dir_ + "/terms; exit 143' TERM; touch " + dir_ + "/ready; while :; do sleep 0.05; done";
    const std::string yaml =
        "apiVersion: ringtrain.dev/v1alpha1\n"
        "kind: TrainingJob\n"
        "metadata: {name: spawn}\n"
        "spec:\n"
        "  replicas: 2\n"
        "  command: [\"sh\", \"-c\", \"" +
        script +
        "\"]\n"
        "  runPolicy: {backoffLimit: " +
        std::to_string(backoff_limit) + "}\n";
    auto job = api::ParseManifestYaml(yaml, "spawn.yaml");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : api::TrainingJob{};
  }

  // Spawns every process as ChildProcess::Spawn does, except rank 1 of attempt 0: once rank 0
  // runs (its trap set), that one fails with `error`, as a fork or an open of the log would.
  LocalRunOptions Options(Status error) const {
    LocalRunOptions options;
    options.workdir = dir_ + "/work";
    options.grace = std::chrono::seconds(60);
    options.poll = std::chrono::milliseconds(20);
    options.spawn = [dir = dir_, error](const std::vector<std::string>& argv,
                                        const std::map<std::string, std::string>& env,
                                        const SpawnOptions& spawn) -> StatusOr<ChildProcess> {
      if (env.at("RINGTRAIN_ATTEMPT") == "0" && env.at("RINGTRAIN_RANK") == "1") {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!fs::exists(dir + "/ready") && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return error;
      }
      return ChildProcess::Spawn(argv, env, spawn);
    };
    return options;
  }

  std::string Terms() const {
    std::ifstream in(dir_ + "/terms");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::string dir_;
};

// A start error no retry fixes (the work directory is gone): the job fails with that replica's
// StartError, after rank 0 got SIGTERM (not a SIGKILL outright: its trap ran).
TEST_F(LocalRunTest, ASpawnErrorIsAReplicaThatFailedToStartNotTheEndOfTheRun) {
  const api::TrainingJob job = Job(/*backoff_limit=*/3);
  const LocalRunOptions options = Options(
      ErrnoStatus(StatusCode::kUnavailable, "open " + dir_ + "/gone/spawn-a0-1.log", ENOENT));
  std::atomic<bool> interrupted{false};
  auto result = RunLocal(job, options, &interrupted);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->status.phase, "Failed");
  EXPECT_EQ(result->status.restarts, 0);  // "No such file or directory": permanent
  ASSERT_TRUE(result->status.last_failure.has_value());
  EXPECT_EQ(result->status.last_failure->rank, 1);
  EXPECT_EQ(result->status.last_failure->reason, "StartError");
  EXPECT_NE(result->status.last_failure->message.find("/gone/spawn-a0-1.log"), std::string::npos)
      << result->status.last_failure->message;
  EXPECT_EQ(Terms(), "0\n");  // rank 0 got SIGTERM and ran its trap
}

// A start error the node may get over (fork: EAGAIN under ulimit -u): retried as the planner
// retries any retryable failure, by a gang restart, and the job succeeds.
TEST_F(LocalRunTest, ARetryableSpawnErrorRestartsTheGang) {
  const api::TrainingJob job = Job(/*backoff_limit=*/3);
  const LocalRunOptions options = Options(ErrnoStatus(StatusCode::kUnavailable, "fork", EAGAIN));
  std::atomic<bool> interrupted{false};
  auto result = RunLocal(job, options, &interrupted);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->status.phase, "Succeeded");
  EXPECT_EQ(result->status.restarts, 1);
  EXPECT_EQ(Terms(), "0\n");
}

// A gang restart after a failure gives the built-in runner's ranks other than 0 a grace of
// kNoWorkLeftGrace, not the run's: rank 1, which ignores SIGTERM (as a hung rank cannot answer
// it), is SIGKILLed after it and the next attempt starts. With the run's 10 minutes the test
// would wait that long: a watchdog interrupts it after 2 minutes, which fails it.
TEST_F(LocalRunTest, AGangRestartAfterAFailureKillsARankThatIgnoresSigtermWithoutItsGrace) {
  const std::string runner = dir_ + "/runner.sh";
  {
    std::ofstream out(runner);
    out << "#!/bin/sh\n"
           "if [ \"$RINGTRAIN_ATTEMPT\" = 0 ]; then\n"
           "  if [ \"$RINGTRAIN_RANK\" = 1 ]; then\n"
           "    trap '' TERM; touch "
        << dir_
        << "/ready; while :; do sleep 0.05; done\n"
           "  fi\n"
           "  while [ ! -e "
        << dir_
        << "/ready ]; do sleep 0.01; done; exit 138\n"
           "fi\n"
           "exit 0\n";
  }
  fs::permissions(runner, fs::perms::owner_all);
  auto job = api::ParseManifestYaml(
      "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: hung}\n"
      "spec:\n  replicas: 2\n  train: {model: mlp, dataset: /nonexistent}\n"
      "  runPolicy: {backoffLimit: 3, recovery: GangRestart}\n",
      "hung.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  LocalRunOptions options;
  options.runner_path = runner;
  options.workdir = dir_ + "/work";
  options.grace = std::chrono::minutes(10);
  options.poll = std::chrono::milliseconds(20);
  std::atomic<bool> interrupted{false}, kill_now{false}, done{false};
  options.kill_now = &kill_now;
  std::thread watchdog([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (!done && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    interrupted = kill_now = !done;
  });
  auto result = RunLocal(*job, options, &interrupted);
  done = true;
  watchdog.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(result->interrupted) << "rank 1 was given the run's whole grace";
  EXPECT_EQ(result->status.phase, "Succeeded");
  EXPECT_EQ(result->status.attempt, 1);
  EXPECT_EQ(result->status.restarts, 1);
}

// A program that puts a FIFO where its termination log goes (its own mkfifo) must not stop the
// supervision: the log was opened for reading, blocking until a writer came, and the job stayed
// Pending after the rank exited. Now only a regular file is read, and the rank's message falls
// back to its output, as the kubelet's does. A watchdog writes to the FIFO after 60 s, so that
// without the fix the test fails instead of hanging.
TEST_F(LocalRunTest, AFifoInPlaceOfTheTerminationLogDoesNotStopTheRun) {
  auto job = api::ParseManifestYaml(
      "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: fifo}\n"
      "spec:\n  replicas: 1\n"
      "  command: [sh, -c, 'rm -f \"$RINGTRAIN_TERMINATION_LOG\"; "
      "mkfifo \"$RINGTRAIN_TERMINATION_LOG\" && echo \"$RINGTRAIN_TERMINATION_LOG\" > " +
          dir_ +
          "/fifo; echo its last words; exit 3']\n"
          "  runPolicy: {backoffLimit: 0}\n",
      "fifo.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  LocalRunOptions options;
  options.workdir = dir_ + "/work";
  options.poll = std::chrono::milliseconds(20);
  std::atomic<bool> interrupted{false}, done{false}, unblocked{false};
  std::thread watchdog([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (done) return;
    std::ifstream in(dir_ + "/fifo");
    std::string fifo;
    std::getline(in, fifo);
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) {
      unblocked = true;
      ::close(fd);
    }
  });
  auto result = RunLocal(*job, options, &interrupted);
  done = true;
  watchdog.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(unblocked) << "the run waited on the FIFO until the watchdog opened it";
  EXPECT_EQ(result->status.phase, "Failed");
  ASSERT_TRUE(result->status.last_failure.has_value());
  EXPECT_NE(result->status.last_failure->message.find("its last words"), std::string::npos)
      << result->status.last_failure->message;
}

// Ranks that finish when the interrupt comes (every one exits 0: a run whose last steps were
// training as Ctrl-C came) make a job that Succeeded, not one interrupted (review: reported
// Interrupted, with a resume command and exit code 130). Here each rank answers SIGTERM by
// exiting 0.
TEST_F(LocalRunTest, RanksThatAllSucceedAfterAnInterruptMakeASucceededJob) {
  auto job = api::ParseManifestYaml(
      "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: done}\n"
      "spec:\n  replicas: 2\n"
      "  command: [sh, -c, 'trap \"exit 0\" TERM; touch " +
          dir_ + "/ready-$RINGTRAIN_RANK; while :; do sleep 0.05; done']\n",
      "done.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  LocalRunOptions options;
  options.workdir = dir_ + "/work";
  options.poll = std::chrono::milliseconds(20);
  std::atomic<bool> interrupted{false}, done{false};
  std::thread interrupter([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done && std::chrono::steady_clock::now() < give_up &&
           !(fs::exists(dir_ + "/ready-0") && fs::exists(dir_ + "/ready-1"))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    interrupted = true;
  });
  auto result = RunLocal(*job, options, &interrupted);
  done = true;
  interrupter.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(result->interrupted);
  EXPECT_EQ(result->status.phase, "Succeeded");
}

// A directory where rank 0 writes its result (left by anything) is moved aside at start, not left
// to fail rank 0's rename after all the training (review: the job used up its restarts on it).
TEST_F(LocalRunTest, ADirectoryWhereTheResultGoesIsMovedAside) {
  const std::string result = dir_ + "/work/result-aside-attempt-0.json";
  fs::create_directories(result + "/x");
  auto job = api::ParseManifestYaml(
      "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: aside}\n"
      "spec:\n  replicas: 1\n  command: [\"true\"]\n",
      "aside.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  LocalRunOptions options;
  options.workdir = dir_ + "/work";
  options.poll = std::chrono::milliseconds(20);
  std::atomic<bool> interrupted{false};
  auto run = RunLocal(*job, options, &interrupted);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->status.phase, "Succeeded");
  EXPECT_FALSE(fs::exists(result));
  EXPECT_TRUE(fs::exists(result + ".moved-aside/x"));
}

// The template's RINGTRAIN_RECOVERY_TIMEOUT_SECONDS reached the runners of a GangRestart job under
// `ringtrain run` (the operator's pods get 0 in its place): a survivor waited for a replacement
// that a gang restart never starts. Each rank now gets what a pod of the job would: the
// template's wait where ranks recover in place, 0 where they do not.
TEST_F(LocalRunTest, ARankGetsTheRecoveryWaitItsPodWouldGet) {
  const std::string runner = dir_ + "/runner.sh";
  {
    std::ofstream out(runner);
    out << "#!/bin/sh\necho \"${RINGTRAIN_RECOVERY_TIMEOUT_SECONDS-unset}\" > " << dir_
        << "/wait-$RINGTRAIN_RANK\n";
  }
  fs::permissions(runner, fs::perms::owner_all);
  int runs = 0;
  const auto waits_with = [&](const std::string& recovery, bool in_template = true) {
    fs::remove(dir_ + "/wait-1");
    auto job = api::ParseManifestYaml(
        "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: wait}\n"
        "spec:\n  replicas: 2\n  train: {model: mlp, dataset: /nonexistent}\n"
        "  runPolicy: {recovery: " +
            recovery + "}\n" +
            (in_template ? "  template:\n    spec:\n      containers:\n      - name: runner\n"
                           "        env:\n"
                           "        - {name: RINGTRAIN_RECOVERY_TIMEOUT_SECONDS, value: \"60\"}\n"
                         : ""),
        "wait.yaml");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    LocalRunOptions options;
    options.runner_path = runner;
    options.workdir = dir_ + "/work-" + recovery + "-" + std::to_string(++runs);
    fs::create_directories(options.workdir);
    options.poll = std::chrono::milliseconds(20);
    std::atomic<bool> interrupted{false};
    auto result = RunLocal(*job, options, &interrupted);
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    std::ifstream in(dir_ + "/wait-1");
    std::string wait;
    std::getline(in, wait);
    return wait;
  };
  EXPECT_EQ(waits_with("InPlace"), "60");
  EXPECT_EQ(waits_with("GangRestart"), "0");
  // Nor does a wait this host exports reach them (the ranks start from the host's env).
  ASSERT_EQ(::setenv("RINGTRAIN_RECOVERY_TIMEOUT_SECONDS", "45", 1), 0);
  const std::string from_host = waits_with("GangRestart", /*in_template=*/false);
  ::unsetenv("RINGTRAIN_RECOVERY_TIMEOUT_SECONDS");
  EXPECT_EQ(from_host, "0");
}

// A rank the kernel OOM-killed read "Killed" (as a kill -9 from anyone): `ringtrain run` said
// nothing of memory where a cluster says OOMKilled. The cgroup's oom_kill counter went up with
// the SIGKILL: OOMKilled. A SIGKILL without it stays Killed. Found by a reviewing helper.
class OomKillTest : public LocalRunTest {
 protected:
  // Rank 1 of attempt 0 bumps the fake counter when `bump`, then SIGKILLs itself; the rest exit
  // 0, so the restarted gang succeeds.
  api::TrainingJob KilledJob(bool bump) const {
    const std::string script =
        "[ $RINGTRAIN_ATTEMPT = 0 ] && [ $RINGTRAIN_RANK = 1 ] || exit 0; " +
        std::string(bump ? "echo 1 > " + dir_ + "/oom; " : "") +
        "kill -9 $$$$";  // $$ escapes one $ in a command, as Kubernetes reads it
    auto job = api::ParseManifestYaml(
        "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: oom}\n"
        "spec:\n  replicas: 2\n  command: [\"sh\", \"-c\", \"" +
            script + "\"]\n  runPolicy: {backoffLimit: 3}\n",
        "oom.yaml");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : api::TrainingJob{};
  }
  LocalRunOptions CountingOptions() const {
    LocalRunOptions options;
    options.workdir = dir_ + "/work";
    options.poll = std::chrono::milliseconds(20);
    options.oom_kills = [dir = dir_]() -> std::optional<std::uint64_t> {
      std::ifstream in(dir + "/oom");
      std::uint64_t n = 0;
      in >> n;
      return n;
    };
    return options;
  }
};

TEST_F(OomKillTest, ARankTheKernelOomKilledReadsOomKilled) {
  std::atomic<bool> interrupted{false};
  auto result = RunLocal(KilledJob(/*bump=*/true), CountingOptions(), &interrupted);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->status.phase, "Succeeded");
  EXPECT_EQ(result->status.restarts, 1);
  ASSERT_TRUE(result->status.last_failure.has_value());
  EXPECT_EQ(result->status.last_failure->rank, 1);
  EXPECT_EQ(result->status.last_failure->reason, "OOMKilled");
}

TEST_F(OomKillTest, ASigkillWithoutAnOomKillReadsKilled) {
  std::atomic<bool> interrupted{false};
  auto result = RunLocal(KilledJob(/*bump=*/false), CountingOptions(), &interrupted);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_TRUE(result->status.last_failure.has_value());
  EXPECT_EQ(result->status.last_failure->reason, "Killed");
}

// Two `ringtrain run`s in one work directory: the second is refused at once, naming the
// directory and who holds it; the lock goes with its holder (a flock, not a pid file).
TEST_F(LocalRunTest, ASecondRunInALockedWorkDirIsRefused) {
  const std::string work = dir_ + "/work";
  auto first = WorkDirLock::Acquire(work);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = WorkDirLock::Acquire(work);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string& message = second.status().message();
  EXPECT_NE(message.find("work directory " + work + " is in use by another `ringtrain run` (pid " +
                         std::to_string(::getpid()) + ")"),
            std::string::npos)
      << message;
  { const WorkDirLock released = std::move(*first); }
  EXPECT_TRUE(WorkDirLock::Acquire(work).ok()) << "the lock outlived its holder";
}

// The lock file is never opened through a link (review: a link planted there got the pid written
// into its target): the run is refused, naming the lock, and the target is untouched.
TEST_F(LocalRunTest, ALinkInPlaceOfTheLockIsRefusedNotWrittenThrough) {
  const std::string work = dir_ + "/work";
  const std::string victim = dir_ + "/victim.txt";
  { std::ofstream(victim) << "precious"; }
  fs::create_symlink(victim, work + "/" + WorkDirLock::kFileName);
  auto lock = WorkDirLock::Acquire(work);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(lock.status().message().find("work directory lock " + work + "/"), std::string::npos)
      << lock.status().message();
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "precious");
}

// A checkpoint directory the job names itself is held for the run's life too: two runs of the
// job in their own work directories resumed from and removed each other's checkpoints (review).
// A path inside the work directory is the work directory's lock's; a program of the user's own
// has nothing of ours to guard.
TEST_F(LocalRunTest, TheJobsOwnCheckpointDirIsHeldByOneRunAtATime) {
  api::JobSpec spec;
  spec.checkpoint.path = dir_ + "/shared-ckpt";
  auto first = LockCheckpointDir(spec, dir_ + "/work");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(fs::exists(spec.checkpoint.path + "/" + WorkDirLock::kFileName));
  auto second = LockCheckpointDir(spec, dir_ + "/other-work");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("spec.checkpoint.path " + spec.checkpoint.path +
                                           " is in use by another `ringtrain run` (pid " +
                                           std::to_string(::getpid()) + "): two runs there"),
            std::string::npos)
      << second.status().message();
  { const WorkDirLock released = std::move(*first); }
  EXPECT_TRUE(LockCheckpointDir(spec, dir_ + "/other-work").ok());
  // Inside the work directory: not locked again (the process would refuse itself).
  api::JobSpec inside;
  inside.checkpoint.path = dir_ + "/work/ckpt";
  auto work = WorkDirLock::Acquire(dir_ + "/work");
  ASSERT_TRUE(work.ok());
  EXPECT_TRUE(LockCheckpointDir(inside, dir_ + "/work").ok());
  EXPECT_FALSE(fs::exists(inside.checkpoint.path + "/" + WorkDirLock::kFileName));
}

// A work directory on a file system without locks (NFS without its lock daemon answers flock
// with ENOLCK) runs, unlocked, saying so; it was refused, so no run could use such a directory.
TEST_F(LocalRunTest, AWorkDirThatCannotBeLockedRunsUnlockedSayingSo) {
  const std::string work = dir_ + "/work";
  for (const int err : {ENOLCK, EOPNOTSUPP}) {
    static int fail_with;
    fail_with = err;
    auto lock = WorkDirLock::Acquire(work, [](int, int) {
      errno = fail_with;
      return -1;
    });
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
    EXPECT_NE(
        lock->unheld().find("work directory " + work + " cannot be locked (" + std::strerror(err) +
                            "): another `ringtrain run` there would not be noticed"),
        std::string::npos)
        << lock->unheld();
  }
  auto other = WorkDirLock::Acquire(work, [](int, int) {
    errno = EBADF;
    return -1;
  });
  EXPECT_FALSE(other.ok()) << "any other error still refuses";
  auto held = WorkDirLock::Acquire(work);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->unheld(), "");
}

// The checkpoint a rerun resumes from: the highest step of the runner's ckpt-<step>.bin files;
// temporary, corrupt and foreign files are none.
TEST_F(LocalRunTest, TheNewestCheckpointIsTheHighestStep) {
  const std::string ckpt = dir_ + "/ckpt";
  EXPECT_FALSE(NewestCheckpointFile(ckpt).has_value());  // no such dir
  fs::create_directories(ckpt);
  EXPECT_FALSE(NewestCheckpointFile(ckpt).has_value());
  for (const char* name : {"ckpt-90.bin", "ckpt-400.bin", "ckpt-1000.bin.tmp",
                           "ckpt-2000.bin.corrupt", "ckpt-x.bin", "ckpt-.bin", "notes.txt"}) {
    std::ofstream(ckpt + "/" + name) << "x";
  }
  const auto newest = NewestCheckpointFile(ckpt);
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->first, 400);
  EXPECT_EQ(newest->second, ckpt + "/ckpt-400.bin");
}

}  // namespace
}  // namespace ringtrain::executors
