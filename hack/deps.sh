#!/usr/bin/env bash
# Installs, with apt-get, the Debian packages that `make test` needs and the machine lacks; `make
# test` (and CI, .ci/run) runs it first. When everything is there it says nothing and asks apt
# nothing (no apt-get update), so it costs a few milliseconds.
#
#   hack/deps.sh          as root: install what is missing. Otherwise, if something is missing:
#                         name it and the command that installs it (sudo hack/deps.sh), and fail.
#                         A user is not asked for what only root's test runs use (real nodes,
#                         a real logind): those tests skip unless they run as root.
#   hack/deps.sh --check  only report what is missing (exit status 1 if anything is).
#
# Without apt-get (not Debian) it names the missing commands, which the tests need, and fails.
# The Go toolchain is not installed here: it comes with the machine (go.mod asks for nothing
# newer than the Go there).
set -euo pipefail

check=false
case "${1:-}" in
--check) check=true ;;
"") ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

# Each need is "what shows it is installed (a command, or an absolute path) = its Debian package".
needs=(
	# The Makefile and the scripts: make; git (lint lists the files with git ls-files); flock (one
	# builder of the caches at a time, hack/*.sh) and sha256sum (the caches' keys).
	make=make git=git flock=util-linux sha256sum=coreutils
	# The maintenance policy's tests run Debian's real Prometheus server (internal/testenv/prometheus.go),
	# and the alert rules and dashboard are checked by its promtool (deploy/monitoring_test.go); they
	# fail, not skip, without them. Only the binaries are needed: no recommended exporters.
	prometheus=prometheus promtool=prometheus
	# The image test inspects `make image`'s output with skopeo (hack/image_test.go); the agent's
	# logind reboot is tested on a real dbus-daemon (internal/testenv/dbus.go). Both fail without.
	skopeo=skopeo dbus-daemon=dbus-daemon
)
# What only root's test runs use: the tests that need them skip unless they run as root (they make
# network namespaces, mounts and a container runtime), so a user need not install these.
root_needs=(
	# Real nodes (internal/testenv/realnode.go): Debian's containerd (and its ctr) and runc, the CNI
	# plugins, and the tools that make the node's namespaces and network (nsenter and unshare are
	# util-linux's). The tests skip without them; CI never may.
	containerd=containerd ctr=containerd runc=runc /usr/lib/cni/bridge=containernetworking-plugins
	iptables=iptables ip=iproute2 nsenter=util-linux unshare=util-linux
	# A real systemd-logind, D-Bus and polkit for the agent's logind tests (internal/testenv/logindhost.go):
	# a Debian root filesystem built by mmdebstrap (hack/logind-host.sh) and booted by systemd-nspawn.
	# Skipped without them.
	systemd-nspawn=systemd-container mmdebstrap=mmdebstrap
)

# runc, ip and iptables live in /usr/sbin, which a user's PATH may lack: look there too.
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

present() {
	case "$1" in
	/*) [ -e "$1" ] ;;
	*) command -v "$1" >/dev/null 2>&1 ;;
	esac
}

# missing_cmds and missing_pkgs: what is missing now, and the packages (each once) that bring it.
find_missing() {
	local need what pkg all=("${needs[@]}")
	[ "$(id -u)" = 0 ] && all+=("${root_needs[@]}")
	missing_cmds=() missing_pkgs=()
	for need in "${all[@]}"; do
		what=${need%=*} pkg=${need##*=}
		present "$what" && continue
		missing_cmds+=("$what")
		case " ${missing_pkgs[*]} " in
		*" $pkg "*) ;;
		*) missing_pkgs+=("$pkg") ;;
		esac
	done
}

find_missing
if [ ${#missing_cmds[@]} -eq 0 ]; then
	if $check; then
		echo "deps: everything the tests need is installed"
	fi
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "deps: the tests need these commands, missing here: ${missing_cmds[*]}; this is not Debian (no apt-get),"\
		"so install them with this machine's package manager (Debian's packages: ${missing_pkgs[*]})" >&2
	exit 1
fi

# The command that installs them, as this script was called (make runs hack/deps.sh).
self=$0
[ -x "$self" ] || self="bash $self"
[ "$(id -u)" = 0 ] || self="sudo $self"
if $check || [ "$(id -u)" != 0 ]; then
	echo "deps: the tests need Debian packages that are missing: ${missing_pkgs[*]} (for ${missing_cmds[*]}); install them with: $self" >&2
	exit 1
fi

# Root: install. One installer at a time (two test runs starting together), and look again once
# it is our turn: the other may have installed them.
# The lock is this script itself, opened to read: a lock file in a directory anyone may write to
# could be a link another user planted there, which root would then truncate.
if command -v flock >/dev/null 2>&1; then
	exec 9<"$0"
	flock 9
	find_missing
	[ ${#missing_cmds[@]} -eq 0 ] && exit 0
fi
echo "deps: installing the Debian packages the tests need: ${missing_pkgs[*]} (for ${missing_cmds[*]})..." >&2
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
# apt's and the packages' chatter (debconf, invoke-rc.d) only when it fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 "${missing_pkgs[@]}"; } >"$log" 2>&1; then
	cat "$log" >&2
	echo "deps: apt-get could not install ${missing_pkgs[*]} (its output is above)" >&2
	exit 1
fi
find_missing
if [ ${#missing_cmds[@]} -gt 0 ]; then
	echo "deps: after apt-get install these are still missing: ${missing_cmds[*]} (packages ${missing_pkgs[*]})" >&2
	exit 1
fi
echo "deps: installed them in $((SECONDS - start))s" >&2
