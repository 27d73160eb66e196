// ChildProcess, the one supervisor of `ringtrain run`, the runner's local launcher and the test
// kubelet: the exit code the gang logic sees (a signal n reads 128 + n, a program not found 127,
// one that cannot run 126), the program found on the child's PATH and run in its working dir,
// termination that escalates to SIGKILL, and no child left running or unreaped. The waits are
// bounded far above what a healthy run needs, so a broken escalation fails by its status
// (DeadlineExceeded) rather than by a clock assertion.
#include "common/process.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/stop.h"

namespace ringtrain {
namespace {

using namespace std::chrono_literals;

constexpr Duration kBound = std::chrono::seconds(60);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// True when the pid is neither running nor a zombie of ours: waitpid has nothing to reap and
// no process answers to it.
bool Gone(pid_t pid) {
  errno = 0;
  const bool unreapable = ::waitpid(pid, nullptr, WNOHANG) < 0 && errno == ECHILD;
  errno = 0;
  const bool no_process = ::kill(pid, 0) < 0 && errno == ESRCH;
  return unreapable && no_process;
}

// True once `pid` (not our child: a grandchild, reaped by whoever adopted it) has ended: no
// such process, or one that is only a zombie waiting for its new parent.
bool Ended(pid_t pid) {
  errno = 0;
  if (::kill(pid, 0) < 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren == std::string::npos || line.compare(paren + 1, 3, " Z ") == 0;
}

// Polls Ended for far longer than a signal needs to land (a bound, not a timing assertion).
bool EndsSoon(pid_t pid) {
  for (int i = 0; i < 6000; ++i) {
    if (Ended(pid)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ResetStopForTest();
    char dir[] = "/tmp/process_test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (stopper_.joinable()) stopper_.join();
    ResetStopForTest();
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }

  ChildProcess Shell(const std::string& script, std::map<std::string, std::string> env = {}) {
    SpawnOptions options;
    options.log_path = Log();
    auto child = ChildProcess::Spawn({"/bin/sh", "-c", script}, env, options);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    return child.ok() ? std::move(*child) : ChildProcess();
  }
  // A shell in a process group of its own, as `ringtrain run` starts a rank.
  ChildProcess GroupShell(const std::string& script) {
    SpawnOptions options;
    options.log_path = Log();
    options.new_process_group = true;
    auto child = ChildProcess::Spawn({"/bin/sh", "-c", script}, {}, options);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    return child.ok() ? std::move(*child) : ChildProcess();
  }
  // The pid the child wrote to `name` under dir_ once it logged "ready"; -1 if it never did.
  pid_t ReadyPid(const std::string& name) const {
    if (!Logged("ready")) return -1;
    return static_cast<pid_t>(std::atoi(ReadFile(dir_ + "/" + name).c_str()));
  }
  std::string Log() const { return dir_ + "/child.log"; }
  // Writes `text` to `path` (making its folder) with `mode`.
  static void WriteScript(const std::string& path, const std::string& text, mode_t mode) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
  }
  // Waits until the child has logged `line` (it has set up what the test relies on).
  bool Logged(const std::string& line) const {
    for (int i = 0; i < 6000; ++i) {
      if (ReadFile(Log()).find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  std::string dir_;
  std::thread stopper_;
};

TEST_F(ProcessTest, ExitCodeOfANormalExit) {
  ChildProcess child = Shell("exit 3");
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_TRUE(child.exited());
  EXPECT_FALSE(child.running());
  EXPECT_EQ(child.exit_code(), 3);
  EXPECT_EQ(child.term_signal(), 0);
}

TEST_F(ProcessTest, ExitCodeZero) {
  ChildProcess child = Shell("exit 0");
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_EQ(child.exit_code(), 0);
}

TEST_F(ProcessTest, DeathBySignalReads128PlusTheSignal) {
  ChildProcess child = Shell("exec sleep 60");
  ASSERT_TRUE(child.Signal(SIGUSR1));
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_EQ(child.exit_code(), 128 + SIGUSR1);
  EXPECT_EQ(child.term_signal(), SIGUSR1);
}

TEST_F(ProcessTest, ExitCodeFromWaitStatus) {
  EXPECT_EQ(ExitCodeFromWaitStatus(0), 0);
  EXPECT_EQ(ExitCodeFromWaitStatus(42 << 8), 42);
  EXPECT_EQ(ExitCodeFromWaitStatus(SIGKILL), 137);
  EXPECT_EQ(ExitCodeFromWaitStatus(SIGTERM), 143);
}

TEST_F(ProcessTest, AMissingPathExits127AndSaysWhy) {
  SpawnOptions options;
  options.log_path = Log();
  auto child = ChildProcess::Spawn({dir_ + "/no-such-binary"}, {}, options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  // Spawn learns of the failed exec before it returns: the child has already ended.
  EXPECT_TRUE(child->exited());
  EXPECT_EQ(child->exit_code(), kExitNotFound);
  const std::string want = "exec \"" + dir_ + "/no-such-binary\": No such file or directory";
  EXPECT_EQ(child->start_error(), want);
  EXPECT_EQ(ReadFile(Log()), want + "\n");
}

// A name without a slash is searched on the PATH of the child's environment, as execvp(3) and
// a container runtime search it, not on the parent's.
TEST_F(ProcessTest, ANameIsSearchedOnTheChildsPath) {
  WriteScript(dir_ + "/empty", "", 0755);  // not a directory: skipped
  WriteScript(dir_ + "/bin/hello", "#!/bin/sh\necho \"hello $1\"\nexit 4\n", 0755);
  SpawnOptions options;
  options.log_path = Log();
  auto child = ChildProcess::Spawn(
      {"hello", "world"}, {{"PATH", dir_ + "/empty:/nonexistent:" + dir_ + "/bin"}}, options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ(child->start_error(), "");
  ASSERT_TRUE(child->Wait(kBound).ok());
  EXPECT_EQ(child->exit_code(), 4);
  EXPECT_EQ(ReadFile(Log()), "hello world\n");
}

TEST_F(ProcessTest, WithoutPathTheDefaultSearchPathFindsSh) {
  SpawnOptions options;
  options.log_path = Log();
  auto child = ChildProcess::Spawn({"sh", "-c", "exit 5"}, {}, options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  ASSERT_TRUE(child->Wait(kBound).ok());
  EXPECT_EQ(child->exit_code(), 5);
}

TEST_F(ProcessTest, ANameNotOnPathExits127NamingItAndThePath) {
  SpawnOptions options;
  options.log_path = Log();
  const std::string path = dir_ + ":" + dir_ + "/bin";
  auto child = ChildProcess::Spawn({"sh", "-c", "true"}, {{"PATH", path}}, options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_TRUE(child->exited());
  EXPECT_EQ(child->exit_code(), kExitNotFound);
  EXPECT_EQ(child->start_error(), "exec \"sh\": not found on PATH (" + path + ")");
  EXPECT_NE(ReadFile(Log()).find(child->start_error()), std::string::npos);
}

// A file found on PATH but not executable is passed over for a later one; when none is
// executable the error is EACCES (126), not "not found" (execvp's rule).
TEST_F(ProcessTest, ANonExecutableMatchIsPassedOverThenReported) {
  WriteScript(dir_ + "/a/prog", "#!/bin/sh\nexit 1\n", 0644);
  WriteScript(dir_ + "/b/prog", "#!/bin/sh\nexit 6\n", 0755);
  SpawnOptions options;
  options.log_path = Log();
  auto child = ChildProcess::Spawn({"prog"}, {{"PATH", dir_ + "/a:" + dir_ + "/b"}}, options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  ASSERT_TRUE(child->Wait(kBound).ok());
  EXPECT_EQ(child->exit_code(), 6);

  auto denied = ChildProcess::Spawn({"prog"}, {{"PATH", dir_ + "/a"}}, options);
  ASSERT_TRUE(denied.ok()) << denied.status().ToString();
  EXPECT_EQ(denied->exit_code(), kExitCannotExecute);
  EXPECT_EQ(denied->start_error(), "exec \"prog\": Permission denied");
}

// No /bin/sh fallback for a file without #! (glibc's execvp has one; a container runtime not).
TEST_F(ProcessTest, AFileThatIsNoProgramExits126) {
  WriteScript(dir_ + "/notes.txt", "echo hi\n", 0755);
  SpawnOptions options;
  options.log_path = Log();
  auto child = ChildProcess::Spawn({dir_ + "/notes.txt"}, {}, options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ(child->exit_code(), kExitCannotExecute);
  EXPECT_NE(child->start_error().find("Exec format error (not a binary for this machine, and no "
                                      "#! line)"),
            std::string::npos)
      << child->start_error();
  // Found on PATH, the same words (which make it permanent, reconcile::IsRetryable).
  auto found = ChildProcess::Spawn({"notes.txt"}, {{"PATH", dir_}}, options);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->exit_code(), kExitCannotExecute);
  EXPECT_EQ(found->start_error(),
            "exec \"notes.txt\": Exec format error (not a binary for this machine, and no #! "
            "line)");
}

TEST_F(ProcessTest, RunsInTheWorkingDirectoryAndResolvesRelativePathsThere) {
  WriteScript(dir_ + "/wd/run.sh", "#!/bin/sh\npwd\n", 0755);
  SpawnOptions options;
  options.log_path = Log();
  options.working_dir = dir_ + "/wd";
  auto child = ChildProcess::Spawn({"./run.sh"}, {}, options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  ASSERT_TRUE(child->Wait(kBound).ok());
  EXPECT_EQ(child->exit_code(), 0) << ReadFile(Log());
  EXPECT_EQ(ReadFile(Log()), dir_ + "/wd\n");

  auto missing = ChildProcess::Spawn({"./missing.sh"}, {}, options);
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_EQ(missing->exit_code(), kExitNotFound);
  EXPECT_EQ(missing->start_error(),
            "exec \"./missing.sh\": No such file or directory (relative to " + dir_ + "/wd)");
}

TEST_F(ProcessTest, AMissingWorkingDirectoryExits126NamingIt) {
  SpawnOptions options;
  options.log_path = Log();
  options.working_dir = dir_ + "/nowhere";
  auto child = ChildProcess::Spawn({"/bin/true"}, {}, options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ(child->exit_code(), kExitCannotExecute);
  EXPECT_EQ(child->start_error(), "workingDir \"" + dir_ + "/nowhere\": No such file or directory");
}

TEST_F(ProcessTest, AnEmptyProgramNameIsAnError) {
  auto child = ChildProcess::Spawn({""}, {}, SpawnOptions{});
  EXPECT_EQ(child.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ProcessTest, EmptyCommandIsAnError) {
  auto child = ChildProcess::Spawn({}, {}, SpawnOptions{});
  EXPECT_EQ(child.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ProcessTest, UnwritableLogIsAnErrorNamingIt) {
  SpawnOptions options;
  options.log_path = dir_ + "/missing-dir/child.log";
  auto child = ChildProcess::Spawn({"/bin/true"}, {}, options);
  ASSERT_FALSE(child.ok());
  EXPECT_NE(child.status().message().find(options.log_path), std::string::npos);
}

TEST_F(ProcessTest, EnvironmentIsExactlyTheOneGiven) {
  ASSERT_EQ(::setenv("PROCESS_TEST_PARENT_ONLY", "leaked", 1), 0);
  ChildProcess child =
      Shell("echo \"foo=[$FOO] parent=[$PROCESS_TEST_PARENT_ONLY]\"", {{"FOO", "bar baz"}});
  ASSERT_TRUE(child.Wait(kBound).ok());
  ::unsetenv("PROCESS_TEST_PARENT_ONLY");
  const std::string out = ReadFile(Log());
  EXPECT_NE(out.find("foo=[bar baz]"), std::string::npos) << out;
  EXPECT_NE(out.find("parent=[]"), std::string::npos) << out;
}

// A review found: local ranks started with SIGPIPE ignored (ringtrain's own, which exec keeps),
// so `yes | head` under pipefail exited 1 (permanent) where a pod's exits 141 (retryable); and a
// spawning thread's blocked SIGTERM would leave the child deaf to it. The child starts with
// neither.
TEST_F(ProcessTest, TheChildStartsWithDefaultSignalsNotTheParents) {
  auto mask = [](const std::string& status, const std::string& field) {
    const auto at = status.find(field + ":\t");
    if (at == std::string::npos) return ~0ULL;
    return std::stoull(status.substr(at + field.size() + 2, 16), nullptr, 16);
  };
  struct sigaction ignore {
  }, old_pipe{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &old_pipe), 0);
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &term, &old_mask), 0);
  // Here, the parent's state as the child would have inherited it.
  const std::string parent = ReadFile("/proc/thread-self/status");
  ChildProcess child = Shell("exec grep -E '^Sig(Ign|Blk)' /proc/self/status");
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  ASSERT_NE(mask(parent, "SigIgn") & (1ULL << (SIGPIPE - 1)), 0U) << parent;
  ASSERT_NE(mask(parent, "SigBlk") & (1ULL << (SIGTERM - 1)), 0U) << parent;
  ASSERT_TRUE(child.Wait(kBound).ok());
  const std::string out = ReadFile(Log());
  EXPECT_EQ(mask(out, "SigIgn") & (1ULL << (SIGPIPE - 1)), 0U) << out;
  EXPECT_EQ(mask(out, "SigBlk"), 0U) << out;
}

TEST_F(ProcessTest, LogIsTruncatedAndTakesStdoutAndStderr) {
  {
    std::ofstream old(Log());
    old << "left over from an earlier attempt\n";
  }
  ChildProcess child = Shell("echo out; echo err >&2");
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_EQ(ReadFile(Log()), "out\nerr\n");
}

// A rank of `ringtrain run` (a group of its own) read ringtrain's stdin: at a terminal it was
// stopped by SIGTTIN and hung; from a pipe it read the user's input. It reads /dev/null, as a
// pod's container does. Found by a reviewing helper.
TEST_F(ProcessTest, AChildOfItsOwnGroupReadsNoneOfTheParentsStdin) {
  int input[2];
  ASSERT_EQ(::pipe(input), 0);
  ASSERT_EQ(::write(input[1], "secret\n", 7), 7);
  ::close(input[1]);
  const int saved = ::dup(STDIN_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_GE(::dup2(input[0], STDIN_FILENO), 0);
  ::close(input[0]);
  ChildProcess child = GroupShell("if read x; then echo \"read $x\"; else echo eof; fi");
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_EQ(ReadFile(Log()), "eof\n");
}

// A parent started with stdin closed (`ringtrain run job.yaml <&-`): the log opened on fd 0,
// the child's stdin from /dev/null overwrote it there, and the rank's stdout and stderr went
// to /dev/null (found by a reviewing helper). Its log has them.
TEST_F(ProcessTest, AParentWithoutStdinStillLogsItsChildsOutput) {
  const int saved = ::dup(STDIN_FILENO);
  ASSERT_GE(saved, 0);
  ::close(STDIN_FILENO);
  ChildProcess child = GroupShell("echo out; echo err >&2");
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_EQ(child.exit_code(), 0);
  EXPECT_EQ(ReadFile(Log()), "out\nerr\n");
}

TEST_F(ProcessTest, PollDoesNotBlockAndReapsOnceExited) {
  ChildProcess sleeper = Shell("exec sleep 60");
  EXPECT_FALSE(sleeper.Poll());
  EXPECT_TRUE(sleeper.running());
  ASSERT_TRUE(sleeper.Signal(SIGTERM));
  ASSERT_TRUE(sleeper.Wait(kBound).ok());
  EXPECT_TRUE(sleeper.Poll());
  EXPECT_EQ(sleeper.exit_code(), 128 + SIGTERM);
}

TEST_F(ProcessTest, SignalAfterReapIsRefused) {
  ChildProcess child = Shell("exit 0");
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_FALSE(child.Signal(SIGTERM));  // the pid may already be someone else's
}

TEST_F(ProcessTest, TerminateStopsAChildThatHonoursSigterm) {
  ChildProcess child = Shell("exec sleep 60");
  ASSERT_TRUE(child.Terminate(kBound).ok());
  EXPECT_TRUE(child.terminating());
  EXPECT_EQ(child.term_signal(), SIGTERM);
  EXPECT_EQ(child.exit_code(), 143);
}

TEST_F(ProcessTest, TerminateEscalatesToSigkillForAChildIgnoringSigterm) {
  // An ignored signal stays ignored across exec, so `sleep` itself ignores SIGTERM.
  ChildProcess child = Shell("trap '' TERM; echo ready; exec sleep 60");
  ASSERT_TRUE(Logged("ready"));
  const pid_t pid = child.pid();
  ASSERT_TRUE(child.Terminate(Duration(200)).ok());
  EXPECT_EQ(child.term_signal(), SIGKILL);
  EXPECT_EQ(child.exit_code(), 137);
  EXPECT_TRUE(Gone(pid));
}

TEST_F(ProcessTest, RequestTerminateEscalatesOnPoll) {
  ChildProcess child = Shell("trap '' TERM; echo ready; exec sleep 60");
  ASSERT_TRUE(Logged("ready"));
  child.RequestTerminate(Duration(100));
  EXPECT_TRUE(child.terminating());
  // Wait honours the SIGKILL deadline: without the escalation it would run out its bound.
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_EQ(child.term_signal(), SIGKILL);
}

TEST_F(ProcessTest, ASecondRequestResendsButKeepsTheFirstDeadline) {
  ChildProcess child = Shell(
      "trap 'echo got-int' INT; trap '' TERM; echo ready; "
      "while :; do sleep 0.05; done");
  ASSERT_TRUE(Logged("ready"));
  child.RequestTerminate(Duration(100));
  child.RequestTerminate(std::chrono::hours(1), SIGINT);
  ASSERT_TRUE(Logged("got-int"));
  ASSERT_TRUE(child.Wait(kBound).ok());  // the first, short deadline still kills it
  EXPECT_EQ(child.term_signal(), SIGKILL);
}

TEST_F(ProcessTest, WaitTimesOutWithoutKilling) {
  ChildProcess child = Shell("exec sleep 60");
  Status s = child.Wait(Duration(50));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(child.running());
  ASSERT_TRUE(child.Terminate(kBound).ok());
}

TEST_F(ProcessTest, WaitWakesOnStopRequest) {
  ChildProcess child = Shell("exec sleep 600");
  // The stop comes once the wait is blocked on the stop descriptor, so only its wake-up can
  // end the wait.
  const std::uint64_t seen = StopFdPollsForTest().value();
  stopper_ = std::thread([seen] {
    EXPECT_TRUE(StopFdPollsForTest().AwaitAbove(seen, kBound));
    RequestStop(SIGTERM);
  });
  Status s = child.Wait(std::chrono::hours(1));
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_TRUE(child.running());
  // Terminate is the stopping process's own cleanup: a stop request must not cut it short.
  ASSERT_TRUE(child.Terminate(kBound).ok());
  EXPECT_EQ(child.exit_code(), 143);
}

TEST_F(ProcessTest, DestructorKillsAndReapsARunningChild) {
  pid_t pid;
  {
    ChildProcess child = Shell("trap '' TERM; echo ready; exec sleep 60");
    ASSERT_TRUE(Logged("ready"));
    pid = child.pid();
  }
  EXPECT_TRUE(Gone(pid));
}

TEST_F(ProcessTest, ReapedChildLeavesNoZombie) {
  ChildProcess child = Shell("exit 5");
  const pid_t pid = child.pid();
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_TRUE(Gone(pid));
}

TEST_F(ProcessTest, AChildReapedBehindItsBackReadsAsARetryableFailure) {
  // Someone else's waitpid took the status: it is lost, and a success must not be invented.
  ChildProcess child = Shell("exit 0");
  ASSERT_EQ(::waitpid(child.pid(), nullptr, 0), child.pid());
  EXPECT_TRUE(child.Poll());
  EXPECT_EQ(child.exit_code(), 128 + SIGKILL);
}

TEST_F(ProcessTest, MoveTransfersOwnership) {
  ChildProcess a = Shell("exec sleep 60");
  const pid_t pid = a.pid();
  ChildProcess b = std::move(a);
  EXPECT_EQ(b.pid(), pid);
  EXPECT_EQ(a.pid(), -1);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_FALSE(a.running());
  ChildProcess c;
  c = std::move(b);
  EXPECT_TRUE(c.running());
  ASSERT_TRUE(c.Terminate(kBound).ok());
  EXPECT_TRUE(Gone(pid));
}

TEST_F(ProcessTest, ChildDiesWithTheThreadThatSpawnedIt) {
  // PR_SET_PDEATHSIG: a supervisor thread that ends (the test kubelet's loop) takes its
  // children with it instead of leaving them running.
  ChildProcess child;
  std::thread spawner([&] {
    child = Shell("echo ready; exec sleep 60");
    // The child sets PR_SET_PDEATHSIG before exec: past "ready" it is armed for this thread.
    EXPECT_TRUE(Logged("ready"));
  });
  spawner.join();
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_EQ(child.term_signal(), SIGKILL);
}

// Ctrl-C under `ringtrain run`: a command's own children (sh -c "sleep 777; ...") end with it,
// and get the SIGTERM themselves (a chance to stop cleanly), not only the SIGKILL that ends
// what is left of the group once the child is reaped.
TEST_F(ProcessTest, TerminateSignalsTheChildsOwnGroup) {
  const std::string got_term = dir_ + "/got-term";
  // The child waits for the grandchild's trap before it exits (then the reap's SIGKILL finds
  // nothing left): only a SIGTERM to the group lets it end within the bound.
  // "ready" once the grandchild's trap is set.
  const std::string armed = dir_ + "/armed";
  ChildProcess child = GroupShell("sh -c 'trap \"touch " + got_term + "; exit 0\" TERM; touch " +
                                  armed + "; while :; do sleep 0.1; done' & echo $! > " + dir_ +
                                  "/grandchild; trap 'wait $!; exit 143' TERM; while [ ! -e " +
                                  armed + " ]; do sleep 0.01; done; echo ready; wait");
  const pid_t grandchild = ReadyPid("grandchild");
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(child.Terminate(kBound).ok());
  EXPECT_EQ(child.exit_code(), 128 + SIGTERM);
  EXPECT_TRUE(EndsSoon(grandchild)) << "sh " << grandchild << " outlived its group's SIGTERM";
  EXPECT_TRUE(std::filesystem::exists(got_term)) << "the grandchild never got the SIGTERM";
  (void)::kill(grandchild, SIGKILL);
}

// After the grace nothing of the group survives, a grandchild that ignores SIGTERM included
// (the SIGKILL goes to the group; what would be left of it is killed at the reap as well).
TEST_F(ProcessTest, AfterTheGraceNothingOfTheGroupSurvives) {
  ChildProcess child =
      GroupShell("trap '' TERM; sleep 777 & echo $! > " + dir_ + "/grandchild; echo ready; wait");
  const pid_t grandchild = ReadyPid("grandchild");
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(child.Terminate(Duration(100)).ok());
  EXPECT_EQ(child.term_signal(), SIGKILL);
  EXPECT_TRUE(EndsSoon(grandchild)) << "sleep " << grandchild << " outlived its group's SIGKILL";
  (void)::kill(grandchild, SIGKILL);
}

// A child that exits leaving a background process behind: the rest of its group ends with it,
// as a container's processes end with its first one.
TEST_F(ProcessTest, WhatAChildLeftInItsGroupEndsWhenItIsReaped) {
  ChildProcess child = GroupShell("sleep 777 & echo $! > " + dir_ + "/grandchild; echo ready");
  const pid_t grandchild = ReadyPid("grandchild");
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(child.Wait(kBound).ok());
  EXPECT_EQ(child.exit_code(), 0);
  EXPECT_TRUE(EndsSoon(grandchild)) << "sleep " << grandchild << " outlived its parent";
  (void)::kill(grandchild, SIGKILL);
}

// Without a group of its own a child shares ours: only the child itself is signalled.
TEST_F(ProcessTest, AChildWithoutItsOwnGroupIsSignalledAlone) {
  ChildProcess child = Shell("sleep 777 & echo $! > " + dir_ + "/grandchild; echo ready; wait");
  const pid_t grandchild = ReadyPid("grandchild");
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(child.Terminate(kBound).ok());
  EXPECT_FALSE(Ended(grandchild));
  ASSERT_EQ(::kill(grandchild, SIGKILL), 0);
}

}  // namespace
}  // namespace ringtrain
