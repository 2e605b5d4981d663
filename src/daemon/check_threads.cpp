// SPDX-License-Identifier: Apache-2.0
// The checks' threads started, and their refusals said once.
#include "ip-masq-agent/daemon/check_threads.h"

namespace ipmasq {

void CheckThreads::start()
{
	const auto startOne = [this](auto &check, LogOnce &refusal, const char *label, const char *what) {
		if (check.running())
			return;
		const Status started = check.start();
		if (started && refusal.clear())
			log::info("{} runs now: its thread started", what);
		if (!started && refusal.changed(started.error().message))
			log::warning("{}; the agent goes on without {}, and tries to start it again at "
				     "each resync", started.error().message, what);
		status_.checkThread(AgentStatus::CheckThread{label, what, refusal.last()});
	};
	startOne(conflictCheck_, checkRefusals_[0], "nat_conflicts", "the NAT conflict check");
	startOne(snatUsageCheck_, checkRefusals_[1], "snat_usage", "the SNAT usage read");
}

} // namespace ipmasq
