#include "tests/fakes/kubelet/fake_kubelet.h"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/base64.h"
#include "common/net.h"
#include "common/runner_env.h"
#include "common/time_format.h"
#include "tests/fakes/apiserver/wire.h"

extern char** environ;

namespace ringtrain::fake {
namespace {

using nlohmann::json;

const ResourceId kPods{"", "pods"};
const ResourceId kSecrets{"", "secrets"};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// FallbackToLogsOnError: the last lines of the log when the termination log is empty.
std::string LastLines(const std::string& text, std::size_t max_bytes) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t.size() > max_bytes ? t.substr(t.size() - max_bytes) : t;
}

std::string Meta(const json& obj, const char* key) {
  return obj.value("/metadata"_json_pointer, json::object()).value(key, "");
}

}  // namespace

FakeKubelet::FakeKubelet(FakeApiServer* server, FakeKubeletOptions options)
    : server_(server), options_(std::move(options)), ports_(options_.port_probe) {}

FakeKubelet::~FakeKubelet() { Stop(); }

void FakeKubelet::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void FakeKubelet::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [uid, p] : procs_) {
    if (p.child.running()) (void)p.child.Terminate(Duration::zero());
  }
}

bool FakeKubelet::Signal(const std::string& ns, const std::string& pod, int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [uid, p] : procs_) {
    if (p.ns == ns && p.name == pod && p.child.running()) return p.child.Signal(signal);
  }
  return false;
}

std::set<std::string> FakeKubelet::Started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

int FakeKubelet::Running() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [uid, p] : procs_) n += p.child.running() ? 1 : 0;
  return n;
}

void FakeKubelet::Loop() {
  while (!stop_) {
    Tick();
    std::this_thread::sleep_for(options_.poll);
  }
}

void FakeKubelet::Tick() {
  std::vector<json> pods = server_->ListObjects(kPods, "");
  std::set<std::string> live;
  std::map<std::string, std::int64_t> terminating;  // uid → the grace its delete asked for
  for (const auto& pod : pods) {
    const std::string uid = Meta(pod, "uid");
    bool deleting = pod["metadata"].contains("deletionTimestamp");
    if (!deleting) live.insert(uid);
    bool known;
    std::vector<Projection> projections;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = procs_.find(uid);
      known = it != procs_.end();
      if (known) projections = it->second.projections;
    }
    if (known) Project(pod, projections);
    if (deleting) {
      const json& m = pod["metadata"];
      terminating[uid] = m.value("deletionGracePeriodSeconds", std::int64_t{0});
      // Bound here and nothing of it runs (never started: a Secret it waited for): let it go.
      if (!known && pod.value("/spec/nodeName"_json_pointer, std::string()) == kNodeName) {
        (void)server_->DeleteObject(kPods, Meta(pod, "namespace"), Meta(pod, "name"), 0);
      }
    }
    if (!known && !deleting && pod.value("/status/phase"_json_pointer, "Pending") == "Pending") {
      StartPod(pod);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const SteadyTime now = std::chrono::steady_clock::now();
    for (auto& [uid, p] : procs_) {
      if (!p.child.running() || live.count(uid)) continue;
      const auto it = terminating.find(uid);
      if (it == terminating.end()) {
        // Gone from the API (deleted with grace 0): its process goes at once.
        p.child.RequestTerminate(Duration::zero());
        continue;
      }
      // Terminating: SIGTERM, SIGKILL after the grace; a shorter grace asked for since counts
      // from now, as a kubelet's next StopContainer does.
      const SteadyTime kill_at =
          now + std::max<Duration>(std::chrono::seconds(it->second), kMinGrace);
      if (!p.stopping) {
        p.stopping = true;
        p.grace_seconds = it->second;
        p.kill_at = kill_at;
        (void)p.child.Signal(SIGTERM);
      } else if (it->second < p.grace_seconds) {
        p.grace_seconds = it->second;
        p.kill_at = std::min(p.kill_at, kill_at);
      }
      if (now >= p.kill_at) p.child.RequestTerminate(Duration::zero());
    }
  }
  Reap();
}

void FakeKubelet::Project(const json& pod, const std::vector<Projection>& projections) {
  const json annotations = pod.value("/metadata/annotations"_json_pointer, json::object());
  for (const auto& p : projections) {
    const std::string value = annotations.value(p.annotation, "");
    if (ReadFile(p.path) == value) continue;
    // Written beside and renamed, so a reader never sees half a value (the kubelet's atomic
    // writer swaps a symlink for the same reason).
    const std::string tmp = p.path + ".tmp";
    std::ofstream(tmp, std::ios::trunc) << value;
    std::rename(tmp.c_str(), p.path.c_str());
  }
}

void FakeKubelet::StartPod(const json& pod) {
  const std::string ns = Meta(pod, "namespace");
  const std::string name = Meta(pod, "name");
  const std::string uid = Meta(pod, "uid");
  const json labels = pod.value("/metadata/labels"_json_pointer, json::object());
  const std::string job = labels.value("ringtrain.dev/job", name);
  const std::string attempt = labels.value("ringtrain.dev/attempt", "0");
  const json& c = pod["spec"]["containers"][0];

  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& e : c.value("env", json::array())) {
    const std::string key = e.value("name", "");
    if (e.contains("value")) {
      env[key] = e.value("value", "");
    } else if (e.contains("valueFrom")) {
      const json& from = e["valueFrom"];
      if (from.contains("secretKeyRef")) {
        auto secret = server_->GetObject(kSecrets, ns, from["secretKeyRef"].value("name", ""));
        if (!secret) return;  // CreateContainerConfigError: try again next tick
        auto decoded = Base64Decode(secret->value("/data"_json_pointer, json::object())
                                        .value(from["secretKeyRef"].value("key", ""), ""));
        env[key] = decoded.value_or("");
      } else if (from.contains("fieldRef")) {
        const std::string path = from["fieldRef"].value("fieldPath", "");
        env[key] = path == "status.podIP"         ? "127.0.0.1"
                   : path == "metadata.name"      ? name
                   : path == "metadata.namespace" ? ns
                                                  : "";
      }
    }
  }
  // 0 (any port) when none is left: the runner then fails to be reached, as a misconfigured
  // pod would.
  auto pick_port = [this] {
    auto port = ports_.Pick();
    return port.ok() ? *port : 0;
  };
  const std::string port_key = ns + "/" + job + "/" + attempt;
  int master_port;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!master_ports_.count(port_key)) master_ports_[port_key] = pick_port();
    master_port = master_ports_[port_key];
  }
  const int metrics_port = pick_port();
  env[contract::kEnvTorchMasterAddr] = env[contract::kEnvMasterAddr] = "127.0.0.1";
  env[contract::kEnvTorchMasterPort] = env[contract::kEnvMasterPort] = std::to_string(master_port);
  env[contract::kEnvMetricsPort] = std::to_string(metrics_port);
  Proc p;
  p.ns = ns;
  p.name = name;
  p.uid = uid;
  p.termination_log = options_.workdir + "/" + name + "." + uid.substr(0, 8) + ".termination-log";
  p.log = options_.workdir + "/" + name + "." + uid.substr(0, 8) + ".log";
  env[contract::kEnvTerminationLog] = p.termination_log;
  // downwardAPI volumes of annotations: files in the workdir, env paths under the mount moved.
  for (const auto& m : c.value("volumeMounts", json::array())) {
    const std::string volume = m.value("name", "");
    const std::string mount = m.value("mountPath", "");
    for (const auto& v : pod["spec"].value("volumes", json::array())) {
      if (v.value("name", "") != volume || !v.contains("downwardAPI")) continue;
      const std::string dir = options_.workdir + "/" + name + "." + uid.substr(0, 8) + "." + volume;
      ::mkdir(dir.c_str(), 0755);
      for (const auto& item : v["downwardAPI"].value("items", json::array())) {
        const std::string field = item.value("/fieldRef/fieldPath"_json_pointer, std::string());
        const std::string prefix = "metadata.annotations['";
        if (!field.starts_with(prefix) || !field.ends_with("']")) continue;
        p.projections.push_back({dir + "/" + item.value("path", ""),
                                 field.substr(prefix.size(), field.size() - prefix.size() - 2)});
      }
      for (auto& [k, value] : env) {
        if (value.starts_with(mount + "/")) value = dir + value.substr(mount.size());
      }
    }
  }
  Project(pod, p.projections);

  std::vector<std::string> argv;
  for (const auto& a : c.value("command", json::array())) argv.push_back(a.get<std::string>());
  for (const auto& a : c.value("args", json::array())) argv.push_back(a.get<std::string>());
  if (argv.empty()) return;
  if (argv[0] == "ringtrain-runner") argv[0] = options_.runner_path;

  // The port map first, so the operator never polls a port nobody serves; bound to this node as
  // a scheduler's binding would (a deleted pod then stays Terminating until deleted with 0).
  (void)server_->PatchObject(
      kPods, ns, name,
      {{"metadata",
        {{"annotations", {{"ringtrain.dev/metrics-port", std::to_string(metrics_port)}}}}},
       {"spec", {{"nodeName", kNodeName}}}});

  SpawnOptions spawn;
  spawn.log_path = p.log;
  auto child = ChildProcess::Spawn(argv, env, spawn);
  if (!child.ok()) return;
  p.child = std::move(*child);
  {
    std::lock_guard<std::mutex> lock(mu_);
    procs_[uid] = std::move(p);
    started_.insert(name);
  }
  const std::string now = FormatRfc3339(std::chrono::system_clock::now());
  (void)server_->PatchStatus(
      kPods, ns, name,
      {{"phase", "Running"},
       {"podIP", "127.0.0.1"},
       {"startTime", now},
       {"containerStatuses", json::array({{{"name", c.value("name", "runner")},
                                           {"ready", true},
                                           {"restartCount", 0},
                                           {"state", {{"running", {{"startedAt", now}}}}}}})}});
}

void FakeKubelet::Reap() {
  struct Exited {
    std::string ns, name, uid, termination_log, log;
    int code = 0;
  };
  std::vector<Exited> exited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [uid, proc] : procs_) {
      if (!proc.child.running() || !proc.child.Poll()) continue;
      exited.push_back(
          {proc.ns, proc.name, proc.uid, proc.termination_log, proc.log, proc.child.exit_code()});
    }
  }
  // The API is written outside the lock: Signal and Running never wait on the server.
  for (const Exited& p : exited) {
    const int code = p.code;
    std::string message = LastLines(ReadFile(p.termination_log), 4096);
    if (message.empty() && code != 0) message = LastLines(ReadFile(p.log), 2048);
    auto pod = server_->GetObject(kPods, p.ns, p.name);
    if (!pod || Meta(*pod, "uid") != p.uid) continue;
    const bool deleting = (*pod)["metadata"].contains("deletionTimestamp");
    const std::string now = FormatRfc3339(std::chrono::system_clock::now());
    json terminated = {{"exitCode", code},
                       {"reason", code == 0 ? "Completed" : "Error"},
                       {"startedAt", pod->value("/status/startTime"_json_pointer, now)},
                       {"finishedAt", now}};
    if (!message.empty()) terminated["message"] = message;
    (void)server_->PatchStatus(
        kPods, p.ns, p.name,
        {{"phase", code == 0 ? "Succeeded" : "Failed"},
         {"containerStatuses",
          json::array({{{"name", (*pod)["spec"]["containers"][0].value("name", "runner")},
                        {"ready", false},
                        {"restartCount", 0},
                        {"state", {{"terminated", terminated}}}}})}});
    // A terminating pod whose process has ended: what a kubelet sends last (v1.28).
    if (deleting) (void)server_->DeleteObject(kPods, p.ns, p.name, 0);
  }
}

}  // namespace ringtrain::fake
