#!/usr/bin/env bash
# Several ranks in one pod (gpusPerReplica > 1): with RINGTRAIN_NPROC_PER_NODE=2 the runner
# starts one rank per slot (rank = node × 2 + local rank). Two such "pods" form a world of 4
# and train to the end; then a rank killed inside a pod makes that pod's launcher stop its
# other rank and exit with a retryable code and a termination message naming the rank; and a
# SIGTERM to a pod whose ranks wait in the rendezvous stops them all at once (143). Each way
# out, the launcher removes the folder it kept its ranks' termination messages in; the folder
# of a launcher killed with SIGKILL is removed by the next launcher.
# Runs on CPUs (--device cpu): the launcher is the same for GPUs.
source "$(dirname "$0")/lib.sh"
# The launcher's folder goes under $TMPDIR: here, where no other run's can be.
export TMPDIR=$WORK/tmp
mkdir -p "$TMPDIR"
no_rank_folder_left() {
  local left
  left=$(find "$TMPDIR" -maxdepth 1 -name 'ringtrain-ranks-*')
  [ -z "$left" ] || fail "$1: the launcher left $left behind"
}
# rank_folder PID: the folder a launched rank's termination message goes to.
rank_folder() {
  local log
  log=$(tr '\0' '\n' <"/proc/$1/environ" | sed -n 's/^RINGTRAIN_TERMINATION_LOG=//p')
  [ -n "$log" ] || fail "rank $1 has no RINGTRAIN_TERMINATION_LOG"
  dirname "$log"
}

# start_waiting_pod LOG: one pod of a world of 4 whose two ranks wait in the rendezvous for a
# node that never comes; sets pod (the launcher), children (its ranks) and folder (theirs).
start_waiting_pod() {
  RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS=300 start_node 0 4 "$(free_port)" "$1" --epochs 1
  pod=$LAST_PID
  wait_until 120 "both local ranks in the rendezvous" \
    bash -c "[ \$(grep -c 'loaded' '$1') -ge 2 ]"
  children=$(pgrep -P "$pod" || true)
  folder=$(rank_folder "$(echo "$children" | head -n 1)")
}
# no_rank_outlived: none of $children still runs.
no_rank_outlived() {
  for c in $children; do
    if kill -0 "$c" 2>/dev/null; then fail "rank process $c outlived its launcher"; fi
  done
}

# start_node NODE WORLD PORT LOG [runner flags...]
start_node() {
  local node=$1 world=$2 port=$3 log=$4
  shift 4
  RINGTRAIN_JOB=e2e RINGTRAIN_NODE_RANK=$node RINGTRAIN_NPROC_PER_NODE=2 \
    RINGTRAIN_RANK=$((node * 2)) RINGTRAIN_WORLD_SIZE=$world \
    RINGTRAIN_MASTER_ADDR=127.0.0.1 RINGTRAIN_MASTER_PORT=$port RINGTRAIN_TOKEN=secret \
    RINGTRAIN_METRICS_PORT=-1 RINGTRAIN_TERMINATION_LOG=$log.termination \
    "$BIN/ringtrain-runner" --dataset "$DATA" --device cpu "$@" >"$log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
}

# 1. Two pods × two ranks train to the end.
port=$(free_port)
start_node 0 4 "$port" "$WORK/node0.log" --epochs 1 --max-steps 40 --result-file "$WORK/result.json"
n0=$LAST_PID
start_node 1 4 "$port" "$WORK/node1.log" --epochs 1 --max-steps 40
n1=$LAST_PID
wait_exit "$n0" 300
rc0=$RC
wait_exit "$n1" 300
rc1=$RC
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "nodes exited $rc0 and $rc1, expected 0"
grep -q "started 2 local ranks (node 1, ranks 2-3)" "$WORK/node1.log" ||
  fail "node 1 did not start ranks 2 and 3"
[ "$(json_get "$WORK/result.json" world_size)" = 4 ] || fail "world size is not 4"
[ "$(json_get "$WORK/result.json" steps)" = 40 ] || fail "rank 0 did not take 40 steps"
no_rank_folder_left "a finished pod"

# 2. One rank of a pod dies: its launcher stops the other and exits retryably.
port=$(free_port)
export RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS=30
start_node 0 2 "$port" "$WORK/pod.log" --epochs 50 --step-sleep-ms 20
pod=$LAST_PID
wait_until 120 "both local ranks training" \
  bash -c "[ \$(grep -c 'communicator ready' '$WORK/pod.log') -ge 2 ]"
children=$(pgrep -P "$pod" || true)
[ "$(echo "$children" | wc -w)" = 2 ] || fail "expected 2 rank processes, found: $children"
victim=$(echo "$children" | tail -n 1)
folder=$(rank_folder "$victim")
[ -d "$folder" ] || fail "no folder $folder"
kill -9 "$victim"
wait_exit "$pod" 90
echo "launcher exit code: $RC"
[ "$RC" -ge 128 ] || fail "launcher exited $RC, expected a retryable code (128-255)"
grep -q "local rank" "$WORK/pod.log.termination" || fail "termination message does not name the rank"
no_rank_folder_left "a pod whose rank died"
[ ! -e "$folder" ] || fail "a pod whose rank died: $folder left behind"
no_rank_outlived

# 3. SIGTERM (a deleted pod) while the pod's ranks wait for a node that never comes.
start_waiting_pod "$WORK/term.log"
sleep 0.5
kill -TERM "$pod"
# Far below the 300 s rendezvous timeout and the launcher's 15 s grace; generous for CI.
wait_exit "$pod" 30
[ "$RC" = 143 ] || fail "launcher exited $RC after SIGTERM, expected 143"
no_rank_folder_left "a pod stopped by SIGTERM"
[ ! -e "$folder" ] || fail "a pod stopped by SIGTERM: $folder left behind"
no_rank_outlived

# 4. A launcher killed outright (SIGKILL: a second Ctrl-C, the end of a grace period) cannot
# remove its folder; the next launcher here does, and leaves the folders of a launcher that
# still runs, of another pid namespace or host, and of an earlier version (no owner in the name).
start_waiting_pod "$WORK/kill.log"
kill -KILL "$pod"
wait_exit "$pod" 30
for c in $children; do  # their parent-death signal
  wait_until 30 "rank $c ended with its launcher" bash -c "! kill -0 $c 2>/dev/null"
done
[ -d "$folder" ] || fail "no folder $folder after the launcher was killed"
ns=$(readlink /proc/self/ns/pid | tr -dc 0-9).$(cut -c1-8 /proc/sys/kernel/random/boot_id)
start=$(sed 's/.*) //' "/proc/$$/stat" | cut -d' ' -f20)
live=$TMPDIR/ringtrain-ranks-$ns-$$-$start-live01
foreign=$TMPDIR/ringtrain-ranks-1$ns-$$-1-other1
other_host=$TMPDIR/ringtrain-ranks-${ns%.*}.0badb007-$$-1-host01
old=$TMPDIR/ringtrain-ranks-Ab12Cd
mkdir -p "$live" "$foreign" "$other_host" "$old"
port=$(free_port)
start_node 0 2 "$port" "$WORK/next.log" --epochs 1 --max-steps 5
wait_exit "$LAST_PID" 300
[ "$RC" = 0 ] || fail "the next launcher exited $RC, expected 0"
[ ! -e "$folder" ] || fail "the next launcher left $folder, whose launcher was killed"
grep -q "removed $folder, left by a launcher that was killed" "$WORK/next.log" ||
  fail "the next launcher did not say it removed $folder"
for keep in "$live" "$foreign" "$other_host" "$old"; do
  [ -d "$keep" ] || fail "the next launcher removed $keep"
done
echo PASS
