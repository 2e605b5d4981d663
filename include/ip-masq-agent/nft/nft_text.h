// SPDX-License-Identifier: Apache-2.0
// The dry-run renderer: the desired ruleset as `nft -f` input, in nft's own listing syntax.
#pragma once

#include <string>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

// The table block exactly as `nft list table inet NAME` prints it, except that set
// elements are one per line (nft wraps them by width). The rules are encoded as the agent
// sends them and read back through the codec (netlink/objects.h, EncodedRule::text), so
// what the dry run shows is what would be sent; an error is the encoder's (a comment too
// long for nft, say).
Result<std::string> renderTable(const Ruleset &ruleset);

// A complete `nft -f` script that atomically replaces the agent's table and nothing
// else: it adds the table (a no-op if it exists), deletes it, and defines it anew,
// all in one transaction. `headerComments` become leading "# " lines.
Result<std::string> renderNftScript(const Ruleset &ruleset,
				    const std::vector<std::string> &headerComments = {});

} // namespace ipmasq
