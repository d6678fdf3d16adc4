#!/usr/bin/env bash
# Fails when a tool contract (proto/tools/**) changes incompatibly, including a
# served version that widens its delegated credential (tools/credcheck).
#
# A served tool version must never break its callers: ship a new version instead.
# Tool contracts are compared with the previous commit (or with HEAD when the work
# tree has uncommitted proto changes). The platform's own proto/toolfleet/** may change
# freely until a release is tagged (v*), and from then on is checked against the last tag.
# Override the base with BREAKING_AGAINST=<git ref>.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
BUF=${BUF:-build/bin/buf}

# image_at REF DIR: build a buf image of proto/ as it was at REF; false when REF has no contracts.
image_at() {
  local ref=$1 dir=$2
  git cat-file -e "$ref:buf.yaml" 2>/dev/null || return 1
  git archive "$ref" proto buf.yaml | tar -x -C "$dir"
  mkdir -p "$dir/build"
  cp -r build/protovalidate "$dir/build/"
  (cd "$dir" && "$BUF" build -o image.binpb)
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -n "${BREAKING_AGAINST:-}" ]; then
  base=$BREAKING_AGAINST
elif [ -n "$(git status --porcelain -- proto)" ]; then
  base=HEAD
else
  base=HEAD~1
fi

# Images name files relative to their module root, so "tools" is proto/tools.
"$BUF" build -o "$tmp/current.binpb"

if git rev-parse --verify -q "$base^{commit}" >/dev/null && mkdir "$tmp/base" && image_at "$base" "$tmp/base"; then
  if [ -d proto/tools ]; then
    echo "buf breaking: proto/tools against $base"
    "$BUF" breaking "$tmp/current.binpb" --against "$tmp/base/image.binpb" --path tools --exclude-imports
    # buf compares descriptor shapes, not option values: a served version that asks
    # its callers' accounts for more (ToolOptions.credential) is checked here.
    echo "credcheck: delegated credentials of proto/tools against $base"
    (cd tools && "${GO:-go}" run ./credcheck -against "$tmp/base/image.binpb" -path tools/ "$tmp/current.binpb")
  fi
else
  echo "buf breaking: no contracts at $base, nothing to compare"
fi

tag=$(git describe --tags --abbrev=0 --match 'v*' 2>/dev/null || true)
if [ -n "$tag" ] && mkdir "$tmp/tag" && image_at "$tag" "$tmp/tag"; then
  echo "buf breaking: proto/toolfleet against release $tag"
  "$BUF" breaking "$tmp/current.binpb" --against "$tmp/tag/image.binpb" --path toolfleet --exclude-imports
fi
