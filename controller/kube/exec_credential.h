// client.authentication.k8s.io exec credential plugins (EKS, GKE, AKS kubeconfigs): running the
// plugin as client-go does, parsing its ExecCredential, and caching it until it expires. Knows
// nothing about HTTP; the kube client asks it for a credential before each request.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain::kube {

inline constexpr const char* kExecApiV1 = "client.authentication.k8s.io/v1";
inline constexpr const char* kExecApiV1beta1 = "client.authentication.k8s.io/v1beta1";

// A plugin that hangs (waiting for a login prompt nobody answers) must not stall the operator.
inline constexpr Duration kDefaultExecTimeout{60'000};

// The user's `exec:` stanza of a kubeconfig (clientcmd's ExecConfig).
struct ExecConfig {
  std::string command;  // a bare name is looked up on PATH; a path is absolute
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // added to the controller's environment
  std::string api_version;                               // kExecApiV1 or kExecApiV1beta1
  std::string install_hint;
  std::string interactive_mode;  // Never | IfAvailable | Always
  bool provide_cluster_info = false;
  // spec.cluster of KUBERNETES_EXEC_INFO when provide_cluster_info (server, CA data, and the
  // cluster's extension "client.authentication.k8s.io/exec" as `config`).
  nlohmann::json cluster_info;
  Duration timeout = kDefaultExecTimeout;
};

struct ExecCredential {
  std::string token;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::optional<WallTime> expiration;  // none: valid until the server says 401
};

// Runs the plugin once: stdin is /dev/null (never interactive), stdout must be an ExecCredential
// of the configured apiVersion. Errors name the command and carry its stderr. Gives up after
// config.timeout, or within ~50 ms once *stop is set (kCancelled), killing the plugin.
StatusOr<ExecCredential> RunExecPlugin(const ExecConfig& config,
                                       const std::atomic<bool>* stop = nullptr);

// Parses a plugin's stdout (exposed for tests and fuzzing). `command` is only for messages.
StatusOr<ExecCredential> ParseExecCredential(const std::string& stdout_text,
                                             const std::string& api_version,
                                             const std::string& command);

// The cached credential of one plugin: the plugin runs on first use, when the credential has
// expired, and once after the server refused it with 401. Thread-safe; callers that need a
// credential while the plugin runs wait for that one run (client-go holds its mutex likewise).
class ExecAuthenticator {
 public:
  ExecAuthenticator(ExecConfig config, const Clock* clock, const std::atomic<bool>* stop);

  // A valid credential, running the plugin if none is cached or the cached one has expired.
  StatusOr<std::shared_ptr<const ExecCredential>> Get();
  // The server answered 401 to a request made with `used`: run the plugin again, unless a
  // newer credential is already cached (another request refreshed it first).
  Status RefreshAfterUnauthorized(const std::shared_ptr<const ExecCredential>& used);
  // How many times the plugin ran successfully (a credential generation; changes on rotation).
  std::uint64_t generation() const;

 private:
  Status RefreshLocked();

  const ExecConfig config_;
  const Clock* clock_;
  const std::atomic<bool>* stop_;
  mutable std::mutex mu_;
  std::shared_ptr<const ExecCredential> cached_;
  std::uint64_t generation_ = 0;
};

}  // namespace ringtrain::kube
