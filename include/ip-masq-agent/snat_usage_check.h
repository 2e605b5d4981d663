// SPDX-License-Identifier: Apache-2.0
// The daemon's SNAT usage read (snat_usage.h) on a thread of its own: a conntrack dump
// paced to at most 2% of one core, aggregated into a bounded map, reported to the status
// (/metrics, /snat-usage). Nothing it reads can delay the loop.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "ip-masq-agent/agent_status.h"
#include "ip-masq-agent/paced_thread.h"
#include "ip-masq-agent/ruleset.h"
#include "ip-masq-agent/snat_usage.h"

namespace ipmasq {

class SnatUsageCheck
{
public:
	explicit SnatUsageCheck(AgentStatus &status);
	SnatUsageCheck(const SnatUsageCheck &) = delete;
	SnatUsageCheck &operator=(const SnatUsageCheck &) = delete;

	// The desired ruleset changed: its SNAT addresses and port ranges (the read after
	// the next counts by them).
	void setDesired(const Ruleset &ruleset);
	// Starts the thread (after the first sync); a read is due at once, then every period.
	void start();

	// A read every 10 s at least, and 50 times its CPU time (2% of one core): at 200,000
	// entries a read costs far less than 0.2 s (the benchmark, section 10).
	static constexpr PacedThread::Pace kPace{std::chrono::seconds(10), 50};

private:
	bool pass();

	AgentStatus &status_;
	std::optional<SnatPlan> next_; // under thread_.locked()
	// The thread's own.
	SnatPlan plan_;
	std::string lastError_;
	PacedThread thread_; // last: stopped before the members its passes use go
};

} // namespace ipmasq
