// SPDX-License-Identifier: Apache-2.0
// The NAT evaluator on chains built as data: every expression and verdict kind, jumps,
// verdict maps, priority order and ties, the agent's place, bounds, and "may".
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>
#include <linux/rtnetlink.h>

#include "ip-masq-agent/nat_evaluator.h"
#include "ip-masq-agent/nat_rule_text.h"
#include "ip-masq-agent/netlink/nat_reader.h"
#include "../common/nat_builders.h"
#include "scratch_dir.h"


using namespace ipmasq::nat;
using namespace ipmasq::nat::build;

namespace {

// The node of traffic_support.h: the pod's gateway and the link to the outside.
NodeAddresses node()
{
	return {{{addr("198.51.100.1"), 24}, {addr("203.0.113.1"), 24}, {addr("2001:db8:1::1"), 64}},
		true};
}

NatVerdict eval(const NatRuleset &ruleset, const Packet &packet, bool agentMasquerades = false,
		int32_t agentPriority = 110, const Limits &limits = {})
{
	AgentPlacement agent;
	agent.masquerades = agentMasquerades;
	agent.priority = agentPriority;
	return evaluate(ruleset, packet, node(), agent, limits);
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
		out += describeOutcome(o) + "\n";
	for (const MayPoint &m : v.mayPoints)
		out += "may: handle " + std::to_string(m.rule.handle) + ": " + m.reason + "\n";
	return out;
}

// iptables' `-m addrtype ! --dst-type LOCAL`, as iptables-nft 1.8.9 encodes it.
Expression notLocalDst()
{
	return addrtypeV1(0, XT_ADDRTYPE_LOCAL, XT_ADDRTYPE_INVERT_DEST);
}

// kubelet's rule: `! -d 10.0.0.0/8 -m addrtype ! --dst-type LOCAL -j MASQUERADE`.
Rule kubeletRule(uint64_t handle)
{
	return rule(handle, {payload(PayloadBase::network, 16, 1), cmp(CmpOp::neq, {10}), notLocalDst(),
			     Counter{}, target("MASQUERADE")});
}

NatRuleset iptablesNat(std::vector<Rule> postrouting, std::vector<Chain> more = {})
{
	std::vector<Chain> chains{baseChain("POSTROUTING", 100, std::move(postrouting))};
	for (Chain &c : more)
		chains.push_back(std::move(c));
	return {{table(TableFamily::ip, "nat", std::move(chains))}};
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

TEST_CASE("the agent's own decision is placed, and its table is not evaluated")
{
	// A table named like the agent's holds a masquerade: it is the agent's and skipped.
	const NatRuleset ruleset{{table(TableFamily::inet, "ip-masq-agent",
					{baseChain("postrouting", 110, {rule(1, {Masquerade{}})})})}};
	const NatVerdict exempt = eval(ruleset, packetV4("198.51.100.2", "192.0.2.2"), false);
	CHECK(exempt.certain());
	CHECK(exempt.decision().action == NatAction::none);
	const NatVerdict masq = eval(ruleset, packetV4("198.51.100.2", "192.0.2.2"), true);
	CHECK(masq.certain());
	CHECK(masq.decision().action == NatAction::masquerade);
	CHECK(masq.decision().decider == Decider::agent);
	// The same table in the ip family is someone else's: evaluated.
	const NatRuleset other{{table(TableFamily::ip, "ip-masq-agent",
				      {baseChain("postrouting", 110, {rule(1, {Masquerade{}})})})}};
	const NatVerdict v = eval(other, packetV4("198.51.100.2", "192.0.2.2"), false);
	CHECK(v.decision().action == NatAction::masquerade);
	CHECK(v.decision().decider == Decider::rule);
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
		AgentPlacement agent;
		const NatVerdict v = evaluate(ruleset, packetV4("198.51.100.2", "192.0.2.2"),
					      NodeAddresses{{{addr("203.0.113.1"), 24}}, false}, agent);
		CHECK_FALSE(v.certain());
		const NatVerdict local = evaluate(ruleset, packetV4("198.51.100.2", "203.0.113.1"),
						  NodeAddresses{{{addr("203.0.113.1"), 24}}, false}, agent);
		CHECK(local.certain());
	}
}

TEST_CASE("Docker's rule: only its own subnet, only away from docker0")
{
	const NatRuleset ruleset = iptablesNat(
		{rule(3, {meta(NFT_META_OIFNAME), cmp(CmpOp::neq, ifnameBytes("docker0")),
			  payload(PayloadBase::network, 12, 2), cmp(CmpOp::eq, {172, 17}), Counter{},
			  target("MASQUERADE")})});
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
		{rule(3, {payload(PayloadBase::network, 12, 2), cmp(CmpOp::eq, {172, 17}),
			  target("MASQUERADE")})});
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
		iptablesNat({rule(4, {addrtypeV1(XT_ADDRTYPE_LOCAL, 0, 0), target("MASQUERADE")})}), any);
	CHECK_FALSE(bySourceType.certain());
	const NatVerdict byFib = eval(
		iptablesNat({rule(5, {Fib{NFTA_FIB_F_SADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1},
				      cmp(CmpOp::eq, hostU32(RTN_LOCAL)), Masquerade{}})}), any);
	CHECK_FALSE(byFib.certain());
}

TEST_CASE("upstream's leftover chain: jump, return, masquerade")
{
	std::vector<Rule> agentChain{
		rule(5, {payload(PayloadBase::network, 16, 1), cmp(CmpOp::eq, {10}),
			 compat("comment", 0, Bytes(256, 0)), Counter{}, verdict(VerdictCode::returnToCaller)}),
		rule(6, {compat("comment", 0, Bytes(256, 0)), Counter{}, target("MASQUERADE")})};
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
			rule(12, {meta(NFT_META_MARK), Bitwise{BitwiseOp::boolean, NFT_REG_1, NFT_REG_1, 4,
							       hostU32(0xffffffff), hostU32(0x4000), 0},
				  MetaSet{NFT_META_MARK, NFT_REG_1}}),
			rule(13, {Masquerade{NF_NAT_RANGE_PROTO_RANDOM_FULLY, {}, {}}})})});
	// iptables' `-m mark --mark 0x4000/0x4000 -j MASQUERADE`, natively encoded.
	const Table iptables = table(
		TableFamily::ip, "nat",
		{baseChain("POSTROUTING", 100,
			   {rule(8, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)),
				     cmp(CmpOp::eq, hostU32(0x4000)), Counter{}, target("MASQUERADE")})})});
	for (const Table &t : {kubeProxy, iptables}) {
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
	CHECK(both.tiedChains.size() == 2);
	CHECK_FALSE(both.orderMatters);
}

TEST_CASE("kube-proxy's iptables mode: MARK --xor-mark clears the mark, LOG goes on")
{
	// xt_mark_tginfo2 for --xor-mark 0x4000: mark 0x4000, mask 0.
	Bytes xorInfo(8, 0);
	const uint32_t value = 0x4000;
	std::memcpy(xorInfo.data(), &value, 4);
	const NatRuleset ruleset{
		{table(TableFamily::ip, "nat",
		       {baseChain("POSTROUTING", 100,
				  {rule(1, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)),
					    cmp(CmpOp::neq, hostU32(0x4000)), verdict(VerdictCode::returnToCaller)}),
				   rule(2, {target("LOG")}), rule(3, {target("MARK", 2, xorInfo)})})}),
		 table(TableFamily::ip, "later",
		       {baseChain("post", 105,
				  {rule(4, {meta(NFT_META_MARK), cmp(CmpOp::eq, hostU32(0)), Masquerade{}})})})}};
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
	const auto none = ipmasq::netlink::legacyNatTables(proc.path.string());
	REQUIRE(none);
	CHECK_FALSE(none->ipv4);
	CHECK_FALSE(none->ipv6);
	proc.write("ip_tables_names", "filter\nnat\n");
	proc.write("ip6_tables_names", "filter\n");
	const auto some = ipmasq::netlink::legacyNatTables(proc.path.string());
	REQUIRE(some);
	CHECK(some->ipv4);
	CHECK_FALSE(some->ipv6);
}

TEST_CASE("a match the evaluator does not know makes the result may")
{
	const NatRuleset ruleset = iptablesNat(
		{rule(9, {compat("statistic", 0, Bytes(24, 0)), Counter{}, target("MASQUERADE")})});
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
	const NatRuleset expr = iptablesNat({rule(1, {Unknown{"tproxy"}, Masquerade{}})});
	const NatVerdict v = eval(expr, packetV4("198.51.100.2", "192.0.2.2"));
	CHECK(hasAction(v, NatAction::undetermined));
	CHECK(hasAction(v, NatAction::masquerade));
	CHECK(hasAction(v, NatAction::none));
	const NatRuleset tgt = iptablesNat({rule(1, {target("NETMAP")})});
	const NatVerdict t = eval(tgt, packetV4("198.51.100.2", "192.0.2.2"));
	CHECK(hasAction(t, NatAction::undetermined));
	CHECK(hasAction(t, NatAction::none));
}

TEST_CASE("expressions: payload, meta, ct, fib, bitwise, byteorder, cmp, range")
{
	const auto decide = [](std::vector<Expression> match, Packet p = packetV4("198.51.100.2", "192.0.2.2")) {
		match.push_back(Masquerade{});
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
	CHECK(masq({payload(PayloadBase::transport, 2, 2), Range{NFT_REG_1, false, {0x1f, 0x00}, {0x1f, 0xff}}}));
	CHECK_FALSE(masq({payload(PayloadBase::transport, 2, 2), Range{NFT_REG_1, true, {0x1f, 0x00}, {0x1f, 0xff}}}));
	CHECK(masq({payload(PayloadBase::network, 16, 4), cmp(CmpOp::lt, {192, 0, 3, 0})}));
	CHECK_FALSE(masq({payload(PayloadBase::network, 16, 4), cmp(CmpOp::gt, {192, 0, 3, 0})}));
	// ct state new, ct direction original, ct mark 0
	CHECK(masq({CtLoad{NFT_CT_STATE, {}, NFT_REG_1}, bitwiseAnd(hostU32(8)), cmp(CmpOp::neq, hostU32(0))}));
	CHECK_FALSE(masq({CtLoad{NFT_CT_STATE, {}, NFT_REG_1}, bitwiseAnd(hostU32(6)), cmp(CmpOp::neq, hostU32(0))}));
	CHECK(masq({CtLoad{NFT_CT_DIRECTION, {}, NFT_REG_1}, cmp(CmpOp::eq, {0})}));
	CHECK(masq({CtLoad{NFT_CT_MARK, {}, NFT_REG_1}, cmp(CmpOp::eq, hostU32(0))}));
	// fib daddr type != local; fib saddr type unicast
	CHECK(masq({Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1}, cmp(CmpOp::neq, hostU32(RTN_LOCAL))}));
	CHECK(masq({Fib{NFTA_FIB_F_SADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1}, cmp(CmpOp::eq, hostU32(RTN_UNICAST))}));
	CHECK_FALSE(masq({Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1}, cmp(CmpOp::eq, hostU32(RTN_LOCAL))}));
	// byteorder: ntoh of the destination port, compared in host order
	CHECK(masq({payload(PayloadBase::transport, 2, 2), Byteorder{false, NFT_REG_1, NFT_REG_1, 2, 2},
		    cmp(CmpOp::eq, hostU16(8080))}));
	// 32-bit registers alias the 128-bit ones: reg 1 is NFT_REG32_00..03
	CHECK(masq({PayloadLoad{PayloadBase::network, 16, 4, NFT_REG32_00 + 1}, Cmp{NFT_REG32_01, CmpOp::eq, {192, 0, 2, 2}}}));
	// what the packet does not fix is unknown: may
	CHECK_FALSE(decide({payload(PayloadBase::network, 8, 1), cmp(CmpOp::eq, {64})}).certain());
	CHECK_FALSE(decide({meta(NFT_META_SKUID), cmp(CmpOp::eq, hostU32(0))}).certain());
	CHECK_FALSE(decide({OpaqueLoad{"numgen", NFT_REG_1, 4}, cmp(CmpOp::eq, hostU32(0))}).certain());
	CHECK_FALSE(decide({RateMatch{"limit"}}).certain());
	// passthroughs change nothing
	CHECK(masq({Counter{5, 500}, Log{"x", {}}, Passthrough{"notrack"}}));
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
				  {rule(1, {Immediate{NFT_REG_1, hostU32(0x10)}, MetaSet{NFT_META_MARK, NFT_REG_1}}),
				   rule(2, {Immediate{NFT_REG_1, hostU32(0x20)}, CtSet{NFT_CT_MARK, NFT_REG_1}})})}),
		 table(TableFamily::ip, "reader",
		       {baseChain("post", 60,
				  {rule(3, {meta(NFT_META_MARK), cmp(CmpOp::eq, hostU32(0x10)),
					    CtLoad{NFT_CT_MARK, {}, NFT_REG_2}, Cmp{NFT_REG_2, CmpOp::eq, hostU32(0x20)},
					    Masquerade{}})})})}};
	const NatVerdict v = eval(ruleset, packetV4("198.51.100.2", "192.0.2.2"));
	CHECK(v.certain());
	CHECK(v.decision().action == NatAction::masquerade);
	CHECK(v.decision().rule->handle == 3);
}

TEST_CASE("sets, maps and verdict maps")
{
	// ip daddr @nets: 10.0.0.0/8 and 192.168.0.0/16 as nft encodes an interval set.
	Set nets = intervalSetV4("nets", {{"10.0.0.0", "11.0.0.0"}, {"192.168.0.0", "192.169.0.0"}});
	const auto ruleWith = [&](Lookup l, std::vector<Expression> tail) {
		std::vector<Expression> e{payload(PayloadBase::network, 16, 4), l};
		for (auto &t : tail)
			e.push_back(std::move(t));
		return rule(1, std::move(e));
	};
	const auto withSets = [&](Rule r, std::vector<Set> sets, std::vector<Chain> more = {}) {
		std::vector<Chain> chains{baseChain("post", 100, {std::move(r), rule(2, {Masquerade{}})})};
		for (Chain &c : more)
			chains.push_back(std::move(c));
		return NatRuleset{{table(TableFamily::ip, "t", std::move(chains), std::move(sets))}};
	};
	SECTION("interval set: return for members")
	{
		const NatRuleset r = withSets(ruleWith(Lookup{"nets", NFT_REG_1, {}, false},
						       {verdict(VerdictCode::returnToCaller)}),
					      {nets});
		CHECK(eval(r, packetV4("198.51.100.2", "192.168.3.4")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.51.100.2", "10.255.255.255")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.51.100.2", "11.0.0.0")).decision().action == NatAction::masquerade);
		CHECK(eval(r, packetV4("198.51.100.2", "9.255.255.255")).decision().action == NatAction::masquerade);
		// inverted: != @nets
		const NatRuleset inv = withSets(ruleWith(Lookup{"nets", NFT_REG_1, {}, true},
							 {verdict(VerdictCode::returnToCaller)}),
						{nets});
		CHECK(eval(inv, packetV4("198.51.100.2", "192.168.3.4")).decision().action == NatAction::masquerade);
	}
	SECTION("exact set, and a set that changes by itself is may")
	{
		Set exact{"hosts", 0, 7, 4, 0, 0, {{{192, 0, 2, 2}, {}, false, false, {}, {}}, {{192, 0, 2, 3}, {}, false, false, {}, {}}}, true};
		const NatRuleset r = withSets(ruleWith(Lookup{"hosts", NFT_REG_1, {}, false},
						       {verdict(VerdictCode::returnToCaller)}),
					      {exact});
		CHECK(eval(r, packetV4("198.51.100.2", "192.0.2.2")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.51.100.2", "192.0.2.4")).decision().action == NatAction::masquerade);
		exact.flags |= NFT_SET_TIMEOUT;
		const NatRuleset dyn = withSets(ruleWith(Lookup{"hosts", NFT_REG_1, {}, false},
							 {verdict(VerdictCode::returnToCaller)}),
						{exact});
		CHECK_FALSE(eval(dyn, packetV4("198.51.100.2", "192.0.2.2")).certain());
		exact.flags &= ~NFT_SET_TIMEOUT;
		exact.complete = false;
		const NatRuleset partial = withSets(ruleWith(Lookup{"hosts", NFT_REG_1, {}, false},
							     {verdict(VerdictCode::returnToCaller)}),
						    {exact});
		CHECK_FALSE(eval(partial, packetV4("198.51.100.2", "192.0.2.2")).certain());
	}
	SECTION("snat to ip saddr map @m")
	{
		Set map{"m", NFT_SET_MAP, 7, 4, 7, 4, {{{198, 51, 100, 2}, {}, false, false, {203, 0, 113, 9}, {}}}, true};
		Nat snat;
		snat.family = NFPROTO_IPV4;
		snat.addrMinReg = NFT_REG_1;
		const NatRuleset r{{table(TableFamily::ip, "t",
					  {baseChain("post", 100,
						     {rule(1, {payload(PayloadBase::network, 12, 4),
							       Lookup{"m", NFT_REG_1, NFT_REG_1, false}, snat})})},
					  {map})}};
		const NatVerdict v = eval(r, packetV4("198.51.100.2", "192.0.2.2"));
		CHECK(v.certain());
		CHECK(v.decision().action == NatAction::snat);
		REQUIRE(v.decision().address);
		CHECK(v.decision().address->toString() == "203.0.113.9");
		CHECK(eval(r, packetV4("198.51.100.3", "192.0.2.2")).decision().action == NatAction::none);
	}
	SECTION("verdict map: jump to a chain, and every verdict when the key is unknown")
	{
		Set vmap{"vm", NFT_SET_MAP, 7, 4, NFT_DATA_VERDICT, 0,
			 {{{192, 0, 2, 2}, {}, false, false, {}, Verdict{VerdictCode::jump, "snat-it"}},
			  {{192, 0, 2, 3}, {}, false, false, {}, Verdict{VerdictCode::accept, {}}}},
			 true};
		Nat snat;
		snat.family = NFPROTO_IPV4;
		snat.addrMinReg = NFT_REG_1;
		const NatRuleset r = withSets(
			ruleWith(Lookup{"vm", NFT_REG_1, NFT_REG_VERDICT, false}, {}), {vmap},
			{chain("snat-it", {rule(5, {Immediate{NFT_REG_1, {203, 0, 113, 7}}, snat})})});
		const NatVerdict jumped = eval(r, packetV4("198.51.100.2", "192.0.2.2"));
		CHECK(jumped.decision().action == NatAction::snat);
		CHECK(jumped.decision().rule->chain == "snat-it");
		CHECK(eval(r, packetV4("198.51.100.2", "192.0.2.3")).decision().action == NatAction::none);
		CHECK(eval(r, packetV4("198.51.100.2", "192.0.2.4")).decision().action == NatAction::masquerade);
		// A key the packet does not fix: every verdict of the map is possible.
		Packet unknownDst = packetV4("198.51.100.2", "192.0.2.2");
		const NatRuleset unknownKey = withSets(
			rule(1, {meta(NFT_META_SKUID), Lookup{"vm", NFT_REG_1, NFT_REG_VERDICT, false}}),
			{vmap}, {chain("snat-it", {rule(5, {Immediate{NFT_REG_1, {203, 0, 113, 7}}, snat})})});
		const NatVerdict any = eval(unknownKey, unknownDst);
		INFO(outcomes(any));
		CHECK(hasAction(any, NatAction::snat));
		CHECK(hasAction(any, NatAction::none));
		CHECK(hasAction(any, NatAction::masquerade));
		CHECK_FALSE(any.certain());
	}
}

TEST_CASE("verdicts: accept, drop, policy, queue, return, jump and goto")
{
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	SECTION("accept ends one base chain; the next nat chain still decides")
	{
		const NatRuleset r{{table(TableFamily::ip, "a", {baseChain("post", 90, {rule(1, {verdict(VerdictCode::accept)})})}),
				    table(TableFamily::ip, "b", {baseChain("post", 95, {rule(2, {Masquerade{}})})})}};
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
		NatRuleset r = iptablesNat({rule(1, {verdict(VerdictCode::returnToCaller)}), rule(2, {Masquerade{}})});
		CHECK(eval(r, p).decision().action == NatAction::none);
		r.tables[0].chains[0].base->policy = VerdictCode::drop;
		CHECK(eval(r, p).decision().action == NatAction::dropped);
	}
	SECTION("goto does not come back; jump does")
	{
		// base: jump X, then masquerade. X: goto Y, then drop. Y: return.
		const auto ruleset = [](VerdictCode xToY) {
			return iptablesNat({rule(1, {verdict(VerdictCode::jump, "X")}), rule(2, {Masquerade{}})},
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
		const NatRuleset r = iptablesNat({rule(1, {verdict(VerdictCode::jump, "X")}), rule(2, {Masquerade{}})},
						 {chain("X", {rule(3, {Counter{}})})});
		CHECK(eval(r, p).decision().action == NatAction::masquerade);
	}
	SECTION("a jump to a chain that was not read")
	{
		const NatVerdict v = eval(iptablesNat({rule(1, {verdict(VerdictCode::jump, "nowhere")})}), p);
		CHECK(v.decision().action == NatAction::undetermined);
	}
}

TEST_CASE("NAT kinds: snat with an address, dnat, redirect, the first NAT wins")
{
	Nat snat;
	snat.family = NFPROTO_IPV4;
	snat.addrMinReg = NFT_REG_1;
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	const NatVerdict s = eval(iptablesNat({rule(1, {Immediate{NFT_REG_1, {203, 0, 113, 1}}, snat}),
					       rule(2, {Masquerade{}})}),
				  p);
	CHECK(s.certain());
	CHECK(s.decision().action == NatAction::snat);
	CHECK(s.decision().address->toString() == "203.0.113.1");
	CHECK(describeOutcome(s.decision()).find("rewrites its source to 203.0.113.1") != std::string::npos);
	Nat dnat = snat;
	dnat.type = NatType::dnat;
	CHECK(eval(iptablesNat({rule(1, {Immediate{NFT_REG_1, {192, 0, 2, 9}}, dnat})}), p).decision().action ==
	      NatAction::dnat);
	CHECK(eval(iptablesNat({rule(1, {Redirect{}})}), p).decision().action == NatAction::redirect);
	CHECK(eval(iptablesNat({rule(1, {target("SNAT", 0, snatV4Info("203.0.113.5"))})}), p)
		      .decision()
		      .address->toString() == "203.0.113.5");
	// "snat ip" in an inet table does nothing to an IPv6 packet: the next rule decides.
	const NatRuleset inet{{table(TableFamily::inet, "t",
				     {baseChain("post", 100, {rule(1, {Immediate{NFT_REG_1, {203, 0, 113, 1}}, snat}),
							      rule(2, {Masquerade{}})})})}};
	CHECK(eval(inet, packetV6("2001:db8:1::2", "2001:db8:2::2")).decision().action == NatAction::masquerade);
	// An ip table does not see IPv6 packets, an ip6 table not IPv4 ones.
	CHECK(eval(iptablesNat({rule(1, {Masquerade{}})}), packetV6("2001:db8:1::2", "2001:db8:2::2"))
		      .decision()
		      .action == NatAction::none);
}

TEST_CASE("priority order, ties, and the agent's place")
{
	const Packet p = packetV4("198.51.100.2", "192.0.2.2");
	Nat snat;
	snat.family = NFPROTO_IPV4;
	snat.addrMinReg = NFT_REG_1;
	const auto masqAt = [](const char *name, int32_t prio) {
		return table(TableFamily::ip, name, {baseChain("post", prio, {rule(1, {Masquerade{}})})});
	};
	const auto snatAt = [&](const char *name, int32_t prio) {
		return table(TableFamily::inet, name,
			     {baseChain("post", prio, {rule(1, {Immediate{NFT_REG_1, {203, 0, 113, 1}}, snat})})});
	};
	SECTION("the lower priority decides first")
	{
		CHECK(eval({{snatAt("s", 100), masqAt("m", 90)}}, p).decision().action == NatAction::masquerade);
		CHECK(eval({{snatAt("s", 80), masqAt("m", 90)}}, p).decision().action == NatAction::snat);
	}
	SECTION("equal priorities: every order, and the result says the order matters")
	{
		const NatVerdict v = eval({{snatAt("s", 100), masqAt("m", 100)}}, p);
		INFO(outcomes(v));
		CHECK_FALSE(v.certain());
		CHECK(v.orderMatters);
		CHECK(hasAction(v, NatAction::snat));
		CHECK(hasAction(v, NatAction::masquerade));
		CHECK(v.tiedChains.size() == 2);
	}
	SECTION("before and after the agent")
	{
		const NatVerdict after = eval({{masqAt("m", 120)}}, p, false);
		CHECK(after.decision().placement == Placement::afterAgent);
		CHECK(describeOutcome(after.decision()).find("after the agent") != std::string::npos);
		// The agent masquerades first: the later chain is never consulted.
		const NatVerdict agentFirst = eval({{snatAt("s", 120)}}, p, true);
		CHECK(agentFirst.certain());
		CHECK(agentFirst.decision().decider == Decider::agent);
		const NatVerdict before = eval({{snatAt("s", 100)}}, p, true);
		CHECK(before.decision().action == NatAction::snat);
		CHECK(before.decision().placement == Placement::beforeAgent);
		const NatVerdict tied = eval({{snatAt("s", 110)}}, p, true);
		CHECK(tied.orderMatters);
		CHECK_FALSE(tied.certain());
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
			std::vector<Chain> chains;
			for (int i = 0; i < depth; i++) {
				std::vector<Rule> rules;
				if (i + 1 < depth)
					rules.push_back(rule(1, {verdict(VerdictCode::jump, name(i + 1))}));
				else
					rules.push_back(rule(1, {Masquerade{}}));
				chains.push_back(chain(name(i), std::move(rules)));
			}
			return iptablesNat({rule(1, {verdict(VerdictCode::jump, "c0")})}, std::move(chains));
		};
		CHECK(eval(nested(16), p).decision().action == NatAction::masquerade);
		CHECK(eval(nested(17), p).decision().action == NatAction::undetermined);
	}
	SECTION("a huge chain of undecidable rules stops at the step bound")
	{
		std::vector<Rule> rules;
		for (uint64_t i = 0; i < 300000; i++)
			rules.push_back(rule(i + 1, {meta(NFT_META_SKUID), cmp(CmpOp::eq, hostU32(uint32_t(i))),
						     Immediate{NFT_REG_1, hostU32(uint32_t(i))},
						     MetaSet{NFT_META_MARK, NFT_REG_1}}));
		// The bound is counted (rulesEvaluated), not timed: the benchmark's section 8
		// times an evaluation.
		const NatVerdict v = eval(iptablesNat(std::move(rules)), p);
		CHECK(hasAction(v, NatAction::undetermined));
		CHECK(v.rulesEvaluated <= Limits{}.maxRuleEvaluations);
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
		const NatVerdict all = eval({tables}, p, false, 110, roomy);
		CHECK(all.certain());
	}
}

TEST_CASE("rules print as nft 1.0.6 lists them")
{
	const Table ipNat = table(TableFamily::ip, "nat", {});
	CHECK(ruleText(ipNat, kubeletRule(2)) ==
	      "ip daddr != 10.0.0.0/8 fib daddr type != local counter packets 0 bytes 0 masquerade");
	CHECK(ruleText(ipNat, rule(3, {meta(NFT_META_OIFNAME), cmp(CmpOp::neq, ifnameBytes("docker0")),
				       payload(PayloadBase::network, 12, 2), cmp(CmpOp::eq, {172, 17}),
				       Counter{}, target("MASQUERADE")})) ==
	      "oifname != \"docker0\" ip saddr 172.17.0.0/16 counter packets 0 bytes 0 masquerade");
	CHECK(ruleText(ipNat, rule(8, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)),
				       cmp(CmpOp::eq, hostU32(0x4000)), Counter{}, target("MASQUERADE")})) ==
	      "meta mark & 0x00004000 == 0x00004000 counter packets 0 bytes 0 masquerade");
	CHECK(ruleText(ipNat, rule(9, {compat("statistic", 0, Bytes(24, 0)), target("MASQUERADE")})) ==
	      "xt match statistic masquerade");
	CHECK(ruleText(ipNat, rule(9, {meta(NFT_META_OIFNAME), cmp(CmpOp::eq, {'e', 't', 'h'}), Counter{},
				       verdict(VerdictCode::returnToCaller)})) ==
	      "oifname \"eth*\" counter packets 0 bytes 0 return");
	CHECK(ruleText(ipNat, rule(1, {target("NETMAP")})) == "xt target NETMAP");
	CHECK(ruleText(ipNat, rule(1, {target("SNAT", 0, snatV4Info("203.0.113.1"))})) == "snat to 203.0.113.1");
	const Table inet = table(TableFamily::inet, "t", {});
	// The inet dependency "meta nfproto ipv4" is left out before an ip payload.
	CHECK(ruleText(inet, rule(1, {meta(NFT_META_NFPROTO), cmp(CmpOp::eq, {NFPROTO_IPV4}),
				      payload(PayloadBase::network, 16, 4), bitwiseAnd({0xff, 0xf0, 0, 0}),
				      cmp(CmpOp::neq, {172, 16, 0, 0}), CtLoad{NFT_CT_STATE, {}, NFT_REG_1},
				      bitwiseAnd(hostU32(8)), cmp(CmpOp::neq, hostU32(0)), Masquerade{}})) ==
	      "ip daddr != 172.16.0.0/12 ct state new masquerade");
	CHECK(ruleText(inet, rule(1, {meta(NFT_META_NFPROTO), cmp(CmpOp::eq, {NFPROTO_IPV4}),
				      Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1},
				      cmp(CmpOp::eq, hostU32(RTN_LOCAL)), verdict(VerdictCode::returnToCaller)})) ==
	      "meta nfproto ipv4 fib daddr type local return");
	CHECK(ruleText(inet, rule(1, {meta(NFT_META_L4PROTO), cmp(CmpOp::eq, {6}),
				      payload(PayloadBase::transport, 2, 2), cmp(CmpOp::gte, {0x03, 0xe8}),
				      cmp(CmpOp::lte, {0x07, 0xd0}), verdict(VerdictCode::accept)})) ==
	      "tcp dport 1000-2000 accept");
	CHECK(ruleText(inet, rule(1, {Unknown{"tproxy"}, Masquerade{NF_NAT_RANGE_PROTO_RANDOM_FULLY, {}, {}}})) ==
	      "[ tproxy ] masquerade fully-random");
	Rule commented = rule(1, {Masquerade{}});
	commented.comment = "masquerade \"all\"";
	CHECK(ruleText(ipNat, commented) == "masquerade comment \"masquerade \\\"all\\\"\"");
}
