// SPDX-License-Identifier: Apache-2.0
// The desired state: what the reconciler makes the kernel hold, and the few settings the loop
// needs, made from the config by one pure function that every mode shares.
//
// The daemon, --once, --dry-run and --explain all turn the config into a DesiredState
// here; the reconciler receives only this value, never file bytes or config types.
#pragma once

#include <string>
#include <vector>

#include "ip-masq-agent/duration.h"
#include "ip-masq-agent/error.h"
#include "ip-masq-agent/ruleset.h"

namespace ipmasq {

// The config's types, for the functions that make a DesiredState; whoever only consumes
// one (the reconciler) needs none of their headers.
struct ConfigContent;
struct ConfigFlags;
struct ConfigLocation;
struct LoadedConfig;

struct DesiredState {
	Ruleset ruleset;
	// How often the loop looks at the config and the kernel without being told to.
	Duration resyncInterval{};
	// Where it came from, for the log: the file, the directory and its files, or the
	// built-in defaults and why.
	std::string origin;
	// The config in one line, for the log: "nonMasqueradeCIDRs=[...] cidrLimit=64 ...".
	std::string summary;
	// Findings to log that did not make it invalid (unknown keys, a raised interval).
	std::vector<std::string> warnings;
};

// A validated config (and the flags) as the desired state.
DesiredState desiredFromConfig(const LoadedConfig &loaded, const ConfigLocation &location,
			       const RulesetOptions &options);

// The config's content as the desired state: parsed, merged and checked
// (loadConfigContent), then mapped. An error says what is wrong, and where.
Result<DesiredState> desiredFromContent(const ConfigContent &content,
					const ConfigLocation &location, const ConfigFlags &flags,
					const RulesetOptions &options);

// The location read once (readConfigContent), then desiredFromContent: --once and
// --dry-run.
Result<DesiredState> desiredFromLocation(const ConfigLocation &location, const ConfigFlags &flags,
					 const RulesetOptions &options);

} // namespace ipmasq
