#include "runner/local_launcher.h"

#include <spdlog/spdlog.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/env.h"
#include "common/process.h"
#include "common/runner_contract.h"
#include "common/runner_env.h"
#include "common/stop.h"

extern char** environ;

namespace ringtrain {
namespace {

constexpr auto kStopGrace = std::chrono::seconds(15);

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

void WriteLine(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::trunc);
  if (out) out << line << "\n";
}

constexpr std::string_view kFolderPrefix = "ringtrain-ranks-";

// The kernel's start time of process `pid` (field 22 of /proc/PID/stat, in clock ticks since
// boot): with the pid, it names one process, whatever pids are reused. Empty when none runs.
std::string StartTimeOf(const std::string& pid) {
  const std::string stat = ReadFirstLine("/proc/" + pid + "/stat");
  const auto paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return "";
  std::istringstream fields(stat.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {
    if (i == 22) return field;
  }
  return "";
}

// This process as the folder's name carries it: "<pid namespace>.<boot>-<pid>-<start time>".
// The boot (the first 8 hex digits of the kernel's boot_id) tells hosts apart: every host's
// initial pid namespace has the same number, and a $TMPDIR may be shared (NFS scratch).
std::string OwnerTag() {
  char ns[64] = {};  // "pid:[4026531836]"
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  std::string id = n > 0 ? std::string(ns, static_cast<std::size_t>(n)) : "";
  id.erase(std::remove_if(id.begin(), id.end(), [](char c) { return c < '0' || c > '9'; }),
           id.end());
  std::string boot = ReadFirstLine("/proc/sys/kernel/random/boot_id").substr(0, 8);
  boot.erase(std::remove_if(boot.begin(), boot.end(),
                            [](char c) { return !std::isxdigit(static_cast<unsigned char>(c)); }),
             boot.end());
  const std::string pid = std::to_string(::getpid());
  return (id.empty() ? "0" : id) + "." + (boot.empty() ? "0" : boot) + "-" + pid + "-" +
         StartTimeOf(pid);
}

// Removes the folders of launchers that were killed before they could (SIGKILL, the end of a
// grace period): ours, in this pid namespace of this host's boot, whose process no longer runs.
// A folder of another namespace (a container sharing this $TMPDIR), another host or another
// user is left alone.
void RemoveFoldersOfDeadLaunchers(const std::filesystem::path& tmp, const std::string& own_tag) {
  const std::string ns = own_tag.substr(0, own_tag.find('-'));
  std::error_code ec;
  for (std::filesystem::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(kFolderPrefix)) continue;
    // "<ns>-<pid>-<start>-XXXXXX"; an earlier version's "XXXXXX" names no owner: kept.
    std::istringstream parts(name.substr(kFolderPrefix.size()));
    std::string folder_ns, pid, start;
    if (!std::getline(parts, folder_ns, '-') || !std::getline(parts, pid, '-') ||
        !std::getline(parts, start, '-') || folder_ns != ns || pid.empty() ||
        pid.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    if (StartTimeOf(pid) == start) continue;  // its launcher still runs
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
      continue;
    }
    std::error_code rm;
    std::filesystem::remove_all(it->path(), rm);
    if (rm) {
      spdlog::warn("cannot remove {}, left by a launcher that was killed: {}", it->path().string(),
                   rm.message());
    } else {
      spdlog::info("removed {}, left by a launcher that was killed", it->path().string());
    }
  }
}

}  // namespace

StatusOr<LocalLaunch> LocalLaunchFromEnvironment(const std::vector<std::string>& args) {
  LocalLaunch l;
  if (GetEnv(contract::kEnvLocalWorker).value_or("") == "1") return l;  // a launched rank
  const char* name = GetEnv(contract::kEnvNprocPerNode) ? contract::kEnvNprocPerNode
                                                        : contract::kEnvTorchLocalWorldSize;
  ASSIGN_OR_RETURN(auto nproc, GetEnvInt(name, 1, 1, 64));
  l.nproc = static_cast<int>(nproc);
  if (l.nproc == 1) return l;
  ASSIGN_OR_RETURN(auto world,
                   GetEnvInt(GetEnv(contract::kEnvWorldSize) ? contract::kEnvWorldSize
                                                             : contract::kEnvTorchWorldSize,
                             1, 1, 1 << 16));
  if (world % l.nproc != 0) {
    return InvalidArgument(std::string(name) + ": " + std::to_string(l.nproc) +
                           " ranks per node do not divide the world size " + std::to_string(world));
  }
  ASSIGN_OR_RETURN(auto node, GetEnvInt(contract::kEnvNodeRank, 0, 0, world / l.nproc - 1));
  l.node_rank = static_cast<int>(node);
  ASSIGN_OR_RETURN(auto port,
                   GetEnvInt(contract::kEnvMetricsPort, contract::kMetricsPort, -1, 65535));
  l.metrics_port = static_cast<int>(port);
  l.termination_log = GetEnv(contract::kEnvTerminationLog).value_or(l.termination_log);
  char self[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return Internal("cannot find the runner binary (/proc/self/exe)");
  l.self.assign(self, static_cast<std::size_t>(n));
  l.args = args;
  return l;
}

int RunLocalRanks(const LocalLaunch& launch) {
  std::map<std::string, std::string> base;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) base[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // The ranks' termination messages, read here and removed with the folder before returning.
  std::error_code ec;
  std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  const std::string tag = OwnerTag();
  RemoveFoldersOfDeadLaunchers(tmp, tag);
  std::string dir_template = (tmp / (std::string(kFolderPrefix) + tag + "-XXXXXX")).string();
  const char* dir = ::mkdtemp(dir_template.data());
  const std::string logs = dir != nullptr ? dir : tmp.string();
  const std::string created = dir != nullptr ? dir : "";

  std::vector<ChildProcess> ranks;  // by local rank
  ranks.reserve(static_cast<std::size_t>(launch.nproc));
  std::vector<std::string> term_logs(static_cast<std::size_t>(launch.nproc));
  int first_code = 0;
  std::string first_reason;
  // SIGKILL follows `sig` after kStopGrace (ChildProcess::Poll); a later signal is forwarded
  // too, but never postpones that kill.
  auto stop_all = [&](int sig) {
    for (auto& r : ranks) r.RequestTerminate(kStopGrace, sig);
  };
  for (int i = 0; i < launch.nproc; ++i) {
    auto env = base;
    const int rank = launch.node_rank * launch.nproc + i;
    env[contract::kEnvLocalWorker] = "1";
    env[contract::kEnvRank] = env[contract::kEnvTorchRank] = std::to_string(rank);
    env[contract::kEnvTorchLocalRank] = std::to_string(i);
    env[contract::kEnvTorchLocalWorldSize] = env[contract::kEnvNprocPerNode] =
        std::to_string(launch.nproc);
    if (launch.metrics_port > 0) {
      env[contract::kEnvMetricsPort] = std::to_string(launch.metrics_port + i);
    }
    term_logs[static_cast<std::size_t>(i)] = logs + "/rank-" + std::to_string(i) + ".termination";
    env[contract::kEnvTerminationLog] = term_logs[static_cast<std::size_t>(i)];
    std::vector<std::string> argv = {launch.self};
    argv.insert(argv.end(), launch.args.begin(), launch.args.end());
    // A group of its own: a supervisor that signals this launcher's group (`ringtrain run`)
    // reaches the ranks only through the launcher, one signal each, so the first SIGTERM stays
    // a request to stop at a step boundary (a second one stops a rank at once).
    SpawnOptions spawn;
    spawn.new_process_group = true;
    auto child = ChildProcess::Spawn(argv, env, spawn);
    if (!child.ok()) {
      spdlog::error("cannot start local rank {}: {}", i, child.status().ToString());
      stop_all(SIGTERM);
      first_code = ExitCodeFor(child.status());
      first_reason = child.status().ToString();
      break;
    }
    ranks.push_back(std::move(*child));
  }
  spdlog::info("started {} local ranks (node {}, ranks {}-{})", ranks.size(), launch.node_rank,
               launch.node_rank * launch.nproc, launch.node_rank * launch.nproc + launch.nproc - 1);

  bool stopping = first_code != 0;
  int forwarded = 0;
  std::size_t left = ranks.size();
  while (left > 0) {
    int sig = StopRequested() ? (StopSignal() != 0 ? StopSignal() : SIGTERM) : 0;
    if (sig != 0 && sig != forwarded) {
      forwarded = sig;
      stop_all(sig);
      stopping = true;
    }
    int lr = -1;
    for (std::size_t i = 0; i < ranks.size() && lr < 0; ++i) {
      if (ranks[i].running() && ranks[i].Poll()) lr = static_cast<int>(i);  // it just ended
    }
    if (lr < 0) {
      // Cut short by a stop request, which must be forwarded at once; once forwarded, the
      // stop descriptor stays readable, so a plain sleep keeps this loop from spinning.
      if (forwarded != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } else {
        (void)SleepOrStop(std::chrono::milliseconds(20));
      }
      continue;
    }
    --left;
    const int code = ranks[static_cast<std::size_t>(lr)].exit_code();
    if (code != 0 && first_code == 0) {
      first_code = code;
      std::string why = ReadFirstLine(term_logs[static_cast<std::size_t>(lr)]);
      // A rank that names the gang's root cause keeps the contract's prefix at the start of
      // the line, where the controller looks for it.
      if (why.starts_with(contract::kCausedByPrefix)) {
        first_reason = why;
      } else {
        first_reason = "local rank " + std::to_string(lr) + " (rank " +
                       std::to_string(launch.node_rank * launch.nproc + lr) + ") exited " +
                       std::to_string(code) + (why.empty() ? "" : ": " + why);
      }
      spdlog::error("{}; stopping the other local ranks", first_reason);
      if (!stopping) {
        stopping = true;
        stop_all(SIGTERM);
      }
    }
  }
  if (first_code != 0) WriteLine(launch.termination_log, first_reason);
  if (first_code == 0 && forwarded != 0) first_code = 128 + forwarded;
  if (first_code == 0 && launch.node_rank == 0) {
    // Rank 0's final /status (the runner contract) becomes the pod's termination message.
    std::ifstream in(term_logs[0]);
    std::string line;
    if (std::getline(in, line) && !line.empty()) WriteLine(launch.termination_log, line);
  }
  if (!created.empty()) {
    std::filesystem::remove_all(created, ec);
    if (ec) spdlog::warn("cannot remove {}: {}", created, ec.message());
  }
  return first_code;
}

}  // namespace ringtrain
