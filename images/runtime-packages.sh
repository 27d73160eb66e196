#!/usr/bin/env bash
# Prints, one per line and sorted, the Debian/Ubuntu packages that provide the shared libraries
# the given ELF binaries load (ldd), so a runtime image installs exactly those:
#   apt-get install --no-install-recommends $(images/runtime-packages.sh build/bin/ringtrain)
# Fails naming the library when one is missing or no installed package owns it. CUDA libraries
# from the toolkit under /usr/local/cuda* (cuBLAS, cuDNN, NCCL) are skipped with a note: the
# runner image's CUDA + cuDNN runtime base provides them (and installs libnccl2 explicitly).
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: runtime-packages.sh BINARY..." >&2; exit 2; }
owner() {
  # dpkg records a library under /lib or /usr/lib (merged /usr): try the path as given, the
  # path it resolves to, and both spellings of each.
  local lib=$1 real candidates=()
  real=$(readlink -f "$lib")
  for p in "$lib" "$real"; do
    candidates+=("$p" "/usr${p#/usr}" "${p#/usr}")
  done
  for p in "${candidates[@]}"; do
    # "pkg[:arch][, pkg2]: /path"; "diversion by ..." lines are not owners.
    local hit
    hit=$(dpkg-query -S "$p" 2>/dev/null | grep -v '^diversion ' | head -n1 | cut -d: -f1 | cut -d, -f1) || true
    [ -n "$hit" ] && { echo "$hit"; return 0; }
  done
  return 1
}
declare -A packages=()
for bin in "$@"; do
  [ -f "$bin" ] || { echo "runtime-packages: no such file: $bin" >&2; exit 1; }
  ldd_out=$(ldd "$bin") || { echo "runtime-packages: ldd failed on $bin" >&2; exit 1; }
  if grep -q "not found" <<<"$ldd_out"; then
    echo "runtime-packages: $bin: $(grep 'not found' <<<"$ldd_out" | xargs)" >&2
    exit 1
  fi
  # "libfoo.so.1 => /path/libfoo.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)".
  while read -r lib; do
    case "$(readlink -f "$lib")" in
      /usr/local/cuda*)
        echo "runtime-packages: $(basename "$lib") comes with the CUDA base image" >&2
        continue
        ;;
    esac
    pkg=$(owner "$lib") || { echo "runtime-packages: no package owns $lib" >&2; exit 1; }
    packages[$pkg]=1
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$ldd_out")
done
printf '%s\n' "${!packages[@]}" | sort
