#!/usr/bin/env bash
# CI fuzz job: a short bounded run of every fuzz target from the ASan+UBSan build that
# scripts/ci-sanitizers.sh asan made (the seeded driver: replays the corpus, then FUZZ_RUNS
# deterministic mutations). A crash fails the job and leaves the input in $FUZZ_ARTIFACTS.
# Replay a failure: the same FUZZ_SEED and FUZZ_RUNS, or the saved input as the only argument.
#   FUZZ_BUILD_DIR  build directory (build-asan); a RINGTRAIN_FUZZ=LIBFUZZER build works too
#   FUZZ_RUNS       mutations per target (10000)     FUZZ_SEED   mutation seed (1)
#   FUZZ_TARGETS    which targets (all)               FUZZ_TIME   seconds cap per target (120)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ci-env.sh
dir=${FUZZ_BUILD_DIR:-build-asan}
runs=${FUZZ_RUNS:-10000}
seed=${FUZZ_SEED:-1}
cap=${FUZZ_TIME:-120}
artifacts=${FUZZ_ARTIFACTS:-$dir/fuzz-artifacts}
targets=${FUZZ_TARGETS:-manifest store idx csv npy checkpoint kubeconfig http status}
mkdir -p "$artifacts"
# Any allocation over 2 GiB from an input of at most 64 KiB is a bug (libFuzzer's default).
export ASAN_OPTIONS="detect_leaks=0:handle_abort=1:allocator_may_return_null=0:max_allocation_size_mb=2048${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# GCC links UBSan as its own runtime, which does not call the driver's death callback: abort
# instead, so the driver's SIGABRT handler saves the input.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:suppressions=$(pwd)/scripts/sanitizer-suppressions/ubsan.supp"
[ -f "$dir/build.ninja" ] ||
  { echo "fuzz: no build in $dir: run scripts/ci-sanitizers.sh asan first" >&2; exit 1; }
timed "fuzz build" ninja -C "$dir" -j "$JOBS" fuzz_targets >/dev/null
engine=$(sed -n 's/^RINGTRAIN_FUZZ:STRING=//p' "$dir/CMakeCache.txt")
echo "fuzz: engine $engine, $runs runs per target, seed $seed (FUZZ_SEED=$seed to replay)"
rc=0
for t in $targets; do
  bin=$dir/bin/${t}_fuzz
  [ -x "$bin" ] || { echo "fuzz: $bin is not built" >&2; rc=1; continue; }
  flags=(-runs="$runs" -seed="$seed" -max_len=65536 -timeout=25 -max_total_time="$cap"
         -dict=tests/fuzz/dict/$t.dict -artifact_prefix="$artifacts/$t-")
  corpora=(tests/fuzz/corpus/$t)
  if [ "$engine" = LIBFUZZER ]; then
    # libFuzzer adds what it finds to the first directory: keep it out of the tree.
    scratch=$artifacts/corpus-$t
    mkdir -p "$scratch"
    corpora=("$scratch" "${corpora[@]}")
  fi
  log=$artifacts/$t.log
  if ! timed "fuzz $t" bash -c '"$@" >"$0" 2>&1' "$log" "$bin" "${flags[@]}" "${corpora[@]}"; then
    echo "fuzz: $t FAILED (log: $log); tail:" >&2
    tail -n 40 "$log" >&2
    rc=1
  else
    tail -n 1 "$log"
  fi
done
exit $rc
