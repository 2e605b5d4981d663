// SPDX-License-Identifier: Apache-2.0
// What the daemon's loop reads for /metrics only, each on a timer of its own: conntrack's
// statistics and the table's connection counters.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/nft/table_backend.h"

namespace ipmasq {

// The loop reads them, never a scrape: however many scrapes come, the kernel is asked at
// these rates, and a scrape never waits on netlink. A failed read is counted or keeps the
// last values (below), and is said once per distinct message.
class MetricsReader
{
public:
	using Clock = std::chrono::steady_clock;

	// How often conntrack's statistics are read (and once at start); a failed read drops
	// them from /metrics until one succeeds (stale values would pass for the node's state).
	static constexpr std::chrono::seconds kConntrackPeriod{10};
	// The same for the table's connection counters: one small dump (about ten objects). A
	// failed read keeps the last values: counts never go down, and the table heals.
	static constexpr std::chrono::seconds kCountersPeriod{2};

	// `table`: the agent's table, whose counters are read; without them
	// (--connection-counters=false) there is nothing to read there, ever.
	MetricsReader(TableBackend &backend, std::string table, bool counters, AgentStatus &status)
		: backend_(backend), table_(std::move(table)), status_(status),
		  countersAt_(counters ? std::optional(Clock::time_point()) : std::nullopt)
	{
	}

	// The reads whose time has come (each one at the first call), scheduled again.
	void readDue(Clock::time_point now);
	// The earliest of the next reads.
	Clock::time_point nextWake() const;

private:
	void readConntrack();
	void readCounters();

	TableBackend &backend_;
	const std::string table_;
	AgentStatus &status_;
	Clock::time_point conntrackAt_{};
	std::optional<Clock::time_point> countersAt_; // none: the table has no counters
	LogOnce conntrackError_;
	LogOnce countersError_;
};

} // namespace ipmasq
