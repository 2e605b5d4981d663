// SPDX-License-Identifier: Apache-2.0
// The desired ruleset: a pure function from config + flags to the agent's table.
#include "ip-masq-agent/ruleset.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <libnftnl/udata.h>
#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/policy.h"

namespace ipmasq {

static_assert(kMaxNameLength == NFT_NAME_MAXLEN - 1);
static_assert(kMaxNftCommentLength == NFTNL_UDATA_COMMENT_MAXLEN);

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

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// A run of decimal digits (no sign) as a number that saturates at kSaturated instead of
// overflowing, whatever the length: anything above kMaxPriority stays above it, and
// base + or - offset cannot overflow 64 bits.
constexpr int64_t kSaturated = int64_t(1) << 40;
static_assert(kSaturated > int64_t(kMaxPriority) + 1000);

std::optional<int64_t> parseDigits(std::string_view text)
{
	if (text.empty())
		return std::nullopt;
	int64_t value = 0;
	for (const char c : text) {
		if (!isDigit(c))
			return std::nullopt;
		value = std::min(kSaturated, value * 10 + (c - '0'));
	}
	return value;
}

bool isNameStart(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool isNameChar(char c) { return isNameStart(c) || isDigit(c) || c == '.' || c == '-'; }

} // namespace

Result<int> parseChainPriority(std::string_view text)
{
	const auto invalid = [&](std::string_view why) {
		return fail(fmt::format("--priority {}: {} (write a number such as 110, or a name "
					"with an offset such as \"srcnat + 10\"; names: mangle, "
					"filter, security, srcnat)", quoted(text), why));
	};
	const std::string s = trim(text);
	if (s.empty())
		return invalid("it is empty");
	int64_t value = 0;
	if (isDigit(s[0]) || s[0] == '-' || s[0] == '+') {
		const bool sign = !isDigit(s[0]);
		const auto number = parseDigits(std::string_view(s).substr(sign ? 1 : 0));
		if (!number)
			return invalid("it is not a number");
		value = s[0] == '-' ? -*number : *number;
	} else {
		const size_t op = s.find_first_of("+-");
		const std::string name = trim(s.substr(0, op));
		const NamedPriority *base = nullptr;
		for (const NamedPriority &p : kPostroutingPriorities)
			if (name == p.name)
				base = &p;
		if (!base)
			return invalid(fmt::format("{} is not a priority name for a nat postrouting "
						   "chain", quoted(name)));
		value = base->value;
		if (op != std::string::npos) {
			const auto offset = parseDigits(trim(s.substr(op + 1)));
			if (!offset)
				return invalid(fmt::format("the offset after '{}' must be a number "
							   "without a sign", s[op]));
			value += s[op] == '+' ? *offset : -*offset;
		}
	}
	if (value < kMinNatPriority)
		return invalid(fmt::format("the priority must be at least {}: NAT chains must run "
					   "after conntrack (at -200)", kMinNatPriority));
	if (value > kMaxPriority)
		return invalid(fmt::format("the priority must be at most {}: the kernel holds it "
					   "as a signed 32-bit number", kMaxPriority));
	return static_cast<int>(value);
}

std::string formatChainPriority(int priority)
{
	for (const NamedPriority &p : kPostroutingPriorities) {
		// In 64 bits: INT_MIN or INT_MAX minus a standard priority must not overflow.
		const int64_t offset = int64_t(priority) - p.value;
		if (offset == 0)
			return p.name;
		if (offset >= -10 && offset <= 10)
			return fmt::format("{} {} {}", p.name, offset > 0 ? '+' : '-',
					   offset > 0 ? offset : -offset);
	}
	return std::to_string(priority);
}

Status validateName(std::string_view what, std::string_view name)
{
	// nft's own identifier syntax, so the dry-run text parses and listings need no quoting.
	const bool identifier = !name.empty() && isNameStart(name[0]) &&
				std::all_of(name.begin(), name.end(), isNameChar);
	if (!identifier)
		return fail(fmt::format("{} {} is not a valid nftables name: use letters, digits, "
					"'_', '.' or '-', starting with a letter or '_'",
					what, quoted(name)));
	if (name.size() > kMaxNameLength)
		return fail(fmt::format("{} is {} characters long: nftables names have at most {} "
					"(NFT_NAME_MAXLEN); choose a shorter one",
					what, name.size(), kMaxNameLength));
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
		return fail(fmt::format("{} {} is an nft keyword: nft could not list or load a "
					"table using it as a name; choose another (e.g. in capitals)",
					what, quoted(name)));
	return {};
}

namespace {

// Every comment the ruleset carries, with what it belongs to.
std::vector<std::pair<std::string, std::string>> comments(const Ruleset &ruleset)
{
	std::vector<std::pair<std::string, std::string>> out{{"the table", ruleset.comment}};
	for (const AddressSet &set : ruleset.sets)
		out.emplace_back("set " + set.name, set.comment);
	for (const Chain &chain : ruleset.chains) {
		out.emplace_back("chain " + chain.name, chain.comment);
		for (const Rule &rule : chain.rules)
			out.emplace_back("a rule of chain " + chain.name, rule.comment);
	}
	return out;
}

// Built-in constants, valid by construction.
Prefix constantPrefix(const char *text)
{
	return parsePrefix(text).value();
}

// Configs that between them make buildRuleset use every comment text it has: the
// defaults; exceptions and restricted sources in both families; sources of IPv4 only
// (an unrestricted IPv6 jump beside a restricted IPv4 one), and of IPv6 only.
std::vector<Config> configsWithEveryComment()
{
	Config both;
	both.masqueradeCIDRs = {constantPrefix("10.0.0.0/16"), constantPrefix("fe80::/64")};
	both.masqueradeSourceCIDRs = {constantPrefix("10.0.0.0/8"), constantPrefix("fd00::/8")};
	Config v4Sources;
	v4Sources.masqueradeSourceCIDRs = {constantPrefix("10.0.0.0/8")};
	Config v6Sources;
	v6Sources.masqueradeSourceCIDRs = {constantPrefix("fd00::/8")};
	return {Config{}, both, v4Sources, v6Sources};
}

} // namespace

Status validateRulesetOptions(const RulesetOptions &options)
{
	if (auto s = validateName("--table", options.table); !s)
		return s;
	if (auto s = validateName("--masq-chain", options.masqChain); !s)
		return s;
	if (options.masqChain == kBaseChainName)
		return fail(fmt::format("--masq-chain {} is the name of the agent's base chain; "
					"choose another name", quoted(options.masqChain)));
	if (options.priority < kMinNatPriority)
		return fail(fmt::format("--priority {} is below {}: NAT chains must run after "
					"conntrack", options.priority, kMinNatPriority));
	// Names appear inside comments (e.g. "non-local destinations go through <chain>").
	// Check the comments of the rulesets these options really build, rather than a
	// bound per name that would drift when a comment is reworded. The config chooses
	// among fixed texts only: these configs show every one of them.
	RulesetOptions widest = options;
	widest.enableIpv6 = true;
	std::vector<std::pair<std::string, std::string>> all;
	for (const Config &config : configsWithEveryComment())
		for (auto &entry : comments(buildRuleset(config, widest)))
			all.push_back(std::move(entry));
	for (const auto &[owner, comment] : all) {
		if (comment.size() <= kMaxNftCommentLength)
			continue;
		const size_t excess = comment.size() - kMaxNftCommentLength;
		if (comment.find(options.masqChain) != std::string::npos &&
		    options.masqChain.size() > excess)
			return fail(fmt::format("--masq-chain is {} characters long: the comment of "
						"{} embeds it and would be {} characters, over nft's "
						"limit of {}; use at most {} characters",
						options.masqChain.size(), owner, comment.size(),
						kMaxNftCommentLength, options.masqChain.size() - excess));
		return fail(fmt::format("the comment of {} would be {} characters, over nft's "
					"limit of {}", owner, comment.size(), kMaxNftCommentLength));
	}
	return {};
}

Prefix linkLocalPrefix(Family family)
{
	return parsePrefix(family == Family::ipv4 ? "169.254.0.0/16" : "fe80::/10").value();
}

const AddressSet *Ruleset::findSet(Family family) const
{
	const char *name = destinationSetName(family);
	for (const AddressSet &set : sets)
		if (set.family() == family && set.name == name)
			return &set;
	return nullptr;
}

namespace {

bool hasFamily(const std::vector<Prefix> &prefixes, Family family)
{
	return std::any_of(prefixes.begin(), prefixes.end(),
			   [family](const Prefix &p) { return p.network.family == family; });
}

// The kernel sees the resolved result: one set, one lookup per packet, however the
// exceptions nest (policy.h).
AddressSet nonMasqueradeSet(Family family, const Config &config)
{
	AddressSet set{destinationSetName(family), resolveNonMasquerade(config, family), {}};
	set.comment = fmt::format("{} destinations not masqueraded: nonMasqueradeCIDRs{}{}",
				  familyName(family),
				  config.masqueradesLinkLocal(family) ? "" : " and link-local",
				  hasFamily(config.masqueradeCIDRs, family)
					  ? kExceptionsCommentSuffix
					  : "");
	return set;
}

// Only sources in this set are masqueraded (masqueradeSourceCIDRs of one family).
AddressSet sourceSet(Family family, const Config &config)
{
	AddressSet set{sourceSetName(family), masqueradeSources(config, family), {}};
	set.comment = fmt::format("{} sources masqueraded: masqueradeSourceCIDRs", familyName(family));
	return set;
}

// The base chain's jumps: one for every family at once (or IPv4 only) as upstream, or,
// when masqueradeSourceCIDRs restricts a family, one per family, the restricted ones
// matching their source set. Their comments do not embed the chain's name, so they do
// not lower the longest --masq-chain that fits.
void addJumpRules(Chain &base, const std::vector<Family> &families, const Ruleset &ruleset,
		  const RulesetOptions &options)
{
	const auto sourceSetOf = [&ruleset](Family family) -> const AddressSet * {
		const char *name = sourceSetName(family);
		for (const AddressSet &set : ruleset.sets)
			if (set.name == name)
				return &set;
		return nullptr;
	};
	const bool restricted = std::any_of(families.begin(), families.end(), sourceSetOf);
	if (!restricted) {
		base.rules.push_back(Rule{
			JumpIfNotLocal{options.enableIpv6 ? std::nullopt : std::optional(Family::ipv4),
				       options.masqChain, {}},
			fmt::format("non-local destinations go through {}", options.masqChain)});
		return;
	}
	for (const Family family : families) {
		if (const AddressSet *sources = sourceSetOf(family))
			base.rules.push_back(Rule{
				JumpIfNotLocal{family, options.masqChain, sources->name},
				fmt::format("{} sources in masqueradeSourceCIDRs, to non-local "
					    "destinations", familyName(family))});
		else
			base.rules.push_back(Rule{
				JumpIfNotLocal{family, options.masqChain, {}},
				fmt::format("every {} source (masqueradeSourceCIDRs lists no {}), to "
					    "non-local destinations", familyName(family), familyName(family))});
	}
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
	// Source sets only where masqueradeSourceCIDRs lists the family: without the key the
	// table is exactly upstream's.
	for (Family family : families)
		if (hasFamily(config.masqueradeSourceCIDRs, family))
			ruleset.sets.push_back(sourceSet(family, config));

	Chain base{kBaseChainName, BaseChainHook{options.priority},
		   "nat postrouting hook of ip-masq-agent", {}};
	addJumpRules(base, families, ruleset, options);

	Chain masq{options.masqChain, std::nullopt,
		   "return for non-masquerade destinations, masquerade the rest", {}};
	for (Family family : families)
		if (const AddressSet *set = ruleset.findSet(family))
			masq.rules.push_back(Rule{ReturnIfDestinationInSet{set->family(), set->name},
						  fmt::format("{} is not subject to masquerade", set->name)});
	addMasqueradeRules(masq, options);

	ruleset.chains.push_back(std::move(base));
	ruleset.chains.push_back(std::move(masq));
	return ruleset;
}

} // namespace ipmasq
