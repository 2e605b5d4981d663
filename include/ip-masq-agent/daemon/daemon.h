// SPDX-License-Identifier: Apache-2.0
// The daemon's loop: turns descriptors into events for the DesiredStateSource and the
// Reconciler. It sees desired states only, never config types.
#pragma once

#include <array>
#include <bitset>
#include <csignal>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <sys/signalfd.h>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/config/config_look.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/daemon/conflict_check.h"
#include "ip-masq-agent/daemon/snat_usage_check.h"
#include "ip-masq-agent/node/address_monitor.h"
#include "ip-masq-agent/node/node_address_view.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/daemon/reconciler.h"
#include "ip-masq-agent/daemon/systemd_notify.h"
#include "ip-masq-agent/nft/table_backend.h"
#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq {

class DesiredStateSource;
class NftablesMonitor;

// One thread, one poll() over five descriptors: the signalfd, the desired state source's
// config watch (inotify), the nftables monitor, the node's address monitor and one timerfd
// for every deadline (debounce, absent grace, paced restores, and the loop's own table of
// them: resync, reads, the addresses handed to the checks, systemd's watchdog; and the
// heartbeat). Each turn waits and collects what happened (waitForEvents), then decides
// and acts (act). The decisions belong to the DesiredStateSource (what the config and the
// node's addresses make), the Reconciler (what the kernel must hold), the ConflictCheck
// and the SnatUsageCheck (on threads of their own); the loop says what happened and when.
class Daemon
{
public:
	// `source` gives the desired states, and the options they are built with (the table's
	// name, whether it holds connection counters), which the reconciler adopts by.
	// `monitor` may be null (then drift is found at the next resync only); closed, it is
	// opened here. Either monitor (nf_tables', the addresses') that cannot be opened, or
	// fails later, is opened again on the loop's timer (kFirstMonitorReopen, doubling up
	// to kLongestMonitorReopen), and what changed meanwhile is caught up by a full read:
	// a check of the table, every address read.
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

	// How long the pod network's sources are left to speak once one has something to say
	// (a route notification, a file's event, a hold-down that ends): what comes meanwhile
	// (a burst of routes from a BGP peer or `ip -batch`, a file rewritten, the hold-downs of
	// ranges withdrawn together) is read then, all at once, and goes in as one change.
	static constexpr std::chrono::milliseconds kPodNetworkCoalesce{20};

private:
	using Clock = std::chrono::steady_clock;

	// The loop's own deadlines; the timerfd is armed for the earliest of them, the config
	// source's and the reconciler's (nextWake). None: not pending.
	enum Timer : size_t {
		resync,          // the safety net: config and kernel looked at (resyncInterval)
		conntrackRead,   // conntrack's statistics (kConntrackReadPeriod)
		countersRead,    // the table's connection counters (kCountersReadPeriod)
		addressRead,     // every address read again: lost notifications, a failed read
		addressHandOver, // the followed addresses to the checks (kAddressHandOverSpacing)
		tableMonitorReopen,   // nf_tables' change monitor opened again after a failure
		addressMonitorReopen, // the address monitor opened again after a failure
		watchdog,        // systemd's WATCHDOG=1
		podNetworkLook,  // the pod network read and taken in (kPodNetworkCoalesce)
		kTimers,
	};
	// What one turn of the loop found on its descriptors, not acted on yet.
	struct Events {
		Clock::time_point now;
		bool reload = false; // SIGHUP
		bool tableChanged = false; // the agent's table changed, or notifications were lost
		bool addressesChanged = false; // an address inside an outputAddress subnet changed
		bool podNetworkReadable = false; // the pod network's sources have something to say
	};

	Daemon(std::unique_ptr<DesiredStateSource> source, TableBackend &backend,
	       NftablesMonitor *monitor, SystemdNotifier notifier, UniqueFd signalFd,
	       UniqueFd timerFd, std::optional<AddressMonitor> addressMonitor);

	// The first turn: the config, the first sync, the checks started, the timers armed.
	void start();
	// Waits for a descriptor or the next deadline and collects what came into `events`;
	// an exit status when a signal ends the daemon or poll() fails.
	std::optional<int> waitForEvents(Events &events);
	// Decides what the events and the deadlines due call for, and does it.
	void act(Events &events);
	// Starts the checks' threads that do not run yet (after the first sync, then at each
	// resync while the kernel refuses one): a refusal is logged once per distinct message
	// and reported (/readyz?verbose, ip_masq_agent_check_running); the agent goes on.
	void startChecks();
	// The reads and notices whose deadline has come (conntrack, counters, watchdog, the
	// addresses handed to the checks).
	void runDueTimers(Clock::time_point now);
	bool due(Timer timer, Clock::time_point now) const
	{
		return timers_[timer] && now >= *timers_[timer];
	}

	// Look at the config (and read it if `why` or the source says so), then hand what
	// it yields to the reconciler. True if there was new content (or a read error).
	bool takeConfig(ConfigLook why, Clock::time_point now);
	// This node's addresses for a config just loaded, read first when they are not known
	// to be current (the first config, lost notifications, no monitor to follow them).
	NodeAddresses addressesForConfig(Clock::time_point now, bool needed);
	// A good config was taken in: how the addresses are known, for /readyz.
	void noteConfigTaken();
	// A new desired state to the reconciler, and to the checks that compare with it.
	void handOver(DesiredState desired);
	// The reconciler told why it looks, then what it did reported on.
	void sync(SyncTrigger trigger);
	// The nftables monitor's notifications: true when the agent's table changed (or some
	// were lost); another table's nudge the conflict check. A monitor that fails is closed
	// and opened again on its timer (monitorDown).
	bool drainTableMonitor(Clock::time_point now);
	// How a monitor that failed comes back: the next delay, and the last failure (logged
	// once per distinct message).
	struct MonitorRecovery {
		std::chrono::milliseconds delay;
		std::string lastError;
	};
	// A monitor is down (`error` says why): schedules its reopen on `timer`.
	void monitorDown(Timer timer, MonitorRecovery &recovery, const std::string &error,
			 const char *consequence, Clock::time_point now);
	// The monitors' reopens, when due. nf_tables': true when it is back (its catch-up: a
	// sync that checks the table). The addresses': every address read once it is back.
	bool reopenTableMonitor(Clock::time_point now);
	void reopenAddressMonitor(Clock::time_point now);
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
	// The pod network's new desired state (from its notifications or its timer) to the
	// reconciler, kPodNetworkCoalesce after it had something; true when there was one.
	bool takePodNetwork(const Events &events, Clock::time_point now);
	// Reads every address into the view; true when it did. A failure keeps the view as it
	// was; when the view is not current and `required`, it is tried again on the timer
	// (back-off) and logged once per distinct message.
	bool readAddresses(Clock::time_point now, bool required);
	// Applies the monitor's notifications to the view; true when one was about an address
	// inside an outputAddress subnet. Lost notifications: a new subscription, and a read.
	bool followAddresses(Clock::time_point now);
	// A read of every address: coalesced, spaced.
	void scheduleAddressRead(Clock::time_point now);
	// How the addresses are known, for /readyz and /metrics.
	void reportAddresses();
	// What the pod network found (or nothing without the section), for /readyz and /metrics.
	void reportPodNetwork(Clock::time_point now);
	// The view's snapshot to both checks (one copy, shared): they never read the addresses
	// themselves.
	void handAddressesToChecks(Clock::time_point now);
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
	// The checks get the followed addresses at most this often: under a pod churn the
	// view changes with every notification, and the checks' passes are seconds apart.
	static constexpr std::chrono::seconds kAddressHandOverSpacing{1};

public:
	// A monitor that failed is opened again after this, the delay doubling up to the
	// longest while it keeps failing (a netlink socket the kernel refuses now, out of
	// memory or descriptors, is a passing state).
	static constexpr std::chrono::milliseconds kFirstMonitorReopen{100};
	static constexpr std::chrono::milliseconds kLongestMonitorReopen{5000};

private:

	std::unique_ptr<DesiredStateSource> source_;
	NftablesMonitor *monitor_; // null: none; closed while it is being reopened
	MonitorRecovery tableMonitorRecovery_{kFirstMonitorReopen, {}};
	MonitorRecovery addressMonitorRecovery_{kFirstMonitorReopen, {}};
	AgentStatus status_;
	Reconciler reconciler_;
	SystemdNotifier notifier_;
	UniqueFd signalFd_;
	UniqueFd timerFd_;

	std::array<std::optional<Clock::time_point>, kTimers> timers_{};
	Duration resyncEvery_{0};
	bool readySent_ = false;
	std::bitset<NSIG> ignoredSignalsSeen_;
	std::string lastStatusLine_;
	std::string lastCountersError_; // logged once per distinct message
	TableBackend &backend_;
	std::string lastConntrackError_; // logged once per distinct message

	// What other tables undo, checked on a thread of its own against the last desired state.
	ConflictCheck conflictCheck_;
	// How close each destination is to running out of SNAT ports, read on a thread of its
	// own with the last desired state's ranges.
	SnatUsageCheck snatUsageCheck_;
	// Why each check's thread was last refused (logged once each): conflicts, SNAT usage.
	std::array<std::string, 2> checkRefusals_;

	// This node's addresses: their change notifications (none: read at each resync only)
	// and the view they keep current, for an outputAddress subnet and for both checks.
	// Which of them can change the desired state, and whether any does, the source says.
	std::optional<AddressMonitor> addressMonitor_;
	NodeAddressView addressView_;
	Clock::time_point lastAddressRead_{};
	std::chrono::milliseconds addressRetry_ = kFirstAddressRetry;
	std::string lastAddressError_;
	bool addressesChangedSinceHandOver_ = false;
	Clock::time_point lastAddressHandOver_{};
};

} // namespace ipmasq
