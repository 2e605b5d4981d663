// SPDX-License-Identifier: Apache-2.0
// Test support: other components' NAT rules, written with the real iptables-nft and nft
// exactly as those components write them; the read + evaluate step the NAT tests share;
// and the rule-text parity check every NAT test runs on what it loaded: each rule the
// reader decoded prints as `nft -a list table` lists it, or differs only as
// docs/design.md ("Rules as text") documents, and the check says which difference and why.
#pragma once

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/other_tables/evaluator.h"
#include "ip-masq-agent/other_tables/reader.h"
#include "ip-masq-agent/other_tables/rule_text.h"
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
inline nat::NatRuleset readNat(const nat::NatReadLimits &limits = {})
{
	auto ruleset = nat::readNatRuleset(limits);
	INFO((ruleset ? "" : ruleset.error().message));
	REQUIRE(ruleset);
	return std::move(*ruleset);
}

inline const nat::Table *findTable(const nat::NatRuleset &ruleset, nat::TableFamily family,
				   const std::string &name)
{
	return nat::findTable(ruleset, nullptr, family, name);
}

// The deciding rule as the renderer prints it, or "".
inline std::string decidingRuleText(const nat::NatRuleset &ruleset, const nat::Outcome &o,
				    const nat::Table *agent = nullptr)
{
	if (!o.rule)
		return {};
	const nat::Table *table = nat::findTable(ruleset, agent, o.rule->family, o.rule->table);
	const nat::Rule *rule = table ? nat::findRule(*table, *o.rule) : nullptr;
	return rule ? nat::ruleText(*table, *rule) : std::string();
}

// What the evaluator found, for failure messages.
inline std::string explainVerdict(const nat::NatRuleset &ruleset, const nat::NatVerdict &v,
				  const nat::Table *agent = nullptr)
{
	std::string out;
	for (const nat::Outcome &o : v.outcomes)
		out += "outcome: " + nat::describeOutcome(o) + "  [" + decidingRuleText(ruleset, o, agent) + "]\n";
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

// Each rule of `nft -a list table FAMILY NAME`, by handle.
inline std::map<uint64_t, NftRule> nftRules(const std::string &family, const std::string &name)
{
	const std::string listing = runOrFail("nft -a list table " + family + " " + name);
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

// One space between words, none at the ends.
inline std::string singleSpaced(const std::string &s)
{
	return std::regex_replace(std::regex_replace(s, std::regex("  +"), " "), std::regex("^ | $"), "");
}

// Where our text may differ from nft 1.0.6's for a rule, as docs/design.md ("Rules as
// text") documents, with both texts brought to a common form. Applied only to a rule
// whose decoded statements show the cause; every other rule must print exactly as nft's.
struct NftTextDifference {
	std::string which; // the documented difference, for the failure message and the tally
	std::string ours, nfts; // both texts with the difference taken out
};

inline std::optional<NftTextDifference> documentedDifference(const nat::Rule &rule, std::string ours,
							     std::string nfts)
{
	std::vector<std::string> which;
	for (const nat::Statement &s : rule.statements) {
		if (const auto *note = std::get_if<nat::Note>(&s); note && note->text.rfind("comment \"", 0) == 0) {
			// nft 1.0.6 prints nothing for an xtables comment (and leaves two spaces);
			// ours names it, so the comment the component wrote is not lost.
			const std::string &quoted = note->text;
			const size_t at = ours.find(quoted);
			REQUIRE(at != std::string::npos);
			ours.erase(at, quoted.size());
			which.push_back("an iptables comment, which nft 1.0.6 does not print");
		}
		if (const auto *u = std::get_if<nat::Undecodable>(&s); u && u->text() == "xt match statistic") {
			// nft translates -m statistic to `meta random & ... < ...`; the evaluator
			// does not understand it, and the text says so by naming the xtables match.
			nfts = std::regex_replace(nfts, std::regex(R"(meta random & \d+ < \d+)"), u->text());
			which.push_back("an iptables match nft translates (statistic) and the evaluator "
					"does not understand, printed as `xt match statistic`");
		}
	}
	if (which.empty())
		return std::nullopt;
	return NftTextDifference{fmt::format("{}", fmt::join(which, "; ")), singleSpaced(ours), singleSpaced(nfts)};
}

// What a parity check compared: rules, and how many differed as documented (by kind).
struct NftParity {
	size_t rules = 0;
	std::map<std::string, size_t> documented;
};

// Every rule of `table`, as the reader decoded it, against nft's listing of the same table
// in the kernel: each is listed by nft (by handle), and prints the same, or differs only
// as documentedDifference() allows; and every rule nft lists in a chain the reader read
// was read. Returns what it compared.
inline NftParity requireNftText(const nat::Table &table)
{
	NftParity parity;
	if (!table.unreadable.empty()) {
		// Nothing decoded to compare: only its base chains were kept, without rules.
		for (const nat::Chain &chain : table.chains)
			CHECK(chain.rules.empty());
		return parity;
	}
	const auto listed = nftRules(nat::tableFamilyName(table.family), table.name);
	std::map<std::string, size_t> listedPerChain;
	for (const auto &[handle, rule] : listed)
		listedPerChain[rule.chain]++;
	for (const nat::Chain &chain : table.chains) {
		INFO("table " << nat::tableFamilyName(table.family) << " " << table.name << " chain " << chain.name);
		CHECK(chain.rules.size() == listedPerChain[chain.name]);
		for (const nat::Rule &rule : chain.rules) {
			const std::string ours = nat::ruleText(table, rule);
			const auto it = listed.find(rule.handle);
			INFO("rule handle " << rule.handle << ": ours \"" << ours << "\"");
			REQUIRE(it != listed.end());
			CHECK(it->second.chain == chain.name);
			parity.rules++;
			INFO("nft's \"" << it->second.text << "\"");
			if (const auto difference = documentedDifference(rule, ours, it->second.text)) {
				INFO("a documented difference (docs/design.md, \"Rules as text\"): " << difference->which);
				CHECK(difference->ours == difference->nfts);
				parity.documented[difference->which]++;
				continue;
			}
			CHECK(ours == it->second.text);
		}
	}
	return parity;
}

// The same for every table of `ruleset` (what the reader read).
inline NftParity requireNftText(const nat::NatRuleset &ruleset)
{
	NftParity all;
	for (const nat::Table &table : ruleset.tables) {
		const NftParity one = requireNftText(table);
		all.rules += one.rules;
		for (const auto &[which, count] : one.documented)
			all.documented[which] += count;
	}
	return all;
}

} // namespace ipmasq::test
