#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build ip-masq-agent's container image (container/Containerfile) with buildah, podman
# or docker, without any container registry.
#
# The Containerfile's build stage starts from a Debian bookworm image that this script
# makes with mmdebstrap, with container/build-packages installed. That base is kept in
# the local image store as localhost/ip-masq-agent-build-base:bookworm-<hash of the
# package list and of the recipe below>, and reused by later runs until the list
# changes or --refresh-base asks for a new one (to pick up Debian updates).
#
# --platform linux/amd64,linux/arm64 builds a manifest list of both: the native image
# as above, and the arm64 one cross-compiled on this host with Debian's cross toolchain
# (container/cross/aarch64-linux-gnu.ini) against an arm64 sysroot that
# container/make-sysroot.sh makes and caches in /var/cache/ip-masq-agent; its
# filesystem is assembled by the same make-rootfs.sh. Nothing of arm64 runs here. The two
# build side by side (the native base's mmdebstrap beside the cross compile).
#
# On a fresh Debian 12 machine, as root: apt-get install buildah mmdebstrap
# (and for --platform ...,linux/arm64: crossbuild-essential-arm64 meson ninja-build
# pkg-config; .ci/install-deps installs all of it).
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: container/build-image.sh [OPTION]...
Build the ip-masq-agent container image from this source tree.

  -t, --tag NAME            image name (default: localhost/ip-masq-agent:VERSION,
                            VERSION being meson.build's project version)
      --platform LIST       linux/amd64, linux/arm64 or both, comma-separated
                            (default: this machine's, native only). Several make
                            NAME a manifest list of the images NAME-amd64 and
                            NAME-arm64; arm64 is cross-compiled (buildah only)
      --tool TOOL           buildah, podman or docker (default: buildah, else podman,
                            else docker if its daemon answers)
      --storage-driver DRV  containers-storage driver for buildah/podman (default: the
                            store's own, or what containers-storage picks for a new
                            store: overlay, or vfs where overlay is unavailable)
      --root DIR            containers-storage root (default: the tool's)
      --runroot DIR         containers-storage run root (default: the tool's)
      --build-base IMAGE    use IMAGE for the build stage instead of the mmdebstrap
                            base, e.g. docker.io/library/debian:bookworm (needs a
                            registry; missing build packages are then installed)
      --refresh-base        make the mmdebstrap base again even if it exists
      --mirror URL          Debian mirror for mmdebstrap (default: mmdebstrap's own,
                            deb.debian.org with bookworm-updates and -security)
      --source URL          org.opencontainers.image.source label (default: the git
                            remote "origin", if any)
  -q, --quiet               print only the image name at the end
  -h, --help                show this help
EOF
}

say() { [ "$quiet" = 1 ] || echo "build-image: $*" >&2; }
die() {
	echo "build-image: error: $*" >&2
	exit 1
}

srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tag='' tool='' driver='' root='' runroot='' build_base='' mirror='' source_url=''
platforms='' refresh_base=0 quiet=0
while [ $# -gt 0 ]; do
	case $1 in
	-t | --tag) tag=${2:?$1 needs a value}; shift ;;
	--platform) platforms=${2:?$1 needs a value}; shift ;;
	--tool) tool=${2:?$1 needs a value}; shift ;;
	--storage-driver) driver=${2:?$1 needs a value}; shift ;;
	--root) root=${2:?$1 needs a value}; shift ;;
	--runroot) runroot=${2:?$1 needs a value}; shift ;;
	--build-base) build_base=${2:?$1 needs a value}; shift ;;
	--refresh-base) refresh_base=1 ;;
	--mirror) mirror=${2:?$1 needs a value}; shift ;;
	--source) source_url=${2:?$1 needs a value}; shift ;;
	-q | --quiet) quiet=1 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown option: $1" ;;
	esac
	shift
done

version=$(sed -n "s/^[[:space:]]*version[[:space:]]*:[[:space:]]*'\([^']*\)'.*/\1/p" \
	"$srcdir/meson.build" | head -n 1)
[ -n "$version" ] || die "cannot read the project version from $srcdir/meson.build"
tag=${tag:-localhost/ip-masq-agent:$version}
[ -f "$srcdir/LICENSE" ] || die "$srcdir/LICENSE is missing (the image ships it)"

# The platforms: this machine's architecture builds natively in the Containerfile;
# arm64 on amd64 is cross-compiled on the host. No other pairs.
native_arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
case $native_arch in x86_64) native_arch=amd64 ;; aarch64) native_arch=arm64 ;; esac
platforms=${platforms:-linux/$native_arch}
arches=()
for platform in ${platforms//,/ }; do
	arch=${platform#linux/}
	case $platform in
	linux/"$native_arch") ;;
	linux/arm64) [ "$native_arch" = amd64 ] || die "--platform linux/arm64: cross builds run on amd64 only" ;;
	*) die "--platform: linux/amd64 or linux/arm64, not $platform" ;;
	esac
	case " ${arches[*]} " in *" $arch "*) continue ;; esac
	arches+=("$arch")
done
[ "${#arches[@]}" -gt 0 ] || die "--platform names no platform"

# --- the tool and its image store -----------------------------------------------------

if [ -z "$tool" ]; then
	if command -v buildah >/dev/null; then
		tool=buildah
	elif command -v podman >/dev/null; then
		tool=podman
	elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		tool=docker
	else
		die "no buildah, podman or running docker engine (apt-get install buildah mmdebstrap)"
	fi
fi
command -v "$tool" >/dev/null || die "$tool: not found"

store=()
case $tool in
buildah | podman)
	[ -z "$root" ] || store+=(--root "$root")
	[ -z "$runroot" ] || store+=(--runroot "$runroot")
	# Pass a driver only when told: containers-storage keeps a store's first driver,
	# and takes for a new store overlay where the kernel and the backing filesystem
	# allow it, else vfs (podman even refuses a --storage-driver its database did not
	# record, though it is the same).
	driver=${driver:-${STORAGE_DRIVER:-}}
	if [ -z "$driver" ]; then
		format='{{.store.GraphDriverName}}'
		[ "$tool" = podman ] && format='{{.Store.GraphDriverName}}'
		if ! driver=$("$tool" "${store[@]}" info --format "$format" 2>/dev/null) || [ -z "$driver" ]; then
			driver=vfs
			store+=(--storage-driver vfs)
		fi
	else
		store+=(--storage-driver "$driver")
	fi
	say "$tool with storage driver $driver${root:+ in $root}"
	;;
docker)
	[ -z "$root$runroot$driver" ] || die "--root, --runroot and --storage-driver are for buildah and podman"
	docker info >/dev/null 2>&1 || die "docker: no engine answers"
	;;
*) die "--tool: buildah, podman or docker, not $tool" ;;
esac

run() { "$tool" "${store[@]}" "$@"; }

image_id() {
	case $tool in
	buildah) run inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null ;;
	*) run image inspect --format '{{.Id}}' "$1" 2>/dev/null ;;
	esac
}

image_exists() { image_id "$1" >/dev/null; }

work=
cleanup() {
	[ -z "${base_ctr:-}" ] || run rm "$base_ctr" >/dev/null 2>&1 || true
	[ -z "${cross_ctr:-}" ] || run rm "$cross_ctr" >/dev/null 2>&1 || true
	[ -z "$work" ] || rm -rf "$work"
}
trap cleanup EXIT

# --- the build stage's base -------------------------------------------------------------

# Bump when the mmdebstrap command below changes in a way that changes the base.
recipe=1
packages=$(sed 's/#.*//' "$srcdir/container/build-packages" | xargs)
[ -n "$packages" ] || die "container/build-packages lists no package"

make_base() {
	local image=$1 tarball
	command -v mmdebstrap >/dev/null || die "mmdebstrap: not found (apt-get install mmdebstrap)"
	[ "$(id -u)" = 0 ] || say "not root: mmdebstrap runs in its unshare mode (needs subuids)"
	# Not /tmp, often a small tmpfs: the base is about 600 MB.
	work=$(mktemp -d "${TMPDIR:-/var/tmp}/ip-masq-agent-base.XXXXXX")
	tarball=$work/base.tar
	say "making the build base with mmdebstrap (a few minutes): $packages"
	local start=$SECONDS
	# The host's apt cache seeds the download (hard links, so only on the same
	# filesystem; apt checks every file against the archive's hashes and fetches the
	# rest). Documentation other than copyright files is left out.
	# shellcheck disable=SC2016 # the hook's $1 is mmdebstrap's, not ours
	TMPDIR=$work mmdebstrap --quiet --variant=apt --format=tar --skip=output/dev \
		--include="${packages// /,}" \
		--dpkgopt=force-unsafe-io \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--setup-hook='mkdir -p "$1/var/cache/apt/archives"; cp -l /var/cache/apt/archives/*.deb "$1/var/cache/apt/archives/" 2>/dev/null || true' \
		bookworm "$tarball" ${mirror:+"$mirror"} ||
		die "mmdebstrap failed (is a Debian mirror reachable?)"
	say "mmdebstrap done in $((SECONDS - start)) s; importing it as $image"

	local old_id=
	old_id=$(image_id "$image") || true
	local created
	created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	case $tool in
	docker | podman)
		run import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
			--change "LABEL org.opencontainers.image.created=$created" \
			"$tarball" "$image" >/dev/null
		;;
	buildah)
		base_ctr=$(run from scratch)
		run add --quiet "$base_ctr" "$tarball" / >/dev/null
		run config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			--env LANG=C.UTF-8 --cmd /bin/bash \
			--label "org.opencontainers.image.created=$created" \
			--label "org.opencontainers.image.description=ip-masq-agent build base: Debian bookworm with $packages" \
			"$base_ctr"
		run commit --quiet --rm "$base_ctr" "$image" >/dev/null
		base_ctr=
		;;
	esac
	# A refreshed base leaves the previous one untagged, and bases made for another
	# package list are stale: drop them (each is about 600 MB) unless still in use.
	if [ -n "$old_id" ] && [ "$old_id" != "$(image_id "$image")" ]; then
		run rmi "$old_id" >/dev/null 2>&1 || true
	fi
	local other
	for other in $(run images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null |
		grep "^${image%:*}:" | grep -vxF "$image"); do
		say "removing the stale build base $other"
		run rmi "$other" >/dev/null 2>&1 || true
	done
	rm -rf "$work"
	work=
}

pull=()
need_native=0
base_missing=0
case " ${arches[*]} " in *" $native_arch "*) need_native=1 ;; esac
if [ "$need_native" = 0 ]; then
	: # only cross builds: no build base
elif [ -n "$build_base" ]; then
	say "build base: $build_base (given)"
else
	hash=$(printf 'recipe %s\nmirror %s\n%s\n' "$recipe" "$mirror" "$packages" | sha256sum | cut -c1-12)
	build_base=localhost/ip-masq-agent-build-base:bookworm-$hash
	# Made by build_native, so that a cross build runs meanwhile.
	if [ "$refresh_base" = 1 ] || ! image_exists "$build_base"; then
		base_missing=1
	else
		say "build base: $build_base (cached; --refresh-base makes it again)"
	fi
	# The base is local: never ask a registry for it.
	case $tool in
	docker) pull=(--pull=false) ;;
	*) pull=(--pull=never) ;;
	esac
fi

# --- the image --------------------------------------------------------------------------

revision=unknown
if git -C "$srcdir" rev-parse --git-dir >/dev/null 2>&1; then
	revision=$(git -C "$srcdir" rev-parse HEAD)
	git -C "$srcdir" diff --quiet HEAD 2>/dev/null || revision="$revision-dirty"
	[ -n "$source_url" ] || source_url=$(git -C "$srcdir" remote get-url origin 2>/dev/null) || true
fi

args=(-f "$srcdir/container/Containerfile"
	--build-arg "BUILD_BASE=$build_base"
	--build-arg "VERSION=$version"
	--build-arg "REVISION=$revision"
	--build-arg "SOURCE=$source_url"
	"${pull[@]}")
case $tool in
buildah)
	# chroot isolation needs no OCI runtime and works inside containers and VMs alike.
	args+=(--isolation "${BUILDAH_ISOLATION:-chroot}" --layers=false
		--ignorefile "$srcdir/container/Containerfile.dockerignore")
	;;
podman) args+=(--layers=false --ignorefile "$srcdir/container/Containerfile.dockerignore") ;;
docker) ;; # BuildKit reads container/Containerfile.dockerignore by itself
esac
[ "$quiet" = 0 ] || args+=(--quiet)

# With the local base the build needs no network: cut it off, so that it cannot
# depend on one unnoticed. buildah's chroot isolation always shares the caller's
# network, hence a network namespace of its own around it.
isolate=()
if [ "${#pull[@]}" -gt 0 ]; then
	case $tool in
	buildah)
		if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
			isolate=(unshare --net --)
		fi
		;;
	*) args+=(--network=none) ;;
	esac
fi

# Rebuilding a tag leaves the previous image untagged: drop it (unless in use).
drop_replaced() {
	if [ -n "$2" ] && [ "$2" != "$(image_id "$1")" ]; then
		run rmi "$2" >/dev/null 2>&1 || true
	fi
}

build_native() {
	local image=$1 previous_id start
	[ "$base_missing" = 0 ] || make_base "$build_base"
	say "building $image (version $version, linux/$native_arch)"
	previous_id=$(image_id "$image") || true
	start=$SECONDS
	case $tool in
	buildah) "${isolate[@]}" "$tool" "${store[@]}" bud "${args[@]}" -t "$image" "$srcdir" >&2 ;;
	*) run build "${args[@]}" -t "$image" "$srcdir" >&2 ;;
	esac
	say "built $image in $((SECONDS - start)) s"
	drop_replaced "$image" "$previous_id"
}

# The arm64 image, cross-compiled on this host: the same release build as the
# Containerfile's (no tests, werror off), make-rootfs.sh against the sysroot, then the
# same runtime image: the rootfs alone on an empty base, the same labels and entrypoint.
cross_ctr=
build_arm64() {
	local image=$1 previous_id start sysroot cache builddir rootfs
	local triplet=aarch64-linux-gnu
	[ "$tool" = buildah ] || die "--platform linux/arm64 needs buildah (the cross-built image is committed with it)"
	for program in "$triplet-g++" "$triplet-strip" meson ninja pkg-config readelf; do
		command -v "$program" >/dev/null ||
			die "$program: not found (apt-get install crossbuild-essential-arm64 meson ninja-build pkg-config binutils)"
	done
	start=$SECONDS
	sysroot=$("$srcdir/container/make-sysroot.sh" --arch arm64 ${mirror:+--mirror "$mirror"})
	# The cross build directory is kept beside the sysroot (one per source tree), so
	# that a rebuild compiles only what changed. A unity build, as the Containerfile's.
	cache=${IP_MASQ_AGENT_CACHE:-/var/cache/ip-masq-agent}
	builddir=$cache/build-arm64-$(printf '%s\n%s\n' "$srcdir" "$sysroot" | sha256sum | cut -c1-12)
	mkdir -p "$builddir"
	# One build at a time in it (two image builds of one tree at once).
	exec 8>"$builddir.lock"
	flock 8
	printf "# Written by container/build-image.sh\n[constants]\nsysroot = '%s'\n" "$sysroot" \
		>"$builddir/sysroot.ini"
	local setup=(meson setup --cross-file "$builddir/sysroot.ini"
		--cross-file "$srcdir/container/cross/$triplet.ini"
		--buildtype=release -Dtests=disabled -Dwerror=false -Dunity=on "$builddir/build" "$srcdir")
	say "cross-compiling for linux/arm64 in $builddir/build"
	if [ -f "$builddir/build/build.ninja" ]; then
		"${setup[@]}" --reconfigure >&2 || "${setup[@]}" --wipe >&2
	else
		"${setup[@]}" >&2
	fi
	meson compile -C "$builddir/build" ip-masq-agent >&2
	work=$(mktemp -d "${TMPDIR:-/var/tmp}/ip-masq-agent-arm64.XXXXXX")
	rootfs=$work/rootfs
	/bin/sh "$srcdir/container/make-rootfs.sh" --sysroot "$sysroot" --multiarch "$triplet" \
		"$builddir/build/src/ip-masq-agent" "$srcdir/LICENSE" "$rootfs" >&2

	previous_id=$(image_id "$image") || true
	cross_ctr=$(run from --quiet --pull=never scratch)
	run copy --quiet "$cross_ctr" "$rootfs" / >/dev/null
	# The Containerfile's labels and entrypoint (test/container compares the two images').
	run config --os linux --arch arm64 \
		--label org.opencontainers.image.title=ip-masq-agent \
		--label "org.opencontainers.image.description=Keeps pod traffic to non-masquerade destinations un-NATed and masquerades the rest, programming nftables over netlink" \
		--label "org.opencontainers.image.version=$version" \
		--label "org.opencontainers.image.revision=$revision" \
		--label org.opencontainers.image.licenses=Apache-2.0 \
		--label "org.opencontainers.image.source=$source_url" \
		--entrypoint '["/usr/sbin/ip-masq-agent"]' "$cross_ctr"
	run commit --quiet --rm "$cross_ctr" "$image" >/dev/null
	cross_ctr=
	rm -rf "$work"
	work=
	say "built $image in $((SECONDS - start)) s"
	drop_replaced "$image" "$previous_id"
}

build_for() {
	if [ "$2" = "$native_arch" ]; then build_native "$1"; else build_arm64 "$1"; fi
}

if [ "${#arches[@]}" = 1 ]; then
	build_for "$tag" "${arches[0]}"
else
	[ "$tool" != docker ] || die "several platforms need buildah or podman (a local manifest list)"
	# The images build side by side: the native build first makes its base (mmdebstrap:
	# downloads and dpkg, little CPU) while the cross compiler uses the cores, so both
	# together take little more than the longer one. Each runs in a subshell of its own,
	# where set -e holds (it would not in a `||` list) and its own EXIT trap cleans up its
	# container and directory; the cross build's lines are marked with its architecture.
	pids=() labels=()
	for arch in "${arches[@]}"; do
		if [ "$arch" = "$native_arch" ]; then
			( trap cleanup EXIT; build_for "$tag-$arch" "$arch" ) &
		else
			(
				trap cleanup EXIT
				set -o pipefail # the build's status, not sed's
				build_for "$tag-$arch" "$arch" 2>&1 | sed -u "s/^/[$arch] /" >&2
			) &
		fi
		pids+=("$!") labels+=("linux/$arch")
	done
	failed=
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed="$failed ${labels[$i]}"
	done
	[ -z "$failed" ] || die "building the image failed for:$failed (the output above says why)"
	# The list lives in the local store, next to its images; a previous one (or an
	# image of that name) makes way.
	run manifest rm "$tag" >/dev/null 2>&1 || run rmi "$tag" >/dev/null 2>&1 || true
	run manifest create "$tag" >/dev/null
	for arch in "${arches[@]}"; do
		run manifest add --os linux --arch "$arch" "$tag" "containers-storage:$tag-$arch" >/dev/null
	done
	say "manifest list $tag: ${platforms//,/ }"
fi
echo "$tag"
