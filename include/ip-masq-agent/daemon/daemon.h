// SPDX-License-Identifier: Apache-2.0
// The daemon's loop: turns descriptors into events for the DesiredStateSource and the
// Reconciler. It sees desired states only, never config types.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <optional>

#include "ip-masq-agent/daemon/address_follower.h"
#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/config/config_look.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/daemon/check_threads.h"
#include "ip-masq-agent/daemon/loop_signals.h"
#include "ip-masq-agent/daemon/metrics_reader.h"
#include "ip-masq-agent/daemon/monitor_recovery.h"
#include "ip-masq-agent/daemon/reconciler.h"
#include "ip-masq-agent/daemon/status_reporter.h"
#include "ip-masq-agent/daemon/systemd_notify.h"
#include "ip-masq-agent/nft/table_backend.h"
#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq {

class DesiredStateSource;
class NftablesMonitor;

// One thread, one poll() over seven descriptors: the signalfd, the desired state source's
// config watch (inotify), the nftables monitor, the node's address monitor, one timerfd,
// and the pod network's two (its route socket and the inotify on its files' directories),
// which are -1 without nonMasqueradeDiscovery. The timerfd is armed for the earliest
// deadline of all (nextWake): the config source's, the reconciler's, the pod network's,
// the AddressFollower's, the StatusReporter's (systemd's watchdog), a failed monitor's
// reopen, the loop's own (Timer) and the heartbeat. Each turn waits and collects what
// happened (waitForEvents), then decides and acts (act). The decisions belong to the
// DesiredStateSource (what the config and the node's addresses make), the Reconciler (what
// the kernel must hold), the ConflictCheck and the SnatUsageCheck (on threads of their
// own); the loop says what happened and when.
class Daemon
{
public:
	// `source` gives the desired states, and the options they are built with (the table's
	// name, whether it holds connection counters), which the reconciler adopts by.
	// `monitor` may be null (then drift is found at the next resync only); closed, it is
	// opened here. Either monitor (nf_tables', the addresses') that cannot be opened, or
	// fails later, is opened again on the loop's timer (MonitorRecovery), and what changed
	// meanwhile is caught up by a full read: a check of the table, every address read.
	// Blocks the signals the loop reads (LoopSignals): from here on run() reads them.
	// Fails if the signalfd or timerfd cannot be made, with that call's errno.
	// `notifier` tells systemd READY=1 after the first good sync, STATUS= on changes,
	// and WATCHDOG=1 from the loop while it turns (StatusReporter).
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

	// The loop's own deadlines. None: not pending.
	enum Timer : size_t {
		resync,         // the safety net: config and kernel looked at (resyncInterval)
		podNetworkLook, // the pod network read and taken in (kPodNetworkCoalesce)
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
	       NftablesMonitor *monitor, SystemdNotifier notifier, LoopSignals signals,
	       UniqueFd timerFd);

	// The first turn: the config, the first sync, the checks started, the timers armed.
	void start();
	// Waits for a descriptor or the next deadline and collects what came into `events`;
	// an exit status when a signal ends the daemon or poll() fails.
	std::optional<int> waitForEvents(Events &events);
	// Decides what the events and the deadlines due call for, and does it.
	void act(Events &events);
	// The reads and notices whose deadline has come (the MetricsReader's, the watchdog,
	// the addresses handed to the checks).
	void runDueTimers(Clock::time_point now);
	bool due(Timer timer, Clock::time_point now) const
	{
		return timers_[timer] && now >= *timers_[timer];
	}

	// Look at the config (and read it if `why` or the source says so), then hand what
	// it yields to the reconciler. True if there was new content (or a read error).
	bool takeConfig(ConfigLook why, Clock::time_point now);
	// A good config was taken in: how the addresses are known, and the pod network.
	void noteConfigTaken();
	// A new desired state to the reconciler, and to the checks that compare with it.
	void handOver(DesiredState desired);
	// The reconciler told why it looks, then what it did reported on.
	void sync(SyncTrigger trigger);
	// The nftables monitor's notifications: true when the agent's table changed (or some
	// were lost); another table's nudge the conflict check. A monitor that fails is closed
	// and opened again on its timer (tableMonitorRecovery_).
	bool drainTableMonitor(Clock::time_point now);
	// nf_tables' monitor opened again: true when it is back (its catch-up: a sync that
	// checks the table).
	bool reopenTableMonitor(Clock::time_point now);
	// The pending signals; an exit status when the daemon must stop.
	std::optional<int> readSignals(bool &reload);
	// Wait `pause` for signals only (a SIGTERM still ends the daemon); an exit status
	// when one says so.
	std::optional<int> pauseForSignals(std::chrono::milliseconds pause);
	Clock::time_point nextWake(Clock::time_point now) const;
	void armWakeTimer(Clock::time_point at);
	// With the addresses as followed: true when they change what an outputAddress subnet
	// gives (or a config waited for them), and the reconciler got the new desired state.
	bool takeNodeAddresses();
	// The pod network's new desired state (from its notifications or its timer) to the
	// reconciler, kPodNetworkCoalesce after it had something; true when there was one.
	bool takePodNetwork(const Events &events, Clock::time_point now);

	std::unique_ptr<DesiredStateSource> source_;
	NftablesMonitor *monitor_; // null: none; closed while it is being reopened
	MonitorRecovery tableMonitorRecovery_{"watching nf_tables for changes"};
	AgentStatus status_;
	Reconciler reconciler_;
	MetricsReader metrics_;
	StatusReporter reporter_;
	LoopSignals signals_;
	UniqueFd timerFd_;
	// This node's addresses, for an outputAddress subnet and for both checks.
	AddressFollower addresses_;

	std::array<std::optional<Clock::time_point>, kTimers> timers_{};
	Duration resyncEvery_{0};

	// The ConflictCheck and the SnatUsageCheck, each on a thread of its own.
	CheckThreads checks_;
};

} // namespace ipmasq
