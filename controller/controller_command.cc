#include "controller/controller_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <future>
#include <thread>

#include "common/env.h"
#include "common/flags.h"
#include "common/http.h"
#include "common/logging.h"
#include "common/random.h"
#include "controller/executors/kubernetes/operator.h"
#include "controller/kube/kube_config.h"

namespace ringtrain::op {
namespace {

struct Flags {
  std::string kubeconfig;
  std::string ns;
  bool leader_elect = false;
  std::string lease_namespace;
  std::string lease_name = "ringtrain-controller-leader";
  std::string identity;
  std::string metrics_addr = ":8080";
  std::string health_addr = ":8081";
  std::string runner_image;
  int workers = 4;
  double qps = 50;
  int burst = 100;
  int progress_interval_ms = 5000;
  int status_readers = 4;
  std::string log_level = "info";
};

// Every flag of `ringtrain controller`, one line each, writing into `f`.
flags::FlagSet Declare(Flags& f) {
  flags::FlagSet set("ringtrain controller [flags]",
                     "Exit codes: 0 after a graceful stop, 1 on a startup error or a lost lease, "
                     "2 on bad flags.\n");
  set.String("kubeconfig", &f.kubeconfig, "else $KUBECONFIG, else the in-cluster account", "PATH");
  set.String("namespace", &f.ns, "watch one namespace (empty = all)", "NS");
  set.Bool("leader-elect", &f.leader_elect, "campaign for a Lease; only the leader writes");
  set.String("lease-namespace", &f.lease_namespace, "default: the config's namespace", "NS");
  set.String("lease-name", &f.lease_name, "the Lease's name", "NAME");
  set.String("identity", &f.identity, "default: hostname_<random>", "ID");
  set.String("metrics-addr", &f.metrics_addr, "/metrics; empty disables", "ADDR");
  set.String("health-addr", &f.health_addr, "/healthz, /readyz; empty disables", "ADDR");
  set.String("runner-image", &f.runner_image, "for jobs that leave spec.image unset", "IMAGE");
  set.Int("workers", &f.workers, "reconcile workers", {.min = 1, .max = 256});
  set.Double("kube-qps", &f.qps, "client-side write rate", {.min = 0, .exclusive_min = true});
  set.Int("kube-burst", &f.burst, "client-side write burst", {.min = 1, .max = 100000});
  set.Int("progress-interval-ms", &f.progress_interval_ms, "how often rank 0's /status is read",
          {.min = 50, .max = 3'600'000});
  set.Int("status-readers", &f.status_readers,
          "threads that read rank 0's /status, beside the workers", {.min = 1, .max = 256});
  set.String("log-level", &f.log_level, "trace|debug|info|warn|error", "LEVEL");
  return set;
}

// ":8080" → 0.0.0.0:8080, "127.0.0.1:0" → itself.
StatusOr<std::pair<std::string, int>> ParseAddr(const std::string& addr, const std::string& what) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos) return InvalidArgument(what + ": want HOST:PORT, got " + addr);
  std::string host = addr.substr(0, colon);
  ASSIGN_OR_RETURN(std::int64_t port, ParseInt(addr.substr(colon + 1), what));
  if (port < 0 || port > 65535) return InvalidArgument(what + ": bad port in " + addr);
  return std::pair{host.empty() ? std::string("0.0.0.0") : host, static_cast<int>(port)};
}

StatusOr<kube::KubeConfig> LoadConfig(const Flags& f) {
  if (!f.kubeconfig.empty()) return kube::LoadKubeconfig(f.kubeconfig);
  if (auto env = GetEnv("KUBECONFIG"); env && !env->empty()) {
    // Like kubectl, take the first file of a list.
    return kube::LoadKubeconfig(env->substr(0, env->find(':')));
  }
  return kube::InClusterConfig();
}

std::string DefaultIdentity() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  return std::string(host) + "_" + RandomToken().substr(0, 8);
}

int Run(const std::vector<std::string>& args, const std::atomic<bool>* stop,
        const sigset_t* signals) {
  Flags f;
  flags::FlagSet set = Declare(f);
  if (Status s = set.Parse(args); !s.ok()) {
    std::fprintf(stderr, "error: %s\n%s", s.message().c_str(), set.Usage().c_str());
    return 2;
  }
  if (set.help_requested()) {
    std::fputs(set.Usage().c_str(), stdout);
    return 0;
  }
  if (signals != nullptr) InitLogging("controller", f.log_level);
  auto config = LoadConfig(f);
  if (!config.ok()) {
    spdlog::error("cannot load the API server's address and credentials: {}",
                  config.status().ToString());
    return 1;
  }
  if (config->token.empty() && config->client_cert_file.empty() &&
      config->client_cert_data.empty() && !config->exec) {
    // Legal (a cluster may authorize system:anonymous), but most likely a kubeconfig that lost
    // its user: say so, since the API server's 403s will only name system:anonymous.
    spdlog::warn(
        "the kubeconfig's user has no token, client certificate or exec plugin: "
        "requests to {} are anonymous (system:anonymous)",
        config->server);
  }
  // Set at shutdown so that a credential plugin still running is killed, not waited for.
  std::atomic<bool> stopping{false};
  if (config->exec) {
    // A plugin that cannot give a credential now would only fail every request later: say so at
    // start (the client runs it again for its own cached credential).
    auto run = std::async(std::launch::async, [&] {
      return kube::RunExecPlugin(*config->exec, stop != nullptr ? stop : &stopping);
    });
    // SIGTERM is blocked in every thread and only sigtimedwait sees it: watch for it here.
    while (run.wait_for(Duration(signals != nullptr ? 0 : 50)) != std::future_status::ready) {
      timespec ts{0, 50'000'000};
      if (signals != nullptr && ::sigtimedwait(signals, nullptr, &ts) > 0) stopping = true;
    }
    auto cred = run.get();
    if (!cred.ok()) {
      spdlog::error("credential plugin of the kubeconfig: {}", cred.status().ToString());
      return 1;
    }
  }
  if (f.identity.empty()) f.identity = DefaultIdentity();
  kube::ClientOptions client_options;
  client_options.qps = f.qps;
  client_options.burst = f.burst;
  client_options.user_agent = "ringtrain-controller/" + f.identity;
  client_options.stop = stop != nullptr ? stop : &stopping;
  auto client = kube::NewKubeClient(*config, client_options);
  if (!client.ok()) {
    spdlog::error("kubernetes client: {}", client.status().ToString());
    return 1;
  }

  ControllerMetrics metrics;
  OperatorOptions options;
  options.ns = f.ns;
  options.workers = f.workers;
  options.reconciler.pods.runner_image = f.runner_image;
  options.reconciler.progress_interval = Duration(f.progress_interval_ms);
  options.reconciler.status_readers = f.status_readers;
  options.leader_elect = f.leader_elect;
  options.election.identity = f.identity;
  options.election.lease_name = f.lease_name;
  options.election.lease_namespace = !f.lease_namespace.empty() ? f.lease_namespace
                                     : config->ns.empty()       ? "default"
                                                                : config->ns;
  // A second client for the lease (and a third for Events): each call bounded by one retry period
  // (a Get and an Update fit well within the renew deadline) and not retried (the election retries
  // at that pace itself); not tied to the stop flag, so that after a SIGTERM the last Events
  // and the release of the lease still go out, each within a few seconds.
  //
  // Their credential plugins must not outlive that shutdown either (bounded only by the
  // plugin's own 60 s timeout, they would hold the process past a pod's grace period), but the
  // stop flag cannot kill them: the release and the last Events run after it is set and would
  // be left with a cached credential only (none when it has just expired or been refused). So
  // each client's plugin has a flag of its own, set when its budget is spent: the lease's by
  // the elector once the release has ended or run out of release_timeout (5 s), the Events' by
  // the recorder once its flush has (EventRecorder::kFlushTimeout, 3 s). Until then a plugin
  // may run and get the credential those last writes need; after, it is killed within ~50 ms.
  std::atomic<bool> lease_calls_abandoned{false};
  std::atomic<bool> events_abandoned{false};
  options.election.calls_abandoned = &lease_calls_abandoned;
  options.events_abandoned = &events_abandoned;
  kube::ClientOptions side_options = client_options;
  side_options.request_timeout = options.election.retry_period;
  side_options.max_retries = 0;
  side_options.stop = nullptr;
  side_options.exec_stop = &lease_calls_abandoned;
  auto side_client = kube::NewKubeClient(*config, side_options);
  if (!side_client.ok()) {
    spdlog::error("kubernetes client for the lease and Events: {}",
                  side_client.status().ToString());
    return 1;
  }
  // Events may be retried (a 429 from API priority and fairness, a slow etcd write): the Flush
  // at shutdown is bounded by its own deadline.
  kube::ClientOptions events_options = side_options;
  events_options.max_retries = 2;
  events_options.exec_stop = &events_abandoned;
  auto events_client = kube::NewKubeClient(*config, events_options);
  if (!events_client.ok()) {
    spdlog::error("kubernetes client for Events: {}", events_client.status().ToString());
    return 1;
  }
  options.election_client = side_client->get();
  options.events_client = events_client->get();
  auto op = Operator::Create(client->get(), options, &metrics);
  if (!op.ok()) {
    spdlog::error("{}", op.status().ToString());
    return 1;
  }
  Operator* oper = op->get();

  std::unique_ptr<http::Server> metrics_server, health_server;
  if (!f.metrics_addr.empty()) {
    auto addr = ParseAddr(f.metrics_addr, "--metrics-addr");
    if (!addr.ok()) {
      spdlog::error("{}", addr.status().message());
      return 2;
    }
    auto s = http::Server::Create(addr->first, addr->second,
                                  {{"/metrics", [&metrics] {
                                      return http::Response{
                                          200, "text/plain; version=0.0.4; charset=utf-8",
                                          metrics.RenderText()};
                                    }}});
    if (!s.ok()) {
      spdlog::error("metrics server: {}", s.status().ToString());
      return 1;
    }
    metrics_server = std::move(*s);
  }
  if (!f.health_addr.empty()) {
    auto addr = ParseAddr(f.health_addr, "--health-addr");
    if (!addr.ok()) {
      spdlog::error("{}", addr.status().message());
      return 2;
    }
    auto s = http::Server::Create(
        addr->first, addr->second,
        {{"/healthz",
          [] {
            return http::Response{200, "text/plain", "ok\n"};
          }},
         {"/readyz", [oper] {
            return oper->Ready() ? http::Response{200, "text/plain", "ok\n"}
                                 : http::Response{503, "text/plain", "informers not synced\n"};
          }}});
    if (!s.ok()) {
      spdlog::error("health server: {}", s.status().ToString());
      return 1;
    }
    health_server = std::move(*s);
  }

  spdlog::info("ringtrain controller {} starting: server {}, namespace {}, leader election {}",
               f.identity, config->server, f.ns.empty() ? "(all)" : f.ns,
               f.leader_elect ? "on" : "off");
  oper->Start();
  int rc = 0;
  for (;;) {
    if (stop != nullptr && stop->load()) break;
    if (oper->LostLeadership()) {
      rc = 1;
      break;
    }
    if (signals != nullptr) {
      timespec ts{0, 200'000'000};
      int sig = ::sigtimedwait(signals, nullptr, &ts);
      if (sig > 0) {
        spdlog::info("signal {}: shutting down", sig);
        break;
      }
    } else {
      std::this_thread::sleep_for(Duration(50));
    }
  }
  stopping = true;
  oper->Stop();
  if (metrics_server) metrics_server->Stop();
  if (health_server) health_server->Stop();
  spdlog::info("ringtrain controller stopped");
  return rc;
}

}  // namespace

int RunControllerCommand(const std::vector<std::string>& args) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  // Blocked before any thread starts, so every thread inherits the mask and only sigtimedwait
  // sees them.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return Run(args, nullptr, &signals);
}

int RunControllerCommand(const std::vector<std::string>& args, const std::atomic<bool>* stop) {
  return Run(args, stop, nullptr);
}

}  // namespace ringtrain::op
