#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Assemble the runtime image's whole filesystem: in the Containerfile's build stage for
# the native image, on the host (build-image.sh) for a cross-compiled one.
#
# Usage: make-rootfs.sh [--sysroot DIR --multiarch TRIPLET] BINARY LICENSE ROOTFS
#
# ROOTFS receives the stripped agent at /usr/sbin/ip-masq-agent, each shared library
# it loads (copied as a file at a path on the loader's built-in search path, so no
# ld.so.cache is needed), the dynamic loader at the path in the binary's PT_INTERP,
# the project's LICENSE, and the Debian copyright file of every package a library
# comes from. Nothing else: no shell, no /etc.
#
# Natively, ldd resolves the libraries and dpkg names their packages. With --sysroot
# (a foreign binary, which ldd cannot run), the libraries are the DT_NEEDED entries of
# the binary and of each library, found in DIR's /lib/TRIPLET, /usr/lib/TRIPLET, /lib
# and /usr/lib as the loader would, and their packages and copyright files come from
# DIR (container/make-sysroot.sh records which package each file belongs to).
set -eu

sysroot='' multiarch=''
while [ $# -gt 0 ]; do
	case $1 in
	--sysroot) sysroot=${2:?--sysroot needs a value}; shift 2 ;;
	--multiarch) multiarch=${2:?--multiarch needs a value}; shift 2 ;;
	*) break ;;
	esac
done
[ $# = 3 ] || { echo "usage: make-rootfs.sh [--sysroot DIR --multiarch TRIPLET] BINARY LICENSE ROOTFS" >&2; exit 2; }
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

[ -z "$sysroot" ] || [ -n "$multiarch" ] || die "--sysroot needs --multiarch (e.g. aarch64-linux-gnu)"
case $sysroot in
*[[:space:]]*) die "$sysroot: a sysroot path with white space is not supported" ;;
esac

# Natively the build stage's strip; for a foreign binary the cross toolchain's.
strip_tool='strip'
[ -z "$sysroot" ] || strip_tool=$multiarch-strip
install -D -m 0755 "$binary" "$rootfs/usr/sbin/ip-masq-agent"
"$strip_tool" --strip-all "$rootfs/usr/sbin/ip-masq-agent"
install -D -m 0644 "$license" "$rootfs/usr/share/doc/ip-masq-agent/LICENSE"

# The libraries, each as the path the loader finds it at (in the image, and natively
# on this system; with --sysroot inside DIR).
if [ -z "$sysroot" ]; then
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
else
	needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
	# The loader's built-in search path (Debian's multiarch glibc), in its order.
	in_sysroot() {
		for dir in "/lib/$multiarch" "/usr/lib/$multiarch" /lib /usr/lib; do
			if [ -e "$sysroot$dir/$1" ]; then
				echo "$dir/$1"
				return 0
			fi
		done
		return 1
	}
	libs=$(readelf -l "$binary" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]$/\1/p')
	[ -n "$libs" ] || die "$binary has no PT_INTERP (a static build needs no make-rootfs.sh)"
	[ -e "$sysroot$libs" ] || die "the loader $libs is not in $sysroot"
	# The loader satisfies the DT_NEEDED entries naming it (libc.so.6 has one).
	seen=" ${libs##*/} "
	# A work list instead of recursion: every file still to read for DT_NEEDED.
	todo=$binary
	rounds=0
	while [ -n "$todo" ]; do
		rounds=$((rounds + 1))
		[ "$rounds" -le 500 ] || die "more than 500 shared objects: a dependency loop?"
		# shellcheck disable=SC2086 # the list is of paths without white space
		set -- $todo
		file=$1
		shift
		todo=$*
		for name in $(needed "$file"); do
			case $seen in *" $name "*) continue ;; esac
			seen="$seen$name "
			lib=$(in_sysroot "$name") || die "$name, needed by ${file#"$sysroot"}, is not in $sysroot"
			libs="$libs
$lib"
			todo="$todo $sysroot$lib"
		done
	done
fi

# The Debian package that owns PATH. ldd prints the path the loader used, which
# after the /usr merge may be /lib/... while dpkg recorded /usr/lib/... (or the
# reverse), so try each spelling and the symlink-resolved file. In a sysroot, the
# owners file that make-sysroot.sh wrote stands in for dpkg's database.
owner_of() {
	if [ -z "$sysroot" ]; then
		found=$(dpkg-query -S "$1" 2>/dev/null | head -n 1) || return 1
		[ -n "$found" ] || return 1
		echo "${found%%:*}"
	else
		awk -v path="$1" '$1 == path { print $2; found = 1; exit } END { exit !found }' \
			"$sysroot/ip-masq-agent/owners"
	fi
}
owner() {
	real=$(readlink -f "$sysroot$1")
	real=${real#"$sysroot"}
	for candidate in "$1" "$real" "/usr${1#/usr}" "${1#/usr}" "/usr${real#/usr}" "${real#/usr}"; do
		owner_of "$candidate" && return 0
	done
	return 1
}

packages=
for lib in $libs; do
	# -L: the file itself, under the name the loader asks for; its mode is kept.
	mkdir -p "$rootfs${lib%/*}"
	cp -L "$sysroot$lib" "$rootfs$lib"
	package=$(owner "$lib") || die "$lib: no Debian package owns it, so its license is unknown"
	case " $packages " in
	*" $package "*) ;;
	*) packages="$packages $package" ;;
	esac
done

for package in $packages; do
	# cp -L: some doc directories are symlinks (libstdc++6 -> gcc-12-base).
	copyright=$sysroot/usr/share/doc/$package/copyright
	[ -f "$copyright" ] || die "$copyright: missing"
	mkdir -p "$rootfs/usr/share/doc/$package"
	cp -L "$copyright" "$rootfs/usr/share/doc/$package/copyright"
done

# Which Debian builds are inside, for license compliance (e.g. the LGPL's source
# offer for glibc) and for matching security advisories.
if [ -z "$sysroot" ]; then
	# shellcheck disable=SC2086 # one argument per package
	dpkg-query -W -f '${Package} ${Version}\n' $packages
else
	for package in $packages; do
		grep "^$package " "$sysroot/ip-masq-agent/packages" || die "$package: not in $sysroot/ip-masq-agent/packages"
	done
fi >"$rootfs/usr/share/doc/ip-masq-agent/debian-packages"
chmod 0644 "$rootfs/usr/share/doc/ip-masq-agent/debian-packages"

echo "make-rootfs.sh: $(echo "$libs" | wc -l) shared objects from:$packages"
