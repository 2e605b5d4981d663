// SPDX-License-Identifier: Apache-2.0
// Sampling where other tables' rules match (other_tables/samples.h): the boundaries of their
// destination matches (prefixes, `!=`, ranges, sets, maps, concatenations), named as
// --explain names them, bounded and spread; the ports their port matches name; the cycle's
// port samples; and the daemon's cycle against --explain's evaluation of every packet it
// samples, over generated rulesets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>

#include <fmt/format.h>

#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/diagnose/explain.h"
#include "ip-masq-agent/diagnose/conflicts.h"
#include "ip-masq-agent/diagnose/samples.h"
#include "ip-masq-agent/config/policy.h"
#include "../common/nat_builders.h"
#include "config_entries.h"

using namespace ipmasq;
using namespace ipmasq::nft::build;

namespace {

const std::string &kFile = test::kConfigFile;
using test::entry;
using nft::Bytes;

SamplePlan planOf(const Config &config, bool ipv6 = false)
{
	return {samplePackets(config, ipv6), decidingEntries(config)};
}

NodeAddresses node()
{
	return {{{addr("203.0.113.1"), 24}}, true};
}

nft::NatRuleset ipNat(std::vector<WireRule> rules, std::vector<nft::Set> sets = {},
		      nft::TableFamily family = nft::TableFamily::ip)
{
	return {{table(family, "other", {baseChain("post", 100, std::move(rules))}, std::move(sets))}};
}

// "ADDRESS: ENTRY" of each packet.
std::vector<std::string> named(const std::vector<SampledPacket> &packets)
{
	std::vector<std::string> out;
	for (const SampledPacket &p : packets)
		out.push_back(p.toString() + ": " + p.entry);
	return out;
}

std::vector<std::string> destinations(const std::vector<SampledPacket> &packets)
{
	std::vector<std::string> out;
	for (const SampledPacket &p : packets)
		out.push_back(p.destination.toString());
	return out;
}

// `ip daddr PREFIX` as nft encodes it: the prefix's whole bytes loaded, then compared; a
// prefix that ends inside a byte is loaded whole and masked (iptables' `-d`).
std::vector<nft::Expression> daddr(const std::string &prefix, nft::CmpOp op = nft::CmpOp::eq)
{
	const Prefix p = parsePrefix(prefix).value();
	const Bytes network = p.network.bytes();
	if (p.length % 8 == 0 && p.length > 0) {
		const uint32_t len = p.length / 8;
		return {payload(nft::PayloadBase::network, 16, len), cmp(op, Bytes(network.begin(), network.begin() + len))};
	}
	Bytes mask(4, 0);
	for (unsigned bit = 0; bit < p.length; bit++)
		mask[bit / 8] |= uint8_t(0x80 >> (bit % 8));
	return {payload(nft::PayloadBase::network, 16, 4), bitwiseAnd(mask), cmp(op, network)};
}

WireRule masqueradeIf(uint64_t handle, std::vector<nft::Expression> match)
{
	match.push_back(masquerade());
	return rule(handle, std::move(match));
}

// `th dport PORT` (with `meta l4proto PROTOCOL` first when given).
std::vector<nft::Expression> dport(uint16_t port, nft::CmpOp op = nft::CmpOp::eq, std::optional<uint8_t> protocol = {})
{
	std::vector<nft::Expression> out;
	if (protocol) {
		out.push_back(meta(NFT_META_L4PROTO));
		out.push_back(cmp(nft::CmpOp::eq, {*protocol}));
	}
	out.push_back(payload(nft::PayloadBase::transport, 2, 2));
	out.push_back(cmp(op, {uint8_t(port >> 8), uint8_t(port)}));
	return out;
}

nft::Expression rangeOfBytes(Bytes from, Bytes to, uint32_t op = NFT_RANGE_EQ)
{
	return nft::Range{.sreg = NFT_REG_1, .op = op, .from = std::move(from), .to = std::move(to)};
}

} // namespace

TEST_CASE("a rule's prefix inside a non-masquerade range: sampled at its first address, which the "
	  "config's own sample never reaches")
{
	const Config config = test::fileConfig({entry("198.18.0.0/15", 2)});
	const SamplePlan plan = planOf(config);
	// A CNI's `ip daddr 198.19.0.0/16 masquerade`: 198.20.0.0, the address after it, is the
	// plan's own already.
	const nft::NatRuleset cni = ipNat({masqueradeIf(4, daddr("198.19.0.0/16"))});
	const RuleSamples more = samplesFromRules(cni, plan, node());
	CHECK(named(more.packets) ==
	      std::vector<std::string>{"198.19.0.0: nonMasqueradeCIDRs 198.18.0.0/15 (" + kFile + ":2)"});
	CHECK(more.cuts.empty());

	// The plan alone finds nothing; with the rule's sample, the conflict --explain finds.
	const nft::Table agent = agentTableOf(config);
	CHECK(findConflicts(cni, &agent, plan.packets, node()).conflicts.empty());
	const ConflictPass withMore = findConflicts(cni, &agent, more.packets, node());
	REQUIRE(withMore.conflicts.size() == 1);
	CHECK(withMore.conflicts[0].certain);
	CHECK(withMore.conflicts[0].kind == NatConflict::Kind::natsExempted);

	SECTION("nothing to name with: nothing more")
	{
		CHECK(samplesFromRules(cni, SamplePlan{plan.packets, nullptr}, node()).packets.empty());
	}
}

TEST_CASE("every shape of destination match gives its boundaries: `!=`, masks, ranges, sets, "
	  "maps, concatenations")
{
	const Config config = test::fileConfig({entry("192.0.2.0/24", 2)});
	const SamplePlan plan = planOf(config);
	nft::Set pods = intervalSet(declareSet("pods", NFT_SET_INTERVAL, kIpv4Type, 4), {{"198.18.64.0/18"}});
	nft::Set exact = exactSet("hosts", kIpv4Type, 4, {bytesOf("198.19.1.1")});
	nft::Set map = intervalSet(declareSet("to", NFT_SET_INTERVAL | NFT_SET_MAP, kIpv4Type, 4, kIpv4Type, 4),
				   {{"198.19.7.0/24", bytesOf("203.0.113.9")}});
	// `ip daddr . th dport { 198.19.5.5 . 53 }`: two 32-bit registers, the port padded.
	nft::Set services = exactSet("services", (kIpv4Type << 6) | 13, 8, {concat(bytesOf("198.19.5.5"), {0, 53, 0, 0})});
	const nft::NatRuleset ruleset = ipNat(
		{
			masqueradeIf(2, daddr("198.18.0.0/17", nft::CmpOp::neq)), // kubelet's, masked
			masqueradeIf(3, {payload(nft::PayloadBase::network, 16, 4),
					 rangeOfBytes(bytesOf("198.19.2.10"), bytesOf("198.19.2.20"))}),
			masqueradeIf(4, {payload(nft::PayloadBase::network, 16, 4), lookup("pods")}),
			masqueradeIf(5, {payload(nft::PayloadBase::network, 16, 4), lookup("hosts")}),
			rule(6, {payload(nft::PayloadBase::network, 16, 4), mapLookup("to", NFT_REG_1), snatFrom(NFT_REG_1)}),
			masqueradeIf(7, {payload(nft::PayloadBase::network, 16, 4, NFT_REG32_00),
					 payload(nft::PayloadBase::transport, 2, 2, NFT_REG32_01), lookup("services", NFT_REG32_00)}),
		},
		{pods, exact, map, services});
	const RuleSamples more = samplesFromRules(ruleset, plan, node());
	CHECK(destinations(more.packets) ==
	      std::vector<std::string>{"198.18.0.0",   "198.18.64.0", "198.18.128.0", "198.19.1.1", "198.19.1.2",
				       "198.19.2.10",  "198.19.2.21", "198.19.5.5",   "198.19.5.6", "198.19.7.0",
				       "198.19.8.0"});
	for (const SampledPacket &p : more.packets) {
		CHECK(p.entry == "no entry covers it");
		CHECK_FALSE(p.source);
		CHECK_FALSE(p.transport);
	}
	// The same rules in an inet table read the same.
	nft::NatRuleset inet = ruleset;
	inet.tables[0].family = nft::TableFamily::inet;
	CHECK(destinations(samplesFromRules(inet, plan, node()).packets) == destinations(more.packets));
}

TEST_CASE("each sampled address is named by the entry that decides it, as --explain names it")
{
	Config config = test::fileConfig({entry("198.18.0.0/15", 2), entry("198.19.0.0/16", 3)},
					 {entry("198.19.128.0/17", 4)});
	config.discoveredOrigins.push_back("FLANNEL_NETWORK in /run/flannel/subnet.env:1");
	Prefix discovered = parsePrefix("198.19.64.0/18").value();
	discovered.origin = Origin{Origin::kDiscovered, 0};
	config.nonMasqueradeCIDRs.push_back(discovered);
	const SamplePlan plan = planOf(config);
	nft::Set hosts = exactSet("hosts", kIpv4Type, 4,
				  {bytesOf("198.18.9.9"), bytesOf("198.19.5.5"), bytesOf("198.19.70.1"),
				   bytesOf("198.19.200.1"), bytesOf("169.254.3.3"), bytesOf("192.0.2.1")});
	const RuleSamples more =
		samplesFromRules(ipNat({masqueradeIf(2, {payload(nft::PayloadBase::network, 16, 4), lookup("hosts")})},
				       {hosts}),
				 plan, node());
	REQUIRE(more.packets.size() == 12);
	for (const SampledPacket &p : more.packets) {
		INFO(p.toString());
		CHECK(p.entry == describeDecidingEntry(config, explainDecision(config, p.destination)));
	}
	CHECK_THAT(fmt::format("{}", fmt::join(named(more.packets), "\n")),
		   Catch::Contains("198.19.70.1: discovered 198.19.64.0/18 (FLANNEL_NETWORK in /run/flannel/subnet.env:1)") &&
			   Catch::Contains("198.19.200.1: masqueradeCIDRs 198.19.128.0/17 (" + kFile + ":4)") &&
			   Catch::Contains("169.254.3.3: link-local 169.254.0.0/16") &&
			   Catch::Contains("198.19.5.5: nonMasqueradeCIDRs 198.19.0.0/16 (" + kFile + ":3)"));
}

TEST_CASE("the bound: a 200,000-element set costs a bounded read, gives at most the bound, evenly "
	  "spread, and says where it cut")
{
	const Config config = test::fileConfig({entry("2001:db8::/32", 2)});
	const SamplePlan plan = planOf(config, true);
	// `ip6 daddr @big masquerade`, 2001:db8::0 to 2001:db8::3:d3f.
	nft::Set big = declareSet("big", 0, kIpv6Type, 16);
	for (uint32_t i = 0; i < 200000; i++)
		big.add({Address{Family::ipv6, (AddressValue(0x20010db8) << 96) | i}.bytes()});
	big.finish();
	const nft::NatRuleset ruleset =
		ipNat({masqueradeIf(2, {payload(nft::PayloadBase::network, 24, 16), lookup("big")})}, {big},
		      nft::TableFamily::ip6);
	RuleSampleLimits limits;
	limits.maxDestinations = 16;
	const RuleSamples more = samplesFromRules(ruleset, plan, node(), limits);
	CHECK(more.packets.size() == 16);
	CHECK(std::is_sorted(more.packets.begin(), more.packets.end(),
			     [](const SampledPacket &a, const SampledPacket &b) { return a.destination < b.destination; }));
	// Spread over the set's whole range, not its first 16 elements.
	CHECK(more.packets.back().destination > addr("2001:db8::2:0"));
	REQUIRE(more.cuts.size() == 1);
	CHECK(more.cuts[0].family == Family::ipv6);
	CHECK(more.cuts[0].atLeast);
	CHECK(more.cuts[0].sampled == 16);
	// 64 elements looked at (limits.maxSetElements), each an address and the one after it.
	CHECK(more.cuts[0].found <= 2 * limits.maxSetElements);

	SECTION("the boundaries collected stop at their own bound")
	{
		limits.maxCandidates = 10;
		const RuleSamples few = samplesFromRules(ruleset, plan, node(), limits);
		REQUIRE(few.cuts.size() == 1);
		CHECK(few.cuts[0].atLeast);
		// Ten collected, the first of them (2001:db8::) the plan's own.
		CHECK(few.cuts[0].found == 9);
		CHECK(few.packets.size() == 9);
	}
}

TEST_CASE("an address of the node is not sampled: traffic to it is delivered here, never NATed at "
	  "postrouting")
{
	const Config config = test::fileConfig({entry("198.18.0.0/15", 2)});
	// A rule for the node's own 203.0.113.1 (node()), and the address after it.
	const nft::NatRuleset ruleset = ipNat({masqueradeIf(2, daddr("203.0.113.1/32"))});
	CHECK(destinations(samplesFromRules(ruleset, planOf(config), node()).packets) ==
	      std::vector<std::string>{"203.0.113.2"});
	CHECK(destinations(samplesFromRules(ruleset, planOf(config), NodeAddresses{}).packets) ==
	      std::vector<std::string>{"203.0.113.1", "203.0.113.2"});
}

TEST_CASE("under the bound, what the config's own sample can never reach comes first")
{
	// 198.19.0.0 starts an entry's stretch (the config's sample names the entry elsewhere
	// too); 198.18.7.0 and 198.18.8.0 lie inside one.
	const Config config = test::fileConfig({entry("198.18.0.0/15", 2), entry("198.19.0.0/16", 3)});
	const nft::NatRuleset ruleset =
		ipNat({masqueradeIf(2, daddr("198.19.0.0/16")), masqueradeIf(3, daddr("198.18.7.0/24"))});
	RuleSampleLimits limits;
	limits.maxDestinations = 2;
	CHECK(destinations(samplesFromRules(ruleset, planOf(config), node(), limits).packets) ==
	      std::vector<std::string>{"198.18.7.0", "198.18.8.0"});
	limits.maxDestinations = 3;
	const RuleSamples all = samplesFromRules(ruleset, planOf(config), node(), limits);
	CHECK(destinations(all.packets) == std::vector<std::string>{"198.18.7.0", "198.18.8.0", "198.19.0.0"});
	CHECK(all.cuts.empty());
}

TEST_CASE("sources and families: each destination from each of the plan's sources, IPv6 only "
	  "where the plan samples it, the all-zeros address as the first host")
{
	const Config config = test::fileConfig({entry("198.18.0.0/15", 2), entry("2001:db8::/32", 3)}, {},
					       {entry("198.51.100.0/24", 5), entry("203.0.113.0/25", 6)});
	const nft::NatRuleset ruleset = ipNat(
		{masqueradeIf(2, daddr("198.19.0.0/16")),
		 masqueradeIf(3, daddr("0.0.0.0/8", nft::CmpOp::neq)),
		 // `ip6 daddr 2001:db8:1::/48 masquerade` in the inet table.
		 masqueradeIf(4, {payload(nft::PayloadBase::network, 24, 6), cmp(nft::CmpOp::eq, {0x20, 0x01, 0x0d, 0xb8, 0, 1})})},
		{}, nft::TableFamily::inet);
	const RuleSamples v4 = samplesFromRules(ruleset, planOf(config), node());
	// 0.0.0.0 stands for 0.0.0.1, the plan's own; 1.0.0.0 follows 0.0.0.0/8.
	CHECK(named(v4.packets) == std::vector<std::string>{
					   "1.0.0.0 from 198.51.100.0: no entry covers it",
					   "1.0.0.0 from 203.0.113.0: no entry covers it",
					   "198.19.0.0 from 198.51.100.0: nonMasqueradeCIDRs 198.18.0.0/15 (" + kFile + ":2)",
					   "198.19.0.0 from 203.0.113.0: nonMasqueradeCIDRs 198.18.0.0/15 (" + kFile + ":2)"});
	// With IPv6 (masqueradeSourceCIDRs lists no IPv6 source: any).
	const RuleSamples both = samplesFromRules(ruleset, planOf(config, true), node());
	CHECK_THAT(fmt::format("{}", fmt::join(named(both.packets), "\n")),
		   Catch::EndsWith("\n2001:db8:1::: nonMasqueradeCIDRs 2001:db8::/32 (" + kFile + ":3)\n"
				   "2001:db8:2::: nonMasqueradeCIDRs 2001:db8::/32 (" + kFile + ":3)"));
	CHECK(both.packets.size() == v4.packets.size() + 2);
	// The config's own IPv6 sample: not ::1, the loopback every node has.
	const std::vector<SampledPacket> plan6 = samplePackets(config, true);
	CHECK(std::none_of(plan6.begin(), plan6.end(),
			   [](const SampledPacket &p) { return p.destination == addr("::1"); }));
	CHECK(std::any_of(plan6.begin(), plan6.end(), [](const SampledPacket &p) { return p.destination == addr("::2"); }));
}

TEST_CASE("the ports a rule's port matches name, with its protocols or tcp and udp")
{
	const nft::Table t = table(nft::TableFamily::ip, "other", {},
				   {exactSet("ports", 13, 2, {{0, 53}, {0x14, 0xe9}}, kAnonymous)});
	const auto portsOf = [&t](std::vector<nft::Expression> match) {
		match.push_back(masquerade());
		std::vector<std::string> out;
		for (const PortProtocol &p : destinationPorts(t, decoded(t, match)))
			out.push_back(p.toString());
		return out;
	};
	CHECK(portsOf(dport(53)) == std::vector<std::string>{"53/udp", "53/tcp"});
	CHECK(portsOf(dport(53, nft::CmpOp::eq, IPPROTO_UDP)) == std::vector<std::string>{"53/udp"});
	CHECK(portsOf(dport(80, nft::CmpOp::neq, IPPROTO_TCP)) == std::vector<std::string>{"81/tcp"});
	CHECK(portsOf(dport(1024, nft::CmpOp::lt, IPPROTO_TCP)) == std::vector<std::string>{"1023/tcp"});
	CHECK(portsOf({meta(NFT_META_L4PROTO), cmp(nft::CmpOp::eq, {IPPROTO_UDP}), payload(nft::PayloadBase::transport, 2, 2),
		       lookup("ports")}) == std::vector<std::string>{"53/udp", "5353/udp"});
	CHECK(portsOf({payload(nft::PayloadBase::transport, 2, 2), rangeOfBytes({0x03, 0xe8}, {0x07, 0xd0})}) ==
	      std::vector<std::string>{"1000/udp", "1000/tcp"});
	// No port match, or only the source port: none.
	CHECK(portsOf(daddr("198.19.0.0/16")).empty());
	CHECK(portsOf({payload(nft::PayloadBase::transport, 0, 2), cmp(nft::CmpOp::eq, {0, 53})}).empty());
}

TEST_CASE("the cycle: a \"may\" for any port is decided by the ports its rule matches, and "
	  "reported once, certain")
{
	const Config config = test::fileConfig({entry("198.18.0.0/15", 2)});
	const nft::Table agent = agentTableOf(config);
	const std::vector<SampledPacket> samples = samplePackets(config, false);
	// `th dport 53 masquerade`: every DNS query to an exempt range.
	const nft::NatRuleset dns = ipNat({masqueradeIf(7, dport(53))});
	const ConflictPass anyPort = findConflicts(dns, &agent, samples, node());
	REQUIRE(anyPort.conflicts.size() == 2); // link-local and 198.18.0.0/15
	for (const NatConflict &c : anyPort.conflicts) {
		CHECK_FALSE(c.certain);
		CHECK(c.ports == std::vector<PortProtocol>{{IPPROTO_UDP, 53}, {IPPROTO_TCP, 53}});
	}
	CHECK(portSamples(anyPort.conflicts, 64).size() == 4);
	CHECK(portSamples(anyPort.conflicts, 3).size() == 3);

	ConflictCycle cycle;
	cycle.restart(samples);
	std::optional<std::vector<NatConflict>> result;
	for (int pass = 0; pass < 4 && !result; pass++)
		result = cycle.add(findConflicts(dns, &agent, cycle.rest(), node()));
	REQUIRE(result);
	CHECK(cycle.samples().empty()); // done: stopped
	REQUIRE(result->size() == 2);
	for (const NatConflict &c : *result) {
		INFO(c.describe());
		CHECK(c.certain);
		REQUIRE(c.example.transport);
		CHECK(c.example.transport->toString() == "53/udp");
		CHECK_THAT(c.describe(), Catch::Contains(" masquerades it: rule handle 7 (`th dport 53 masquerade`)") &&
						 Catch::Contains(" port 53/udp is not masqueraded by the agent"));
	}

	SECTION("a \"may\" no port decides stays, once")
	{
		// `oifname "eth0" masquerade`: the output interface of a sample is not known.
		const nft::NatRuleset oif =
			ipNat({masqueradeIf(8, {meta(NFT_META_OIFNAME), cmp(nft::CmpOp::eq, ifnameBytes("eth0"))})});
		cycle.restart(samples);
		const auto once = cycle.add(findConflicts(oif, &agent, cycle.rest(), node()));
		REQUIRE(once);
		CHECK(once->size() == 2);
		for (const NatConflict &c : *once) {
			CHECK_FALSE(c.certain);
			CHECK(c.ports.empty());
		}
	}
	SECTION("withoutMayTwins keeps a may whose certain twin is another conflict")
	{
		std::vector<NatConflict> list = anyPort.conflicts;
		NatConflict other = list[0];
		other.certain = true;
		other.ruleText = "another rule";
		list.push_back(other);
		CHECK(withoutMayTwins(list).size() == 3);
		other.ruleText = list[0].ruleText;
		list.back() = other;
		CHECK(withoutMayTwins(list).size() == 2);
	}
}

namespace {

// ---- The daemon's cycle against --explain, over generated rulesets ----

using Rng = std::mt19937_64;

size_t pick(Rng &rng, size_t n)
{
	return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

// A /16 to /24 of 198.18.0.0/15, or 192.0.2.0/24.
std::string somePrefix(Rng &rng)
{
	if (pick(rng, 5) == 0)
		return "192.0.2.0/24";
	const unsigned length = 16 + unsigned(pick(rng, 9));
	const AddressValue host = (AddressValue(198) << 24) | (AddressValue(18 + pick(rng, 2)) << 16) |
				  (AddressValue(pick(rng, 256)) << 8);
	const AddressValue mask = ~((AddressValue(1) << (32 - length)) - 1) & 0xffffffff;
	return fmt::format("{}/{}", Address{Family::ipv4, host & mask}.toString(), length);
}

struct Generated {
	Config config;
	nft::NatRuleset ruleset;
	std::string description;
};

// A rule of one of the shapes other components write, matching where `rng` says.
WireRule someRule(Rng &rng, uint64_t handle, std::vector<nft::Set> &sets, std::string &description)
{
	const std::string prefix = somePrefix(rng);
	switch (pick(rng, 7)) {
	case 0:
		description += fmt::format("ip daddr {} masquerade; ", prefix);
		return masqueradeIf(handle, daddr(prefix));
	case 1:
		description += fmt::format("ip daddr != {} masquerade; ", prefix);
		return masqueradeIf(handle, daddr(prefix, nft::CmpOp::neq));
	case 2:
		description += fmt::format("ip daddr {} snat to 198.18.250.9; ", prefix);
		return rule(handle, [&] {
			auto e = daddr(prefix);
			e.push_back(immediate(bytesOf("198.18.250.9")));
			e.push_back(snatFrom(NFT_REG_1));
			return e;
		}());
	case 3:
		description += fmt::format("th dport 53 ip daddr {} masquerade; ", prefix);
		return rule(handle, [&] {
			auto e = dport(53);
			for (auto &x : daddr(prefix))
				e.push_back(std::move(x));
			e.push_back(masquerade());
			return e;
		}());
	case 4: {
		const std::string name = fmt::format("s{}", handle), second = somePrefix(rng);
		const AddressRange a = rangeOf(prefix), b = rangeOf(second);
		std::vector<IntervalEntry> entries;
		if (b.last < a.first)
			entries = {{second}, {prefix}};
		else if (a.last < b.first)
			entries = {{prefix}, {second}};
		else
			entries = {{a.first <= b.first && b.last <= a.last ? prefix : second}};
		sets.push_back(intervalSet(declareSet(name, NFT_SET_INTERVAL, kIpv4Type, 4), entries));
		description += fmt::format("ip daddr @{} masquerade ({} {}); ", name, prefix, second);
		return masqueradeIf(handle, {payload(nft::PayloadBase::network, 16, 4), lookup(name)});
	}
	case 5:
		description += "oifname \"eth0\" masquerade; ";
		return masqueradeIf(handle, {meta(NFT_META_OIFNAME), cmp(nft::CmpOp::eq, ifnameBytes("eth0"))});
	default:
		description += fmt::format("ip daddr {} return; ", prefix);
		return rule(handle, [&] {
			auto e = daddr(prefix);
			e.push_back(verdict(nft::VerdictCode::returnToCaller));
			return e;
		}());
	}
}

Generated generate(Rng &rng)
{
	Generated g;
	std::vector<Prefix> exempt{entry("198.18.0.0/15", 2)}, exceptions;
	for (size_t i = 0, n = pick(rng, 3); i < n; i++)
		exempt.push_back(entry(somePrefix(rng).c_str(), uint32_t(3 + i)));
	if (pick(rng, 3) == 0) {
		const std::string inner = somePrefix(rng);
		if (inner != "192.0.2.0/24" && std::none_of(exempt.begin(), exempt.end(),
							       [&](const Prefix &p) { return p.toString() == inner; }))
			exceptions.push_back(entry(inner.c_str(), 9));
	}
	g.config = test::fileConfig(exempt, exceptions);
	static const char *kOutput[] = {"", "203.0.113.7", "203.0.113.10-203.0.113.12"};
	if (const char *output = kOutput[pick(rng, 3)]; *output)
		g.config.outputAddress = parseOutputAddress(output).value();
	std::vector<WireRule> rules;
	std::vector<nft::Set> sets;
	for (size_t i = 0, n = 1 + pick(rng, 3); i < n; i++)
		rules.push_back(someRule(rng, 2 + i, sets, g.description));
	g.ruleset = {{table(nft::TableFamily::ip, "other", {baseChain("post", 100, std::move(rules))}, std::move(sets))}};
	for (const Prefix &p : exempt)
		g.description += " exempt " + p.toString();
	for (const Prefix &p : exceptions)
		g.description += " except " + p.toString();
	if (g.config.outputAddress)
		g.description += " outputAddress " + g.config.outputAddress->toString();
	return g;
}

// The daemon's cycle (conflict_check.cpp): the plan, what other tables' rules add, the port
// samples, in passes of a few steps.
std::vector<NatConflict> daemonCycle(const Generated &g, const nft::Table &agent, std::vector<SampledPacket> &evaluated)
{
	const SamplePlan plan = planOf(g.config);
	std::vector<SampledPacket> samples = plan.packets;
	for (SampledPacket &p : samplesFromRules(g.ruleset, plan, node()).packets)
		samples.push_back(std::move(p));
	ConflictCycle cycle;
	cycle.restart(std::move(samples));
	std::optional<std::vector<NatConflict>> result;
	for (int pass = 0; pass < 1000 && !result; pass++) {
		evaluated = cycle.samples();
		result = cycle.add(findConflicts(g.ruleset, &agent, cycle.rest(), node(), {64, 50}));
	}
	REQUIRE(result);
	return *result;
}

// --explain's line for one packet, through explainDestinations, with the same view.
std::string explainLine(const Generated &g, const nft::Table &agent, const SampledPacket &p)
{
	ExplainContext context;
	context.kernel.state = KernelView::State::noPermission;
	context.node = node();
	if (p.source)
		context.sources = {*p.source};
	context.transport = p.transport;
	context.desired = buildRuleset(g.config, {}, {});
	context.otherTables.state = OtherTablesView::State::read;
	context.otherTables.ruleset = g.ruleset;
	context.otherTables.agent = agent;
	return explainDestinations(g.config, context, {p.destination}).front();
}

// What --explain says of a conflict, after "; but " or "; other tables' NAT may undo that: ".
std::string clauseOf(const NatConflict &c)
{
	switch (c.kind) {
	case NatConflict::Kind::natsExempted: return "; but " + c.describeRule();
	case NatConflict::Kind::natsFirst: return "; but " + c.describeRule() + ", before the agent " + c.agentAction;
	case NatConflict::Kind::undetermined: break;
	}
	return "; other tables' NAT may undo that: " + c.describeRule();
}

} // namespace

TEST_CASE("the daemon's cycle and --explain agree on every packet the cycle samples, over "
	  "generated rulesets")
{
	Rng rng(20261207);
	size_t withConflicts = 0, fromRules = 0, withPorts = 0;
	for (int i = 0; i < 300; i++) {
		const Generated g = generate(rng);
		INFO("case " << i << ": " << g.description);
		const nft::Table agent = agentTableOf(g.config);
		std::vector<SampledPacket> evaluated;
		const std::vector<NatConflict> reported = daemonCycle(g, agent, evaluated);
		const size_t planned = samplePackets(g.config, false).size();
		fromRules += evaluated.size() > planned ? 1 : 0;
		withConflicts += reported.empty() ? 0 : 1;
		for (const SampledPacket &p : evaluated) {
			INFO("packet " << p.toString() << " (" << p.entry << ")");
			withPorts += p.transport ? 1 : 0;
			// --explain's evaluation of the packet: each conflict is reported, or its certain twin.
			for (const NatConflict &c : findConflicts(g.ruleset, &agent, std::span(&p, 1), node()).conflicts) {
				INFO("--explain finds: " << c.describe());
				NatConflict twin = c;
				twin.certain = true;
				const auto holds = [&](const NatConflict &x) {
					return std::any_of(reported.begin(), reported.end(),
							   [&](const NatConflict &r) { return r.sameAs(x); });
				};
				CHECK((holds(c) || (!c.certain && holds(twin))));
			}
		}
		// Each conflict reported is in --explain's own line for its packet, word for word.
		for (const NatConflict &c : reported) {
			INFO("reported: " << c.describe());
			CHECK_THAT(explainLine(g, agent, c.example), Catch::Contains(clauseOf(c)));
		}
	}
	// The generator reaches what the test is about.
	CHECK(withConflicts > 100);
	CHECK(fromRules > 100);
	CHECK(withPorts > 10);
}
