// What kube-apiserver's admission and core validation refuse that the operator's children can
// run into on a real cluster, with the real messages (tests/fakes/apiserver/transcripts/t3-*): the
// Pod Security Standard "restricted" (t3-03), a ResourceQuota on pods (t3-04), DNS-1035 Service
// names (t3-02) and the PersistentVolumeClaim rules (t3-05). Pure functions on JSON; no storage, no
// HTTP.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/clock.h"

namespace ringtrain::fake {

inline constexpr char kEnforceLabel[] = "pod-security.kubernetes.io/enforce";
inline constexpr char kPvcProtectionFinalizer[] = "kubernetes.io/pvc-protection";

// The violations of the restricted profile, joined as the PodSecurity plugin does
// ("allowPrivilegeEscalation != false (container \"runner\" must set ...), ..."); nullopt when
// the pod complies. Checks: allowPrivilegeEscalation, capabilities drop ALL, runAsNonRoot,
// seccompProfile (the ones the recording shows; init containers included).
std::optional<std::string> RestrictedViolations(const nlohmann::json& pod);

// Service names are DNS-1035 labels: a lower-case letter first.
bool IsDns1035Label(const std::string& name);
std::string Dns1035Message(const std::string& name);

// "exceeded quota: pods-1, requested: pods=1, used: pods=1, limited: pods=1" when one more pod
// would exceed `quota`'s spec.hard.pods; nullopt otherwise.
std::optional<std::string> PodQuotaExceeded(const nlohmann::json& quota, std::int64_t used_pods);

// Whether a pod still counts against a pods quota at `now`: not Succeeded or Failed, nor
// terminating past its deletionTimestamp plus its grace (quota's QuotaV1Pod: a pod stuck
// terminating on a lost node is not charged).
bool CountsAgainstPodQuota(const nlohmann::json& pod, WallTime now);

// The cause message of changing an unbound claim's spec: "Forbidden: spec is immutable after
// creation except resources.requests for bound claims\n" and Go's cmp.Diff of the two specs.
// The diff is the recorded one (a changed storage request of a claim with accessModes,
// resources.requests.storage and maybe storageClassName); any other change gets the first line.
std::string PvcSpecImmutableMessage(const nlohmann::json& old_spec, const nlohmann::json& new_spec);

// Whether the pod mounts the claim (spec.volumes[].persistentVolumeClaim.claimName).
bool PodUsesClaim(const nlohmann::json& pod, const std::string& claim);

}  // namespace ringtrain::fake
