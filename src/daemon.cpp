// SPDX-License-Identifier: Apache-2.0
// The daemon: config watcher + resync timer + nftables monitor + signals, one poll() loop.
#include "ip-masq-agent/daemon.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>

#include <fmt/format.h>

#include "ip-masq-agent/duration.h"
#include "ip-masq-agent/log.h"
#include "ip-masq-agent/netlink/backend.h"
#include "ip-masq-agent/netlink/monitor.h"

namespace ipmasq {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kConfigSettle = std::chrono::milliseconds(30);
constexpr auto kConfigSettleLimit = std::chrono::milliseconds(300);

std::string summarize(const Ruleset &ruleset)
{
	std::string sets;
	for (const AddressSet &set : ruleset.sets)
		sets += fmt::format("{}{} {} intervals", sets.empty() ? "" : ", ",
				    set.elements.size(), familyName(set.family()));
	return sets.empty() ? "no sets" : sets;
}

timespec toTimespec(std::chrono::nanoseconds d)
{
	return timespec{static_cast<time_t>(d.count() / 1000000000),
			static_cast<long>(d.count() % 1000000000)};
}

// First expiry after `first` (zero: disarmed), then every `every` (zero: once).
bool armTimer(const UniqueFd &timer, std::chrono::nanoseconds first, std::chrono::nanoseconds every)
{
	const itimerspec spec{toTimespec(every), toTimespec(first)};
	return timerfd_settime(timer.get(), 0, &spec, nullptr) == 0;
}

double millisecondsSince(Clock::time_point start)
{
	return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

} // namespace

std::optional<FileStamp> FileStamp::of(const std::string &path)
{
	struct stat st {};
	if (stat(path.c_str(), &st) != 0)
		return errno == ENOENT ? std::optional(FileStamp{}) : std::nullopt;
	return FileStamp{true,
			 st.st_dev,
			 st.st_ino,
			 st.st_size,
			 {st.st_mtim.tv_sec, st.st_mtim.tv_nsec},
			 {st.st_ctim.tv_sec, st.st_ctim.tv_nsec}};
}

const char *syncTriggerName(SyncTrigger trigger)
{
	switch (trigger) {
	case SyncTrigger::startup: return "start-up";
	case SyncTrigger::configChange: return "config change";
	case SyncTrigger::resync: return "resync";
	case SyncTrigger::nftablesChange: return "nftables change";
	case SyncTrigger::reload: return "SIGHUP";
	}
	return "?";
}

Daemon::Daemon(AgentOptions options, NetlinkBackend &backend, NftablesMonitor *monitor,
	       SystemdNotifier notifier)
	: options_(std::move(options)), backend_(backend), monitor_(monitor),
	  notifier_(std::move(notifier))
{
	// Block the signals first, so that one arriving during start-up is handled by the
	// loop (a clean exit) instead of killing the process half-way.
	sigset_t mask;
	sigemptyset(&mask);
	for (int sig : {SIGTERM, SIGINT, SIGHUP})
		sigaddset(&mask, sig);
	if (sigprocmask(SIG_BLOCK, &mask, nullptr) == 0)
		signalFd_.reset(signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
	timerFd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	debounceFd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));

	auto watcher = ConfigWatcher::create(options_.configPath);
	if (watcher)
		watcher_.emplace(std::move(*watcher));
	else
		log::warning("{}", watcher.error().message);
}

Daemon::~Daemon() = default;

// The config was not read again: whatever it last meant still holds.
Status Daemon::unchangedConfig() const
{
	return lastConfigError_.empty() ? Status() : fail(lastConfigError_);
}

Status Daemon::loadConfig(SyncTrigger trigger)
{
	// Arm the watch before reading, so a change made while we read is not missed.
	if (watcher_) {
		auto armed = watcher_->arm();
		if (!armed && !watchWarned_)
			log::warning("{}", armed.error().message);
		watchWarned_ = !armed;
	}

	// Never read a file someone is still writing: the watcher reports the close, and
	// the sync that follows reads it whole. Until then the current ruleset stays.
	if (watcher_ && watcher_->writeInProgress()) {
		log::debug("{}: {} is being written; reading it once it is closed",
			   syncTriggerName(trigger), options_.configPath);
		return unchangedConfig();
	}

	// The resync timer is only the safety net behind inotify: when the file is the same
	// file with the same size and timestamps, do not read it again (100,000 CIDRs are
	// 2 MB). Every other trigger reads it. Stat before reading, so a change racing the
	// read is seen next time.
	const std::optional<FileStamp> stamp = FileStamp::of(options_.configPath);
	if (trigger == SyncTrigger::resync && lastText_ && stamp && stamp == lastStamp_)
		return unchangedConfig();
	lastStamp_ = stamp;

	auto text = readConfigText(options_.configPath);
	if (text && lastText_ && *text == *lastText_)
		return unchangedConfig();

	auto loaded = text ? parseConfigText(*text, options_.configPath, options_.configFlags)
			   : Result<LoadedConfig>(tl::unexpected(text.error()));
	if (text)
		lastText_ = *text;
	else
		lastText_.reset(); // unreadable: try again next time

	if (!loaded) {
		// Say it (and count it) once per change, not once per resync.
		if (loaded.error().message != lastConfigError_) {
			log::error("{}; {}", loaded.error().message,
				   desired_ ? "keeping the last good ruleset in force"
					    : "nothing applied: an existing table of the agent is left as it is");
			status_.configFailed(loaded.error().message);
		}
		lastConfigError_ = loaded.error().message;
		return fail(loaded.error());
	}

	for (const std::string &warning : loaded->warnings)
		log::warning("{}", warning);
	if (!lastConfigError_.empty())
		log::info("the config is valid again");
	lastConfigError_.clear();
	log::info("config {}: {}",
		  loaded->fromFile ? options_.configPath
				   : fmt::format("(built-in defaults: {} not found)", options_.configPath),
		  describeConfig(loaded->config));
	resyncInterval_ = loaded->config.resyncInterval;
	Ruleset next = buildRuleset(loaded->config, options_.ruleset);
	// Compare rulesets once per config change, not on every sync.
	if (!desired_ || next != *desired_) {
		desired_ = std::move(next);
		desiredVersion_++;
	}
	return {};
}

Status Daemon::ensureApplied(SyncTrigger trigger, bool recheck)
{
	auto generation = backend_.generation();
	if (!generation) {
		status_.syncFailed(generation.error().message);
		return fail(generation.error());
	}

	if (appliedVersion_ == desiredVersion_) {
		if (appliedGeneration_ == *generation) {
			log::debug("{}: nothing changed (generation {})", syncTriggerName(trigger),
				   *generation);
			status_.noopResync();
			return {};
		}
		// Something changed nftables since our last commit: most often another table
		// (kube-proxy's). Look at ours before writing anything.
		auto same = backend_.matches(*desired_);
		if (!same) {
			status_.syncFailed(same.error().message);
			return fail(same.error());
		}
		if (*same) {
			log::debug("{}: nftables changed elsewhere, table inet {} is intact "
				   "(generation {})", syncTriggerName(trigger), desired_->table,
				   *generation);
			appliedGeneration_ = *generation;
			status_.noopResync();
			return {};
		}
		log::warning("table inet {} was changed or deleted outside the agent; restoring it",
			     desired_->table);
		drifted_ = true;
		status_.tableDrifted();
	}

	const auto start = Clock::now();
	// Nobody listening means the kernel builds no per-element notifications for this
	// commit, which would double its cost for large sets. The generation check below
	// catches what others commit meanwhile.
	if (monitor_)
		(void)monitor_->pause();
	auto committed = backend_.apply(*desired_);
	const double took = millisecondsSince(start);
	if (monitor_)
		if (auto resumed = monitor_->resume(); !resumed)
			log::warning("{}; outside changes are repaired at the next resync only",
				     resumed.error().message);
	if (!committed) {
		if (committed.error().message != lastApplyError_)
			log::error("applying table inet {} failed, the previous ruleset stays in "
				   "force: {}", desired_->table, committed.error().message);
		lastApplyError_ = committed.error().message;
		status_.syncFailed(lastApplyError_);
		return fail(committed.error());
	}
	lastApplyError_.clear();
	status_.syncSucceeded(*desired_, std::chrono::duration<double, std::milli>(took));
	if (drifted_)
		status_.driftRepaired();
	drifted_ = false;
	log::info("applied table inet {} ({}): {} in {:.1f} ms (generation {})", desired_->table,
		  syncTriggerName(trigger), summarize(*desired_), took, *committed);
	appliedVersion_ = desiredVersion_;
	appliedGeneration_ = *committed;

	// Someone committed while we were not listening: look at our table now, once.
	if (monitor_ && recheck)
		if (auto now = backend_.generation(); now && *now != *committed)
			return ensureApplied(SyncTrigger::nftablesChange, false);
	return {};
}

Status Daemon::sync(SyncTrigger trigger)
{
	const Status config = loadConfig(trigger);
	if (!desired_)
		return config; // a bad config and nothing good yet: leave the kernel alone
	const Status kernel = ensureApplied(trigger);
	// Healthy only once the new config's ruleset is in force, not when it was read.
	if (config)
		status_.configLoaded();
	if (!kernel)
		return kernel;
	return config;
}

void Daemon::armResyncTimer()
{
	if (armedInterval_ == resyncInterval_)
		return;
	if (!armTimer(timerFd_, resyncInterval_, resyncInterval_)) {
		log::error("cannot arm the resync timer: {}", std::strerror(errno));
		return;
	}
	armedInterval_ = resyncInterval_;
	log::debug("resync every {}", formatGoDuration(resyncInterval_));
}

void Daemon::armOneShot(const UniqueFd &timer, std::chrono::nanoseconds after)
{
	(void)armTimer(timer, after, std::chrono::nanoseconds(0)); // zero disarms
}

void Daemon::armWatchdogTimer()
{
	const auto period = notifier_.watchdogPeriod();
	if (!period)
		return;
	watchdogFd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	if (!watchdogFd_.isValid() || !armTimer(watchdogFd_, *period, *period))
		log::error("cannot arm the systemd watchdog timer: {}", std::strerror(errno));
	notifier_.notify("WATCHDOG=1");
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

int Daemon::run()
{
	if (!signalFd_.isValid() || !timerFd_.isValid() || !debounceFd_.isValid()) {
		log::error("cannot create the event loop's descriptors: {}", std::strerror(errno));
		return EXIT_FAILURE;
	}

	// The loop's heartbeat for /livez: it wakes at least this often, so a stale
	// heartbeat means stuck, not idle.
	UniqueFd heartbeatFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	if (!heartbeatFd.isValid() ||
	    !armTimer(heartbeatFd, AgentStatus::kHeartbeatPeriod, AgentStatus::kHeartbeatPeriod)) {
		log::error("cannot arm the heartbeat timer: {}", std::strerror(errno));
		return EXIT_FAILURE;
	}
	status_.loopTurned();

	(void)sync(SyncTrigger::startup);
	armResyncTimer();
	armWatchdogTimer();
	reportToSystemd();

	enum { kSignal, kTimer, kWatcher, kMonitor, kWatchdog, kDebounce, kHeartbeat, kCount };
	std::array<pollfd, kCount> fds{};
	fds[kSignal] = {signalFd_.get(), POLLIN, 0};
	fds[kTimer] = {timerFd_.get(), POLLIN, 0};
	fds[kWatcher] = {watcher_ ? watcher_->fd() : -1, POLLIN, 0};
	fds[kMonitor] = {monitor_ ? monitor_->fd() : -1, POLLIN, 0};
	fds[kWatchdog] = {watchdogFd_.get(), POLLIN, 0};
	fds[kDebounce] = {debounceFd_.get(), POLLIN, 0};
	fds[kHeartbeat] = {heartbeatFd.get(), POLLIN, 0};

	for (;;) {
		if (poll(fds.data(), fds.size(), -1) < 0) {
			if (errno == EINTR)
				continue;
			log::error("poll: {}", std::strerror(errno));
			return EXIT_FAILURE;
		}
		status_.loopTurned();
		if (fds[kHeartbeat].revents & POLLIN) {
			uint64_t expirations = 0;
			(void)!read(heartbeatFd.get(), &expirations, sizeof(expirations));
		}

		std::optional<SyncTrigger> trigger;
		if (fds[kSignal].revents & POLLIN) {
			signalfd_siginfo info{};
			while (read(signalFd_.get(), &info, sizeof(info)) == sizeof(info)) {
				if (info.ssi_signo == SIGHUP) {
					log::info("SIGHUP: reloading");
					trigger = SyncTrigger::reload;
					continue;
				}
				log::info("{}: exiting; table inet {} stays in place",
					  strsignal(static_cast<int>(info.ssi_signo)),
					  options_.ruleset.table);
				notifier_.notify("STOPPING=1");
				return EXIT_SUCCESS;
			}
		}
		if ((fds[kWatcher].revents & POLLIN) && watcher_->readEvents()) {
			// Let a burst of events settle (an editor renames the old file away,
			// then writes the new one): one read after 30 ms of quiet, so the
			// file is never seen missing in between. A burst that goes on is cut
			// short after 300 ms.
			const auto now = Clock::now();
			if (!configPendingSince_)
				configPendingSince_ = now;
			if (now - *configPendingSince_ >= kConfigSettleLimit)
				trigger = SyncTrigger::configChange;
			else
				armOneShot(debounceFd_, kConfigSettle);
		}
		if (fds[kDebounce].revents & POLLIN) {
			uint64_t expirations = 0;
			(void)!read(debounceFd_.get(), &expirations, sizeof(expirations));
			trigger = SyncTrigger::configChange;
		}
		if (trigger == SyncTrigger::configChange) {
			configPendingSince_.reset();
			armOneShot(debounceFd_, std::chrono::nanoseconds(0)); // disarm
		}
		// POLLERR on a netlink socket is an overrun (ENOBUFS), which drain() reads
		// and reports as a change; anything else it cannot read would make poll()
		// return at once forever, so the monitor is dropped and resyncs remain.
		if (fds[kMonitor].revents & (POLLIN | POLLERR | POLLHUP)) {
			auto changed = monitor_->drain();
			if (!changed) {
				log::warning("{}; changes to the table are repaired at the next "
					     "resync only", changed.error().message);
				fds[kMonitor].fd = -1;
			}
			if (!changed || *changed)
				trigger = trigger.value_or(SyncTrigger::nftablesChange);
		}
		if (fds[kTimer].revents & POLLIN) {
			uint64_t expirations = 0;
			(void)!read(timerFd_.get(), &expirations, sizeof(expirations));
			trigger = trigger.value_or(SyncTrigger::resync);
		}
		if (fds[kWatchdog].revents & POLLIN) {
			// Sent from the loop itself: if the loop hangs, systemd restarts us.
			uint64_t expirations = 0;
			(void)!read(watchdogFd_.get(), &expirations, sizeof(expirations));
			notifier_.notify("WATCHDOG=1");
		}
		if (trigger) {
			(void)sync(*trigger);
			armResyncTimer();
			reportToSystemd();
		}
	}
}

} // namespace ipmasq
