// SPDX-License-Identifier: Apache-2.0
// The daemon's loop: turns descriptors into events for the DesiredStateSource and the
// Reconciler. It sees desired states only, never config types.
#pragma once

#include <bitset>
#include <csignal>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <sys/signalfd.h>

#include "ip-masq-agent/agent_status.h"
#include "ip-masq-agent/config_look.h"
#include "ip-masq-agent/desired_state.h"
#include "ip-masq-agent/duration.h"
#include "ip-masq-agent/error.h"
#include "ip-masq-agent/conflict_check.h"
#include "ip-masq-agent/snat_usage_check.h"
#include "ip-masq-agent/netlink/address_monitor.h"
#include "ip-masq-agent/node_address_view.h"
#include "ip-masq-agent/node_addresses.h"
#include "ip-masq-agent/reconciler.h"
#include "ip-masq-agent/systemd_notify.h"
#include "ip-masq-agent/table_backend.h"
#include "ip-masq-agent/unique_fd.h"

namespace ipmasq {

class DesiredStateSource;
class NftablesMonitor;

// One thread, one poll() over five descriptors: the signalfd, the desired state source's
// config watch (inotify), the nftables monitor, the node's address monitor and one timerfd
// for every deadline (debounce, absent grace, paced restores, resync, heartbeat, systemd
// watchdog, a due read of the node's addresses). All decisions belong to the
// DesiredStateSource (what the config and the node's addresses make), the Reconciler (what
// the kernel must hold) and the ConflictCheck (what other tables undo, on a thread of its
// own); the loop only says what happened and when.
class Daemon
{
public:
	// `source` gives the desired states, and the options they are built with (the table's
	// name, whether it holds connection counters), which the reconciler adopts by.
	// `monitor` may be null (then drift is found at the next resync only).
	// Blocks SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGIO and the signals it only logs (SIGUSR1,
	// SIGALRM, real-time signals, ...): from here on run() reads them. Fails
	// if the signalfd or timerfd cannot be made, with that call's errno.
	// `notifier` tells systemd READY=1 after the first good sync, STATUS= on changes,
	// and WATCHDOG=1 from the loop while it turns.
	static Result<std::unique_ptr<Daemon>> create(std::unique_ptr<DesiredStateSource> source,
						      TableBackend &backend, NftablesMonitor *monitor,
						      SystemdNotifier notifier = {});
	~Daemon();
	Daemon(const Daemon &) = delete;
	Daemon &operator=(const Daemon &) = delete;

	// Run until SIGTERM, SIGINT or SIGQUIT (exit status 0; the rules stay in place).
	// SIGHUP reloads at once; SIGUSR1, SIGUSR2, SIGALRM, real-time signals and the like
	// are logged and ignored. Config changes and changes to the agent's table are handled
	// within milliseconds; the resync timer (resyncInterval) is the safety net.
	int run();

	// run(), resumed after an allocation failure instead of ending: the failure is
	// logged, the config is read again and the table checked after a pause (100 ms,
	// doubling up to 5 s) during which SIGTERM still ends it. The table in force stays.
	int runGuarded();

	// Health and counters, for the HTTP endpoint (which reads them from its thread).
	const AgentStatus &status() const { return status_; }

private:
	using Clock = std::chrono::steady_clock;

	Daemon(std::unique_ptr<DesiredStateSource> source, TableBackend &backend,
	       NftablesMonitor *monitor, SystemdNotifier notifier, UniqueFd signalFd,
	       UniqueFd timerFd, std::optional<AddressMonitor> addressMonitor);

	// Look at the config (and read it if `why` or the source says so), then hand what
	// it yields to the reconciler. True if there was new content (or a read error).
	bool takeConfig(ConfigLook why, Clock::time_point now);
	// This node's addresses for a config just loaded, read first when they are not known
	// to be current (the first config, lost notifications, no monitor to follow them).
	NodeAddresses addressesForConfig(Clock::time_point now, bool needed);
	// A good config was taken in: the address reads it needs, and how they are known.
	void noteConfigTaken();
	// A new desired state to the reconciler, and to the checks that compare with it.
	void handOver(DesiredState desired);
	// Handle the pending signals; an exit status when the daemon must stop.
	std::optional<int> readSignals(bool &reload);
	// A signal that would have ended the process by default, and does not here.
	void noteIgnoredSignal(const signalfd_siginfo &info);
	// Wait `pause` for signals only (a SIGTERM still ends the daemon); an exit status
	// when one says so.
	std::optional<int> pauseForSignals(std::chrono::milliseconds pause);
	Clock::time_point nextWake(Clock::time_point now) const;
	void armWakeTimer(Clock::time_point at);
	void reportToSystemd();
	// Reads conntrack's statistics into the status, and schedules the next read.
	void readConntrack();
	// Reads the table's connection counters into the status, and schedules the next read.
	void readConnectionCounters();
	// With the addresses as followed: true when they change what an outputAddress subnet
	// gives (or a config waited for them), and the reconciler got the new desired state.
	bool takeNodeAddresses();
	// Reads every address into the view; true when it did. A failure keeps the view as it
	// was; when the view is not current and `required`, it is tried again on the timer
	// (back-off) and logged once per distinct message.
	bool readAddresses(Clock::time_point now, bool required);
	// Applies the monitor's notifications to the view; true when one was about an address
	// inside an outputAddress subnet. Lost notifications: a new subscription, and a read.
	bool followAddresses(Clock::time_point now);
	// A read of every address, when a config with a subnet needs one: coalesced, spaced.
	void scheduleAddressRead(Clock::time_point now);
	// How the addresses are known, for /readyz and /metrics.
	void reportAddresses();
	// How often the loop reads conntrack's statistics (and once at start). The loop
	// reads them, never a scrape: however many scrapes come, the kernel is asked at
	// this rate, and a scrape never waits on netlink.
	static constexpr std::chrono::seconds kConntrackReadPeriod{10};
	// The same for the table's connection counters: one small dump (about ten objects).
	static constexpr std::chrono::seconds kCountersReadPeriod{2};
	// Reads of every address after lost notifications: at most one per this period.
	static constexpr std::chrono::milliseconds kAddressReadSpacing{200};
	// A failed read that is needed (the view is not current) is tried again after this,
	// doubling up to the longest.
	static constexpr std::chrono::milliseconds kFirstAddressRetry{50};
	static constexpr std::chrono::milliseconds kLongestAddressRetry{5000};

	std::unique_ptr<DesiredStateSource> source_;
	NftablesMonitor *monitor_;
	AgentStatus status_;
	Reconciler reconciler_;
	SystemdNotifier notifier_;
	UniqueFd signalFd_;
	UniqueFd timerFd_;

	Clock::time_point nextResync_;
	Duration resyncEvery_{0};
	std::optional<Clock::time_point> nextWatchdog_;
	bool readySent_ = false;
	std::bitset<NSIG> ignoredSignalsSeen_;
	std::string lastStatusLine_;
	Clock::time_point nextConntrackRead_;
	Clock::time_point nextCountersRead_;
	std::string lastCountersError_; // logged once per distinct message
	TableBackend &backend_;
	std::string lastConntrackError_; // logged once per distinct message

	// What other tables undo, checked on a thread of its own against the last desired state.
	ConflictCheck conflictCheck_;
	// How close each destination is to running out of SNAT ports, read on a thread of its
	// own with the last desired state's ranges.
	SnatUsageCheck snatUsageCheck_;

	// This node's addresses (for outputAddress subnets): their change notifications (none:
	// read at each resync only) and the view they keep current. Which of them matter, and
	// whether any does, the source says.
	std::optional<AddressMonitor> addressMonitor_;
	NodeAddressView addressView_;
	std::optional<Clock::time_point> nextAddressRead_;
	Clock::time_point lastAddressRead_{};
	std::chrono::milliseconds addressRetry_ = kFirstAddressRetry;
	std::string lastAddressError_;
};

} // namespace ipmasq
