// SPDX-License-Identifier: Apache-2.0
// The SNAT guard's over sets as text.
#include "ip-masq-agent/diagnose/guard_over.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/base/counted.h"
#include "ip-masq-agent/conntrack/snat_usage.h"

namespace ipmasq {

namespace {

const char *limitKey(GuardLimitKind kind)
{
	return kind == GuardLimitKind::newConnections ? "newConnectionsPerSecond" : "openConnections";
}

std::string destinationText(const GuardOverKey &key)
{
	return key.destination.family == Family::ipv4
		? fmt::format("{}:{}", key.destination.toString(), key.port)
		: fmt::format("[{}]:{}", key.destination.toString(), key.port);
}

// The guard's rules, one per limit and family, in the chain's order.
std::vector<GuardLimit> guardRules(const Ruleset &desired)
{
	std::vector<GuardLimit> rules;
	for (const Chain &chain : desired.chains)
		for (const Rule &rule : chain.rules)
			std::visit(Overloaded{[&](const GuardLimit &limit) { rules.push_back(limit); },
					      [](const auto &) {}},
				   rule.statement);
	return rules;
}

// One limit of one family: its header, then its keys; `total` keys are over it, of which
// `keys` may be only the most attempts.
std::string limitText(const GuardLimit &rule, std::vector<GuardOverKey> keys, size_t total, size_t top)
{
	std::string out = fmt::format("{} {} ({}, {}): {} of source and destination over it\n",
				      limitKey(rule.kind), rule.limit, familyName(rule.family),
				      rule.drop ? "enforced: dropped" : "observed: let through", counted(total, "pair"));
	if (keys.empty())
		return out;
	std::sort(keys.begin(), keys.end(), [](const GuardOverKey &a, const GuardOverKey &b) {
		return a.attempts != b.attempts ? a.attempts > b.attempts : a.source < b.source;
	});
	out += fmt::format("  {:>8}  {:<6} {:<39} {}\n", "ATTEMPTS", "PROTO", "CLIENT", "DESTINATION");
	for (size_t i = 0; i < keys.size() && i < top; i++)
		out += fmt::format("  {:>8}  {:<6} {:<39} {}\n", keys[i].attempts, protocolName(keys[i].protocol),
				   keys[i].source.toString(), destinationText(keys[i]));
	const size_t shown = std::min(keys.size(), top);
	if (total > shown)
		out += fmt::format("  and {} more, left out (at most {} shown)\n", total - shown, top);
	return out;
}

// What the over sets say of `destination`: "; over the guard toward it (last 10 minutes):
// 198.51.100.2 tcp/9443 130 attempts over newConnectionsPerSecond", or that nobody is.
std::string overToward(const Address &destination, std::vector<GuardOverKey> over)
{
	std::erase_if(over, [&](const GuardOverKey &key) { return key.destination != destination; });
	if (over.empty())
		return "; no source is over a limit toward it (the last 10 minutes)";
	std::sort(over.begin(), over.end(),
		  [](const GuardOverKey &a, const GuardOverKey &b) { return a.attempts > b.attempts; });
	std::vector<std::string> keys;
	for (size_t i = 0; i < over.size() && i < 3; i++)
		keys.push_back(fmt::format("{} {}/{} {} over {}", over[i].source.toString(),
					   protocolName(over[i].protocol), over[i].port,
					   counted(over[i].attempts, "attempt"), limitKey(over[i].kind)));
	return fmt::format("; over a limit toward it (the last 10 minutes): {}{}", fmt::join(keys, ", "),
			   over.size() > 3 ? fmt::format(" and {} more", over.size() - 3) : "");
}

} // namespace

std::string guardExplainClause(const Ruleset &desired, const Address &destination,
			       const std::vector<Address> &sources,
			       const std::optional<std::vector<GuardOverKey>> &over, const std::string &why)
{
	std::vector<std::string> limits;
	const GuardLimit *any = nullptr;
	for (const GuardLimit &rule : guardRules(desired))
		if (rule.family == destination.family) {
			limits.push_back(fmt::format("{} {}", limitKey(rule.kind), rule.limit));
			any = &rule;
		}
	if (!any)
		return {};
	const AddressSet *notMasqueraded = desired.findSet(destination.family);
	if (notMasqueraded && notMasqueraded->elements.contains(destination))
		return "; SNAT guard: not guarded (the agent does not source-NAT it)";
	std::string out = fmt::format("; SNAT guard ({}): per source toward it, {}", any->drop ? "enforce" : "observe",
				      fmt::join(limits, " and "));
	const AddressSet *exempt = desired.findSet(any->exemptSet);
	for (const Address &source : sources)
		if (source.family == destination.family)
			out += fmt::format("; from {}: {}", source.toString(),
					   exempt && exempt->elements.contains(source) ? "exempt (snatGuard exempt)"
										   : "guarded");
	return out + (over ? overToward(destination, *over) : "; what it counted could not be read: " + why);
}

std::string guardOverText(const Ruleset &desired, std::vector<GuardOverKey> over,
			  const std::vector<DynamicSetFill> &fill, size_t top)
{
	const std::vector<GuardLimit> rules = guardRules(desired);
	if (rules.empty())
		return {};
	std::string out = "\nSNAT guard (snatGuard): the sources over each limit toward a destination in the last "
			  "10 minutes (the kernel's guard-over-* sets), the most attempts first; an attempt is a "
			  "new connection's first packet, a retried SYN counts again.\n";
	for (const GuardLimit &rule : rules) {
		std::vector<GuardOverKey> keys;
		for (const GuardOverKey &key : over)
			if (key.kind == rule.kind && key.source.family == rule.family)
				keys.push_back(key);
		// The over set's count when it was read: `over` may hold only its top keys.
		const std::string overSet = guardOverSetName(rule.kind, rule.family);
		const auto counted = std::find_if(fill.begin(), fill.end(),
						  [&](const DynamicSetFill &set) { return set.set == overSet; });
		const size_t total = counted != fill.end() ? std::max(counted->elements, keys.size()) : keys.size();
		out += limitText(rule, std::move(keys), total, top);
	}
	for (const DynamicSetFill &set : fill)
		out += fmt::format("set {}: {} of {} keys{}\n", set.set, set.elements, set.size,
				   set.elements >= set.size ? " (full: a new key goes unguarded)" : "");
	return out;
}

} // namespace ipmasq
