#!/usr/bin/env bash
# Rendezvous faults: a timeout names the ranks that never arrived; a wrong token is refused
# with a permanent exit code; a busy port is reported as such.
source "$(dirname "$0")/lib.sh"
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
