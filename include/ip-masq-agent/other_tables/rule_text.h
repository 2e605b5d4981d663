// SPDX-License-Identifier: Apache-2.0
// The node's rules and the evaluator's findings in words: a decoded rule in nft's listing
// syntax, and one outcome as "table ip nat chain POSTROUTING (priority srcnat, before the
// agent) masquerades it: rule handle 7".
#pragma once

#include <string>

#include "ip-masq-agent/other_tables/evaluator.h"
#include "ip-masq-agent/other_tables/model.h"

namespace ipmasq::nat {

// The rule as `nft list ruleset` (nft 1.0.6, with xtables support) prints it:
// `ip daddr != 10.0.0.0/8 fib daddr type != local counter packets 0 bytes 0 masquerade`.
// What has no nft syntax here is printed between brackets, `[ tproxy ]`, so it is never
// mistaken for nft syntax. docs/design.md ("Rules as text") lists where it differs from nft.
std::string ruleText(const Table &table, const Rule &rule);

// The table the reference names (`agent` for the agent's own), the rule in it, or nullptr.
const Table *findTable(const NatRuleset &ruleset, const Table *agent, TableFamily family,
		       const std::string &name);
const Rule *findRule(const Table &table, const RuleRef &ref);

// One outcome in a sentence, without a trailing period:
//   "table ip nat chain POSTROUTING (priority srcnat, before the agent) masquerades it:
//    rule handle 7", "no chain NATs it", "the agent masquerades it",
//   "the evaluator cannot tell: <reason>"
// With `certain` false (a verdict with other possible outcomes) the action reads "may
// masquerade it", "may rewrite its source"...
std::string describeOutcome(const Outcome &outcome, bool certain = true);

} // namespace ipmasq::nat
