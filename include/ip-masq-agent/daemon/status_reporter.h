// SPDX-License-Identifier: Apache-2.0
// What the daemon's loop says about itself besides its decisions: the pod network it
// found, in the status (/readyz?verbose, /metrics), and systemd's notifications.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/daemon/systemd_notify.h"
#include "ip-masq-agent/node/pod_network.h"

namespace ipmasq {

// On the loop's thread only: the status's other writers (the reconciler, the checks'
// threads) write their own parts.
class StatusReporter
{
public:
	using Clock = std::chrono::steady_clock;

	StatusReporter(AgentStatus &status, SystemdNotifier notifier)
		: status_(status), notifier_(std::move(notifier))
	{
	}

	// What the pod network's model holds at `now` (each range in force with its origins,
	// the first AgentStatus::kListedRanges of them; the counts; an input that could not be
	// read; the bound reached), or nothing (null: no nonMasqueradeDiscovery section).
	void podNetworkFound(const PodNetwork *podNetwork, Clock::time_point now);

	// To systemd (Type=notify): READY=1 after the first good sync, STATUS= with the
	// status's summary when it changed.
	void notifySystemd();
	// WATCHDOG=1 when due: at start, then every period (half of WatchdogSec). Sent from
	// the loop only as it turns: if the loop hangs, the pings stop and systemd restarts
	// the agent.
	void watchdog(Clock::time_point now);
	// When the next WATCHDOG=1 is due; nullopt without a watchdog.
	std::optional<Clock::time_point> nextWake() const { return watchdogAt_; }
	// STOPPING=1: the loop ends.
	void stopping() const { notifier_.notify("STOPPING=1"); }

private:
	AgentStatus &status_;
	SystemdNotifier notifier_;
	bool readySent_ = false;
	std::string lastStatusLine_;
	std::optional<Clock::time_point> watchdogAt_;
};

} // namespace ipmasq
