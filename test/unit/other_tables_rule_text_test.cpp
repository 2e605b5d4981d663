// SPDX-License-Identifier: Apache-2.0
// Decoded rules as `nft list ruleset` (nft 1.0.6, with xtables) prints them. Every expected
// string below was checked against the real listing: the rules loaded with `nft -f` (native
// syntax) or iptables-nft 1.8.9 in `unshare -n`, their bytecode taken from
// `nft --debug=netlink`, their sets as the kernel declares them (`nft --debug=mnl`).
#include <catch2/catch.hpp>

#include <cstring>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>
#include <linux/rtnetlink.h>

#include "ip-masq-agent/nft/codec/rule_text.h"
#include "../common/nat_builders.h"

using namespace ipmasq::nat;
using namespace ipmasq::nft;
using namespace ipmasq::nft::build;

namespace {

std::string text(const Table &t, std::vector<Expression> expressions, std::string comment = {})
{
	return ruleText(t, decoded(t, std::move(expressions), std::move(comment)));
}

// An anonymous interval map of `ip saddr` (or ip6 saddr) keys, as nft declares one.
Set anonymousMap(std::string name, uint32_t keyType, uint32_t keyLen, uint32_t dataType, uint32_t dataLen,
		 const std::vector<IntervalEntry> &entries)
{
	Set set = declareSet(std::move(name), kAnonymous | NFT_SET_INTERVAL | NFT_SET_MAP, keyType, keyLen, dataType,
			     dataLen);
	// nft marks a map whose data are ranges (two addresses: a prefix, a range) in its user data.
	set.dataInterval = dataLen == 2 * keyLen;
	return intervalSet(std::move(set), entries);
}

// The maps of nft's `snat ... to ip saddr map { 198.18.10.0/24 : ... }`: the kernel
// declares a map of two addresses (a prefix, a range) as data type ipv4_addr of 8 bytes.
std::vector<Set> ipv4SnatMaps()
{
	return {anonymousMap("__map0", kIpv4Type, 4, kIpv4Type, 8,
			     {{"198.18.10.0/24", concat(bytesOf("198.51.100.0"), bytesOf("198.51.100.255"))}}),
		anonymousMap("__map1", kIpv4Type, 4, kIpv4Type, 4, {{"198.18.10.0/24", bytesOf("198.51.100.7")}}),
		anonymousMap("__map2", kIpv4Type, 4, kIpv4Type, 8,
			     {{"198.18.10.0/24", concat(bytesOf("198.51.100.1"), bytesOf("198.51.100.5"))}})};
}

// ip saddr's `meta nfproto ipv4` dependency, which an inet table's rules carry.
std::vector<Expression> inInet(std::vector<Expression> e)
{
	e.insert(e.begin(), {meta(NFT_META_NFPROTO), cmp(CmpOp::eq, {NFPROTO_IPV4})});
	return e;
}

} // namespace

TEST_CASE("rule text: iptables-nft's rules")
{
	const Table ipNat{TableFamily::ip, "nat", {}, {}};
	CHECK(text(ipNat, {payload(PayloadBase::network, 16, 1), cmp(CmpOp::neq, {10}),
			   addrtypeV1(0, XT_ADDRTYPE_LOCAL, XT_ADDRTYPE_INVERT_DEST), Counter{}, xtMasquerade()}) ==
	      "ip daddr != 10.0.0.0/8 fib daddr type != local counter packets 0 bytes 0 masquerade");
	CHECK(text(ipNat, {addrtypeV1(0, XT_ADDRTYPE_LOCAL, XT_ADDRTYPE_LIMIT_IFACE_OUT), Counter{},
			   verdict(VerdictCode::returnToCaller)}) ==
	      "fib daddr . oif type local counter packets 0 bytes 0 return");
	CHECK(text(ipNat, {meta(NFT_META_OIFNAME), cmp(CmpOp::neq, ifnameBytes("docker0")),
			   payload(PayloadBase::network, 12, 2), cmp(CmpOp::eq, {172, 17}), Counter{}, xtMasquerade()}) ==
	      "oifname != \"docker0\" ip saddr 172.17.0.0/16 counter packets 0 bytes 0 masquerade");
	CHECK(text(ipNat, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)), cmp(CmpOp::eq, hostU32(0x4000)),
			   Counter{}, xtMasquerade()}) ==
	      "meta mark & 0x00004000 == 0x00004000 counter packets 0 bytes 0 masquerade");
	CHECK(text(ipNat, {meta(NFT_META_MARK), cmp(CmpOp::neq, hostU32(1)), Counter{},
			   xtMasquerade(NF_NAT_RANGE_PROTO_RANDOM_FULLY)}) ==
	      "meta mark != 0x00000001 counter packets 0 bytes 0 masquerade fully-random");
	CHECK(text(ipNat, {meta(NFT_META_OIFNAME), cmp(CmpOp::eq, {'e', 't', 'h'}), Counter{},
			   verdict(VerdictCode::returnToCaller)}) == "oifname \"eth*\" counter packets 0 bytes 0 return");
	// -s 198.18.0.0/15 -j SNAT --to-source 203.0.113.7
	CHECK(text(ipNat, {ipSaddr(), bitwiseAnd({255, 254, 0, 0}), cmp(CmpOp::eq, {198, 18, 0, 0}), Counter{},
			   target("SNAT", 0, snatV4Info("203.0.113.7"))}) ==
	      "ip saddr 198.18.0.0/15 counter packets 0 bytes 0 snat to 203.0.113.7");
	// -p tcp -j SNAT --to-source 203.0.113.7-203.0.113.9:1000-2000
	CHECK(text(ipNat, {meta(NFT_META_L4PROTO), cmp(CmpOp::eq, {IPPROTO_TCP}), Counter{},
			   target("SNAT", 0, compatRangeV4(NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED,
							   "203.0.113.7", "203.0.113.9", 1000, 2000))}) ==
	      "meta l4proto tcp counter packets 0 bytes 0 snat to 203.0.113.7-203.0.113.9:1000-2000");
	// -s 198.18.10.0/24 -j NETMAP --to 198.51.100.0/24: nft 1.0.6 does not translate it.
	CHECK(text(ipNat, {payload(PayloadBase::network, 12, 3), cmp(CmpOp::eq, {198, 18, 10}), Counter{},
			   target("NETMAP", 0, compatRangeV4(NF_NAT_RANGE_MAP_IPS, "198.51.100.0", "198.51.100.255"))}) ==
	      "ip saddr 198.18.10.0/24 counter packets 0 bytes 0 xt target NETMAP");
	const Table ip6Nat{TableFamily::ip6, "nat", {}, {}};
	const Bytes prefix6 = bytesOf("2001:db8:1::");
	CHECK(text(ip6Nat, {payload(PayloadBase::network, 8, 8), cmp(CmpOp::eq, Bytes(prefix6.begin(), prefix6.begin() + 8)),
			    Counter{}, target("NETMAP", 0, natRangeInfo(NF_NAT_RANGE_MAP_IPS, "2001:db8:2::",
									"2001:db8:2::ffff:ffff:ffff:ffff"))}) ==
	      "ip6 saddr 2001:db8:1::/64 counter packets 0 bytes 0 xt target NETMAP");
	// MARK --xor-mark 0x4000, --set-xmark 0x4000/0xffff (revision 2), as libxtables
	// translates them.
	CHECK(text(ipNat, {Counter{}, markTarget(0x4000, 0)}) == "counter packets 0 bytes 0 meta mark set mark xor 0x4000");
	CHECK(text(ipNat, {Counter{}, markTarget(0x4000, 0xffff)}) ==
	      "counter packets 0 bytes 0 meta mark set mark and 0xffff0000 xor 0x4000");
	// What nft lists through libxtables and the printer does not translate is marked
	// unknown, never printed as nft syntax it is not; a comment nft lists as nothing.
	CHECK(text(ipNat, {compat("multiport", 1, Bytes(52, 0)), xtMasquerade()}) ==
	      "[unknown: xt match multiport] masquerade");
	// -m statistic, random and nth, as libxtables translates it.
	Bytes statistic(24, 0);
	const uint32_t half = 1u << 30;
	std::memcpy(statistic.data() + 4, &half, 4);
	CHECK(text(ipNat, {compat("statistic", 0, statistic), xtMasquerade()}) ==
	      "meta random & 2147483647 < 1073741824 masquerade");
	statistic = Bytes(24, 0);
	statistic[0] = 1; // XT_STATISTIC_MODE_NTH
	statistic[2] = 1; // XT_STATISTIC_INVERT
	statistic[4] = 2; // every 3rd
	statistic[8] = 1;
	CHECK(text(ipNat, {compat("statistic", 0, statistic), xtMasquerade()}) == "numgen inc mod 3 != 1 masquerade");
	CHECK(text(ipNat, {target("CONNMARK", 1, Bytes(16, 0))}) == "[unknown: xt target CONNMARK]");
	Bytes comment(256, 0);
	std::memcpy(comment.data(), "hello", 5);
	CHECK(text(ipNat, {ipSaddr(), cmp(CmpOp::eq, bytesOf("192.0.2.1")), compat("comment", 0, comment), Counter{},
			   xtMasquerade()}) == "ip saddr 192.0.2.1  counter packets 0 bytes 0 masquerade");
}

TEST_CASE("rule text: snat prefix, prefix and address maps, in ip, inet and ip6 tables")
{
	SECTION("ip")
	{
		const Table t{TableFamily::ip, "t", {}, ipv4SnatMaps()};
		CHECK(text(t, {payload(PayloadBase::network, 12, 3), cmp(CmpOp::eq, {198, 18, 10}),
			       immediate(bytesOf("198.51.100.0"), NFT_REG_1), immediate(bytesOf("198.51.100.255"), NFT_REG_2),
			       snatFrom(NFT_REG_1, NFT_REG_2, NF_NAT_RANGE_NETMAP)}) ==
		      "ip saddr 198.18.10.0/24 snat prefix to 198.51.100.0/24");
		CHECK(text(t, {ipSaddr(), mapLookup("__map0", NFT_REG_1), snatFrom(NFT_REG_1, NFT_REG32_01, NF_NAT_RANGE_NETMAP)}) ==
		      "snat ip prefix to ip saddr map { 198.18.10.0/24 : 198.51.100.0/24 }");
		CHECK(text(t, {ipSaddr(), mapLookup("__map1", NFT_REG_1), snatFrom(NFT_REG_1)}) ==
		      "snat to ip saddr map { 198.18.10.0/24 : 198.51.100.7 }");
		CHECK(text(t, {ipSaddr(), mapLookup("__map2", NFT_REG_1), snatFrom(NFT_REG_1, NFT_REG32_01)}) ==
		      "snat ip to ip saddr map { 198.18.10.0/24 : 198.51.100.1-198.51.100.5 }");
		CHECK(text(t, {immediate(bytesOf("203.0.113.1"), NFT_REG_1), immediate(bytesOf("203.0.113.3"), NFT_REG_2),
			       snatFrom(NFT_REG_1, NFT_REG_2)}) == "snat to 203.0.113.1-203.0.113.3");
		// A named map: by its name.
		Table named{TableFamily::ip, "t", {}, {}};
		Set m = declareSet("m", NFT_SET_MAP, kIpv4Type, 4, kIpv4Type, 4);
		m.add({bytesOf("198.51.100.2"), {}, false, false, bytesOf("203.0.113.9")});
		m.finish();
		named.sets.push_back(std::move(m));
		CHECK(text(named, {ipSaddr(), mapLookup("m", NFT_REG_1), snatFrom(NFT_REG_1)}) == "snat to ip saddr map @m");
	}
	SECTION("inet: the family is named, the nfproto dependency left out")
	{
		const Table t{TableFamily::inet, "u", {}, ipv4SnatMaps()};
		CHECK(text(t, inInet({ipSaddr(), mapLookup("__map0", NFT_REG_1),
				      snatFrom(NFT_REG_1, NFT_REG32_01, NF_NAT_RANGE_NETMAP)})) ==
		      "snat ip prefix to ip saddr map { 198.18.10.0/24 : 198.51.100.0/24 }");
		CHECK(text(t, inInet({ipSaddr(), mapLookup("__map1", NFT_REG_1), snatFrom(NFT_REG_1)})) ==
		      "snat ip to ip saddr map { 198.18.10.0/24 : 198.51.100.7 }");
		CHECK(text(t, inInet({ipSaddr(), mapLookup("__map2", NFT_REG_1), snatFrom(NFT_REG_1, NFT_REG32_01)})) ==
		      "snat ip to ip saddr map { 198.18.10.0/24 : 198.51.100.1-198.51.100.5 }");
		CHECK(text(t, {immediate(bytesOf("198.51.100.0"), NFT_REG_1), immediate(bytesOf("198.51.100.255"), NFT_REG_2),
			       snatFrom(NFT_REG_1, NFT_REG_2, NF_NAT_RANGE_NETMAP)}) ==
		      "snat ip prefix to 198.51.100.0/24");
	}
	SECTION("ip6: prefix and address maps, an address range with ports")
	{
		const Table t{TableFamily::ip6, "v", {},
			      {anonymousMap("__map0", kIpv6Type, 16, kIpv6Type, 32,
					    {{"2001:db8:1::/64", concat(bytesOf("2001:db8:2::"),
									 bytesOf("2001:db8:2::ffff:ffff:ffff:ffff"))}}),
			       anonymousMap("__map1", kIpv6Type, 16, kIpv6Type, 16,
					    {{"2001:db8:1::/64", bytesOf("2001:db8:2::7")}})}};
		const Expression saddr6 = payload(PayloadBase::network, 8, 16);
		CHECK(text(t, {saddr6, mapLookup("__map0", NFT_REG_1),
			       snatFrom(NFT_REG_1, NFT_REG_2, NF_NAT_RANGE_NETMAP, NFPROTO_IPV6)}) ==
		      "snat ip6 prefix to ip6 saddr map { 2001:db8:1::/64 : 2001:db8:2::/64 }");
		CHECK(text(t, {saddr6, mapLookup("__map1", NFT_REG_1), snatFrom(NFT_REG_1, std::nullopt, 0, NFPROTO_IPV6)}) ==
		      "snat to ip6 saddr map { 2001:db8:1::/64 : 2001:db8:2::7 }");
		const Nat ports{.type = NFT_NAT_SNAT, .family = NFPROTO_IPV6, .addressMin = NFT_REG_1,
				.addressMax = NFT_REG_2, .portMin = NFT_REG_3, .portMax = NFT_REG_4,
				.flags = NF_NAT_RANGE_PROTO_SPECIFIED};
		CHECK(text(t, {meta(NFT_META_L4PROTO), cmp(CmpOp::eq, {IPPROTO_TCP}),
			       immediate(bytesOf("2001:db8::7"), NFT_REG_1), immediate(bytesOf("2001:db8::9"), NFT_REG_2),
			       immediate({0x03, 0xe8}, NFT_REG_3), immediate({0x07, 0xd0}, NFT_REG_4), ports}) ==
		      "meta l4proto tcp snat to [2001:db8::7]-[2001:db8::9]:1000-2000");
	}
}

TEST_CASE("rule text: marks, verdict maps, concatenations, ranges, comments")
{
	Table t{TableFamily::ip, "t", {},
		{anonymousMap("__map0", kIpv4Type, 4, NFT_DATA_VERDICT, 0,
			      {{"10.0.0.0/8", {}, Verdict{VerdictCode::accept, {}}},
			       {"192.0.2.1", {}, Verdict{VerdictCode::drop, {}}},
			       {"192.0.2.2", {}, Verdict{VerdictCode::jump, "other"}}}),
		 exactSet("__set0", (kIpv4Type << 6) | kIpv4Type, 8, {concat(bytesOf("198.18.0.1"), bytesOf("192.0.2.1"))},
			  kAnonymous)}};
	// nft's own `meta mark set mark xor 0x4000` lists as the expression it is.
	CHECK(text(t, {meta(NFT_META_MARK),
		       bitwise(hostU32(0xffffffff), hostU32(0x4000)), metaSet(NFT_META_MARK)}) ==
	      "meta mark set meta mark ^ 0x00004000");
	CHECK(text(t, {ipDaddr(), vmapLookup("__map0")}) ==
	      "ip daddr vmap { 10.0.0.0/8 : accept, 192.0.2.1 : drop, 192.0.2.2 : jump other }");
	CHECK(text(t, {ipSaddr(), ipDaddr(NFT_REG32_01), lookup("__set0"), masquerade()}) ==
	      "ip saddr . ip daddr { 198.18.0.1 . 192.0.2.1 } masquerade");
	CHECK(text(t, {ipDaddr(), bitwiseAnd({0xff, 0xf0, 0, 0}), cmp(CmpOp::neq, {172, 16, 0, 0}),
		       ct(NFT_CT_STATE), bitwiseAnd(hostU32(8)), cmp(CmpOp::neq, hostU32(0)),
		       masquerade()}) == "ip daddr != 172.16.0.0/12 ct state new masquerade");
	CHECK(text(t, {meta(NFT_META_L4PROTO), cmp(CmpOp::eq, {6}), payload(PayloadBase::transport, 2, 2),
		       cmp(CmpOp::gte, {0x03, 0xe8}), cmp(CmpOp::lte, {0x07, 0xd0}), verdict(VerdictCode::accept)}) ==
	      "tcp dport 1000-2000 accept");
	CHECK(text(t, {masquerade(NF_NAT_RANGE_PROTO_RANDOM_FULLY)}, "masquerade all") ==
	      "masquerade fully-random comment \"masquerade all\"");
	const Table inet{TableFamily::inet, "u", {}, {}};
	// The inet dependency "meta nfproto ipv4" is left out before an ip payload, kept before
	// fib (which does not imply it).
	CHECK(text(inet, inInet({ipDaddr(), bitwiseAnd({0xff, 0xf0, 0, 0}), cmp(CmpOp::neq, {172, 16, 0, 0}),
				 masquerade()})) == "ip daddr != 172.16.0.0/12 masquerade");
	CHECK(text(inet, inInet({Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, NFT_REG_1},
				 cmp(CmpOp::eq, hostU32(RTN_LOCAL)), verdict(VerdictCode::returnToCaller)})) ==
	      "meta nfproto ipv4 fib daddr type local return");
	// Not checkable with nft (its parser takes no quote in a comment; the kernel holds any
	// byte): quotes and control characters escaped, on one line; a backslash as nft lists it.
	CHECK(text(t, {masquerade()}, "masquerade \"all\"\\\n") == "masquerade comment \"masquerade \\\"all\\\"\\\\n\"");
	CHECK(text(t, {UnknownExpression{"tproxy"}, masquerade(NF_NAT_RANGE_PROTO_RANDOM_FULLY)}) ==
	      "[unknown: tproxy] masquerade fully-random");
}

TEST_CASE("rule text: a set declared with a data length but not as a map lists its keys")
{
	// Found by fuzz_nat_evaluator: such a set keeps no data, and reading an element's
	// data read from a null pointer.
	Set odd = declareSet("__set0", kAnonymous, kIpv4Type, 4, kIpv4Type, 4);
	odd.add({bytesOf("192.0.2.1"), {}, false, false, bytesOf("203.0.113.9")});
	odd.finish();
	const Table t{TableFamily::ip, "t", {}, {odd}};
	CHECK(text(t, {ipDaddr(), lookup("__set0"), verdict(VerdictCode::returnToCaller)}) ==
	      "ip daddr { 192.0.2.1 } return");
	CHECK(odd.data(0).empty());
}
