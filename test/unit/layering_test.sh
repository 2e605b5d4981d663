#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The layers' boundaries, checked on what the compiler really includes: the reconciler, the
# daemon's loop and the ruleset model know nothing of the config (docs/design.md, "The data
# flow").
# Usage: layering_test.sh CXX SOURCE_ROOT
set -eu
cxx=$1
root=$2

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
exit $status
