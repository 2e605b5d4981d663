// SPDX-License-Identifier: Apache-2.0
// The daemon's SNAT usage read: one conntrack dump per pass, counted, reported.
#include "ip-masq-agent/daemon/snat_usage_check.h"

#include <map>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/conntrack/conntrack_dump.h"
#include "ip-masq-agent/node/client_route.h"

namespace ipmasq {

Status describeClientRoutes(SnatUsage &usage)
{
	auto routes = ClientRoutes::open();
	if (!routes)
		return fail(routes.error());
	// A client of several destinations is asked about once.
	std::map<Address, ClientRoute> known;
	Status first;
	for (SnatDestinationTotal &total : usage.totals)
		for (SnatClient &client : total.holders.top) {
			auto it = known.find(client.address);
			if (it == known.end()) {
				auto route = routes->of(client.address);
				if (!route && first)
					first = fail(route.error());
				it = known.emplace(client.address, route ? *route : ClientRoute{}).first;
			}
			client.reachedThrough = it->second.text();
			client.interface = it->second.mostSpecific();
		}
	return first;
}

SnatUsageCheck::SnatUsageCheck(AgentStatus &status)
	: status_(status), thread_("the SNAT usage read", kPace, [this] { return pass(); })
{
}

void SnatUsageCheck::setDesired(const Ruleset &ruleset)
{
	SnatPlan plan = snatPlanOf(ruleset);
	thread_.locked([&] { next_ = std::move(plan); });
}

void SnatUsageCheck::setNodeAddresses(std::shared_ptr<const NodeAddresses> addresses)
{
	thread_.locked([&] { addresses_ = std::move(addresses); });
}

Status SnatUsageCheck::start()
{
	if (auto started = thread_.start(); !started)
		return started;
	thread_.nudge();
	return {};
}

bool SnatUsageCheck::pass()
{
	const auto node = thread_.locked([this] {
		if (next_)
			plan_ = *std::exchange(next_, std::nullopt);
		return addresses_;
	});
	SnatUsageCounter counter(plan_, translatedByMasquerade(*node));
	const double startedAt = unixNow();
	auto dump = countSourceNatEntries(counter);
	if (!dump) {
		status_.snatUsageReadFailed();
		if (readError_.changed(dump.error().message))
			log::warning("{}; the SNAT usage metrics are left out until a read succeeds",
				     dump.error().message);
		return true;
	}
	if (readError_.clear())
		log::info("conntrack's entries are readable again");
	SnatUsage usage = counter.finish();
	if (Status routes = describeClientRoutes(usage); !routes)
		log::debug("SNAT usage: {}; the clients' interfaces are left out", routes.error().message);
	if (usage.leftOut)
		log::debug("SNAT usage: {} connections toward destinations beyond the first {} were "
			   "not attributed", usage.leftOut, usage.destinations);
	status_.snatUsageRead(std::move(usage), startedAt);
	return true; // periodic: due again as soon as the pace allows
}

} // namespace ipmasq
