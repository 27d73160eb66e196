#!/usr/bin/env bash
# `ringtrain controller --leader-elect` on a kubeconfig whose user is an exec credential plugin
# (EKS, GKE, AKS) gets SIGTERM while the plugin hangs (a login prompt nobody answers). The
# controller must still exit cleanly within the pod's terminationGracePeriodSeconds (30 s) and
# leave no plugin behind: the lease and Events clients' plugins used to be bounded only by their
# own 60 s timeout.
source "$(dirname "$0")/lib.sh"
start_fake_cluster

# The plugin hands out a credential that expires in 2 s, so every client runs it again soon;
# once $WORK/hang exists it records its pid and hangs instead.
cat >"$WORK/plugin.sh" <<SH
#!/bin/sh
if [ -e "$WORK/hang" ]; then
  echo \$\$ >>"$WORK/hanging"
  exec sleep 600
fi
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"e2e","expirationTimestamp":"%s"}}\n' \
  "\$(date -u -d '+2 seconds' +%Y-%m-%dT%H:%M:%SZ)"
SH
chmod +x "$WORK/plugin.sh"
cat >"$WORK/exec-kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "$(head -n1 "$WORK/apiserver.url")"}}]
users: [{name: me, user: {exec: {apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never, command: "$WORK/plugin.sh"}}}]
contexts: [{name: fake, context: {cluster: fake, user: me, namespace: default}}]
current-context: fake
YAML

start_leading_controller "$WORK/exec-kubeconfig" e2e-exec

touch "$WORK/hang"
wait_until 30 "a client to run the plugin and hang in it" test -s "$WORK/hanging"
kill -TERM "$CTRL"
# The grace period, as a generous bound (the release of the lease gives up after its own short
# budget when it cannot get a credential).
wait_exit "$CTRL" 28
[ "$RC" = 0 ] || fail "controller exited with $RC after SIGTERM"
grep -q "ringtrain controller stopped" "$WORK/controller.log" || fail "no clean stop in the log"
while read -r pid; do
  if kill -0 "$pid" 2>/dev/null; then
    fail "the hung plugin $pid outlived the controller ($(tr '\0' ' ' </proc/$pid/cmdline))"
  fi
done <"$WORK/hanging"
echo PASS
