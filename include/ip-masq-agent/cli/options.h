// SPDX-License-Identifier: Apache-2.0
// Command-line flags: upstream's names, defaults and Go spellings (-flag=value, --flag value).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/model/sampled_packet.h"

namespace ipmasq {

struct AgentOptions {
	// --config=FILE (the default) or --config-dir=DIR; the two exclude each other.
	ConfigLocation config;
	ConfigFlags configFlags;
	RulesetOptions ruleset;
	bool dryRun = false;
	bool once = false;    // apply once and exit; the exit status says whether it worked
	bool cleanup = false; // delete the agent's table (and nothing else) and exit
	bool snatUsage = false; // print the SNAT usage toward the busiest destinations, exit
	int verbosity = 0;
	log::Format loggingFormat = log::Format::text; // --logging-format=text|json
	std::string healthAddr; // "" turns the HTTP endpoint off
	std::vector<Address> explain;        // --explain: say why each is (not) masqueraded, exit
	std::vector<Address> explainSources; // --explain-source: sources for --explain
	std::string explainInterface;        // --explain-interface: the output interface, or ""
	std::optional<PortProtocol> explainPort; // --explain-port: 443/tcp, or any protocol and port
};

struct CommandLine {
	enum class Action { run, help, version };
	Action action = Action::run;
	AgentOptions options;
	std::string helpText;
	// Effective flags as "--name=value", for the start-up log (as upstream logs FLAG: lines).
	std::vector<std::string> effectiveFlags;
	std::vector<std::string> warnings;
};

// Parse argv. Errors (unknown flags, bad values) name the flag and the fix.
Result<CommandLine> parseCommandLine(int argc, const char *const argv[]);

} // namespace ipmasq
