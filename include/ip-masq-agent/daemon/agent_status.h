// SPDX-License-Identifier: Apache-2.0
// What the agent reports about itself: liveness (/livez), readiness (/readyz, /healthz)
// and counters (/metrics).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <string>

#include "ip-masq-agent/conntrack/conntrack_stats.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/conntrack/snat_usage.h"

namespace ipmasq {

// The time now as the metrics give time stamps: Unix seconds.
double unixNow();

// Written by the daemon's loop and by the threads of the NAT conflict check and the SNAT
// usage read (each its own part), read by the HTTP server's thread. Readiness and
// counters are guarded by one lock and read as one Snapshot; the loop's heartbeat is an
// atomic of its own, so that liveness never waits for anything the loop could hold.
class AgentStatus
{
public:
	using Clock = std::chrono::steady_clock;

	struct Health {
		bool ok;
		std::string reason; // why not ok; empty when ok
	};

	// How this node's addresses are known, for outputAddress subnets
	// (node_address_view.h): followed; stale (the last known kept while they cannot be
	// read again, or after notifications were lost: the reason); or never read, while a
	// config with a subnet waits for them (the reason; the agent is then not ready, and
	// nothing is applied from addresses it does not know).
	struct AddressFollowing {
		enum class State { following, stale, waiting };
		State state = State::following;
		std::string reason;
		bool operator==(const AddressFollowing &) const = default;
	};

	// The pod network found on the node (nonMasqueradeDiscovery), for /readyz?verbose and
	// /metrics: set while the config has the section.
	struct PodNetworkState {
		std::vector<std::pair<std::string, size_t>> perSource; // by config key: prefixes it gives
		std::vector<std::pair<std::string, bool>> staleSources; // by config key: a read failed
		// By config key: the inputs it reads (the route source, subnet.env, each CNI file)
		std::vector<std::pair<std::string, size_t>> inputsPerSource;
		size_t inForce = 0;
		size_t heldDown = 0;
		uint64_t changes = 0;
		uint64_t outsideWithin = 0;
		bool overBound = false;
		std::vector<std::string> ranges; // "PREFIX: ORIGINS", at most kListedRanges
		std::vector<std::string> problems; // an input stale ("FILE: why"), the bound reached
		bool operator==(const PodNetworkState &) const = default;
	};
	static constexpr size_t kListedRanges = 1000;

	// A check the daemon runs on a thread of its own (the NAT conflict check, the SNAT
	// usage read): running, or why the kernel refused its thread (a limit on tasks). A
	// check that is not running is said in /readyz?verbose and by its gauge; readiness
	// does not depend on it (the table in force does not).
	struct CheckThread {
		std::string label;   // the gauge's `check` label: "nat_conflicts", "snat_usage"
		std::string what;    // in words: "the NAT conflict check"
		std::string refused; // why its thread is not running; empty while it runs
		bool operator==(const CheckThread &) const = default;
	};

	// Upper bounds (seconds) of the sync duration histogram's buckets.
	static constexpr std::array<double, 12> kDurationBuckets{
		0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

	// Everything but the heartbeat, copied under one lock acquisition: whatever is
	// rendered from one snapshot (a /readyz answer, a /metrics page, a STATUS= line)
	// describes one state, never a mix of two.
	struct Snapshot {
		bool started = false; // a sync has completed
		// The kernel was seen to hold a ruleset of the agent (applied, verified or
		// adopted): with a bad config, whether anything protects the node.
		bool rulesetInForce = false;
		std::string configError;
		std::string syncError;
		// outputAddress subnets and this node's address in each: one without an address
		// keeps the agent not ready (its family is masqueraded instead).
		std::vector<SubnetChoice> subnets;
		AddressFollowing addresses;
		std::optional<PodNetworkState> podNetwork;
		// The table's connection counters as last read (named counters, by label).
		std::vector<CounterValue> connections;
		bool tableDrifted = false;

		uint64_t syncs = 0;
		uint64_t syncFailures = 0;
		uint64_t noopResyncs = 0;
		uint64_t driftRepairs = 0;
		uint64_t configErrors = 0;
		double lastSuccessUnixSeconds = 0;
		std::array<uint64_t, kDurationBuckets.size()> durationBucketCounts{};
		uint64_t durationCount = 0;
		double durationSum = 0;
		size_t intervalsV4 = 0;
		size_t intervalsV6 = 0;
		std::string table;

		// Conntrack's statistics as last read; nullopt before the first read and after
		// a failed one (a stale reading would pass for the node's state). Never part of
		// readiness: conntrack pressure is the node's problem, not the agent's failure.
		std::optional<netlink::ConntrackStats> conntrack;
		double conntrackReadUnixSeconds = 0; // the last successful read; 0: none yet
		uint64_t conntrackReadFailures = 0;

		// The NAT conflict check's last cycle (other_tables/conflicts.h): how many rules
		// of other tables undo the agent's decisions, certainly or maybe, and how many
		// outcomes the evaluator could not tell (a bound, a table it could not read, a
		// target it does not know); nullopt before the first cycle and after a failed
		// read. Never part of readiness: other components' rules are not the agent's
		// failure.
		struct NatConflicts {
			size_t certain = 0;
			size_t may = 0;
			size_t undetermined = 0;
			bool operator==(const NatConflicts &) const = default;
		};
		std::optional<NatConflicts> natConflicts;
		uint64_t natCheckFailures = 0; // passes that could not read other tables
		uint64_t natCheckCycles = 0; // cycles of the check completed over the whole sample
		// The SNAT usage read's last result (snat_usage.h): the top destinations and the
		// counts, bounded whatever conntrack holds; nullopt before the first read and
		// after a failed one. Never part of readiness.
		std::optional<SnatUsage> snatUsage;
		double snatReadUnixSeconds = 0; // the last successful read; 0: none yet
		uint64_t snatReadFailures = 0;
		// The SNAT guard's last reading (with the SNAT usage), when the config has one:
		// /snat-usage's part about it, the keys over a limit with the most attempts
		// (at most kTopGuardOverSeries) and how full each dynamic set is; `guardText`
		// says why when the sets could not be read (no series then).
		std::string guardText;
		std::vector<GuardOverKey> guardTopOver;
		std::vector<DynamicSetFill> guardFill;
		// The checks' threads, once the daemon started (or tried to start) them.
		std::vector<CheckThread> checkThreads;

		// Findings for /readyz?verbose that do not make the agent unready: each
		// conflict, legacy iptables nat tables that cannot be checked.
		std::vector<std::string> warnings;
		// The config's unknown keys, one warning each: never part of readiness (upstream
		// ignores them too), but said in /readyz?verbose and counted in /metrics.
		std::vector<std::string> unknownConfigKeys;

		// Readiness: the config is valid and its table is in force.
		Health health() const;
		// The lines /readyz?verbose adds: the config's unknown keys, `warnings`, and
		// stale addresses.
		std::vector<std::string> verboseWarnings() const;
		// Then one "info: ..." line each: the pod network found (nonMasqueradeDiscovery).
		std::vector<std::string> verboseInfo() const;
		std::string prometheusText() const;
		// One line for systemd's STATUS=.
		std::string summary() const;
		// The SNAT usage table (/snat-usage), or why there is none.
		std::string snatUsageText() const;
	};

	// `startedAt` is when the process started, for liveness before the loop's first turn.
	explicit AgentStatus(Clock::time_point startedAt = Clock::now());

	void configLoaded();
	void configFailed(const std::string &error);
	// The unknown keys of the config handed over (their warnings, with the key each most
	// likely means): /readyz?verbose lists them, ip_masq_agent_config_unknown_keys counts.
	void configKeysUnknown(std::vector<std::string> warnings);
	void syncSucceeded(const Ruleset &applied, std::chrono::duration<double> took);
	void syncFailed(const std::string &error);
	// Nothing to write: the kernel holds the desired table (clears a sync error).
	void noopResync();
	void tableDrifted(); // missing or edited: not ok until the next successful sync
	void subnetsChosen(const std::vector<SubnetChoice> &subnets);
	void addressesFollowed(const AddressFollowing &following);
	void podNetworkFound(std::optional<PodNetworkState> state);
	void countersRead(const std::vector<CounterValue> &values);
	void driftRepaired();
	// A reading of conntrack's statistics (by the loop, never by a scrape), or a failure
	// to read them.
	void conntrackRead(const netlink::ConntrackStats &stats);
	void conntrackReadFailed();
	// A pass of the NAT conflict check, with the warnings it leaves for /readyz?verbose;
	// or a pass that could not read the kernel (the gauge goes until one can).
	void natConflictsChecked(Snapshot::NatConflicts counts, std::vector<std::string> warnings);
	void natConflictCheckFailed(std::vector<std::string> warnings);
	// A read of the SNAT usage (on its own thread), or a read that failed (the metrics
	// go until one succeeds; the failure is counted). `startedUnixSeconds`: when the read
	// began, which the timestamp metric says: every connection made before it was counted
	// (a read of 65,536 entries and their clients' routes takes seconds on a busy node).
	void snatUsageRead(SnatUsage usage, double startedUnixSeconds);
	void snatUsageReadFailed();
	// A reading of the SNAT guard's sets (the same thread): its text for /snat-usage, the
	// keys most over (bounded by the caller) and the sets' fill; or, without a guard, none.
	void snatGuardRead(std::string text, std::vector<GuardOverKey> topOver, std::vector<DynamicSetFill> fill);
	// A check's thread started, or refused (`refused` says why): replaces what was said
	// of the same check (by its label) before.
	void checkThread(CheckThread state);

	// The loop's heartbeat, for liveness (/livez): the loop calls loopTurned() on every
	// turn and wakes at least every kHeartbeatPeriod to do so, so a heartbeat older than
	// a few periods means the loop is stuck (a hung kernel call, a deadlock), not idle.
	static constexpr std::chrono::seconds kHeartbeatPeriod{5};
	// How old the heartbeat may be while the agent counts as live. Three periods leave
	// room for a sync that legitimately takes seconds (parsing and applying 100,000
	// CIDRs on a busy node) between two turns. The same bound applies from start-up to
	// the first turn.
	static constexpr std::chrono::seconds kLivenessLimit = 3 * kHeartbeatPeriod;
	void loopTurned(Clock::time_point now = Clock::now());
	// When the loop last turned; nullopt before its first turn.
	std::optional<Clock::time_point> lastLoopTurn() const;

	// Liveness at `now`: ok while the loop has turned within kLivenessLimit (or, before
	// its first turn, while the process is younger than that); otherwise the reason
	// names how long it has not turned. Lock-free.
	Health liveness(Clock::time_point now = Clock::now()) const;

	Snapshot snapshot() const;
	// Each of these renders one snapshot.
	Health health() const { return snapshot().health(); }
	std::string prometheusText() const { return snapshot().prometheusText(); }
	std::string summary() const { return snapshot().summary(); }

private:
	const Clock::time_point startedAt_;
	// Lock-free: the loop beats on every turn, and must never wait for a scrape.
	std::atomic<Clock::rep> lastLoopTurn_{0};

	mutable std::mutex mutex_;
	Snapshot state_; // guarded by mutex_
};

} // namespace ipmasq
