// Where the API server is and how to prove who we are: kubeconfig and in-cluster service-account
// config, and the factory of the cpprestsdk-backed KubeClient. Knows nothing about resources.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"
#include "controller/kube/exec_credential.h"
#include "controller/kube/kube_client.h"

namespace ringtrain::kube {

// PEM data is decoded (kubeconfig's *-data fields are base64 of PEM); files are absolute paths.
// Where both a file and its data are given, the data wins (client-go's rule) and the file is "".
struct KubeConfig {
  std::string server;  // "https://10.0.0.1:443" or "http://127.0.0.1:PORT"
  std::string token;
  // Re-read every kTokenFileRefresh and after a 401, as client-go does for projected service
  // account tokens that the kubelet rotates; `token` is its content at load.
  std::string token_file;
  std::string ca_file;
  std::string ca_data;
  std::string client_cert_file;
  std::string client_cert_data;
  std::string client_key_file;
  std::string client_key_data;
  bool insecure_skip_tls_verify = false;
  std::string ns = "default";  // the context's namespace; the default for namespaced calls
  // An exec credential plugin; used only when no token or client certificate is configured.
  std::optional<ExecConfig> exec;
};

inline constexpr Duration kTokenFileRefresh{60'000};

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// The current context of a kubeconfig file. Errors name the file and the field; referenced
// files (CA, client certificate and key, tokenFile) are read and their PEM checked, so a broken
// kubeconfig fails here instead of on every request. Unsupported auth (auth-provider, basic
// auth, impersonation, proxy-url, tls-server-name) is refused by name.
StatusOr<KubeConfig> LoadKubeconfig(const std::string& path);

// LoadKubeconfig on text in memory (the fuzzing entry point): `source` names it in errors and
// relative paths resolve against `base_dir`. No file I/O but the files the text references.
// Never throws, whatever the text.
StatusOr<KubeConfig> ParseKubeconfig(std::string_view text, const std::string& source,
                                     const std::filesystem::path& base_dir);

// KUBERNETES_SERVICE_HOST/PORT and the service account's token, ca.crt and namespace in `dir`.
StatusOr<KubeConfig> InClusterConfig(const std::string& dir = kServiceAccountDir);

struct ClientOptions {
  Duration request_timeout{30'000};  // one HTTP exchange (not a watch)
  double qps = 20;                   // writes per second, client side
  int burst = 40;
  Duration max_throttle_wait{60'000};  // a write waiting for the rate limiter longer fails
  int max_retries = 3;                 // reads on 429/5xx; writes on 429 only
  Duration max_retry_after{10'000};    // a longer Retry-After is cut to this
  std::string user_agent = "ringtrain/0.1";
  // Wall time for credential expiry (exec plugins); nullptr = the real clock.
  const Clock* clock = nullptr;
  // Set at shutdown: a request waiting for its answer or its turn (rate limit, retry backoff)
  // ends within 50 ms, a running exec plugin is killed, and nothing new is sent; each such call
  // fails with kCancelled. A process-wide RequestStop() ends the waits too.
  const std::atomic<bool>* stop = nullptr;
  // Set: a running exec credential plugin is killed (its request fails with kCancelled) and
  // none is started, while requests with a cached credential still go out. For a client whose
  // last writes must go out after the stop (the lease's release, the last Events) but whose
  // plugin must not outlive their budget. When given, the plugin watches it instead of `stop`.
  const std::atomic<bool>* exec_stop = nullptr;
};

// Checks the TLS material a config names (files exist and hold PEM, the key matches the
// certificate); NewKubeClient calls it, so every source of a config fails at start.
Status ValidateTlsMaterial(const KubeConfig& config);

StatusOr<std::unique_ptr<KubeClient>> NewKubeClient(const KubeConfig& config,
                                                    const ClientOptions& options = {});

}  // namespace ringtrain::kube
