#!/usr/bin/env bash
# Supply-chain check (issue #17): govulncheck over ./... against a local copy
# of the Go vulnerability database. Called by .ci/run; runs alone as
# `bash .ci/govulncheck.sh`.
#
# CI reaches only the Go module proxy (and apt, npm), not vuln.go.dev, so the
# database comes from the golang.org/x/vulndb module, whose zip ships every
# report as OSV JSON in data/osv/. .ci/vulndb/main.go (standard library only)
# indexes those files into the layout that `govulncheck -db file://` reads.
#
# It fails (exit 3) only when the code calls a vulnerable function, in a
# dependency or in the standard library of the Go toolchain that runs it
# (go1.27.3, pinned below as in .ci/run), whose advisory is not listed in
# .ci/vuln-known.txt; vulnerable code that is only imported or required does
# not fail the step.
#
# Both versions are pinned, so a run is repeatable: a new advisory turns CI
# red only when VULNDB is moved on. To refresh the database, run
# `go list -m golang.org/x/vulndb@latest` outside the module (the module has
# no tags, so -versions lists nothing) and put that pseudo-version below,
# with its date.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
# The toolchain CI builds with (.ci/run; keep the two in step), so that a
# run on its own checks the same standard library: go1.27.3 fixes the
# advisories called with go1.26.8. The go command fetches it from the Go
# module proxy on first use.
export GOTOOLCHAIN=go1.27.3
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

GOVULNCHECK=v1.9.0
# Database date: 2026-11-05 23:49:57 UTC (the vulndb commit of this
# pseudo-version); advisories published after it are not known to the check.
VULNDB=v0.0.0-20261105234957-e22db6528018

start=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Downloaded outside the module so that go.mod and go.sum stay as they are;
# it lands in the module cache like any dependency (25 MB zip, 67 MB unpacked).
osv=$(cd "$tmp" && go mod download -json "golang.org/x/vulndb@$VULNDB" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ ! -d "$osv/data/osv" ]; then
  echo "govulncheck: golang.org/x/vulndb@$VULNDB has no data/osv"; exit 1
fi
go run .ci/vulndb/main.go -osv "$osv/data/osv" -out "$tmp/db" -version "$VULNDB"

# Installed into the temporary folder (not `go run`, which turns every
# failure into exit 1): its packages stay in the build cache, so a rerun
# only links it.
GOBIN="$tmp/bin" go install "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK"

# Default (source, symbol-level) analysis, as JSON for .ci/vulnverdict:
# it fails (exit 3) when a vulnerable function is reachable from the code
# and the advisory is not in .ci/vuln-known.txt (standard-library
# advisories that only a newer Go toolchain fixes, each with its fix).
rc=0
"$tmp/bin/govulncheck" -db "file://$tmp/db" -format json ./... >"$tmp/findings.json" || rc=$?
if [ "$rc" -eq 0 ]; then
  go run .ci/vulnverdict/main.go -known .ci/vuln-known.txt <"$tmp/findings.json" || rc=$?
fi
case $rc in
  0) verdict="no called vulnerable function outside .ci/vuln-known.txt" ;;
  3) verdict="FAILED: the code calls a vulnerable function (see above)" ;;
  *) verdict="FAILED: govulncheck could not check (exit $rc)" ;;
esac
echo "govulncheck: $verdict; $((SECONDS - start)) s (govulncheck $GOVULNCHECK, vulndb $VULNDB, $(go env GOVERSION))"
exit "$rc"
