// SPDX-License-Identifier: Apache-2.0
// Config + flags -> the desired ruleset, and back from the kernel's sets: both directions of
// the mapping in one place, so that no shape can be added to one of them only.
//
// The forward direction (buildRuleset) is the pure function at the heart of the agent. The
// reverse one (rulesetFromKernel) serves adoption: started with a bad config, the
// daemon rebuilds the ruleset its flags would have made from what the kernel holds. A
// round-trip test over every shared ruleset case pins the two together.
#pragma once

#include <optional>
#include <vector>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

// The desired table for a config, the flags and this node's subnet addresses.
Ruleset buildRuleset(const Config &config, const RulesetOptions &options,
		     const SubnetAddresses &subnet = {});

// The ruleset these options build that holds exactly what `kernel` says (the agent's
// table as the kernel holds it: its sets, comments included, and its SNAT rules): what
// the sets' names and comments say of the config that made them (which families restrict
// sources, which destination sets hold link-local or had exceptions cut out, which
// interface keys are used), what the SNAT rules' targets and comments say of
// outputAddress, with the kernel's elements. nullopt when no config could have made
// these sets with these options: a set missing, one too many, or a comment the agent does
// not write. The caller confirms the candidate against the whole table with
// TableBackend::check().
std::optional<Ruleset> rulesetFromKernel(const RulesetOptions &options, const KernelTable &kernel);

// What the table's discovered-* sets (one per nonMasqueradeDiscovery source and family,
// which no rule uses) hold, per source, as prefixes again: what each source had in force
// when the agent that wrote them last ran. The pod network keeps them across a restart
// (pod_network.h). At most kMaxDiscoveredPrefixes in all.
RangesBySource discoveredInKernel(const KernelTable &kernel);

// Names valid, and everything the ruleset built from these options carries fits what
// nft and the kernel accept: no comment longer than kMaxNftCommentLength (the chain
// name is part of a rule comment), the priority in range.
Status validateRulesetOptions(const RulesetOptions &options);

} // namespace ipmasq
