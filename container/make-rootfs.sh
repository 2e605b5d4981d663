#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Assemble the runtime image's whole filesystem (run in the Containerfile's build stage).
#
# Usage: make-rootfs.sh BINARY LICENSE ROOTFS
#
# ROOTFS receives the stripped agent at /usr/sbin/ip-masq-agent, each shared library
# ldd resolves for it (copied as a file at the path ldd printed, which is on the
# loader's built-in search path, so no ld.so.cache is needed), the dynamic loader at
# the path in the binary's PT_INTERP, the project's LICENSE, and the Debian copyright
# file of every package a library comes from. Nothing else: no shell, no /etc.
set -eu

binary=$1
license=$2
rootfs=$3

die() {
	echo "make-rootfs.sh: $*" >&2
	exit 1
}

[ -x "$binary" ] || die "$binary: not an executable"
[ -f "$license" ] || die "$license: missing (the project's LICENSE)"
[ ! -e "$rootfs" ] || die "$rootfs: already exists"

install -D -m 0755 "$binary" "$rootfs/usr/sbin/ip-masq-agent"
strip --strip-all "$rootfs/usr/sbin/ip-masq-agent"
install -D -m 0644 "$license" "$rootfs/usr/share/doc/ip-masq-agent/LICENSE"

# ldd prints "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" for each
# library, "/lib64/ld-linux-x86-64.so.2 (0x...)" for the loader and a bare
# "linux-vdso.so.1 (0x...)" for the kernel's vDSO, which has no file.
libs=$(ldd "$binary" | awk '
	$2 == "=>" && $3 == "not" { print "MISSING " $1; next }
	$2 == "=>" && $3 ~ /^\// { print $3; next }
	$1 ~ /^\// { print $1 }')
case $libs in
*MISSING*) die "ldd cannot resolve: $(echo "$libs" | sed -n 's/^MISSING //p' | tr '\n' ' ')" ;;
esac
[ -n "$libs" ] || die "ldd found no shared libraries in $binary (a static build needs no make-rootfs.sh)"

# The Debian package that owns PATH. ldd prints the path the loader used, which
# after the /usr merge may be /lib/... while dpkg recorded /usr/lib/... (or the
# reverse), so try each spelling and the symlink-resolved file.
owner() {
	real=$(readlink -f "$1")
	for candidate in "$1" "$real" "/usr${1#/usr}" "${1#/usr}" "/usr${real#/usr}" "${real#/usr}"; do
		found=$(dpkg-query -S "$candidate" 2>/dev/null | head -n 1) || continue
		[ -n "$found" ] || continue
		echo "${found%%:*}"
		return 0
	done
	return 1
}

packages=
for lib in $libs; do
	# -L: the file itself, under the name the loader asks for; its mode is kept.
	mkdir -p "$rootfs${lib%/*}"
	cp -L "$lib" "$rootfs$lib"
	package=$(owner "$lib") || die "$lib: no Debian package owns it, so its license is unknown"
	case " $packages " in
	*" $package "*) ;;
	*) packages="$packages $package" ;;
	esac
done

for package in $packages; do
	# cp -L: some doc directories are symlinks (libstdc++6 -> gcc-12-base).
	copyright=/usr/share/doc/$package/copyright
	[ -f "$copyright" ] || die "$copyright: missing"
	mkdir -p "$rootfs/usr/share/doc/$package"
	cp -L "$copyright" "$rootfs/usr/share/doc/$package/copyright"
done

# Which Debian builds are inside, for license compliance (e.g. the LGPL's source
# offer for glibc) and for matching security advisories.
# shellcheck disable=SC2086 # one argument per package
dpkg-query -W -f '${Package} ${Version}\n' $packages \
	>"$rootfs/usr/share/doc/ip-masq-agent/debian-packages"
chmod 0644 "$rootfs/usr/share/doc/ip-masq-agent/debian-packages"

echo "make-rootfs.sh: $(echo "$libs" | wc -l) shared objects from:$packages"
