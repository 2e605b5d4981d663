// SPDX-License-Identifier: Apache-2.0
// The rules of a ruleset as the dry run prints them: encoded as the agent sends them and
// read back through the codec (netlink/objects.h, EncodedRule::text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "ip-masq-agent/nft/objects.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq::test {

// The texts of `chain`'s rules, in order; without their counters unless asked, so that a
// text says what the statement does ("masquerade fully-random").
inline std::vector<std::string> ruleTexts(Ruleset ruleset, std::string_view chain, bool withCounters = false)
{
	if (!withCounters)
		for (Chain &c : ruleset.chains)
			for (Rule &rule : c.rules)
				rule.counter.clear();
	auto encoded = netlink::encodeRuleset(ruleset);
	INFO((encoded ? "" : encoded.error().message));
	REQUIRE(encoded);
	for (size_t c = 0; c < ruleset.chains.size(); c++)
		if (ruleset.chains[c].name == chain) {
			std::vector<std::string> out;
			for (const netlink::EncodedRule &rule : encoded->chains[c].rules)
				out.push_back(rule.text);
			return out;
		}
	FAIL("no chain " << chain);
	return {};
}

} // namespace ipmasq::test
