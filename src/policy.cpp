// SPDX-License-Identifier: Apache-2.0
// The destination policy: longest-prefix resolution of non-masquerade and masquerade entries.
#include "ip-masq-agent/policy.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/escape.h"

namespace ipmasq {

std::string describeOrigin(const Config &config, const Origin &origin)
{
	if (origin.builtIn() || origin.file >= config.files.size())
		return "built-in default";
	return fmt::format("{}:{}", escaped(config.files[origin.file]), origin.line);
}

namespace {

bool prefixLess(const Prefix &a, const Prefix &b)
{
	return std::tie(a.network, a.length) < std::tie(b.network, b.length);
}

// The same prefix listed as non-masquerade and as masquerade: no rule could say which
// the operator meant.
Status checkNoPrefixInBothLists(const Config &config)
{
	std::vector<const Prefix *> masquerade;
	masquerade.reserve(config.masqueradeCIDRs.size());
	for (const Prefix &prefix : config.masqueradeCIDRs)
		masquerade.push_back(&prefix);
	std::sort(masquerade.begin(), masquerade.end(),
		  [](const Prefix *a, const Prefix *b) { return prefixLess(*a, *b); });
	for (const Prefix &prefix : config.nonMasqueradeCIDRs) {
		const auto found = std::lower_bound(
			masquerade.begin(), masquerade.end(), &prefix,
			[](const Prefix *a, const Prefix *b) { return prefixLess(*a, *b); });
		if (found == masquerade.end() || !(**found == prefix))
			continue;
		return fail(fmt::format("{}: masqueradeCIDRs: {} is also listed in nonMasqueradeCIDRs "
					"at {}: a destination cannot be both; remove one of them",
					describeOrigin(config, (*found)->origin), prefix.toString(),
					describeOrigin(config, prefix.origin)));
	}
	return {};
}

} // namespace

Status checkConfigPolicy(LoadedConfig &loaded)
{
	return checkNoPrefixInBothLists(loaded.config);
}

} // namespace ipmasq
