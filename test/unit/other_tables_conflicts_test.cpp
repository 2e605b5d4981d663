// SPDX-License-Identifier: Apache-2.0
// The daemon's conflict check, pure part: the sample of the agent's decisions, which
// outcomes of other tables undo them (kubelet, Docker, kube-proxy, an unknown match, an
// SNAT before the agent), each distinct conflict once, and the diff between two passes.
#include <catch2/catch.hpp>

#include <algorithm>

#include <linux/netfilter/xt_addrtype.h>

#include "ip-masq-agent/nat_conflicts.h"
#include "../common/nat_builders.h"
#include "config_entries.h"

using namespace ipmasq;
using namespace ipmasq::nat::build;

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

std::vector<std::string> destinations(const std::vector<SampledDecision> &samples)
{
	std::vector<std::string> out;
	for (const SampledDecision &s : samples)
		out.push_back(s.destination.toString() + (s.masquerades ? " masq" : " exempt"));
	return out;
}

nat::NatRuleset ipNat(std::vector<nat::Rule> postrouting, int32_t priority = 100)
{
	return {{table(nat::TableFamily::ip, "nat", {baseChain("POSTROUTING", priority, std::move(postrouting))})}};
}

// kubelet's `! -d 198.18.0.0/16 -m addrtype ! --dst-type LOCAL -j MASQUERADE`: it exempts
// less than the agent does (198.19.0.0/16 and 192.0.2.0/24 are the agent's alone).
nat::Rule kubelet(uint64_t handle)
{
	return rule(handle, {payload(nat::PayloadBase::network, 16, 2), cmp(nat::CmpOp::neq, {198, 18}),
			     addrtypeV1(0, XT_ADDRTYPE_LOCAL, XT_ADDRTYPE_INVERT_DEST),
			     target("MASQUERADE")});
}

// Docker's `-s 203.0.113.0/24 ! -o docker0 -j MASQUERADE`.
nat::Rule docker(uint64_t handle)
{
	return rule(handle, {payload(nat::PayloadBase::network, 12, 3), cmp(nat::CmpOp::eq, {203, 0, 113}),
			     meta(NFT_META_OIFNAME), cmp(nat::CmpOp::neq, ifnameBytes("docker0")),
			     target("MASQUERADE")});
}

nat::NodeAddresses node()
{
	return {{{addr("203.0.113.1"), 24}}, true};
}

std::vector<NatConflict> conflicts(const nat::NatRuleset &ruleset, const Config &config)
{
	return findConflicts(ruleset, sampleDecisions(config, false), node(), {}).conflicts;
}

std::string describeAll(const std::vector<NatConflict> &list)
{
	std::string out;
	for (const NatConflict &c : list)
		out += c.describe() + "\n";
	return out;
}

} // namespace

TEST_CASE("the sample: the first address of every interval and every range between")
{
	const std::vector<SampledDecision> samples = sampleDecisions(twoRanges(), false);
	CHECK(destinations(samples) ==
	      std::vector<std::string>{"0.0.0.1 masq", "169.254.0.0 exempt", "169.255.0.0 masq",
				       "192.0.2.0 exempt", "192.0.3.0 masq", "198.18.0.0 exempt",
				       "198.20.0.0 masq"});
	for (const SampledDecision &s : samples)
		CHECK_FALSE(s.source); // no masqueradeSourceCIDRs: any source
	CHECK(samples[3].entry == "nonMasqueradeCIDRs 192.0.2.0/24 (" + kFile + ":3)");
	CHECK(samples[1].entry == "link-local 169.254.0.0/16");
	CHECK(samples[0].entry == "no entry covers it");

	SECTION("masqueradeSourceCIDRs: each destination from each entry's first address")
	{
		const auto from = sampleDecisions(
			twoRanges({entry("198.51.100.0/24", 5), entry("203.0.113.0/25", 6)}), false);
		REQUIRE(from.size() == 2 * samples.size());
		CHECK(from[0].source->toString() == "198.51.100.0");
		CHECK(from[1].source->toString() == "203.0.113.0");
	}
	SECTION("IPv6 only with enableIpv6")
	{
		const auto both = sampleDecisions(twoRanges(), true);
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
		const auto bounded = sampleDecisions(test::fileConfig(many), false, {16, 4});
		// The 16 spread ones, and link-local's interval, which the spread skipped: the
		// entry other components most often leave out.
		CHECK(bounded.size() == 17);
		CHECK(bounded.front().destination.toString() == "0.0.0.1");
		const std::vector<std::string> sampled = destinations(bounded);
		CHECK(std::count(sampled.begin(), sampled.end(), "169.254.0.0 exempt") == 1);
		CHECK(std::is_sorted(bounded.begin(), bounded.end(),
				     [](const SampledDecision &a, const SampledDecision &b) {
					     return a.destination < b.destination;
				     }));
		// With masqLinkLocal it is masqueraded, like its neighbours: nothing pinned.
		Config masqLinkLocal = test::fileConfig(many);
		masqLinkLocal.masqLinkLocal = true;
		CHECK(sampleDecisions(masqLinkLocal, false, {16, 4}).size() == 16);
	}
}

TEST_CASE("kubelet's rule: a conflict per exempt entry it undoes, certain, once each")
{
	const auto found = conflicts(ipNat({kubelet(7)}), twoRanges());
	INFO(describeAll(found));
	// 192.0.2.0/24 and link-local; 198.18.0.0 is kubelet's own exemption.
	REQUIRE(found.size() == 2);
	CHECK(found[0].entry == "link-local 169.254.0.0/16");
	CHECK(found[1].entry == "nonMasqueradeCIDRs 192.0.2.0/24 (" + kFile + ":3)");
	for (const NatConflict &c : found) {
		CHECK(c.certain);
		CHECK(c.kind == NatConflict::Kind::natsExempted);
		CHECK(c.outcome.rule->handle == 7);
	}
	CHECK(found[1].describe() ==
	      "table ip nat chain POSTROUTING (priority srcnat, before the agent) masquerades it: "
	      "rule handle 7 (`ip daddr != 198.18.0.0/16 fib daddr type != local masquerade`), "
	      "which undoes nonMasqueradeCIDRs 192.0.2.0/24 (" + kFile + ":3): IPv4 traffic from any "
	      "source to 192.0.2.0 is not masqueraded by the agent");
	// After the agent, the same: its return does not stop another table's chain.
	CHECK(conflicts(ipNat({kubelet(7)}, 300), twoRanges()).size() == 2);
}

TEST_CASE("Docker's rule: a source it does not match is no conflict; any source may")
{
	const nat::NatRuleset ruleset = ipNat({docker(3)});
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
	const nat::NatRuleset ruleset = ipNat(
		{rule(4, {meta(NFT_META_MARK), bitwiseAnd(hostU32(0x4000)), cmp(nat::CmpOp::eq, hostU32(0x4000)),
			  nat::Masquerade{}})});
	CHECK(conflicts(ruleset, twoRanges()).empty());
}

TEST_CASE("a match the evaluator does not know: may; no other table: nothing")
{
	const auto found = conflicts(
		ipNat({rule(9, {compat("statistic", 0, nat::Bytes(24, 0)), target("MASQUERADE")})}), twoRanges());
	REQUIRE(found.size() == 3); // every exempt entry: link-local and both of the file's
	CHECK_FALSE(found[0].certain);
	CHECK(conflicts({}, twoRanges()).empty());
}

TEST_CASE("an SNAT before the agent undoes its masquerade; a masquerade does not")
{
	const auto snat = conflicts(ipNat({rule(5, {target("SNAT", 0, snatV4Info("203.0.113.9"))})}), twoRanges());
	INFO(describeAll(snat));
	bool first = false;
	for (const NatConflict &c : snat)
		first = first || c.kind == NatConflict::Kind::natsFirst;
	CHECK(first);
	const auto masq = conflicts(ipNat({rule(6, {nat::Masquerade{}})}), twoRanges());
	for (const NatConflict &c : masq)
		CHECK(c.kind == NatConflict::Kind::natsExempted);

	// With an outputAddress, an SNAT into it does what the agent would; elsewhere it
	// still undoes the agent's choice.
	for (const auto &[output, conflicting] :
	     {std::pair{"203.0.113.9", false}, std::pair{"203.0.113.8-203.0.113.10", false},
	      std::pair{"203.0.113.0/24", false}, std::pair{"198.51.100.7", true}}) {
		INFO(output);
		Config config = twoRanges();
		config.outputAddress = parseOutputAddress(output).value();
		bool first = false;
		for (const NatConflict &c : conflicts(
			     ipNat({rule(5, {target("SNAT", 0, snatV4Info("203.0.113.9"))})}), config))
			first = first || c.kind == NatConflict::Kind::natsFirst;
		CHECK(first == conflicting);
	}
}

TEST_CASE("conflicts are bounded and diffed: found, resolved, the same is no change")
{
	const auto kubeletFound = conflicts(ipNat({kubelet(7)}), twoRanges());
	const auto unknownFound = conflicts(
		ipNat({rule(9, {compat("statistic", 0, nat::Bytes(24, 0)), target("MASQUERADE")})}), twoRanges());
	const auto samples = sampleDecisions(twoRanges(), false);
	const ConflictPass one = findConflicts(ipNat({kubelet(7)}), samples, node(), {}, {1, 1000});
	CHECK(one.conflicts.size() == 1);
	CHECK_FALSE(one.complete);
	const ConflictPass full = findConflicts(ipNat({kubelet(7)}), samples, node(), {});
	CHECK(full.complete);
	CHECK(full.evaluated == samples.size());
	const ConflictPass short_ = findConflicts(ipNat({kubelet(7)}), samples, node(), {}, {64, 2});
	CHECK_FALSE(short_.complete);
	CHECK(short_.evaluated < samples.size());

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
	const nat::NatRuleset ruleset = ipNat({kubelet(7)});
	const auto samples = sampleDecisions(twoRanges(), false);
	REQUIRE(samples.size() > 2);
	const ConflictPass whole = findConflicts(ruleset, samples, node(), {});
	REQUIRE_FALSE(whole.conflicts.empty());

	ConflictCycle cycle;
	std::optional<std::vector<NatConflict>> result;
	size_t passes = 0;
	while (!result && passes < 100) {
		// A budget of one step: each pass evaluates one sample.
		const ConflictPass pass = findConflicts(
			ruleset, std::span(samples).subspan(cycle.next()), node(), {}, {64, 1});
		CHECK(pass.evaluated == 1);
		result = cycle.add(pass, samples.size());
		passes++;
	}
	REQUIRE(result);
	CHECK(passes == samples.size());
	REQUIRE(result->size() == whole.conflicts.size());
	for (size_t i = 0; i < whole.conflicts.size(); i++)
		CHECK(result->at(i).sameAs(whole.conflicts[i]));
	// Done: the next cycle starts at the first sample, with nothing found yet.
	CHECK(cycle.next() == 0);

	// A new sample half-way: what was found for the old one is dropped.
	(void)cycle.add(findConflicts(ruleset, samples, node(), {}, {64, 1}), samples.size());
	CHECK(cycle.next() == 1);
	cycle.restart();
	CHECK(cycle.next() == 0);
	const auto clean = cycle.add(findConflicts(ipNat({}), samples, node(), {}), samples.size());
	REQUIRE(clean);
	CHECK(clean->empty());
}
