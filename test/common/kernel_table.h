// SPDX-License-Identifier: Apache-2.0
// What the backend reads back of a table that holds exactly a ruleset, for the round-trip
// tests of the reverse mapping (rulesetFromKernel) and for fakes of TableBackend::readTable.
#pragma once

#include <optional>
#include <variant>

#include "ip-masq-agent/base/overloaded.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq::test {

// What TableBackend::readTable yields for a table that holds exactly `ruleset`.
inline KernelTable kernelTableOf(const Ruleset &ruleset)
{
	KernelTable out{ruleset.sets, {}};
	for (const Chain &chain : ruleset.chains)
		for (const Rule &rule : chain.rules) {
			// Which kinds carry what the sets do not: each kind must say.
			const auto snat = std::visit(
				Overloaded{
					[](const JumpIfNotLocal &) -> std::optional<KernelSnatRule> {
						return std::nullopt;
					},
					[](const ReturnIfDestinationInSet &) -> std::optional<KernelSnatRule> {
						return std::nullopt;
					},
					[](const ReturnIfOutputInterfaceInSet &)
						-> std::optional<KernelSnatRule> { return std::nullopt; },
					[](const MatchUnlistedSource &) -> std::optional<KernelSnatRule> {
						return std::nullopt;
					},
					[](const Masquerade &) -> std::optional<KernelSnatRule> {
						return std::nullopt;
					},
					[](const GuardLimit &) -> std::optional<KernelSnatRule> {
						return std::nullopt;
					},
					[&rule](const SourceNat &s) -> std::optional<KernelSnatRule> {
						return KernelSnatRule{s.family, s.to, rule.comment};
					},
				},
				rule.statement);
			if (snat)
				out.snatRules.push_back(*snat);
		}
	return out;
}

} // namespace ipmasq::test
