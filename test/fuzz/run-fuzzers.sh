#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Build the libFuzzer targets (clang, ASan + UBSan), run each over its checked-in corpus
# (regression), then fuzz each for a fixed time. Fails on any crash, leak, UB report,
# timeout or out-of-memory. New corpus entries and crash inputs go to a temporary
# directory, never into the source tree. See docs/development.md.
#
# Usage: test/fuzz/run-fuzzers.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  fuzzing time per target after the regression run (default 20;
#                       0 = regression only)
#   TARGET              a directory name under test/fuzz/corpus: config, nat_evaluator,
#                       conntrack_entry, ... (default: all of them)
# Environment: FUZZ_BUILD_DIR (default build-fuzz), CXX (default clang++-14),
#   FUZZ_ARTIFACTS (where crash inputs are kept; default a new directory under /tmp),
#   FUZZ_JOBS (targets run at the same time; default 2, 1 on a single CPU).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-20}
shift || true
targets=("$@")
# By default every target with a corpus (each has one: test/fuzz/meson.build lists them), so a
# new target is run by CI once its corpus is checked in.
if [ ${#targets[@]} -eq 0 ]; then
	for corpus in test/fuzz/corpus/*/; do
		targets+=("$(basename "$corpus")")
	done
fi
build=${FUZZ_BUILD_DIR:-build-fuzz}
artifacts=${FUZZ_ARTIFACTS:-$(mktemp -d /tmp/ip-masq-agent-fuzz-artifacts.XXXXXX)}
mkdir -p "$artifacts"

if [ ! -f "$build/build.ninja" ]; then
	# -O1: fast to compile, and what libFuzzer's documentation suggests. -Werror: this
	# is a developer's and CI's build, and CI's only clang build, so a clang warning
	# fails here (the default build leaves warnings to the user's toolchain).
	CXX=${CXX:-clang++-14} meson setup "$build" -Dfuzzing=true -Dtests=disabled \
		-Dbuildtype=debug -Doptimization=1 -Dwerror=true >/dev/null
fi
# Regenerate first if meson.build changed (a new target is unknown until then).
ninja -C "$build" build.ninja >/dev/null
# Quiet when it builds; the compiler's output when it does not (CI shows nothing else).
compile_log="$artifacts/compile.log"
meson compile -C "$build" "${targets[@]/#/fuzz_}" >"$compile_log" 2>&1 ||
	{ cat "$compile_log"; echo "the fuzz targets do not compile (clang, -Werror): above" >&2; exit 1; }

work=$(mktemp -d /tmp/ip-masq-agent-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
common=(-timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1)

# One target: regression over its corpus, then fuzzing. Its report goes to
# $work/<target>.out, printed when all are done; the exit status says whether it passed.
run_target() {
	local target=$1
	local binary="$build/test/fuzz/fuzz_$target" corpus="test/fuzz/corpus/$target"
	local log="$work/$target.log"
	echo "fuzz_$target: regression over $(find "$corpus" -type f | wc -l) inputs"
	if ! "$binary" "${common[@]}" -runs=0 -artifact_prefix="$artifacts/$target-" \
		"$corpus" >"$log" 2>&1; then
		tail -n 40 "$log"
		echo "fuzz_$target: FAILED on the checked-in corpus (crash input in $artifacts)"
		return 1
	fi
	[ "$seconds" -gt 0 ] || return 0
	echo "fuzz_$target: fuzzing for ${seconds}s"
	# New inputs go to the first directory (a temporary one); the corpus only seeds.
	mkdir -p "$work/$target"
	if ! "$binary" "${common[@]}" -max_total_time="$seconds" \
		-artifact_prefix="$artifacts/$target-" "$work/$target" "$corpus" >"$log" 2>&1; then
		tail -n 40 "$log"
		echo "fuzz_$target: FAILED; the input is in $artifacts: add it to $corpus" \
			"once fixed"
		return 1
	fi
	grep -E '^stat::number_of_executed_units' "$log" | sed "s/^/fuzz_$target: /" || true
}

# FUZZ_JOBS targets at a time (default: the number of CPUs, at most 2 unless set).
jobs=${FUZZ_JOBS:-$(( $(nproc) < 2 ? 1 : 2 ))}
declare -A pids
for target in "${targets[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n || true
	done
	run_target "$target" >"$work/$target.out" 2>&1 &
	pids[$target]=$!
done
status=0
for target in "${targets[@]}"; do
	wait "${pids[$target]}" || status=1
	cat "$work/$target.out"
done
[ "$status" -ne 0 ] || rm -rf "$artifacts"
exit "$status"
