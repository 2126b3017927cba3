#!/usr/bin/env bash
# No dead code (issue 42): every function of the product is reached from a
# command (cmd/syncpipe, the examples, the benchmark commands) or is listed,
# with its purpose, in .ci/deadcode-allow.txt — a library name for programs
# of their own, whose Example test must exist. staticcheck's U1000 finds
# unused unexported code; this finds what only tests call, exported or not.
# Harness code (internal/testkit, e2e, benchmarks) is not the product.
set -euo pipefail
cd "$(dirname "$0")/.."
# deadcode (x/tools v0.53.0) type-checks the standard library at the
# module's language version (go.mod: go 1.26), and go1.27's library uses
# go1.27 features ("generic method requires go1.27"), so it runs on the
# newest go1.26 toolchain, which the module supports, whatever CI builds
# with (GOTOOLCHAIN=go1.27.3).
export GOTOOLCHAIN=go1.26.8
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" go install golang.org/x/tools/cmd/deadcode@v0.53.0
"$tmp/deadcode" ./cmd/... ./examples/... ./benchmarks/cmd/... |
  sed -E 's#^(.*)/[^/]+\.go:[0-9]+:[0-9]+: unreachable func: (.*)$#\1 \2#' |
  { grep -Ev '^(internal/testkit|e2e|benchmarks)(/| )' || true; } | sort -u >"$tmp/found"
grep -Ev '^(#|$)' .ci/deadcode-allow.txt | awk '{print $1, $2}' | sort -u >"$tmp/allowed"
fail=0
while read -r dir fn; do
  echo "dead code: $dir.$fn is reached from no command: delete it, or give it an Example test and list it in .ci/deadcode-allow.txt with its purpose"
  fail=1
done < <(comm -23 "$tmp/found" "$tmp/allowed")
while read -r dir fn; do
  echo "stale entry: $dir $fn in .ci/deadcode-allow.txt is reached from a command now, or gone: delete the line"
  fail=1
done < <(comm -13 "$tmp/found" "$tmp/allowed")
while read -r dir fn purpose; do
  ex=${purpose#example: }
  [ "$ex" = "$purpose" ] && continue
  if ! grep -qs "^func $ex()" "$dir"/*_test.go; then
    echo "missing example: $dir.$fn is listed as a library name, but $dir has no $ex"
    fail=1
  fi
done < <(grep -Ev '^(#|$)' .ci/deadcode-allow.txt | awk '{d=$1; f=$2; $1=""; $2=""; sub(/^  */, ""); print d, f, $0}')
exit $fail
