#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The layers' boundaries, checked on what the compiler really includes: the reconciler, the
# daemon's loop and the ruleset model know nothing of the config (docs/design.md, "The data
# flow"); and the netlink layer with its codec, the path from the desired state to the
# agent's table, knows nothing of the NAT diagnostics and SNAT usage that sit on top of it
# ("The codec layer").
# Usage: layering_test.sh CXX SOURCE_ROOT BUILD_ROOT
set -eu
cxx=$1
root=$2
build=$3

# HEADER: headers it must not include, directly or through others.
status=0
check() {
	header=$1
	shift
	deps=$("$cxx" -std=c++20 -MM -I"$root/include" -I"$root" "$root/include/ip-masq-agent/$header" |
		tr ' \\' '\n\n' | sed -n 's|.*/include/ip-masq-agent/||p')
	for forbidden in "$@"; do
		if printf '%s\n' "$deps" | grep -qxF "$forbidden"; then
			echo "FAIL: $header includes $forbidden (its dependencies: $(echo $deps))"
			status=1
		fi
	done
}

config_headers="config.h config_location.h config_source.h config_dir.h options.h"
# shellcheck disable=SC2086 # the list is words
check reconciler.h $config_headers
# shellcheck disable=SC2086
check desired_state.h $config_headers
# shellcheck disable=SC2086
check ruleset.h $config_headers policy.h
# shellcheck disable=SC2086
check table_backend.h $config_headers
# shellcheck disable=SC2086
check daemon.h $config_headers
[ $status -ne 0 ] || echo "ok: reconciler.h, desired_state.h, ruleset.h, table_backend.h and daemon.h include no config header"

# Every header and source of the netlink layer (codec included), directly or through others:
# none of the diagnostics above it.
above='^(other_tables/.*|explain\.h|conflict_check\.h|snat_usage.*\.h)$'
netlink_status=0
for file in "$root"/include/ip-masq-agent/netlink/*.h "$root"/include/ip-masq-agent/netlink/codec/*.h \
	"$root"/src/netlink/*.cpp "$root"/src/netlink/codec/*.cpp; do
	deps=$("$cxx" -std=c++20 -MM -I"$root/include" -I"$root" -I"$build/include" "$file" |
		tr ' \\' '\n\n' | sed -n 's|.*/include/ip-masq-agent/||p')
	if found=$(printf '%s\n' "$deps" | grep -E "$above"); then
		echo "FAIL: ${file#"$root"/} includes $(echo $found): the netlink layer must not know the diagnostics"
		netlink_status=1
	fi
done
[ $netlink_status -ne 0 ] || echo "ok: nothing in netlink/ (codec included) includes other_tables/, explain, conflict_check or snat_usage"
[ $netlink_status -eq 0 ] || status=1
exit $status
