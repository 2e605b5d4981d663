// SPDX-License-Identifier: Apache-2.0
// Conflicts (other_tables/conflicts.h): the sampled packets, the definition (the source a
// packet leaves with, against what the agent's own rules alone give it) on kubelet's,
// Docker's, kube-proxy's rules, SNATs and masquerades before the agent, NETMAP, unknown
// targets and unreadable tables; identity by content; passes, cycles and diffs.
#include <catch2/catch.hpp>

#include <algorithm>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/xt_addrtype.h>

#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/diagnose/conflicts.h"
#include "ip-masq-agent/config/policy.h"
#include "../common/nat_builders.h"
#include "config_entries.h"

using namespace ipmasq;
using namespace ipmasq::nft::build;

namespace {

const std::string &kFile = test::kConfigFile;
using test::entry;

Config withSources(std::vector<Prefix> nonMasquerade, std::vector<Prefix> sources)
{
	return test::fileConfig(std::move(nonMasquerade), {}, std::move(sources));
}

// The analogue of a kubelet exempting its cluster CIDR while the agent exempts more.
Config twoRanges(std::vector<Prefix> sources = {})
{
	return withSources({entry("198.18.0.0/15", 2), entry("192.0.2.0/24", 3)}, std::move(sources));
}

Config withOutputAddress(Config config, const char *text)
{
	config.outputAddress = parseOutputAddress(text).value();
	return config;
}

// "DESTINATION masq|exempt" for each sampled packet, by the config's decision.
std::vector<std::string> destinations(const Config &config, const std::vector<SampledPacket> &samples)
{
	std::vector<std::string> out;
	for (const SampledPacket &s : samples)
		out.push_back(s.destination.toString() +
			      (explainDecision(config, s.destination).masqueraded ? " masq" : " exempt"));
	return out;
}

nft::NatRuleset ipNat(std::vector<WireRule> postrouting, int32_t priority = 100)
{
	return {{table(nft::TableFamily::ip, "nat", {baseChain("POSTROUTING", priority, std::move(postrouting))})}};
}

// kubelet's `! -d 198.18.0.0/16 -m addrtype ! --dst-type LOCAL -j MASQUERADE`: it exempts
// less than the agent does (198.19.0.0/16 and 192.0.2.0/24 are the agent's alone).
std::vector<nft::Expression> kubeletExpressions(uint8_t second = 18)
{
	return {payload(nft::PayloadBase::network, 16, 2), cmp(nft::CmpOp::neq, {198, second}),
		addrtypeV1(0, XT_ADDRTYPE_LOCAL, XT_ADDRTYPE_INVERT_DEST), xtMasquerade()};
}

WireRule kubelet(uint64_t handle)
{
	return rule(handle, kubeletExpressions());
}

// Docker's `-s 203.0.113.0/24 ! -o docker0 -j MASQUERADE`.
WireRule docker(uint64_t handle)
{
	return rule(handle, {payload(nft::PayloadBase::network, 12, 3), cmp(nft::CmpOp::eq, {203, 0, 113}),
			     meta(NFT_META_OIFNAME), cmp(nft::CmpOp::neq, ifnameBytes("docker0")), xtMasquerade()});
}

// `-j SNAT --to-source TO` (revision 0, a single address or a range "a-b").
WireRule snatTo(uint64_t handle, const std::string &to)
{
	const size_t dash = to.find('-');
	const std::string lo = to.substr(0, dash), hi = dash == std::string::npos ? lo : to.substr(dash + 1);
	return rule(handle, {target("SNAT", 0, compatRangeV4(NF_NAT_RANGE_MAP_IPS, lo, hi))});
}

NodeAddresses node(std::vector<std::string> more = {})
{
	NodeAddresses n{{{addr("203.0.113.1"), 24}}, true};
	for (const std::string &a : more)
		n.addresses.push_back({addr(a), 24});
	return n;
}

std::vector<NatConflict> conflicts(const nft::NatRuleset &ruleset, const Config &config,
				   const NodeAddresses &addresses = node(), const SubnetAddresses &subnet = {})
{
	const nft::Table agent = agentTableOf(config, {}, subnet);
	const std::vector<SampledPacket> samples = samplePackets(config, false);
	return findConflicts(ruleset, &agent, samples, addresses).conflicts;
}

std::vector<NatConflict> ofKind(const std::vector<NatConflict> &list, NatConflict::Kind kind)
{
	std::vector<NatConflict> out;
	std::copy_if(list.begin(), list.end(), std::back_inserter(out),
		     [kind](const NatConflict &c) { return c.kind == kind; });
	return out;
}

std::string describeAll(const std::vector<NatConflict> &list)
{
	std::string out;
	for (const NatConflict &c : list)
		out += std::string(c.certain ? "certain: " : "may: ") + c.describe() + "\n";
	return out;
}

} // namespace

TEST_CASE("the sample: the first address of every interval and every range between")
{
	const Config config = twoRanges();
	const std::vector<SampledPacket> samples = samplePackets(config, false);
	CHECK(destinations(config, samples) ==
	      std::vector<std::string>{"0.0.0.1 masq", "169.254.0.0 exempt", "169.255.0.0 masq",
				       "192.0.2.0 exempt", "192.0.3.0 masq", "198.18.0.0 exempt",
				       "198.20.0.0 masq"});
	for (const SampledPacket &s : samples) {
		CHECK_FALSE(s.source); // no masqueradeSourceCIDRs: any source
		CHECK_FALSE(s.outputInterface);
	}
	CHECK(samples[3].entry == "nonMasqueradeCIDRs 192.0.2.0/24 (" + kFile + ":3)");
	CHECK(samples[1].entry == "link-local 169.254.0.0/16");
	CHECK(samples[0].entry == "no entry covers it");

	SECTION("masqueradeSourceCIDRs: each destination from each entry's first address")
	{
		const auto from = samplePackets(twoRanges({entry("198.51.100.0/24", 5), entry("203.0.113.0/25", 6)}),
						false);
		REQUIRE(from.size() == 2 * samples.size());
		CHECK(from[0].source->toString() == "198.51.100.0");
		CHECK(from[1].source->toString() == "203.0.113.0");
	}
	SECTION("IPv6 only with enableIpv6")
	{
		const auto both = samplePackets(config, true);
		CHECK(both.size() > samples.size());
		CHECK(both.back().destination.family == Family::ipv6);
	}
	SECTION("bounded: 10,000 CIDRs give at most the limit, the first and evenly spread")
	{
		std::vector<Prefix> many;
		for (uint32_t i = 0; i < 10000; i++) {
			Prefix p;
			p.network = Address{Family::ipv4, (AddressValue(198) << 24) | (AddressValue(18) << 16) |
							     (AddressValue(i) << 2)};
			p.length = 31; // every other /31: 10,000 intervals
			p.origin = Origin{0, i + 2};
			many.push_back(p);
		}
		const Config manyConfig = test::fileConfig(many);
		const auto bounded = samplePackets(manyConfig, false, {16, 4});
		// The 16 spread ones, and link-local's interval, which the spread skipped: the
		// entry other components most often leave out.
		CHECK(bounded.size() == 17);
		CHECK(bounded.front().destination.toString() == "0.0.0.1");
		const std::vector<std::string> sampled = destinations(manyConfig, bounded);
		CHECK(std::count(sampled.begin(), sampled.end(), "169.254.0.0 exempt") == 1);
		CHECK(std::is_sorted(bounded.begin(), bounded.end(),
				     [](const SampledPacket &a, const SampledPacket &b) {
					     return a.destination < b.destination;
				     }));
		// With masqLinkLocal it is masqueraded, like its neighbours: nothing pinned.
		Config masqLinkLocal = manyConfig;
		masqLinkLocal.masqLinkLocal = true;
		CHECK(samplePackets(masqLinkLocal, false, {16, 4}).size() == 16);
	}
}

TEST_CASE("kubelet's rule: a conflict per exempt entry it undoes, certain, once each")
{
	const auto found = conflicts(ipNat({kubelet(7)}), twoRanges());
	INFO(describeAll(found));
	// 192.0.2.0/24 and link-local; 198.18.0.0 is kubelet's own exemption.
	REQUIRE(found.size() == 2);
	CHECK(found[0].example.entry == "link-local 169.254.0.0/16");
	CHECK(found[1].example.entry == "nonMasqueradeCIDRs 192.0.2.0/24 (" + kFile + ":3)");
	for (const NatConflict &c : found) {
		CHECK(c.certain);
		CHECK(c.kind == NatConflict::Kind::natsExempted);
		CHECK(c.outcome.rule->handle == 7);
		CHECK(c.agentAction == "leaves it alone");
	}
	CHECK(found[1].describe() ==
	      "table ip nat chain POSTROUTING (priority srcnat, before the agent) masquerades it: "
	      "rule handle 7 (`ip daddr != 198.18.0.0/16 fib daddr type != local masquerade`), "
	      "which undoes nonMasqueradeCIDRs 192.0.2.0/24 (" + kFile + ":3): IPv4 traffic from any "
	      "source to 192.0.2.0 on any port is not masqueraded by the agent");
	// After the agent, the same: its return does not stop another table's chain.
	CHECK(conflicts(ipNat({kubelet(7)}, 300), twoRanges()).size() == 2);
}

TEST_CASE("Docker's rule: a source it does not match is no conflict; any source may")
{
	const nft::NatRuleset ruleset = ipNat({docker(3)});
	const auto outside = conflicts(ruleset, twoRanges({entry("198.51.100.0/24", 5)}));
	INFO(describeAll(outside));
	CHECK(outside.empty());

	const auto inside = conflicts(ruleset, twoRanges({entry("203.0.113.0/24", 5)}));
	INFO(describeAll(inside));
	REQUIRE_FALSE(inside.empty());
	CHECK_FALSE(inside[0].certain); // the output interface is not known
	CHECK(inside[0].describe().find("may masquerade it: rule handle 3") != std::string::npos);

	const auto any = conflicts(ruleset, twoRanges());
	REQUIRE_FALSE(any.empty());
	CHECK_FALSE(any[0].certain);
	CHECK(any[0].describe().find("from any source") != std::string::npos);
}

TEST_CASE("kube-proxy's mark rule: no conflict for unmarked traffic")
{
	const nft::NatRuleset ruleset = ipNat(
		{rule(4, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)), cmp(nft::CmpOp::eq, hostU32(0x4000)),
			  masquerade()})});
	CHECK(conflicts(ruleset, twoRanges()).empty());
}

TEST_CASE("a match the evaluator does not know: may; no other table: nothing")
{
	const auto found = conflicts(
		ipNat({rule(9, {compat("statistic", 0, nft::Bytes(24, 0)), xtMasquerade()})}), twoRanges());
	INFO(describeAll(found));
	REQUIRE(found.size() == 3); // every exempt entry: link-local and both of the file's
	for (const NatConflict &c : found)
		CHECK_FALSE(c.certain);
	CHECK(conflicts({}, twoRanges()).empty());
}

TEST_CASE("an SNAT before the agent undoes its masquerade; a masquerade does not")
{
	const auto snat = conflicts(ipNat({snatTo(5, "203.0.113.9")}), twoRanges());
	INFO(describeAll(snat));
	const auto first = ofKind(snat, NatConflict::Kind::natsFirst);
	REQUIRE_FALSE(first.empty());
	CHECK(first[0].certain); // 203.0.113.9 is not the node's: masquerade never gives it
	CHECK(first[0].agentAction == "masquerades");
	const auto masq = conflicts(ipNat({rule(6, {masquerade()})}), twoRanges());
	INFO(describeAll(masq));
	CHECK_FALSE(masq.empty());
	CHECK(ofKind(masq, NatConflict::Kind::natsFirst).empty());
}

TEST_CASE("outputAddress: an earlier masquerade or SNAT to another address is a conflict")
{
	// Issue 24, points 1 and 2: the node NATs a connection once, whichever chain runs
	// first wins. The old design called a masquerade before the agent's SNAT, and an SNAT
	// into the outputAddress subnet, "no conflict".
	SECTION("kubelet's masquerade before the agent's SNAT to 203.0.113.7")
	{
		const Config config = withOutputAddress(twoRanges(), "203.0.113.7");
		const auto found = ofKind(conflicts(ipNat({kubelet(7)}), config), NatConflict::Kind::natsFirst);
		INFO(describeAll(found));
		// The masqueraded destinations kubelet does not exempt (0.0.0.1, 169.255.0.0,
		// 192.0.3.0, 198.20.0.0) share their entry ("no entry covers it"): one conflict.
		REQUIRE(found.size() == 1);
		CHECK(found[0].example.destination.toString() == "0.0.0.1");
		for (const NatConflict &c : found) {
			CHECK(c.certain);
			CHECK(c.agentAction == "SNATs to 203.0.113.7");
		}
		CHECK_THAT(found[0].describe(),
			   Catch::StartsWith("table ip nat chain POSTROUTING (priority srcnat, before the agent) "
					     "masquerades it: rule handle 7 (`ip daddr != 198.18.0.0/16 fib daddr "
					     "type != local masquerade`), before the agent SNATs to 203.0.113.7"));
		// 203.0.113.7 is one of the node's addresses: masquerade may pick it.
		const auto own = ofKind(conflicts(ipNat({kubelet(7)}), config, node({"203.0.113.7"})),
					NatConflict::Kind::natsFirst);
		REQUIRE(own.size() == 1);
		for (const NatConflict &c : own)
			CHECK_FALSE(c.certain);
	}
	SECTION("an SNAT into the outputAddress subnet, to another address than the node's")
	{
		const Config config = withOutputAddress(twoRanges(), "203.0.113.0/24");
		const SubnetAddresses chosen{addr("203.0.113.5"), {}};
		const auto other = ofKind(conflicts(ipNat({snatTo(5, "203.0.113.9")}), config, node(), chosen),
					  NatConflict::Kind::natsFirst);
		INFO(describeAll(other));
		REQUIRE_FALSE(other.empty());
		CHECK(other[0].certain);
		CHECK(other[0].agentAction == "SNATs to 203.0.113.5");
		// The node's own choice: what the agent does, no conflict.
		CHECK(ofKind(conflicts(ipNat({snatTo(5, "203.0.113.5")}), config, node(), chosen),
			     NatConflict::Kind::natsFirst)
			      .empty());
		// No address of the node in the subnet: the agent masquerades, and an SNAT to an
		// address that is not the node's undoes that for certain.
		const auto masquerading = ofKind(conflicts(ipNat({snatTo(5, "203.0.113.9")}), config),
						 NatConflict::Kind::natsFirst);
		REQUIRE_FALSE(masquerading.empty());
		CHECK(masquerading[0].certain);
		CHECK(masquerading[0].agentAction == "masquerades");
	}
	SECTION("an SNAT to exactly the agent's address or range is none; into its range, may")
	{
		for (const auto &[output, to, expected] :
		     {std::tuple{"203.0.113.9", "203.0.113.9", "none"},
		      std::tuple{"203.0.113.8-203.0.113.10", "203.0.113.8-203.0.113.10", "none"},
		      // The agent's SNAT picks one address of its range; another's SNAT to one of
		      // them may or may not be the one it would have picked.
		      std::tuple{"203.0.113.8-203.0.113.10", "203.0.113.9", "may"},
		      std::tuple{"198.51.100.7", "203.0.113.9", "certain"}}) {
			INFO(output << " and an SNAT to " << to);
			const auto found = ofKind(conflicts(ipNat({snatTo(5, to)}), withOutputAddress(twoRanges(), output)),
						  NatConflict::Kind::natsFirst);
			INFO(describeAll(found));
			const std::string got = found.empty() ? "none" : found[0].certain ? "certain" : "may";
			CHECK(got == expected);
		}
	}
}

TEST_CASE("NETMAP, unknown targets, drops and unreadable tables")
{
	const Config config = withOutputAddress(twoRanges(), "198.51.100.7");
	SECTION("NETMAP into a prefix that holds the agent's address: may")
	{
		const auto found = ofKind(
			conflicts(ipNat({rule(5, {target("NETMAP", 0, compatRangeV4(NF_NAT_RANGE_MAP_IPS, "198.51.100.0",
										   "198.51.100.255"))})}),
				  config),
			NatConflict::Kind::natsFirst);
		INFO(describeAll(found));
		REQUIRE_FALSE(found.empty());
		CHECK_FALSE(found[0].certain);
		CHECK(found[0].ruleText == "xt target NETMAP");
		CHECK_THAT(found[0].describe(), Catch::Contains("may rewrite its source to 198.51.100.0/24"));
	}
	SECTION("NETMAP into a prefix apart from it: the source is somewhere else for certain")
	{
		const auto found = ofKind(
			conflicts(ipNat({rule(5, {target("NETMAP", 0, compatRangeV4(NF_NAT_RANGE_MAP_IPS, "192.0.2.0",
										   "192.0.2.255"))})}),
				  config),
			NatConflict::Kind::natsFirst);
		REQUIRE_FALSE(found.empty());
		CHECK(found[0].certain);
	}
	SECTION("a target the decoder does not know: undetermined, never certain")
	{
		const auto found = conflicts(ipNat({rule(5, {target("CONNMARK", 1, nft::Bytes(16, 0))})}), config);
		INFO(describeAll(found));
		const auto undetermined = ofKind(found, NatConflict::Kind::undetermined);
		REQUIRE(undetermined.size() == found.size());
		REQUIRE_FALSE(found.empty());
		CHECK_FALSE(found[0].certain);
		CHECK_THAT(found[0].describe(), Catch::Contains("iptables target CONNMARK (revision 1) is not understood") &&
							Catch::Contains("is not known"));
	}
	SECTION("a drop is not NAT")
	{
		CHECK(conflicts(ipNat({rule(5, {verdict(nft::VerdictCode::drop)})}), config).empty());
	}
	SECTION("a table that could not be read: undetermined")
	{
		nft::Table busy{nft::TableFamily::ip, "busy", {}, {},
				"table ip busy could not be read: it kept changing while it was read (4 attempts)"};
		const auto found = conflicts({{busy}}, config);
		INFO(describeAll(found));
		REQUIRE_FALSE(found.empty());
		CHECK(found[0].kind == NatConflict::Kind::undetermined);
		CHECK_FALSE(found[0].certain);
	}
}

TEST_CASE("an undetermined outcome in the agent's own table is not a conflict")
{
	// The agent's chain with a rule the decoder cannot read (an expression it does not
	// know), walked alone and with the node: its outcomes are its own.
	const nft::Table agent = table(nft::TableFamily::inet, "ip-masq-agent",
				       {baseChain("postrouting", 110, {rule(1, {nft::UnknownExpression{"tproxy"}}),
								       rule(2, {masquerade()})})});
	const std::vector<SampledPacket> samples = samplePackets(twoRanges(), false);
	const ConflictPass pass = findConflicts({}, &agent, samples, node());
	INFO(describeAll(pass.conflicts));
	CHECK(pass.conflicts.empty());
	// The same rule in another table before it is one.
	const nft::NatRuleset other{{table(nft::TableFamily::ip, "other",
					   {baseChain("post", 100, {rule(1, {nft::UnknownExpression{"tproxy"}})})})}};
	const ConflictPass withOther = findConflicts(other, &agent, samples, node());
	REQUIRE_FALSE(withOther.conflicts.empty());
	CHECK(withOther.conflicts[0].kind == NatConflict::Kind::undetermined);
}

TEST_CASE("a conflict's identity is its content: a new handle or place is the same, a new text is not")
{
	const Config config = twoRanges();
	const auto before = conflicts(ipNat({kubelet(7)}), config);
	REQUIRE(before.size() == 2);
	// iptables-restore writes the same rule again: a new handle, after another rule.
	const auto rewritten = conflicts(ipNat({rule(40, {nft::Counter{}}), kubelet(41)}), config);
	REQUIRE(rewritten.size() == 2);
	CHECK(rewritten[0].outcome.rule->handle == 41);
	CHECK(rewritten[0].outcome.rule->position == 1);
	for (size_t i = 0; i < before.size(); i++)
		CHECK(before[i].sameAs(rewritten[i]));
	const ConflictChanges churn = diffConflicts(before, rewritten);
	CHECK(churn.found.empty());
	CHECK(churn.resolved.empty());
	// A changed rule (kubelet's exemption moved to 198.19.0.0/16): another conflict.
	const auto changed = conflicts(ipNat({rule(7, kubeletExpressions(19))}), config);
	INFO(describeAll(changed));
	REQUIRE_FALSE(changed.empty());
	for (const NatConflict &c : changed)
		CHECK_FALSE(c.sameAs(before[0]));
	const ConflictChanges edit = diffConflicts(before, changed);
	CHECK_FALSE(edit.found.empty());
	CHECK(edit.resolved.size() == before.size());
}

TEST_CASE("conflicts are bounded and diffed: found, resolved, the same is no change")
{
	const Config config = twoRanges();
	const nft::Table agent = agentTableOf(config);
	const auto kubeletFound = conflicts(ipNat({kubelet(7)}), config);
	const auto unknownFound = conflicts(
		ipNat({rule(9, {compat("statistic", 0, nft::Bytes(24, 0)), xtMasquerade()})}), config);
	const auto samples = samplePackets(config, false);
	const ConflictPass one = findConflicts(ipNat({kubelet(7)}), &agent, samples, node(), {1, 1000000});
	CHECK(one.conflicts.size() == 1);
	CHECK_FALSE(one.complete);
	const ConflictPass full = findConflicts(ipNat({kubelet(7)}), &agent, samples, node());
	CHECK(full.complete);
	CHECK(full.evaluated == samples.size());
	const ConflictPass short_ = findConflicts(ipNat({kubelet(7)}), &agent, samples, node(), {64, 2});
	CHECK_FALSE(short_.complete);
	CHECK(short_.evaluated < samples.size());
	CHECK(short_.steps >= 2);

	const ConflictChanges first = diffConflicts({}, kubeletFound);
	CHECK(first.found.size() == 2);
	CHECK(first.resolved.empty());
	const ConflictChanges same = diffConflicts(kubeletFound, kubeletFound);
	CHECK(same.found.empty());
	CHECK(same.resolved.empty());
	const ConflictChanges swapped = diffConflicts(kubeletFound, unknownFound);
	CHECK(swapped.found.size() == 3);
	CHECK(swapped.resolved.size() == 2);
	CHECK(swapped.resolved[0].outcome.rule->handle == 7);
}

TEST_CASE("a check spread over passes: each resumes where the last stopped, the cycle gives "
	  "what one whole pass gives")
{
	const Config config = twoRanges();
	const nft::Table agent = agentTableOf(config);
	const nft::NatRuleset ruleset = ipNat({kubelet(7)});
	const auto samples = samplePackets(config, false);
	REQUIRE(samples.size() > 2);
	const ConflictPass whole = findConflicts(ruleset, &agent, samples, node());
	REQUIRE_FALSE(whole.conflicts.empty());

	ConflictCycle cycle;
	CHECK_FALSE(cycle.running());
	cycle.restart(samples);
	std::optional<std::vector<NatConflict>> result;
	size_t passes = 0;
	while (!result && passes < 100) {
		// A budget of one step: each pass evaluates one sample.
		const ConflictPass pass = findConflicts(ruleset, &agent, cycle.rest(), node(), {64, 1});
		CHECK(pass.evaluated == 1);
		result = cycle.add(pass);
		passes++;
	}
	REQUIRE(result);
	CHECK(passes == samples.size());
	REQUIRE(result->size() == whole.conflicts.size());
	for (size_t i = 0; i < whole.conflicts.size(); i++)
		CHECK(result->at(i).sameAs(whole.conflicts[i]));
	// Done: no cycle runs until the next starts, at the first sample, with nothing found yet.
	CHECK_FALSE(cycle.running());
	CHECK(cycle.next() == 0);

	// A new sample half-way: what was found for the old one is dropped.
	cycle.restart(samples);
	(void)cycle.add(findConflicts(ruleset, &agent, cycle.rest(), node(), {64, 1}));
	CHECK(cycle.next() == 1);
	cycle.restart(samples);
	CHECK(cycle.next() == 0);
	const auto clean = cycle.add(findConflicts(ipNat({}), &agent, cycle.rest(), node()));
	REQUIRE(clean);
	CHECK(clean->empty());
}
