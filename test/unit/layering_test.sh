#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The layers' boundaries (docs/design.md, "The tree"): every folder of src/ and
# include/ip-masq-agent/ may include only the folders listed for it below, and nothing
# outside them; and the reconciler, the daemon's loop and the ruleset model know no config
# header, checked on what the compiler really includes.
# Usage: layering_test.sh CXX SOURCE_ROOT BUILD_ROOT
set -euo pipefail
cxx=$1
root=$2
build=$3

# FOLDER: the folders its files may include (besides its own). Folders are the layers, in
# order; a folder lists only folders before it, so no two depend on each other.
declare -A allowed=(
	[base]=""
	[model]="base"
	[netlink]="base"
	[config]="base model"
	[nft/codec]="base model netlink"
	[nft]="base model netlink nft/codec"
	[conntrack]="base model netlink"
	[node]="base model netlink config"
	[compile]="base model config node"
	[diagnose]="base model netlink config nft/codec nft conntrack compile"
	[daemon]="base model netlink config nft/codec nft conntrack node compile diagnose"
	[cli]="base model netlink config nft/codec nft conntrack node compile diagnose daemon"
)

status=0
files=0
includes=0
# The folder of a path below src/ or include/ip-masq-agent/: its directory.
folder_of() {
	local dir=${1%/*}
	[ "$dir" != "$1" ] && printf '%s\n' "$dir" || printf '\n'
}
while IFS= read -r -d '' file; do
	rel=${file#"$root"/src/}
	rel=${rel#"$root"/include/ip-masq-agent/}
	from=$(folder_of "$rel")
	if [ -z "$from" ] || [ -z "${allowed[$from]+set}" ]; then
		echo "FAIL: ${file#"$root"/} is in no layer folder (src/ and include/ip-masq-agent/ hold folders only)"
		status=1
		continue
	fi
	files=$((files + 1))
	while IFS= read -r included; do
		includes=$((includes + 1))
		to=$(folder_of "$included")
		[ "$to" = "$from" ] && continue
		case " ${allowed[$from]} " in
		*" $to "*) ;;
		*)
			echo "FAIL: ${file#"$root"/} includes ip-masq-agent/$included: $from/ may include only ${allowed[$from]:-nothing} (docs/design.md, \"The tree\")"
			status=1
			;;
		esac
	done < <(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"ip-masq-agent/\([^"]*\)".*|\1|p' "$file")
done < <(find "$root/src" "$root/include/ip-masq-agent" \( -name '*.cpp' -o -name '*.h' \) \
	! -path "$root/src/cli/main.cpp" ! -path "$root/src/pch/precompiled.h" -print0)

# A check that read nothing proves nothing.
if [ "$files" -lt 100 ] || [ "$includes" -lt 300 ]; then
	echo "FAIL: read only $files files and $includes includes: the tree was not found where expected ($root)"
	exit 1
fi
[ $status -ne 0 ] || echo "ok: $files files, $includes includes of the project's headers, each within its layer's list"

# Finer than folders: the reconciler, the desired state, the ruleset model, the table
# backend and the daemon's loop see desired states, never config types, through any chain
# of includes (the compiler's own dependency list).
config_headers="config/config.h config/config_location.h config/config_source.h config/config_dir.h cli/options.h"
for header in daemon/reconciler.h compile/desired_state.h model/ruleset.h nft/table_backend.h daemon/daemon.h; do
	deps=$("$cxx" -std=c++20 -MM -I"$root/include" -I"$root" -I"$build/include" \
		"$root/include/ip-masq-agent/$header" | tr ' \\' '\n\n' | sed -n 's|.*/include/ip-masq-agent/||p')
	if [ -z "$deps" ]; then
		echo "FAIL: the compiler listed no dependency of $header"
		status=1
		continue
	fi
	for forbidden in $config_headers; do
		if printf '%s\n' "$deps" | grep -qxF "$forbidden"; then
			echo "FAIL: $header includes $forbidden (its dependencies: $(echo $deps))"
			status=1
		fi
	done
done
[ $status -ne 0 ] || echo "ok: reconciler.h, desired_state.h, ruleset.h, table_backend.h and daemon.h include no config header"
exit $status
