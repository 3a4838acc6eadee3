#!/usr/bin/env bash
# Builds, on first use, the pinned helm binary (hack/tools/helm: helm.sh/helm/v4 v4.3.1) into an
# ignored cache and prints its path. Later runs reuse it; the cache key is the content of the tools
# module's go.mod and go.sum, so a version bump rebuilds and an unchanged pin never does. Helm comes
# from the Go module proxy like every other dependency, never from a download site.
#
# A cold build takes about 5 to 8 minutes on 2 cores (8 CPU-minutes); progress goes to stderr.
# A test that needs helm builds it on first use, within its test binary's -timeout: `bash hack/helm.sh`
# beforehand (as .ci/run does) keeps the build out of it.
# Environment: EDGEDRAIN_CACHE (default: $XDG_CACHE_HOME/edgedrain or ~/.cache/edgedrain), outside the
# checkout so that every clone on a machine (CI's fresh ones too) shares one build.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/hack/tools/helm"
cache="${EDGEDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgedrain}"
key=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)
dir="$cache/helm/$key"
bin="$dir/helm"

if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$dir"
# Only one builder at a time (parallel test packages may all ask at once).
exec 9>"$dir/.lock"
flock 9
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

start=$SECONDS
cd "$mod"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS=-mod=mod CGO_ENABLED=0
version=$(go list -m -f '{{.Version}}' helm.sh/helm/v4)
echo "helm: building helm $version (first use: 5 to 8 minutes on 2 cores; cached afterwards in $dir;" \
	"a test's -timeout includes it unless it was built beforehand with: bash hack/helm.sh)..." >&2
# helm version reports the pinned release, as the release binaries do.
go build -trimpath -ldflags="-s -X helm.sh/helm/v4/internal/version.version=$version" \
	-o "$bin.tmp" helm.sh/helm/v4/cmd/helm
mv "$bin.tmp" "$bin"
echo "helm: built in $((SECONDS - start))s" >&2
echo "$bin"
