// SPDX-License-Identifier: Apache-2.0
// This node's addresses, followed for the daemon's loop: the address monitor, the reads of
// them all, their back-off and the monitor's reopen, and how they are known (/readyz).
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/daemon/monitor_recovery.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/node/address_monitor.h"
#include "ip-masq-agent/node/node_address_view.h"

namespace ipmasq {

class DesiredStateSource;

// Subscribed first, read once, every notification applied in order (node/address_monitor.h
// says why that is exact); read again at each resync (the safety net) and after lost
// notifications, a failed read retried while the view is not current. The view is kept for
// every config: it is also what both checks use. Which addresses can change the desired
// state (the outputAddress subnets), and whether it depends on them at all, the desired
// state source says. On the loop's thread only.
class AddressFollower
{
public:
	using Clock = std::chrono::steady_clock;

	// Subscribes at once, before any read, so that no change is missed. A monitor that
	// cannot be opened is said, and opened again on the timer (MonitorRecovery); until
	// then the addresses are read at each resync only.
	AddressFollower(const DesiredStateSource &source, AgentStatus &status, Clock::time_point now);

	// The monitor's descriptor for poll(); -1 while it is down.
	int fd() const { return monitor_ ? monitor_->fd() : -1; }
	// Applies the monitor's notifications to the view: true when one was about an address
	// inside an outputAddress subnet. Lost notifications: a new subscription, and a read.
	// A monitor that fails is closed, and opened again on the timer.
	bool onReadable(Clock::time_point now);
	// The monitor's reopen when due (then every address is read), and a read when one is
	// due (after lost notifications, a failure) or `readNow` (a resync, SIGHUP): true when
	// a read succeeded.
	bool onTimer(Clock::time_point now, bool readNow);
	// When onTimer() or a snapshot for the checks is due; nullopt: nothing is pending.
	std::optional<Clock::time_point> nextWake() const;

	// This node's addresses for a config just loaded, read first when they are not known to
	// be current (the first config, lost notifications, no monitor to follow them).
	// `needed`: its desired state depends on them (a failed read is retried and said).
	NodeAddresses forConfig(Clock::time_point now, bool needed);
	// As followed: complete while current, the last known while stale, none while unknown.
	NodeAddresses addresses() const { return view_.addresses(); }
	// How they are known, for /readyz and /metrics: said again after a config was taken
	// (whether they are needed may have changed).
	void report();

	// The view's copy for the checks' threads (one, shared by both): they never read the
	// addresses themselves. Due at most once per kSnapshotSpacing while the view changes.
	std::shared_ptr<const NodeAddresses> snapshot(Clock::time_point now);
	bool snapshotDue(Clock::time_point now) const;

	// Reads of every address after lost notifications: at most one per this period.
	static constexpr std::chrono::milliseconds kReadSpacing{200};
	// A failed read that is needed (the view is not current) is tried again after this,
	// doubling up to the longest.
	static constexpr std::chrono::milliseconds kFirstRetry{50};
	static constexpr std::chrono::milliseconds kLongestRetry{5000};
	// Under a pod churn the view changes with every notification, and the checks' passes
	// are seconds apart.
	static constexpr std::chrono::seconds kSnapshotSpacing{1};

private:
	// Reads every address into the view; true when it did. A failure keeps the view as it
	// was; when the view is not current and `required`, it is tried again on the timer
	// (back-off) and logged once per distinct message.
	bool read(Clock::time_point now, bool required);
	// A read of every address: coalesced, spaced.
	void scheduleRead(Clock::time_point now);
	// The monitor is gone (`error` says why) with what was queued on it: the view is stale
	// until a new subscription is in place and every address is read again.
	void monitorLost(const std::string &error, Clock::time_point now);
	void reopen(Clock::time_point now);

	const DesiredStateSource &source_;
	AgentStatus &status_;
	std::optional<AddressMonitor> monitor_; // none: down, opened again on the timer
	MonitorRecovery recovery_{"following this node's addresses"};
	NodeAddressView view_;
	std::optional<Clock::time_point> readAt_;
	Clock::time_point lastRead_{};
	std::chrono::milliseconds retry_ = kFirstRetry;
	LogOnce readError_;
	bool changedSinceSnapshot_ = false;
	Clock::time_point lastSnapshot_{};
};

} // namespace ipmasq
