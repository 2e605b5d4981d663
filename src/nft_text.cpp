// SPDX-License-Identifier: Apache-2.0
// The dry-run renderer: prints the desired ruleset as nft syntax.
#include "ip-masq-agent/nft_text.h"

#include <fmt/format.h>

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

void renderSet(std::string &out, const AddressSet &set)
{
	out += fmt::format("\tset {} {{\n", set.name);
	out += fmt::format("\t\ttype {}\n", addressType(set.family()));
	out += "\t\tflags interval\n";
	if (!set.comment.empty())
		out += fmt::format("\t\tcomment \"{}\"\n", set.comment);
	const auto &ranges = set.elements.ranges();
	for (size_t i = 0; i < ranges.size(); i++) {
		out += i == 0 ? "\t\telements = { " : "\t\t\t     ";
		out += ranges[i].toString();
		out += i + 1 == ranges.size() ? " }\n" : ",\n";
	}
	out += "\t}\n";
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
		out += "\t\t" + renderStatement(rule.statement);
		if (!rule.comment.empty())
			out += fmt::format(" comment \"{}\"", rule.comment);
		out += "\n";
	}
	out += "\t}\n";
}

} // namespace

std::string renderStatement(const Statement &statement)
{
	return std::visit(
		Overloaded{
			[](const JumpIfNotLocal &s) {
				std::string out;
				// "ip saddr" implies the family, and nft lists it without the
				// meta nfproto match it adds.
				if (!s.sourceSet.empty())
					out = fmt::format("{} saddr @{} ",
							  s.onlyFamily == Family::ipv6 ? "ip6" : "ip",
							  s.sourceSet);
				else if (s.onlyFamily)
					out = fmt::format("meta nfproto {} ", nfprotoName(*s.onlyFamily));
				return out + fmt::format("fib daddr type != local jump {}", s.target);
			},
			[](const ReturnIfDestinationInSet &s) {
				return fmt::format("{} daddr @{} return",
						   s.family == Family::ipv4 ? "ip" : "ip6", s.set);
			},
			[](const Masquerade &s) {
				std::string out;
				if (s.toPorts)
					out += "meta l4proto { tcp, udp, sctp } ";
				if (s.sample)
					out += fmt::format("numgen random mod {} < {} ", s.sample->modulus,
							   s.sample->below);
				out += "masquerade";
				if (s.toPorts)
					out += " to :" + s.toPorts->toString();
				if (s.fullyRandom)
					out += " fully-random";
				return out;
			},
		},
		statement);
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
