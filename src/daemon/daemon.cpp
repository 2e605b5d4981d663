// SPDX-License-Identifier: Apache-2.0
// The daemon's loop: signals, config watch, nftables monitor and one timer, turned into
// events for the DesiredStateSource and the Reconciler.
#include "ip-masq-agent/daemon/daemon.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <malloc.h>
#include <cstring>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>

#include <fmt/format.h>

#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/daemon/desired_state_source.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/base/overloaded.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/conntrack/conntrack_stats.h"
#include "ip-masq-agent/netlink/monitor.h"

namespace ipmasq {

namespace {

// Parsing a config, encoding its batch and reading the table back for verification
// allocate many times what the model keeps (~7 MiB at 10,000 CIDRs); freed, glibc keeps
// most of it in its arenas. malloc_trim() returns it to the kernel: with little free it
// takes microseconds, so it runs after every sync, the verifying resyncs included. It
// locks every arena in turn: a check's (process_guard.h) for one of its allocations at
// most; the checks themselves never call it.
void giveMemoryBack()
{
	(void)malloc_trim(0); // 1: some memory was released; 0: there was none to release
}

// SIGIO: a writer opening the config during the read lease (ConfigSource); ignored.
constexpr std::array kLoopSignals{SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGIO};
// Signals whose default action would end the process although nothing is wrong with it
// (a stray kill, a CPU-time or file-size limit's warning): read from the signalfd too,
// logged and ignored. Real-time signals join them in loopSignalMask().
constexpr std::array kIgnoredSignals{SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF,
				     SIGPWR,  SIGSTKFLT, SIGXCPU, SIGXFSZ};

sigset_t loopSignalMask()
{
	sigset_t mask;
	sigemptyset(&mask);
	for (int sig : kLoopSignals)
		sigaddset(&mask, sig);
	for (int sig : kIgnoredSignals)
		sigaddset(&mask, sig);
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
		sigaddset(&mask, sig);
	return mask;
}

bool endsTheLoop(int sig)
{
	return sig == SIGTERM || sig == SIGINT || sig == SIGQUIT;
}

// "SIGUSR1", or "SIGRTMIN+3" (sigabbrev_np() has no names for real-time signals).
std::string signalName(int sig)
{
	if (sig >= SIGRTMIN && sig <= SIGRTMAX)
		return fmt::format("SIGRTMIN+{}", sig - SIGRTMIN);
	const char *name = sigabbrev_np(sig);
	return name ? fmt::format("SIG{}", name) : fmt::format("signal {}", sig);
}

// steady_clock is CLOCK_MONOTONIC, which the timerfd counts in too.
timespec toTimespec(std::chrono::steady_clock::time_point at)
{
	const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch());
	return timespec{static_cast<time_t>(ns.count() / 1000000000),
			static_cast<long>(ns.count() % 1000000000)};
}

// The daemon's reconciler adopts a table found in the kernel that the source's options
// would build, when the config is bad from the start.
Reconciler::Settings reconcilerSettings(const DesiredStateSource &source)
{
	return Reconciler::Settings{source.rulesetOptions(), true, source.path()};
}

} // namespace

Daemon::Daemon(std::unique_ptr<DesiredStateSource> source, TableBackend &backend,
	       NftablesMonitor *monitor, SystemdNotifier notifier, UniqueFd signalFd,
	       UniqueFd timerFd, std::optional<AddressMonitor> addressMonitor)
	: source_(std::move(source)), monitor_(monitor),
	  reconciler_(backend, reconcilerSettings(*source_), status_),
	  notifier_(std::move(notifier)), signalFd_(std::move(signalFd)), timerFd_(std::move(timerFd)),
	  backend_(backend), conflictCheck_(status_), snatUsageCheck_(status_), addressMonitor_(std::move(addressMonitor))
{
}

Daemon::~Daemon() = default;

Result<std::unique_ptr<Daemon>> Daemon::create(std::unique_ptr<DesiredStateSource> source,
					       TableBackend &backend, NftablesMonitor *monitor,
					       SystemdNotifier notifier)
{
	// Block the signals first, so that one arriving during start-up is handled by the
	// loop (a clean exit) instead of killing the process half-way.
	const sigset_t mask = loopSignalMask();
	sigset_t previous;
	if (sigprocmask(SIG_BLOCK, &mask, &previous) != 0) {
		const int err = errno; // before the message allocates
		return fail(fmt::format("cannot block signals for the event loop: {}",
					std::strerror(err)), err);
	}
	const auto undo = [&previous](const char *what) {
		const int err = errno;
		sigprocmask(SIG_SETMASK, &previous, nullptr);
		return fail(fmt::format("cannot create the event loop's {}: {}", what,
					std::strerror(err)), err);
	};
	UniqueFd signalFd(signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
	if (!signalFd.isValid())
		return undo("signalfd");
	UniqueFd timerFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	if (!timerFd.isValid())
		return undo("timerfd");
	// Subscribed before the first read of the addresses (in run()), so that no change is
	// missed. Without it, an outputAddress subnet follows the node at each resync only,
	// until the loop opens it (start()).
	std::optional<AddressMonitor> addressMonitor;
	if (auto opened = AddressMonitor::open())
		addressMonitor.emplace(std::move(*opened));
	else
		log::warning("{}; the loop tries again in a moment", opened.error().message);
	// Before the first sync, for the same reason: a change right after it is seen.
	if (monitor && !monitor->isOpen())
		if (auto opened = monitor->reopen(); !opened)
			log::warning("{}; the loop tries again in a moment", opened.error().message);
	return std::unique_ptr<Daemon>(new Daemon(std::move(source), backend, monitor,
						  std::move(notifier), std::move(signalFd),
						  std::move(timerFd), std::move(addressMonitor)));
}

bool Daemon::takeConfig(ConfigLook why, Clock::time_point now)
{
	auto found = source_->look(why, now, [this, now](bool needed) {
		return addressesForConfig(now, needed);
	});
	if (!found)
		return false; // nothing new
	return std::visit(
		Overloaded{
			[this](DesiredStateSource::AwaitingNodeAddresses) {
				// Whatever is in force stays until the first read (retried on
				// the loop's timer).
				noteConfigTaken();
				return false;
			},
			[this](Result<DesiredState> &desired) {
				if (!desired) {
					// Logged and reported by the reconciler, which keeps the last
					// good ruleset (and the source the last good config); the
					// loop goes on.
					reconciler_.setConfigError(desired.error());
					return true;
				}
				noteConfigTaken();
				handOver(std::move(*desired));
				return true;
			},
		},
		*found);
}

NodeAddresses Daemon::addressesForConfig(Clock::time_point now, bool needed)
{
	if (addressView_.state() != NodeAddressView::State::current || !addressMonitor_)
		(void)readAddresses(now, needed);
	return addressView_.addresses();
}

void Daemon::noteConfigTaken()
{
	reportAddresses();
	reportPodNetwork(Clock::now());
}

void Daemon::handOver(DesiredState desired)
{
	status_.configKeysUnknown(desired.unknownKeys);
	conflictCheck_.setDesired(desired.ruleset, desired.samples);
	snatUsageCheck_.setDesired(desired.ruleset);
	reconciler_.setDesired(std::move(desired));
}

bool Daemon::readAddresses(Clock::time_point now, bool required)
{
	lastAddressRead_ = now;
	auto read = readNodeAddressesUnnamed();
	addressesChangedSinceHandOver_ = addressesChangedSinceHandOver_ || read;
	if (read) {
		addressView_.replace(*read);
		timers_[addressRead].reset();
		addressRetry_ = kFirstAddressRetry;
		if (!lastAddressError_.empty())
			log::info("this node's addresses are readable again ({} addresses)", read->size());
		lastAddressError_.clear();
		reportAddresses();
		return true;
	}
	// A read that only double-checks a view kept current by notifications: the view
	// stays right, the next resync reads again.
	if (!required || addressView_.state() == NodeAddressView::State::current) {
		log::debug("{}; the addresses followed so far stay in use", read.error().message);
		timers_[addressRead].reset(); // the next resync reads them again
		return false;
	}
	const std::chrono::milliseconds retry = addressRetry_;
	timers_[addressRead] = now + retry;
	addressRetry_ = std::min(2 * addressRetry_, kLongestAddressRetry);
	// Said once per distinct message: under churn every failure reads the same.
	if (read.error().message != lastAddressError_) {
		if (addressView_.state() == NodeAddressView::State::unknown)
			log::warning("{}; the config's outputAddress subnet waits for them (nothing is "
				     "made from addresses that could not be read), trying again in {} ms",
				     read.error().message, retry.count());
		else
			log::warning("{}; the outputAddress subnets keep the addresses last known until "
				     "a read succeeds (the table in force stays as it is), trying again "
				     "in {} ms", read.error().message, retry.count());
	}
	lastAddressError_ = read.error().message;
	reportAddresses();
	return false;
}

bool Daemon::followAddresses(Clock::time_point now)
{
	auto drained = addressMonitor_->drain();
	if (!drained) {
		// The socket is of no more use, and what was queued on it is lost: the view is
		// stale until a new subscription is in place and every address is read again
		// (reopenAddressMonitor); a read before that would be stale at once.
		addressMonitor_.reset();
		addressView_.lose();
		addressesChangedSinceHandOver_ = true;
		reportAddresses();
		monitorDown(addressMonitorReopen, addressMonitorRecovery_, drained.error().message,
			    "following this node's addresses", now);
		return false;
	}
	bool watched = false;
	for (const AddressChange &change : drained->changes)
		watched = addressView_.apply(change, source_->watchedSubnets()) || watched;
	addressesChangedSinceHandOver_ = addressesChangedSinceHandOver_ || !drained->changes.empty() ||
					 drained->overrun;
	if (drained->overrun) {
		// Some changes are missing: a fresh subscription (whose queue holds nothing
		// older), then one read of them all. The old queue goes with the old socket.
		log::debug("the kernel dropped address notifications ({} times since the start); "
			   "subscribing again and reading the addresses once more",
			   addressMonitor_->overruns());
		addressView_.lose();
		addressMonitor_.reset();
		if (auto fresh = AddressMonitor::open()) {
			addressMonitor_.emplace(std::move(*fresh));
			scheduleAddressRead(now);
		} else {
			reportAddresses();
			monitorDown(addressMonitorReopen, addressMonitorRecovery_, fresh.error().message,
				    "following this node's addresses", now);
			return watched;
		}
	}
	if (addressView_.state() != NodeAddressView::State::current)
		scheduleAddressRead(now);
	return watched;
}

void Daemon::scheduleAddressRead(Clock::time_point now)
{
	// Coalesced and spaced: however often notifications are lost, one read of every
	// address per kAddressReadSpacing at most.
	if (timers_[addressRead])
		return;
	timers_[addressRead] = std::max(now, lastAddressRead_ + kAddressReadSpacing);
	reportAddresses();
}

namespace {

// What the pod network's model holds, as /readyz?verbose and /metrics show it.
AgentStatus::PodNetworkState podNetworkState(const PodNetwork &podNetwork, PodNetwork::Clock::time_point now)
{
	const DiscoveredRanges &model = podNetwork.model();
	const DiscoveryStats stats = model.stats();
	AgentStatus::PodNetworkState state{{}, {}, {}, stats.inForce, stats.heldDown, stats.changes,
					   stats.outsideWithin, stats.overBound, {}, {}};
	for (const DiscoverySource source : kAllDiscoverySources) {
		state.perSource.emplace_back(discoverySourceName(source), stats.prefixesPerSource[size_t(source)]);
		state.inputsPerSource.emplace_back(discoverySourceName(source), stats.inputsPerSource[size_t(source)]);
		bool stale = false;
		for (const DiscoveryInput &input : model.inputs())
			if (input.source == source && input.state == DiscoveryInput::State::stale) {
				stale = true;
				state.problems.push_back(fmt::format("{} could not be read ({}): {}", input.name,
								     input.reason, model.whatStays(input)));
			}
		state.staleSources.emplace_back(discoverySourceName(source), stale);
	}
	if (stats.overBound)
		state.problems.push_back(fmt::format("more than {} ranges found: the last set within the bound stays",
						     kMaxDiscoveredPrefixes));
	for (const DiscoveredRange &range : model.ranges()) {
		if (state.ranges.size() == AgentStatus::kListedRanges)
			break;
		std::string origins;
		for (const DiscoveredRange::Origin &origin : range.origins)
			origins += (origins.empty() ? "" : "; ") + origin.text;
		if (range.leavesAt)
			origins += fmt::format("{}withdrawn, leaves in {} s", origins.empty() ? "" : "; ",
					       std::chrono::ceil<std::chrono::seconds>(*range.leavesAt - now).count());
		state.ranges.push_back(fmt::format("{}: {}", range.prefix.toString(), origins));
	}
	return state;
}

} // namespace

void Daemon::reportPodNetwork(Clock::time_point now)
{
	const PodNetwork *podNetwork = source_->podNetwork();
	status_.podNetworkFound(podNetwork ? std::optional(podNetworkState(*podNetwork, now)) : std::nullopt);
}

void Daemon::reportAddresses()
{
	AgentStatus::AddressFollowing following;
	const bool followed = source_->dependsOnNodeAddresses();
	if (followed && addressView_.state() == NodeAddressView::State::unknown) {
		following.state = AgentStatus::AddressFollowing::State::waiting;
		following.reason = lastAddressError_.empty() ? "not read yet" : lastAddressError_;
	} else if (followed && addressView_.state() == NodeAddressView::State::stale) {
		following.state = AgentStatus::AddressFollowing::State::stale;
		following.reason = lastAddressError_.empty()
			? "change notifications were lost; reading them again"
			: lastAddressError_;
	}
	status_.addressesFollowed(following);
}

bool Daemon::takeNodeAddresses()
{
	auto desired = source_->nodeAddressesChanged(addressView_.addresses());
	if (!desired)
		return false;
	reportAddresses();
	handOver(std::move(*desired));
	return true;
}

std::optional<int> Daemon::readSignals(bool &reload)
{
	signalfd_siginfo info{};
	while (read(signalFd_.get(), &info, sizeof(info)) == sizeof(info)) {
		const int sig = static_cast<int>(info.ssi_signo);
		if (sig == SIGIO)
			continue; // a lease break: the config is read again once its writer is done
		if (sig == SIGHUP) {
			log::info("SIGHUP: reloading");
			reload = true;
			continue;
		}
		if (!endsTheLoop(sig)) {
			noteIgnoredSignal(info);
			continue;
		}
		// "Stays in place" only of a table the agent applied or adopted: after a bad
		// config with no table to adopt, there is none.
		if (status_.snapshot().rulesetInForce)
			log::info("{}: exiting; table inet {} stays in place", strsignal(sig),
				  source_->rulesetOptions().table);
		else
			log::info("{}: exiting; no table inet {} was applied or adopted, and the kernel "
				  "is left as it is", strsignal(sig), source_->rulesetOptions().table);
		notifier_.notify("STOPPING=1");
		return EXIT_SUCCESS;
	}
	return std::nullopt;
}

void Daemon::noteIgnoredSignal(const signalfd_siginfo &info)
{
	const auto sig = static_cast<size_t>(info.ssi_signo);
	// The first of each kind is worth a line; a sender that repeats it is not worth a
	// line each time.
	const bool first = sig < ignoredSignalsSeen_.size() && !ignoredSignalsSeen_[sig];
	if (sig < ignoredSignalsSeen_.size())
		ignoredSignalsSeen_[sig] = true;
	const std::string text = fmt::format(
		"{} (from pid {}) ignored: the agent goes on; it stops on SIGTERM, SIGINT or SIGQUIT "
		"and reloads on SIGHUP", signalName(static_cast<int>(sig)), info.ssi_pid);
	if (first)
		log::warning("{}", text);
	else
		log::debug("{}", text);
}

Daemon::Clock::time_point Daemon::nextWake(Clock::time_point now) const
{
	// The heartbeat (/livez) must stay fresh while nothing happens.
	Clock::time_point wake = now + AgentStatus::kHeartbeatPeriod;
	for (const auto &deadline : timers_)
		if (deadline)
			wake = std::min(wake, *deadline);
	for (const auto &deadline : {source_->nextWake(), reconciler_.nextWake()})
		if (deadline)
			wake = std::min(wake, *deadline);
	// While a look at the pod network is pending, its own deadlines wait for it.
	if (const PodNetwork *podNetwork = source_->podNetwork(); podNetwork && !timers_[podNetworkLook])
		wake = std::min(wake, podNetwork->nextWake());
	return wake;
}

void Daemon::armWakeTimer(Clock::time_point at)
{
	// A deadline already past fires at once: the timerfd needs a non-zero time.
	const timespec when = toTimespec(std::max(at, Clock::time_point(std::chrono::nanoseconds(1))));
	const itimerspec spec{{0, 0}, when};
	if (timerfd_settime(timerFd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) != 0)
		log::error("cannot arm the loop's timer: {}", std::strerror(errno));
}

void Daemon::reportToSystemd()
{
	if (!notifier_.enabled())
		return;
	const std::string line = status_.summary();
	std::string message;
	if (!readySent_ && status_.health().ok) {
		message = "READY=1\n";
		readySent_ = true;
	}
	if (line != lastStatusLine_)
		message += "STATUS=" + line;
	lastStatusLine_ = line;
	if (!message.empty())
		notifier_.notify(message);
}

void Daemon::readConnectionCounters()
{
	// Without counters in the table (--connection-counters=false) there is nothing to
	// read, ever: the timer never fires.
	if (!source_->rulesetOptions().connectionCounters) {
		timers_[countersRead].reset();
		return;
	}
	timers_[countersRead] = Clock::now() + kCountersReadPeriod;
	auto values = backend_.readCounters(source_->rulesetOptions().table);
	if (values) {
		lastCountersError_.clear();
		// None: the table is missing for a moment (it heals); the last values stay.
		if (!values->empty())
			status_.countersRead(*values);
		return;
	}
	// The last values stay exported: counts never go down, and the table heals.
	if (values.error().message != lastCountersError_)
		log::warning("{}; ip_masq_agent_connections_total keeps its last values until a "
			     "read succeeds", values.error().message);
	lastCountersError_ = values.error().message;
}

void Daemon::readConntrack()
{
	timers_[conntrackRead] = Clock::now() + kConntrackReadPeriod;
	auto stats = netlink::readConntrackStats();
	if (stats) {
		if (!lastConntrackError_.empty())
			log::info("conntrack statistics are readable again");
		lastConntrackError_.clear();
		status_.conntrackRead(*stats);
		return;
	}
	// Counted every time, said once: the same failure every 10 s is no news.
	status_.conntrackReadFailed();
	if (stats.error().message != lastConntrackError_)
		log::warning("{}; the conntrack metrics are left out until a read succeeds "
			     "(readiness does not depend on them)", stats.error().message);
	lastConntrackError_ = stats.error().message;
}

int Daemon::runGuarded()
{
	constexpr std::chrono::milliseconds kFirstPause{100};
	constexpr std::chrono::milliseconds kLongestPause{5000};
	// A failure after this long without one starts the back-off again.
	constexpr std::chrono::seconds kCalm{60};
	std::chrono::milliseconds pause = kFirstPause;
	for (;;) {
		const auto started = Clock::now();
		try {
			return run();
		} catch (const std::bad_alloc &) {
			if (Clock::now() - started > kCalm)
				pause = kFirstPause;
			// The log line allocates too: without memory for it, it is skipped.
			try {
				log::error("out of memory; table inet {} stays as it is in the kernel, "
					   "and the agent reads its config and checks the table again "
					   "in {} ms (is the memory limit too low for this config?)",
					   source_->rulesetOptions().table, pause.count());
			} catch (const std::bad_alloc &) {
			}
		}
		// Whatever was being taken in when memory ran out is read again.
		source_->redeliver();
		if (auto exit = pauseForSignals(pause))
			return *exit;
		pause = std::min(2 * pause, kLongestPause);
	}
}

std::optional<int> Daemon::pauseForSignals(std::chrono::milliseconds pause)
{
	pollfd signals{signalFd_.get(), POLLIN, 0};
	status_.loopTurned();
	if (poll(&signals, 1, static_cast<int>(pause.count())) <= 0)
		return std::nullopt;
	bool reload = false; // the config is read again in any case
	return readSignals(reload);
}

int Daemon::run()
{
	start();
	for (;;) {
		Events events;
		if (auto exit = waitForEvents(events))
			return *exit;
		act(events);
	}
}

void Daemon::start()
{
	status_.loopTurned();
	takeConfig(ConfigLook::reload, Clock::now());
	// A failed sync is logged, counted and reported (/readyz) by the reconciler, and
	// retried by the loop: nothing more to do with it here.
	(void)reconciler_.reconcile(SyncTrigger::startup);
	giveMemoryBack();
	readConntrack(); // after the first sync, which must not wait for it
	handAddressesToChecks(Clock::now());
	startChecks();
	readConnectionCounters();
	resyncEvery_ = source_->resyncInterval();
	timers_[resync] = Clock::now() + resyncEvery_;
	log::debug("resync every {}", formatGoDuration(resyncEvery_));
	// Monitors that could not be opened in create() (said there) come back on their timers.
	if (monitor_ && !monitor_->isOpen())
		timers_[tableMonitorReopen] = Clock::now() + tableMonitorRecovery_.delay;
	if (!addressMonitor_)
		timers_[addressMonitorReopen] = Clock::now() + addressMonitorRecovery_.delay;
	if (const auto period = notifier_.watchdogPeriod()) {
		notifier_.notify("WATCHDOG=1");
		timers_[watchdog] = Clock::now() + *period;
	}
	reportToSystemd();
}

std::optional<int> Daemon::waitForEvents(Events &events)
{
	enum { kSignal, kConfig, kMonitor, kAddresses, kTimer, kPodNetwork, kCount = kPodNetwork + PodNetwork::Fds().size() };
	std::array<pollfd, kCount> fds{};
	// While a look at the pod network is pending, what its sources say waits for it (in
	// their sockets' queues): it is read then, all at once.
	const PodNetwork::Fds podNetwork = source_->podNetworkFds();
	for (size_t i = 0; i < podNetwork.size(); i++)
		fds[kPodNetwork + i] = {timers_[podNetworkLook] ? -1 : podNetwork[i], POLLIN, 0};
	fds[kSignal] = {signalFd_.get(), POLLIN, 0};
	fds[kConfig] = {source_->fd(), POLLIN, 0};
	fds[kMonitor] = {monitor_ ? monitor_->fd() : -1, POLLIN, 0};
	fds[kAddresses] = {addressMonitor_ ? addressMonitor_->fd() : -1, POLLIN, 0};
	fds[kTimer] = {timerFd_.get(), POLLIN, 0};
	armWakeTimer(nextWake(Clock::now()));
	int ready;
	while ((ready = poll(fds.data(), fds.size(), -1)) < 0 && errno == EINTR)
		;
	if (ready < 0) {
		const int err = errno;
		log::error("poll: {}", std::strerror(err));
		return EXIT_FAILURE;
	}
	events.now = Clock::now();
	status_.loopTurned();
	if (fds[kSignal].revents & POLLIN)
		if (auto exit = readSignals(events.reload))
			return exit;
	if (fds[kConfig].revents & POLLIN)
		source_->onWatchEvents(events.now);
	// POLLERR on a netlink socket is an overrun (ENOBUFS), which a drain reads and reports.
	constexpr short kReadable = POLLIN | POLLERR | POLLHUP;
	if (fds[kMonitor].revents & kReadable)
		events.tableChanged = drainTableMonitor(events.now);
	// Each notification applied as it comes: only a change inside an outputAddress subnet
	// can change the desired state.
	if (fds[kAddresses].revents & kReadable)
		events.addressesChanged = followAddresses(events.now);
	if ((fds[kPodNetwork].revents | fds[kPodNetwork + 1].revents) & kReadable)
		events.podNetworkReadable = true;
	if (fds[kTimer].revents & POLLIN) {
		uint64_t expirations = 0;
		(void)!read(timerFd_.get(), &expirations, sizeof(expirations));
	}
	return std::nullopt;
}

bool Daemon::drainTableMonitor(Clock::time_point now)
{
	auto changed = monitor_->drain();
	// Other tables matter to the conflict check only (and their churn costs it at most one
	// pass per ConflictCheck::kPeriod).
	if (monitor_->takeOtherTablesChanged() || !changed)
		conflictCheck_.nudge();
	if (changed)
		return *changed;
	// Whatever drain() cannot read would make poll() return at once forever: the socket
	// goes, with what was queued on it, and a new one comes on the timer. This sync and
	// the one after the reopen check the table for what the lost notifications said.
	monitor_->close();
	monitorDown(tableMonitorReopen, tableMonitorRecovery_, changed.error().message,
		    "watching nf_tables for changes", now);
	return true;
}

void Daemon::monitorDown(Timer timer, MonitorRecovery &recovery, const std::string &error,
			 const char *consequence, Clock::time_point now)
{
	// Said once per distinct failure: a reopen that fails the same way every 5 s is no news.
	if (error != recovery.lastError)
		log::warning("{}; {} again in {} ms, then a full read catches up what changed "
			     "meanwhile", error, consequence, recovery.delay.count());
	else
		log::debug("{}; {} again in {} ms", error, consequence, recovery.delay.count());
	recovery.lastError = error;
	timers_[timer] = now + recovery.delay;
	recovery.delay = std::min(2 * recovery.delay, kLongestMonitorReopen);
}

bool Daemon::reopenTableMonitor(Clock::time_point now)
{
	timers_[tableMonitorReopen].reset();
	if (auto opened = monitor_->reopen(); !opened) {
		monitorDown(tableMonitorReopen, tableMonitorRecovery_, opened.error().message,
			    "watching nf_tables for changes", now);
		return false;
	}
	log::info("watching nf_tables for changes again; checking table inet {} for what "
		  "changed meanwhile", source_->rulesetOptions().table);
	tableMonitorRecovery_ = MonitorRecovery{kFirstMonitorReopen, {}};
	return true;
}

void Daemon::reopenAddressMonitor(Clock::time_point now)
{
	timers_[addressMonitorReopen].reset();
	auto opened = AddressMonitor::open();
	if (!opened) {
		monitorDown(addressMonitorReopen, addressMonitorRecovery_, opened.error().message,
			    "following this node's addresses", now);
		return;
	}
	addressMonitor_.emplace(std::move(*opened));
	log::info("following this node's addresses again; reading them all for what changed "
		  "meanwhile");
	addressMonitorRecovery_ = MonitorRecovery{kFirstMonitorReopen, {}};
	// Subscribed first, read second (address_monitor.h): nothing falls in between.
	addressView_.lose();
	scheduleAddressRead(now);
}

void Daemon::act(Events &events)
{
	const Clock::time_point now = events.now;
	const bool resyncDue = due(resync, now);
	if (resyncDue) {
		timers_[resync] = now + resyncEvery_;
		startChecks(); // those the kernel refused a thread before
	}
	// A monitor back after a failure catches up in this turn: nf_tables' by a sync that
	// checks the table, the addresses' by the read it schedules.
	if (due(tableMonitorReopen, now) && reopenTableMonitor(now))
		events.tableChanged = true;
	if (due(addressMonitorReopen, now))
		reopenAddressMonitor(now);
	// The addresses first: a config read in the same turn is then made with them. A resync
	// reads them all once more (the safety net); a read due after lost notifications or a
	// failure is retried on the timer.
	bool addressesChanged = events.addressesChanged;
	if (resyncDue || events.reload || due(addressRead, now))
		addressesChanged = readAddresses(now, source_->dependsOnNodeAddresses()) || addressesChanged;
	const bool subnetChanged = addressesChanged && takeNodeAddresses();
	const bool podNetworkChanged = takePodNetwork(events, now);
	const bool configChanged = takeConfig(
		events.reload ? ConfigLook::reload : resyncDue ? ConfigLook::resync : ConfigLook::ifDue, now);
	const auto retryAt = reconciler_.nextWake();
	// One sync at most, named by its most specific cause.
	const std::pair<bool, SyncTrigger> causes[] = {
		{events.reload, SyncTrigger::reload},
		{configChanged, SyncTrigger::configChange},
		{subnetChanged, SyncTrigger::addressChange},
		{podNetworkChanged, SyncTrigger::podNetworkChange},
		{events.tableChanged, SyncTrigger::nftablesChange},
		{resyncDue, SyncTrigger::resync},
		{retryAt && now >= *retryAt, SyncTrigger::retry},
	};
	for (const auto &[happened, trigger] : causes)
		if (happened) {
			sync(trigger);
			break;
		}
	if (source_->resyncInterval() != resyncEvery_) {
		resyncEvery_ = source_->resyncInterval();
		timers_[resync] = Clock::now() + resyncEvery_;
		log::debug("resync every {}", formatGoDuration(resyncEvery_));
	}
	runDueTimers(Clock::now());
}

void Daemon::startChecks()
{
	const auto startOne = [this](auto &check, std::string &lastRefusal, const char *label,
				     const char *what) {
		if (check.running())
			return;
		const Status started = check.start();
		if (started && !lastRefusal.empty())
			log::info("{} runs now: its thread started", what);
		if (!started && started.error().message != lastRefusal)
			log::warning("{}; the agent goes on without {}, and tries to start it again at "
				     "each resync", started.error().message, what);
		lastRefusal = started ? std::string() : started.error().message;
		status_.checkThread(AgentStatus::CheckThread{label, what, lastRefusal});
	};
	startOne(conflictCheck_, checkRefusals_[0], "nat_conflicts", "the NAT conflict check");
	startOne(snatUsageCheck_, checkRefusals_[1], "snat_usage", "the SNAT usage read");
}

bool Daemon::takePodNetwork(const Events &events, Clock::time_point now)
{
	const PodNetwork *podNetwork = source_->podNetwork();
	if (!podNetwork) {
		timers_[podNetworkLook].reset();
		return false;
	}
	// Something to read or a deadline of its own: looked at a little later, so that what
	// comes meanwhile is one change (kPodNetworkCoalesce).
	if (!timers_[podNetworkLook] && (events.podNetworkReadable || podNetwork->nextWake() <= now))
		timers_[podNetworkLook] = now + kPodNetworkCoalesce;
	if (!due(podNetworkLook, now))
		return false;
	timers_[podNetworkLook].reset();
	// Everything pending read, every hold-down ended by now taken, in one desired state;
	// then the timer's own work (a failed read tried again, the files' safety net), which
	// makes another only if it finds something new.
	auto desired = source_->podNetworkReadable(now);
	if (auto timer = source_->podNetworkTimer(now))
		desired = std::move(timer);
	reportPodNetwork(now);
	if (!desired)
		return false;
	handOver(std::move(*desired));
	return true;
}

void Daemon::sync(SyncTrigger trigger)
{
	(void)reconciler_.reconcile(trigger); // logged, counted and reported by the reconciler
	// A commit after which the monitor could not join its group again closed it (the
	// backend logged why): it comes back as after a read error.
	if (monitor_ && !monitor_->isOpen() && !timers_[tableMonitorReopen])
		monitorDown(tableMonitorReopen, tableMonitorRecovery_,
			    "nf_tables' change monitor lost its subscription after a commit",
			    "watching nf_tables for changes", Clock::now());
	giveMemoryBack();
	reportToSystemd();
	conflictCheck_.nudge();
}

void Daemon::runDueTimers(Clock::time_point now)
{
	if (due(conntrackRead, now))
		readConntrack();
	if (due(countersRead, now))
		readConnectionCounters();
	// Sent from the loop itself, only as it turns: if it hangs, systemd restarts us.
	if (due(watchdog, now)) {
		notifier_.notify("WATCHDOG=1");
		timers_[watchdog] = now + *notifier_.watchdogPeriod();
	}
	if (addressesChangedSinceHandOver_ && !timers_[addressHandOver])
		timers_[addressHandOver] = std::max(now, lastAddressHandOver_ + kAddressHandOverSpacing);
	if (due(addressHandOver, now))
		handAddressesToChecks(now);
}

void Daemon::handAddressesToChecks(Clock::time_point now)
{
	auto snapshot = std::make_shared<const NodeAddresses>(addressView_.addresses());
	conflictCheck_.setNodeAddresses(snapshot);
	snatUsageCheck_.setNodeAddresses(std::move(snapshot));
	addressesChangedSinceHandOver_ = false;
	lastAddressHandOver_ = now;
	timers_[addressHandOver].reset();
}

} // namespace ipmasq
