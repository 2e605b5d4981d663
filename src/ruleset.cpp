// SPDX-License-Identifier: Apache-2.0
// The desired ruleset: a pure function from config + flags to the agent's table.
#include "ip-masq-agent/ruleset.h"

#include <array>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <numeric>
#include <regex>
#include <set>

#include <fmt/format.h>

namespace ipmasq {

namespace {

struct NamedPriority {
	const char *name;
	int value;
};

// The standard priorities nft accepts and prints for a nat postrouting chain.
constexpr std::array<NamedPriority, 4> kPostroutingPriorities{{
	{"mangle", -150}, {"filter", 0}, {"security", 50}, {"srcnat", kSrcnatPriority},
}};

std::string trim(std::string_view s)
{
	const size_t b = s.find_first_not_of(" \t");
	if (b == std::string_view::npos)
		return {};
	const size_t e = s.find_last_not_of(" \t");
	return std::string(s.substr(b, e - b + 1));
}

std::optional<long> parseInteger(std::string_view text)
{
	long value = 0;
	const char *begin = text.data(), *end = text.data() + text.size();
	if (!text.empty() && text[0] == '+')
		begin++;
	const auto [p, ec] = std::from_chars(begin, end, value);
	if (begin == end || ec != std::errc() || p != end)
		return std::nullopt;
	return value;
}

} // namespace

Result<int> parseChainPriority(std::string_view text)
{
	const auto invalid = [&](std::string_view why) {
		return fail(fmt::format("--priority \"{}\": {} (write a number such as 110, or a name "
					"with an offset such as \"srcnat + 10\"; names: mangle, "
					"filter, security, srcnat)", text, why));
	};
	const std::string s = trim(text);
	long value = 0;
	if (auto number = parseInteger(s)) {
		value = *number;
	} else {
		const size_t op = s.find_first_of("+-");
		const std::string name = trim(s.substr(0, op));
		const NamedPriority *base = nullptr;
		for (const NamedPriority &p : kPostroutingPriorities)
			if (name == p.name)
				base = &p;
		if (!base)
			return invalid(fmt::format("\"{}\" is not a priority name for a nat postrouting "
						   "chain", name));
		value = base->value;
		if (op != std::string::npos) {
			auto offset = parseInteger(trim(s.substr(op + 1)));
			if (!offset || *offset > INT_MAX / 2)
				return invalid("the offset is not a number");
			value += s[op] == '+' ? *offset : -*offset;
		}
	}
	if (value < kMinNatPriority || value > INT_MAX / 2)
		return invalid(fmt::format("NAT chains must run after conntrack, so the priority must "
					   "be at least {}", kMinNatPriority));
	return static_cast<int>(value);
}

std::string formatChainPriority(int priority)
{
	for (const NamedPriority &p : kPostroutingPriorities) {
		const int offset = priority - p.value;
		if (offset == 0)
			return p.name;
		if (std::abs(offset) <= 10)
			return fmt::format("{} {} {}", p.name, offset > 0 ? '+' : '-', std::abs(offset));
	}
	return std::to_string(priority);
}

Status validateName(std::string_view what, std::string_view name)
{
	// nft's own identifier syntax, so the dry-run text parses and listings need no quoting.
	static const std::regex identifier("[A-Za-z_][A-Za-z0-9_.-]*");
	if (name.empty() || name.size() > 255 ||
	    !std::regex_match(name.begin(), name.end(), identifier))
		return fail(fmt::format("{} \"{}\" is not a valid nftables name: use 1 to 255 letters, "
					"digits, '_', '.' or '-', starting with a letter or '_'",
					what, name));
	// The kernel would take a keyword as a name, but nft (1.0.x cannot quote chain
	// names) could then neither list nor load the table: refuse the likely ones.
	// (Each of these was checked to break nft 1.0.6 as a table or chain name.)
	static const std::set<std::string_view> keywords{
		"accept", "add", "arp", "bridge", "chain", "comment", "counter", "create", "ct",
		"define", "delete", "dnat", "drop", "elements", "ether", "fib", "flags", "flush",
		"goto", "hook", "icmp", "icmpv6", "include", "inet", "insert", "interval", "ip",
		"ip6", "jump", "limit", "list", "log", "map", "mark", "masquerade", "meta",
		"monitor", "netdev", "numgen", "policy", "priority", "queue", "random", "redirect",
		"reject", "replace", "reset", "return", "rule", "sctp", "set", "snat", "table",
		"tcp", "type", "udp"};
	if (keywords.count(name))
		return fail(fmt::format("{} \"{}\" is an nft keyword: nft could not list or load a "
					"table using it as a name; choose another (e.g. in capitals)",
					what, name));
	return {};
}

Status validateRulesetOptions(const RulesetOptions &options)
{
	if (auto s = validateName("--table", options.table); !s)
		return s;
	if (auto s = validateName("--masq-chain", options.masqChain); !s)
		return s;
	if (options.masqChain == kBaseChainName)
		return fail(fmt::format("--masq-chain \"{}\" is the name of the agent's base chain; "
					"choose another name", options.masqChain));
	if (options.priority < kMinNatPriority)
		return fail(fmt::format("--priority {} is below {}: NAT chains must run after "
					"conntrack", options.priority, kMinNatPriority));
	return {};
}

Prefix linkLocalPrefix(Family family)
{
	return parsePrefix(family == Family::ipv4 ? "169.254.0.0/16" : "fe80::/10").value();
}

const AddressSet *Ruleset::findSet(Family family) const
{
	for (const AddressSet &set : sets)
		if (set.family() == family)
			return &set;
	return nullptr;
}

namespace {

AddressSet nonMasqueradeSet(Family family, const Config &config)
{
	std::vector<Prefix> prefixes = config.nonMasqueradeCIDRs;
	const bool masqLinkLocal =
		family == Family::ipv4 ? config.masqLinkLocal : config.masqLinkLocalIPv6;
	if (!masqLinkLocal)
		prefixes.push_back(linkLocalPrefix(family));

	AddressSet set{family == Family::ipv4 ? kSetNameV4 : kSetNameV6,
		       IntervalSet::fromPrefixes(family, prefixes), {}};
	set.comment = fmt::format("{} destinations not masqueraded: nonMasqueradeCIDRs{}",
				  familyName(family), masqLinkLocal ? "" : " and link-local");
	return set;
}

void addMasqueradeRules(Chain &chain, const RulesetOptions &options)
{
	// Spread flows over the ranges in proportion to their sizes, as upstream does with
	// "-m statistic --probability": rule i takes size_i of the flows still undecided,
	// so every range gets exactly size_i / total of all flows. The last takes the rest.
	uint32_t remaining = 0;
	for (const PortRange &range : options.toPorts)
		remaining += range.size();
	const uint32_t total = remaining;
	for (const PortRange &range : options.toPorts) {
		Masquerade masq{range, std::nullopt, options.randomFully};
		if (range.size() != remaining)
			masq.sample = RandomSample{remaining, range.size()};
		chain.rules.push_back(Rule{
			masq, fmt::format("tcp, udp and sctp get source ports {} ({} of {} ports)",
					  range.toString(), range.size(), total)});
		remaining -= range.size();
	}
	chain.rules.push_back(Rule{Masquerade{std::nullopt, std::nullopt, options.randomFully},
				   "outbound traffic is masqueraded (must be last in chain)"});
}

} // namespace

Ruleset buildRuleset(const Config &config, const RulesetOptions &options)
{
	Ruleset ruleset;
	ruleset.table = options.table;
	ruleset.comment = "managed by ip-masq-agent: edits are overwritten, change its config";

	std::vector<Family> families{Family::ipv4};
	if (options.enableIpv6)
		families.push_back(Family::ipv6);
	for (Family family : families)
		ruleset.sets.push_back(nonMasqueradeSet(family, config));

	Chain base{kBaseChainName, BaseChainHook{options.priority},
		   "nat postrouting hook of ip-masq-agent", {}};
	base.rules.push_back(Rule{
		JumpIfNotLocal{options.enableIpv6 ? std::nullopt : std::optional(Family::ipv4),
			       options.masqChain},
		fmt::format("non-local destinations go through {}", options.masqChain)});

	Chain masq{options.masqChain, std::nullopt,
		   "return for non-masquerade destinations, masquerade the rest", {}};
	for (const AddressSet &set : ruleset.sets)
		masq.rules.push_back(Rule{ReturnIfDestinationInSet{set.family(), set.name},
					  fmt::format("{} is not subject to masquerade", set.name)});
	addMasqueradeRules(masq, options);

	ruleset.chains.push_back(std::move(base));
	ruleset.chains.push_back(std::move(masq));
	return ruleset;
}

} // namespace ipmasq
