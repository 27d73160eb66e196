// A kubelet stand-in for end-to-end tests: polls the fake API server's pods and runs each new
// pod's runner as a local process, then reports phase, podIP and the container's exit code and
// termination message through the pods' status. It binds the pods it runs to its node
// (kNodeName), so a deleted pod stays Terminating, as on a cluster, while its process gets
// SIGTERM and, after deletionGracePeriodSeconds (at least 2 s, as kuberuntime gives; a second,
// shorter delete brings it forward), SIGKILL; once the process has ended the kubelet reports how
// and deletes the pod with grace 0. A pod removed outright (grace 0) loses its process at once.
//
// How a pod becomes a local process (all pods share 127.0.0.1):
//  - command[0] "ringtrain-runner" becomes options.runner_path; args are kept;
//  - env: values as given; secretKeyRef resolved from the Secret; fieldRef status.podIP →
//    127.0.0.1, metadata.name/namespace; MASTER_ADDR/RINGTRAIN_MASTER_ADDR → 127.0.0.1;
//    MASTER_PORT/RINGTRAIN_MASTER_PORT → a free port per (namespace, job, attempt);
//    RINGTRAIN_METRICS_PORT → a free port per pod (no port is handed out twice:
//    common/port_picker.h), written back to the pod's annotation
//    ringtrain.dev/metrics-port, which is where the operator reads rank 0's /status
//    (podIP 127.0.0.1); RINGTRAIN_TERMINATION_LOG → a file in options.workdir.
//  - a pod whose Secret is missing waits (as CreateContainerConfigError would).
//  - downwardAPI volumes of annotations become files under options.workdir, rewritten every
//    poll from the pod's annotations (as the kubelet does on an update); env values that name a
//    path under such a volume's mountPath are pointed at those files (RINGTRAIN_GANG_GATE).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/port_picker.h"
#include "common/process.h"
#include "tests/fakes/apiserver/fake_apiserver.h"

namespace ringtrain::fake {

struct FakeKubeletOptions {
  std::string runner_path;  // $RINGTRAIN_BUILD_DIR/bin/ringtrain-runner
  std::string workdir;      // logs and termination logs
  std::chrono::milliseconds poll{50};
  // Where free ports come from: the kernel's bind(0); tests script a kernel that repeats one.
  net::PortPicker::Probe port_probe = &net::PortPicker::BindAndRelease;
};

class FakeKubelet {
 public:
  static constexpr char kNodeName[] = "fake-kubelet";
  // kuberuntime's minimumGracePeriodInSeconds: a shorter grace still gets this long.
  static constexpr Duration kMinGrace{std::chrono::seconds(2)};

  FakeKubelet(FakeApiServer* server, FakeKubeletOptions options);
  ~FakeKubelet();
  FakeKubelet(const FakeKubelet&) = delete;
  FakeKubelet& operator=(const FakeKubelet&) = delete;

  void Start();
  // Kills every process and stops polling.
  void Stop();

  // Sends `signal` to the running process of the pod; false if there is none.
  bool Signal(const std::string& ns, const std::string& pod, int signal);
  // Pods ever started (a process was spawned for them), by name.
  std::set<std::string> Started() const;
  int Running() const;

 private:
  // One file of a downwardAPI volume: metadata.annotations['key'] → path.
  struct Projection {
    std::string path;
    std::string annotation;
  };
  struct Proc {
    std::vector<Projection> projections;
    std::string ns;
    std::string name;
    std::string uid;
    ChildProcess child;
    std::string termination_log;
    std::string log;
    // Once its pod is terminating: SIGTERM sent, the grace it runs with, when SIGKILL follows.
    bool stopping = false;
    std::int64_t grace_seconds = 0;
    SteadyTime kill_at{};
  };
  void Loop();
  void Tick();
  void StartPod(const nlohmann::json& pod);
  void Project(const nlohmann::json& pod, const std::vector<Projection>& projections);
  void Reap();

  FakeApiServer* server_;
  const FakeKubeletOptions options_;
  net::PortPicker ports_;
  mutable std::mutex mu_;
  std::map<std::string, Proc> procs_;  // by pod uid
  std::map<std::string, int> master_ports_;
  std::set<std::string> started_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ringtrain::fake
