#!/usr/bin/env bash
# train_bench behind a shaped wire: runs it in a network namespace of its own whose loopback
# (the ranks' TCP ring; they are threads of one process) is shaped with tc tbf at RATE, so the
# link, not the CPU, bounds the all-reduce, as on a cluster. The namespace is removed on exit.
# Needs root, ip and tc. Numbers only.
#
#   sudo bash bench/netns_train.sh [--rate 2gbit] [--bench build/bin/train_bench] -- TRAIN_BENCH_ARGS...
#   e.g. sudo bash bench/netns_train.sh --rate 2gbit -- --model cnn --ranks 2 --steps 60
#
# One tbf on loopback carries both directions of every connection, so RATE is shared by all
# the ring's traffic: with 2 ranks each direction gets about half of it.
set -euo pipefail

rate=2gbit
here=$(cd "$(dirname "$0")" && pwd)
bench=$here/../build/bin/train_bench
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--rate R] [--bench PATH] -- TRAIN_BENCH_ARGS..." >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "netns_train: needs root (network namespaces, tc)" >&2; exit 2; }
for t in ip tc; do
  command -v $t >/dev/null || { echo "netns_train: $t not found" >&2; exit 2; }
done
[ -x "$bench" ] || { echo "netns_train: $bench not built (ninja -C build train_bench)" >&2; exit 2; }

ns=rttrain$$
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 143' TERM INT
ip netns add "$ns"
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst 256kb latency 50ms
echo "# loopback shaped at $rate (shared by both directions), load: $(cut -d' ' -f1-3 /proc/loadavg)"
ip netns exec "$ns" "$bench" "$@"
