// SPDX-License-Identifier: Apache-2.0
// Test support: other components' NAT rules, written with the real iptables-nft and nft
// exactly as those components write them; the read + evaluate step the NAT tests share;
// and the rule-text parity check every NAT test runs on what it loaded: each rule the
// reader decoded prints as `nft -a list table` lists it, or marks the part it cannot print
// as nft does with `[unknown: ...]` (docs/design.md, "Rules as text"), and the check
// counts those parts by what they are.
#pragma once

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/diagnose/conflicts.h"
#include "ip-masq-agent/diagnose/evaluator.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/codec/rule_text.h"
#include "netns.h"

namespace ipmasq::test {

// kubelet (kubenet) and kube-proxy's --masquerade-all era: everything leaving the cluster
// CIDR is masqueraded. iptables writes the same rule with ip6tables for IPv6.
inline std::string kubeletRule(const std::string &iptables = "iptables-nft",
			       const std::string &clusterCidr = "10.0.0.0/8")
{
	return fmt::format("{} -w -t nat -A POSTROUTING ! -d {} -m addrtype ! --dst-type LOCAL "
			   "-j MASQUERADE", iptables, clusterCidr);
}

// Docker's bridge network: its own subnet, leaving by any other interface.
inline std::string dockerRule(const std::string &subnet = "172.17.0.0/16")
{
	return fmt::format("iptables-nft -w -t nat -A POSTROUTING -s {} ! -o docker0 -j MASQUERADE",
			   subnet);
}

// kubernetes-sigs/ip-masq-agent's chain, as its syncMasqRules writes it (comments included).
inline std::vector<std::string> upstreamAgentRules(const std::vector<std::string> &exempt)
{
	std::vector<std::string> rules{"iptables-nft -w -t nat -N IP-MASQ-AGENT"};
	for (const std::string &cidr : exempt)
		rules.push_back(fmt::format(
			"iptables-nft -w -t nat -A IP-MASQ-AGENT -d {} -m comment --comment "
			"\"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN", cidr));
	rules.push_back("iptables-nft -w -t nat -A IP-MASQ-AGENT -m comment --comment "
			"\"ip-masq-agent: outbound traffic is subject to MASQUERADE (must be last in "
			"chain)\" -j MASQUERADE");
	rules.push_back("iptables-nft -w -t nat -A POSTROUTING -m comment --comment "
			"\"ip-masq-agent: ensure nat POSTROUTING directs all non-LOCAL destination "
			"traffic to our custom IP-MASQ-AGENT chain\" -m addrtype ! --dst-type LOCAL "
			"-j IP-MASQ-AGENT");
	return rules;
}

// kube-proxy's nftables mode (pkg/proxy/nftables): its nat-postrouting chain jumps to
// `masquerading`, which masquerades only what a Service chain marked with 0x4000.
inline std::string kubeProxyTable()
{
	return R"(table ip kube-proxy {
	comment "rules for kube-proxy"
	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}
	chain masquerading {
		meta mark & 0x4000 == 0 return
		meta mark set meta mark ^ 0x4000
		masquerade fully-random
	}
}
)";
}

// The same decision as one rule in a table of its own, and kube-proxy's iptables mode.
inline std::string kubeProxyMarkTable()
{
	return R"(table ip kube-proxy-mark {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		meta mark & 0x4000 == 0x4000 masquerade
	}
}
)";
}

inline std::string kubeProxyIptablesRule()
{
	return "iptables-nft -w -t nat -A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE";
}

// kube-proxy's iptables mode: KUBE-POSTROUTING as it writes it (the MARK target clears
// the mark before the masquerade).
inline std::vector<std::string> kubeProxyIptablesChain()
{
	return {"iptables-nft -w -t nat -N KUBE-POSTROUTING",
		"iptables-nft -w -t nat -A POSTROUTING -m comment --comment \"kubernetes postrouting "
		"rules\" -j KUBE-POSTROUTING",
		"iptables-nft -w -t nat -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
		"iptables-nft -w -t nat -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000",
		"iptables-nft -w -t nat -A KUBE-POSTROUTING -m comment --comment \"kubernetes service "
		"traffic requiring SNAT\" -j MASQUERADE --random-fully"};
}

// Matches iptables-nft keeps as xtables compat expressions, unknown to the evaluator.
inline std::string statisticRule()
{
	return "iptables-nft -w -t nat -A POSTROUTING -m statistic --mode random --probability 0.5 "
	       "-j MASQUERADE";
}

inline std::string stringRule()
{
	return "iptables-nft -w -t nat -A POSTROUTING -m string --algo bm --string hello "
	       "-j MASQUERADE";
}

// iptables' NETMAP: the source's network bits replaced by `to`'s, its host bits kept.
inline std::string netmapRule(const std::string &source, const std::string &to)
{
	return fmt::format("iptables-nft -w -t nat -A POSTROUTING -s {} -j NETMAP --to {}", source, to);
}

// Native nft NAT statements whose addresses are computed: `snat prefix`, maps keyed on the
// source with prefix, address and range values (anonymous and named), a verdict map with a
// jump and a goto, marks set and tested, and an inet table SNATing both families.
inline std::string natMapsTable()
{
	return R"(table ip snatmaps {
	map prefixes {
		type ipv4_addr : interval ipv4_addr; flags interval
		elements = { 198.51.100.0/24 : 198.18.53.0/24 }
	}
	chain post {
		type nat hook postrouting priority srcnat - 5; policy accept;
		ip daddr vmap { 192.0.2.0/28 : jump prefix, 192.0.2.16/28 : goto bymap, 192.0.2.32/28 : return }
		meta mark set 0x10
		meta mark set meta mark | 0x20
		meta mark 0x30 ip daddr 192.0.2.48/28 masquerade
		meta mark and 0xf0 == 0x10 ip daddr 192.0.2.64/28 snat to 198.18.54.1-198.18.54.3
	}
	chain prefix {
		ip daddr 192.0.2.0/30 snat ip prefix to ip saddr map { 198.51.100.0/24 : 198.18.52.0/24 }
		ip daddr 192.0.2.4/30 snat prefix to 198.18.51.0/24
		snat ip prefix to ip saddr map @prefixes
	}
	chain bymap {
		ip daddr 192.0.2.16/30 snat to ip saddr map { 198.51.100.0/24 : 198.18.55.9 }
		snat ip to ip saddr map { 198.51.100.0/24 : 198.18.56.9-198.18.56.11 }
	}
}
table inet both {
	chain post {
		type nat hook postrouting priority srcnat - 5; policy accept;
		ip daddr 192.0.2.80/28 snat ip to 198.18.57.9
		ip6 daddr 2001:db8:3::/64 snat ip6 to 2001:db8:9::9
		ip6 daddr 2001:db8:4::/64 snat ip6 prefix to ip6 saddr map { 2001:db8:1::/64 : 2001:db8:5::/64 }
	}
}
)";
}

// Runs each command; fails the test on the first that fails.
inline void runAll(const std::vector<std::string> &commands)
{
	for (const std::string &command : commands)
		runOrFail(command);
}

// nft's own `nft flush ruleset` in this (private) namespace: a clean node again.
inline void flushRuleset()
{
	runOrFail("nft flush ruleset");
}

// Reads the kernel's NAT with the project's reader; fails the test if it cannot.
inline nft::NatRuleset readNat(const nft::NatReadLimits &limits = {})
{
	auto ruleset = nft::readNatRuleset(limits);
	INFO((ruleset ? "" : ruleset.error().message));
	REQUIRE(ruleset);
	return std::move(*ruleset);
}

inline const nft::Table *findTable(const nft::NatRuleset &ruleset, nft::TableFamily family,
				   const std::string &name)
{
	return ipmasq::findTable(ruleset, nullptr, family, name);
}

// The deciding rule as the renderer prints it, or "".
inline std::string decidingRuleText(const nft::NatRuleset &ruleset, const nat::Outcome &o,
				    const nft::Table *agent = nullptr)
{
	if (!o.rule)
		return {};
	const nft::Table *table = ipmasq::findTable(ruleset, agent, o.rule->family, o.rule->table);
	const nft::Rule *rule = table ? ipmasq::findRule(*table, *o.rule) : nullptr;
	return rule ? nft::ruleText(*table, *rule) : std::string();
}

// What the evaluator found, for failure messages.
inline std::string explainVerdict(const nft::NatRuleset &ruleset, const nat::NatVerdict &v,
				  const nft::Table *agent = nullptr)
{
	std::string out;
	for (const nat::Outcome &o : v.outcomes)
		out += "outcome: " + describeOutcome(o) + "  [" + decidingRuleText(ruleset, o, agent) + "]\n";
	for (const nat::MayPoint &m : v.mayPoints)
		out += fmt::format("may: table {} chain {} handle {}: {}\n", m.rule.table, m.rule.chain,
				   m.rule.handle, m.reason);
	return out;
}

// ---- Rule-text parity with nft ----

// A rule of `nft -a list table FAMILY NAME`: its chain and its text before "# handle N".
struct NftRule {
	std::string chain;
	std::string text;
};

// Each rule of a listing of `nft -a list table` (or chain), by handle.
inline std::map<uint64_t, NftRule> parseNftRules(const std::string &listing)
{
	std::map<uint64_t, NftRule> rules;
	std::istringstream in(listing);
	std::string line, chain;
	const std::regex handle(R"(^\s*(.*\S)\s+# handle (\d+)$)");
	const std::regex chainLine(R"(^\s*chain (\S+) \{ # handle \d+$)");
	std::smatch m;
	for (int lines = 0; lines < 1000000 && std::getline(in, line); lines++) {
		if (std::regex_match(line, m, chainLine)) {
			chain = m[1];
			continue;
		}
		// Declarations (table, set, map, counter...) open a block; a rule never does.
		if (std::regex_match(line, m, handle) && m[1].str().back() != '{')
			rules[std::stoull(m[2])] = {chain, m[1]};
	}
	return rules;
}

// Each rule of `nft -a list table FAMILY NAME`, by handle.
inline std::map<uint64_t, NftRule> nftRules(const std::string &family, const std::string &name)
{
	return parseNftRules(runOrFail("nft -a list table " + family + " " + name));
}

// The parts of `ours` that the printer marks as not printed as nft prints them
// (`[unknown: xt match statistic]`), or none: then it must equal nft's listing.
inline std::vector<std::string> unknownParts(const std::string &ours)
{
	std::vector<std::string> parts;
	for (size_t at = ours.find(nft::kUnknownMarker); at != std::string::npos;
	     at = ours.find(nft::kUnknownMarker, at + 1)) {
		const size_t end = ours.find(']', at);
		parts.push_back(ours.substr(at, end == std::string::npos ? std::string::npos : end + 1 - at));
	}
	return parts;
}

// What a parity check compared: rules, and how many printed a part as unknown (by part).
struct NftParity {
	size_t rules = 0;
	std::map<std::string, size_t> documented;
};

// Every rule of `table`, as the reader decoded it, against nft's listing of the same table
// in the kernel: each is listed by nft (by handle), and prints the same, or marks what it
// cannot print as unknown; and every rule nft lists in a chain the reader read was read.
// Returns what it compared.
inline NftParity requireNftText(const nft::Table &table)
{
	NftParity parity;
	if (!table.unreadable.empty()) {
		// Nothing decoded to compare: only its base chains were kept, without rules.
		for (const nft::Chain &chain : table.chains)
			CHECK(chain.rules.empty());
		return parity;
	}
	const auto listed = nftRules(nft::tableFamilyName(table.family), table.name);
	std::map<std::string, size_t> listedPerChain;
	for (const auto &[handle, rule] : listed)
		listedPerChain[rule.chain]++;
	for (const nft::Chain &chain : table.chains) {
		INFO("table " << nft::tableFamilyName(table.family) << " " << table.name << " chain " << chain.name);
		CHECK(chain.rules.size() == listedPerChain[chain.name]);
		for (const nft::Rule &rule : chain.rules) {
			const std::string ours = nft::ruleText(table, rule);
			const auto it = listed.find(rule.handle);
			INFO("rule handle " << rule.handle << ": ours \"" << ours << "\"");
			REQUIRE(it != listed.end());
			CHECK(it->second.chain == chain.name);
			parity.rules++;
			INFO("nft's \"" << it->second.text << "\"");
			const std::vector<std::string> unknown = unknownParts(ours);
			for (const std::string &part : unknown)
				parity.documented[part]++;
			if (unknown.empty())
				CHECK(ours == it->second.text);
		}
	}
	return parity;
}

// The same for every table of `ruleset` (what the reader read).
inline NftParity requireNftText(const nft::NatRuleset &ruleset)
{
	NftParity all;
	for (const nft::Table &table : ruleset.tables) {
		const NftParity one = requireNftText(table);
		all.rules += one.rules;
		for (const auto &[which, count] : one.documented)
			all.documented[which] += count;
	}
	return all;
}

// Every rule the agent quotes in `output` (its log, /readyz?verbose, --explain: "table
// FAMILY NAME chain ... rule handle N (`TEXT`)") against nft's listing of that handle in
// the kernel now, counters' values aside. Returns how many quotes it compared.
inline size_t requireQuotesAsNft(const std::string &output)
{
	const std::regex quote(R"(table (ip|ip6|inet) (\S+) chain [^`]*?rule handle (\d+)(?: in chain \S+)? \(`([^`]*)`\))");
	size_t compared = 0;
	for (auto it = std::sregex_iterator(output.begin(), output.end(), quote); it != std::sregex_iterator(); ++it) {
		const std::smatch &m = *it;
		const auto listed = nftRules(m[1].str(), m[2].str());
		const auto rule = listed.find(std::stoull(m[3].str()));
		INFO("quoted: " << m[0].str());
		REQUIRE(rule != listed.end());
		// A counter counts on between the agent's read and nft's.
		const std::regex counter(R"(counter packets \d+ bytes \d+)");
		const auto counted = [&counter](const std::string &text) {
			return std::regex_replace(text, counter, "counter packets N bytes N");
		};
		if (unknownParts(m[4].str()).empty())
			CHECK(counted(m[4].str()) == counted(rule->second.text));
		compared++;
	}
	return compared;
}

} // namespace ipmasq::test
