// SPDX-License-Identifier: Apache-2.0
// The decoder: registers followed byte by byte (slices of values, zeros, unset bytes),
// xtables info structs read into the statements native expressions decode to, and what it
// does with what it cannot give a meaning.
#include <catch2/catch.hpp>

#include <cstring>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>
#include <net/if.h>

#include "ip-masq-agent/nft/codec/decoder.h"
#include "ip-masq-agent/nft/codec/vocabulary.h"
#include "../common/nat_builders.h"

using namespace ipmasq::nat;
using namespace ipmasq::nft;
using namespace ipmasq::nft::build;
using ipmasq::Family;

namespace {

const Table kIp{TableFamily::ip, "nat", {}, {}};
const Table kIp6{TableFamily::ip6, "nat", {}, {}};
const Table kInet{TableFamily::inet, "t", {}, {}};

// The statements of `rule` of one kind, in order.
template<typename S>
std::vector<S> all(const Rule &rule)
{
	std::vector<S> out;
	for (const Statement &s : rule.statements)
		if (const auto *one = std::get_if<S>(&s))
			out.push_back(*one);
	return out;
}

template<typename S>
S only(const Rule &rule)
{
	const std::vector<S> found = all<S>(rule);
	INFO("statements: " << rule.statements.size());
	REQUIRE(found.size() == 1);
	return found[0];
}

// The statements by their variant index, in order.
std::vector<size_t> kinds(const Rule &rule)
{
	std::vector<size_t> out;
	for (const Statement &s : rule.statements)
		out.push_back(s.index());
	return out;
}

// A read's slices, as a value to compare.
using Read = std::vector<Slice>;
Read readOf(const Rule &rule, ReadId id)
{
	const auto slices = rule.read(id);
	return Read(slices.begin(), slices.end());
}

template<typename S>
size_t kindOf()
{
	return Statement(S{}).index();
}

Slice valueSlice(ValueId value, uint32_t offset, uint32_t len)
{
	return {Slice::Kind::value, value, offset, len};
}

const Other &lastOther(const Rule &rule)
{
	REQUIRE_FALSE(rule.statements.empty());
	const auto *u = std::get_if<Other>(&rule.statements.back());
	REQUIRE(u);
	return *u;
}

Bytes constantOrEmpty(const Rule &rule, std::optional<ReadId> read)
{
	if (!read)
		return {};
	return constantOf(rule, *read).value_or(Bytes{});
}

} // namespace

TEST_CASE("registers: what a statement reads is slices of the values loaded before")
{
	SECTION("a concatenated lookup key: two 4-byte loads into reg 1 and reg 9")
	{
		Table t = kIp;
		t.sets.push_back(exactSet("__set0", (kIpv4Type << 6) | kIpv4Type, 8,
					  {concat(bytesOf("198.18.0.1"), bytesOf("192.0.2.1"))}, kAnonymous));
		const Rule r = decoded(t, {ipSaddr(NFT_REG_1), ipDaddr(NFT_REG32_01), lookup("__set0"), masquerade()});
		REQUIRE(r.values.size() == 2);
		CHECK(std::get<FromPayload>(r.values[0].source).offset == 12);
		CHECK(std::get<FromPayload>(r.values[1].source).offset == 16);
		const InSet in = only<InSet>(r);
		CHECK(in.set == "__set0");
		CHECK(readOf(r, in.key) == Read{valueSlice(0, 0, 4), valueSlice(1, 0, 4)});
	}
	SECTION("a map's 8-byte data read as two 4-byte addresses (snat ip prefix to ip saddr map)")
	{
		Table t = kIp;
		t.sets.push_back(declareSet("__map0", kAnonymous | NFT_SET_INTERVAL | NFT_SET_MAP, kIpv4Type, 4,
					    kIpv4Type, 8));
		const Rule r = decoded(t, {ipSaddr(), mapLookup("__map0", NFT_REG_1),
					   snatFrom(NFT_REG_1, NFT_REG32_01, NF_NAT_RANGE_NETMAP)});
		REQUIRE(r.values.size() == 2);
		const auto &data = std::get<MapData>(r.values[1].source);
		CHECK(data.set == "__map0");
		CHECK(r.values[1].len == 8);
		CHECK(readOf(r, data.key) == Read{valueSlice(0, 0, 4)});
		const NatStatement n = only<NatStatement>(r);
		CHECK(n.kind == NatKind::snat);
		CHECK(n.family == Family::ipv4);
		CHECK(n.flags == NF_NAT_RANGE_NETMAP);
		REQUIRE(n.addressMin);
		REQUIRE(n.addressMax);
		CHECK(readOf(r, *n.addressMin) == Read{valueSlice(1, 0, 4)});
		CHECK(readOf(r, *n.addressMax) == Read{valueSlice(1, 4, 4)});
	}
	SECTION("a short load pads its word with zeros; bytes nothing wrote are unset")
	{
		const Rule r = decoded(kIp, {payload(PayloadBase::network, 16, 3), Cmp{NFT_REG_1, NFT_CMP_EQ, {10, 0, 0, 0}},
					     Cmp{NFT_REG_2, NFT_CMP_EQ, {1, 2}}});
		const std::vector<Compare> compares = all<Compare>(r);
		REQUIRE(compares.size() == 2);
		CHECK(readOf(r, compares[0].lhs) == Read{valueSlice(0, 0, 3), Slice{Slice::Kind::zero, 0, 0, 1}});
		CHECK(readOf(r, compares[1].lhs) == Read{Slice{Slice::Kind::unset, 0, 0, 2}});
	}
	SECTION("meta and ct loads are as wide as the kernel's (nft_meta_get_init, nft_ct_get_init)")
	{
		const auto width = [](Expression load) {
			const Rule r = decoded(kIp, {std::move(load), Cmp{NFT_REG_1, NFT_CMP_EQ, Bytes(4, 0)}});
			return readOf(r, only<Compare>(r).lhs);
		};
		const Slice zero2{Slice::Kind::zero, 0, 0, 2}, zero3{Slice::Kind::zero, 0, 0, 3};
		CHECK(width(meta(NFT_META_IIFTYPE)) == Read{valueSlice(0, 0, 2), zero2});
		CHECK(width(meta(NFT_META_PROTOCOL)) == Read{valueSlice(0, 0, 2), zero2});
		CHECK(width(meta(NFT_META_L4PROTO)) == Read{valueSlice(0, 0, 1), zero3});
		CHECK(width(meta(NFT_META_MARK)) == Read{valueSlice(0, 0, 4)});
		CHECK(width(ct(NFT_CT_DIRECTION)) == Read{valueSlice(0, 0, 1), zero3});
		CHECK(width(ct(NFT_CT_MARK)) == Read{valueSlice(0, 0, 4)});
		CHECK(metaKey(NFT_META_OIFNAME).kernelLen == IFNAMSIZ);
		CHECK(std::string(metaKey(NFT_META_SDIFNAME).name) == "sdifname");
		CHECK(std::string(ctKey(NFT_CT_ID, false).name) == "id");
		CHECK(ctKey(NFT_CT_SRC, true).kernelLen == 4); // in an ip table
		CHECK(ctKey(NFT_CT_SRC, false).kernelLen == 16);
		CHECK(metaKey(1000).name == nullptr);
		CHECK(ctKey(1000, false).kernelLen == NFT_REG_SIZE);
	}
	SECTION("the 4-byte registers alias the 16-byte ones; a later load overwrites")
	{
		const Rule r = decoded(kIp, {ipDaddr(NFT_REG32_04), ipSaddr(NFT_REG32_05), Cmp{NFT_REG_2, NFT_CMP_EQ, Bytes(8, 0)},
					     ipSaddr(NFT_REG32_04), Cmp{NFT_REG_2, NFT_CMP_EQ, Bytes(4, 0)}});
		const std::vector<Compare> compares = all<Compare>(r);
		REQUIRE(compares.size() == 2);
		CHECK(readOf(r, compares[0].lhs) == Read{valueSlice(0, 0, 4), valueSlice(1, 0, 4)});
		CHECK(readOf(r, compares[1].lhs) == Read{valueSlice(2, 0, 4)});
	}
	SECTION("a mark set mid-rule: the value defined later is the one read later")
	{
		const Rule r = decoded(kIp, {meta(NFT_META_MARK), bitwise(hostU32(0xffffffff), hostU32(0x4000)),
					     metaSet(NFT_META_MARK), meta(NFT_META_MARK), cmp(CmpOp::eq, hostU32(0))});
		const SetMeta set = only<SetMeta>(r);
		CHECK(set.key == NFT_META_MARK);
		CHECK(readOf(r, set.value) == Read{valueSlice(1, 0, 4)});
		CHECK(std::holds_alternative<Masked>(r.values[1].source));
		CHECK(readOf(r, only<Compare>(r).lhs) == Read{valueSlice(2, 0, 4)});
	}
}

TEST_CASE("registers out of range stop decoding, with the rest undecodable")
{
	// A read from a register that does not exist (99), from the verdict register (0),
	// past the last 4-byte register, and a load that writes past the register file.
	for (const Expression &bad :
	     {Expression{Cmp{99, NFT_CMP_EQ, {1}}}, Expression{Cmp{NFT_REG_VERDICT, NFT_CMP_EQ, {1}}},
	      Expression{Cmp{NFT_REG32_15, NFT_CMP_EQ, Bytes(8, 0)}},
	      payload(PayloadBase::network, 0, 20, NFT_REG32_15)}) {
		const Rule r = decoded(kIp, {bad, Counter{}, masquerade()});
		INFO("statements " << r.statements.size());
		const Other &u = lastOther(r);
		CHECK(u.effect == Other::Effect::mayDecide);
		CHECK_THAT(u.reason(), Catch::Contains("past the registers"));
		CHECK(all<CounterStatement>(r).empty()); // nothing after it is decoded
		CHECK(all<NatStatement>(r).empty());
	}
}

TEST_CASE("more than kMaxExpressionsPerRule expressions: the rest is one undecodable statement")
{
	std::vector<Expression> counters(kMaxExpressionsPerRule, Counter{});
	const Rule exact = decoded(kIp, counters);
	CHECK(all<CounterStatement>(exact).size() == kMaxExpressionsPerRule);
	CHECK(all<Other>(exact).empty());
	counters.push_back(masquerade());
	const Rule over = decoded(kIp, counters);
	CHECK(all<CounterStatement>(over).size() == kMaxExpressionsPerRule);
	CHECK(all<NatStatement>(over).empty());
	CHECK(lastOther(over).reason() == "the rule has more than 256 expressions");
	CHECK(lastOther(over).effect == Other::Effect::mayDecide);
}

TEST_CASE("xtables: addrtype revisions 0 and 1, with their invert flags")
{
	const AddressTypeMatch v0 = only<AddressTypeMatch>(
		decoded(kIp, {addrtypeV0(XT_ADDRTYPE_UNICAST, XT_ADDRTYPE_LOCAL, false, true)}));
	CHECK(v0.source == XT_ADDRTYPE_UNICAST);
	CHECK(v0.destination == XT_ADDRTYPE_LOCAL);
	CHECK_FALSE(v0.invertSource);
	CHECK(v0.invertDestination);
	CHECK(v0.limitInterface == 0);
	const AddressTypeMatch v0s = only<AddressTypeMatch>(decoded(kIp, {addrtypeV0(XT_ADDRTYPE_LOCAL, 0, true, false)}));
	CHECK(v0s.invertSource);
	CHECK_FALSE(v0s.invertDestination);

	const AddressTypeMatch v1 = only<AddressTypeMatch>(decoded(
		kIp, {addrtypeV1(XT_ADDRTYPE_LOCAL, XT_ADDRTYPE_UNICAST,
				 XT_ADDRTYPE_INVERT_SOURCE | XT_ADDRTYPE_INVERT_DEST | XT_ADDRTYPE_LIMIT_IFACE_OUT)}));
	CHECK(v1.source == XT_ADDRTYPE_LOCAL);
	CHECK(v1.destination == XT_ADDRTYPE_UNICAST);
	CHECK(v1.invertSource);
	CHECK(v1.invertDestination);
	CHECK(v1.limitInterface == XT_ADDRTYPE_LIMIT_IFACE_OUT);
	const AddressTypeMatch plain = only<AddressTypeMatch>(decoded(kIp, {addrtypeV1(0, XT_ADDRTYPE_LOCAL, 0)}));
	CHECK_FALSE(plain.invertSource);
	CHECK_FALSE(plain.invertDestination);

	// A struct too short for its revision, or a revision it does not know: a match that may.
	for (const Expression &odd : {compat("addrtype", 0, Bytes(8, 0)), compat("addrtype", 2, Bytes(16, 0))}) {
		const Rule r = decoded(kIp, {odd, masquerade()});
		REQUIRE_FALSE(all<Other>(r).empty());
		CHECK(all<Other>(r)[0].effect == Other::Effect::mayNotMatch);
		CHECK(all<AddressTypeMatch>(r).empty());
	}
}

TEST_CASE("xtables: mark revision 1 is lowered to a comparison of the masked meta mark")
{
	for (const bool invert : {false, true}) {
		INFO("invert " << invert);
		const Rule r = decoded(kIp, {markMatchV1(0x4000, 0xc000, invert), xtMasquerade()});
		const Compare c = only<Compare>(r);
		CHECK(c.op == (invert ? CmpOp::neq : CmpOp::eq));
		CHECK(c.data == hostU32(0x4000));
		// mark & 0xc000: Masked of FromMeta{mark}.
		REQUIRE(r.read(c.lhs).size() == 1);
		const Value &masked = r.values[r.read(c.lhs)[0].value];
		const auto *m = std::get_if<Masked>(&masked.source);
		REQUIRE(m);
		CHECK(Bytes(m->mask().begin(), m->mask().end()) == hostU32(0xc000));
		CHECK(Bytes(m->xorValue().begin(), m->xorValue().end()) == Bytes(4, 0));
		const Value &mark = r.values[r.read(m->source)[0].value];
		REQUIRE(std::holds_alternative<FromMeta>(mark.source));
		CHECK(std::get<FromMeta>(mark.source).key == NFT_META_MARK);
	}
}

TEST_CASE("xtables: NAT targets' ranges into NatStatement constants")
{
	SECTION("SNAT revision 0 in an ip table: nf_nat_ipv4_multi_range_compat, ports at 16 and 18")
	{
		const Rule r = decoded(kIp, {target("SNAT", 0,
						    compatRangeV4(NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED,
								  "203.0.113.7", "203.0.113.9", 1000, 2000))});
		const NatStatement n = only<NatStatement>(r);
		CHECK(n.kind == NatKind::snat);
		CHECK(n.family == Family::ipv4);
		CHECK_FALSE(n.xtNetmap);
		CHECK(n.flags == (NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED));
		CHECK(constantOrEmpty(r, n.addressMin) == bytesOf("203.0.113.7"));
		CHECK(constantOrEmpty(r, n.addressMax) == bytesOf("203.0.113.9"));
		CHECK(constantOrEmpty(r, n.portMin) == Bytes{0x03, 0xe8});
		CHECK(constantOrEmpty(r, n.portMax) == Bytes{0x07, 0xd0});
		// Without PROTO_SPECIFIED the port bytes mean nothing.
		const NatStatement noPorts = only<NatStatement>(decoded(kIp, {target("SNAT", 0, snatV4Info("203.0.113.7"))}));
		CHECK_FALSE(noPorts.portMin);
		// MASQUERADE: the same struct, no addresses; its flags (random-fully) kept.
		const NatStatement masq = only<NatStatement>(
			decoded(kIp, {xtMasquerade(NF_NAT_RANGE_PROTO_RANDOM_FULLY)}));
		CHECK(masq.kind == NatKind::masquerade);
		CHECK_FALSE(masq.addressMin);
		CHECK(masq.flags == NF_NAT_RANGE_PROTO_RANDOM_FULLY);
	}
	SECTION("nf_nat_range: ip6tables' SNAT, and revision 1 in an ip table")
	{
		const Rule r6 = decoded(kIp6, {target("SNAT", 1,
						      natRangeInfo(NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED,
								   "2001:db8::7", "2001:db8::9", 1000, 2000))});
		const NatStatement n6 = only<NatStatement>(r6);
		CHECK(n6.family == Family::ipv6);
		CHECK(constantOrEmpty(r6, n6.addressMin) == bytesOf("2001:db8::7"));
		CHECK(constantOrEmpty(r6, n6.addressMax) == bytesOf("2001:db8::9"));
		CHECK(constantOrEmpty(r6, n6.portMin) == Bytes{0x03, 0xe8});
		CHECK(constantOrEmpty(r6, n6.portMax) == Bytes{0x07, 0xd0});
		const Rule r4 = decoded(kIp, {target("SNAT", 1, natRangeInfo(NF_NAT_RANGE_MAP_IPS, "203.0.113.7", "203.0.113.7"))});
		const NatStatement n4 = only<NatStatement>(r4);
		CHECK(n4.family == Family::ipv4);
		CHECK(constantOrEmpty(r4, n4.addressMin) == bytesOf("203.0.113.7"));
		// A struct too short for its layout: may decide anything.
		const Rule shortRange = decoded(kIp6, {target("SNAT", 1, Bytes(36, 0))});
		CHECK(lastOther(shortRange).effect == Other::Effect::mayDecide);
		CHECK(all<NatStatement>(shortRange).empty());
	}
	SECTION("NETMAP: a snat that keeps the host part, listed by name")
	{
		const Rule r = decoded(kIp, {target("NETMAP", 0,
						    compatRangeV4(NF_NAT_RANGE_MAP_IPS, "198.51.100.0", "198.51.100.255"))});
		const NatStatement n = only<NatStatement>(r);
		CHECK(n.kind == NatKind::snat);
		CHECK(n.xtNetmap);
		CHECK(n.flags == (NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_NETMAP));
		CHECK(constantOrEmpty(r, n.addressMax) == bytesOf("198.51.100.255"));
		const NatStatement n6 = only<NatStatement>(decoded(
			kIp6, {target("NETMAP", 0, natRangeInfo(NF_NAT_RANGE_MAP_IPS, "2001:db8:2::", "2001:db8:2::ffff"))}));
		CHECK(n6.flags & NF_NAT_RANGE_NETMAP);
		CHECK(n6.family == Family::ipv6);
	}
	SECTION("an xtables target in an inet table is not understood")
	{
		const Rule r = decoded(kInet, {target("SNAT", 0, snatV4Info("203.0.113.7"))});
		CHECK(lastOther(r).effect == Other::Effect::mayDecide);
		CHECK(all<NatStatement>(r).empty());
	}
}

TEST_CASE("xtables: MARK revision 2, verdicts, LOG, comment")
{
	const XtMark mark = only<XtMark>(decoded(kIp, {markTarget(0x4000, 0xffff)}));
	CHECK(mark.value == 0x4000);
	CHECK(mark.mask == 0xffff);
	CHECK(all<XtMark>(decoded(kIp, {target("MARK", 1, Bytes(8, 0))})).empty()); // revision 1: not this struct
	for (const auto &[name, code] : {std::pair{"RETURN", VerdictCode::returnToCaller},
					 std::pair{"ACCEPT", VerdictCode::accept}, std::pair{"DROP", VerdictCode::drop}})
		CHECK(only<SetVerdict>(decoded(kIp, {target(name)})).verdict.code == code);
	CHECK(kinds(decoded(kIp, {target("LOG", 0, Bytes(32, 0))})) == std::vector<size_t>{kindOf<Other>()});
	Bytes comment(256, 0);
	std::memcpy(comment.data(), "hello", 5);
	const Other note = only<Other>(decoded(kIp, {compat("comment", 0, comment)}));
	CHECK(note.effect == Other::Effect::none);
	CHECK(std::get<Match>(note.expression()).name == "comment");
}

TEST_CASE("what has no meaning: a match may match, a target may decide, decoding goes on after a match")
{
	const Rule match = decoded(kIp, {compat("statistic", 0, Bytes(24, 0)), Counter{}, xtMasquerade()});
	CHECK(kinds(match) == std::vector<size_t>{kindOf<Other>(), kindOf<CounterStatement>(), kindOf<NatStatement>()});
	const Other u = all<Other>(match)[0];
	CHECK(u.effect == Other::Effect::mayNotMatch);
	CHECK(std::get<Match>(u.expression()).name == "statistic");
	CHECK(u.reason() == "iptables match statistic (revision 0) is not understood");

	const Rule tgt = decoded(kIp, {target("CONNMARK", 1, Bytes(16, 0)), Counter{}});
	REQUIRE_FALSE(all<Other>(tgt).empty());
	CHECK(all<Other>(tgt)[0].effect == Other::Effect::mayDecide);
	CHECK(std::get<Target>(all<Other>(tgt)[0].expression()).name == "CONNMARK");

	// An unknown expression may have written any register: what was loaded before is
	// unset after it.
	const Rule unknown = decoded(kIp, {ipDaddr(), UnknownExpression{"tproxy"}, cmp(CmpOp::eq, bytesOf("192.0.2.1"))});
	CHECK(all<Other>(unknown)[0].effect == Other::Effect::mayDecide);
	CHECK(readOf(unknown, only<Compare>(unknown).lhs) == Read{Slice{Slice::Kind::unset, 0, 0, 4}});
}
