// Semantics follow client-go's plugin/pkg/client/auth/exec/exec.go (v1.28): the environment is
// the controller's plus the stanza's env plus KUBERNETES_EXEC_INFO; the plugin's stdout must be
// an ExecCredential of the same apiVersion with a token or a certificate/key pair; the
// credential is reused until status.expirationTimestamp and re-fetched once after a 401.
#include "controller/kube/exec_credential.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/process.h"
#include "controller/kube/tls_material.h"

extern char** environ;

namespace ringtrain::kube {
namespace {

using Json = nlohmann::json;

constexpr std::size_t kMaxStdout = 1 << 20;  // a credential is a few KiB; more is a broken plugin
constexpr std::size_t kMaxStderr = 4 << 10;  // what the error message quotes
constexpr int kPollMs = 50;                  // how soon a stop request is noticed
constexpr std::time_t kLatestExpiration = 8'000'000'000;  // year 2223

std::string ExecInfo(const ExecConfig& config) {
  Json info = {{"apiVersion", config.api_version},
               {"kind", "ExecCredential"},
               {"spec", {{"interactive", false}}}};
  if (config.provide_cluster_info && config.cluster_info.is_object()) {
    info["spec"]["cluster"] = config.cluster_info;
  }
  return info.dump();
}

// RFC 3339 as metav1.Time accepts it: fractional seconds and a Z or ±hh:mm offset.
std::optional<WallTime> ParseTimestamp(const std::string& s) {
  std::tm tm{};
  const char* end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return std::nullopt;
  if (*end == '.') {
    ++end;
    while (*end >= '0' && *end <= '9') ++end;
  }
  long offset = 0;
  if (*end == 'Z' || *end == 'z') {
    ++end;
  } else if ((*end == '+' || *end == '-') && std::strlen(end) == 6 && end[3] == ':') {
    int hh = 0, mm = 0;
    if (std::sscanf(end + 1, "%2d:%2d", &hh, &mm) != 2 || hh > 23 || mm > 59) return std::nullopt;
    offset = (*end == '+' ? 1 : -1) * (hh * 3600L + mm * 60L);
    end += 6;
  } else {
    return std::nullopt;
  }
  if (*end != '\0') return std::nullopt;
  // system_clock counts nanoseconds in 64 bits (years 1678-2262): clamp so that year 9999 means
  // "far future" instead of overflowing.
  std::time_t secs = std::clamp<std::time_t>(::timegm(&tm) - offset, 0, kLatestExpiration);
  return std::chrono::system_clock::from_time_t(secs);
}

std::string Quote(const std::string& text) {
  std::string out = text;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) {
    out.pop_back();
  }
  return out;
}

struct PluginRun {
  int exit_status = 0;  // waitpid's status
  std::string out;
  std::string err;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Starts `path` in its own process group (so a timeout kills the plugin's children too), with
// stdin from /dev/null, a clean signal mask (the controller blocks SIGTERM in every thread) and
// default dispositions, and reads both outputs until they close, the deadline, or *stop.
StatusOr<PluginRun> RunProcess(const std::string& path, const ExecConfig& config,
                               const std::atomic<bool>* stop, const std::string& name) {
  std::vector<std::string> argv_strings = {config.command};
  argv_strings.insert(argv_strings.end(), config.args.begin(), config.args.end());
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    // The stanza's values win over the controller's, as appending does in Go's os/exec.
    std::string entry = *e;
    std::string key = entry.substr(0, entry.find('='));
    bool overridden = key == "KUBERNETES_EXEC_INFO";
    for (const auto& [k, v] : config.env) overridden = overridden || k == key;
    if (!overridden) env_strings.push_back(std::move(entry));
  }
  for (const auto& [k, v] : config.env) env_strings.push_back(k + "=" + v);
  env_strings.push_back("KUBERNETES_EXEC_INFO=" + ExecInfo(config));
  std::vector<char*> argv, envp;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, name + ": pipe", errno);
  }
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, name + ": pipe", errno);
  }
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, path.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return ErrnoStatus(StatusCode::kUnavailable, name + ": cannot start it", rc);
  out_write.Reset();
  err_write.Reset();

  PluginRun run;
  const SteadyTime deadline = DeadlineAfter(config.timeout);
  auto kill_and_reap = [&] {
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  };
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    if (stop != nullptr && stop->load()) {
      kill_and_reap();
      return Cancelled(name + ": stopped while the plugin was running");
    }
    if (MillisLeft(deadline) == 0) {
      kill_and_reap();
      return DeadlineExceeded(name + ": no credential within " + FormatDuration(config.timeout) +
                              (run.err.empty() ? "" : "; stderr: " + Quote(run.err)));
    }
    pollfd fds[2] = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, std::min(kPollMs, MillisLeft(deadline)));
    if (n < 0 && errno != EINTR) {
      int e = errno;
      kill_and_reap();
      return ErrnoStatus(StatusCode::kUnavailable, name + ": poll", e);
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[8192];
      ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        (i == 0 ? out_open : err_open) = false;
        (i == 0 ? out_read : err_read).Reset();
        continue;
      }
      std::string& sink = i == 0 ? run.out : run.err;
      std::size_t cap = i == 0 ? kMaxStdout : kMaxStderr;
      sink.append(buf, std::min<std::size_t>(static_cast<std::size_t>(got),
                                             cap + 1 - std::min(cap + 1, sink.size())));
      if (i == 0 && sink.size() > kMaxStdout) {
        kill_and_reap();
        return InvalidArgument(name + ": printed more than " + std::to_string(kMaxStdout) +
                               " bytes on stdout; an ExecCredential is expected");
      }
    }
  }
  // Both outputs closed; the plugin is exiting (or has handed them to a lingering child).
  for (;;) {
    int status = 0;
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      run.exit_status = status;
      return run;
    }
    if (w < 0 && errno != EINTR) {
      return ErrnoStatus(StatusCode::kUnavailable, name + ": waitpid", errno);
    }
    if ((stop != nullptr && stop->load()) || MillisLeft(deadline) == 0) {
      kill_and_reap();
      return stop != nullptr && stop->load()
                 ? Cancelled(name + ": stopped while the plugin was running")
                 : DeadlineExceeded(name + ": did not exit within " +
                                    FormatDuration(config.timeout));
    }
    ::usleep(5'000);
  }
}

}  // namespace

StatusOr<ExecCredential> ParseExecCredential(const std::string& stdout_text,
                                             const std::string& api_version,
                                             const std::string& command) {
  const std::string name = "exec plugin " + command;
  Json j = Json::parse(stdout_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::string shown = stdout_text.substr(0, 200);
    return InvalidArgument(name + ": decoding stdout: not a JSON object" +
                           (shown.empty() ? " (stdout was empty)" : ": " + Quote(shown)));
  }
  auto str = [&](const Json& obj, const char* key) -> StatusOr<std::string> {
    if (!obj.contains(key) || obj[key].is_null()) return std::string();
    if (!obj[key].is_string()) {
      return InvalidArgument(name + ": decoding stdout: " + key + " is not a string");
    }
    return obj[key].get<std::string>();
  };
  ASSIGN_OR_RETURN(std::string got_version, str(j, "apiVersion"));
  ASSIGN_OR_RETURN(std::string kind, str(j, "kind"));
  if (got_version != api_version) {
    return InvalidArgument(name + " is configured to use API version " + api_version +
                           ", plugin returned version \"" + got_version + "\"");
  }
  if (kind != "ExecCredential") {
    return InvalidArgument(name + ": decoding stdout: kind is \"" + kind +
                           "\", want ExecCredential");
  }
  if (!j.contains("status") || j["status"].is_null()) {
    return InvalidArgument(name + " didn't return a status field");
  }
  const Json& status = j["status"];
  if (!status.is_object()) return InvalidArgument(name + ": decoding stdout: status is not a map");
  ExecCredential cred;
  ASSIGN_OR_RETURN(cred.token, str(status, "token"));
  ASSIGN_OR_RETURN(cred.client_cert_pem, str(status, "clientCertificateData"));
  ASSIGN_OR_RETURN(cred.client_key_pem, str(status, "clientKeyData"));
  ASSIGN_OR_RETURN(std::string expiration, str(status, "expirationTimestamp"));
  if (cred.token.empty() && cred.client_cert_pem.empty() && cred.client_key_pem.empty()) {
    return InvalidArgument(name + " didn't return a token or cert/key pair");
  }
  if (cred.client_cert_pem.empty() != cred.client_key_pem.empty()) {
    return InvalidArgument(name + " returned only certificate or key, not both");
  }
  if (!cred.client_cert_pem.empty()) {
    const std::string what = name + ": failed parsing client key/certificate";
    RETURN_IF_ERROR(CheckPemCertificates(cred.client_cert_pem, what + " (clientCertificateData)"));
    RETURN_IF_ERROR(CheckPemPrivateKey(cred.client_key_pem, what + " (clientKeyData)"));
    RETURN_IF_ERROR(CheckKeyMatchesCertificate(cred.client_cert_pem, cred.client_key_pem, what));
  }
  if (!expiration.empty()) {
    cred.expiration = ParseTimestamp(expiration);
    if (!cred.expiration) {
      return InvalidArgument(name + ": decoding stdout: status.expirationTimestamp \"" +
                             expiration.substr(0, 64) + "\" is not an RFC 3339 time");
    }
  }
  return cred;
}

StatusOr<ExecCredential> RunExecPlugin(const ExecConfig& config, const std::atomic<bool>* stop) {
  const std::string name = "exec plugin " + config.command;
  if (config.interactive_mode == "Always") {
    // What client-go says when stdin is not a terminal, which a controller's never is.
    return FailedPrecondition(name +
                              ": exec plugin cannot support interactive mode: standard input is "
                              "not a terminal (interactiveMode: Always)");
  }
  std::optional<std::string> path = LookPath(config.command, ProcessSearchPath());
  if (!path) {
    std::string message = "exec: executable " + config.command + " not found";
    message +=
        "\n\nIt looks like you are trying to use a client-go credential plugin that is not "
        "installed.\n\nTo learn more about this feature, consult the documentation available "
        "at:\n      https://kubernetes.io/docs/reference/access-authn-authz/authentication/"
        "#client-go-credential-plugins";
    if (!config.install_hint.empty()) message += "\n\n" + config.install_hint;
    return NotFound(message);
  }
  ASSIGN_OR_RETURN(PluginRun run, RunProcess(*path, config, stop, name));
  const std::string stderr_note = run.err.empty() ? "" : "; stderr: " + Quote(run.err);
  if (WIFSIGNALED(run.exit_status)) {
    return Unavailable("exec: executable " + config.command + " was killed by signal " +
                       std::to_string(WTERMSIG(run.exit_status)) + stderr_note);
  }
  if (WEXITSTATUS(run.exit_status) != 0) {
    return Status(StatusCode::kUnauthenticated,
                  "exec: executable " + config.command + " failed with exit code " +
                      std::to_string(WEXITSTATUS(run.exit_status)) + stderr_note);
  }
  auto cred = ParseExecCredential(run.out, config.api_version, config.command);
  if (!cred.ok()) return Status(cred.status().code(), cred.status().message() + stderr_note);
  return cred;
}

ExecAuthenticator::ExecAuthenticator(ExecConfig config, const Clock* clock,
                                     const std::atomic<bool>* stop)
    : config_(std::move(config)), clock_(clock), stop_(stop) {}

StatusOr<std::shared_ptr<const ExecCredential>> ExecAuthenticator::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  // client-go: expired when now is after the timestamp.
  bool expired = cached_ && cached_->expiration && clock_->Now() > *cached_->expiration;
  if (!cached_ || expired) RETURN_IF_ERROR(RefreshLocked());
  return cached_;
}

Status ExecAuthenticator::RefreshAfterUnauthorized(
    const std::shared_ptr<const ExecCredential>& used) {
  std::lock_guard<std::mutex> lock(mu_);
  if (used != cached_) return Status::Ok();  // already rotated by another request
  return RefreshLocked();
}

std::uint64_t ExecAuthenticator::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

Status ExecAuthenticator::RefreshLocked() {
  ASSIGN_OR_RETURN(ExecCredential cred, RunExecPlugin(config_, stop_));
  cached_ = std::make_shared<const ExecCredential>(std::move(cred));
  ++generation_;
  return Status::Ok();
}

}  // namespace ringtrain::kube
