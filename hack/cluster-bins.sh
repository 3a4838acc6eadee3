#!/usr/bin/env bash
# Builds, on first use, the pinned binaries of the local test cluster into an ignored cache and prints
# the directory that holds them. Later runs reuse the cache; the cache key is the content of the tools
# modules (hack/tools/*/go.mod and go.sum), so a version bump rebuilds and an unchanged pin never does.
#
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  Kubernetes v1.37.1 (hack/tools/kube)
#   etcd                                                              v3.7.3             (hack/tools/etcd)
#   kwok                                                              v0.8.0             (hack/tools/kwok)
#
# With --real-node it also builds what a real node and its network need (tests that run real pods):
#
#   kubelet, kube-proxy                                               Kubernetes v1.37.1 (hack/tools/kube)
#   coredns (the kubernetes plugin only)                              v1.15.0            (hack/tools/coredns)
#
# A cold build takes 15-40 minutes (measured; the more the machine's other work, the longer) and
# 2.5 GB of memory on 2 cores (the real node's binaries about 15 CPU-minutes more); progress goes to
# stderr. A build cut short keeps the binaries it finished (and Go's build cache what it compiled).
# Environment: EDGEDRAIN_CACHE (default: $XDG_CACHE_HOME/edgedrain or ~/.cache/edgedrain), outside the
# checkout so that every clone on a machine (CI's fresh ones too) shares one build.
# EDGEDRAIN_BUILD_LIMIT: set by the program that runs this script under a time limit
# (internal/testenv/bins.go): which limit and how to raise it, shown when a build starts.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
cache="${EDGEDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgedrain}"
key=$(cat "$tools"/kube/go.mod "$tools"/kube/go.sum "$tools"/etcd/go.mod "$tools"/etcd/go.sum \
	"$tools"/etcd/main.go "$tools"/kwok/go.mod "$tools"/kwok/go.sum \
	"$tools"/coredns/go.mod "$tools"/coredns/go.sum "$tools"/coredns/main.go | sha256sum | cut -c1-16)
bin="$cache/cluster-bins/$key"
want=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwok-stages/pod-ready.yaml)
real_node=false
case "${1:-}" in
--real-node) real_node=true want+=(kubelet kube-proxy coredns) ;;
"") ;;
*)
	echo "usage: $0 [--real-node]" >&2
	exit 2
	;;
esac

have_all() {
	local b
	for b in "${want[@]}"; do [ -e "$bin/$b" ] || return 1; done
}

if have_all; then
	echo "$bin"
	exit 0
fi

mkdir -p "$bin"
# Only one builder at a time (parallel test packages may all ask at once).
exec 9>"$bin/.lock"
flock 9
if have_all; then
	echo "$bin"
	exit 0
fi

say() { echo "cluster-bins: $*" >&2; }
build() { # build <module dir> <binary name> <package>
	local dir=$1 name=$2 pkg=$3 start=$SECONDS
	[ -x "$bin/$name" ] && return 0
	say "building $name (first use; cached afterwards in $bin)..."
	(cd "$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$bin/$name.tmp" "$pkg")
	mv "$bin/$name.tmp" "$bin/$name"
	say "built $name in $((SECONDS - start))s"
}

# kwok's own stage definitions (node start-up and heartbeat, pod start and completion) ship in its
# module; the test helper adds its own pod deletion stage (internal/testenv/kwok.go).
copy_stages() {
	local dir
	dir=$(cd "$tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
	mkdir -p "$bin/kwok-stages"
	cp "$dir/kustomize/stage/node/fast/node-initialize.yaml" \
		"$dir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
		"$dir/kustomize/stage/pod/fast/pod-complete.yaml" \
		"$dir/kustomize/stage/pod/fast/pod-ready.yaml" "$bin/kwok-stages/"
}

say "building the local cluster's binaries once into $bin: 15-40 minutes on 2 cores (later runs reuse them)"
if [ -n "${EDGEDRAIN_BUILD_LIMIT:-}" ]; then
	say "time limit: $EDGEDRAIN_BUILD_LIMIT"
fi
build "$tools/etcd" etcd .
build "$tools/kwok" kwok sigs.k8s.io/kwok/cmd/kwok
build "$tools/kube" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build "$tools/kube" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build "$tools/kube" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build "$tools/kube" kubectl k8s.io/kubernetes/cmd/kubectl
copy_stages
if $real_node; then
	build "$tools/kube" kubelet k8s.io/kubernetes/cmd/kubelet
	build "$tools/kube" kube-proxy k8s.io/kubernetes/cmd/kube-proxy
	build "$tools/coredns" coredns .
fi
echo "$bin"
