#!/usr/bin/env bash
# Runs every fuzz target of the module, one after another, for FUZZTIME each.
# Targets are found, not listed: every `func FuzzX(` in a *_test.go file
# outside testdata, so a new target is run without editing this script.
# FUZZ=regexp runs only the targets whose name matches.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-1m}
FUZZ=${FUZZ:-.}

targets=$(grep -rEo --include='*_test.go' --exclude-dir=testdata '^func Fuzz[A-Za-z0-9_]+\(' . |
	sed -E 's|^\./(.*)/[^/]+:func (Fuzz[A-Za-z0-9_]+)\($|\1 \2|' | sort -u)
if [ -z "$targets" ]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi
failed=()
while read -r dir name; do
	[[ $name =~ $FUZZ ]] || continue
	echo "== ./$dir $name ($FUZZTIME)"
	# -run='^$' skips the package's other tests; the seeds of this target
	# still run first, as the fuzzer's baseline. A failure does not stop the
	# others: its input is under ./$dir/testdata/fuzz/$name.
	"$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "./$dir" || failed+=("./$dir $name")
done <<<"$targets"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz.sh: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
