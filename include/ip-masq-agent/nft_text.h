// SPDX-License-Identifier: Apache-2.0
// The dry-run renderer: the desired ruleset as `nft -f` input, in nft's own listing syntax.
#pragma once

#include <string>
#include <vector>

#include "ip-masq-agent/ruleset.h"

namespace ipmasq {

// One statement as `nft list` prints it, e.g. "ip daddr @nomasq-v4 return".
std::string renderStatement(const Statement &statement);

// A rule without its comment: the statement, with the rule's counter before its verdict
// or NAT ("ip daddr @nomasq-v4 counter name \"nomasq-dst-v4\" return").
std::string renderRuleBody(const Rule &rule);

// The table block exactly as `nft list table inet NAME` prints it, except that set
// elements are one per line (nft wraps them by width).
std::string renderTable(const Ruleset &ruleset);

// A complete `nft -f` script that atomically replaces the agent's table and nothing
// else: it adds the table (a no-op if it exists), deletes it, and defines it anew,
// all in one transaction. `headerComments` become leading "# " lines.
std::string renderNftScript(const Ruleset &ruleset,
			    const std::vector<std::string> &headerComments = {});

} // namespace ipmasq
