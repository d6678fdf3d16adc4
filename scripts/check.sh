#!/usr/bin/env bash
# The quick check to run while working (`make check`): gofmt of the changed Go files,
# go vet and `go test -short` of the packages they are in, plus the packages of this
# module that import those directly. "Changed" is relative to BASE (default: the
# merge base with main, or HEAD when there is no main), working tree and untracked
# files included. Minutes, not the full `make test`; CI still runs `make test`.
#
#   BASE=origin/main scripts/check.sh     # another base
#   DEPENDENTS=0 scripts/check.sh         # the changed packages only
#   CHECKFLAGS=-race scripts/check.sh     # extra go test flags
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
DEPENDENTS=${DEPENDENTS:-1}
step() { printf '==> %s\n' "$*"; }

if [ -z "${BASE:-}" ]; then
  BASE=$(git merge-base HEAD main 2>/dev/null || git rev-parse HEAD)
fi
mod=$($GO list -m)
mapfile -t files < <({ git diff --name-only "$BASE" -- '*.go'; git ls-files --others --exclude-standard -- '*.go'; } |
  grep -v '^gen/' | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)
step "changed since $(git rev-parse --short "$BASE"): ${#files[@]} Go files"
if [ ${#files[@]} -eq 0 ]; then
  echo "nothing to check"
  exit 0
fi

step "gofmt"
out=$(gofmt -l "${files[@]}")
if [ -n "$out" ]; then
  echo "gofmt needs to run on:"; echo "$out"; exit 1
fi

# Packages of this module (the root go.mod; tools/ and k8s/check are their own modules
# and `make test` checks them).
declare -A want=()
for f in "${files[@]}"; do
  d=$(dirname "$f")
  case "$d" in tools | tools/* | k8s/check | k8s/check/*) continue ;; esac
  if [ "$d" = . ]; then want[$mod]=1; else want[$mod/$d]=1; fi
done
# Keep the folders that still hold a package (a deleted one drops out).
pkgsof() { printf '%s\n' "${!want[@]}" | xargs $GO list -e -f '{{if not .Error}}{{.ImportPath}}{{end}}' 2>/dev/null | sort -u; }
mapfile -t pkgs < <(pkgsof)
if [ "$DEPENDENTS" != 0 ] && [ ${#pkgs[@]} -gt 0 ]; then
  declare -A changed=()
  for p in "${pkgs[@]}"; do changed[$p]=1; done
  # One go list of the module: each package with what it and its tests import.
  while read -r p imports; do
    for i in $imports; do
      if [ -n "${changed[$i]:-}" ]; then want[$p]=1; break; fi
    done
  done < <($GO list -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./...)
  mapfile -t pkgs < <(pkgsof)
fi
if [ ${#pkgs[@]} -eq 0 ]; then
  echo "no Go package of this module changed"
  exit 0
fi
step "packages (${#pkgs[@]}):"
printf '    %s\n' "${pkgs[@]}"

step "go vet (package names as they are compiled and vetted)"
$GO vet -v "${pkgs[@]}"

step "go test -short (a line per package as it finishes)"
# shellcheck disable=SC2086
$GO test -short ${CHECKFLAGS:-} "${pkgs[@]}"
step "check passed"
