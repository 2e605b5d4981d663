// SPDX-License-Identifier: Apache-2.0
// Test support: other tables' NAT built as data, in the encodings nft and iptables-nft use
// (as `nft --debug=netlink` shows them), for the evaluator's unit tests.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/nat_evaluator.h"
#include "ip-masq-agent/nat_ruleset.h"

namespace ipmasq::nat::build {

inline Address addr(const std::string &text)
{
	auto a = parseAddress(text);
	if (!a)
		throw std::invalid_argument(a.error().message);
	return *a;
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

// An interface name as iptables-nft and nft compare it: with its NUL.
inline Bytes ifnameBytes(const std::string &name)
{
	Bytes b(name.begin(), name.end());
	b.push_back(0);
	return b;
}

inline Expression payload(PayloadBase base, uint32_t offset, uint32_t len, uint32_t dreg = NFT_REG_1)
{
	return PayloadLoad{base, offset, len, dreg};
}

inline Expression meta(uint32_t key, uint32_t dreg = NFT_REG_1)
{
	return MetaLoad{key, dreg};
}

inline Expression cmp(CmpOp op, Bytes data, uint32_t sreg = NFT_REG_1)
{
	return Cmp{sreg, op, std::move(data)};
}

// reg 1 = reg 1 & mask (xor 0).
inline Expression bitwiseAnd(Bytes mask)
{
	const uint32_t len = static_cast<uint32_t>(mask.size());
	return Bitwise{BitwiseOp::boolean, NFT_REG_1, NFT_REG_1, len, std::move(mask), Bytes(len, 0), 0};
}

inline Expression verdict(VerdictCode code, std::string chain = {})
{
	return ImmediateVerdict{{code, std::move(chain)}};
}

inline Expression compat(std::string name, uint32_t revision, Bytes info)
{
	return CompatMatch{std::move(name), revision, std::move(info)};
}

inline Expression target(std::string name, uint32_t revision = 0, Bytes info = {})
{
	return CompatTarget{std::move(name), revision, std::move(info)};
}

// xt_addrtype_info_v1 { u16 source; u16 dest; u32 flags; } in host order.
inline Expression addrtypeV1(uint16_t source, uint16_t dest, uint32_t flags)
{
	Bytes info(8);
	std::memcpy(info.data(), &source, 2);
	std::memcpy(info.data() + 2, &dest, 2);
	std::memcpy(info.data() + 4, &flags, 4);
	return compat("addrtype", 1, std::move(info));
}

// SNAT rev 0 in an ip table: nf_nat_ipv4_multi_range_compat with one address.
inline Bytes snatV4Info(const std::string &to)
{
	Bytes info(24, 0);
	const uint32_t rangesize = 1, flags = NF_NAT_RANGE_MAP_IPS;
	std::memcpy(info.data(), &rangesize, 4);
	std::memcpy(info.data() + 4, &flags, 4);
	const Bytes a = addr(to).bytes();
	std::copy(a.begin(), a.end(), info.begin() + 8);
	std::copy(a.begin(), a.end(), info.begin() + 12);
	return info;
}

inline Rule rule(uint64_t handle, std::vector<Expression> expressions)
{
	return Rule{handle, std::move(expressions), {}};
}

inline Chain baseChain(std::string name, int32_t priority, std::vector<Rule> rules)
{
	return Chain{std::move(name), BaseHook{"nat", NF_INET_POST_ROUTING, priority, VerdictCode::accept},
		     std::move(rules)};
}

inline Chain chain(std::string name, std::vector<Rule> rules)
{
	return Chain{std::move(name), std::nullopt, std::move(rules)};
}

inline Table table(TableFamily family, std::string name, std::vector<Chain> chains,
		   std::vector<Set> sets = {})
{
	return Table{family, std::move(name), std::move(chains), std::move(sets)};
}

// An IPv4 interval set as nft encodes it: a leading end element at 0 when the first range
// does not start there, then a start element per range and an end element (the address
// after it) unless it runs to the top. Ranges are [first, end).
inline Set intervalSetV4(std::string name, const std::vector<std::pair<std::string, std::string>> &ranges)
{
	Set set{std::move(name), NFT_SET_INTERVAL, 7, 4, 0, 0, {}, true};
	set.elements.push_back({{0, 0, 0, 0}, {}, true, false, {}, {}});
	for (const auto &[first, end] : ranges) {
		set.elements.push_back({addr(first).bytes(), {}, false, false, {}, {}});
		set.elements.push_back({addr(end).bytes(), {}, true, false, {}, {}});
	}
	return set;
}

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

} // namespace ipmasq::nat::build
