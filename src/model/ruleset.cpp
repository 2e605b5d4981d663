// SPDX-License-Identifier: Apache-2.0
// The ruleset model's own rules: nft names, priorities and the comment limit.
#include "ip-masq-agent/model/ruleset.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>

#include <fmt/format.h>
#include <libnftnl/udata.h>
#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/escape.h"

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

using ascii::isDigit;

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

struct CounterNaming {
	Decision decision;
	DecisionReason reason;
	const char *prefix;
};

constexpr CounterNaming kCounterNames[] = {
	{Decision::notMasqueraded, DecisionReason::destination, "nomasq-dst"},
	{Decision::notMasqueraded, DecisionReason::source, "nomasq-src"},
	{Decision::notMasqueraded, DecisionReason::interface, "nomasq-iface"},
	{Decision::masqueraded, DecisionReason::none, "masq"},
	{Decision::snat, DecisionReason::none, "snat"},
	{Decision::guardObserved, DecisionReason::newConnections, "guard-observed-rate"},
	{Decision::guardObserved, DecisionReason::openConnections, "guard-observed-open"},
	{Decision::guardDropped, DecisionReason::newConnections, "guard-dropped-rate"},
	{Decision::guardDropped, DecisionReason::openConnections, "guard-dropped-open"},
};

const char *familySuffix(Family family)
{
	return family == Family::ipv4 ? "-v4" : "-v6";
}

} // namespace

std::string counterName(const CounterLabel &label)
{
	for (const CounterNaming &naming : kCounterNames)
		if (naming.decision == label.decision && naming.reason == label.reason)
			return std::string(naming.prefix) + familySuffix(label.family);
	return "unknown";
}

std::optional<CounterLabel> counterLabelOf(std::string_view name)
{
	for (const CounterNaming &naming : kCounterNames)
		for (const Family family : {Family::ipv4, Family::ipv6})
			if (name == std::string(naming.prefix) + familySuffix(family))
				return CounterLabel{family, naming.decision, naming.reason};
	return std::nullopt;
}

const char *decisionName(Decision decision)
{
	switch (decision) {
	case Decision::notMasqueraded: return "not_masqueraded";
	case Decision::masqueraded: return "masqueraded";
	case Decision::snat: return "snat";
	case Decision::guardObserved: return "guard_observed";
	case Decision::guardDropped: return "guard_dropped";
	}
	return "unknown";
}

const char *reasonName(DecisionReason reason)
{
	switch (reason) {
	case DecisionReason::destination: return "destination";
	case DecisionReason::source: return "source";
	case DecisionReason::interface: return "interface";
	case DecisionReason::none: return "none";
	case DecisionReason::newConnections: return "new_connections";
	case DecisionReason::openConnections: return "open_connections";
	}
	return "unknown";
}

bool isGuardDecision(Decision decision)
{
	return decision == Decision::guardObserved || decision == Decision::guardDropped;
}

const char *guardLimitName(GuardLimitKind kind)
{
	switch (kind) {
	case GuardLimitKind::newConnections: return "rate";
	case GuardLimitKind::openConnections: return "open";
	}
	return "unknown";
}

std::string guardExemptSetName(Family family)
{
	return std::string("guard-exempt") + familySuffix(family);
}

std::string guardTrackSetName(GuardLimitKind kind, Family family)
{
	return fmt::format("guard-{}{}", guardLimitName(kind), familySuffix(family));
}

std::string guardOverSetName(GuardLimitKind kind, Family family)
{
	return fmt::format("guard-over-{}{}", guardLimitName(kind), familySuffix(family));
}

Status checkCommentLength(std::string_view what, const std::string &comment)
{
	if (comment.size() > kMaxNftCommentLength)
		return fail(fmt::format("the comment of {} is {} characters long; nftables allows "
					"at most {}", what, comment.size(), kMaxNftCommentLength));
	return {};
}

const AddressSet *Ruleset::findSet(Family family) const
{
	const AddressSet *set = findSet(destinationSetName(family));
	return set && set->family() == family ? set : nullptr;
}

const AddressSet *Ruleset::findSet(std::string_view name) const
{
	return ipmasq::findSet(sets, name);
}

const AddressSet *findSet(const std::vector<AddressSet> &sets, std::string_view name)
{
	for (const AddressSet &set : sets)
		if (set.name == name)
			return &set;
	return nullptr;
}

} // namespace ipmasq
