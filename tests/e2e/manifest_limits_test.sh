#!/usr/bin/env bash
# Hostile manifests through the CLI (issue 10.5): each used to abort `ringtrain validate`
# (SIGABRT), overflow its stack (SIGSEGV) or take gigabytes; each must now exit 1 with one
# error line that names the file and the field, and never echo a huge value.
source "$(dirname "$0")/lib.sh"
head='apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: demo}'
check() {  # check NAME EXPECTED: validates $WORK/NAME.yaml
  local name=$1 expected=$2 rc=0
  "$BIN/ringtrain" validate "$WORK/$name.yaml" >"$WORK/$name.out" 2>&1 || rc=$?
  [ "$rc" = 1 ] || fail "$name: exit code $rc, expected 1 ($(head -c 300 "$WORK/$name.out"))"
  grep -qF "$WORK/$name.yaml: $expected" "$WORK/$name.out" ||
    fail "$name: expected '$expected' in: $(head -c 300 "$WORK/$name.out")"
  [ "$(wc -c <"$WORK/$name.out")" -lt 1000 ] || fail "$name: the error echoes too much"
}
printf 'apiVersion:\nkind: TrainingJob\nmetadata: {name: demo}\nspec: {}\n' >"$WORK/null_api.yaml"
check null_api "apiVersion: required"
printf '%s\nspec: {backend: "\xff\xfe"}\n' "$head" >"$WORK/utf8.yaml"
check utf8 "spec.backend: not valid UTF-8"
printf '%s\nspec: {}\nx: &x [*x]\n' "$head" >"$WORK/cycle.yaml"
check cycle "x[0]: an alias refers to a node that contains it"
{
  printf '%s\nspec:\n  template:\n    l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n' "$head"
  for i in 1 2 3 4 5 6 7 8 9; do
    p="*l$((i - 1))"
    printf '    l%d: &l%d [%s, %s, %s, %s, %s, %s, %s, %s, %s]\n' "$i" "$i" "$p" "$p" "$p" "$p" "$p" "$p" "$p" "$p" "$p"
  done
} >"$WORK/laughs.yaml"
check laughs "spec.template"
printf '%s\nspec: {replicas: 1}\nspec: {replicas: 2}\n' "$head" >"$WORK/dup.yaml"
check dup "spec: duplicate key"
printf '%s\nspec: {}\n---\n%s\nspec: {}\n' "$head" "$head" >"$WORK/two.yaml"
check two "a second YAML document"
{ printf '%s\nspec: {backend: ' "$head"; head -c 900000 /dev/zero | tr '\0' x; printf '}\n'; } >"$WORK/long.yaml"
check long "spec.backend: must be one of auto, nccl, tcp"
{ printf '%s\nspec: {image: ' "$head"; head -c 10000000 /dev/zero | tr '\0' x; printf '}\n'; } >"$WORK/huge.yaml"
check huge "larger than the limit"
echo PASS
