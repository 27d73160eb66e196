#!/usr/bin/env bash
# The container kubelet (tests/fakes/container_kubelet) on its own, with small pods in the CPU
# runner image: env from a Secret and the downward API (status.podIP known before the start),
# CPU limit, exit code, reason (Completed, Error, OOMKilled) and termination message (the file,
# or the log with FallbackToLogsOnError), securityContext (non-root user, read-only root, no
# capabilities, no privilege escalation, runAsNonRoot refusing root), a PVC folder writable only
# through fsGroup and outliving its pod, an image that is not there (imagePullPolicy Never), and
# pod deletion: SIGTERM (the runner, PID 1 of its container, stops on it), then SIGKILL after
# the grace period.
source "$(dirname "$0")/container_lib.sh"
start_fake_cluster
start_container_kubelet
img=$RUNNER_IMAGE
mkdir -p "$WORK/hostout"
chmod 0777 "$WORK/hostout"

k create secret generic s1 --from-literal=token=sekret >/dev/null || fail "secret"
# Where the API server serves PVCs the claim must exist (the kubelet binds it); else a claim is
# a folder by name.
# (The list first: under pipefail, `k api-resources | grep -q` fails whenever grep exits before
# kubectl has written everything, and the claim was then never created.)
resources=$(k api-resources 2>/dev/null || true)
if grep -q '^persistentvolumeclaims ' <<<"$resources"; then
  k apply -f - >/dev/null <<YAML || fail "PVC apply"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
YAML
fi
pod() {  # pod NAME SPEC-JSON: a pod of one container named c
  python3 -c 'import json,sys; s=json.loads(sys.argv[2]); s.setdefault("restartPolicy","Never")
print(json.dumps({"apiVersion":"v1","kind":"Pod","metadata":{"name":sys.argv[1]},"spec":s}))' \
    "$1" "$2" | k apply -f - >/dev/null || fail "pod $1 apply"
}
cmd() { python3 -c 'import json,sys; print(json.dumps(["bash","-c",sys.argv[1]]))' "$1"; }

pod env-pod '{"containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'printf "%s %s %s %s" "$TOKEN" "$MY_NAME" "$MY_IP" "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d" " -f1 /sys/fs/cgroup/cpu.max)" > /dev/termination-log')"',
  "resources":{"limits":{"cpu":"500m"}},
  "env":[{"name":"TOKEN","valueFrom":{"secretKeyRef":{"name":"s1","key":"token"}}},
         {"name":"MY_NAME","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
         {"name":"MY_IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}}]}]}'
pod fail-pod '{"containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'echo to-the-log; exit 3')"',
  "terminationMessagePolicy":"FallbackToLogsOnError"}]}'
pod oom-pod '{"containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'x=$(head -c 300000000 /dev/zero | tr "\0" a); echo survived')"',
  "resources":{"limits":{"memory":"32Mi"}}}]}'
pod ro-pod '{"securityContext":{"runAsNonRoot":true,"runAsUser":65532,"runAsGroup":65532},
  "volumes":[{"name":"scratch","emptyDir":{}}],
  "containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'exec > /dev/termination-log; id -u; touch /rootfile 2>/dev/null && echo rootfs-writable; touch /scratch/f && echo scratch-ok; grep -E "^(CapEff|NoNewPrivs)" /proc/self/status | tr -d "\t"')"',
  "volumeMounts":[{"name":"scratch","mountPath":"/scratch"}],
  "securityContext":{"readOnlyRootFilesystem":true,"allowPrivilegeEscalation":false,
                     "capabilities":{"drop":["ALL"]}}}]}'
pod root-pod '{"securityContext":{"runAsNonRoot":true,"runAsUser":0},
  "containers":[{"name":"c","image":"'"$img"'","command":["true"]}]}'
pod never-pod '{"containers":[{"name":"c","image":"localhost/no-such-image:1","imagePullPolicy":"Never"}]}'
pod pvc-nogroup '{"volumes":[{"name":"d","persistentVolumeClaim":{"claimName":"data"}}],
  "containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'touch /data/x 2>/dev/termination-log')"',
  "volumeMounts":[{"name":"d","mountPath":"/data"}]}]}'
pod term-pod '{"terminationGracePeriodSeconds":20,
  "volumes":[{"name":"o","hostPath":{"path":"'"$WORK/hostout"'"}}],
  "containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'trap "echo got-SIGTERM > /out/term; exit 0" TERM; while :; do sleep 0.1; done')"',
  "volumeMounts":[{"name":"o","mountPath":"/out"}]}]}'
pod stubborn-pod '{"terminationGracePeriodSeconds":5,
  "containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'trap "" TERM; while :; do sleep 0.1; done')"'}]}'
# Deleted with a grace shorter than its own (as the operator deletes ranks with nothing to save).
pod hasty-pod '{"terminationGracePeriodSeconds":600,
  "containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'trap "" TERM; while :; do sleep 0.1; done')"'}]}'
# Deleted with its own grace, then again with a shorter one while it stops (kubectl delete
# --grace-period=1 of a pod already terminating): the second delete brings the SIGKILL forward.
pod slow-pod '{"terminationGracePeriodSeconds":600,
  "containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'trap "" TERM; while :; do sleep 0.1; done')"'}]}'
# The runner image's default checkpoint path is writable by its user without any volume.
pod ckpt-pod '{"containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'touch /ckpt/probe && id -u > /dev/termination-log')"'}]}'
# The real runner as PID 1 of its container (a gang of one): SIGTERM must stop it.
pod runner-pod '{"terminationGracePeriodSeconds":30,
  "containers":[{"name":"c","image":"'"$img"'",
  "args":["--dataset","/usr/share/datasets/fashion-mnist","--epochs","50"],
  "env":[{"name":"RINGTRAIN_JOB","value":"solo"},{"name":"RINGTRAIN_RANK","value":"0"},
         {"name":"RINGTRAIN_WORLD_SIZE","value":"1"},{"name":"RINGTRAIN_TOKEN","value":"t"},
         {"name":"RINGTRAIN_MASTER_ADDR","value":"127.0.0.1"},
         {"name":"RINGTRAIN_MASTER_PORT","value":"29500"}]}]}'

field() { k get pod "$1" -o "jsonpath=$2"; }
term() { field "$1" "{.status.containerStatuses[0].state.terminated.$2}"; }
phase_is() { [ "$(field "$1" '{.status.phase}')" = "$2" ]; }
waiting_is() { [ "$(field "$1" '{.status.containerStatuses[0].state.waiting.reason}')" = "$2" ]; }
expect() {  # expect WHAT GOT WANTED
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
  echo "ok: $1 = '$3'"
}

wait_until 120 "env-pod Succeeded" phase_is env-pod Succeeded
ip=$(field env-pod '{.status.podIP}')
expect "env-pod message (secret, name, podIP, CPU quota)" "$(term env-pod message)" "sekret env-pod $ip 50000"
expect "env-pod reason" "$(term env-pod reason)" Completed
[[ "$ip" == 10.89.* ]] || fail "podIP '$ip' is not on the pod network"

wait_until 120 "fail-pod Failed" phase_is fail-pod Failed
expect "fail-pod exit code" "$(term fail-pod exitCode)" 3
expect "fail-pod reason" "$(term fail-pod reason)" Error
expect "fail-pod message (log fallback)" "$(term fail-pod message)" to-the-log

wait_until 120 "oom-pod Failed" phase_is oom-pod Failed
expect "oom-pod reason" "$(term oom-pod reason)" OOMKilled
expect "oom-pod exit code" "$(term oom-pod exitCode)" 137

wait_until 120 "ro-pod Succeeded" phase_is ro-pod Succeeded
expect "ro-pod message" "$(term ro-pod message | tr '\n' ' ')" \
  "65532 scratch-ok CapEff:0000000000000000 NoNewPrivs:1 "

finished() { phase_is "$1" Succeeded || phase_is "$1" Failed; }
wait_until 120 "ckpt-pod done" finished ckpt-pod
expect "ckpt-pod: /ckpt writable by the image's user" "$(term ckpt-pod message)" 65532

wait_until 60 "root-pod refused" waiting_is root-pod CreateContainerConfigError
phase_is root-pod Pending || fail "root-pod should stay Pending"
echo "ok: root-pod refused: $(field root-pod '{.status.containerStatuses[0].state.waiting.message}')"
wait_until 60 "never-pod ErrImageNeverPull" waiting_is never-pod ErrImageNeverPull
echo "ok: never-pod: $(field never-pod '{.status.containerStatuses[0].state.waiting.message}')"

# A claim's folder is root-owned like a fresh volume: not writable by 65532 without fsGroup...
wait_until 120 "pvc-nogroup Failed" phase_is pvc-nogroup Failed
grep -q "Permission denied" <<<"$(term pvc-nogroup message)" ||
  fail "pvc-nogroup: expected Permission denied, got '$(term pvc-nogroup message)'"
echo "ok: a PVC without fsGroup is not writable by 65532"
# ...with fsGroup it is, and what a pod wrote is still there for the next pod.
pod pvc-writer '{"securityContext":{"fsGroup":65532},
  "volumes":[{"name":"d","persistentVolumeClaim":{"claimName":"data"}}],
  "containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'echo kept > /data/x')"',
  "volumeMounts":[{"name":"d","mountPath":"/data"}]}]}'
wait_until 120 "pvc-writer Succeeded" phase_is pvc-writer Succeeded
k delete pod pvc-writer >/dev/null || fail "delete pvc-writer"
pod pvc-reader '{"securityContext":{"fsGroup":65532},
  "volumes":[{"name":"d","persistentVolumeClaim":{"claimName":"data"}}],
  "containers":[{"name":"c","image":"'"$img"'","command":'"$(cmd 'cat /data/x > /dev/termination-log')"',
  "volumeMounts":[{"name":"d","mountPath":"/data"}]}]}'
wait_until 120 "pvc-reader Succeeded" phase_is pvc-reader Succeeded
expect "pvc-reader message" "$(term pvc-reader message)" kept

# Deletion: SIGTERM first (the pod's handler runs), SIGKILL after the grace period.
wait_until 120 "term-pod Running" phase_is term-pod Running
wait_until 120 "stubborn-pod Running" phase_is stubborn-pod Running
wait_until 120 "hasty-pod Running" phase_is hasty-pod Running
wait_until 120 "slow-pod Running" phase_is slow-pod Running
expect "hasty-pod's node (the kubelet binds the pods it runs)" "$(field hasty-pod '{.spec.nodeName}')" container-kubelet
wait_until 120 "runner-pod training" grep -q "epoch 1/" "$WORK/kubelet/logs/default_runner-pod.log"
k delete pod term-pod stubborn-pod runner-pod --wait=false >/dev/null || fail "delete"
k delete pod hasty-pod --grace-period=1 --wait=false >/dev/null || fail "delete hasty-pod"
k delete pod slow-pod --wait=false >/dev/null || fail "delete slow-pod"
wait_until 60 "slow-pod's stop with its own grace" grep -q "default/slow-pod: deleted with grace 600s" "$WORK/kubelet.log"
k delete pod slow-pod --grace-period=1 --wait=false >/dev/null || fail "delete slow-pod again"
# A bound pod stays, terminating, until its kubelet has stopped it (t4-05-binding-graceful-delete.txt).
expect "stubborn-pod's grace while it stops" "$(field stubborn-pod '{.metadata.deletionGracePeriodSeconds}')" 5
wait_until 30 "term-pod's SIGTERM handler" grep -q got-SIGTERM "$WORK/hostout/term"
echo "ok: term-pod got SIGTERM"
stopped() { grep -q "default/$1: stopped after .* exit code $2" "$WORK/kubelet.log"; }
wait_until 60 "stubborn-pod SIGKILLed after its grace period" stopped stubborn-pod 137
# Its own grace is 600 s: stopped within the wait only with the 1 s asked for.
wait_until 60 "hasty-pod SIGKILLed after the grace asked for" stopped hasty-pod 137
grep -q "default/hasty-pod: deleted with grace 1s: SIGTERM, SIGKILL after 2s" "$WORK/kubelet.log" ||
  fail "hasty-pod's grace: $(grep hasty-pod "$WORK/kubelet.log")"
echo "ok: hasty-pod stopped with the 1 s grace its delete asked for (2 s at least, as a kubelet), not its own 600 s"
wait_until 60 "slow-pod SIGKILLed after the shorter grace of its second delete" stopped slow-pod 137
grep -q "default/slow-pod: grace shortened to 1s: SIGKILL after 2s" "$WORK/kubelet.log" ||
  fail "slow-pod's grace: $(grep slow-pod "$WORK/kubelet.log")"
echo "ok: slow-pod's second delete shortened its grace from 600 s to 1 s while it stopped"
wait_until 60 "term-pod stopped" stopped term-pod 0
# 143: the runner's retryable "stopped by signal", long before the grace period's SIGKILL (137).
wait_until 60 "the runner stopped by SIGTERM" stopped runner-pod 143
echo "ok: the runner stopped on SIGTERM: $(grep -o 'runner-pod: stopped after [0-9.]*s' "$WORK/kubelet.log")"
gone() { [ -z "$(podman ps -aq --filter "label=io.kubernetes.pod.name=$1")" ]; }
wait_until 60 "term-pod's container removed" gone term-pod
# Once stopped, the kubelet deletes the pod with grace 0.
absent() {
  local out
  out=$(k get pod "$1" 2>&1) && return 1
  grep -q NotFound <<<"$out"
}
for p in term-pod stubborn-pod hasty-pod slow-pod runner-pod; do wait_until 60 "$p gone from the API" absent "$p"; done
echo PASS
