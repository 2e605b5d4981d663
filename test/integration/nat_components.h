// SPDX-License-Identifier: Apache-2.0
// Test support: other components' NAT rules, written with the real iptables-nft and nft
// exactly as those components write them, and the read + evaluate step the NAT tests share.
#pragma once

#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "ip-masq-agent/nat_evaluator.h"
#include "ip-masq-agent/nat_rule_text.h"
#include "ip-masq-agent/netlink/nat_reader.h"
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
inline nat::NatRuleset readNat()
{
	auto socket = netlink::Socket::open();
	INFO((socket ? "" : socket.error().message));
	REQUIRE(socket);
	auto ruleset = netlink::readNatRuleset(*socket);
	INFO((ruleset ? "" : ruleset.error().message));
	REQUIRE(ruleset);
	return std::move(*ruleset);
}

inline const nat::Table *findTable(const nat::NatRuleset &ruleset, nat::TableFamily family,
				   const std::string &name)
{
	for (const nat::Table &t : ruleset.tables)
		if (t.family == family && t.name == name)
			return &t;
	return nullptr;
}

// The deciding rule as the renderer prints it, or "".
inline std::string decidingRuleText(const nat::NatRuleset &ruleset, const nat::Outcome &o)
{
	if (!o.rule)
		return {};
	const nat::Table *table = findTable(ruleset, o.rule->family, o.rule->table);
	const nat::Rule *rule = nat::findRule(ruleset, *o.rule);
	return table && rule ? nat::ruleText(*table, *rule) : std::string();
}

// What the evaluator found, for failure messages.
inline std::string explainVerdict(const nat::NatRuleset &ruleset, const nat::NatVerdict &v)
{
	std::string out;
	for (const nat::Outcome &o : v.outcomes)
		out += "outcome: " + nat::describeOutcome(o) + "  [" + decidingRuleText(ruleset, o) + "]\n";
	for (const nat::MayPoint &m : v.mayPoints)
		out += fmt::format("may: table {} chain {} handle {}: {}\n", m.rule.table, m.rule.chain,
				   m.rule.handle, m.reason);
	return out;
}

} // namespace ipmasq::test
