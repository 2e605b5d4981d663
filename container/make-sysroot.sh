#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Make (or reuse) the Debian bookworm sysroot that the agent is cross-compiled against,
# and print its path.
#
# Usage: container/make-sysroot.sh [--arch ARCH] [--mirror URL] [--refresh]
#
# The sysroot holds container/sysroot-packages and their dependencies for ARCH
# (default arm64), only unpacked (mmdebstrap's extract variant: nothing of ARCH runs on
# the host). Its -dev packages never go into the host's dpkg database: Debian 12's
# libyaml-cpp-dev:arm64 and :amd64 cannot be installed together. It is kept outside
# the source tree, at $IP_MASQ_AGENT_CACHE (default /var/cache/ip-masq-agent)
# /sysroot-ARCH-<hash of the package list, the mirror and this recipe>, and reused
# until the list changes or --refresh asks for a new one (Debian updates). Sysroots
# for other lists are removed. Each is about 300 MB and takes about 20 s to make.
#
# Beside the unpacked files, ip-masq-agent/ in the sysroot holds what make-rootfs.sh
# needs to name each library's Debian package: packages (name and version of every
# unpacked .deb) and owners (file path, then its package, per line).
set -euo pipefail

die() {
	echo "make-sysroot: error: $*" >&2
	exit 1
}
say() { echo "make-sysroot: $*" >&2; }

srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
arch=arm64 mirror='' refresh=0
while [ $# -gt 0 ]; do
	case $1 in
	--arch) arch=${2:?$1 needs a value}; shift ;;
	--mirror) mirror=${2:?$1 needs a value}; shift ;;
	--refresh) refresh=1 ;;
	-h | --help) sed -n '3,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) die "unknown option: $1" ;;
	esac
	shift
done

# Bump when the mmdebstrap command or the fix-ups below change the result.
recipe=1
packages=$(sed 's/#.*//' "$srcdir/container/sysroot-packages" | xargs)
[ -n "$packages" ] || die "container/sysroot-packages lists no package"
cache=${IP_MASQ_AGENT_CACHE:-/var/cache/ip-masq-agent}
hash=$(printf 'recipe %s\narch %s\nmirror %s\n%s\n' "$recipe" "$arch" "$mirror" "$packages" |
	sha256sum | cut -c1-12)
sysroot=$cache/sysroot-$arch-$hash

mkdir -p "$cache"
# One maker at a time per cache (parallel builds, two checkouts on one machine).
exec 9>"$cache/sysroot-$arch.lock"
flock 9

if [ "$refresh" = 0 ] && [ -f "$sysroot/ip-masq-agent/complete" ]; then
	say "$arch sysroot: $sysroot (cached; --refresh makes it again)"
	echo "$sysroot"
	exit 0
fi

command -v mmdebstrap >/dev/null || die "mmdebstrap: not found (apt-get install mmdebstrap)"
[ "$(id -u)" = 0 ] || say "not root: mmdebstrap runs in its unshare mode (needs subuids)"
work=$(mktemp -d "$cache/.sysroot-$arch.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "making the $arch sysroot with mmdebstrap: $packages"
start=$SECONDS
# The extract hook runs while the downloaded .debs are still in the tree: it records
# which package each file comes from (the extract variant installs nothing, so dpkg's
# database stays empty) for the image's license files.
# shellcheck disable=SC2016 # the hook's $1 is mmdebstrap's, not ours
mmdebstrap --quiet --variant=extract --architectures="$arch" --format=directory \
	--include="${packages// /,}" \
	--extract-hook='set -e; mkdir -p "$1/ip-masq-agent"; for deb in "$1"/var/cache/apt/archives/*.deb; do
		package=$(dpkg-deb --show --showformat="\${Package}" "$deb")
		dpkg-deb --show --showformat="\${Package} \${Version}\n" "$deb" >>"$1/ip-masq-agent/packages"
		dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n "s|^\./\(.*[^/]\)$|/\1 $package|p" >>"$1/ip-masq-agent/owners"
	done' \
	bookworm "$work/root" ${mirror:+"$mirror"} >&2 ||
	die "mmdebstrap failed (is a Debian mirror reachable?)"
[ -s "$work/root/ip-masq-agent/owners" ] || die "mmdebstrap's extract hook recorded no package files"

# Absolute symlinks (e.g. usr/lib/aarch64-linux-gnu/libm.so -> /lib/aarch64-linux-gnu/...)
# would point into the host: make them relative, inside the sysroot.
find "$work/root" -path "$work/root/dev" -prune -o -type l -lname '/*' -print |
	while IFS= read -r link; do
		target=$(readlink "$link")
		ln -sfn "$(realpath -m --relative-to="${link%/*}" "$work/root$target")" "$link"
	done
touch "$work/root/ip-masq-agent/complete"
say "mmdebstrap done in $((SECONDS - start)) s"

rm -rf "$sysroot"
mv "$work/root" "$sysroot"
for other in "$cache"/sysroot-"$arch"-*; do
	[ "$other" = "$sysroot" ] || [ ! -d "$other" ] || { say "removing the stale sysroot $other"; rm -rf "$other"; }
done
echo "$sysroot"
