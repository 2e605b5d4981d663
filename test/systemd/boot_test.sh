#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Boots a minimal Debian with systemd in systemd-nspawn (with a private network) and
# checks ip-masq-agent.service there for real: READY, the table in the container's
# netns, the dynamic user with CAP_NET_ADMIN alone, the watchdog, the environment file,
# reload and stop. The host's nftables are only read, never written.
#
# Usage: boot_test.sh --agent BINARY --unit UNIT --config CONFIG
# Needs root, systemd-nspawn (systemd-container), mmdebstrap, nsenter and nft; skips
# (exit 77) without them. The Debian tree is built once with mmdebstrap (about 1.5
# minutes, from the Debian mirror) and cached in /var/tmp, keyed by the packages it
# holds; set IP_MASQ_AGENT_TEST_CACHE to use another directory. Each run boots a copy.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
export SYSTEMD_PAGER= SYSTEMD_COLORS=0 LC_ALL=C

# Bump when the way the tree is made changes, so that old caches are not reused.
readonly RECIPE=1
# The waits' bounds only catch a hang (each is ten times and more what it takes on an idle
# machine); the test asserts no speed, so a busy machine only makes it slower.
readonly BOOT_TIMEOUT=120  # seconds until the service is active (a few on an idle machine)
readonly STOP_TIMEOUT=60   # seconds for the container to power off
readonly WATCHDOG_SEC=5    # test drop-in; the shipped unit says 30s
readonly PINGS=3           # watchdog pings to see, each within WATCHDOG_SEC of the last

agent= unit= config=
while [ $# -gt 0 ]; do
	case $1 in
	--agent) agent=$2; shift 2 ;;
	--unit) unit=$2; shift 2 ;;
	--config) config=$2; shift 2 ;;
	*) echo "unknown argument: $1" >&2; exit 2 ;;
	esac
done
[ -x "$agent" ] && [ -f "$unit" ] && [ -f "$config" ] || {
	echo "usage: $0 --agent BINARY --unit UNIT --config CONFIG" >&2; exit 2; }

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
note() { printf '[%5ss] %s\n' "$(elapsed)" "$*"; }
start_ms=$(($(date +%s%N) / 1000000))
elapsed() { local ms=$(($(date +%s%N) / 1000000 - start_ms)); echo "$((ms / 1000)).$((ms % 1000 / 100))"; }

[ "$(id -u)" -eq 0 ] || skip "needs root (systemd-nspawn and mmdebstrap)"
for tool in systemd-nspawn mmdebstrap nsenter nft flock dpkg-query systemctl; do
	command -v "$tool" >/dev/null ||
		skip "$tool not found (Debian: apt-get install systemd-container mmdebstrap util-linux nftables)"
done

# --- state and cleanup ----------------------------------------------------------------
work= nspawn_pid= leader= machine=ipmasq-test-$$ building= show_console=no
cgroups=()
cleanup() {
	local rc=$?
	set +e
	if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
		# nspawn turns SIGTERM into SIGRTMIN+3 for the container's systemd: a clean halt.
		kill -TERM "$nspawn_pid"
		for _ in $(seq $((STOP_TIMEOUT * 10))); do
			kill -0 "$nspawn_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$nspawn_pid" 2>/dev/null; then
			echo "container did not power off within ${STOP_TIMEOUT}s: killing it" >&2
			[ -n "$leader" ] && kill -KILL "$leader" 2>/dev/null
			kill -KILL "$nspawn_pid" 2>/dev/null
		fi
		wait "$nspawn_pid" 2>/dev/null
	fi
	if [ $show_console = yes ] && [ -f "$work/console.log" ]; then
		echo "--- container console (last 40 lines) ---" >&2
		tail -n 40 "$work/console.log" >&2
	fi
	# Depth first: nspawn and the container's systemd made sub-groups below ours.
	for cg in "${cgroups[@]}"; do
		[ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	rm -rf "/run/systemd/nspawn/propagate/$machine"
	[ -n "$building" ] && rm -rf --one-file-system "$building"
	[ -n "$work" ] && rm -rf --one-file-system "$work"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the cached Debian tree -----------------------------------------------------------
# The agent's own libraries, found from the binary, so the list follows the build.
agent_packages() {
	local lib path pkg
	for lib in $(ldd "$agent" | awk '$3 ~ /^\// { print $3 }'); do
		path=$(realpath "$lib")
		pkg=$(dpkg-query -S "$path" 2>/dev/null || dpkg-query -S "/usr$path" 2>/dev/null ||
			dpkg-query -S "${path#/usr}" 2>/dev/null) ||
			skip "no Debian package holds $lib: the test needs a Debian host"
		echo "${pkg%%:*}"
	done
}
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$suite" ] || skip "cannot tell the Debian release from /etc/os-release"
packages=$(printf '%s\n' systemd systemd-sysv dbus procps nftables $(agent_packages) |
	sort -u | paste -sd, -)
cache_base=${IP_MASQ_AGENT_TEST_CACHE:-/var/tmp}
key=$(printf '%s\n' "$RECIPE" "$suite" "$(dpkg --print-architecture)" "$packages" |
	sha256sum | cut -c1-16)
rootfs=$cache_base/ip-masq-agent-test-rootfs-$key

mkdir -p "$cache_base"
exec 9>"$cache_base/ip-masq-agent-test-rootfs.lock"
flock -w 600 9 || fail "another run kept the rootfs lock for 10 minutes"
if [ ! -f "$rootfs/.complete" ]; then
	note "building the $suite tree in $rootfs (cached for later runs): $packages"
	building=$rootfs.tmp.$$
	# Docs, man pages and translations are not needed to boot: a smaller copy per run.
	mmdebstrap --mode=root --format=directory --variant=minbase --include="$packages" \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		"$suite" "$building" </dev/null >"$cache_base/ip-masq-agent-test-rootfs.log" 2>&1 ||
		{ tail -n 20 "$cache_base/ip-masq-agent-test-rootfs.log" >&2
		  fail "mmdebstrap failed (log: $cache_base/ip-masq-agent-test-rootfs.log)"; }
	touch "$building/.complete"
	# Older trees of this test (other package lists) are stale now.
	for old in "$cache_base"/ip-masq-agent-test-rootfs-*; do
		[ -d "$old" ] && [ "$old" != "$building" ] && rm -rf --one-file-system "$old"
	done
	mv "$building" "$rootfs"
	building=
	note "tree built"
fi

# --- this run's copy ------------------------------------------------------------------
work=$(mktemp -d "$cache_base/ip-masq-agent-test-boot.XXXXXX")
root=$work/root
cp -a --reflink=auto "$rootfs" "$root"
flock -u 9

# The shipped unit, unchanged, where a Debian package (meson --prefix=/usr) puts it.
install -m 0755 "$agent" "$root/usr/sbin/ip-masq-agent"
install -m 0644 "$unit" "$root/etc/systemd/system/ip-masq-agent.service"
install -D -m 0644 "$config" "$root/etc/ip-masq-agent/config.yaml"
# The environment file: two flags in one variable, split by systemd.
echo 'IP_MASQ_AGENT_ARGS="--masq-chain=SYSTEMD-TEST --v=1"' >"$root/etc/default/ip-masq-agent"
# A short watchdog, so that a few seconds prove the agent's pings arrive.
mkdir -p "$root/etc/systemd/system/ip-masq-agent.service.d"
printf '[Service]\nWatchdogSec=%ss\n' "$WATCHDOG_SEC" \
	>"$root/etc/systemd/system/ip-masq-agent.service.d/test-watchdog.conf"
# [Install] as an administrator would use it.
systemctl --root="$root" --quiet enable ip-masq-agent.service
[ -L "$root/etc/systemd/system/multi-user.target.wants/ip-masq-agent.service" ] ||
	fail "systemctl enable did not link the unit into multi-user.target.wants"

# --- boot ----------------------------------------------------------------------------
host_had_table=no
nft list tables | grep -qx 'table inet ip-masq-agent' && host_had_table=yes
host_before=$(nft list table inet ip-masq-agent 2>/dev/null || true)

nspawn_args=(--boot --private-network --register=no --machine="$machine"
	--console=read-only -D "$root")
# On a systemd host, nspawn asks it for a scope of its own (the default).
if [ ! -d /run/systemd/system ]; then
	# PID 1 is not systemd: nothing gives the container a cgroup, so make one below
	# ours in each writable hierarchy, and let nspawn use it (--keep-unit).
	nspawn_args+=(--keep-unit)
	while IFS=: read -r _ controllers path; do
		case $controllers in
		'') hier=/sys/fs/cgroup/unified; [ -d "$hier" ] || hier=/sys/fs/cgroup ;;
		name=systemd) hier=/sys/fs/cgroup/systemd ;;
		*) continue ;;
		esac
		[ -f "$hier/cgroup.procs" ] || continue
		cg=$hier${path%/}/$machine
		err=$(mkdir "$cg" 2>&1) || skip "cannot create cgroup $cg for the container ($err):" \
			"systemd-nspawn needs a writable cgroup hierarchy"
		cgroups+=("$cg")
	done </proc/self/cgroup
	[ ${#cgroups[@]} -gt 0 ] || skip "no writable cgroup hierarchy for systemd-nspawn"
fi
note "booting $machine: systemd-nspawn ${nspawn_args[*]}"
(
	for cg in "${cgroups[@]}"; do echo "$BASHPID" >"$cg/cgroup.procs"; done
	exec systemd-nspawn "${nspawn_args[@]}"
) </dev/null >"$work/console.log" 2>&1 &
nspawn_pid=$!

# The container's PID 1 ends up nspawn's child: nspawn first forks an outer child, still
# in the host's namespaces, which clones PID 1 into new ones and exits (a busy machine
# shows the outer child for a while). So wait for a child in a network namespace of its
# own. If nspawn dies first, this host cannot run containers at all: say why and skip.
host_net=$(readlink /proc/self/ns/net)
for _ in $(seq 600); do
	leader=$(cut -d' ' -f1 "/proc/$nspawn_pid/task/$nspawn_pid/children" 2>/dev/null) || true
	if [ -n "$leader" ]; then
		leader_net=$(readlink "/proc/$leader/ns/net" 2>/dev/null) || leader_net=
		[ -n "$leader_net" ] && [ "$leader_net" != "$host_net" ] && break
	fi
	kill -0 "$nspawn_pid" 2>/dev/null || {
		tail -n 15 "$work/console.log"
		skip "systemd-nspawn could not start a container here (its output is above)"; }
	sleep 0.1
done
[ -n "$leader" ] || fail "no container PID 1 after 60s (a bound only a hang misses)"
# Belt and braces: the agent must never see the host's network namespace.
[ "$(readlink /proc/"$leader"/ns/net)" != "$host_net" ] ||
	{ kill -KILL "$nspawn_pid" "$leader"; fail "the container shares the host's network namespace"; }
note "container PID 1 is host PID $leader"

in_ct() { nsenter -t "$leader" -a "$@"; }
show() { in_ct systemctl show -P "$1" ip-masq-agent.service 2>/dev/null; }
diagnose() {
	in_ct systemctl status --no-pager -l ip-masq-agent.service >&2 || true
	in_ct journalctl --no-pager -b -u ip-masq-agent.service -o short-monotonic >&2 || true
}

# --- READY: active, not activating ----------------------------------------------------
state=
for _ in $(seq $((BOOT_TIMEOUT * 5))); do
	kill -0 "$nspawn_pid" 2>/dev/null || { show_console=yes; fail "the container exited while booting"; }
	state=$(in_ct systemctl is-active ip-masq-agent.service 2>/dev/null) || true
	case $state in active|failed) break ;; esac
	# A failed first start waits in "activating (auto-restart)": no need to wait more.
	result=$(show Result) || true
	[ -z "$result" ] || [ "$result" = success ] || break
	sleep 0.2
done
[ "$state" = active ] ||
	{ diagnose; fail "ip-masq-agent.service is '$state' (Result=${result:-?}), not active, after $(elapsed)s"; }
note "ip-masq-agent.service is active (READY=1 arrived); status: $(show StatusText)"

# --- the table is in the container's netns, not the host's ----------------------------
table=$(nsenter -t "$leader" -n nft list table inet ip-masq-agent) ||
	{ diagnose; fail "no table inet ip-masq-agent in the container's network namespace"; }
grep -q 'chain SYSTEMD-TEST' <<<"$table" ||
	{ echo "$table"; fail "--masq-chain from /etc/default/ip-masq-agent was not applied"; }
grep -q '192.168.0.0/16' <<<"$table" ||
	{ echo "$table"; fail "the config's nonMasqueradeCIDRs are not in the table"; }
note "table inet ip-masq-agent is in the container's netns, with the environment file's chain"
if [ $host_had_table = no ]; then
	! nft list tables | grep -qx 'table inet ip-masq-agent' ||
		fail "the HOST has a table inet ip-masq-agent now"
else
	[ "$(nft list table inet ip-masq-agent 2>/dev/null || true)" = "$host_before" ] ||
		fail "the host's own table inet ip-masq-agent changed during the test"
fi
note "the host's ruleset has no such table"

# --- identity: a dynamic user with CAP_NET_ADMIN only ----------------------------------
main_pid=$(show MainPID)
proc_status=$(in_ct cat "/proc/$main_pid/status")
uid=$(awk '/^Uid:/ { print $2 }' <<<"$proc_status")
cap_eff=$(awk '/^CapEff:/ { print $2 }' <<<"$proc_status")
cap_bnd=$(awk '/^CapBnd:/ { print $2 }' <<<"$proc_status")
no_new_privs=$(awk '/^NoNewPrivs:/ { print $2 }' <<<"$proc_status")
[ "$uid" -ne 0 ] || fail "the agent runs as root"
# CAP_NET_ADMIN is capability 12.
[ "$cap_eff" = 0000000000001000 ] && [ "$cap_bnd" = 0000000000001000 ] ||
	fail "capabilities: effective $cap_eff, bounding $cap_bnd; expected CAP_NET_ADMIN (0x1000) only"
[ "$no_new_privs" = 1 ] || fail "NoNewPrivs is $no_new_privs"
note "main PID $main_pid runs as uid $uid with CAP_NET_ADMIN only"

# --- health endpoint (AF_INET under the sandbox) ---------------------------------------
if command -v curl >/dev/null; then
	health=$(nsenter -t "$leader" -n curl -sS --max-time 5 http://127.0.0.1:10263/healthz) ||
		{ diagnose; fail "GET /healthz in the container failed"; }
	note "GET /healthz: $(head -c 80 <<<"$health")"
else
	note "curl not found: health endpoint not checked"
fi

# --- the watchdog: pings arrive, nothing restarts --------------------------------------
# Counted: PINGS new ping times (the agent pings every WATCHDOG_SEC/2), then the same
# process, never restarted: systemd would have killed it had one come later than
# WATCHDOG_SEC. The wait's bound (ten times the pings' span) only catches a hang.
last_ping=$(show WatchdogTimestampMonotonic)
pings=0
for _ in $(seq $((PINGS * WATCHDOG_SEC * 10 * 5))); do
	[ "$pings" -lt "$PINGS" ] || break
	ping=$(show WatchdogTimestampMonotonic) || ping=
	if [ -n "$ping" ] && [ "$ping" != "$last_ping" ]; then
		pings=$((pings + 1))
		last_ping=$ping
	fi
	sleep 0.2
done
[ "$(in_ct systemctl is-active ip-masq-agent.service)" = active ] &&
	[ "$(show MainPID)" = "$main_pid" ] && [ "$(show NRestarts)" = 0 ] ||
	{ diagnose; fail "the agent did not survive $pings watchdog pings with WatchdogSec=${WATCHDOG_SEC}s"; }
[ "$pings" -ge "$PINGS" ] || fail "$pings of $PINGS watchdog pings seen within $((PINGS * WATCHDOG_SEC * 10))s"
note "WatchdogSec=${WATCHDOG_SEC}s: $pings pings seen, still the same process, never restarted"

# --- reload: ExecReload sends SIGHUP, the new config is applied ------------------------
printf 'nonMasqueradeCIDRs: [10.0.0.0/8, 100.64.0.0/10]\n' >"$root/etc/ip-masq-agent/config.yaml"
in_ct systemctl reload ip-masq-agent.service || { diagnose; fail "systemctl reload failed"; }
applied=no
for _ in $(seq 150); do # 30 s: only a hang takes that long
	if nsenter -t "$leader" -n nft list set inet ip-masq-agent nomasq-v4 |
		grep -q '100.64.0.0/10' &&
		in_ct journalctl --no-pager -b -u ip-masq-agent.service -o cat | grep -q 'SIGHUP: reloading'; then
		applied=yes
		break
	fi
	sleep 0.2
done
[ $applied = yes ] || { diagnose; fail "reload: SIGHUP not seen or new config not applied in 30s (a bound only a hang misses)"; }
note "systemctl reload: SIGHUP reached the agent, the new config is in force"

# --- stop: exit 0, the table stays -----------------------------------------------------
in_ct systemctl stop ip-masq-agent.service
result=$(show Result) exit_status=$(show ExecMainStatus)
[ "$result" = success ] && [ "$exit_status" = 0 ] ||
	{ diagnose; fail "stop: Result=$result ExecMainStatus=$exit_status"; }
nsenter -t "$leader" -n nft list table inet ip-masq-agent >/dev/null ||
	fail "the table was removed on stop"
note "systemctl stop: exit status 0, the table stays in place"

# --- power off (the EXIT trap does it, bounded, and removes the copy) -------------------
kill -TERM "$nspawn_pid"
for _ in $(seq $((STOP_TIMEOUT * 10))); do
	kill -0 "$nspawn_pid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$nspawn_pid" 2>/dev/null && fail "the container did not power off within ${STOP_TIMEOUT}s"
wait "$nspawn_pid" || true
nspawn_pid=
note "container powered off"
echo "PASS"
