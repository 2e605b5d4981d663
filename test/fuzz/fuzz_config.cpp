// SPDX-License-Identifier: Apache-2.0
// Fuzz target: config text -> parseConfig -> buildRuleset -> renderNftScript.
// Invariants: no crash; errors are one line; a nonMasqueradeDiscovery section has within
// and its bounds; the rendered text is deterministic; every
// interval set is sorted, disjoint and non-adjacent and holds every configured CIDR.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/diagnose/explain.h"
#include "ip-masq-agent/nft/nft_text.h"
#include "ip-masq-agent/config/policy.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

using namespace ipmasq;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	// The first byte picks the flags that shape the config and the ruleset.
	if (size < 1)
		return 0;
	const uint8_t selector = data[0];
	const std::string_view text(reinterpret_cast<const char *>(data + 1), size - 1);
	ConfigFlags flags;
	flags.enableIpv6 = selector & 1;
	flags.nomasqAllReservedRanges = selector & 2;
	flags.strictKeys = selector & 16;
	RulesetOptions options;
	options.enableIpv6 = flags.enableIpv6;
	options.randomFully = selector & 4;
	if (selector & 8)
		options.toPorts = {{1024, 29999}, {32768, 65535}};

	auto loaded = parseConfig(text, "fuzz.yaml", flags);
	if (!loaded) {
		fuzz::checkOneLine(loaded.error().message);
		return 0;
	}
	const Config &config = loaded->config;
	if (const auto &discovery = config.nonMasqueradeDiscovery) {
		// A section is only taken with `within`, inside its bounds.
		fuzz::check(!discovery->within.empty() && discovery->within.size() <= kMaxWithinCIDRs,
			    "a discovery section without within, or with too many");
		fuzz::check(discovery->holdDown >= Duration::zero() && discovery->holdDown <= kMaxHoldDown,
			    "holdDown out of its range");
		for (const Prefix &prefix : discovery->within)
			fuzz::check(flags.enableIpv6 || prefix.network.family == Family::ipv4,
				    "an IPv6 within entry without IPv6", prefix.toString());
		fuzz::checkOneLine(describeConfig(config));
	}
	const Ruleset ruleset = buildRuleset(config, options);
	for (const AddressSet &set : ruleset.sets) {
		fuzz::checkIntervalSet(set.elements);
		if (&set != ruleset.findSet(set.family())) {
			// A source set holds every listed source of its family.
			for (const Prefix &prefix : config.masqueradeSourceCIDRs)
				if (prefix.network.family == set.family())
					fuzz::check(set.elements.contains(prefix.first()) &&
							    set.elements.contains(prefix.last()),
						    "a source CIDR is missing from its set", prefix.toString());
			continue;
		}
		// A destination set holds exactly what the longest prefix leaves unmasqueraded,
		// checked at the edges of every entry (explainDecision is a linear scan of its own).
		const auto checkEdges = [&](const std::vector<Prefix> &list) {
			for (const Prefix &prefix : list) {
				if (prefix.network.family != set.family())
					continue;
				for (const Address &address : {prefix.first(), prefix.last()})
					fuzz::check(set.elements.contains(address) ==
							    !explainDecision(config, address).masqueraded,
						    "the set disagrees with the longest prefix",
						    address.toString());
			}
		};
		checkEdges(config.nonMasqueradeCIDRs);
		checkEdges(config.masqueradeCIDRs);
	}
	const auto first = renderNftScript(ruleset), second = renderNftScript(buildRuleset(loaded->config, options));
	fuzz::check(first.has_value() == second.has_value() && (!first || *first == *second),
		    "rendering is not deterministic");
	auto again = parseConfig(text, "fuzz.yaml", flags);
	fuzz::check(again && again->config == loaded->config, "parsing is not deterministic");
	return 0;
}
