#!/usr/bin/env bash
# `ringtrain controller --leader-elect` gets SIGTERM while the API server hangs (SIGSTOP: it
# accepts connections and answers nothing). The controller must still exit cleanly within the
# pod's terminationGracePeriodSeconds (30 s), or the kubelet SIGKILLs it; it used to wait out
# every request's 30 s timeout, about a minute in all.
source "$(dirname "$0")/lib.sh"
start_fake_cluster

start_leading_controller "$KUBECONFIG_FILE" e2e-outage

API=${PIDS[0]}
kill -STOP "$API"
kill -TERM "$CTRL"
# The grace period, as a generous bound: the controller needs a few seconds (the release of the
# lease gives up after its own short timeout).
wait_exit "$CTRL" 28
kill -CONT "$API"
[ "$RC" = 0 ] || fail "controller exited with $RC after SIGTERM"
grep -q "ringtrain controller stopped" "$WORK/controller.log" || fail "no clean stop in the log"
echo PASS
