// SPDX-License-Identifier: Apache-2.0
// The NAT evaluator on tables built as data (kernel expressions through the real decoder):
// every expression and verdict kind, jumps, sets, maps and verdict maps, priority order and
// ties, the agent's own table walked like any other, NETMAP and prefix maps, bounds, and
// "may".
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>
#include <linux/rtnetlink.h>

#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/diagnose/conflicts.h"
#include "ip-masq-agent/diagnose/evaluator.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/codec/rule_text.h"
#include "../common/nat_builders.h"
#include "scratch_dir.h"

using namespace ipmasq;
using namespace ipmasq::nat;
using namespace ipmasq::nft;
using namespace ipmasq::nft::build;
using ipmasq::Address;
using ipmasq::AddressRange;
using ipmasq::Config;
using ipmasq::RulesetOptions;

namespace {

// The node of traffic_support.h: the pod's gateway and the link to the outside.
NodeAddresses node()
{
	return {{{addr("198.51.100.1"), 24}, {addr("203.0.113.1"), 24}, {addr("2001:db8:1::1"), 64}},
		true};
}

NatVerdict eval(const NatRuleset &ruleset, const Packet &packet, const Table *agent = nullptr,
		const Limits &limits = {})
{
	return evaluate(ruleset, agent, packet, node(), limits);
}

bool hasAction(const NatVerdict &v, NatAction action)
{
	for (const Outcome &o : v.outcomes)
		if (o.action == action)
			return true;
	return false;
}

std::string outcomes(const NatVerdict &v)
{
	std::string out;
	for (const Outcome &o : v.outcomes)
		out += describeOutcome(o) + (o.addresses ? " [" + o.addresses->toString() + "]" : "") + "\n";
	for (const MayPoint &m : v.mayPoints)
		out += "may: handle " + std::to_string(m.rule.handle) + ": " + m.reason + "\n";
	return out + "steps: " + std::to_string(v.steps) + "\n";
}

// iptables' `-m addrtype ! --dst-type LOCAL`, as iptables-nft 1.8.9 encodes it.
Expression notLocalDst()
{
	return addrtypeV1(0, XT_ADDRTYPE_LOCAL, XT_ADDRTYPE_INVERT_DEST);
}

// kubelet's rule: `! -d 10.0.0.0/8 -m addrtype ! --dst-type LOCAL -j MASQUERADE`.
WireRule kubeletRule(uint64_t handle)
{
	return rule(handle, {payload(PayloadBase::network, 16, 1), cmp(CmpOp::neq, {10}), notLocalDst(),
			     Counter{}, xtMasquerade()});
}

NatRuleset iptablesNat(std::vector<WireRule> postrouting, std::vector<WireChain> more = {})
{
	std::vector<WireChain> chains{baseChain("POSTROUTING", 100, std::move(postrouting))};
	for (WireChain &c : more)
		chains.push_back(std::move(c));
	return {{table(TableFamily::ip, "nat", std::move(chains))}};
}

// An agent's table as data: `masquerade` at `priority`, or nothing.
Table agentAt(int32_t priority, bool masquerades)
{
	std::vector<WireRule> rules;
	if (masquerades)
		rules.push_back(rule(1, {masquerade()}));
	return table(TableFamily::inet, "ip-masq-agent", {baseChain("postrouting", priority, std::move(rules))});
}

// nonMasqueradeCIDRs [10.0.0.0/8] (and link-local, which the agent adds).
Config agentConfig()
{
	Config config;
	config.nonMasqueradeCIDRs = {ipmasq::parsePrefix("10.0.0.0/8").value()};
	config.nonMasqueradeCIDRsGiven = true;
	return config;
}

Config withOutputAddress(const char *text)
{
	Config config = agentConfig();
	config.outputAddress = ipmasq::parseOutputAddress(text).value();
	return config;
}

} // namespace

TEST_CASE("a clean node: nobody NATs, certainly")
{
	const NatVerdict v = eval({}, packetV4("198.51.100.2", "192.0.2.2"));
	INFO(outcomes(v));
	REQUIRE(v.outcomes.size() == 1);
	CHECK(v.certain());
	CHECK(v.decision().action == NatAction::none);
	CHECK(v.decision().decider == Decider::nobody);
	CHECK(v.mayPoints.empty());
}

TEST_CASE("the agent's own table is walked like any other; a table of its name elsewhere is another's")
{
	// Changed from the old design, where the agent's decision came in as a boolean and a
	// table named like the agent's was skipped: now the agent's rules decide.
	const Table masquerading = agentAt(110, true), exempting = agentAt(110, false);
	const NatVerdict exempt = eval({}, packetV4("198.51.100.2", "192.0.2.2"), &exempting);
	CHECK(exempt.certain());
	CHECK(exempt.decision().action == NatAction::none);
	const NatVerdict masq = eval({}, packetV4("198.51.100.2", "192.0.2.2"), &masquerading);
	CHECK(masq.certain());
	CHECK(masq.decision().action == NatAction::masquerade);
	CHECK(masq.decision().decider == Decider::agent);
	CHECK(describeOutcome(masq.decision()) == "the agent masquerades it");
	// The same name in the ip family is someone else's: evaluated as a rule of another table.
	const NatRuleset other{{table(TableFamily::ip, "ip-masq-agent",
				      {baseChain("postrouting", 110, {rule(1, {masquerade()})})})}};
	const NatVerdict v = eval(other, packetV4("198.51.100.2", "192.0.2.2"), &exempting);
	CHECK(v.decision().action == NatAction::masquerade);
	CHECK(v.decision().decider == Decider::rule);
}

TEST_CASE("the agent's table from its config: masquerade, outputAddress, nonMasqueradeInterfaces")
{
	SECTION("masquerade, exempt, local")
	{
		const Table agent = agentTableOf(agentConfig());
		const NatVerdict masq = eval({}, packetV4("198.51.100.2", "192.0.2.2"), &agent);
		INFO(outcomes(masq));
		REQUIRE(masq.certain());
		CHECK(masq.decision().action == NatAction::masquerade);
		CHECK(masq.decision().decider == Decider::agent);
		REQUIRE(masq.decision().rule);
		CHECK(masq.decision().rule->chain == "IP-MASQ-AGENT");
		CHECK(masq.decision().base->table == "ip-masq-agent");
		CHECK(masq.decision().base->priority == 110);
		// nonMasqueradeCIDRs: the agent returns, nobody NATs.
		const NatVerdict exempt = eval({}, packetV4("198.51.100.2", "10.1.2.3"), &agent);
		CHECK(exempt.certain());
		CHECK(exempt.decision().action == NatAction::none);
		CHECK(exempt.decision().decider == Decider::nobody);
		// The node's own address: fib daddr type local never enters the agent's chain.
		const NatVerdict local = eval({}, packetV4("198.51.100.2", "203.0.113.1"), &agent);
		CHECK(local.certain());
		CHECK(local.decision().action == NatAction::none);
	}
	SECTION("outputAddress: one address, a range")
	{
		for (const auto &[text, expected] : {std::pair{"203.0.113.7", "203.0.113.7"},
						     std::pair{"203.0.113.7-203.0.113.9", "203.0.113.7-203.0.113.9"}}) {
			INFO(text);
			const Table agent = agentTableOf(withOutputAddress(text));
			const NatVerdict v = eval({}, packetV4("198.51.100.2", "192.0.2.2"), &agent);
			INFO(outcomes(v));
			REQUIRE(v.certain());
			CHECK(v.decision().action == NatAction::snat);
			CHECK(v.decision().decider == Decider::agent);
			REQUIRE(v.decision().addresses);
			CHECK(v.decision().addresses->toString() == expected);
			CHECK(eval({}, packetV4("198.51.100.2", "10.0.0.1"), &agent).decision().action == NatAction::none);
		}
	}
	SECTION("an outputAddress subnet: this node's address in it, or masquerade without one")
	{
		const Config config = withOutputAddress("203.0.113.0/24");
		const Table without = agentTableOf(config);
		CHECK(eval({}, packetV4("198.51.100.2", "192.0.2.2"), &without).decision().action ==
		      NatAction::masquerade);
		const Table with = agentTableOf(config, {}, ipmasq::SubnetAddresses{addr("203.0.113.5"), {}});
		const NatVerdict v = eval({}, packetV4("198.51.100.2", "192.0.2.2"), &with);
		REQUIRE(v.decision().addresses);
		CHECK(v.decision().addresses->toString() == "203.0.113.5");
	}
	SECTION("nonMasqueradeInterfaces: an unknown output interface forks")
	{
		Config config = agentConfig();
		config.nonMasqueradeInterfaces = {ipmasq::parseInterfacePattern("wg0").value()};
		const Table agent = agentTableOf(config);
		Packet p = packetV4("198.51.100.2", "192.0.2.2");
		p.outputInterface.reset();
		const NatVerdict unknown = eval({}, p, &agent);
		INFO(outcomes(unknown));
		CHECK_FALSE(unknown.certain());
		CHECK(hasAction(unknown, NatAction::masquerade));
		CHECK(hasAction(unknown, NatAction::none));
		CHECK_FALSE(unknown.mayPoints.empty());
		p.outputInterface = "wg0";
		const NatVerdict excluded = eval({}, p, &agent);
		CHECK(excluded.certain());
		CHECK(excluded.decision().action == NatAction::none);
		p.outputInterface = "eth0";
		const NatVerdict through = eval({}, p, &agent);
		CHECK(through.certain());
		CHECK(through.decision().action == NatAction::masquerade);
	}
}

TEST_CASE("kubelet's rule masquerades what the agent exempts, before the agent")
{
	const NatRuleset ruleset = iptablesNat({kubeletRule(7)});
	SECTION("a destination outside 10.0.0.0/8")
	{
		const NatVerdict v = eval(ruleset, packetV4("198.51.100.2", "192.168.1.5"));
		INFO(outcomes(v));
		REQUIRE(v.certain());
		const Outcome &o = v.decision();
		CHECK(o.action == NatAction::masquerade);
		CHECK(o.decider == Decider::rule);
		REQUIRE(o.rule);
		CHECK(o.rule->handle == 7);
		CHECK(o.rule->chain == "POSTROUTING");
		CHECK(o.placement == Placement::beforeAgent);
		CHECK(describeOutcome(o) == "table ip nat chain POSTROUTING (priority srcnat, before "
					    "the agent) masquerades it: rule handle 7");
	}
	SECTION("inside 10.0.0.0/8: not masqueraded")
	{
		const NatVerdict v = eval(ruleset, packetV4("198.51.100.2", "10.1.2.3"));
		CHECK(v.certain());
		CHECK(v.decision().action == NatAction::none);
	}
	SECTION("to the node itself: not masqueraded")
	{
		const NatVerdict v = eval(ruleset, packetV4("198.51.100.2", "203.0.113.1"));
		CHECK(v.certain());
		CHECK(v.decision().action == NatAction::none);
	}
	SECTION("a subnet's broadcast address: the type is not known, so may")
	{
		const NatVerdict v = eval(ruleset, packetV4("198.51.100.2", "203.0.113.255"));
		INFO(outcomes(v));
		CHECK_FALSE(v.certain());
		CHECK(hasAction(v, NatAction::masquerade));
		CHECK(hasAction(v, NatAction::none));
		REQUIRE(v.mayPoints.size() == 1);
		CHECK(v.mayPoints[0].rule.handle == 7);
	}
	SECTION("an incomplete list of the node's addresses: only local is certain")
	{
		const NatVerdict v = evaluate(ruleset, nullptr, packetV4("198.51.100.2", "192.0.2.2"),
					      NodeAddresses{{{addr("203.0.113.1"), 24}}, false});
		CHECK_FALSE(v.certain());
		const NatVerdict local = evaluate(ruleset, nullptr, packetV4("198.51.100.2", "203.0.113.1"),
						  NodeAddresses{{{addr("203.0.113.1"), 24}}, false});
		CHECK(local.certain());
	}
}

TEST_CASE("Docker's rule: only its own subnet, only away from docker0")
{
	const NatRuleset ruleset = iptablesNat(
		{rule(3, {meta(NFT_META_OIFNAME), cmp(CmpOp::neq, ifnameBytes("docker0")),
			  payload(PayloadBase::network, 12, 2), cmp(CmpOp::eq, {172, 17}), Counter{},
			  xtMasquerade()})});
	CHECK(eval(ruleset, packetV4("198.51.100.2", "192.0.2.2")).decision().action == NatAction::none);
	const NatVerdict inside = eval(ruleset, packetV4("172.17.0.2", "192.0.2.2"));
	CHECK(inside.certain());
	CHECK(inside.decision().action == NatAction::masquerade);
	Packet toBridge = packetV4("172.17.0.2", "172.17.0.3");
	toBridge.outputInterface = "docker0";
	CHECK(eval(ruleset, toBridge).decision().action == NatAction::none);
	Packet unknownOif = packetV4("172.17.0.2", "192.0.2.2");
	unknownOif.outputInterface.reset();
	const NatVerdict may = eval(ruleset, unknownOif);
	CHECK_FALSE(may.certain());
	CHECK(hasAction(may, NatAction::masquerade));
	CHECK(hasAction(may, NatAction::none));
}

TEST_CASE("any source: a match on the source address may, one on the destination decides")
{
	const NatRuleset docker = iptablesNat(
		{rule(3, {payload(PayloadBase::network, 12, 2), cmp(CmpOp::eq, {172, 17}), xtMasquerade()})});
	Packet any = packetV4("198.51.100.2", "192.0.2.2");
	any.sourceKnown = false;
	const NatVerdict may = eval(docker, any);
	INFO(outcomes(may));
	CHECK_FALSE(may.certain());
	CHECK(hasAction(may, NatAction::masquerade));
	CHECK(hasAction(may, NatAction::none));

	// kubelet's rule looks at the destination only: certain whatever the source.
	const NatVerdict kubelet = eval(iptablesNat({kubeletRule(7)}), any);
	CHECK(kubelet.certain());
	CHECK(kubelet.decision().action == NatAction::masquerade);

	// -m addrtype --src-type LOCAL and fib saddr type: not known either.
	const NatVerdict bySourceType = eval(
		iptablesNat({rule(4, {addrtypeV1(XT_ADDRTYPE_LOCAL, 0, 0), xtMasquerade()})}), any);
	CHECK_FALSE(bySourceType.certain());
	const NatVerdict byFib = eval(
		iptablesNat({rule(5, {Fib{NFTA_FIB_F_SADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1},
				      cmp(CmpOp::eq, hostU32(RTN_LOCAL)), masquerade()})}), any);
	CHECK_FALSE(byFib.certain());
}

TEST_CASE("upstream's leftover chain: jump, return, masquerade")
{
	std::vector<WireRule> agentChain{
		rule(5, {payload(PayloadBase::network, 16, 1), cmp(CmpOp::eq, {10}),
			 compat("comment", 0, Bytes(256, 0)), Counter{}, verdict(VerdictCode::returnToCaller)}),
		rule(6, {compat("comment", 0, Bytes(256, 0)), Counter{}, xtMasquerade()})};
	const NatRuleset ruleset = iptablesNat(
		{rule(7, {compat("comment", 0, Bytes(256, 0)), notLocalDst(), Counter{},
			  verdict(VerdictCode::jump, "IP-MASQ-AGENT")})},
		{chain("IP-MASQ-AGENT", std::move(agentChain))});
	const NatVerdict exempt = eval(ruleset, packetV4("198.51.100.2", "10.9.9.9"));
	CHECK(exempt.certain());
	CHECK(exempt.decision().action == NatAction::none);
	const NatVerdict masq = eval(ruleset, packetV4("198.51.100.2", "192.0.2.2"));
	INFO(outcomes(masq));
	CHECK(masq.certain());
	REQUIRE(masq.decision().rule);
	CHECK(masq.decision().rule->handle == 6);
	CHECK(masq.decision().rule->chain == "IP-MASQ-AGENT");
	CHECK(masq.decision().base->chain == "POSTROUTING");
	CHECK(describeOutcome(masq.decision()) ==
	      "table ip nat chain POSTROUTING (priority srcnat, before the agent) masquerades it: "
	      "rule handle 6 in chain IP-MASQ-AGENT");
}

TEST_CASE("kube-proxy's marks: its own table and iptables' rule")
{
	// table ip kube-proxy, as kube-proxy's nftables mode writes it.
	const Table kubeProxy = table(
		TableFamily::ip, "kube-proxy",
		{baseChain("nat-postrouting", 100, {rule(10, {verdict(VerdictCode::jump, "masquerading")})}),
		 chain("masquerading",
		       {rule(11, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)), cmp(CmpOp::eq, hostU32(0)),
				  verdict(VerdictCode::returnToCaller)}),
			rule(12, {meta(NFT_META_MARK), bitwise(hostU32(0xffffffff), hostU32(0x4000)),
				  metaSet(NFT_META_MARK)}),
			rule(13, {masquerade(NF_NAT_RANGE_PROTO_RANDOM_FULLY)})})});
	// iptables' `-m mark --mark 0x4000/0x4000 -j MASQUERADE`, natively encoded.
	const Table iptables = table(
		TableFamily::ip, "nat",
		{baseChain("POSTROUTING", 100,
			   {rule(8, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)),
				     cmp(CmpOp::eq, hostU32(0x4000)), Counter{}, xtMasquerade()})})});
	// The same with the xtables mark match (revision 1), lowered to the same comparison.
	const Table xtMark = table(
		TableFamily::ip, "nat",
		{baseChain("POSTROUTING", 100, {rule(9, {markMatchV1(0x4000, 0x4000, false), xtMasquerade()})})});
	for (const Table &t : {kubeProxy, iptables, xtMark}) {
		INFO("table " << t.name);
		const NatRuleset ruleset{{t}};
		const NatVerdict unmarked = eval(ruleset, packetV4("198.51.100.2", "192.0.2.2"));
		CHECK(unmarked.certain());
		CHECK(unmarked.decision().action == NatAction::none);
		Packet marked = packetV4("198.51.100.2", "192.0.2.2");
		marked.mark = 0x4000;
		const NatVerdict m = eval(ruleset, marked);
		CHECK(m.certain());
		CHECK(m.decision().action == NatAction::masquerade);
		marked.mark.reset();
		const NatVerdict unknown = eval(ruleset, marked);
		CHECK_FALSE(unknown.certain());
	}
	// Both at srcnat: the order among them is not defined, and here it does not matter.
	const NatVerdict both = eval({{kubeProxy, iptables}}, packetV4("198.51.100.2", "192.0.2.2"));
	CHECK(both.certain());
}

TEST_CASE("kube-proxy's iptables mode: MARK --xor-mark clears the mark, LOG goes on")
{
	const NatRuleset ruleset{
		{table(TableFamily::ip, "nat",
		       {baseChain("POSTROUTING", 100,
				  {rule(1, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)),
					    cmp(CmpOp::neq, hostU32(0x4000)), verdict(VerdictCode::returnToCaller)}),
				   rule(2, {target("LOG", 0, Bytes(32, 0))}),
				   // --xor-mark 0x4000: xt_mark_tginfo2 { mark 0x4000, mask 0 }.
				   rule(3, {markTarget(0x4000, 0)})})}),
		 table(TableFamily::ip, "later",
		       {baseChain("post", 105,
				  {rule(4, {meta(NFT_META_MARK), cmp(CmpOp::eq, hostU32(0)), masquerade()})})})}};
	Packet marked = packetV4("198.51.100.2", "192.0.2.2");
	marked.mark = 0x4000;
	const NatVerdict v = eval(ruleset, marked);
	INFO(outcomes(v));
	CHECK(v.certain());
	CHECK(v.decision().rule->handle == 4); // the mark was cleared before the later table
	// Unmarked: returned early, and the later table sees mark 0 too.
	CHECK(eval(ruleset, packetV4("198.51.100.2", "192.0.2.2")).decision().rule->handle == 4);
}

TEST_CASE("legacy iptables: its nat tables are listed in /proc/net")
{
	ipmasq::test::ScratchDir proc;
	const auto none = legacyNatTables(proc.path.string());
	REQUIRE(none);
	CHECK_FALSE(none->ipv4);
	CHECK_FALSE(none->ipv6);
	proc.write("ip_tables_names", "filter\nnat\n");
	proc.write("ip6_tables_names", "filter\n");
	const auto some = legacyNatTables(proc.path.string());
	REQUIRE(some);
	CHECK(some->ipv4);
	CHECK_FALSE(some->ipv6);
}

TEST_CASE("a match the evaluator does not know makes the result may")
{
	const NatRuleset ruleset = iptablesNat(
		{rule(9, {compat("statistic", 0, Bytes(24, 0)), Counter{}, xtMasquerade()})});
	const NatVerdict v = eval(ruleset, packetV4("198.51.100.2", "192.0.2.2"));
	INFO(outcomes(v));
	CHECK_FALSE(v.certain());
	CHECK(hasAction(v, NatAction::masquerade));
	CHECK(hasAction(v, NatAction::none));
	REQUIRE(v.mayPoints.size() == 1);
	CHECK(v.mayPoints[0].reason == "iptables match statistic (revision 0) is not understood");
}

TEST_CASE("an unknown expression or target may also decide anything")
{
	const NatRuleset expr = iptablesNat({rule(1, {UnknownExpression{"tproxy"}, masquerade()})});
	const NatVerdict v = eval(expr, packetV4("198.51.100.2", "192.0.2.2"));
	CHECK(hasAction(v, NatAction::undetermined));
	CHECK(hasAction(v, NatAction::masquerade));
	CHECK(hasAction(v, NatAction::none));
	// The old design also counted NETMAP here; the decoder knows it now (below). CONNMARK
	// is a target it does not.
	const NatRuleset tgt = iptablesNat({rule(1, {target("CONNMARK", 1, Bytes(16, 0))})});
	const NatVerdict t = eval(tgt, packetV4("198.51.100.2", "192.0.2.2"));
	INFO(outcomes(t));
	CHECK(hasAction(t, NatAction::undetermined));
	CHECK(hasAction(t, NatAction::none));
	CHECK_FALSE(t.certain());
}

TEST_CASE("expressions: payload, meta, ct, fib, bitwise, byteorder, cmp, range")
{
	const auto decide = [](std::vector<Expression> match, Packet p = packetV4("198.51.100.2", "192.0.2.2")) {
		match.push_back(masquerade());
		return eval(iptablesNat({rule(1, std::move(match))}), p);
	};
	const auto masq = [&](std::vector<Expression> match, Packet p = packetV4("198.51.100.2", "192.0.2.2")) {
		const NatVerdict v = decide(std::move(match), p);
		INFO(outcomes(v));
		REQUIRE(v.certain());
		return v.decision().action == NatAction::masquerade;
	};
	// ip daddr 192.0.2.0/24 (a 3-byte load), ip saddr & 255.255.0.0 == 198.51.0.0
	CHECK(masq({payload(PayloadBase::network, 16, 3), cmp(CmpOp::eq, {192, 0, 2})}));
	CHECK_FALSE(masq({payload(PayloadBase::network, 16, 3), cmp(CmpOp::eq, {192, 0, 3})}));
	CHECK(masq({payload(PayloadBase::network, 12, 4), bitwiseAnd({255, 255, 0, 0}),
		    cmp(CmpOp::eq, {198, 51, 0, 0})}));
	// meta nfproto, l4proto, protocol; oifname "eth*" (a prefix); iifname
	CHECK(masq({meta(NFT_META_NFPROTO), cmp(CmpOp::eq, {NFPROTO_IPV4})}));
	CHECK(masq({meta(NFT_META_L4PROTO), cmp(CmpOp::eq, {6})}));
	CHECK(masq({meta(NFT_META_PROTOCOL), cmp(CmpOp::eq, {0x08, 0x00})}));
	CHECK(masq({meta(NFT_META_OIFNAME), cmp(CmpOp::eq, {'e', 't', 'h'})}));
	CHECK_FALSE(masq({meta(NFT_META_IIFNAME), cmp(CmpOp::eq, ifnameBytes("eth0"))}));
	CHECK(masq({meta(NFT_META_IIFNAME), cmp(CmpOp::eq, ifnameBytes("veth-pod"))}));
	// tcp dport 8080 and a range of ports; lt/gt
	CHECK(masq({payload(PayloadBase::transport, 2, 2), cmp(CmpOp::eq, {0x1f, 0x90})}));
	CHECK(masq({payload(PayloadBase::transport, 2, 2), cmp(CmpOp::gte, {0x1f, 0x00}),
		    cmp(CmpOp::lte, {0x1f, 0xff})}));
	CHECK(masq({payload(PayloadBase::transport, 2, 2), Range{NFT_REG_1, NFT_RANGE_EQ, {0x1f, 0x00}, {0x1f, 0xff}}}));
	CHECK_FALSE(masq({payload(PayloadBase::transport, 2, 2), Range{NFT_REG_1, NFT_RANGE_NEQ, {0x1f, 0x00}, {0x1f, 0xff}}}));
	CHECK(masq({payload(PayloadBase::network, 16, 4), cmp(CmpOp::lt, {192, 0, 3, 0})}));
	CHECK_FALSE(masq({payload(PayloadBase::network, 16, 4), cmp(CmpOp::gt, {192, 0, 3, 0})}));
	// ct state new, ct direction original, ct mark 0
	CHECK(masq({ct(NFT_CT_STATE, NFT_REG_1), bitwiseAnd(hostU32(8)), cmp(CmpOp::neq, hostU32(0))}));
	CHECK_FALSE(masq({ct(NFT_CT_STATE, NFT_REG_1), bitwiseAnd(hostU32(6)), cmp(CmpOp::neq, hostU32(0))}));
	CHECK(masq({ct(NFT_CT_DIRECTION, NFT_REG_1), cmp(CmpOp::eq, {0})}));
	CHECK(masq({ct(NFT_CT_MARK, NFT_REG_1), cmp(CmpOp::eq, hostU32(0))}));
	// fib daddr type != local; fib saddr type unicast
	CHECK(masq({Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1}, cmp(CmpOp::neq, hostU32(RTN_LOCAL))}));
	CHECK(masq({Fib{NFTA_FIB_F_SADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1}, cmp(CmpOp::eq, hostU32(RTN_UNICAST))}));
	CHECK_FALSE(masq({Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1}, cmp(CmpOp::eq, hostU32(RTN_LOCAL))}));
	// byteorder: ntoh of the destination port, compared in host order
	CHECK(masq({payload(PayloadBase::transport, 2, 2), Byteorder{NFT_REG_1, NFT_REG_1, NFT_BYTEORDER_NTOH, 2, 2},
		    cmp(CmpOp::eq, hostU16(8080))}));
	// 32-bit registers alias the 128-bit ones: reg 1 is NFT_REG32_00..03
	CHECK(masq({payload(PayloadBase::network, 16, 4, NFT_REG32_01), Cmp{NFT_REG32_01, NFT_CMP_EQ, {192, 0, 2, 2}}}));
	CHECK(masq({payload(PayloadBase::network, 16, 4, NFT_REG32_00), Cmp{NFT_REG_1, NFT_CMP_EQ, {192, 0, 2, 2}}}));
	// what the packet does not fix is unknown: may
	CHECK_FALSE(decide({payload(PayloadBase::network, 8, 1), cmp(CmpOp::eq, {64})}).certain());
	CHECK_FALSE(decide({meta(NFT_META_SKUID), cmp(CmpOp::eq, hostU32(0))}).certain());
	CHECK_FALSE(decide({Numgen{NFT_NG_INCREMENTAL, 2, 0, NFT_REG_1}, cmp(CmpOp::eq, hostU32(0))}).certain());
	CHECK_FALSE(decide({Limit{10, 1}}).certain());
	// passthroughs change nothing
	CHECK(masq({Counter{5, 500}, Log{.prefix = "x"}, Notrack{}}));
	// a known byte that differs decides even when others are unknown: protocol (known,
	// tcp) and the first byte of the checksum (unknown)
	CHECK_FALSE(masq({payload(PayloadBase::network, 9, 2), cmp(CmpOp::eq, {17, 0})}));
	Packet noProto = packetV4("198.51.100.2", "192.0.2.2");
	noProto.l4proto.reset();
	CHECK_FALSE(decide({payload(PayloadBase::network, 9, 2), cmp(CmpOp::eq, {17, 0})}, noProto).certain());
}

TEST_CASE("marks set by one rule are seen by the next, in this chain and later ones")
{
	const NatRuleset ruleset{
		{table(TableFamily::ip, "marker",
		       {baseChain("post", 50,
				  {rule(1, {immediate(hostU32(0x10), NFT_REG_1), metaSet(NFT_META_MARK)}),
				   rule(2, {immediate(hostU32(0x20), NFT_REG_1), ctSet(NFT_CT_MARK)})})}),
		 table(TableFamily::ip, "reader",
		       {baseChain("post", 60,
				  {rule(3, {meta(NFT_META_MARK), cmp(CmpOp::eq, hostU32(0x10)),
					    ct(NFT_CT_MARK, NFT_REG_2), Cmp{NFT_REG_2, NFT_CMP_EQ, hostU32(0x20)},
					    masquerade()})})})}};
	const NatVerdict v = eval(ruleset, packetV4("198.51.100.2", "192.0.2.2"));
	CHECK(v.certain());
	CHECK(v.decision().action == NatAction::masquerade);
	CHECK(v.decision().rule->handle == 3);
}

TEST_CASE("sets, maps and verdict maps")
{
	// ip daddr @nets: 10.0.0.0/8 and 192.168.0.0/16 as nft encodes an interval set.
	const Set nets = intervalSetV4("nets", {{"10.0.0.0", "11.0.0.0"}, {"192.168.0.0", "192.169.0.0"}});
	const auto ruleWith = [&](Expression l, std::vector<Expression> tail) {
		std::vector<Expression> e{ipDaddr(), std::move(l)};
		for (auto &t : tail)
			e.push_back(std::move(t));
		return rule(1, std::move(e));
	};
	const auto withSets = [&](WireRule r, std::vector<Set> sets, std::vector<WireChain> more = {}) {
		std::vector<WireChain> chains{baseChain("post", 100, {std::move(r), rule(2, {masquerade()})})};
		for (WireChain &c : more)
			chains.push_back(std::move(c));
		return NatRuleset{{table(TableFamily::ip, "t", std::move(chains), std::move(sets))}};
	};
	SECTION("interval set: return for members")
	{
		const NatRuleset r = withSets(ruleWith(lookup("nets"), {verdict(VerdictCode::returnToCaller)}), {nets});
		CHECK(eval(r, packetV4("198.51.100.2", "192.168.3.4")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.51.100.2", "10.255.255.255")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.51.100.2", "11.0.0.0")).decision().action == NatAction::masquerade);
		CHECK(eval(r, packetV4("198.51.100.2", "9.255.255.255")).decision().action == NatAction::masquerade);
		// inverted: != @nets
		const NatRuleset inv = withSets(ruleWith(lookup("nets", NFT_REG_1, true),
							 {verdict(VerdictCode::returnToCaller)}),
						{nets});
		CHECK(eval(inv, packetV4("198.51.100.2", "192.168.3.4")).decision().action == NatAction::masquerade);
	}
	SECTION("exact set, and a set that changes by itself or was not read whole is may")
	{
		const std::vector<Bytes> keys{{192, 0, 2, 2}, {192, 0, 2, 3}};
		const auto returnIn = [&](Set set) {
			return withSets(ruleWith(lookup("hosts"), {verdict(VerdictCode::returnToCaller)}), {std::move(set)});
		};
		const NatRuleset r = returnIn(exactSet("hosts", kIpv4Type, 4, keys));
		CHECK(eval(r, packetV4("198.51.100.2", "192.0.2.2")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.51.100.2", "192.0.2.4")).decision().action == NatAction::masquerade);
		const NatRuleset dyn = returnIn(exactSet("hosts", kIpv4Type, 4, keys, NFT_SET_TIMEOUT));
		CHECK_FALSE(eval(dyn, packetV4("198.51.100.2", "192.0.2.2")).certain());
		Set partial = exactSet("hosts", kIpv4Type, 4, keys);
		partial.markUnusable("set hosts was not read whole");
		const NatVerdict v = eval(returnIn(partial), packetV4("198.51.100.2", "192.0.2.2"));
		CHECK_FALSE(v.certain());
		REQUIRE_FALSE(v.mayPoints.empty());
		CHECK(v.mayPoints[0].reason == "set hosts was not read whole");
		// A set the read did not get at all.
		CHECK_FALSE(eval(withSets(ruleWith(lookup("gone"), {verdict(VerdictCode::returnToCaller)}), {}),
				 packetV4("198.51.100.2", "192.0.2.2"))
				    .certain());
	}
	SECTION("concatenated keys: ip saddr . ip daddr")
	{
		const Set pairs = exactSet("__set0", (kIpv4Type << 6) | kIpv4Type, 8,
					   {concat(bytesOf("198.18.0.1"), bytesOf("192.0.2.1"))}, kAnonymous);
		const NatRuleset r{{table(TableFamily::ip, "t",
					  {baseChain("post", 100,
						     {rule(1, {ipSaddr(), ipDaddr(NFT_REG32_01), lookup("__set0"),
							       masquerade()})})},
					  {pairs})}};
		CHECK(eval(r, packetV4("198.18.0.1", "192.0.2.1")).decision().action == NatAction::masquerade);
		CHECK(eval(r, packetV4("198.18.0.1", "192.0.2.2")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.18.0.2", "192.0.2.1")).decision().action == NatAction::none);
	}
	SECTION("snat to ip saddr map @m")
	{
		Set map = declareSet("m", NFT_SET_MAP, kIpv4Type, 4, kIpv4Type, 4);
		map.add({{198, 51, 100, 2}, {}, false, false, {203, 0, 113, 9}});
		map.finish();
		const NatRuleset r{{table(TableFamily::ip, "t",
					  {baseChain("post", 100,
						     {rule(1, {ipSaddr(), mapLookup("m", NFT_REG_1), snatFrom(NFT_REG_1)})})},
					  {map})}};
		const NatVerdict v = eval(r, packetV4("198.51.100.2", "192.0.2.2"));
		CHECK(v.certain());
		CHECK(v.decision().action == NatAction::snat);
		REQUIRE(v.decision().addresses);
		CHECK(v.decision().addresses->toString() == "203.0.113.9");
		CHECK(eval(r, packetV4("198.51.100.3", "192.0.2.2")).decision().action == NatAction::none);
	}
	SECTION("a map's data from a set that is no map: not known (found by the fuzzer)")
	{
		Set odd = declareSet("odd", 0, kIpv4Type, 4, kIpv4Type, 4);
		odd.add({{198, 51, 100, 2}, {}, false, false, {203, 0, 113, 9}});
		odd.finish();
		const NatRuleset r{{table(TableFamily::ip, "t",
					  {baseChain("post", 100,
						     {rule(1, {ipSaddr(), mapLookup("odd", NFT_REG_1), snatFrom(NFT_REG_1)})})},
					  {odd})}};
		const NatVerdict v = eval(r, packetV4("198.51.100.2", "192.0.2.2"));
		INFO(outcomes(v));
		CHECK(v.decision().action == NatAction::snat);
		CHECK_FALSE(v.decision().addresses);
	}
	SECTION("verdict map: jump to a chain, and every verdict when the key is unknown")
	{
		Set vmap = declareSet("vm", NFT_SET_MAP, kIpv4Type, 4, NFT_DATA_VERDICT, 0);
		vmap.add({{192, 0, 2, 2}, {}, false, false, {}, Verdict{VerdictCode::jump, "snat-it"}});
		vmap.add({{192, 0, 2, 3}, {}, false, false, {}, Verdict{VerdictCode::accept, {}}});
		vmap.finish();
		const auto snatIt = [] {
			return chain("snat-it", {rule(5, {immediate({203, 0, 113, 7}, NFT_REG_1), snatFrom(NFT_REG_1)})});
		};
		const NatRuleset r = withSets(ruleWith(vmapLookup("vm"), {}), {vmap}, {snatIt()});
		const NatVerdict jumped = eval(r, packetV4("198.51.100.2", "192.0.2.2"));
		CHECK(jumped.decision().action == NatAction::snat);
		CHECK(jumped.decision().rule->chain == "snat-it");
		CHECK(eval(r, packetV4("198.51.100.2", "192.0.2.3")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.51.100.2", "192.0.2.4")).decision().action == NatAction::masquerade);
		// A key the packet does not fix: every verdict of the map is possible.
		const NatRuleset unknownKey = withSets(rule(1, {meta(NFT_META_SKUID), vmapLookup("vm")}), {vmap}, {snatIt()});
		const NatVerdict any = eval(unknownKey, packetV4("198.51.100.2", "192.0.2.2"));
		INFO(outcomes(any));
		CHECK(hasAction(any, NatAction::snat));
		CHECK(hasAction(any, NatAction::none));
		CHECK(hasAction(any, NatAction::masquerade));
		CHECK_FALSE(any.certain());
	}
}

TEST_CASE("a verdict map of 200,000 elements and an unknown key: the distinct verdicts, no scan")
{
	// Issue 25's hostile neighbour: a huge vmap looked up with a key the evaluator cannot
	// know. The walk follows the map's distinct verdicts (three here), each once: its cost
	// in steps is that of a three-way fork, whatever the map's size.
	constexpr uint32_t kElements = 200000;
	Set vmap = declareSet("vm", NFT_SET_MAP, kIpv4Type, 4, NFT_DATA_VERDICT, 0);
	static const Verdict kVerdicts[] = {{VerdictCode::accept, {}}, {VerdictCode::jump, "snat-it"},
					    {VerdictCode::drop, {}}};
	for (uint32_t i = 0; i < kElements; i++) {
		const uint32_t key = 0x0a000000 + i; // 10.0.0.0 onwards, in network order
		vmap.add({{uint8_t(key >> 24), uint8_t(key >> 16), uint8_t(key >> 8), uint8_t(key)},
			  {}, false, false, {}, kVerdicts[i % 3]});
	}
	vmap.finish();
	REQUIRE(vmap.size() == kElements);
	REQUIRE(vmap.verdicts().size() == 3);
	const auto rulesetWith = [&](Set map) {
		return NatRuleset{{table(
			TableFamily::ip, "hostile",
			{baseChain("post", 100, {rule(1, {meta(NFT_META_SKUID), vmapLookup("vm")}), rule(2, {masquerade()})}),
			 chain("snat-it", {rule(5, {immediate({203, 0, 113, 7}, NFT_REG_1), snatFrom(NFT_REG_1)})})},
			{std::move(map)})}};
	};
	const NatRuleset ruleset = rulesetWith(vmap);
	const NatVerdict v = eval(ruleset, packetV4("198.51.100.2", "192.0.2.2"));
	INFO(outcomes(v));
	CHECK_FALSE(v.certain());
	CHECK(hasAction(v, NatAction::masquerade)); // no element: the next rule
	CHECK(hasAction(v, NatAction::none)); // accept: no later chain NATs it
	CHECK(hasAction(v, NatAction::snat)); // jump snat-it
	CHECK(hasAction(v, NatAction::dropped));
	CHECK(v.outcomes.size() == 4);
	// Rules and chain ends walked: the lookup, each verdict's path, the chain ends. A scan
	// would not show in steps; what shows is that no path is walked per element.
	CHECK(v.steps <= 10);
	// A known key is a search: one element, one path.
	const NatVerdict known = eval(
		NatRuleset{{table(TableFamily::ip, "hostile",
				  {baseChain("post", 100, {rule(1, {ipDaddr(), vmapLookup("vm")}), rule(2, {masquerade()})}),
				   chain("snat-it", {rule(5, {immediate({203, 0, 113, 7}, NFT_REG_1), snatFrom(NFT_REG_1)})})},
				  {vmap})}},
		packetV4("198.51.100.2", "10.0.0.4")); // element 4: jump snat-it
	CHECK(known.certain());
	CHECK(known.decision().action == NatAction::snat);

	// More distinct verdicts than the walk follows: undetermined, never a partial answer.
	Set many = declareSet("vm", NFT_SET_MAP, kIpv4Type, 4, NFT_DATA_VERDICT, 0);
	const size_t distinct = Limits{}.maxVerdicts + 1;
	for (uint32_t i = 0; i < distinct; i++)
		many.add({{10, 0, uint8_t(i >> 8), uint8_t(i)}, {}, false, false, {},
			  Verdict{VerdictCode::jump, std::string("c").append(std::to_string(i))}});
	many.finish();
	const NatVerdict bounded = eval(rulesetWith(std::move(many)), packetV4("198.51.100.2", "192.0.2.2"));
	INFO(outcomes(bounded));
	CHECK(hasAction(bounded, NatAction::undetermined));
	CHECK_FALSE(bounded.certain());
	CHECK(bounded.steps <= 10);
}

TEST_CASE("verdicts: accept, drop, policy, queue, return, jump and goto")
{
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	SECTION("accept ends one base chain; the next nat chain still decides")
	{
		const NatRuleset r{{table(TableFamily::ip, "a", {baseChain("post", 90, {rule(1, {verdict(VerdictCode::accept)})})}),
				    table(TableFamily::ip, "b", {baseChain("post", 95, {rule(2, {masquerade()})})})}};
		const NatVerdict v = eval(r, p);
		CHECK(v.decision().action == NatAction::masquerade);
		CHECK(v.decision().rule->table == "b");
	}
	SECTION("drop, policy drop, queue")
	{
		const NatVerdict drop = eval(iptablesNat({rule(1, {verdict(VerdictCode::drop)})}), p);
		CHECK(drop.certain());
		CHECK(drop.decision().action == NatAction::dropped);
		NatRuleset policy = iptablesNat({});
		policy.tables[0].chains[0].base->policy = VerdictCode::drop;
		const NatVerdict byPolicy = eval(policy, p);
		CHECK(byPolicy.decision().action == NatAction::dropped);
		CHECK(byPolicy.decision().decider == Decider::policy);
		const NatVerdict queued = eval(iptablesNat({rule(1, {verdict(VerdictCode::queue)})}), p);
		CHECK(queued.decision().action == NatAction::undetermined);
	}
	SECTION("return from a base chain applies its policy")
	{
		NatRuleset r = iptablesNat({rule(1, {verdict(VerdictCode::returnToCaller)}), rule(2, {masquerade()})});
		CHECK(eval(r, p).decision().action == NatAction::none);
		r.tables[0].chains[0].base->policy = VerdictCode::drop;
		CHECK(eval(r, p).decision().action == NatAction::dropped);
	}
	SECTION("goto does not come back; jump does")
	{
		// base: jump X, then masquerade. X: goto Y, then drop. Y: return.
		const auto ruleset = [](VerdictCode xToY) {
			return iptablesNat({rule(1, {verdict(VerdictCode::jump, "X")}), rule(2, {masquerade()})},
					   {chain("X", {rule(3, {verdict(xToY, "Y")}), rule(4, {verdict(VerdictCode::drop)})}),
					    chain("Y", {rule(5, {verdict(VerdictCode::returnToCaller)})})});
		};
		// goto: Y's return goes back to the base chain, after the jump: masquerade.
		CHECK(eval(ruleset(VerdictCode::goTo), p).decision().action == NatAction::masquerade);
		// jump: Y's return goes back to X, whose next rule drops.
		CHECK(eval(ruleset(VerdictCode::jump), p).decision().action == NatAction::dropped);
	}
	SECTION("the end of a regular chain returns")
	{
		const NatRuleset r = iptablesNat({rule(1, {verdict(VerdictCode::jump, "X")}), rule(2, {masquerade()})},
						 {chain("X", {rule(3, {Counter{}})})});
		CHECK(eval(r, p).decision().action == NatAction::masquerade);
	}
	SECTION("two paths in the same chain, called from different places, each return to its own")
	{
		// base: (uid 0) jump A; jump B. A: jump C, then masquerade. B: jump C, then drop.
		// C: nothing. Both paths reach C's end with the same marks: only the stacks under
		// it tell them apart, and each must go back to its caller.
		const NatVerdict v = eval(iptablesNat({rule(1, {meta(NFT_META_SKUID), cmp(CmpOp::eq, hostU32(0)),
								verdict(VerdictCode::jump, "A")}),
						       rule(2, {verdict(VerdictCode::jump, "B")})},
						      {chain("A", {rule(3, {verdict(VerdictCode::jump, "C")}), rule(4, {masquerade()})}),
						       chain("B", {rule(5, {verdict(VerdictCode::jump, "C")}),
								   rule(6, {verdict(VerdictCode::drop)})}),
						       chain("C", {})}),
					  p);
		INFO(outcomes(v));
		CHECK(v.outcomes.size() == 2);
		CHECK(hasAction(v, NatAction::masquerade));
		CHECK(hasAction(v, NatAction::dropped));
	}
	SECTION("a jump to a chain that was not read")
	{
		const NatVerdict v = eval(iptablesNat({rule(1, {verdict(VerdictCode::jump, "nowhere")})}), p);
		CHECK(v.decision().action == NatAction::undetermined);
	}
}

TEST_CASE("NAT kinds: snat with an address, dnat, redirect, the first NAT wins")
{
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	const NatVerdict s = eval(iptablesNat({rule(1, {immediate({203, 0, 113, 1}, NFT_REG_1), snatFrom(NFT_REG_1)}),
					       rule(2, {masquerade()})}),
				  p);
	CHECK(s.certain());
	CHECK(s.decision().action == NatAction::snat);
	CHECK(s.decision().addresses->toString() == "203.0.113.1");
	CHECK(describeOutcome(s.decision()).find("rewrites its source to 203.0.113.1") != std::string::npos);
	const Nat dnat{.type = NFT_NAT_DNAT, .family = NFPROTO_IPV4, .addressMin = NFT_REG_1};
	CHECK(eval(iptablesNat({rule(1, {immediate({192, 0, 2, 9}, NFT_REG_1), dnat})}), p).decision().action ==
	      NatAction::dnat);
	CHECK(eval(iptablesNat({rule(1, {Redir{}})}), p).decision().action == NatAction::redirect);
	CHECK(eval(iptablesNat({rule(1, {target("SNAT", 0, snatV4Info("203.0.113.5"))})}), p)
		      .decision()
		      .addresses->toString() == "203.0.113.5");
	// "snat ip" in an inet table does nothing to an IPv6 packet: the next rule decides.
	const NatRuleset inet{{table(TableFamily::inet, "t",
				     {baseChain("post", 100, {rule(1, {immediate({203, 0, 113, 1}, NFT_REG_1), snatFrom(NFT_REG_1)}),
							      rule(2, {masquerade()})})})}};
	CHECK(eval(inet, packetV6("2001:db8:1::2", "2001:db8:2::2")).decision().action == NatAction::masquerade);
	// An ip table does not see IPv6 packets, an ip6 table not IPv4 ones.
	CHECK(eval(iptablesNat({rule(1, {masquerade()})}), packetV6("2001:db8:1::2", "2001:db8:2::2"))
		      .decision()
		      .action == NatAction::none);
}

TEST_CASE("NETMAP and snat prefix: the mapped address for a known source, the prefix for any")
{
	SECTION("iptables' NETMAP (ip, revision 0)")
	{
		// -s 198.18.10.0/24 -j NETMAP --to 198.51.100.0/24
		const NatRuleset r = iptablesNat(
			{rule(5, {payload(PayloadBase::network, 12, 3), cmp(CmpOp::eq, {198, 18, 10}), Counter{},
				  target("NETMAP", 0, compatRangeV4(NF_NAT_RANGE_MAP_IPS, "198.51.100.0", "198.51.100.255"))})});
		const NatVerdict v = eval(r, packetV4("198.18.10.42", "192.0.2.2"));
		INFO(outcomes(v));
		REQUIRE(v.certain());
		CHECK(v.decision().action == NatAction::snat);
		CHECK(v.decision().addresses == AddressRange{addr("198.51.100.42"), addr("198.51.100.42")});
		// Without the source match: any source lands somewhere in the prefix.
		const NatRuleset all = iptablesNat(
			{rule(5, {target("NETMAP", 0, compatRangeV4(NF_NAT_RANGE_MAP_IPS, "198.51.100.0", "198.51.100.255"))})});
		Packet any = packetV4("198.18.10.42", "192.0.2.2");
		any.sourceKnown = false;
		const NatVerdict prefix = eval(all, any);
		INFO(outcomes(prefix));
		REQUIRE(prefix.decision().addresses);
		CHECK(prefix.decision().action == NatAction::snat);
		CHECK(prefix.decision().addresses->toString() == "198.51.100.0/24");
	}
	SECTION("ip6tables' NETMAP (nf_nat_range)")
	{
		const NatRuleset r{{table(
			TableFamily::ip6, "nat",
			{baseChain("POSTROUTING", 100,
				   {rule(2, {target("NETMAP", 0,
						    natRangeInfo(NF_NAT_RANGE_MAP_IPS, "2001:db8:2::",
								 "2001:db8:2::ffff:ffff:ffff:ffff"))})})})}};
		const NatVerdict v = eval(r, packetV6("2001:db8:1::5", "2001:db8:9::1"));
		INFO(outcomes(v));
		REQUIRE(v.decision().addresses);
		CHECK(v.decision().addresses->toString() == "2001:db8:2::5");
	}
	SECTION("snat prefix to 198.51.100.0/24; snat ip prefix to ip saddr map { 198.18.10.0/24 : 198.51.100.0/24 }")
	{
		const NatRuleset constant = iptablesNat(
			{rule(2, {payload(PayloadBase::network, 12, 3), cmp(CmpOp::eq, {198, 18, 10}),
				  immediate(bytesOf("198.51.100.0"), NFT_REG_1), immediate(bytesOf("198.51.100.255"), NFT_REG_2),
				  snatFrom(NFT_REG_1, NFT_REG_2, NF_NAT_RANGE_NETMAP)})});
		CHECK(eval(constant, packetV4("198.18.10.7", "192.0.2.2")).decision().addresses ==
		      AddressRange{addr("198.51.100.7"), addr("198.51.100.7")});

		const Set map = intervalSet(declareSet("__map0", kAnonymous | NFT_SET_INTERVAL | NFT_SET_MAP, kIpv4Type, 4,
						       kIpv4Type, 8),
					    {{"198.18.10.0/24", concat(bytesOf("198.51.100.0"), bytesOf("198.51.100.255"))}});
		const NatRuleset prefixMap{{table(
			TableFamily::ip, "t",
			{baseChain("post", 100,
				   {rule(4, {ipSaddr(), mapLookup("__map0", NFT_REG_1),
					     snatFrom(NFT_REG_1, NFT_REG32_01, NF_NAT_RANGE_NETMAP)})})},
			{map})}};
		const NatVerdict mapped = eval(prefixMap, packetV4("198.18.10.9", "192.0.2.2"));
		INFO(outcomes(mapped));
		REQUIRE(mapped.certain());
		CHECK(mapped.decision().addresses == AddressRange{addr("198.51.100.9"), addr("198.51.100.9")});
		CHECK(eval(prefixMap, packetV4("198.18.11.9", "192.0.2.2")).decision().action == NatAction::none);
		// Any source: whether it has an element is not known, nor where it maps.
		Packet any = packetV4("198.18.10.9", "192.0.2.2");
		any.sourceKnown = false;
		const NatVerdict may = eval(prefixMap, any);
		INFO(outcomes(may));
		CHECK_FALSE(may.certain());
		CHECK(hasAction(may, NatAction::none));
		CHECK(hasAction(may, NatAction::snat));
	}
	SECTION("snat ip to ip saddr map { 198.18.10.0/24 : 198.51.100.1-198.51.100.5 }: a range")
	{
		const Set map = intervalSet(declareSet("__map0", kAnonymous | NFT_SET_INTERVAL | NFT_SET_MAP, kIpv4Type, 4,
						       kIpv4Type, 8),
					    {{"198.18.10.0/24", concat(bytesOf("198.51.100.1"), bytesOf("198.51.100.5"))}});
		const NatRuleset r{{table(TableFamily::ip, "t",
					  {baseChain("post", 100,
						     {rule(8, {ipSaddr(), mapLookup("__map0", NFT_REG_1),
							       snatFrom(NFT_REG_1, NFT_REG32_01)})})},
					  {map})}};
		const NatVerdict v = eval(r, packetV4("198.18.10.9", "192.0.2.2"));
		REQUIRE(v.decision().addresses);
		CHECK(v.decision().addresses->toString() == "198.51.100.1-198.51.100.5");
	}
}

TEST_CASE("priority order, ties, and the agent's place")
{
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	const auto masqAt = [](const char *name, int32_t prio) {
		return table(TableFamily::ip, name, {baseChain("post", prio, {rule(1, {masquerade()})})});
	};
	const auto snatAt = [&](const char *name, int32_t prio) {
		return table(TableFamily::inet, name,
			     {baseChain("post", prio, {rule(1, {immediate({203, 0, 113, 1}, NFT_REG_1), snatFrom(NFT_REG_1)})})});
	};
	const Table masquerading = agentAt(110, true), exempting = agentAt(110, false);
	SECTION("the lower priority decides first")
	{
		CHECK(eval({{snatAt("s", 100), masqAt("m", 90)}}, p).decision().action == NatAction::masquerade);
		CHECK(eval({{snatAt("s", 80), masqAt("m", 90)}}, p).decision().action == NatAction::snat);
	}
	SECTION("equal priorities: every order, each order's outcome")
	{
		const NatVerdict v = eval({{snatAt("s", 100), masqAt("m", 100)}}, p);
		INFO(outcomes(v));
		CHECK_FALSE(v.certain());
		CHECK(hasAction(v, NatAction::snat));
		CHECK(hasAction(v, NatAction::masquerade));
	}
	SECTION("before and after the agent")
	{
		const NatVerdict after = eval({{masqAt("m", 120)}}, p, &exempting);
		CHECK(after.decision().placement == Placement::afterAgent);
		CHECK(describeOutcome(after.decision()).find("after the agent") != std::string::npos);
		// The agent masquerades first: the later chain is never consulted.
		const NatVerdict agentFirst = eval({{snatAt("s", 120)}}, p, &masquerading);
		CHECK(agentFirst.certain());
		CHECK(agentFirst.decision().decider == Decider::agent);
		const NatVerdict before = eval({{snatAt("s", 100)}}, p, &masquerading);
		CHECK(before.decision().action == NatAction::snat);
		CHECK(before.decision().placement == Placement::beforeAgent);
		const NatVerdict tied = eval({{snatAt("s", 110)}}, p, &masquerading);
		CHECK_FALSE(tied.certain());
		CHECK(hasAction(tied, NatAction::snat));
		CHECK(hasAction(tied, NatAction::masquerade));
		// The agent's priority is its table's base chain's: at 130 a chain at 120 is before it.
		const Table late = agentAt(130, true);
		CHECK(eval({{snatAt("s", 120)}}, p, &late).decision().placement == Placement::beforeAgent);
	}
}

TEST_CASE("bounds: loops, deep jumps, huge chains and many ties end, with undetermined")
{
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	SECTION("a jump loop")
	{
		const NatVerdict v = eval(iptablesNat({rule(1, {verdict(VerdictCode::jump, "A")})},
						      {chain("A", {rule(2, {verdict(VerdictCode::jump, "A")})})}),
					  p);
		CHECK(v.decision().action == NatAction::undetermined);
		CHECK_FALSE(v.certain());
	}
	SECTION("a goto loop")
	{
		const NatVerdict v = eval(iptablesNat({rule(1, {verdict(VerdictCode::goTo, "A")})},
						      {chain("A", {rule(2, {verdict(VerdictCode::goTo, "B")})}),
						       chain("B", {rule(3, {verdict(VerdictCode::goTo, "A")})})}),
					  p);
		CHECK(v.decision().action == NatAction::undetermined);
	}
	SECTION("jumps 16 deep are followed, 17 are not")
	{
		const auto nested = [](int depth) {
			// append, not "c" + string: g++ 12's bogus -Wrestrict at -O3 (GCC bug 105329)
			const auto name = [](int i) { return std::string("c").append(std::to_string(i)); };
			std::vector<WireChain> chains;
			for (int i = 0; i < depth; i++) {
				std::vector<WireRule> rules;
				if (i + 1 < depth)
					rules.push_back(rule(1, {verdict(VerdictCode::jump, name(i + 1))}));
				else
					rules.push_back(rule(1, {masquerade()}));
				chains.push_back(chain(name(i), std::move(rules)));
			}
			return iptablesNat({rule(1, {verdict(VerdictCode::jump, "c0")})}, std::move(chains));
		};
		CHECK(eval(nested(16), p).decision().action == NatAction::masquerade);
		CHECK(eval(nested(17), p).decision().action == NatAction::undetermined);
	}
	SECTION("a huge chain of undecidable rules stops at the step bound, counted")
	{
		// Each rule forks on a uid and sets a mark of its own, so no two paths meet: the
		// states grow with the square of the rules. The walk stops at its bound, exactly.
		std::vector<WireRule> rules;
		for (uint64_t i = 0; i < 3000; i++)
			rules.push_back(rule(i + 1, {meta(NFT_META_SKUID), cmp(CmpOp::eq, hostU32(uint32_t(i))),
						     immediate(hostU32(uint32_t(i)), NFT_REG_1),
						     metaSet(NFT_META_MARK)}));
		// The bound is counted (steps), not timed: the benchmark's section 8 times an
		// evaluation.
		Limits limits;
		limits.maxSteps = 20000;
		const NatVerdict v = eval(iptablesNat(std::move(rules)), p, nullptr, limits);
		CHECK(hasAction(v, NatAction::undetermined));
		CHECK(v.steps == limits.maxSteps);
		CHECK_FALSE(v.certain());
	}
	SECTION("more tied orders than the bound")
	{
		std::vector<Table> tables;
		for (int i = 0; i < 5; i++)
			tables.push_back(table(TableFamily::ip, std::string("t").append(std::to_string(i)), // GCC bug 105329
					       {baseChain("post", 100, {rule(1, {Counter{}})})}));
		const NatVerdict v = eval({tables}, p);
		CHECK(hasAction(v, NatAction::undetermined));
		Limits roomy;
		roomy.maxOrders = 1000;
		const NatVerdict all = eval({tables}, p, nullptr, roomy);
		CHECK(all.certain());
	}
}

TEST_CASE("a walk that reaches its step bound is undetermined, even before a certain masquerade")
{
	// Issue 25, point 3: forks that all lead to a rule that masquerades for certain. Walked
	// whole, that is certain; stopped at the bound, it is "may", never "nothing".
	std::vector<WireRule> rules;
	for (uint64_t i = 0; i < 20; i++)
		rules.push_back(rule(i + 1, {meta(NFT_META_SKUID), cmp(CmpOp::eq, hostU32(uint32_t(i))), Counter{}}));
	rules.push_back(rule(21, {masquerade()}));
	const NatRuleset ruleset = iptablesNat(std::move(rules));
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	const NatVerdict whole = eval(ruleset, p);
	INFO(outcomes(whole));
	CHECK(whole.certain());
	CHECK(whole.decision().action == NatAction::masquerade);
	CHECK(whole.steps > 5);

	Limits tight;
	tight.maxSteps = 5;
	const NatVerdict stopped = eval(ruleset, p, nullptr, tight);
	INFO(outcomes(stopped));
	CHECK(stopped.steps == 5);
	CHECK_FALSE(stopped.certain());
	REQUIRE(hasAction(stopped, NatAction::undetermined));
	const auto undetermined = std::find_if(stopped.outcomes.begin(), stopped.outcomes.end(),
					       [](const Outcome &o) { return o.action == NatAction::undetermined; });
	CHECK(undetermined->decider == Decider::evaluator);
	CHECK(undetermined->reason == "the evaluation stopped after 5 steps (its bound)");
	CHECK(describeOutcome(*undetermined) ==
	      "the evaluator cannot tell: the evaluation stopped after 5 steps (its bound)");
}

TEST_CASE("an unreadable table: every path through it is undetermined")
{
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	SECTION("with its base chain known")
	{
		Table busy = table(TableFamily::ip, "busy", {baseChain("post", 100, {})});
		busy.unreadable = "table ip busy could not be read: it kept changing while it was read (4 attempts)";
		const NatVerdict v = eval({{busy}}, p);
		INFO(outcomes(v));
		CHECK_FALSE(v.certain());
		REQUIRE(v.outcomes.size() == 1);
		CHECK(v.decision().action == NatAction::undetermined);
		CHECK(v.decision().reason == busy.unreadable);
		REQUIRE(v.decision().base);
		CHECK(v.decision().base->table == "busy");
	}
	SECTION("as the reader keeps one it gave up on: without its chains")
	{
		// reader.cpp keeps a table over a limit or changing on every attempt as its name and
		// the reason only. It must not vanish from the walk ("no chain NATs it").
		Table gone{TableFamily::ip, "huge", {}, {},
			   "table ip huge could not be read: more than 50000 rules"};
		const NatVerdict v = eval({{gone}}, p);
		INFO(outcomes(v));
		CHECK_FALSE(v.certain());
		REQUIRE(hasAction(v, NatAction::undetermined));
		CHECK(describeOutcome(v.outcomes.back()) ==
		      "the evaluator cannot tell: table ip huge could not be read: more than 50000 rules");
		// Another family's table does not see the packet.
		Table gone6{TableFamily::ip6, "huge", {}, {}, "table ip6 huge could not be read: more than 50000 rules"};
		CHECK(eval({{gone6}}, p).certain());
	}
}
