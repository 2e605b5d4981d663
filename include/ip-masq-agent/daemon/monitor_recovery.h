// SPDX-License-Identifier: Apache-2.0
// How a change monitor that failed comes back: opened again on the loop's timer, after a
// delay that doubles while it keeps failing, each distinct failure said once.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "ip-masq-agent/base/log.h"

namespace ipmasq {

// For nf_tables' change monitor (the Daemon's) and the address monitor (AddressFollower).
// A read error leaves a monitor's socket of no use and whatever was queued on it lost: its
// owner closes it, and a new subscription is due kFirstReopen later, the delay doubling up
// to kLongestReopen while that fails (a netlink socket the kernel refuses now, out of
// memory or descriptors, is a passing state). Once it is back, the owner catches up what
// changed meanwhile with a full read.
class MonitorRecovery
{
public:
	using Clock = std::chrono::steady_clock;

	static constexpr std::chrono::milliseconds kFirstReopen{100};
	static constexpr std::chrono::milliseconds kLongestReopen{5000};

	// `doing`: what the monitor does, for the log ("watching nf_tables for changes").
	explicit MonitorRecovery(const char *doing) : doing_(doing) {}

	// The monitor is down (`error` says why): its reopen is due after the delay. Each
	// distinct failure is a warning; the same again (a reopen that fails the same way
	// every 5 s) is no news, and only a debug line.
	void failed(const std::string &error, Clock::time_point now)
	{
		if (failure_.changed(error))
			log::warning("{}; {} again in {} ms, then a full read catches up what changed "
				     "meanwhile", error, doing_, delay_.count());
		else
			log::debug("{}; {} again in {} ms", error, doing_, delay_.count());
		reopenAt_ = now + delay_;
		delay_ = std::min(2 * delay_, kLongestReopen);
	}
	// A monitor that could not be opened at start (said then) is opened again the same way.
	void retryLater(Clock::time_point now) { reopenAt_ = now + delay_; }
	// The monitor is open again: said, with `catchUp` (how what changed meanwhile is
	// read); the delay starts over.
	void recovered(std::string_view catchUp)
	{
		log::info("{} again; {}", doing_, catchUp);
		delay_ = kFirstReopen;
		reopenAt_.reset();
		failure_.clear();
	}

	// When the reopen is due; nullopt: none is pending.
	const std::optional<Clock::time_point> &reopenAt() const { return reopenAt_; }
	bool due(Clock::time_point now) const { return reopenAt_ && now >= *reopenAt_; }

private:
	const char *doing_;
	std::chrono::milliseconds delay_ = kFirstReopen;
	std::optional<Clock::time_point> reopenAt_;
	LogOnce failure_;
};

} // namespace ipmasq
