// SPDX-License-Identifier: Apache-2.0
// How a change monitor that failed comes back: its reopen's back-off, and what is said.
#include "ip-masq-agent/daemon/monitor_recovery.h"

#include <algorithm>

namespace ipmasq {

void MonitorRecovery::failed(const std::string &error, Clock::time_point now)
{
	if (failure_.changed(error))
		log::warning("{}; {} again in {} ms, then a full read catches up what changed "
			     "meanwhile", error, doing_, delay_.count());
	else
		log::debug("{}; {} again in {} ms", error, doing_, delay_.count());
	reopenAt_ = now + delay_;
	delay_ = std::min(2 * delay_, kLongestReopen);
}

void MonitorRecovery::recovered(std::string_view catchUp)
{
	log::info("{} again; {}", doing_, catchUp);
	delay_ = kFirstReopen;
	reopenAt_.reset();
	failure_.clear();
}

} // namespace ipmasq
