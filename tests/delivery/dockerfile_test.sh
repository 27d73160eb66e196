#!/usr/bin/env bash
# The image recipes, without a Docker engine: the Dockerfiles pass the dockerfile-utils linter
# with no diagnostic; both are multi-stage, build with scripts/build.sh (README's script), run
# as the non-root 65532 and install their runtime libraries from images/runtime-packages.sh;
# every path they COPY from the context exists and is not excluded by .dockerignore; and
# runtime-packages.sh maps the libraries of the built binaries to installed Debian packages.
source "$(dirname "$0")/lib.sh"
tools
for f in "$SRC"/images/*.Dockerfile; do
  out=$("$DOCKERFILE_UTILS" lint --json "$f") || true
  [ "$out" = "[]" ] || { "$DOCKERFILE_UTILS" lint "$f"; fail "dockerfile-utils lint $(basename "$f"): $out"; }
done
python3 - "$SRC" <<'PY' || fail "Dockerfile structure"
import fnmatch, os, re, sys
src = sys.argv[1]
ignore = [l.strip() for l in open(f"{src}/.dockerignore") if l.strip() and not l.startswith("#")]
def ignored(path):
    parts = path.split("/")
    for pat in ignore:
        pat = pat.lstrip("/")
        for i in range(1, len(parts) + 1):
            if fnmatch.fnmatch("/".join(parts[:i]), pat):
                return True
    return False
for need in ("CMakeLists.txt", "scripts/build.sh", "scripts/deps.sh", "images/runtime-packages.sh",
             "common", "runner", "controller"):
    if ignored(need):
        print(f".dockerignore excludes {need}, which the image build needs")
        sys.exit(1)
for junk in ("build", "build-main", ".git", ".cache"):
    if not ignored(junk):
        print(f".dockerignore must exclude {junk}")
        sys.exit(1)
problems = []
for name in ("controller", "runner"):
    path = f"{src}/images/{name}.Dockerfile"
    text = re.sub(r"\\\n", " ", open(path).read())
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
    froms = [l for l in lines if l.upper().startswith("FROM ")]
    if len(froms) < 2 or " AS build" not in froms[0]:
        problems.append(f"{name}: want a multi-stage build whose first stage is `AS build`")
    # Stage names (FROM build-cpu, FROM runtime-${FLAVOUR}) and scratch need no tag.
    stages = {f.split(" AS ")[1].strip() for f in froms if " AS " in f}
    def external(f):
        base = f.split(" AS ")[0].split()[1]
        return base != "scratch" and "$" not in base.split(":")[0] and base not in stages
    if any(":latest" in f or (external(f) and ":" not in f.split(" AS ")[0]) for f in froms):
        problems.append(f"{name}: base images need explicit tags")
    final = lines[lines.index(froms[-1]):]
    users = [l for l in final if l.upper().startswith("USER ")]
    if not users or users[-1].split()[1].split(":")[0] in ("0", "root"):
        problems.append(f"{name}: the final stage must end as a non-root USER")
    elif users[-1].split()[1] != "65532:65532":
        problems.append(f"{name}: run as 65532:65532 (the Deployment's runAsUser)")
    if not any("scripts/build.sh" in l for l in lines if l.upper().startswith("RUN ")):
        problems.append(f"{name}: the build stage must use scripts/build.sh")
    if not any("runtime-packages.sh" in l for l in lines) or not any("runtime-packages.txt" in l and "apt-get install" in l for l in final):
        problems.append(f"{name}: the runtime stage must install the packages runtime-packages.sh found")
    if not any(l.upper().startswith("ENTRYPOINT [") for l in final):
        problems.append(f"{name}: exec-form ENTRYPOINT in the final stage")
    # The runner's runtime stage is runtime-${FLAVOUR}: the release flavour (cuda) runs on
    # NVIDIA's CUDA runtime image with NCCL; the cpu flavour (what CI runs) on Debian 12 slim.
    def stage(label):
        f = next((f for f in froms if f.endswith(" AS " + label)), None)
        if f is None:
            return None, []
        i = lines.index(f)
        j = next((k for k in range(i + 1, len(lines)) if lines[k] in froms), len(lines))
        return f, lines[i:j]
    if name == "runner":
        cuda_from, cuda_stage = stage("runtime-cuda")
        cpu_from, _ = stage("runtime-cpu")
        if froms[-1] != "FROM runtime-${FLAVOUR}":
            problems.append("runner: the final stage must be FROM runtime-${FLAVOUR}")
        if cuda_from is None or not re.search(r"nvidia/cuda:\S*-runtime-", cuda_from):
            problems.append("runner: the runtime-cuda base must be NVIDIA's CUDA runtime image")
        if not any("libnccl2" in l for l in cuda_stage):
            problems.append("runner: the runtime-cuda stage must install NCCL (libnccl2)")
        if cpu_from is None or "debian:" not in cpu_from or "-slim" not in cpu_from:
            problems.append("runner: the runtime-cpu base must be debian:12-slim")
    if name == "controller" and "debian:" not in froms[-1] or name == "controller" and "-slim" not in froms[-1]:
        problems.append("controller: the runtime base must be debian:12-slim")
    for l in lines:
        if l.upper().startswith("COPY ") and "--from=" not in l:
            for s in l.split()[1:-1]:
                # prebuilt/ is the context scripts/images.sh assembles from a host build.
                if s.startswith("prebuilt/"):
                    continue
                if s != "." and (not os.path.exists(f"{src}/{s}") or ignored(s)):
                    problems.append(f"{name}: COPY {s}: not in the build context")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY
# The runtime stages' package lists, resolved here the way the build stages resolve them.
for b in ringtrain ringtrain-runner; do
  pkgs=$(bash "$SRC/images/runtime-packages.sh" "$BIN/$b") || fail "runtime-packages.sh $b"
  [ -n "$pkgs" ] || fail "runtime-packages.sh $b found no packages"
  echo "$b needs:" $pkgs
  grep -qx libc6 <<<"$pkgs" || fail "runtime-packages.sh $b: libc6 missing from $pkgs"
  grep -qx 'libstdc++6' <<<"$pkgs" || fail "runtime-packages.sh $b: libstdc++6 missing"
  while read -r p; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      fail "runtime-packages.sh $b: $p is not an installed package"
  done <<<"$pkgs"
  if grep -E -- '-dev$' <<<"$pkgs"; then fail "runtime-packages.sh $b: a -dev package in the runtime set"; fi
  # The runtime stage's install line, simulated: every name resolves to an installable package.
  xargs apt-get install --simulate -y --no-install-recommends ca-certificates <<<"$pkgs" \
    >"$WORK/apt-sim.log" 2>&1 || { cat "$WORK/apt-sim.log"; fail "apt-get install --simulate of $b's runtime packages"; }
done
if bash "$SRC/images/runtime-packages.sh" /nonexistent 2>/dev/null; then fail "runtime-packages.sh accepted a missing file"; fi
echo PASS
