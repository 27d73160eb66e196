// Where the API server is and how to prove who we are: kubeconfig and in-cluster service-account
// config, and the factory of the cpprestsdk-backed KubeClient. Knows nothing about resources.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "controller/kube/kube_client.h"

namespace ringtrain::kube {

// PEM data is decoded (kubeconfig's *-data fields are base64 of PEM); files are absolute paths.
struct KubeConfig {
  std::string server;  // "https://10.0.0.1:443" or "http://127.0.0.1:PORT"
  std::string token;
  std::string ca_file;
  std::string ca_data;
  std::string client_cert_file;
  std::string client_cert_data;
  std::string client_key_file;
  std::string client_key_data;
  bool insecure_skip_tls_verify = false;
  std::string ns = "default";  // the context's namespace; the default for namespaced calls
};

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// The current context of a kubeconfig file. Errors name the file and the missing field.
StatusOr<KubeConfig> LoadKubeconfig(const std::string& path);

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
};

StatusOr<std::unique_ptr<KubeClient>> NewKubeClient(const KubeConfig& config,
                                                    const ClientOptions& options = {});

}  // namespace ringtrain::kube
