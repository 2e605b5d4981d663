// SPDX-License-Identifier: Apache-2.0
// The checks on threads of their own, as the daemon runs them: the ConflictCheck and the
// SnatUsageCheck, started (again while the kernel refuses a thread), fed the desired state
// and the node's addresses.
#pragma once

#include <array>
#include <memory>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/daemon/conflict_check.h"
#include "ip-masq-agent/daemon/snat_usage_check.h"

namespace ipmasq {

class CheckThreads
{
public:
	explicit CheckThreads(AgentStatus &status)
		: status_(status), conflictCheck_(status), snatUsageCheck_(status)
	{
	}

	// Starts the checks' threads that do not run yet (after the first sync, then at each
	// resync while the kernel refuses one): a refusal is logged once per distinct message
	// and reported (/readyz?verbose, ip_masq_agent_check_running); the agent goes on.
	void start();
	void setDesired(const DesiredState &desired)
	{
		conflictCheck_.setDesired(desired.ruleset, desired.samples);
		snatUsageCheck_.setDesired(desired.ruleset);
	}
	// The followed addresses to both checks (one copy, shared).
	void setNodeAddresses(std::shared_ptr<const NodeAddresses> addresses)
	{
		conflictCheck_.setNodeAddresses(addresses);
		snatUsageCheck_.setNodeAddresses(std::move(addresses));
	}
	void nudgeConflictCheck() { conflictCheck_.nudge(); }

private:
	AgentStatus &status_;
	// What other tables undo, checked on a thread of its own against the last desired state.
	ConflictCheck conflictCheck_;
	// How close each destination is to running out of SNAT ports, read on a thread of its
	// own with the last desired state's ranges.
	SnatUsageCheck snatUsageCheck_;
	// Why each check's thread was last refused: conflicts, SNAT usage.
	std::array<LogOnce, 2> checkRefusals_;
};

} // namespace ipmasq
