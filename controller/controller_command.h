// `ringtrain controller`: runs the TrainingJob operator until SIGTERM/SIGINT.
//   --kubeconfig PATH       else $KUBECONFIG, else the in-cluster service account
//   --namespace NS          watch one namespace ("" = all, the default)
//   --leader-elect          campaign for a coordination.k8s.io/v1 Lease; only the leader writes
//   --lease-namespace NS    default: the config's namespace (in cluster: the pod's)
//   --lease-name NAME       default: ringtrain-controller-leader
//   --identity ID           default: hostname_<random>
//   --metrics-addr ADDR     default :8080 (/metrics); "" disables
//   --health-addr ADDR      default :8081 (/healthz, /readyz = caches synced); "" disables
//   --runner-image IMAGE    image for jobs that leave spec.image at its default
//   --workers N             default 4
//   --kube-qps Q --kube-burst B   client-side write rate limit (default 50 / 100)
//   --progress-interval-ms MS     how often rank 0's /status is read (default 5000)
//   --log-level LEVEL       trace|debug|info|warn|error
// Exit codes: 0 after a graceful stop, 1 on a startup error or a lost lease, 2 on bad flags.
#pragma once

#include <atomic>
#include <string>
#include <vector>

namespace ringtrain::op {

int RunControllerCommand(const std::vector<std::string>& args);

// The same without signal handling: runs until *stop becomes true (tests, embedding).
int RunControllerCommand(const std::vector<std::string>& args, const std::atomic<bool>* stop);

}  // namespace ringtrain::op
