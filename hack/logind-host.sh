#!/usr/bin/env bash
# Builds, on first use, the root filesystem of a "host" with a real systemd, D-Bus, systemd-logind
# and polkit (Debian bookworm, minbase) into an ignored cache and prints its directory. Tests boot a
# copy of it with systemd-nspawn (internal/testenv/logindhost.go): the agent's logind paths
# (reboot, power-off, inhibitor locks, PrepareForShutdown, polkit) meet the real programs there.
#
# Needs root, mmdebstrap and the Debian mirror apt uses (its sources file is passed on, so the
# packages match the machine's). About 15-90 s cold and ~160 MB; later runs reuse the cache. The cache
# key is this script's content: a change of packages or settings rebuilds.
# Usage: logind-host.sh [SUITE]: bookworm (the default: Debian 12, systemd 252) or trixie (Debian 13,
# systemd 257, whose logind refuses root's reboot past a block inhibitor: the tests of block mode
# boot both).
# Environment: EDGEDRAIN_CACHE (default: $XDG_CACHE_HOME/edgedrain or ~/.cache/edgedrain).
set -euo pipefail

suite=${1:-bookworm}
case "$suite" in
bookworm | trixie) ;;
*)
	echo "logind-host: unknown suite $suite (bookworm or trixie)" >&2
	exit 2
	;;
esac
cache="${EDGEDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edgedrain}"
key=$(sha256sum "$0" | cut -c1-16)
out="$cache/logind-host/$key-$suite"

if [ -e "$out/.done" ]; then
	echo "$out/root"
	exit 0
fi
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
if [ -e "$out/.done" ]; then
	echo "$out/root"
	exit 0
fi
command -v mmdebstrap >/dev/null || {
	echo "logind-host: mmdebstrap is needed (Debian package mmdebstrap)" >&2
	exit 1
}

# The mirror: the machine's own apt sources (deb822 or one-line), else Debian's. For bookworm the
# file itself (the packages match the machine's); for another suite its first Debian URI.
mirror=http://deb.debian.org/debian
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
	if [ -s "$f" ] && grep -qE '^(URIs:|deb )' "$f"; then
		if [ "$suite" = bookworm ]; then
			mirror=$f
		else
			uri=$(sed -nE 's/^URIs:[[:space:]]*([^[:space:]]+).*/\1/p; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\2/p' "$f" |
				grep -v security | head -n1)
			mirror=${uri:-$mirror}
		fi
		break
	fi
done

rm -rf "$out/root"
start=$SECONDS
echo "logind-host: building the root filesystem (mmdebstrap, $suite minbase) from $mirror" >&2
# No documentation, manual pages or locales: a third of the size, nothing the tests read.
mmdebstrap --mode=root --variant=minbase --quiet \
	--include=systemd,systemd-sysv,dbus,polkitd,libpam-systemd \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
	"$suite" "$out/root" "$mirror" >&2

r="$out/root"
# Nothing that runs on a timer or waits for hardware during a test; no login prompt.
for unit in apt-daily.timer apt-daily-upgrade.timer fstrim.timer e2scrub_all.timer e2scrub_reap.service \
	dpkg-db-backup.timer man-db.timer console-getty.service getty@.service systemd-timesyncd.service; do
	ln -sf /dev/null "$r/etc/systemd/system/$unit"
done
# The machine's hostname is not the host's.
echo edgedrain-host >"$r/etc/hostname"
# A fixed machine ID, as a real host has one that survives reboots (a new one at every boot
# would be a new machine; the boot ID is what changes).
printf '%s\n' "$(echo edgedrain-logind-host | sha256sum | cut -c1-32)" >"$r/etc/machine-id"
touch "$out/.done"
echo "logind-host: built in $((SECONDS - start)) s ($(du -sh "$r" | cut -f1))" >&2
echo "$r"
