#!/usr/bin/env bash
# Builds the ringtrain images with podman on a Debian 12 machine (root), without any registry:
#   bash scripts/images.sh [all]      setup + base + controller + runner-cpu (what CI runs)
#   bash scripts/images.sh setup      podman, buildah, mmdebstrap, iptables, runc + containers.conf
#   bash scripts/images.sh base       the Debian 12 base image (mmdebstrap minbase → podman import)
#   bash scripts/images.sh controller the controller image   (ringtrain:dev)
#   bash scripts/images.sh runner-cpu the CPU runner image   (ringtrain-runner-cpu:dev)
# Binaries: by default the ones already built in ${BUILD_DIR:-build} (the host and the image are
# both Debian 12, so CI compiles once); IMAGE_BINARIES=source compiles inside the image's build
# stage instead (the Dockerfiles' default, as the release CUDA runner image does).
# Env: TAG (dev), BUILD_DIR (build), IMAGE_BINARIES (prebuilt|source), IMAGE_STATE (.cache/images).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
TAG=${TAG:-dev}
BUILD_DIR=${BUILD_DIR:-build}
IMAGE_BINARIES=${IMAGE_BINARIES:-prebuilt}
STATE=${IMAGE_STATE:-$root/.cache/images}
BASE_NAME=localhost/ringtrain-base-debian:12
CONTROLLER_IMAGE=localhost/ringtrain:$TAG
RUNNER_CPU_IMAGE=localhost/ringtrain-runner-cpu:$TAG
mkdir -p "$STATE"

log() { echo "images: $*" >&2; }
die() { echo "images: error: $*" >&2; exit 1; }
timed() {
  local what=$1 start=$SECONDS
  shift
  "$@"
  log "$what took $((SECONDS - start)) s"
}

setup() {
  local need=() p
  for p in podman buildah mmdebstrap iptables runc netavark aardvark-dns; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "run as root to install ${need[*]}"
    log "installing ${need[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
  fi
  # netavark (the network backend) needs iptables; aardvark-dns gives user-defined networks DNS.
  # The default RLIMIT_NOFILE podman asks for (1048576) exceeds the hard limit of some machines
  # (20000 on CI) and crun refuses a hybrid cgroup v1 layout: no default ulimits, cgroupfs and
  # runc. An existing file is kept when it already says so.
  local conf=/etc/containers/containers.conf
  if [ -f "$conf" ] && ! grep -q "ringtrain: scripts/images.sh" "$conf"; then
    grep -q 'default_ulimits *= *\[\]' "$conf" && grep -q 'cgroup_manager *= *"cgroupfs"' "$conf" ||
      die "$conf exists without default_ulimits = [] and cgroup_manager = \"cgroupfs\"; add them"
  else
    mkdir -p /etc/containers
    cat >"$conf" <<'CONF'
# Written by ringtrain: scripts/images.sh (podman on a machine with a low open-files hard limit
# and a hybrid cgroup v1 layout).
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"

# netavark + aardvark-dns: user-defined networks resolve containers' names and aliases (CNI's
# podman plugins do not).
[network]
network_backend = "netavark"
CONF
  fi
  podman --runtime runc info >/dev/null || die "podman info failed"
}

# The FROM images of images/*.Dockerfile (debian:12, debian:12-slim) are one minbase Debian 12
# made here by mmdebstrap, so builds need no registry (--pull=never).
base() {
  if podman image exists "$BASE_NAME"; then
    log "base image $BASE_NAME exists (podman rmi it to rebuild)"
  else
    local tar=$STATE/rootfs.tar
    rm -f "$tar"
    # As Debian's slim images: no docs (but the copyrights), man pages, info or translations,
    # now and in every later apt-get install of an image built on it.
    local slim=() p
    for p in 'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
      'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
      'path-exclude=/usr/share/groff/*' 'path-exclude=/usr/share/lintian/*' \
      'path-exclude=/usr/share/locale/*'; do
      slim+=(--dpkgopt="$p")
    done
    timed "mmdebstrap" mmdebstrap --quiet --variant=minbase --include=ca-certificates \
      "${slim[@]}" bookworm "$tar" http://deb.debian.org/debian
    podman import --change 'CMD ["/bin/bash"]' "$tar" "$BASE_NAME" >/dev/null
    rm -f "$tar"
  fi
  local t
  for t in docker.io/library/debian:12 docker.io/library/debian:12-slim; do
    podman tag "$BASE_NAME" "$t"
  done
}

# A build context with the host's binaries, the runtime packages they need and the dataset:
# what the Dockerfiles' `prebuilt` stage copies instead of compiling.
prebuilt_context() {
  local ctx=$STATE/prebuilt bins=("$@") b
  rm -rf "$ctx"
  mkdir -p "$ctx/prebuilt/out"
  for b in "${bins[@]}"; do
    [ -x "$BUILD_DIR/bin/$b" ] || die "$BUILD_DIR/bin/$b not built (run scripts/build.sh first)"
    install -m 0755 "$BUILD_DIR/bin/$b" "$ctx/prebuilt/out/$b"
  done
  (cd "$ctx/prebuilt/out" && bash "$root/images/runtime-packages.sh" "${bins[@]}") \
    >"$ctx/prebuilt/out/runtime-packages.txt"
  mkdir -p "$ctx/prebuilt/usr/share/datasets"
  cp -r /usr/share/datasets/fashion-mnist "$ctx/prebuilt/usr/share/datasets/"
  echo "$ctx"
}

build_image() {
  local name=$1 dockerfile=$2 context=$3
  shift 3
  log "building $name"
  # --network host: the RUN steps' apt-get reaches the Debian mirror as the host's does (a
  # bridge network's NAT may have no way out, or no DNS, on a CI machine).
  podman --runtime runc build --pull=never --runtime runc --network host -f "$dockerfile" \
    -t "$name" "$@" "$context"
  log "$name: $(podman image inspect --format '{{.Size}}' "$name" | numfmt --to=iec) "
}

controller() {
  if [ "$IMAGE_BINARIES" = prebuilt ]; then
    local ctx
    ctx=$(prebuilt_context ringtrain)
    build_image "$CONTROLLER_IMAGE" images/controller.Dockerfile "$ctx" \
      --build-arg BINARIES=prebuilt
  else
    build_image "$CONTROLLER_IMAGE" images/controller.Dockerfile . --build-arg BINARIES=build
  fi
}

runner_cpu() {
  if [ "$IMAGE_BINARIES" = prebuilt ]; then
    # The CPU image cannot carry a runner linked against CUDA (cuDNN alone is ~1 GB): when the
    # host build has the GPU runner, a CPU-only one is built beside it, mostly from ccache.
    local dir=$BUILD_DIR
    # ldd's output first: under pipefail, `ldd | grep -q` fails whenever grep exits before ldd has
    # written everything (SIGPIPE), and a CUDA runner went into the CPU image.
    local libs
    libs=$(ldd "$BUILD_DIR/bin/ringtrain-runner" 2>/dev/null || true)
    if grep -Eq 'libcud(art|nn)|libcublas|libnccl|/usr/local/cuda' <<<"$libs"; then
      dir=$BUILD_DIR-cpu-image
      log "$BUILD_DIR's runner links CUDA: building a CPU runner in $dir"
      timed "CPU runner build" bash -c "cmake -S . -B '$dir' -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DRINGTRAIN_CUDA=OFF -DRINGTRAIN_BUILD_TESTS=OFF -DRINGTRAIN_BUILD_BENCH=OFF >/dev/null \
        && ninja -C '$dir' ringtrain-runner ringtrain"
    fi
    local ctx
    ctx=$(BUILD_DIR=$dir prebuilt_context ringtrain-runner ringtrain)
    build_image "$RUNNER_CPU_IMAGE" images/runner.Dockerfile "$ctx" \
      --build-arg FLAVOUR=cpu --build-arg BINARIES=prebuilt
  else
    build_image "$RUNNER_CPU_IMAGE" images/runner.Dockerfile . \
      --build-arg FLAVOUR=cpu --build-arg BINARIES=build-cpu
  fi
}

step=${1:-all}
case "$step" in
  setup) timed setup setup ;;
  base) timed base base ;;
  controller) timed controller controller ;;
  runner-cpu) timed runner-cpu runner_cpu ;;
  all)
    timed setup setup
    timed base base
    timed controller controller
    timed runner-cpu runner_cpu
    podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'ringtrain' >&2
    ;;
  *) die "unknown step '$step' (setup, base, controller, runner-cpu, all)" ;;
esac
