// SPDX-License-Identifier: Apache-2.0
// Other tables' rules and the NAT evaluator's findings in words: a rule in nft's listing
// syntax, and one outcome as "table ip nat chain POSTROUTING (priority srcnat, before the
// agent) masquerades it: rule handle 7".
#pragma once

#include <string>

#include "ip-masq-agent/nat_evaluator.h"
#include "ip-masq-agent/nat_ruleset.h"

namespace ipmasq::nat {

// The rule as `nft list ruleset` (nft 1.0.6, with xtables support) prints it, for the
// expressions this project understands: `ip daddr != 10.0.0.0/8 fib daddr type != local
// counter packets 0 bytes 0 masquerade`. What it cannot fold into a statement is printed
// in libnftnl's debug form between brackets, `[ exthdr ... ]`, so it is never mistaken
// for nft syntax. docs/design.md ("The NAT evaluator") lists where it differs from nft.
std::string ruleText(const Table &table, const Rule &rule);

// The rule `ref` names, or nullptr.
const Rule *findRule(const NatRuleset &ruleset, const RuleRef &ref);

// One outcome in a sentence, without a trailing period:
//   "table ip nat chain POSTROUTING (priority srcnat, before the agent) masquerades it:
//    rule handle 7"
//   "no chain NATs it", "the agent masquerades it",
//   "the evaluator cannot tell: <reason>"
// With `certain` false (a verdict with other possible outcomes), the action reads "may
// masquerade it", "may rewrite its source"...
std::string describeOutcome(const Outcome &outcome, bool certain = true);

} // namespace ipmasq::nat
