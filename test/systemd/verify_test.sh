#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# systemd-analyze verify on a unit, which must print nothing at all (verify exits 0 on
# mere warnings such as an unknown key, so its output is what counts).
#
# Usage: verify_test.sh UNIT AGENT
# verify checks that every Exec*= command exists, so it runs on a scratch root
# (--root) that holds the unit, the built agent at the path ExecStart= names, the
# other commands the unit runs (a copy of the host's, or a stand-in where the host has
# none: only their existence is checked), and the host's own unit files, which the
# unit's dependencies (network-pre.target, multi-user.target, ...) resolve to. The unit
# itself is not changed.
set -euo pipefail
export SYSTEMD_PAGER= SYSTEMD_COLORS=0 LC_ALL=C
unit=$1 agent=$2
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not found"; exit 77; }
name=$(basename "$unit")

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib/systemd" "$root/etc/systemd/system"
# A merged-/usr layout, as on current Debian, so /bin/kill and /usr/bin/kill are one.
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
install -m 0644 "$unit" "$root/etc/systemd/system/$name"
host_units=$(realpath /usr/lib/systemd/system 2>/dev/null || realpath /lib/systemd/system)
cp -a "$host_units" "$root/usr/lib/systemd/system"

# The command of each Exec*= line: its first word without systemd's prefixes (-@:+!).
commands=$(sed -n 's/^Exec[A-Za-z]*=[-@:+!]*\([^ ]*\).*/\1/p' "$unit" | sort -u)
exec_start=$(sed -n 's/^ExecStart=[-@:+!]*\([^ ]*\).*/\1/p' "$unit")
for cmd in $commands; do
	case $cmd in /*) ;; *) echo "FAIL: $name: $cmd is not an absolute path"; exit 1 ;; esac
	[ -e "$root$cmd" ] && continue
	mkdir -p "$root$(dirname "$cmd")"
	if [ "$cmd" = "$exec_start" ]; then
		cp "$agent" "$root$cmd"
	elif [ -x "$cmd" ]; then
		cp "$(realpath "$cmd")" "$root$cmd"
	else
		echo "note: $cmd is not on this host; a stand-in takes its place"
		printf '#!/bin/sh\nexit 0\n' >"$root$cmd"
		chmod 0755 "$root$cmd"
	fi
done

echo "systemd-analyze verify --root=$root --man=no --recursive-errors=one $name"
status=0
output=$(systemd-analyze verify --root="$root" --man=no --recursive-errors=one "$name" 2>&1) ||
	status=$?
if [ $status -ne 0 ] || [ -n "$output" ]; then
	echo "$output"
	echo "FAIL: systemd-analyze verify $name: exit status $status, output above"
	exit 1
fi
echo "PASS: $name verifies without a warning (ExecStart=$exec_start)"
