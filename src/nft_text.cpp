// SPDX-License-Identifier: Apache-2.0
// The dry-run renderer: prints the desired ruleset as nft syntax.
#include "ip-masq-agent/nft_text.h"

#include <fmt/format.h>

#include "ip-masq-agent/egress.h"

namespace ipmasq {

namespace {

const char *nfprotoName(Family family)
{
	return family == Family::ipv4 ? "ipv4" : "ipv6";
}

const char *addressType(Family family)
{
	return family == Family::ipv4 ? "ipv4_addr" : "ipv6_addr";
}

// A set's elements as nft lists them: ranges of addresses, or interface names in quotes
// (a range of interface keys is the names and wildcards it is made of).
std::vector<std::string> elementTexts(const AddressSet &set)
{
	std::vector<std::string> texts;
	for (const AddressRange &range : set.elements.ranges()) {
		if (!set.interfaceNames) {
			texts.push_back(range.toString());
			continue;
		}
		for (const InterfacePattern &pattern : interfacePatternsOf(range))
			texts.push_back(fmt::format("\"{}\"", pattern.toString()));
	}
	return texts;
}

void renderSet(std::string &out, const AddressSet &set)
{
	out += fmt::format("\tset {} {{\n", set.name);
	out += fmt::format("\t\ttype {}\n",
			   set.interfaceNames ? "ifname" : addressType(set.family()));
	out += "\t\tflags interval\n";
	if (!set.comment.empty())
		out += fmt::format("\t\tcomment \"{}\"\n", set.comment);
	const std::vector<std::string> elements = elementTexts(set);
	for (size_t i = 0; i < elements.size(); i++) {
		out += i == 0 ? "\t\telements = { " : "\t\t\t     ";
		out += elements[i];
		out += i + 1 == elements.size() ? " }\n" : ",\n";
	}
	out += "\t}\n";
}

// What a NAT statement with --to-ports matches and samples before it:
// "meta l4proto { tcp, udp, sctp } numgen random mod M < B ".
std::string portSelection(const std::optional<PortRange> &toPorts,
			  const std::optional<RandomSample> &sample)
{
	std::string out;
	if (toPorts)
		out += "meta l4proto { tcp, udp, sctp } ";
	if (sample)
		out += fmt::format("numgen random mod {} < {} ", sample->modulus, sample->below);
	return out;
}

// An address as snat's target: IPv6 in brackets when ports follow, as nft prints it.
std::string natAddress(const Address &address, bool portsFollow)
{
	// fmt, not "[" + string: g++ 12 at -O3 reports a bogus -Wrestrict for a string literal
	// inserted before a std::string (GCC bug 105329); the same below.
	return address.family == Family::ipv6 && portsFollow ? fmt::format("[{}]", address.toString())
							     : address.toString();
}

void renderChain(std::string &out, const Chain &chain)
{
	out += fmt::format("\tchain {} {{\n", chain.name);
	if (!chain.comment.empty())
		out += fmt::format("\t\tcomment \"{}\"\n", chain.comment);
	if (chain.hook)
		out += fmt::format("\t\ttype nat hook postrouting priority {}; policy accept;\n",
				   formatChainPriority(chain.hook->priority));
	for (const Rule &rule : chain.rules) {
		out += "\t\t" + renderRuleBody(rule);
		if (!rule.comment.empty())
			out += fmt::format(" comment \"{}\"", rule.comment);
		out += "\n";
	}
	out += "\t}\n";
}

} // namespace

namespace {

// "meta nfproto ipv4 " before a statement restricted to a family, or nothing.
std::string familyMatch(const std::optional<Family> &family)
{
	return family ? fmt::format("meta nfproto {} ", nfprotoName(*family)) : std::string();
}

// A statement as nft lists it, in two parts: what it matches, and its verdict or NAT,
// between which a rule's counter goes.
struct StatementText {
	std::string matches;
	std::string action;
};

// One overload per kind: a new kind is a compile error in statementText until it has one.
StatementText textOf(const JumpIfNotLocal &s)
{
	std::string out;
	if (!s.outputInterfaceSet.empty())
		out = fmt::format("oifname @{} ", s.outputInterfaceSet);
	// "ip saddr" implies the family, and nft lists it without the meta nfproto match it adds.
	if (!s.sourceSet.empty())
		out += fmt::format("{} saddr @{} ", s.onlyFamily == Family::ipv6 ? "ip6" : "ip", s.sourceSet);
	else
		out += familyMatch(s.onlyFamily);
	return StatementText{out + "fib daddr type != local ", fmt::format("jump {}", s.target)};
}

StatementText textOf(const ReturnIfDestinationInSet &s)
{
	return StatementText{fmt::format("{} daddr @{} ", s.family == Family::ipv4 ? "ip" : "ip6", s.set),
			     "return"};
}

StatementText textOf(const ReturnIfOutputInterfaceInSet &s)
{
	return StatementText{familyMatch(s.family) + fmt::format("oifname @{} ", s.set), "return"};
}

StatementText textOf(const MatchUnlistedSource &s)
{
	std::string out;
	if (!s.outputInterfaceSet.empty())
		out = fmt::format("oifname @{} ", s.outputInterfaceSet);
	return StatementText{out + fmt::format("{} saddr != @{} fib daddr type != local ",
					       s.family == Family::ipv4 ? "ip" : "ip6", s.sourceSet),
			     ""};
}

StatementText textOf(const SourceNat &s)
{
	const bool ports = s.toPorts.has_value();
	std::string action = fmt::format("snat {} to {}", s.family == Family::ipv4 ? "ip" : "ip6",
					 natAddress(s.to.first, ports));
	if (s.to.last != s.to.first)
		action += fmt::format("-{}", natAddress(s.to.last, ports));
	if (ports)
		action += fmt::format(":{}", s.toPorts->toString());
	if (s.fullyRandom)
		action += " fully-random";
	return StatementText{familyMatch(s.matchFamily ? std::optional(s.family) : std::nullopt) +
				     portSelection(s.toPorts, s.sample),
			     action};
}

StatementText textOf(const Masquerade &s)
{
	std::string action = "masquerade";
	if (s.toPorts)
		action += " to :" + s.toPorts->toString();
	if (s.fullyRandom)
		action += " fully-random";
	return StatementText{familyMatch(s.onlyFamily) + portSelection(s.toPorts, s.sample), action};
}

StatementText statementText(const Statement &statement)
{
	return std::visit([](const auto &s) { return textOf(s); }, statement);
}

// A text and the next part, one space apart where both are there.
std::string joined(std::string head, const std::string &tail)
{
	if (tail.empty()) {
		while (!head.empty() && head.back() == ' ')
			head.pop_back();
		return head;
	}
	return head + tail;
}

} // namespace

std::string renderStatement(const Statement &statement)
{
	const StatementText text = statementText(statement);
	return joined(text.matches, text.action);
}

std::string renderRuleBody(const Rule &rule)
{
	const StatementText text = statementText(rule.statement);
	if (rule.counter.empty())
		return joined(text.matches, text.action);
	return joined(text.matches + fmt::format("counter name \"{}\" ", rule.counter), text.action);
}

std::string renderTable(const Ruleset &ruleset)
{
	std::string out = fmt::format("table inet {} {{\n", ruleset.table);
	if (!ruleset.comment.empty())
		out += fmt::format("\tcomment \"{}\"\n", ruleset.comment);
	bool first = true;
	const auto separate = [&] {
		if (!first)
			out += "\n";
		first = false;
	};
	for (const NamedCounter &counter : ruleset.counters) {
		separate();
		out += fmt::format("\tcounter {} {{\n", counter.name);
		if (!counter.comment.empty())
			out += fmt::format("\t\tcomment \"{}\"\n", counter.comment);
		// A table as the dry run makes it: every counter starts at zero.
		out += "\t\tpackets 0 bytes 0\n\t}\n";
	}
	for (const AddressSet &set : ruleset.sets) {
		separate();
		renderSet(out, set);
	}
	for (const Chain &chain : ruleset.chains) {
		separate();
		renderChain(out, chain);
	}
	out += "}\n";
	return out;
}

std::string renderNftScript(const Ruleset &ruleset, const std::vector<std::string> &headerComments)
{
	std::string out = "#!/usr/sbin/nft -f\n";
	for (const std::string &line : headerComments)
		out += line.empty() ? "#\n" : "# " + line + "\n";
	// "table" alone creates the table if it is missing, so that "delete" cannot fail:
	// nft applies the whole file as one transaction, so the old table is replaced
	// atomically and no packet ever sees an empty or half-built one.
	out += fmt::format("table inet {}\n", ruleset.table);
	out += fmt::format("delete table inet {}\n", ruleset.table);
	out += renderTable(ruleset);
	return out;
}

} // namespace ipmasq
