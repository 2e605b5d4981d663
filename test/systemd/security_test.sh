#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# systemd-analyze security --offline=yes on a unit: the overall exposure level must not
# exceed a limit. Prints the level and every setting that adds to it.
#
# Usage: security_test.sh UNIT LIMIT
set -euo pipefail
export SYSTEMD_PAGER= SYSTEMD_COLORS=0 LC_ALL=C
unit=$1 limit=$2
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not found"; exit 77; }

output=$(systemd-analyze security --offline=yes --no-pager "$unit" 2>&1) || {
	echo "$output"; echo "FAIL: systemd-analyze security failed"; exit 1; }
# "→ Overall exposure level for ip-masq-agent.service: 1.5 OK 🙂"
level=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9][0-9.]*\).*/\1/p' <<<"$output")
[ -n "$level" ] || { echo "$output"; echo "FAIL: no overall exposure level in the output"; exit 1; }

echo "Settings that add exposure:"
grep -E '^(✗|-) ' <<<"$output" || true
echo "Overall exposure level: $level (limit $limit)"
if awk -v level="$level" -v limit="$limit" 'BEGIN { exit !(level > limit) }'; then
	echo "FAIL: exposure $level is above $limit"
	exit 1
fi
echo "PASS"
