// SPDX-License-Identifier: Apache-2.0
// The dry-run renderer: prints the desired ruleset as nft syntax, its rules as the codec
// reads them back from their encoding.
#include "ip-masq-agent/nft/nft_text.h"

#include <utility>

#include <fmt/format.h>

#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/nft/objects.h"

namespace ipmasq {

namespace {

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

// A time as nft lists it: "2s", "10m", "1h30m", "1s500ms".
std::string nftTime(uint64_t ms)
{
	static constexpr std::pair<uint64_t, const char *> kUnits[] = {
		{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
	std::string out;
	for (const auto &[size, unit] : kUnits)
		if (ms >= size) {
			out += fmt::format("{}{}", ms / size, unit);
			ms %= size;
		}
	return out.empty() ? "0s" : out;
}

void renderDynamicSet(std::string &out, const DynamicSet &set)
{
	const char *address = addressType(set.family);
	out += fmt::format("\tset {} {{\n", set.name);
	out += fmt::format("\t\ttype {} . {} . inet_proto . inet_service\n", address, address);
	out += fmt::format("\t\tsize {}\n", set.size);
	out += set.timeoutMs ? "\t\tflags dynamic,timeout\n" : "\t\tflags dynamic\n";
	if (set.counter)
		out += "\t\tcounter\n";
	if (set.timeoutMs)
		out += fmt::format("\t\ttimeout {}\n", nftTime(set.timeoutMs));
	if (!set.comment.empty())
		out += fmt::format("\t\tcomment \"{}\"\n", set.comment);
	out += "\t}\n";
}

// The rules' text is the codec's reading of the encoded rule (objects.h: EncodedRule::text).
void renderChain(std::string &out, const Chain &chain, const netlink::EncodedChain &encoded)
{
	out += fmt::format("\tchain {} {{\n", chain.name);
	if (!chain.comment.empty())
		out += fmt::format("\t\tcomment \"{}\"\n", chain.comment);
	if (chain.hook)
		out += fmt::format("\t\ttype nat hook postrouting priority {}; policy accept;\n",
				   formatChainPriority(chain.hook->priority));
	for (size_t i = 0; i < chain.rules.size(); i++) {
		out += "\t\t" + encoded.rules[i].text;
		if (!chain.rules[i].comment.empty())
			out += fmt::format(" comment \"{}\"", chain.rules[i].comment);
		out += "\n";
	}
	out += "\t}\n";
}

} // namespace

Result<std::string> renderTable(const Ruleset &ruleset)
{
	auto encoded = netlink::encodeRuleset(ruleset);
	if (!encoded)
		return fail(encoded.error());
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
	for (const DynamicSet &set : ruleset.dynamicSets) {
		separate();
		renderDynamicSet(out, set);
	}
	for (const AddressSet &set : ruleset.sets) {
		separate();
		renderSet(out, set);
	}
	for (size_t i = 0; i < ruleset.chains.size(); i++) {
		separate();
		renderChain(out, ruleset.chains[i], encoded->chains[i]);
	}
	out += "}\n";
	return out;
}

Result<std::string> renderNftScript(const Ruleset &ruleset, const std::vector<std::string> &headerComments)
{
	auto table = renderTable(ruleset);
	if (!table)
		return table;
	std::string out = "#!/usr/sbin/nft -f\n";
	for (const std::string &line : headerComments)
		out += line.empty() ? "#\n" : "# " + line + "\n";
	// "table" alone creates the table if it is missing, so that "delete" cannot fail:
	// nft applies the whole file as one transaction, so the old table is replaced
	// atomically and no packet ever sees an empty or half-built one.
	out += fmt::format("table inet {}\n", ruleset.table);
	out += fmt::format("delete table inet {}\n", ruleset.table);
	return out + *table;
}

} // namespace ipmasq
