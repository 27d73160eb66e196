#!/usr/bin/env bash
# Rendezvous faults: a timeout names the ranks that never arrived; a wrong token is refused
# with a permanent exit code; a busy port is reported as such; a gang on loopback listens on
# loopback only; a gang of one needs no token and opens no store port; a gang whose ranks run
# other images or other configurations is refused on every rank with one retryable cause.
source "$(dirname "$0")/lib.sh"

# World size 1 without RINGTRAIN_TOKEN: the contract asks for the token only above 1.
port=$(free_port)
start_rank 0 1 "$port" "" "$WORK/alone.log" --epochs 1 --max-steps 3
wait_exit "$LAST_PID" 120
[ "$RC" = 0 ] || fail "world size 1 without a token exited $RC"
# ... and keeps its store in memory: no store server, no store port.
if grep -q "rendezvous store listening" "$WORK/alone.log"; then
  fail "a world of one started a store server"
fi

# The store and metrics ports of a gang on 127.0.0.1 are not open on other interfaces.
port=$(free_port)
mport=$(free_port)
METRICS_PORT=$mport RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS=60 start_rank 0 2 "$port" tok \
  "$WORK/bind.log" --epochs 1
bind=$LAST_PID
wait_until 60 "rank 0 serving the store" grep -q "rendezvous store listening" "$WORK/bind.log"
for p in "$port" "$mport"; do
  listen=$(ss -ltnH "sport = :$p" | awk '{print $4}')
  [ -n "$listen" ] || fail "nothing listens on port $p"
  [ "$listen" = "127.0.0.1:$p" ] || fail "port $p listens on $listen, expected 127.0.0.1:$p"
done
kill "$bind" 2>/dev/null || true
wait_exit "$bind" 30
port=$(free_port)
RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS=3 start_rank 0 3 "$port" tok "$WORK/timeout.log" --epochs 1
wait_exit "$LAST_PID" 60
rc=$RC
[ "$rc" -ge 128 ] || fail "rendezvous timeout exited with $rc, expected retryable"
grep -Eq "ranks 1, 2" "$WORK/timeout.log" || fail "timeout message does not name ranks 1, 2"

port=$(free_port)
RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS=20 start_rank 0 2 "$port" right "$WORK/host.log" --epochs 1
host=$LAST_PID
wait_until 60 "rank 0 serving the store" grep -q "loaded" "$WORK/host.log"
RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS=20 start_rank 1 2 "$port" wrong "$WORK/intruder.log" --epochs 1
wait_exit "$LAST_PID" 60
rc=$RC
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "wrong token exited with $rc, expected permanent"
grep -qi "token" "$WORK/intruder.log" || fail "wrong-token message does not mention the token"
kill "$host" 2>/dev/null || true

# Ranks of two images, then of two batch sizes: neither gang trains; both ranks exit 138 and
# give the same cause, naming what differs.
port=$(free_port)
RINGTRAIN_IMAGE=ghcr.io/x:0.1 start_rank 0 2 "$port" tok "$WORK/img0.log" --epochs 1
img0=$LAST_PID
RINGTRAIN_IMAGE=ghcr.io/x:0.2 start_rank 1 2 "$port" tok "$WORK/img1.log" --epochs 1
img1=$LAST_PID
# Another port than the first gang's, which its rank 0 may not have bound yet.
img_port=$port
while [ "$port" = "$img_port" ]; do port=$(free_port); done
start_rank 0 2 "$port" tok "$WORK/cfg0.log" --epochs 1
cfg0=$LAST_PID
start_rank 1 2 "$port" tok "$WORK/cfg1.log" --epochs 1 --batch-size 32
cfg1=$LAST_PID
for r in 0 1; do
  for t in img cfg; do
    pid_var="$t$r"
    wait_exit "${!pid_var}" 120
    [ "$RC" = 138 ] || fail "$t rank $r exited $RC, expected 138: $(cat "$WORK/$t$r.log.termination")"
  done
  grep -q "rank 1 runs runner .* image ghcr.io/x:0.2 but rank 0 runs runner .* image ghcr.io/x:0.1" \
    "$WORK/img$r.log.termination" || fail "img rank $r: $(cat "$WORK/img$r.log.termination")"
  grep -q "rank 1's training configuration differs from rank 0's in batch_size (32 vs " \
    "$WORK/cfg$r.log.termination" ||
    fail "cfg rank $r: $(cat "$WORK/cfg$r.log.termination")"
done

busy=$(free_port)
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("0.0.0.0",int(sys.argv[1]))); s.listen(); time.sleep(30)' "$busy" &
PIDS+=($!)
sleep 0.5
RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS=5 start_rank 0 2 "$busy" tok "$WORK/busy.log" --epochs 1
wait_exit "$LAST_PID" 60
rc=$RC
[ "$rc" != 0 ] || fail "busy port: runner succeeded"
grep -q "already in use" "$WORK/busy.log" || fail "busy port not reported as such"
echo PASS
