// SPDX-License-Identifier: Apache-2.0
// The daemon's SNAT usage read: one conntrack dump per pass, counted, reported.
#include "ip-masq-agent/snat_usage_check.h"

#include "ip-masq-agent/log.h"
#include "ip-masq-agent/netlink/address_monitor.h"
#include "ip-masq-agent/netlink/conntrack_dump.h"

namespace ipmasq {

SnatUsageCheck::SnatUsageCheck(AgentStatus &status)
	: status_(status), thread_("the SNAT usage read", kPace, [this] { return pass(); })
{
}

void SnatUsageCheck::setDesired(const Ruleset &ruleset)
{
	SnatPlan plan = snatPlanOf(ruleset);
	thread_.locked([&] { next_ = std::move(plan); });
}

void SnatUsageCheck::start()
{
	thread_.start();
	thread_.nudge();
}

bool SnatUsageCheck::pass()
{
	if (auto next = thread_.locked([this] { return std::exchange(next_, std::nullopt); }))
		plan_ = std::move(*next);
	// Masquerade translates to the node's addresses: read with every pass (a few
	// microseconds); unreadable, any address counts as the node's, and the log says so.
	std::optional<std::vector<Address>> node;
	if (auto addresses = readNodeAddresses()) {
		node.emplace();
		for (const NodeAddress &a : *addresses)
			node->push_back(a.address);
	} else {
		log::debug("{}; the SNAT usage read takes any translated address for the node's",
			   addresses.error().message);
	}
	SnatUsageCounter counter(plan_, std::move(node));
	auto dump = countSourceNatEntries(counter);
	if (!dump) {
		status_.snatUsageReadFailed();
		if (dump.error().message != lastError_)
			log::warning("{}; the SNAT usage metrics are left out until a read succeeds",
				     dump.error().message);
		lastError_ = dump.error().message;
		return true;
	}
	if (!lastError_.empty())
		log::info("conntrack's entries are readable again");
	lastError_.clear();
	SnatUsage usage = counter.finish();
	if (usage.leftOut)
		log::debug("SNAT usage: {} connections toward destinations beyond the first {} were "
			   "not attributed", usage.leftOut, usage.destinations);
	status_.snatUsageRead(std::move(usage));
	return true; // periodic: due again as soon as the pace allows
}

} // namespace ipmasq
