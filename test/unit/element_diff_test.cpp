// SPDX-License-Identifier: Apache-2.0
// diffElements(): element-only differences become removed and added ranges; others none.
#include <catch2/catch.hpp>

#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

using namespace ipmasq;

namespace {

Ruleset rulesetOf(const std::vector<std::string> &cidrs, RulesetOptions options = {})
{
	options.enableIpv6 = true;
	Config config;
	config.masqLinkLocal = true;
	config.masqLinkLocalIPv6 = true;
	for (const std::string &text : cidrs)
		config.nonMasqueradeCIDRs.push_back(parsePrefix(text).value());
	return buildRuleset(config, options);
}

AddressRange range(const std::string &cidr)
{
	const Prefix prefix = parsePrefix(cidr).value();
	return {prefix.first(), prefix.last()};
}

} // namespace

TEST_CASE("an element-only change: the ranges removed and added, as whole ranges")
{
	const Ruleset before = rulesetOf({"10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32"});
	const Ruleset after = rulesetOf({"10.0.0.0/8", "192.0.2.0/25", "198.51.100.0/24",
					 "2001:db8::/32"});
	auto diff = diffElements(before, after);
	REQUIRE(diff);
	REQUIRE(diff->sets.size() == 1); // the IPv6 set is unchanged
	const SetElementChanges &v4 = diff->sets[0];
	CHECK(v4.set == kSetNameV4);
	CHECK(v4.removed == std::vector<AddressRange>{range("192.0.2.0/24")});
	CHECK(v4.added == std::vector<AddressRange>{range("192.0.2.0/25"), range("198.51.100.0/24")});
	CHECK(v4.oldLowest == range("10.0.0.0/8").first);
	CHECK(diff->changedRanges() == 3);

	// Merging two ranges into one: both removed, the merged one added.
	auto merged = diffElements(rulesetOf({"10.0.0.0/9", "10.192.0.0/10"}),
				   rulesetOf({"10.0.0.0/8"}));
	REQUIRE(merged);
	CHECK(merged->sets[0].removed.size() == 2);
	CHECK(merged->sets[0].added == std::vector<AddressRange>{range("10.0.0.0/8")});

	// Emptied: every range removed, no lowest address afterwards.
	auto emptied = diffElements(rulesetOf({"10.0.0.0/8", "::/0"}), rulesetOf({"::/0"}));
	REQUIRE(emptied);
	CHECK(emptied->sets[0].removed.size() == 1);
	CHECK_FALSE(emptied->sets[0].newLowest);

	CHECK(diffElements(before, before)->empty());
}

TEST_CASE("anything but elements differing: no element diff")
{
	const Ruleset base = rulesetOf({"10.0.0.0/8"});
	RulesetOptions ports;
	ports.toPorts = {PortRange{1024, 65535}};
	CHECK_FALSE(diffElements(base, rulesetOf({"10.0.0.0/8"}, ports)));
	RulesetOptions notRandom;
	notRandom.randomFully = false;
	CHECK_FALSE(diffElements(base, rulesetOf({"10.0.0.0/8"}, notRandom)));
	Ruleset renamed = base;
	renamed.table = "other";
	CHECK_FALSE(diffElements(base, renamed));
	Ruleset commented = base;
	commented.sets[0].comment = "changed";
	CHECK_FALSE(diffElements(base, commented));
	Ruleset fewerSets = base;
	fewerSets.sets.pop_back();
	CHECK_FALSE(diffElements(base, fewerSets));
}
