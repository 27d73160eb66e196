// The operator at scale: N TrainingJobs of R replicas created at once against the fake API
// server (no kubelet: pods are only created). Reports the time until every pod exists, the
// reconcile duration p50/p99 and the controller's peak RSS (VmHWM). The fake API server runs
// as a separate process (the fake-apiserver binary next to this one) so its memory is not
// counted; --in-process runs it inside instead. Not a test: numbers only.
//   controller_bench [--jobs 500] [--replicas 8] [--workers 4] [--qps 2000] [--in-process]
//                    [--crd manifests/crd/trainingjobs.ringtrain.dev.yaml]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "controller/executors/kubernetes/operator.h"
#include "controller/kube/kube_config.h"
#include "tests/fakes/apiserver/fake_apiserver.h"

using namespace ringtrain;

namespace {

long StatusKb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field) + 1);
  }
  return -1;
}

std::string SelfDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return std::filesystem::path(buf).parent_path().string();
}

// Starts bin/fake-apiserver and reads its URL from the first line of its stdout.
std::string SpawnServer(pid_t* pid) {
  int fds[2];
  if (::pipe(fds) != 0) return "";
  const std::string path = SelfDir() + "/fake-apiserver";
  *pid = ::fork();
  if (*pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::execl(path.c_str(), path.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string url;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') url.push_back(c);
  ::close(fds[0]);
  return url;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 500, replicas = 8, workers = 4;
  double qps = 2000;
  bool in_process = false;
  std::string crd_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atof(argv[++i]) : 0.0; };
    if (a == "--jobs") {
      jobs = static_cast<int>(next());
    } else if (a == "--replicas") {
      replicas = static_cast<int>(next());
    } else if (a == "--workers") {
      workers = static_cast<int>(next());
    } else if (a == "--qps") {
      qps = next();
    } else if (a == "--crd" && i + 1 < argc) {
      crd_path = argv[++i];
    } else if (a == "--in-process") {
      in_process = true;
    } else {
      std::fprintf(stderr,
                   "usage: controller_bench [--jobs N] [--replicas R] [--workers W] [--qps Q] "
                   "[--in-process] [--crd PATH]\n");
      return 2;
    }
  }
  InitLogging("bench", "warn");

  std::unique_ptr<fake::FakeApiServer> server;
  pid_t server_pid = -1;
  std::string url;
  if (in_process) {
    server = fake::FakeApiServer::Create();
    if (!server->Start().ok()) return 1;
    url = server->url();
  } else {
    url = SpawnServer(&server_pid);
    if (url.empty()) {
      std::fprintf(stderr, "cannot start %s/fake-apiserver\n", SelfDir().c_str());
      return 1;
    }
  }
  kube::KubeConfig config;
  config.server = url;
  kube::ClientOptions copts;
  copts.qps = qps;
  copts.burst = static_cast<int>(qps);
  copts.user_agent = "controller-bench/admin";
  auto admin = kube::NewKubeClient(config, copts);
  if (!admin.ok()) return 1;
  if (crd_path.empty()) {
    crd_path = "manifests/crd/trainingjobs.ringtrain.dev.yaml";
    // A build folder inside the source tree (build/bin/controller_bench).
    if (!std::filesystem::exists(crd_path)) crd_path = SelfDir() + "/../../" + crd_path;
  }
  auto crd = (*admin)->Create(kube::kCustomResourceDefinitions, "",
                              fake::YamlToJson(YAML::LoadFile(crd_path)));
  if (!crd.ok()) {
    std::fprintf(stderr, "CRD: %s\n", crd.status().ToString().c_str());
    return 1;
  }
  for (int i = 0;; ++i) {
    auto list = (*admin)->List(kube::kTrainingJobs, "default", {});
    if (list.ok()) break;
    if (i == 500) {
      std::fprintf(stderr, "the CRD is not served: %s\n", list.status().ToString().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  copts.user_agent = "controller-bench/controller";
  auto client = kube::NewKubeClient(config, copts);
  if (!client.ok()) return 1;
  op::ControllerMetrics metrics;
  op::OperatorOptions options;
  options.workers = workers;
  auto oper = op::Operator::Create(client->get(), options, &metrics);
  if (!oper.ok()) return 1;
  (*oper)->Start();
  for (int i = 0; !(*oper)->Ready(); ++i) {
    if (i == 3000) {
      std::fprintf(stderr, "the operator's informers never synced\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const long rss_idle_kb = StatusKb("VmRSS:");

  // All jobs at once: 8 creating threads.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> creators;
  std::atomic<int> create_errors{0};
  for (int t = 0; t < 8; ++t) {
    creators.emplace_back([&, t] {
      auto c = kube::NewKubeClient(config, copts);
      if (!c.ok()) return;
      for (int j = t; j < jobs; j += 8) {
        nlohmann::json job = {
            {"apiVersion", "ringtrain.dev/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", "bench-" + std::to_string(j)}, {"namespace", "default"}}},
            {"spec", {{"replicas", replicas}, {"train", {{"epochs", 1}}}}}};
        if (!(*c)->Create(kube::kTrainingJobs, "default", job).ok()) ++create_errors;
      }
    });
  }
  for (auto& t : creators) t.join();
  const double created_s = SecondsSince(t0);

  const std::int64_t want = static_cast<std::int64_t>(jobs) * replicas;
  double all_pods_s = -1;
  auto deadline = t0 + std::chrono::minutes(10);
  std::int64_t seen = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    // The pods_created counter is cheap; a List then confirms what the API server holds.
    std::string text = metrics.RenderText();
    const char kSample[] = "\nringtrain_controller_pods_created_total ";
    auto at = text.find(kSample);
    std::int64_t created =
        at == std::string::npos ? 0 : std::atoll(text.c_str() + at + std::strlen(kSample));
    if (created >= want) {
      all_pods_s = SecondsSince(t0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Every create was answered 201; confirm with the API server, job by job (small lists).
  for (int j = 0; j < jobs && all_pods_s >= 0; ++j) {
    auto list =
        (*admin)->List(kube::kPods, "default", {"ringtrain.dev/job=bench-" + std::to_string(j)});
    if (list.ok()) seen += static_cast<std::int64_t>((*list)["items"].size());
  }
  // Let the status writes that follow settle before reading the percentiles.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double p50 = metrics.ReconcileQuantile(0.5), p99 = metrics.ReconcileQuantile(0.99);
  const std::size_t reconciles = metrics.ReconcileCount();
  (*oper)->Stop();
  const long hwm_kb = StatusKb("VmHWM:");

  std::printf(
      "{\"jobs\": %d, \"replicas\": %d, \"workers\": %d, \"client_qps\": %.0f, "
      "\"fake_apiserver\": \"%s\",\n"
      " \"create_jobs_seconds\": %.3f, \"create_errors\": %d,\n"
      " \"all_pods_exist_seconds\": %.3f, \"pods\": %lld,\n"
      " \"reconciles\": %zu, \"reconcile_p50_ms\": %.3f, \"reconcile_p99_ms\": %.3f,\n"
      " \"controller_rss_idle_mb\": %.1f, \"controller_peak_rss_mb\": %.1f}\n",
      jobs, replicas, workers, qps, in_process ? "in-process" : "separate process", created_s,
      create_errors.load(), all_pods_s, static_cast<long long>(seen), reconciles, p50 * 1e3,
      p99 * 1e3, rss_idle_kb / 1024.0, hwm_kb / 1024.0);
  if (server_pid > 0) {
    ::kill(server_pid, SIGTERM);
    ::waitpid(server_pid, nullptr, 0);
  }
  return all_pods_s < 0 ? 1 : 0;
}
