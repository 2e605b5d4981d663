#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The container image: build the linux/amd64 + linux/arm64 manifest list with
# container/build-image.sh, then check the native image's size, its files (no shell,
# licenses), its labels, and run it in a private network namespace; check the arm64
# image's files (AArch64 ELF, its loader and every library it needs, licenses, no
# shell) and run its binary under qemu-user, comparing its --dry-run with the native
# image's.
#
# Usage: test-image.sh SOURCE_DIR
#
# It uses an image store of its own (vfs driver, so it holds no mounts), at
# $IP_MASQ_AGENT_TEST_STORE (default /var/tmp/ip-masq-agent-test-store). Between runs
# the store keeps only the mmdebstrap build base, so a second run skips mmdebstrap;
# the images, the list and containers made here are removed. `rm -rf` of that
# directory frees the space. The arm64 sysroot and cross build directory are cached by
# build-image.sh in /var/cache/ip-masq-agent. Exits 77 (skipped) without root,
# buildah, mmdebstrap, the arm64 cross toolchain or qemu-user-static.
set -euo pipefail

srcdir=$(cd "${1:?usage: test-image.sh SOURCE_DIR}" && pwd)

skip() {
	echo "SKIP: $*"
	exit 77
}
fail() {
	echo "FAIL: $*"
	exit 1
}

[ "$(id -u)" = 0 ] || skip "needs root (buildah's chroot isolation and a private network namespace)"
command -v buildah >/dev/null || skip "buildah is not installed (apt-get install buildah mmdebstrap)"
command -v mmdebstrap >/dev/null || skip "mmdebstrap is not installed (apt-get install buildah mmdebstrap)"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] ||
	skip "the arm64 image is cross-compiled on amd64 hosts only"
command -v aarch64-linux-gnu-g++ >/dev/null ||
	skip "the arm64 cross compiler is not installed (apt-get install crossbuild-essential-arm64, or .ci/install-deps)"
command -v qemu-aarch64-static >/dev/null ||
	skip "qemu-aarch64-static is not installed (apt-get install qemu-user-static, or .ci/install-deps)"
command -v readelf >/dev/null || skip "readelf (binutils) is not installed"

version=$(sed -n "s/^[[:space:]]*version[[:space:]]*:[[:space:]]*'\([^']*\)'.*/\1/p" \
	"$srcdir/meson.build" | head -n 1)
store_dir=${IP_MASQ_AGENT_TEST_STORE:-/var/tmp/ip-masq-agent-test-store}
# The run root holds locks and state for this boot only, hence on /run; one per store.
runroot=/run/ip-masq-agent-test-store
[ "$store_dir" = /var/tmp/ip-masq-agent-test-store ] ||
	runroot=$runroot-$(printf '%s' "$store_dir" | sha256sum | cut -c1-12)
store=(--root "$store_dir/root" --runroot "$runroot" --storage-driver vfs)
tag=localhost/ip-masq-agent-test:$$
native_tag=$tag-amd64
arm64_tag=$tag-arm64
ctr='' arm64_ctr=''

bah() { buildah "${store[@]}" "$@"; }

cleanup() {
	[ -z "$ctr" ] || bah rm "$ctr" >/dev/null 2>&1 || true
	[ -z "$arm64_ctr" ] || bah rm "$arm64_ctr" >/dev/null 2>&1 || true
	bah manifest rm "$tag" >/dev/null 2>&1 || true
	bah rmi "$native_tag" "$arm64_tag" >/dev/null 2>&1 || true
	bah rmi --prune >/dev/null 2>&1 || true
}
trap cleanup EXIT

mkdir -p "$store_dir" "$runroot"

echo "== building $tag (store: $store_dir)"
start=$SECONDS
"$srcdir/container/build-image.sh" --tag "$tag" --root "$store_dir/root" \
	--runroot "$runroot" --storage-driver vfs --platform linux/amd64,linux/arm64
echo "== build took $((SECONDS - start)) s"

echo "== manifest list $tag"
list_platforms=$(bah manifest inspect "$tag" | python3 -c '
import json, sys
for m in json.load(sys.stdin)["manifests"]:
    print(m["platform"]["os"] + "/" + m["platform"]["architecture"])' | sort | xargs)
echo "$list_platforms"
[ "$list_platforms" = "linux/amd64 linux/arm64" ] ||
	fail "the manifest list holds '$list_platforms', not 'linux/amd64 linux/arm64'"
for image in "$native_tag:amd64" "$arm64_tag:arm64"; do
	arch=$(bah inspect --type image --format '{{.OCIv1.Architecture}}' "${image%:*}")
	[ "$arch" = "${image##*:}" ] || fail "${image%:*} says its architecture is '$arch'"
done

ctr=$(bah from --pull=never --quiet "$native_tag")
mnt=$(bah mount "$ctr")

echo "== files"
(cd "$mnt" && find . -mindepth 1 -printf '%M %10s /%P\n' | sort -k3)

size=$(du -sb "$mnt" | cut -f1)
echo "== size: $size bytes ($((size / 1000)) kB) uncompressed; image store says $(bah images --format '{{.Size}}' "$native_tag")"
[ "$size" -lt 25000000 ] || fail "the image holds $size bytes, more than 25 MB"

# The checks of an image's filesystem that hold for every platform.
check_no_shell() {
	local mnt=$1 path found
	echo "== no shell, no package manager, nothing but the agent's files"
	for path in bin/sh usr/bin/sh bin/bash usr/bin/dpkg usr/bin/apt var/lib/dpkg etc tmp var; do
		if [ -e "$mnt/$path" ] || [ -L "$mnt/$path" ]; then
			fail "/$path is in the image"
		fi
	done
	found=$(cd "$mnt" && find . \( -name sh -o -name bash -o -name dash -o -name busybox \
		-o -name 'apt*' -o -name 'dpkg*' \) -print)
	[ -z "$found" ] || fail "shell or package manager in the image: $found"
}

check_licenses() {
	local mnt=$1 manifest package _
	echo "== licenses"
	[ -x "$mnt/usr/sbin/ip-masq-agent" ] || fail "/usr/sbin/ip-masq-agent is missing"
	cmp "$srcdir/LICENSE" "$mnt/usr/share/doc/ip-masq-agent/LICENSE" ||
		fail "/usr/share/doc/ip-masq-agent/LICENSE is not the project's LICENSE"
	manifest=$mnt/usr/share/doc/ip-masq-agent/debian-packages
	[ -f "$manifest" ] || fail "/usr/share/doc/ip-masq-agent/debian-packages is missing"
	cat "$manifest"
	while read -r package _; do
		[ -s "$mnt/usr/share/doc/$package/copyright" ] || fail "/usr/share/doc/$package/copyright is missing"
	done <"$manifest"
	for package in libc6 'libstdc++6' libgcc-s1 'libnftnl[0-9.]*' 'libmnl[0-9.]*' 'libyaml-cpp[0-9.]*' \
		'libboost-program-options[0-9.]*' 'libfmt[0-9.]*'; do
		grep -q "^$package " "$manifest" || fail "no copyright file for a package matching $package"
	done
}

check_no_shell "$mnt"
check_licenses "$mnt"

echo "== labels and entrypoint"
label() { bah inspect --type image --format "{{index .OCIv1.Config.Labels \"org.opencontainers.image.$1\"}}" "${2:-$native_tag}"; }
for name in title description version revision licenses source; do
	echo "org.opencontainers.image.$name=$(label "$name")"
done
[ "$(label version)" = "$version" ] || fail "version label is not $version"
[ "$(label licenses)" = Apache-2.0 ] || fail "licenses label is not Apache-2.0"
[ "$(label title)" = ip-masq-agent ] || fail "title label is not ip-masq-agent"
entrypoint=$(bah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$native_tag")
[ "$entrypoint" = '[/usr/sbin/ip-masq-agent]' ] || fail "entrypoint is $entrypoint"

# Run as the DaemonSet does: CAP_NET_ADMIN alone (buildah ignores --cap-add after
# --cap-drop ALL, hence its default set dropped by name) and the image's own
# directories read-only. buildah's chroot isolation shares the caller's network,
# so every run is in a network namespace of its own, made by unshare.
caps=(--cap-add CAP_NET_ADMIN)
for cap in CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP NET_BIND_SERVICE \
	SYS_CHROOT SETFCAP NET_RAW MKNOD AUDIT_WRITE; do
	caps+=(--cap-drop "CAP_$cap")
done
readonly_dirs=()
for dir in "$mnt"/*; do
	readonly_dirs+=(-v "$dir:/${dir##*/}:ro")
done
in_netns() { unshare --net -- "$@"; }
run_agent() {
	in_netns buildah "${store[@]}" run --isolation chroot "${caps[@]}" "${readonly_dirs[@]}" \
		"$ctr" -- /usr/sbin/ip-masq-agent "$@"
}

echo "== ip-masq-agent --version"
out=$(run_agent --version)
echo "$out"
[ "$out" = "ip-masq-agent $version" ] || fail "--version printed '$out', not 'ip-masq-agent $version'"

echo "== ip-masq-agent --dry-run"
out=$(run_agent --dry-run)
echo "$out"
for expected in 'table inet ip-masq-agent' 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 169.254.0.0/16; do
	grep -qF "$expected" <<<"$out" || fail "--dry-run does not print $expected"
done

echo "== ip-masq-agent --once, then nft lists its table (private network namespace)"
nft=$(command -v nft || { [ ! -x /usr/sbin/nft ] || echo /usr/sbin/nft; } || true)
if [ -n "$nft" ]; then
	# One namespace for both: the agent's table lives as long as it does.
	# shellcheck disable=SC2016 # expanded by the inner bash
	out=$(unshare --net -- bash -c '"$@" && "$0" list table inet ip-masq-agent' "$nft" \
		buildah "${store[@]}" run --isolation chroot "${caps[@]}" "${readonly_dirs[@]}" \
		"$ctr" -- /usr/sbin/ip-masq-agent --once) ||
		fail "--once failed in the image (or nft could not list its table)"
	echo "$out"
	grep -q 'masquerade' <<<"$out" || fail "the table the image's agent applied has no masquerade rule"
else
	run_agent --once || fail "--once failed in the image"
	echo "(nft is not installed: the table itself was not listed)"
fi

echo "== /bin/sh cannot run in the image"
if in_netns buildah "${store[@]}" run --isolation chroot "$ctr" -- /bin/sh -c true 2>/dev/null; then
	fail "/bin/sh ran in the image"
fi

# --- the arm64 image --------------------------------------------------------------------

arm64_ctr=$(bah from --pull=never --quiet "$arm64_tag")
arm64_mnt=$(bah mount "$arm64_ctr")
echo "== arm64 files"
(cd "$arm64_mnt" && find . -mindepth 1 -printf '%M %10s /%P\n' | sort -k3)

# "AArch64" as readelf -h names the ELF machine.
elf_machine() { readelf -h "$1" | sed -n 's/^ *Machine: *//p'; }

echo "== arm64: the binary, its loader and every library it needs are AArch64 ELF files in the image"
binary=$arm64_mnt/usr/sbin/ip-masq-agent
[ -x "$binary" ] || fail "arm64: /usr/sbin/ip-masq-agent is missing"
[ "$(elf_machine "$binary")" = AArch64 ] ||
	fail "arm64: /usr/sbin/ip-masq-agent is a '$(elf_machine "$binary")' ELF file, not AArch64"
interp=$(readelf -l "$binary" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]$/\1/p')
[ "$interp" = /lib/ld-linux-aarch64.so.1 ] || fail "arm64: the binary's loader is '$interp'"
if [ ! -f "$arm64_mnt$interp" ] || [ -L "$arm64_mnt$interp" ]; then
	fail "arm64: the loader $interp is not a file in the image"
fi
[ "$(elf_machine "$arm64_mnt$interp")" = AArch64 ] || fail "arm64: the loader $interp is not AArch64"
# Every DT_NEEDED entry of the binary and of each library, found where the loader
# looks (its built-in multiarch path; the image has no ld.so.cache), as a work list.
seen=" ${interp##*/} " todo=("$binary") rounds=0
while [ "${#todo[@]}" -gt 0 ]; do
	rounds=$((rounds + 1))
	[ "$rounds" -le 200 ] || fail "arm64: more than 200 shared objects"
	file=${todo[0]}
	todo=("${todo[@]:1}")
	for name in $(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
		case $seen in *" $name "*) continue ;; esac
		seen="$seen$name "
		found=
		for dir in /lib/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu /lib /usr/lib; do
			if [ -f "$arm64_mnt$dir/$name" ]; then
				found=$arm64_mnt$dir/$name
				break
			fi
		done
		[ -n "$found" ] || fail "arm64: $name, needed by /${file#"$arm64_mnt"/}, is not in the image"
		[ "$(elf_machine "$found")" = AArch64 ] || fail "arm64: /${found#"$arm64_mnt"/} is not AArch64"
		echo "${found#"$arm64_mnt"} (needed by /${file#"$arm64_mnt"/})"
		todo+=("$found")
	done
done

check_no_shell "$arm64_mnt"
check_licenses "$arm64_mnt"
packages_of() { cut -d' ' -f1 "$1/usr/share/doc/ip-masq-agent/debian-packages" | sort | xargs; }
[ "$(packages_of "$arm64_mnt")" = "$(packages_of "$mnt")" ] ||
	fail "arm64's libraries come from '$(packages_of "$arm64_mnt")', amd64's from '$(packages_of "$mnt")'"

echo "== arm64: labels and entrypoint as amd64's"
for name in title description version revision licenses source; do
	[ "$(label "$name" "$arm64_tag")" = "$(label "$name")" ] ||
		fail "arm64's label org.opencontainers.image.$name is '$(label "$name" "$arm64_tag")', amd64's '$(label "$name")'"
done
arm64_entrypoint=$(bah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$arm64_tag")
[ "$arm64_entrypoint" = "$entrypoint" ] || fail "arm64's entrypoint is $arm64_entrypoint, amd64's $entrypoint"

# qemu-user runs the binary with the image's root as its sysroot (-L): the loader and
# libraries are the image's. No binfmt registration is involved.
run_arm64() { qemu-aarch64-static -L "$arm64_mnt" "$binary" "$@"; }

echo "== arm64: ip-masq-agent --version under qemu-aarch64-static"
out=$(run_arm64 --version) || fail "arm64: --version failed under qemu"
echo "$out"
[ "$out" = "ip-masq-agent $version" ] || fail "arm64: --version printed '$out', not 'ip-masq-agent $version'"

echo "== arm64: ip-masq-agent --dry-run under qemu-aarch64-static, the same as amd64's"
# A config that exercises the CIDR model (overlapping, unsorted, IPv6 entries) and
# flags, at one path both runs see: mounted into the amd64 container, and outside the
# image's root for qemu, which reads the host's file there.
config_dir=$(mktemp -d /tmp/ip-masq-agent-test-config.XXXXXX)
trap 'rm -rf "$config_dir"; cleanup' EXIT
cat >"$config_dir/config.yaml" <<'EOF'
nonMasqueradeCIDRs:
  - 192.168.0.0/16
  - 10.0.0.0/8
  - 10.1.0.0/16
  - 100.64.0.0/10
  - 2001:db8::/32
  - fd00::/8
masqLinkLocal: true
EOF
flags=(--config "$config_dir/config.yaml" --enable-ipv6 --to-ports "1024-29999,32768-65535" --dry-run)
native_out=$(in_netns buildah "${store[@]}" run --isolation chroot "${caps[@]}" "${readonly_dirs[@]}" \
	-v "$config_dir:$config_dir:ro" "$ctr" -- /usr/sbin/ip-masq-agent "${flags[@]}") ||
	fail "amd64: --dry-run with the test config failed"
arm64_out=$(run_arm64 "${flags[@]}") || fail "arm64: --dry-run with the test config failed under qemu"
echo "$arm64_out"
grep -qF '2001:db8::/32' <<<"$arm64_out" || fail "arm64: --dry-run does not print the config's 2001:db8::/32"
diff -u <(echo "$native_out") <(echo "$arm64_out") || fail "arm64's --dry-run differs from amd64's (diff above)"

echo "== image test passed in $SECONDS s"
