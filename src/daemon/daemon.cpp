// SPDX-License-Identifier: Apache-2.0
// The daemon's loop: signals, config watch, nftables monitor, the node's addresses and one
// timer, turned into events for the DesiredStateSource and the Reconciler.
#include "ip-masq-agent/daemon/daemon.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <malloc.h>
#include <cstring>
#include <poll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/daemon/desired_state_source.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/base/overloaded.h"
#include "ip-masq-agent/base/log.h"
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
	       NftablesMonitor *monitor, SystemdNotifier notifier, LoopSignals signals,
	       UniqueFd timerFd)
	: source_(std::move(source)), monitor_(monitor),
	  reconciler_(backend, reconcilerSettings(*source_), status_),
	  metrics_(backend, source_->rulesetOptions().table,
		   source_->rulesetOptions().connectionCounters, status_),
	  reporter_(status_, std::move(notifier)), signals_(std::move(signals)),
	  timerFd_(std::move(timerFd)), addresses_(*source_, status_, Clock::now()),
	  checks_(status_)
{
}

Daemon::~Daemon() = default;

Result<std::unique_ptr<Daemon>> Daemon::create(std::unique_ptr<DesiredStateSource> source,
					       TableBackend &backend, NftablesMonitor *monitor,
					       SystemdNotifier notifier)
{
	UniqueFd timerFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	if (!timerFd.isValid()) {
		const int err = errno; // before the message allocates
		return fail(fmt::format("cannot create the event loop's timerfd: {}", std::strerror(err)), err);
	}
	// Blocked before anything else starts, so that a signal arriving during start-up is
	// handled by the loop (a clean exit) instead of killing the process half-way.
	auto signals = LoopSignals::open();
	if (!signals)
		return fail(signals.error());
	// nf_tables' monitor subscribed before the first sync, so that a change right after it
	// is seen (as the AddressFollower subscribes before its first read).
	if (monitor && !monitor->isOpen())
		if (auto opened = monitor->reopen(); !opened)
			log::warning("{}; the loop tries again in a moment", opened.error().message);
	return std::unique_ptr<Daemon>(new Daemon(std::move(source), backend, monitor, std::move(notifier),
						  std::move(*signals), std::move(timerFd)));
}

bool Daemon::takeConfig(ConfigLook why, Clock::time_point now)
{
	auto found = source_->look(why, now, [this, now](bool needed) {
		return addresses_.forConfig(now, needed);
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

void Daemon::noteConfigTaken()
{
	addresses_.report();
	reporter_.podNetworkFound(source_->podNetwork(), Clock::now());
}

void Daemon::handOver(DesiredState desired)
{
	status_.configKeysUnknown(desired.unknownKeys);
	checks_.setDesired(desired);
	reconciler_.setDesired(std::move(desired));
}

bool Daemon::takeNodeAddresses()
{
	auto desired = source_->nodeAddressesChanged(addresses_.addresses());
	if (!desired)
		return false;
	addresses_.report();
	handOver(std::move(*desired));
	return true;
}

std::optional<int> Daemon::readSignals(bool &reload)
{
	const std::optional<int> ending = signals_.read(reload);
	if (!ending)
		return std::nullopt;
	// "Stays in place" only of a table the agent applied or adopted: after a bad config
	// with no table to adopt, there is none.
	if (status_.snapshot().rulesetInForce)
		log::info("{}: exiting; table inet {} stays in place", strsignal(*ending),
			  source_->rulesetOptions().table);
	else
		log::info("{}: exiting; no table inet {} was applied or adopted, and the kernel "
			  "is left as it is", strsignal(*ending), source_->rulesetOptions().table);
	reporter_.stopping();
	return EXIT_SUCCESS;
}

Daemon::Clock::time_point Daemon::nextWake(Clock::time_point now) const
{
	// The heartbeat (/livez) must stay fresh while nothing happens.
	Clock::time_point wake = now + AgentStatus::kHeartbeatPeriod;
	for (const auto &deadline : timers_)
		if (deadline)
			wake = std::min(wake, *deadline);
	for (const auto &deadline : {source_->nextWake(), reconciler_.nextWake(), addresses_.nextWake(),
				     tableMonitorRecovery_.reopenAt(), reporter_.nextWake(),
				     std::optional(metrics_.nextWake())})
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
	pollfd signals{signals_.fd(), POLLIN, 0};
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
	metrics_.readDue(Clock::now()); // after the first sync, which must not wait for them
	checks_.setNodeAddresses(addresses_.snapshot(Clock::now()));
	checks_.start();
	resyncEvery_ = source_->resyncInterval();
	timers_[resync] = Clock::now() + resyncEvery_;
	log::debug("resync every {}", formatGoDuration(resyncEvery_));
	// A monitor that could not be opened in create() (said there) comes back on its timer,
	// as the address monitor does (AddressFollower).
	if (monitor_ && !monitor_->isOpen())
		tableMonitorRecovery_.retryLater(Clock::now());
	reporter_.watchdog(Clock::now());
	reporter_.notifySystemd();
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
	fds[kSignal] = {signals_.fd(), POLLIN, 0};
	fds[kConfig] = {source_->fd(), POLLIN, 0};
	fds[kMonitor] = {monitor_ ? monitor_->fd() : -1, POLLIN, 0};
	fds[kAddresses] = {addresses_.fd(), POLLIN, 0};
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
		events.addressesChanged = addresses_.onReadable(events.now);
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
		checks_.nudgeConflictCheck();
	if (changed)
		return *changed;
	// Whatever drain() cannot read would make poll() return at once forever: the socket
	// goes, with what was queued on it, and a new one comes on the timer. This sync and
	// the one after the reopen check the table for what the lost notifications said.
	monitor_->close();
	tableMonitorRecovery_.failed(changed.error().message, now);
	return true;
}

bool Daemon::reopenTableMonitor(Clock::time_point now)
{
	if (auto opened = monitor_->reopen(); !opened) {
		tableMonitorRecovery_.failed(opened.error().message, now);
		return false;
	}
	tableMonitorRecovery_.recovered(fmt::format("checking table inet {} for what changed meanwhile",
						    source_->rulesetOptions().table));
	return true;
}

void Daemon::act(Events &events)
{
	const Clock::time_point now = events.now;
	const bool resyncDue = due(resync, now);
	if (resyncDue) {
		timers_[resync] = now + resyncEvery_;
		checks_.start(); // those the kernel refused a thread before
	}
	// A monitor back after a failure catches up in this turn: nf_tables' by a sync that
	// checks the table, the addresses' by the read it schedules.
	if (tableMonitorRecovery_.due(now) && reopenTableMonitor(now))
		events.tableChanged = true;
	// The addresses first: a config read in the same turn is then made with them. A resync
	// reads them all once more (the safety net); a read due after lost notifications or a
	// failure is retried on the timer.
	const bool addressesRead = addresses_.onTimer(now, resyncDue || events.reload);
	const bool subnetChanged = (events.addressesChanged || addressesRead) && takeNodeAddresses();
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
	reporter_.podNetworkFound(source_->podNetwork(), now);
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
	if (monitor_ && !monitor_->isOpen() && !tableMonitorRecovery_.reopenAt())
		tableMonitorRecovery_.failed("nf_tables' change monitor lost its subscription after a commit",
					     Clock::now());
	giveMemoryBack();
	reporter_.notifySystemd();
	checks_.nudgeConflictCheck();
}

void Daemon::runDueTimers(Clock::time_point now)
{
	metrics_.readDue(now);
	reporter_.watchdog(now);
	if (addresses_.snapshotDue(now))
		checks_.setNodeAddresses(addresses_.snapshot(now));
}

} // namespace ipmasq
