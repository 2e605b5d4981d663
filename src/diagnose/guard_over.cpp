// SPDX-License-Identifier: Apache-2.0
// The SNAT guard's over sets as text.
#include "ip-masq-agent/diagnose/guard_over.h"

#include <algorithm>

#include <fmt/format.h>

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

// One limit of one family: its header, then its keys.
std::string limitText(const GuardLimit &rule, std::vector<GuardOverKey> keys, size_t top)
{
	std::string out = fmt::format("{} {} ({}, {}): {} sources and destinations over it\n", limitKey(rule.kind),
				      rule.limit, familyName(rule.family), rule.drop ? "enforced: dropped" : "observed: let through",
				      keys.size());
	if (keys.empty())
		return out;
	std::sort(keys.begin(), keys.end(), [](const GuardOverKey &a, const GuardOverKey &b) {
		return a.attempts != b.attempts ? a.attempts > b.attempts : a.source < b.source;
	});
	out += fmt::format("  {:>8}  {:<6} {:<39} {}\n", "ATTEMPTS", "PROTO", "CLIENT", "DESTINATION");
	for (size_t i = 0; i < keys.size() && i < top; i++)
		out += fmt::format("  {:>8}  {:<6} {:<39} {}\n", keys[i].attempts, protocolName(keys[i].protocol),
				   keys[i].source.toString(), destinationText(keys[i]));
	if (keys.size() > top)
		out += fmt::format("  and {} more, left out (at most {} shown)\n", keys.size() - top, top);
	return out;
}

} // namespace

std::string guardOverText(const Ruleset &desired, std::vector<GuardOverKey> over, size_t top)
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
		out += limitText(rule, std::move(keys), top);
	}
	return out;
}

} // namespace ipmasq
