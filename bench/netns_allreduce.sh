#!/usr/bin/env bash
# Multi-process all-reduce on tc-shaped links: one rank per network namespace, all on a bridge
# of their own (10.231.0.0/24), every rank's egress shaped with tbf at RATE. Measures, in the
# same run, iperf3 between two namespaces (the wire's limit), the TCP ring (allreduce_bench
# --rank) and, when python3 has torch, Gloo (bench/gloo_allreduce.py). Needs root, ip, tc,
# iperf3. Not part of the test suite (root, minutes).
#
#   sudo bash bench/netns_allreduce.sh [--rate 2gbit] [--ranks "2 4"] [--sizes B,B,...]
#                                      [--chunk BYTES] [--sockbuf BYTES]
#                                      [--bench build/bin/allreduce_bench]
set -euo pipefail

rate=2gbit
ranks="2 4"
sizes=1048576,4194304,67108864,268435456
chunk=""
sockbuf=""
bench=build/bin/allreduce_bench
here=$(cd "$(dirname "$0")" && pwd)
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --chunk) chunk=$2; shift 2 ;;
    --sockbuf) sockbuf=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    *) echo "usage: $0 [--rate R] [--ranks \"2 4\"] [--sizes B,..] [--chunk B] [--sockbuf B] [--bench PATH]" >&2
       exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "netns_allreduce: needs root (ip netns, tc)" >&2; exit 2; }
for t in ip tc iperf3; do
  command -v $t >/dev/null || { echo "netns_allreduce: $t not found (scripts/deps.sh bench)" >&2; exit 2; }
done
[ -x "$bench" ] || { echo "netns_allreduce: $bench not built (ninja -C build allreduce_bench)" >&2; exit 2; }

max_ranks=0
for n in $ranks; do [ "$n" -gt "$max_ranks" ] && max_ranks=$n; done
br=rtbench0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for i in $(seq 0 $((max_ranks - 1))); do
    ip netns del "rtb$i" 2>/dev/null || true
    # A namespace kept alive by a straggler keeps its veth: remove the host end ourselves.
    ip link del "rtbv$i" 2>/dev/null || true
  done
  ip link del "$br" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 143' TERM INT

cleanup
ip link add "$br" type bridge
ip link set "$br" up
for i in $(seq 0 $((max_ranks - 1))); do
  ip netns add "rtb$i"
  ip link add "rtbv$i" type veth peer name eth0 netns "rtb$i"
  ip link set "rtbv$i" master "$br" up
  ip -n "rtb$i" addr add "10.231.0.$((10 + i))/24" dev eth0
  ip -n "rtb$i" link set eth0 up
  ip -n "rtb$i" link set lo up
  # Egress of each rank: the ring's traffic is one stream per rank, so this is its link.
  ip netns exec "rtb$i" tc qdisc add dev eth0 root tbf rate "$rate" burst 512kb latency 20ms
done
addr() { echo "10.231.0.$((10 + $1))"; }

# The wire's limit: one TCP stream between two shaped namespaces.
ip netns exec rtb1 iperf3 -s -1 -B "$(addr 1)" >/dev/null 2>&1 &
sleep 0.5
wire=$(ip netns exec rtb0 iperf3 -c "$(addr 1)" -t 5 -J | python3 -c \
  'import json,sys; print("%.4f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
# A ring rank sends and receives at once, so the wire it can reach is the duplex one: iperf3
# --bidir, the slower direction. On veth every byte costs CPU on both ends, so on a small machine
# the duplex figure falls below the one-way one well before the shaper's rate does.
ip netns exec rtb1 iperf3 -s -1 -B "$(addr 1)" >/dev/null 2>&1 &
sleep 0.5
duplex=$(ip netns exec rtb0 iperf3 -c "$(addr 1)" -t 5 --bidir -J | python3 -c '
import json, sys
end = json.load(sys.stdin)["end"]
print("%.4f" % (min(end["sum_received"]["bits_per_second"],
                    end["sum_received_bidir_reverse"]["bits_per_second"]) / 1e9))')
echo "# rate $rate, iperf3 wire ${wire} Gbit/s one way, ${duplex} Gbit/s each way duplex," \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)"

# Debian's python3-torch lives under /usr/bin/python3, which a pyenv python3 on PATH hides.
have_torch=0
python=""
for p in ${PYTHON:-python3 /usr/bin/python3}; do
  if "$p" -c 'import torch.distributed' 2>/dev/null; then python=$p; have_torch=1; break; fi
done
[ $have_torch = 1 ] || echo "# no torch for Gloo (apt-get install -y python3-torch): ring only"

# run_gang N PORT CMD...: ranks 1..N-1 in the background, rank 0 prints the results.
run_gang() {
  local n=$1 port=$2; shift 2
  pids=()
  for r in $(seq 1 $((n - 1))); do
    ip netns exec "rtb$r" "$@" --rank "$r" --world "$n" --master "$(addr 0):$port" \
      --addr "$(addr "$r")" >/dev/null &
    pids+=($!)
  done
  ip netns exec rtb0 "$@" --rank 0 --world "$n" --master "$(addr 0):$port" --addr "$(addr 0)"
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
}
ring_rank() {
  # allreduce_bench takes --flag=value; translate the gang's "--flag value" pairs.
  local args=()
  while [ $# -gt 0 ]; do args+=("$1=$2"); shift 2; done
  exec "$bench" --sizes="$sizes" ${chunk:+--chunk=$chunk} ${sockbuf:+--sockbuf=$sockbuf} "${args[@]}"
}
gloo_rank() {
  local args=()
  while [ $# -gt 0 ]; do [ "$1" = --addr ] || args+=("$1" "$2"); shift 2; done
  # Gloo finds its address from the hostname (127.0.0.1 here) unless told the interface.
  GLOO_SOCKET_IFNAME=eth0 exec "$python" "$here/gloo_allreduce.py" --sizes "$sizes" "${args[@]}"
}
export -f ring_rank gloo_rank
export bench sizes chunk sockbuf here python

printf "%5s %10s %12s %10s %10s %11s %10s %14s %14s %s\n" ranks size_MiB ring_Gbit/s wire ring/wire \
  ring/duplex ring/gloo ring_cpu_ns/B gloo_cpu_ns/B load
port=29600
for n in $ranks; do
  port=$((port + 1))
  ring=$(run_gang "$n" "$port" bash -c 'ring_rank "$@"' ring_rank)
  gloo=""
  if [ $have_torch = 1 ]; then
    port=$((port + 1))
    gloo=$(run_gang "$n" "$port" bash -c 'gloo_rank "$@"' gloo_rank)
  fi
  load=$(cut -d' ' -f1 /proc/loadavg)
  while read -r bytes _ bw cpu; do
    gbw="-" gcpu="-" ratio_g="-"
    if [ -n "$gloo" ]; then
      read -r _ _ gbw gcpu <<<"$(grep "^$bytes " <<<"$gloo")"
      ratio_g=$(python3 -c "print('%.2f' % ($bw / $gbw))")
    fi
    printf "%5s %10s %12s %10s %10s %11s %10s %14s %14s %s\n" "$n" \
      "$(python3 -c "print('%g' % ($bytes / 2**20))")" "$bw" "$wire" \
      "$(python3 -c "print('%.3f' % ($bw / $wire))")" \
      "$(python3 -c "print('%.3f' % ($bw / $duplex))")" "$ratio_g" "$cpu" "$gcpu" "$load"
  done <<<"$ring"
done
