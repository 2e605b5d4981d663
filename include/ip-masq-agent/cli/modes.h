// SPDX-License-Identifier: Apache-2.0
// What each mode of the command line does, from the parsed options to an exit status: the
// daemon, --once and --cleanup (the kernel's), --dry-run, --explain and --snat-usage.
// main() only parses the flags and picks one.
#pragma once

#include <string>
#include <vector>

#include "ip-masq-agent/cli/options.h"

namespace ipmasq {

// --dry-run: the ruleset as nft -f input on stdout; needs no privileges.
int runDryRun(const AgentOptions &options);

// --explain: one line per address on stdout. Like --dry-run it needs no privileges; the
// comparison with the kernel is skipped, in one clause, when it cannot be made.
int runExplain(const AgentOptions &options);

// --snat-usage: the agent's ranges from the config and flags (as the daemon would make
// them here), one conntrack dump, the table on stdout.
int runSnatUsage(const AgentOptions &options);

// --cleanup, --once, or the daemon until SIGTERM: `effectiveFlags` ("--name=value") go
// into the start-up line, with the version.
int runAgent(AgentOptions options, const std::vector<std::string> &effectiveFlags);

} // namespace ipmasq
