// SPDX-License-Identifier: Apache-2.0
// Test support: other tables' NAT built as data. Rules are written in the kernel's encoding
// (nft::Expression, as `nft --debug=netlink` shows what nft and iptables-nft emit), sets
// with the nft::Set API as the kernel holds them, and tables come back decoded by the real
// decoder (codec/decoder.h), exactly as the reader would hand them to the evaluator.
#pragma once

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/nft/codec/decoder.h"
#include "ip-masq-agent/nft/codec/model.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/agent_table.h"
#include "ip-masq-agent/diagnose/evaluator.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

namespace ipmasq::nft::build {

using nat::Packet;

inline Address addr(const std::string &text)
{
	auto a = parseAddress(text);
	if (!a)
		throw std::invalid_argument(a.error().message);
	return *a;
}

inline Bytes bytesOf(const std::string &address)
{
	return addr(address).bytes();
}

inline Bytes hostU32(uint32_t v)
{
	Bytes b(4);
	std::memcpy(b.data(), &v, 4);
	return b;
}

inline Bytes hostU16(uint16_t v)
{
	Bytes b(2);
	std::memcpy(b.data(), &v, 2);
	return b;
}

inline Bytes concat(Bytes a, const Bytes &b)
{
	a.insert(a.end(), b.begin(), b.end());
	return a;
}

// An interface name as iptables-nft and nft compare it: with its NUL.
inline Bytes ifnameBytes(const std::string &name)
{
	Bytes b(name.begin(), name.end());
	b.push_back(0);
	return b;
}

// ---- Expressions ----

inline Expression payload(PayloadBase base, uint32_t offset, uint32_t len, uint32_t dreg = NFT_REG_1)
{
	return Payload{.base = uint32_t(base), .offset = offset, .len = len, .dreg = dreg};
}

// ip saddr / ip daddr into `dreg`: what `ip saddr ...` loads.
inline Expression ipSaddr(uint32_t dreg = NFT_REG_1)
{
	return payload(PayloadBase::network, 12, 4, dreg);
}

inline Expression ipDaddr(uint32_t dreg = NFT_REG_1)
{
	return payload(PayloadBase::network, 16, 4, dreg);
}

inline Expression meta(uint32_t key, uint32_t dreg = NFT_REG_1)
{
	return Meta{.key = key, .dreg = dreg};
}

inline Expression metaSet(uint32_t key, uint32_t sreg = NFT_REG_1)
{
	return Meta{.key = key, .sreg = sreg};
}

inline Expression ct(uint32_t key, uint32_t dreg = NFT_REG_1, std::optional<uint8_t> direction = std::nullopt)
{
	return Ct{.key = key, .direction = direction, .dreg = dreg};
}

inline Expression ctSet(uint32_t key, uint32_t sreg = NFT_REG_1)
{
	return Ct{.key = key, .sreg = sreg};
}

inline Expression cmp(CmpOp op, Bytes data, uint32_t sreg = NFT_REG_1)
{
	return Cmp{sreg, uint32_t(op), std::move(data)}; // CmpOp follows NFT_CMP_*
}

inline Expression immediate(Bytes data, uint32_t dreg = NFT_REG_1)
{
	return Immediate{.dreg = dreg, .data = std::move(data)};
}

// dreg = (sreg & mask) ^ xor.
inline Expression bitwise(Bytes mask, Bytes xorValue, uint32_t sreg = NFT_REG_1, uint32_t dreg = NFT_REG_1)
{
	const uint32_t len = static_cast<uint32_t>(mask.size());
	return Bitwise{.sreg = sreg, .dreg = dreg, .len = len, .mask = std::move(mask), .xorValue = std::move(xorValue)};
}

// reg 1 = reg 1 & mask (xor 0).
inline Expression bitwiseAnd(Bytes mask)
{
	Bytes zero(mask.size(), 0);
	return bitwise(std::move(mask), std::move(zero));
}

inline Expression verdict(VerdictCode code, std::string chain = {})
{
	Immediate i{.dreg = NFT_REG_VERDICT, .verdict = uint32_t(verdictNumber(code))};
	if (!chain.empty())
		i.chain = std::move(chain);
	return i;
}

inline Expression lookup(std::string set, uint32_t sreg = NFT_REG_1, bool invert = false)
{
	Lookup l{.set = std::move(set), .sreg = sreg};
	if (invert)
		l.flags = NFT_LOOKUP_F_INV;
	return l;
}

inline Expression mapLookup(std::string set, uint32_t dreg, uint32_t sreg = NFT_REG_1)
{
	return Lookup{.set = std::move(set), .sreg = sreg, .dreg = dreg};
}

inline Expression vmapLookup(std::string set, uint32_t sreg = NFT_REG_1)
{
	return Lookup{.set = std::move(set), .sreg = sreg, .dreg = NFT_REG_VERDICT};
}

// nft's `masquerade`, with NF_NAT_RANGE_* flags.
inline Expression masquerade(uint32_t flags = 0)
{
	return Masq{.flags = flags ? std::optional(flags) : std::nullopt};
}

// nft's `snat ip to ...`: the address (range) from registers, NF_NAT_RANGE_* flags.
inline Expression snatFrom(uint32_t addrMin, std::optional<uint32_t> addrMax = std::nullopt, uint32_t flags = 0,
			   uint32_t family = NFPROTO_IPV4)
{
	// nft sends only these flags (netmap, random...); the kernel adds MAP_IPS.
	return Nat{.type = NFT_NAT_SNAT, .family = family, .addressMin = addrMin, .addressMax = addrMax, .flags = flags};
}

inline Expression compat(std::string name, uint32_t revision, Bytes info)
{
	return Match{std::move(name), revision, std::move(info)};
}

inline Expression target(std::string name, uint32_t revision = 0, Bytes info = {})
{
	return Target{std::move(name), revision, std::move(info)};
}

// ---- xtables info structs, in host order as the kernel holds them ----

// xt_addrtype_info_v1 { u16 source; u16 dest; u32 flags; } (iptables-nft 1.8.9's).
inline Expression addrtypeV1(uint16_t source, uint16_t dest, uint32_t flags)
{
	Bytes info(8);
	std::memcpy(info.data(), &source, 2);
	std::memcpy(info.data() + 2, &dest, 2);
	std::memcpy(info.data() + 4, &flags, 4);
	return compat("addrtype", 1, std::move(info));
}

// xt_addrtype_info { u16 source; u16 dest; u32 invert_source; u32 invert_dest; }.
inline Expression addrtypeV0(uint16_t source, uint16_t dest, bool invertSource, bool invertDest)
{
	Bytes info(12, 0);
	const uint32_t is = invertSource, id = invertDest;
	std::memcpy(info.data(), &source, 2);
	std::memcpy(info.data() + 2, &dest, 2);
	std::memcpy(info.data() + 4, &is, 4);
	std::memcpy(info.data() + 8, &id, 4);
	return compat("addrtype", 0, std::move(info));
}

// xt_mark_mtinfo1 { u32 mark, mask; u8 invert; } (padded to 12).
inline Expression markMatchV1(uint32_t mark, uint32_t mask, bool invert)
{
	Bytes info(12, 0);
	std::memcpy(info.data(), &mark, 4);
	std::memcpy(info.data() + 4, &mask, 4);
	info[8] = invert ? 1 : 0;
	return compat("mark", 1, std::move(info));
}

// xt_mark_tginfo2 { u32 mark, mask; }: MARK --set-xmark mark/mask.
inline Expression markTarget(uint32_t mark, uint32_t mask)
{
	Bytes info(8);
	std::memcpy(info.data(), &mark, 4);
	std::memcpy(info.data() + 4, &mask, 4);
	return target("MARK", 2, std::move(info));
}

// nf_nat_ipv4_multi_range_compat { u32 rangesize; { u32 flags; be32 min_ip, max_ip;
// be16 min port, max port } } (24 bytes): SNAT/MASQUERADE/NETMAP revision 0 in an ip
// table. Ports at offsets 16 and 18, in network order.
inline Bytes compatRangeV4(uint32_t flags, const std::string &minIp = "0.0.0.0",
			   const std::string &maxIp = "0.0.0.0", uint16_t minPort = 0, uint16_t maxPort = 0)
{
	Bytes info(24, 0);
	const uint32_t rangesize = 1;
	std::memcpy(info.data(), &rangesize, 4);
	std::memcpy(info.data() + 4, &flags, 4);
	const Bytes lo = bytesOf(minIp), hi = bytesOf(maxIp);
	std::copy(lo.begin(), lo.end(), info.begin() + 8);
	std::copy(hi.begin(), hi.end(), info.begin() + 12);
	info[16] = uint8_t(minPort >> 8);
	info[17] = uint8_t(minPort & 0xff);
	info[18] = uint8_t(maxPort >> 8);
	info[19] = uint8_t(maxPort & 0xff);
	return info;
}

// -j MASQUERADE in an ip table (revision 0: the compat range, without addresses).
inline Expression xtMasquerade(uint32_t flags = 0)
{
	return target("MASQUERADE", 0, compatRangeV4(flags));
}

// SNAT --to-source ADDRESS, revision 0, in an ip table.
inline Bytes snatV4Info(const std::string &to)
{
	return compatRangeV4(NF_NAT_RANGE_MAP_IPS, to, to);
}

// nf_nat_range { u32 flags; union nf_inet_addr min_addr, max_addr; be16 min, max port }
// (40 bytes): ip6tables' SNAT revision 1 and NETMAP; IPv4 addresses sit in the first 4
// bytes of each union.
inline Bytes natRangeInfo(uint32_t flags, const std::string &minAddr, const std::string &maxAddr,
			  uint16_t minPort = 0, uint16_t maxPort = 0)
{
	Bytes info(40, 0);
	std::memcpy(info.data(), &flags, 4);
	const Bytes lo = bytesOf(minAddr), hi = bytesOf(maxAddr);
	std::copy(lo.begin(), lo.end(), info.begin() + 4);
	std::copy(hi.begin(), hi.end(), info.begin() + 20);
	info[36] = uint8_t(minPort >> 8);
	info[37] = uint8_t(minPort & 0xff);
	info[38] = uint8_t(maxPort >> 8);
	info[39] = uint8_t(maxPort & 0xff);
	return info;
}

// ---- Sets, as the kernel holds them ----

// nft's datatype ids (TYPE_IPADDR, TYPE_IP6ADDR, TYPE_IFNAME); a concatenation of types
// a and b is (a << 6) | b.
inline constexpr uint32_t kIpv4Type = 7, kIpv6Type = 8, kIfnameType = 41;

inline Set declareSet(std::string name, uint32_t flags, uint32_t keyType, uint32_t keyLen,
		      uint32_t dataType = 0, uint32_t dataLen = 0)
{
	Set set;
	set.name = std::move(name);
	set.flags = flags;
	set.keyType = keyType;
	set.keyLen = keyLen;
	set.dataType = dataType;
	set.dataLen = dataLen;
	return set;
}

// An interval set or map of address keys as nft encodes one: a leading end element at 0
// when the first range does not start there, a start element per range (with its data or
// verdict), and an end element (the address after it) unless the next range starts there
// or it runs to the top. Entries are prefixes or single addresses ("198.18.10.0/24",
// "192.0.2.1"), sorted and disjoint.
struct IntervalEntry {
	std::string key;
	Bytes data = {};
	std::optional<Verdict> verdict = {};
};

inline AddressRange rangeOf(const std::string &text)
{
	if (auto prefix = parsePrefix(text))
		return {prefix->first(), prefix->last()};
	return {addr(text), addr(text)};
}

inline Set intervalSet(Set set, const std::vector<IntervalEntry> &entries)
{
	for (size_t i = 0; i < entries.size(); i++) {
		const AddressRange range = rangeOf(entries[i].key);
		if (i == 0 && range.first.value != 0)
			set.add({Bytes(set.keyLen, 0), {}, true});
		set.add({range.first.bytes(), {}, false, false, entries[i].data, entries[i].verdict});
		if (range.last == Address::max(range.first.family))
			continue;
		const Address end{range.first.family, range.last.value + 1};
		if (i + 1 == entries.size() || rangeOf(entries[i + 1].key).first != end)
			set.add({end.bytes(), {}, true});
	}
	set.finish();
	return set;
}

// `ip daddr @name` of an interval set; ranges are [first, end) as before.
inline Set intervalSetV4(std::string name, const std::vector<std::pair<std::string, std::string>> &ranges)
{
	Set set = declareSet(std::move(name), NFT_SET_INTERVAL, kIpv4Type, 4);
	set.add({{0, 0, 0, 0}, {}, true});
	for (const auto &[first, end] : ranges) {
		set.add({bytesOf(first), {}, false});
		set.add({bytesOf(end), {}, true});
	}
	set.finish();
	return set;
}

// A set of exact keys.
inline Set exactSet(std::string name, uint32_t keyType, uint32_t keyLen, const std::vector<Bytes> &keys,
		    uint32_t flags = 0)
{
	Set set = declareSet(std::move(name), flags, keyType, keyLen);
	for (const Bytes &key : keys)
		set.add({key});
	set.finish();
	return set;
}

// The flags nft gives an anonymous set or map of constants: `{ ... }` in a rule.
inline constexpr uint32_t kAnonymous = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT;

// ---- Rules, chains, tables in the kernel's encoding, decoded ----

// A rule as the reader receives it from the kernel.
struct WireRule {
	uint64_t handle = 0;
	std::vector<Expression> expressions;
	std::string comment = {};
};

inline WireRule rule(uint64_t handle, std::vector<Expression> expressions, std::string comment = {})
{
	return WireRule{handle, std::move(expressions), std::move(comment)};
}

struct WireChain {
	std::string name;
	std::optional<BaseHook> base;
	std::vector<WireRule> rules;
};

inline WireChain baseChain(std::string name, int32_t priority, std::vector<WireRule> rules,
			   VerdictCode policy = VerdictCode::accept)
{
	return WireChain{std::move(name), BaseHook{"nat", NF_INET_POST_ROUTING, priority, policy}, std::move(rules)};
}

inline WireChain chain(std::string name, std::vector<WireRule> rules)
{
	return WireChain{std::move(name), std::nullopt, std::move(rules)};
}

// The table the reader would give: its sets first (the decoder reads their widths), then
// every rule decoded by decodeRule.
inline Table table(TableFamily family, std::string name, std::vector<WireChain> chains, std::vector<Set> sets = {})
{
	Table t{family, std::move(name), {}, std::move(sets)};
	for (WireChain &wire : chains) {
		Chain c{std::move(wire.name), wire.base, {}};
		for (WireRule &r : wire.rules)
			c.rules.push_back(decodeRule(t, r.handle, r.expressions, std::move(r.comment)));
		t.chains.push_back(std::move(c));
	}
	return t;
}

// One rule decoded in a table of `family` holding `sets`: for the decoder's and the rule
// text's tests.
inline Rule decoded(const Table &in, std::vector<Expression> expressions, std::string comment = {})
{
	return decodeRule(in, 1, expressions, std::move(comment));
}

// The agent's own table for a config, as the daemon and --explain get it: the ruleset
// buildRuleset makes, linearized by the backend's encoder and decoded (table_reader.h).
inline Table agentTableOf(const Config &config, const RulesetOptions &options = {},
			  const SubnetAddresses &subnet = {})
{
	auto agent = agentTable(buildRuleset(config, options, subnet));
	if (!agent)
		throw std::runtime_error("agentTable: " + agent.error().message);
	return std::move(*agent);
}

// ---- Packets ----

// A forwarded TCP connection from a pod: known interfaces, ports, no marks.
inline Packet packetV4(const std::string &source, const std::string &destination)
{
	Packet p;
	p.source = addr(source);
	p.destination = addr(destination);
	p.outputInterface = "eth0";
	p.inputInterface = "veth-pod";
	p.l4proto = 6;
	p.sourcePort = 40000;
	p.destinationPort = 8080;
	return p;
}

inline Packet packetV6(const std::string &source, const std::string &destination)
{
	return packetV4(source, destination); // the family comes from the addresses
}

} // namespace ipmasq::nft::build
