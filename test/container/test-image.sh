#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The container image: build it with container/build-image.sh, then check its size,
# its files (no shell, licenses), its labels, and run it in a private network namespace.
#
# Usage: test-image.sh SOURCE_DIR
#
# It uses an image store of its own (vfs driver, so it holds no mounts), at
# $IP_MASQ_AGENT_TEST_STORE (default /var/tmp/ip-masq-agent-test-store). Between runs
# the store keeps only the mmdebstrap build base, so a second run skips mmdebstrap;
# the image and containers made here are removed. `rm -rf` of that directory
# frees the space. Exits 77 (skipped) without root, buildah or mmdebstrap.
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

version=$(sed -n "s/^[[:space:]]*version[[:space:]]*:[[:space:]]*'\([^']*\)'.*/\1/p" \
	"$srcdir/meson.build" | head -n 1)
store_dir=${IP_MASQ_AGENT_TEST_STORE:-/var/tmp/ip-masq-agent-test-store}
# The run root holds locks and state for this boot only, hence on /run.
runroot=/run/ip-masq-agent-test-store
store=(--root "$store_dir/root" --runroot "$runroot" --storage-driver vfs)
tag=localhost/ip-masq-agent-test:$$
ctr=

bah() { buildah "${store[@]}" "$@"; }

cleanup() {
	[ -z "$ctr" ] || bah rm "$ctr" >/dev/null 2>&1 || true
	bah rmi "$tag" >/dev/null 2>&1 || true
	bah rmi --prune >/dev/null 2>&1 || true
}
trap cleanup EXIT

mkdir -p "$store_dir" "$runroot"

echo "== building $tag (store: $store_dir)"
start=$SECONDS
"$srcdir/container/build-image.sh" --tag "$tag" --root "$store_dir/root" \
	--runroot "$runroot" --storage-driver vfs
echo "== build took $((SECONDS - start)) s"

ctr=$(bah from --pull=never --quiet "$tag")
mnt=$(bah mount "$ctr")

echo "== files"
(cd "$mnt" && find . -mindepth 1 -printf '%M %10s /%P\n' | sort -k3)

size=$(du -sb "$mnt" | cut -f1)
echo "== size: $size bytes ($((size / 1000)) kB) uncompressed; image store says $(bah images --format '{{.Size}}' "$tag")"
[ "$size" -lt 25000000 ] || fail "the image holds $size bytes, more than 25 MB"

echo "== no shell, no package manager, nothing but the agent's files"
for path in bin/sh usr/bin/sh bin/bash usr/bin/dpkg usr/bin/apt var/lib/dpkg etc tmp var; do
	if [ -e "$mnt/$path" ] || [ -L "$mnt/$path" ]; then
		fail "/$path is in the image"
	fi
done
found=$(cd "$mnt" && find . \( -name sh -o -name bash -o -name dash -o -name busybox \
	-o -name 'apt*' -o -name 'dpkg*' \) -print)
[ -z "$found" ] || fail "shell or package manager in the image: $found"

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

echo "== labels and entrypoint"
label() { bah inspect --type image --format "{{index .OCIv1.Config.Labels \"org.opencontainers.image.$1\"}}" "$tag"; }
for name in title description version revision licenses source; do
	echo "org.opencontainers.image.$name=$(label "$name")"
done
[ "$(label version)" = "$version" ] || fail "version label is not $version"
[ "$(label licenses)" = Apache-2.0 ] || fail "licenses label is not Apache-2.0"
[ "$(label title)" = ip-masq-agent ] || fail "title label is not ip-masq-agent"
entrypoint=$(bah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$tag")
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

echo "== image test passed in $SECONDS s"
