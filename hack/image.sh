#!/usr/bin/env bash
# Builds edgedrain's container image without a container runtime or a base image (`make image`):
# static binaries (CGO_ENABLED=0) for each platform, assembled by hack/tools/image
# (go-containerregistry) into an OCI image layout and an oci-archive tar. The same commit gives
# the same image digest: binaries are built with -trimpath and no build ID, and every timestamp in
# the image is the commit's time.
#
# Environment (all optional):
#   IMAGE_PLATFORMS  comma-separated os/arch list         (default linux/amd64,linux/arm64)
#   IMAGE_REPO       repository recorded for importers    (default ghcr.io/edgedrain/edgedrain)
#   IMAGE_TAG        tag                                  (default: git describe, else dev)
#   IMAGE_REVISION   source revision label                (default: git rev-parse HEAD)
#   IMAGE_OUT        OCI layout directory                 (default bin/image)
#   IMAGE_ARCHIVE    the layout as a tar (oci-archive)    (default bin/edgedrain-image.tar)
#   SOURCE_DATE_EPOCH creation time, Unix seconds         (default: the commit's time)
# One commit, tag and Go release give one digest. Load it with
#   skopeo copy --all oci-archive:bin/edgedrain-image.tar:TAG docker://REGISTRY/edgedrain:TAG
# or, on each k3s node: k3s ctr images import --all-platforms bin/edgedrain-image.tar
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
platforms=${IMAGE_PLATFORMS:-linux/amd64,linux/arm64}
repo=${IMAGE_REPO:-ghcr.io/edgedrain/edgedrain}
revision=${IMAGE_REVISION:-$(git rev-parse HEAD 2>/dev/null || true)}
tag=${IMAGE_TAG:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
created=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
out=${IMAGE_OUT:-$root/bin/image}
archive=${IMAGE_ARCHIVE:-$root/bin/edgedrain-image.tar}
out=$(realpath -m "$out") archive=$(realpath -m "$archive") # the assembler runs in its own module
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Settings from the environment that would change the binaries: the platform's baseline
# (GOAMD64/GOARM64: v1 and v8.0, what any edge machine runs), flags and experiments.
unset GOFLAGS GOAMD64 GOARM64 GOARM GOEXPERIMENT

IFS=, read -ra list <<<"$platforms"
for p in "${list[@]}"; do
	goos=${p%%/*} goarch=${p#*/}
	echo "image: building the binaries for $goos/$goarch" >&2
	CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' \
		-o "$work/${goos}_${goarch}/" ./cmd/coordinator ./cmd/agent ./cmd/edgedrainctl
done

cd hack/tools/image
go run . --bin-dir "$work" --platforms "$platforms" --out "$out" --archive "$archive" \
	--repo "$repo" --tag "$tag" --revision "$revision" --created "$created"
