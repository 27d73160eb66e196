# Sourced by the CI job scripts: ccache keyed on paths relative to the repo root, so a fresh
# clone at another path (and every worktree) hits the cache; `timed` prints a step's time.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}
# With -g ccache hashes the build directory's absolute path unless told not to; the debug info
# then names paths relative to the build directory, which is all a sanitizer report needs.
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
JOBS=${JOBS:-2}

timed() {
  local what=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "time: $what: $((SECONDS - start)) s (exit $rc)"
  return $rc
}
