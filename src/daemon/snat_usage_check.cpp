// SPDX-License-Identifier: Apache-2.0
// The daemon's SNAT usage read: one conntrack dump per pass, counted, reported.
#include "ip-masq-agent/daemon/snat_usage_check.h"

#include <algorithm>
#include <map>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/diagnose/guard_over.h"
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

namespace {

// What the guard's read needs of a ruleset: its table, dynamic sets and GuardLimit rules
// (not its address sets, which may hold 100,000 ranges).
Ruleset guardOf(const Ruleset &ruleset)
{
	Ruleset guard;
	guard.table = ruleset.table;
	guard.dynamicSets = ruleset.dynamicSets;
	Chain rules{"guard", std::nullopt, {}, {}};
	for (const Chain &chain : ruleset.chains)
		for (const Rule &rule : chain.rules)
			if (std::holds_alternative<GuardLimit>(rule.statement))
				rules.rules.push_back(rule);
	guard.chains.push_back(std::move(rules));
	return guard;
}

} // namespace

void SnatUsageCheck::setDesired(const Ruleset &ruleset)
{
	SnatPlan plan = snatPlanOf(ruleset);
	Ruleset guard = guardOf(ruleset);
	thread_.locked([&] {
		next_ = std::move(plan);
		nextGuard_ = std::move(guard);
	});
}

void SnatUsageCheck::readGuard()
{
	if (guard_.dynamicSets.empty()) {
		status_.snatGuardRead({}, {}, {});
		return;
	}
	if (!backend_) {
		auto opened = NetlinkBackend::open();
		if (opened)
			backend_ = std::move(*opened);
	}
	// Of each over set, the keys the text lists (kTopGuardOver); the series' top
	// (kTopGuardOverSeries, fewer) is among them.
	static_assert(kTopGuardOverSeries <= kTopGuardOver);
	auto read = backend_ ? backend_->readGuard(guard_.table, guard_.dynamicSets, kTopGuardOver)
			     : Result<GuardReading>(fail("no netlink socket could be opened"));
	if (!read) {
		const std::string why = read.error().message;
		if (guardError_.changed(why))
			log::warning("SNAT guard: its sets could not be read: {}", why);
		status_.snatGuardRead(fmt::format("\nSNAT guard (snatGuard): its sets could not be read: {}\n", why),
				      {}, {});
		return;
	}
	if (guardError_.clear())
		log::info("SNAT guard: its sets are readable again");
	std::string text = guardOverText(guard_, read->over, read->fill);
	std::vector<GuardOverKey> top = std::move(read->over);
	const size_t kept = std::min(top.size(), kTopGuardOverSeries);
	std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(kept), top.end(),
			  [](const GuardOverKey &a, const GuardOverKey &b) { return a.attempts > b.attempts; });
	top.resize(kept);
	status_.snatGuardRead(std::move(text), std::move(top), std::move(read->fill));
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
		if (nextGuard_)
			guard_ = *std::exchange(nextGuard_, std::nullopt);
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
	readGuard();
	return true; // periodic: due again as soon as the pace allows
}

} // namespace ipmasq
