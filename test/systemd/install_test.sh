#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# meson install into a scratch DESTDIR, stripped as docs/systemd.md's command installs:
# the agent is stripped and small; the unit lands in one place and names the installed
# binary and config; the config is created from the example, and a second install keeps
# the administrator's edits.
#
# Usage: install_test.sh MESON BUILD_DIR EXAMPLE_CONFIG SYSTEMD_DOC
set -euo pipefail
meson=$1 build=$2 example=$3 doc=$4
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Stripped, the agent is 2.6 MB (debugoptimized) or 2.7 MB (release); unstripped
# (debugoptimized, the default build type) it is 82 MB.
max_bytes=$((8 * 1024 * 1024))

# The documented install strips (-Dstrip=true at setup): this build (the test suite's, of
# another build type) is installed with --strip, which does the same.
setup=$(sed -n '/^## Installing/,/^## /{/^meson setup /p}' "$doc")
[ -n "$setup" ] || fail "$doc: no meson setup command under \"## Installing\""
grep -q -- '-Dstrip=true' <<<"$setup" && grep -q -- '--buildtype=release' <<<"$setup" ||
	fail "$doc installs an unstripped or non-release binary: $setup"
echo "$doc: $setup"

install_once() {
	"$meson" install -C "$build" --no-rebuild --strip --destdir "$dest" >"$dest.log" 2>&1 ||
		{ cat "$dest.log"; rm -f "$dest.log"; fail "meson install failed"; }
	rm -f "$dest.log"
}
install_once

units=$(find "$dest" -name ip-masq-agent.service)
[ "$(wc -l <<<"$units")" -eq 1 ] && [ -n "$units" ] || fail "expected one unit, found: ${units:-none}"
unit=$units
echo "unit: ${unit#"$dest"}"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
binary=${exec_start%% *}
config=$(sed -n 's/.*--config=\([^ ]*\).*/\1/p' <<<"$exec_start")
[ -x "$dest$binary" ] || fail "ExecStart= names $binary, which meson did not install"
kind=$(file -b "$dest$binary")
size=$(stat -c %s "$dest$binary")
grep -q ', stripped' <<<"$kind" || fail "$binary is not stripped: $kind"
[ "$size" -le "$max_bytes" ] || fail "$binary is $size bytes, more than $max_bytes"
echo "$binary: $size bytes, stripped"
[ -f "$dest$config" ] || fail "ExecStart= reads $config, which meson did not install"
cmp -s "$example" "$dest$config" || fail "$config is not the example config"
echo "ExecStart=$exec_start: binary and config installed"
# The config is valid for the installed agent (it only parses: --dry-run).
"$dest$binary" --dry-run --config="$dest$config" >/dev/null || fail "the installed config is invalid"

examples=$(find "$dest" -path '*/doc/ip-masq-agent/examples/*' -type f | sort)
[ "$(wc -l <<<"$examples")" -eq 2 ] || fail "expected 2 examples, found: $examples"

echo "# edited by the administrator" >>"$dest$config"
install_once
tail -n1 "$dest$config" | grep -qx '# edited by the administrator' ||
	fail "a second meson install overwrote $config"
echo "PASS: a second install kept the edited $config"
