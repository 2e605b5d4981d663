#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The alert rules: promtool check rules and promtool test rules, then the test of the tests:
# each alert broken three ways must make promtool test rules fail. Broken "silent" (it never
# fires), "hasty" (its `for` is gone: it fires at once) and "everyone" (it fires for every
# series of the agent, node-b's too).
# Usage: rules_test.sh RULES TESTS. Exit 77 (skipped) without promtool.
set -eu
rules=$1
tests=$2
if ! command -v promtool >/dev/null 2>&1; then
	echo "promtool not found (Debian: apt-get install prometheus): skipped"
	exit 77
fi
promtool check rules "$rules"
promtool test rules "$tests"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

# ALERT KIND: a copy of the rules with ALERT broken, and of the tests naming that copy.
mutate() {
	awk -v alert="$1" -v kind="$2" -v everyone='count by (job, instance) ({__name__=~"ip_masq_agent_.+"})' '
		/^ *- alert: / { current = $3 }
		current == alert && /^ *expr: / {
			at = index($0, "expr:")
			indent = substr($0, 1, at - 1)
			expr = substr($0, at + 6)
			if (kind == "silent")
				$0 = indent "expr: (" expr ") unless on() vector(1)"
			if (kind == "everyone")
				$0 = indent "expr: " everyone
		}
		current == alert && kind == "hasty" && /^ *for: / { next }
		{ print }' "$rules" >"$work/rules.yaml"
	sed "s|^  - .*\\.rules\\.yaml\$|  - $work/rules.yaml|" "$tests" >"$work/tests.yaml"
}

status=0
mutants=0
for alert in $(sed -n 's/^ *- alert: //p' "$rules"); do
	for kind in silent hasty everyone; do
		mutate "$alert" "$kind"
		if cmp -s "$rules" "$work/rules.yaml"; then
			echo "FAIL: $alert could not be broken ($kind): update mutate()"
			status=1
		elif promtool test rules "$work/tests.yaml" >"$work/out" 2>&1; then
			echo "FAIL: the tests still pass with $alert broken ($kind)"
			status=1
		fi
		mutants=$((mutants + 1))
	done
done
[ "$mutants" -gt 0 ] || { echo "FAIL: no alert found in $rules"; exit 1; }
[ $status -ne 0 ] || echo "ok: each of $((mutants / 3)) alerts broken 3 ways fails the tests"
exit $status
