#include "common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>

namespace ringtrain {

StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& env,
                             const SpawnOptions& options) {
  if (argv.empty()) return InvalidArgument("spawn: empty command");
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> args = argv;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return ErrnoStatus(StatusCode::kUnavailable, "open " + options.log_path, errno);
  }
  const pid_t parent = ::getpid();
  const bool new_group = options.new_process_group;

  pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    return ErrnoStatus(StatusCode::kUnavailable, "fork", errno);
  }
  if (pid == 0) {
    if (new_group) ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);  // the parent died before prctl
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    ::execve(cargv[0], cargv.data(), cenv.data());
    const char msg[] = "cannot execute the command\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  return pid;
}

}  // namespace ringtrain
