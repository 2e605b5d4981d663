// SPDX-License-Identifier: Apache-2.0
// This node's addresses, followed for the daemon's loop: notifications applied to the view,
// reads spaced and retried, the monitor opened again when it fails.
#include "ip-masq-agent/daemon/address_follower.h"

#include <algorithm>
#include <utility>

#include "ip-masq-agent/daemon/desired_state_source.h"

namespace ipmasq {

AddressFollower::AddressFollower(const DesiredStateSource &source, AgentStatus &status,
				 Clock::time_point now)
	: source_(source), status_(status)
{
	// Without a monitor, an outputAddress subnet follows the node at each resync only,
	// until the reopen.
	auto opened = AddressMonitor::open();
	if (opened) {
		monitor_.emplace(std::move(*opened));
		return;
	}
	log::warning("{}; the loop tries again in a moment", opened.error().message);
	recovery_.retryLater(now);
}

bool AddressFollower::onReadable(Clock::time_point now)
{
	auto drained = monitor_->drain();
	if (!drained) {
		monitorLost(drained.error().message, now);
		return false;
	}
	bool watched = false;
	for (const AddressChange &change : drained->changes)
		watched = view_.apply(change, source_.watchedSubnets()) || watched;
	changedSinceSnapshot_ = changedSinceSnapshot_ || !drained->changes.empty() || drained->overrun;
	if (drained->overrun) {
		// Some changes are missing: a fresh subscription (whose queue holds nothing
		// older), then one read of them all. The old queue goes with the old socket.
		log::debug("the kernel dropped address notifications ({} times since the start); "
			   "subscribing again and reading the addresses once more", monitor_->overruns());
		view_.lose();
		monitor_.reset();
		auto fresh = AddressMonitor::open();
		if (!fresh) {
			monitorLost(fresh.error().message, now);
			return watched;
		}
		monitor_.emplace(std::move(*fresh));
	}
	if (view_.state() != NodeAddressView::State::current)
		scheduleRead(now);
	return watched;
}

void AddressFollower::monitorLost(const std::string &error, Clock::time_point now)
{
	// A read before the new subscription would be stale at once: the read comes after it
	// (reopen).
	monitor_.reset();
	view_.lose();
	changedSinceSnapshot_ = true;
	report();
	recovery_.failed(error, now);
}

void AddressFollower::reopen(Clock::time_point now)
{
	auto opened = AddressMonitor::open();
	if (!opened) {
		recovery_.failed(opened.error().message, now);
		return;
	}
	monitor_.emplace(std::move(*opened));
	recovery_.recovered("reading them all for what changed meanwhile");
	// Subscribed first, read second (address_monitor.h): nothing falls in between.
	view_.lose();
	scheduleRead(now);
}

bool AddressFollower::onTimer(Clock::time_point now, bool readNow)
{
	if (recovery_.due(now))
		reopen(now);
	if (!readNow && !(readAt_ && now >= *readAt_))
		return false;
	return read(now, source_.dependsOnNodeAddresses());
}

std::optional<AddressFollower::Clock::time_point> AddressFollower::nextWake() const
{
	std::optional<Clock::time_point> wake = readAt_;
	for (const auto &deadline : {recovery_.reopenAt(), changedSinceSnapshot_
				     ? std::optional(lastSnapshot_ + kSnapshotSpacing) : std::nullopt})
		if (deadline && (!wake || *deadline < *wake))
			wake = deadline;
	return wake;
}

NodeAddresses AddressFollower::forConfig(Clock::time_point now, bool needed)
{
	if (view_.state() != NodeAddressView::State::current || !monitor_)
		(void)read(now, needed);
	return view_.addresses();
}

bool AddressFollower::read(Clock::time_point now, bool required)
{
	lastRead_ = now;
	auto read = readNodeAddressesUnnamed();
	changedSinceSnapshot_ = changedSinceSnapshot_ || read;
	if (read) {
		view_.replace(*read);
		readAt_.reset();
		retry_ = kFirstRetry;
		if (readError_.clear())
			log::info("this node's addresses are readable again ({} addresses)", read->size());
		report();
		return true;
	}
	// A read that only double-checks a view kept current by notifications: the view
	// stays right, the next resync reads again.
	if (!required || view_.state() == NodeAddressView::State::current) {
		log::debug("{}; the addresses followed so far stay in use", read.error().message);
		readAt_.reset(); // the next resync reads them again
		return false;
	}
	const std::chrono::milliseconds retry = retry_;
	readAt_ = now + retry;
	retry_ = std::min(2 * retry_, kLongestRetry);
	// Under churn every failure reads the same.
	if (readError_.changed(read.error().message)) {
		if (view_.state() == NodeAddressView::State::unknown)
			log::warning("{}; the config's outputAddress subnet waits for them (nothing is "
				     "made from addresses that could not be read), trying again in {} ms",
				     read.error().message, retry.count());
		else
			log::warning("{}; the outputAddress subnets keep the addresses last known until "
				     "a read succeeds (the table in force stays as it is), trying again "
				     "in {} ms", read.error().message, retry.count());
	}
	report();
	return false;
}

void AddressFollower::scheduleRead(Clock::time_point now)
{
	// Coalesced and spaced: however often notifications are lost, one read of every
	// address per kReadSpacing at most.
	if (readAt_)
		return;
	readAt_ = std::max(now, lastRead_ + kReadSpacing);
	report();
}

void AddressFollower::report()
{
	AgentStatus::AddressFollowing following;
	const bool followed = source_.dependsOnNodeAddresses();
	const std::string &error = readError_.last();
	if (followed && view_.state() == NodeAddressView::State::unknown) {
		following.state = AgentStatus::AddressFollowing::State::waiting;
		following.reason = error.empty() ? "not read yet" : error;
	} else if (followed && view_.state() == NodeAddressView::State::stale) {
		following.state = AgentStatus::AddressFollowing::State::stale;
		following.reason = error.empty() ? "change notifications were lost; reading them again" : error;
	}
	status_.addressesFollowed(following);
}

std::shared_ptr<const NodeAddresses> AddressFollower::snapshot(Clock::time_point now)
{
	changedSinceSnapshot_ = false;
	lastSnapshot_ = now;
	return std::make_shared<const NodeAddresses>(view_.addresses());
}

bool AddressFollower::snapshotDue(Clock::time_point now) const
{
	return changedSinceSnapshot_ && now >= lastSnapshot_ + kSnapshotSpacing;
}

} // namespace ipmasq
