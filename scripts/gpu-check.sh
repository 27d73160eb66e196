#!/usr/bin/env bash
# GPU checks on a lent GPU machine that cannot build or install anything.
#
#   bash scripts/gpu-check.sh bundle [DIR]   # here: build Release with CUDA into build-gpu/, pack
#                                            # binaries + non-CUDA shared libs + data into DIR
#   bash scripts/gpu-check.sh run [DIR]      # there (repo root, $OUT set by the device tool): GPU
#                                            # gtests, a GPU Fashion-MNIST run (its /metrics
#                                            # scraped), 2 replicas sharing the GPU, the same jobs
#                                            # on the CPU engine for the accuracy bounds,
#                                            # ringtrain vs PyTorch, compute-sanitizer
#
# DIR defaults to .gpu-bundle (git-ignored; carry it). The bundle holds no CUDA library (libcuda,
# cudart, cuBLAS, cuDNN, NCCL, nvrtc…) and no glibc/libstdc++/libgcc_s: `run` takes those from the
# GPU machine (its toolkit and pip's nvidia-* wheels), whose newer system copies must win.
# bin/ and lib/ travel xz-compressed (NAME.xz; Debian's OpenBLAS alone is 35 MiB, 4 MiB as xz):
# `run` unpacks them into a fresh temporary folder and leaves DIR as it is.
#
# run's knobs (environment): OUT (./gpu-out), GPU_CHECK_STEPS (tests,run,shared,cpu,compare,
# sanitize), GPU_CHECK_DEADLINE (360 s for the whole run), GTEST_TIMEOUT (120 s per binary;
# comm_nccl_test 60), RUN_TIMEOUT (180 s), COMPARE_TIMEOUT (420 s: the comparison and its
# profiles), COMPARE_ARGS (extra gpu_compare.py arguments, e.g. "--steps 300 --models mlp" or
# "--profile never"), SANITIZE_TIMEOUT (180 s), SANITIZE_FILTER (gtest filter for memcheck;
# -Tf32Budget.*: cuBLAS' TF32 paths are not ours), PYTHON (python3), GPU_CHECK_ASSUME_GPU=1 (run
# the GPU steps even when nvidia-smi lists no GPU), GPU_CHECK_EXAMPLE (the manifest of the `run`
# step; manifests/examples/fashion-mnist-gpu.yaml).
# bundle's: GPU_CHECK_SKIP_BUILD=1 packs the existing build-gpu/ without rebuilding.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# GPU gtest binaries: these, plus every ringtrain_gpu_test() target the tests declare.
DEFAULT_GPU_TESTS=(gpu_model_test nccl_communicator_test gpu_trainer_test)
BENCHES=(gpu_train_bench train_bench allreduce_bench)
REQUIRED_BINARIES=(ringtrain ringtrain-runner)
DATA_SRC=/usr/share/datasets/fashion-mnist
DATA_FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz
  t10k-labels-idx1-ubyte.gz)
GPU_EXAMPLE=${GPU_CHECK_EXAMPLE:-manifests/examples/fashion-mnist-gpu.yaml}
[[ $GPU_EXAMPLE == /* ]] || GPU_EXAMPLE=$ROOT/$GPU_EXAMPLE
CPU_EXAMPLE=manifests/examples/fashion-mnist-mlp.yaml
# The device tool moves at most 64 MiB: the bundle plus the git tree.
MAX_BUNDLE_BYTES=$((56 * 1024 * 1024))

die() {
  echo "gpu-check: error: $*" >&2
  exit 1
}
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# Libraries the bundle must not carry: CUDA (from the GPU machine) and the C/C++ runtime.
is_cuda_lib() {
  case "$1" in
    libcuda.so* | libcudart.so* | libcublas* | libcudnn* | libnccl* | libnvidia-* | libnvrtc* | \
      libnvJitLink* | libcufft* | libcurand* | libcusolver* | libcusparse* | libcupti* | \
      libnvToolsExt* | libnvtx*) return 0 ;;
  esac
  return 1
}
is_system_lib() {
  case "$1" in
    linux-vdso.so* | linux-gate.so* | ld-linux* | */ld-linux* | libc.so* | libm.so* | libdl.so* | \
      libpthread.so* | librt.so* | libstdc++.so* | libgcc_s.so* | libresolv.so* | libutil.so* | \
      libanl.so* | libmvec.so* | libnsl.so* | libBrokenLocale.so* | libc_malloc_debug.so* | \
      libthread_db.so* | libnss_*) return 0 ;;
  esac
  return 1
}
is_excluded_lib() { is_cuda_lib "$1" || is_system_lib "$1"; }

# ldd FILE → "name<TAB>path" lines (path "not found" when unresolved; the loader has no name).
ldd_pairs() {
  ldd "$1" 2>/dev/null | awk '
    $2 == "=>" { if ($3 == "not") print $1 "\tnot found"; else print $1 "\t" $3; next }
    $1 ~ /^\// { n = split($1, p, "/"); print p[n] "\t" $1 }'
}

# ---------------------------------------------------------------------------------------------
# bundle

cmd_bundle() {
  local dir=${1:-.gpu-bundle}
  local build=build-gpu
  case "$dir" in
    "" | / | . | .. | "$ROOT" | "$ROOT/") die "refusing to use '$dir' as the bundle folder" ;;
  esac
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/MANIFEST" ]; then
    die "$dir exists, is not empty and holds no MANIFEST: not a bundle, not removing it"
  fi

  if [ "${GPU_CHECK_SKIP_BUILD:-0}" != 1 ]; then
    echo "gpu-check: building Release with CUDA into $build/ (scripts/build.sh)"
    BUILD_DIR=$build bash scripts/build.sh -DRINGTRAIN_CUDA=ON
  fi
  [ -d "$build/bin" ] || die "$build/bin does not exist (the build failed?)"

  rm -rf "$dir"
  mkdir -p "$dir"/bin "$dir"/lib "$dir"/data/fashion-mnist "$dir"/bench "$dir"/manifests
  local abs
  abs=$(cd "$dir" && pwd)

  # Binaries: the CLI and runner, the GPU tests, the benches.
  local b missing=() declared=() gpu_tests=()
  mapfile -t declared < <(find tests -name CMakeLists.txt -exec \
    sed -nE 's/^[[:space:]]*ringtrain_gpu_test\([[:space:]]*([A-Za-z0-9_]+).*/\1/p' {} + | sort -u)
  mapfile -t gpu_tests < <(printf '%s\n' "${DEFAULT_GPU_TESTS[@]}" "${declared[@]}" | sort -u)
  for b in "${REQUIRED_BINARIES[@]}" "${gpu_tests[@]}" "${BENCHES[@]}"; do
    if [ -x "$build/bin/$b" ]; then
      cp "$build/bin/$b" "$dir/bin/$b"
      chmod u+w "$dir/bin/$b"
      strip --strip-unneeded "$dir/bin/$b"
    elif [[ " ${declared[*]} ${BENCHES[*]} " == *" $b "* ]]; then
      missing+=("$b")  # declared but not built; the other default names may simply not exist
    fi
  done
  for b in "${REQUIRED_BINARIES[@]}"; do
    [ -x "$dir/bin/$b" ] || die "$build/bin/$b was not built"
  done
  [ ${#missing[@]} -eq 0 ] || echo "gpu-check: not built (yet), left out: ${missing[*]}"
  for b in "${gpu_tests[@]}"; do
    if [ -x "$dir/bin/$b" ]; then echo "$b"; fi
  done >"$dir/GPU_TESTS"

  # Their shared libraries, CUDA and the C/C++ runtime aside.
  local f name path cuda_needs=()
  for f in "$dir"/bin/*; do
    while IFS=$'\t' read -r name path; do
      if is_cuda_lib "$name"; then
        cuda_needs+=("$name")
        continue
      fi
      is_system_lib "$name" && continue
      [ "$path" != "not found" ] || die "$(basename "$f") needs $name, which is not found here"
      if [ ! -e "$dir/lib/$name" ]; then
        cp -L "$path" "$dir/lib/$name"
        chmod u+w "$dir/lib/$name"
        strip --strip-unneeded "$dir/lib/$name" 2>/dev/null ||
          echo "gpu-check: warning: could not strip $name"
      fi
    done < <(ldd_pairs "$f")
  done
  # The CUDA libraries `run` must find on the GPU machine, by soname.
  printf '%s\n' "${cuda_needs[@]}" | sort -u >"$dir/CUDA_NEEDS"

  # Data, benchmark scripts, example manifests.
  for f in "${DATA_FILES[@]}"; do
    [ -f "$DATA_SRC/$f" ] || die "$DATA_SRC/$f is missing (apt-get install dataset-fashion-mnist)"
    cp "$DATA_SRC/$f" "$dir/data/fashion-mnist/"
  done
  cp bench/*.py "$dir/bench/"
  cp -r manifests/examples "$dir/manifests/"

  check_closure "$abs"
  local raw_bin raw_lib
  raw_bin=$(du -sb "$dir/bin" | cut -f1)
  raw_lib=$(du -sb "$dir/lib" | cut -f1)
  echo "gpu-check: compressing bin/ and lib/ ($(mib $((raw_bin + raw_lib)))) with xz"
  xz -9 -T0 "$dir"/bin/* "$dir"/lib/*
  write_manifest "$dir" "$build"

  # Size: the bundle travels with the git tree, 64 MiB in all.
  local total tree size name
  total=$(du -sb "$dir" | cut -f1)
  tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) |
    xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
  echo
  echo "gpu-check: largest items in $dir:"
  find "$dir" -type f -printf '%s\t%P\n' | sort -rn | head -n 12 |
    while IFS=$'\t' read -r size name; do printf '  %10s  %s\n' "$(mib "$size")" "$name"; done
  printf '  by folder: bin %s (%s unpacked); lib %s (%s unpacked);' \
    "$(mib "$(du -sb "$dir/bin" | cut -f1)")" "$(mib "$raw_bin")" \
    "$(mib "$(du -sb "$dir/lib" | cut -f1)")" "$(mib "$raw_lib")"
  for f in data bench manifests; do printf ' %s %s;' "$f" "$(mib "$(du -sb "$dir/$f" | cut -f1)")"; done
  echo
  echo "gpu-check: bundle $dir is $(mib "$total") ($total bytes); with the working tree" \
    "($(mib "$tree")) about $(mib $((total + tree))) travels (limit 64 MiB)"
  if [ "$total" -gt "$MAX_BUNDLE_BYTES" ]; then
    die "bundle is $(mib "$total"), over the $(mib "$MAX_BUNDLE_BYTES") budget: it would not travel"
  fi
  echo "gpu-check: bundle ready; on the GPU machine: bash scripts/gpu-check.sh run $dir (carry $dir)"
}

# Every dependency of every binary and library must resolve inside DIR/lib with a clean
# environment, except the excluded ones (CUDA may be missing here; glibc & co. are the system's).
check_closure() {
  local abs=$1 f name path bad=0
  for f in "$abs"/bin/* "$abs"/lib/*; do
    while IFS=$'\t' read -r name path; do
      if is_excluded_lib "$name"; then
        if is_system_lib "$name" && [ "$path" = "not found" ]; then
          echo "gpu-check: $(basename "$f"): system library $name not found" >&2
          bad=1
        fi
        continue
      fi
      case "$path" in
        "$abs/lib/"*) ;;
        "not found")
          echo "gpu-check: $(basename "$f"): $name is not in the bundle" >&2
          bad=1
          ;;
        *)
          echo "gpu-check: $(basename "$f"): $name resolves outside the bundle: $path" >&2
          bad=1
          ;;
      esac
    done < <(env -i LD_LIBRARY_PATH="$abs/lib" PATH=/usr/bin:/bin bash -c "$(declare -f ldd_pairs); ldd_pairs '$f'")
  done
  [ "$bad" -eq 0 ] || die "the bundle's library closure is incomplete (see above)"
  echo "gpu-check: closure ok: with LD_LIBRARY_PATH=$abs/lib only CUDA and C/C++ runtime" \
    "libraries come from outside the bundle"
}

header_version() {  # header_version FILE MAJOR_MACRO MINOR_MACRO PATCH_MACRO
  [ -f "$1" ] || return 0
  awk -v a="$2" -v b="$3" -v c="$4" '
    $1 == "#define" && $2 == a { x = $3 } $1 == "#define" && $2 == b { y = $3 }
    $1 == "#define" && $2 == c { z = $3 } END { if (x != "") print x "." y "." z }' "$1"
}

# A digest of the sources the bundle's binaries are built from, computed the same way here and on
# the GPU machine (which gets the tree without .git): `run` refuses to trust a stale bundle.
source_digest() {
  (cd "$ROOT" && find CMakeLists.txt common runner controller tests bench -type f \
    \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt \) \
    -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}

write_manifest() {
  local dir=$1 build=$2 cuda_home inc
  cuda_home=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
  inc=$cuda_home/include
  {
    echo "# ringtrain GPU bundle (scripts/gpu-check.sh bundle)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "dirty_files: $(git status --porcelain 2>/dev/null | wc -l)"
    echo "source_digest: $(source_digest)"
    echo "created: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"'))"
    echo "source_dir: $ROOT"
    echo "build_dir: $ROOT/$build"
    echo "nvcc: $("$cuda_home/bin/nvcc" --version 2>/dev/null | awk -F', ' '/release/ { print $2 }')"
    echo "cuda_architectures: $(grep -o 'sm_[0-9]*a\{0,1\}' "$build/build.ninja" 2>/dev/null | sort -u | tr '\n' ' ')"
    echo "built_against: cuDNN $(header_version "$inc/cudnn_version.h" CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)," \
      "NCCL $(header_version "$inc/nccl.h" NCCL_MAJOR NCCL_MINOR NCCL_PATCH)," \
      "cuBLAS $(header_version "$inc/cublas_api.h" CUBLAS_VER_MAJOR CUBLAS_VER_MINOR CUBLAS_VER_PATCH)"
    echo "cuda_needs: $(tr '\n' ' ' <"$dir/CUDA_NEEDS")"
    echo "files:"
    (cd "$dir" && find . -type f ! -name MANIFEST -printf '%P\n' | sort | while read -r f; do
      printf '  %10d  %s  %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -c1-16)" "$f"
    done)
  } >"$dir/MANIFEST"
}

# ---------------------------------------------------------------------------------------------
# run

STEP_NAMES=()
STEP_RESULTS=()
FAILED=0
record() {  # record NAME RESULT
  STEP_NAMES+=("$1")
  STEP_RESULTS+=("$2")
  case "$2" in FAIL*) FAILED=1 ;; esac
  echo "gpu-check: [$1] $2"
}

# The whole run ends within GPU_CHECK_DEADLINE seconds (360 by default: a first try of about 6
# minutes leaves a 15-minute device lease room for a second; one command may run 600): each
# step's time limit is what it asks for or what is left (less a reserve for the summary), and a
# step that would get less than its minimum is skipped, said so in the summary.
RUN_STARTED=$SECONDS
seconds_left() { echo $((${GPU_CHECK_DEADLINE:-360} - (SECONDS - RUN_STARTED))); }
# step_limit NAME WANTED MINIMUM: sets LIMIT, or records NAME as skipped and returns 1.
step_limit() {
  local left
  left=$(($(seconds_left) - 15))
  LIMIT=$(($2 < left ? $2 : left))
  if [ "$LIMIT" -lt "$3" ]; then
    record "$1" "SKIP (deadline: $((left + 15)) s left of ${GPU_CHECK_DEADLINE:-360}, needs $3)"
    return 1
  fi
}

# gpu_step_limit NAME WANTED MINIMUM: step_limit for a step that needs the GPU (recorded as
# skipped without one).
gpu_step_limit() {
  if [ "$HAVE_GPU" -eq 0 ]; then
    record "$1" "SKIPPED (no GPU)"
    return 1
  fi
  step_limit "$@"
}

# first_dir_with SONAME DIR... → the first DIR holding SONAME
first_dir_with() {
  local so=$1 d
  shift
  for d in "$@"; do
    if [ -n "$d" ] && [ -e "$d/$so" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

# Sets LIB_PATH for ringtrain's binaries: the unpacked lib/, then FARM, a folder of links to the
# chosen CUDA libraries (each soname and its siblings, e.g. cuDNN's sub-libraries that it loads
# by name), so that each resolves to the copy chosen here whatever else the folders hold, then
# those folders themselves for anything the CUDA libraries need in turn.
find_cuda_libs() {
  local abs=$1 py=$2 lib=$3 farm=$4 nv_paths=() pip_dirs=() cuda_dirs=() driver_dirs=() dirs=()
  local so d f stem
  mapfile -t nv_paths < <("$py" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null || true)
  for d in "${nv_paths[@]}"; do
    [ -d "$d" ] || continue
    # nvidia/cu13/lib (cuBLAS, nvrtc, … for CUDA 13), nvidia/cudnn/lib, nvidia/nccl/lib, …
    mapfile -t -O "${#pip_dirs[@]}" pip_dirs < <(find "$d" -maxdepth 3 -type d -name lib 2>/dev/null | sort)
  done
  echo "gpu-check: python nvidia packages: ${nv_paths[*]:-none}"
  cuda_dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  driver_dirs=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64)
  local needs=()
  [ -f "$abs/CUDA_NEEDS" ] && mapfile -t needs <"$abs/CUDA_NEEDS"
  # Loaded by name at run time: the driver (by cudart_static), NVML, cuBLAS (by the first GPU
  # model: runner/model/cuda/cublas_loader.h) and nvrtc (cuDNN's runtime-compiled engines).
  # The driver and cuBLAS are required.
  needs+=(libcuda.so.1 libnvidia-ml.so.1 libcublas.so.13 libnvrtc.so.13)
  mkdir -p "$farm"
  LIB_PATH=$lib:$farm
  MISSING_CUDA=()
  for so in "${needs[@]}"; do
    [ -n "$so" ] || continue
    d=
    case "$so" in
      libcuda.so* | libnvidia-*)
        # The driver's libraries: the loader's cache first (the driver's own mount).
        if ldconfig -p 2>/dev/null | grep -F "$so " >/dev/null; then
          printf 'gpu-check:   %-22s %s\n' "$so" \
            "$(ldconfig -p | awk -v s="$so" '$1 == s && !seen++ { print $NF }') (loader cache)"
          continue
        fi
        d=$(first_dir_with "$so" "${driver_dirs[@]}") || true
        ;;
      libcublas* | libnvrtc* | libnvJitLink*)
        d=$(first_dir_with "$so" "${cuda_dirs[@]}" "${pip_dirs[@]}" "${driver_dirs[@]}") || true ;;
      *) d=$(first_dir_with "$so" "${pip_dirs[@]}" "${cuda_dirs[@]}" "${driver_dirs[@]}") || true ;;
    esac
    if [ -z "$d" ] && [[ $so == libnccl* || $so == libcudnn* ]]; then
      d=$(find / \( -path /proc -o -path /sys \) -prune -o -name "$so" -print 2>/dev/null |
        head -n 1 | xargs -r dirname) || true
    fi
    if [ -z "$d" ]; then
      [[ $so == libnvrtc* || $so == libnvidia-ml* ]] || MISSING_CUDA+=("$so")
      printf 'gpu-check:   %-22s %s\n' "$so" "not found"
      continue
    fi
    stem=${so%%.so*}
    for f in "$d/$stem"*.so*; do ln -sfn "$f" "$farm/$(basename "$f")"; done
    case "$d" in
      /usr/lib/x86_64-linux-gnu | /lib/x86_64-linux-gnu | /usr/lib64 | /lib64) ;;  # searched anyway
      *) case " ${dirs[*]} " in *" $d "*) ;; *) dirs+=("$d") ;; esac ;;
    esac
    f=$(readlink -f "$d/$so")
    printf 'gpu-check:   %-22s %s%s\n' "$so" "$d/$so" "$([ "$f" = "$d/$so" ] || echo " -> $f")"
  done
  for d in "${dirs[@]}"; do LIB_PATH=$LIB_PATH:$d; done
}

pip_version() {
  "$1" -c "import importlib.metadata as m, sys
for n in sys.argv[1:]:
    try: print(f'  {n} {m.version(n)}')
    except m.PackageNotFoundError: pass" "${@:2}" 2>/dev/null || true
}

# Tests and the runner were built with /work/main-style absolute paths compiled in
# (RINGTRAIN_SOURCE_DIR, RINGTRAIN_BUILD_DIR) and default to /usr/share/datasets/fashion-mnist:
# on the GPU machine, where those do not exist, point them at this checkout and the bundle.
provide_build_paths() {
  local abs=$1 bin=$2 src bld
  src=$(awk '/^source_dir:/ { print $2 }' "$abs/MANIFEST")
  bld=$(awk '/^build_dir:/ { print $2 }' "$abs/MANIFEST")
  if [ ! -e "$DATA_SRC" ] && mkdir -p "$(dirname "$DATA_SRC")" 2>/dev/null &&
    ln -s "$abs/data/fashion-mnist" "$DATA_SRC" 2>/dev/null; then
    echo "gpu-check: linked $DATA_SRC -> $abs/data/fashion-mnist"
  fi
  if [ -n "$src" ] && [ ! -e "$src" ] && mkdir -p "$(dirname "$src")" 2>/dev/null &&
    ln -s "$ROOT" "$src" 2>/dev/null; then
    echo "gpu-check: linked $src -> $ROOT (the tests' RINGTRAIN_SOURCE_DIR)"
  fi
  if [ -n "$bld" ] && [ ! -e "$bld/bin" ] && mkdir -p "$bld" 2>/dev/null &&
    ln -s "$bin" "$bld/bin" 2>/dev/null; then
    echo "gpu-check: linked $bld/bin -> $bin (the tests' RINGTRAIN_BUILD_DIR)"
  fi
}

run_gtests() {
  local abs=$1 bin=$2 out=$3 t log json rc passed skipped failed tests=() n=0
  [ -f "$abs/GPU_TESTS" ] && mapfile -t tests <"$abs/GPU_TESTS"
  [ ${#tests[@]} -gt 0 ] || tests=("${DEFAULT_GPU_TESTS[@]}")
  # The model's parity first, then training, then NCCL, whose fault tests are the likeliest to
  # wait out a limit if something is wrong; any other binary after them.
  local ordered=() first
  for first in gpu_unit_test gpu_trainer_test comm_nccl_test; do
    [[ " ${tests[*]} " == *" $first "* ]] && ordered+=("$first")
  done
  for t in "${tests[@]}"; do
    [[ " ${ordered[*]} " == *" $t "* ]] || ordered+=("$t")
  done
  for t in "${ordered[@]}"; do
    if [ ! -x "$bin/$t" ]; then
      record "$t" "SKIP (not in the bundle)"
      continue
    fi
    # comm_nccl_test's 21 tests take seconds; a stuck one should not hold the run for long.
    step_limit "$t" "$([ "$t" = comm_nccl_test ] && echo 60 || echo "${GTEST_TIMEOUT:-120}")" 30 ||
      continue
    echo
    echo "===== $t ====="
    log=$(mktemp)
    # At most 8 files come back from $OUT: the log, gpu-run.json, compare.json and 5 of these.
    json=$out/gtest-$t.json
    n=$((n + 1))
    [ "$n" -le 5 ] || json=$log.json
    rc=0
    timeout -k 10 "$LIMIT" env LD_LIBRARY_PATH="$LIB_PATH" "$bin/$t" \
      --gtest_output="json:$json" 2>&1 | tee "$log" || rc=$?
    passed=$(awk '/^\[  PASSED  \]/ { print $4 }' "$log" | tail -n 1)
    skipped=$(awk '/^\[  SKIPPED \] [0-9]+ test/ { print $4 }' "$log" | tail -n 1)
    failed=$(awk '/^\[  FAILED  \] [0-9]+ test/ { print $4 }' "$log" | tail -n 1)
    rm -f "$log" "$log.json"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      record "$t" "FAIL (timed out after $LIMIT s)"
    elif [ "$rc" -ne 0 ]; then
      record "$t" "FAIL (exit $rc; ${failed:-?} failed, ${passed:-0} passed, ${skipped:-0} skipped)"
    elif [ -n "$skipped" ] && [ "$HAVE_GPU" -eq 0 ]; then
      record "$t" "SKIPPED (no GPU: $skipped GPU tests skipped themselves; ${passed:-0} device-free passed)"
    elif [ -n "$skipped" ]; then
      record "$t" "PASS (${passed:-0} passed, $skipped skipped although a GPU is visible: see the log)"
    else
      record "$t" "PASS (${passed:-0} passed)"
    fi
  done
}

# job_with_bundle_data SRC DST [SED_EXPR...]: the manifest SRC with train.dataset (block or flow
# style) pointed at the bundle's copy, and any further sed expressions applied, into DST.
job_with_bundle_data() {
  local src=$1 dst=$2 e args=()
  args=(-e "s#(dataset:[[:space:]]*)[^,}[:space:]]+#\\1$BUNDLE_DATA#")
  for e in "${@:3}"; do args+=(-e "$e"); done
  sed -E "${args[@]}" "$src" >"$dst"
  grep -q "dataset:" "$dst" || echo "gpu-check: $src names no train.dataset: the runner's default is used"
}

# scrape_metrics LOG STOP DST: waits for `ringtrain run`'s line giving replica 0's metrics address
# in LOG, then scrapes it twice a second until the file STOP exists; DST keeps the last scrape whose
# GPU series all hold numbers (else the last scrape at all).
scrape_metrics() {
  "$PY" - "$@" <<'PY'
import math, os, re, sys, time, urllib.request
log, stop, dst = sys.argv[1:4]
url, best, last = None, None, None
def numbers(text):
    vals = {}
    for line in text.splitlines():
        m = re.match(r"(ringtrain_gpu_[a-z_]+)\{[^}]*\}\s+(\S+)", line)
        if m:
            vals[m.group(1)] = float(m.group(2))
    return vals
while not os.path.exists(stop):
    if os.path.exists(log):
        # Replica 0's address, of the newest attempt (a gang restart starts it on a new port);
        # a replica of several GPUs prints a range of ports, its rank 0 on the first.
        found = re.findall(r"-a\d+-0: ranks? 0(?:-\d+)?, metrics http://([0-9.]+):(\d+)", open(log, errors="replace").read())
        url = f"http://{found[-1][0]}:{found[-1][1]}/metrics" if found else url
    if url is not None:
        try:
            body = urllib.request.urlopen(url, timeout=2).read().decode()
            last = body
            v = numbers(body)
            if v and all(math.isfinite(x) for x in v.values()):
                best = body
        except Exception:
            pass
    time.sleep(0.5)  # a GPU run of the example may last only seconds
if best or last:
    open(dst, "w").write(best or last)
PY
}

# check_gpu_metrics FILE: prints the GPU series of a /metrics scrape; fails unless NVML's
# utilization, memory and power and ringtrain's busy ratio all carry real values.
check_gpu_metrics() {
  "$PY" - "$1" <<'PY'
import math, re, sys
vals = {}
for line in open(sys.argv[1]):
    m = re.match(r"(ringtrain_[a-z_]+)(\{[^}]*\})?\s+(\S+)", line)
    if m and (m.group(1).startswith("ringtrain_gpu_") or m.group(1) in
              ("ringtrain_samples_per_second", "ringtrain_step", "ringtrain_loss")):
        print("  " + line.rstrip())
        vals[m.group(1)] = float(m.group(3))
checks = {
    "ringtrain_gpu_utilization_ratio": lambda v: 0 <= v <= 1,
    "ringtrain_gpu_busy_ratio": lambda v: 0 < v <= 1,
    "ringtrain_gpu_memory_used_bytes": lambda v: v > 0,
    "ringtrain_gpu_memory_total_bytes": lambda v: v > 0,
    "ringtrain_gpu_power_watts": lambda v: v > 0,
}
bad = [k for k, ok in checks.items()
       if k not in vals or not math.isfinite(vals[k]) or not ok(vals[k])]
print("; ".join(f"{k.removeprefix('ringtrain_gpu_')} " + (f"{vals[k]:.4g}" if k in vals else "missing")
                for k in checks) + ("" if not bad else f"; {len(bad)} without a real value"))
sys.exit(1 if bad else 0)
PY
}

# ringtrain_run_scraped JOB SUMMARY WORKDIR METRICS: `ringtrain run JOB` within $LIMIT, its
# console into the log and WORKDIR.out, rank 0's /metrics scraped into METRICS; sets RUN_RC.
ringtrain_run_scraped() {
  local job=$1 summary=$2 work=$3 metrics=$4 scraper
  RUN_RC=0
  rm -f "$work.stop"
  scrape_metrics "$work.out" "$work.stop" "$metrics" &
  scraper=$!
  timeout -k 10 "$LIMIT" env LD_LIBRARY_PATH="$LIB_PATH" "$BIN_DIR/ringtrain" run \
    "$job" --summary-json "$summary" --workdir "$work" </dev/null 2>&1 | tee "$work.out" || RUN_RC=$?
  touch "$work.stop"
  wait "$scraper" || true
}

# check_scrape NAME METRICS [NOTE]: records NAME from a scrape of rank 0's /metrics.
check_scrape() {
  local f
  echo
  echo "----- rank 0's /metrics while it trained (GPU series)${3:+ $3} -----"
  if [ ! -s "$2" ]; then
    record "$1" "FAIL (no /metrics scrape of rank 0 succeeded${3:+ $3})"
  elif f=$(check_gpu_metrics "$2"); then
    echo "$f"
    record "$1" "PASS ($(tail -n 1 <<<"$f")${3:+ $3})"
  else
    echo "$f"
    record "$1" "FAIL ($(tail -n 1 <<<"$f")${3:+ $3})"
  fi
}

run_fashion_mnist() {
  local abs=$1 bin=$2 out=$3 example tmp f summary wall
  example=$GPU_EXAMPLE
  if [ ! -f "$example" ]; then
    record "fashion-mnist-gpu" "SKIP ($GPU_EXAMPLE does not exist yet)"
    return
  fi
  gpu_step_limit "fashion-mnist-gpu" "${RUN_TIMEOUT:-180}" 40 || return 0
  echo
  echo "===== ringtrain run $GPU_EXAMPLE ====="
  tmp=$(mktemp -d)
  job_with_bundle_data "$example" "$tmp/job.yaml"
  grep -n "dataset:" "$tmp/job.yaml" || true
  # Rank 0's /metrics is scraped while it trains: the NVML series and the busy ratio.
  ringtrain_run_scraped "$tmp/job.yaml" "$out/gpu-run.json" "$tmp/work" "$tmp/metrics.txt"
  # Rank logs and termination messages into the one log.
  if [ -d "$tmp/work" ]; then
    while IFS= read -r f; do
      echo "----- ${f#"$tmp/work/"} (last 40 lines) -----"
      tail -n 40 "$f"
    done < <(find "$tmp/work" -type f \( -name '*.log' -o -name '*termination*' \) | sort)
  fi
  [ -f "$out/gpu-run.json" ] && cat "$out/gpu-run.json"
  summary=$(python_json_fields "$out/gpu-run.json")
  if [ "$RUN_RC" -eq 0 ]; then
    record "fashion-mnist-gpu" "PASS ($summary)"
  elif [ "$RUN_RC" -eq 124 ] || [ "$RUN_RC" -eq 137 ]; then
    record "fashion-mnist-gpu" "FAIL (timed out after $LIMIT s)"
  else
    record "fashion-mnist-gpu" "FAIL (ringtrain run exit $RUN_RC)"
  fi
  wall=$(json_field "$out/gpu-run.json" wall_seconds)
  if [ "$RUN_RC" -eq 0 ] && ! check_gpu_metrics "$tmp/metrics.txt" >/dev/null 2>&1 &&
    awk -v w="${wall:-0}" 'BEGIN { exit !(w < 15) }' &&
    step_limit "gpu-metrics" 60 30; then
    # Too short a run for NVML's one-second samples: the same job for 5x the epochs, only for
    # its /metrics.
    echo "gpu-check: the example trained for ${wall} s, too short to be sampled: 5x the epochs for /metrics"
    local epochs
    epochs=$(awk '$1 == "epochs:" { print $2 + 0; exit }' "$tmp/job.yaml")
    job_with_bundle_data "$example" "$tmp/long.yaml" \
      "s/^([[:space:]]*)epochs:[[:space:]]*[0-9]+/\\1epochs: $((${epochs:-10} * 5))/"
    grep -n "epochs:" "$tmp/long.yaml" || true
    ringtrain_run_scraped "$tmp/long.yaml" "$tmp/long.json" "$tmp/long" "$tmp/long-metrics.txt"
    check_scrape "gpu-metrics" "$tmp/long-metrics.txt" "(a 5x-epochs rerun)"
  else
    check_scrape "gpu-metrics" "$tmp/metrics.txt"
  fi
  rm -rf "$tmp"
}

# Two replicas sharing the one GPU under `ringtrain run` with backend auto: they must find they
# share it (RINGTRAIN_HOST_RANKS) and train through the TCP ring, NCCL refusing two ranks on one
# GPU. The GPU example at the CPU example's shape: 2 × 64, learning rate 0.001 scaled to 0.002.
run_shared_gpu() {
  local abs=$1 bin=$2 out=$3 rc=0 f
  gpu_step_limit "two-ranks-one-gpu" "${RUN_TIMEOUT:-180}" 40 || return 0
  echo
  echo "===== two replicas share the GPU (backend auto) ====="
  SHARED_TMP=$(mktemp -d)
  job_with_bundle_data "$GPU_EXAMPLE" "$SHARED_TMP/job.yaml" \
    's/^([[:space:]]*)replicas:[[:space:]]*[0-9]+/\1replicas: 2/' \
    's/^([[:space:]]*)batchSizePerReplica:[[:space:]]*[0-9]+/\1batchSizePerReplica: 64/' \
    's/^([[:space:]]*)learningRate:[[:space:]]*[0-9.e-]+/\1learningRate: 0.001/' \
    's/^([[:space:]]*)backend:[[:space:]]*[a-z]+/\1backend: auto/'
  grep -nE "replicas:|batchSizePerReplica:|learningRate:|backend:" "$SHARED_TMP/job.yaml" || true
  timeout -k 10 "$LIMIT" env LD_LIBRARY_PATH="$LIB_PATH" "$bin/ringtrain" run \
    "$SHARED_TMP/job.yaml" --summary-json "$SHARED_TMP/summary.json" --workdir "$SHARED_TMP/work" \
    </dev/null >"$SHARED_TMP/ringtrain.out" 2>&1 || rc=$?
  tail -n "$([ "$rc" -eq 0 ] && echo 4 || echo 30)" "$SHARED_TMP/ringtrain.out"
  # How each rank placed itself (device, backend, why).
  local tcp=0
  for f in "$SHARED_TMP"/work/*.log; do
    [ -f "$f" ] || continue
    echo "----- $(basename "$f") -----"
    grep -iE "placement|backend|share|computing on|cuda|error" "$f" | head -n 8 || true
    tail -n "$([ "$rc" -eq 0 ] && echo 3 || echo 25)" "$f"
    if grep -qE "^[^ ]+ [^ ]+ \[rank [0-9]+\] GPU [0-9]+: .*; backend tcp" "$f"; then
      tcp=$((tcp + 1))
    fi
  done
  if [ "$rc" -ne 0 ]; then
    record "two-ranks-one-gpu" "FAIL (ringtrain run exit $rc)"
  elif [ "$tcp" -ne 2 ]; then
    record "two-ranks-one-gpu" "FAIL ($tcp of 2 rank logs say 'GPU N: ...; backend tcp')"
  else
    record "two-ranks-one-gpu" "PASS (both on the GPU, backend tcp; $(python_json_fields "$SHARED_TMP/summary.json"))"
  fi
}

# The same job on the CPU engine, on this machine's cores: the GPU example changed only to no GPU
# (world size 1, the same global batch and learning rate), and the CPU MLP example (2 replicas of
# half the batch). Issue 22 asks the GPU's test accuracy within 0.003 of the CPU example's.
run_cpu_reference() {
  local abs=$1 bin=$2 out=$3 tmp name job rc gpu_acc
  if [ "$HAVE_GPU" -eq 0 ]; then
    record "accuracy-vs-cpu" "SKIPPED (no GPU: nothing to compare with)"
    return
  fi
  tmp=$(mktemp -d)
  echo
  echo "===== the same jobs on the CPU engine ====="
  local -A acc=()
  for name in gpu-on-cpu mlp-cpu; do
    case "$name" in
      gpu-on-cpu)
        job=$GPU_EXAMPLE
        job_with_bundle_data "$job" "$tmp/$name.yaml" 's/gpusPerReplica:[[:space:]]*[0-9]+/gpusPerReplica: 0/' \
          's/backend:[[:space:]]*nccl/backend: tcp/'
        ;;
      mlp-cpu) job_with_bundle_data "$ROOT/$CPU_EXAMPLE" "$tmp/$name.yaml" ;;
    esac
    rc=0
    step_limit "cpu: $name" "${RUN_TIMEOUT:-180}" 20 || continue
    timeout -k 10 "$LIMIT" env LD_LIBRARY_PATH="$LIB_PATH" "$bin/ringtrain" run \
      "$tmp/$name.yaml" --summary-json "$tmp/$name.json" --workdir "$tmp/$name" </dev/null 2>&1 |
      tail -n 3 || rc=$?
    acc[$name]=$(json_field "$tmp/$name.json" test_accuracy)
    echo "gpu-check: $name: exit $rc, $(python_json_fields "$tmp/$name.json")"
  done
  gpu_acc=$(json_field "$out/gpu-run.json" test_accuracy)
  record "accuracy-vs-cpu" "$(accuracy_verdict gpu "$gpu_acc" "${acc[mlp-cpu]:-}" \
    "${acc[gpu-on-cpu]:-}")"
  if [ -n "${SHARED_TMP:-}" ] && [ -f "$SHARED_TMP/summary.json" ]; then
    record "shared-gpu-vs-cpu" "$(accuracy_verdict shared \
      "$(json_field "$SHARED_TMP/summary.json" test_accuracy)" "${acc[mlp-cpu]:-}")"
  fi
  rm -rf "$tmp"
}

# accuracy_verdict gpu|shared ACCURACY CPU_EXAMPLE [CPU_WORLD_1]: PASS or FAIL, issue 22's bound
# (within 0.003 of the CPU example), with the figures; a missing or NaN value is a FAIL.
accuracy_verdict() {
  "$PY" - "$@" <<'PY' || echo "FAIL (the verdict could not be computed)"
import math, sys
def num(x):
    try:
        v = float(x)
    except ValueError:
        return None
    return v if math.isfinite(v) else None
kind, raw = sys.argv[1], sys.argv[2:] + [""] * 3
g, c, w = (num(x) for x in raw[:3])
if g is None or c is None:
    print("FAIL (missing accuracy: gpu %s, cpu example %s)" % (raw[0] or "-", raw[1] or "-")
          if kind == "gpu" else "FAIL (missing accuracy)")
    sys.exit()
# Issue 22's bound. The runs differ in sample order and rounding only (the GPU's world 1 x 128
# on a hashed device shuffle, the CPU example's world 2 x 64 on the host sampler), and that alone
# is close to it: on the CPU engine seeds 42-46 spread 0.8926-0.8965, and the two shapes at seed
# 42 differ by 0.0024. A FAIL within about 0.005 is read against the world-size-1 figure
# printed beside it before it is taken for a defect of the GPU path.
bound = 0.003
tag = "PASS" if abs(g - c) <= bound else "FAIL"
if kind == "gpu":
    w_txt = "" if w is None else ", CPU engine at world size 1 %.4f (%+.4f)" % (w, g - w)
    print("%s (GPU %.4f vs CPU example %.4f: %+.4f, bound %.3f%s)"
          % (tag, g, c, g - c, bound, w_txt))
else:
    print("%s (2 ranks on the GPU %.4f vs the CPU example %.4f: %+.4f, bound %.3f)"
          % (tag, g, c, g - c, bound))
PY
}

json_field() {  # json_field FILE KEY → the value, or nothing
  "$PY" -c 'import json, sys
try: print(json.load(open(sys.argv[1]))[sys.argv[2]])
except Exception: pass' "$1" "$2" 2>/dev/null || true
}

python_json_fields() {
  "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(", ".join(f"{k} {d[k]}" for k in ("test_accuracy", "epochs", "wall_seconds", "samples_per_second") if k in d))' \
    "$1" 2>/dev/null || echo "no summary"
}

run_compare() {
  local abs=$1 bin=$2 out=$3 rc=0
  step_limit "gpu_compare" "${COMPARE_TIMEOUT:-420}" 60 || return 0
  echo
  echo "===== bench/gpu_compare.py ====="
  COMPARE_LOG=$(mktemp)
  # shellcheck disable=SC2086  # COMPARE_ARGS is a list of words on purpose
  timeout -k 10 "$LIMIT" env PYTHONUNBUFFERED=1 "$PY" "$ROOT/bench/gpu_compare.py" \
    --bench "$bin/gpu_train_bench" --data "$abs/data/fashion-mnist" --out "$out/compare.json" \
    --bench-lib-path "$LIB_PATH" --python "$PY" --deadline-seconds "$((LIMIT - 10))" \
    ${COMPARE_ARGS:-} 2>&1 | tee "$COMPARE_LOG" || rc=$?
  if [ "$rc" -eq 0 ]; then
    if grep -q "no GPU here" "$COMPARE_LOG"; then
      record "gpu_compare" "SKIPPED (no GPU: benches report 'no GPU')"
    else
      record "gpu_compare" "PASS"
    fi
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    record "gpu_compare" "FAIL (timed out after $LIMIT s)"
  else
    record "gpu_compare" "FAIL (exit $rc)"
  fi
}

# compute-sanitizer's memcheck over the GPU unit tests (out-of-bounds and misaligned accesses,
# leaks of device memory, CUDA API errors): what parity tests miss when a stray read does not
# change a result. Last, as it is the slowest and the least likely to be needed.
run_sanitizer() {
  local abs=$1 bin=$2 out=$3 cs rc=0 log
  cs=$(command -v compute-sanitizer || true)
  local c
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
    [ -n "$cs" ] || [ ! -x "$c" ] || cs=$c
  done
  if [ "$HAVE_GPU" -eq 0 ]; then
    record "compute-sanitizer" "SKIPPED (no GPU)"
    return
  elif [ -z "$cs" ]; then
    record "compute-sanitizer" "SKIP (compute-sanitizer not found)"
    return
  elif [ ! -x "$bin/gpu_unit_test" ]; then
    record "compute-sanitizer" "SKIP (gpu_unit_test not in the bundle)"
    return
  fi
  step_limit "compute-sanitizer" "${SANITIZE_TIMEOUT:-180}" 45 || return 0
  echo
  echo "===== compute-sanitizer --tool memcheck gpu_unit_test ====="
  log=$(mktemp)
  # Access errors only: leaks at exit are cuBLAS'/cuDNN's handles as much as ours.
  timeout -k 10 "$LIMIT" env LD_LIBRARY_PATH="$LIB_PATH" "$cs" --tool memcheck \
    --error-exitcode 99 "$bin/gpu_unit_test" \
    --gtest_filter="${SANITIZE_FILTER:--Tf32Budget.*}" >"$log" 2>&1 || rc=$?
  # Its reports (lines of '=========') first, then how the tests ended.
  grep -E '^========= ' "$log" | head -n 60 || true
  grep -E '^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]+ test' "$log" | tail -n 20 || true
  tail -n 3 "$log"
  if [ "$rc" -eq 0 ]; then
    record "compute-sanitizer" "PASS ($(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$log" | tail -n 1))"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    record "compute-sanitizer" "FAIL (timed out after $LIMIT s)"
  elif grep -q "Device not supported" "$log"; then
    # A sandboxed runtime (gVisor) does not let the sanitizer at the device: nothing checked.
    record "compute-sanitizer" "SKIP (the sanitizer does not support this device or runtime)"
  else
    record "compute-sanitizer" "FAIL (exit $rc: $(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$log" | tail -n 1))"
  fi
  rm -f "$log"
}

# unpack_tree BUNDLE WORK: BUNDLE/{bin,lib}/* → WORK/{bin,lib}/, xz-decompressed (xz, or
# Python's lzma where xz is not installed).
unpack_tree() {
  local abs=$1 work=$2 sub f dst
  for sub in bin lib; do
    mkdir -p "$work/$sub"
    for f in "$abs/$sub"/*; do
      [ -e "$f" ] || continue
      dst=$work/$sub/$(basename "${f%.xz}")
      if [[ $f != *.xz ]]; then
        cp "$f" "$dst"
      elif command -v xz >/dev/null; then
        xz -dc "$f" >"$dst"
      else
        "$PY" -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as i, open(sys.argv[2], "wb") as o: shutil.copyfileobj(i, o)' "$f" "$dst"
      fi
      [ "$sub" = lib ] || chmod +x "$dst"
    done
  done
}

cmd_run() {
  local dir=${1:-.gpu-bundle}
  local out=${OUT:-./gpu-out}
  local steps=${GPU_CHECK_STEPS:-tests,run,shared,cpu,compare,sanitize}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  exec > >(tee -a "$out/gpu-check.log") 2>&1
  TEE_PID=$!
  RUN_OUT=$out
  echo "gpu-check run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), bundle $dir, OUT $out," \
    "deadline ${GPU_CHECK_DEADLINE:-360} s"
  [ -f "$dir/MANIFEST" ] || die "$dir/MANIFEST not found: run 'bash scripts/gpu-check.sh bundle' here" \
    "first and name the bundle in the device tool's carry"
  local abs
  abs=$(cd "$dir" && pwd)
  sed -n '1,10p' "$abs/MANIFEST"
  local built here
  built=$(awk '/^source_digest:/ { print $2 }' "$abs/MANIFEST")
  here=$(source_digest)
  if [ "$built" != "$here" ]; then
    record "bundle" "FAIL (built from other sources (digest ${built:-none}) than this tree's ($here): run 'bash scripts/gpu-check.sh bundle' again)"
  fi

  PY=${PYTHON:-python3}
  if ! "$PY" -c 'import nvidia' 2>/dev/null && [ -x /opt/torch/.venv/bin/python3 ]; then
    PY=/opt/torch/.venv/bin/python3  # the GPU machine's PyTorch and pip nvidia-* wheels
  fi

  # bin/ and lib/ travel xz-compressed: unpack them outside DIR, which stays small enough to carry.
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/ringtrain-gpu.XXXXXX")
  WORK_DIR=$work
  trap finish_run EXIT
  unpack_tree "$abs" "$work"
  echo "gpu-check: unpacked bin/ and lib/ into $work"
  echo
  echo "===== device ====="
  HAVE_GPU=0
  if [ "${GPU_CHECK_ASSUME_GPU:-0}" = 1 ]; then
    HAVE_GPU=1
    echo "gpu-check: GPU_CHECK_ASSUME_GPU=1: running the GPU steps whatever nvidia-smi says"
    nvidia-smi -L 2>&1 || true
  elif command -v nvidia-smi >/dev/null && nvidia-smi -L 2>&1 | tee /dev/stderr | grep '^GPU ' >/dev/null; then
    HAVE_GPU=1
    # compute_mode: in Exclusive_Process, two ranks on one GPU cannot both have it.
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_mode \
      --format=csv || true
  else
    echo "gpu-check: no GPU visible (nvidia-smi missing or lists none): GPU steps skip"
  fi
  echo "python: $PY ($("$PY" --version 2>&1))"
  pip_version "$PY" torch nvidia-cublas nvidia-cublas-cu13 nvidia-cudnn-cu13 nvidia-nccl-cu13 \
    nvidia-cuda-runtime nvidia-cuda-nvrtc
  echo "CUDA libraries:"
  find_cuda_libs "$abs" "$PY" "$work/lib" "$work/cuda"
  if [ ${#MISSING_CUDA[@]} -gt 0 ]; then
    echo "gpu-check: CUDA libraries not found here: ${MISSING_CUDA[*]}"
    [ "$HAVE_GPU" -eq 0 ] || record "cuda-libraries" "FAIL (missing ${MISSING_CUDA[*]})"
  fi
  echo "LD_LIBRARY_PATH for ringtrain: $LIB_PATH"
  provide_build_paths "$abs" "$work/bin"
  local probe=$work/bin/gpu_train_bench
  [ -x "$probe" ] || probe=$work/bin/ringtrain-runner
  echo "$(basename "$probe")'s libraries:"
  LD_LIBRARY_PATH=$LIB_PATH ldd "$probe" | sed 's/^/  /' || true

  [[ ,$steps, == *,tests,* ]] && run_gtests "$abs" "$work/bin" "$out"
  BUNDLE_DATA=$abs/data/fashion-mnist
  BIN_DIR=$work/bin
  [[ ,$steps, == *,run,* ]] && run_fashion_mnist "$abs" "$work/bin" "$out"
  # The comparison with PyTorch before the shared-GPU run and the CPU references (which need no
  # GPU and took its time: about 30 s of CPU trainings before it, on a 360 s deadline).
  COMPARE_LOG=
  [[ ,$steps, == *,compare,* ]] && run_compare "$abs" "$work/bin" "$out"
  SHARED_TMP=
  [[ ,$steps, == *,shared,* ]] && run_shared_gpu "$abs" "$work/bin" "$out"
  [[ ,$steps, == *,cpu,* ]] && run_cpu_reference "$abs" "$work/bin" "$out"
  [ -z "$SHARED_TMP" ] || rm -rf "$SHARED_TMP"
  [[ ,$steps, == *,sanitize,* ]] && run_sanitizer "$abs" "$work/bin" "$out"

  SUMMARY_DONE=1
  print_summary
}

print_summary() {
  echo
  echo "===== summary ====="
  local i
  for i in "${!STEP_NAMES[@]}"; do printf '  %-24s %s\n' "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}"; done
  echo "  files in $RUN_OUT: $(find "$RUN_OUT" -type f -printf '%P\n' | sort | tr '\n' ' ')"
  if [ -n "${COMPARE_LOG:-}" ] && [ -f "$COMPARE_LOG" ]; then
    echo
    sed -n '/^ringtrain vs PyTorch/,$p' "$COMPARE_LOG"
    rm -f "$COMPARE_LOG"
  fi
  if [ "$FAILED" -ne 0 ]; then
    echo "gpu-check: FAILED"
    return 1
  fi
  echo "gpu-check: ok"
}

# On any exit of `run`: the summary, even after an error stopped the steps, then the log's tee
# drained, so the log that comes back ends with the summary.
finish_run() {
  local rc=$?
  if [ "${SUMMARY_DONE:-0}" != 1 ]; then
    echo "gpu-check: stopped early (exit $rc)"
    FAILED=1
    print_summary || true
    [ "$rc" -ne 0 ] || rc=1
  fi
  rm -rf "${WORK_DIR:-}" "${SHARED_TMP:-}"
  exec >&- 2>&-
  [ -z "${TEE_PID:-}" ] || wait "$TEE_PID" 2>/dev/null || true
  exit "$rc"
}

case "${1:-}" in
  bundle) cmd_bundle "${@:2}" ;;
  run) cmd_run "${@:2}" ;;
  *)
    echo "usage: bash scripts/gpu-check.sh bundle [DIR] | run [DIR]   (DIR: .gpu-bundle)" >&2
    exit 2
    ;;
esac
