// SPDX-License-Identifier: Apache-2.0
// The agent's config file: upstream's keys and defaults, parsed from YAML or JSON and validated.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/duration.h"
#include "ip-masq-agent/error.h"

namespace ipmasq {

inline constexpr const char *kDefaultConfigPath = "/etc/config/ip-masq-agent";
inline constexpr int kDefaultCidrLimit = 64;
inline constexpr Duration kDefaultResyncInterval = std::chrono::seconds(60);
// Upstream sleeps resyncInterval between syncs, so "0s" spins a core. We never go below this.
inline constexpr Duration kMinResyncInterval = std::chrono::seconds(1);

// The command-line flags that change how the file is read.
struct ConfigFlags {
	bool nomasqAllReservedRanges = false;
	bool enableIpv6 = false;
};

struct Config {
	std::vector<Prefix> nonMasqueradeCIDRs;
	int cidrLimit = kDefaultCidrLimit;
	bool masqLinkLocal = false;
	bool masqLinkLocalIPv6 = false;
	Duration resyncInterval = kDefaultResyncInterval;

	bool operator==(const Config &) const = default;
};

// A config that passed validation, with the non-fatal findings to log
// (unknown keys, a resyncInterval raised to the minimum).
struct LoadedConfig {
	Config config;
	std::vector<std::string> warnings;
	bool fromFile = false; // false: the file was absent and defaults apply
};

// RFC 1918, plus the other reserved IPv4 ranges with --nomasq-all-reserved-ranges.
std::vector<Prefix> defaultNonMasqueradeCIDRs(const ConfigFlags &flags);
Config defaultConfig(const ConfigFlags &flags);

// Parse and validate config text. `source` names it in messages (usually the path).
// Keys absent keep their defaults; an empty document means all defaults.
Result<LoadedConfig> parseConfig(std::string_view text, const std::string &source,
				 const ConfigFlags &flags);

// The file's bytes, or nullopt if it does not exist (which means all defaults).
Result<std::optional<std::string>> readConfigText(const std::string &path);

// Parse what readConfigText returned: nullopt gives the defaults.
Result<LoadedConfig> parseConfigText(const std::optional<std::string> &text, const std::string &path,
				     const ConfigFlags &flags);

// Read and parse a file. A missing file means all defaults (as upstream).
Result<LoadedConfig> loadConfigFile(const std::string &path, const ConfigFlags &flags);

// One line for logs: "nonMasqueradeCIDRs=[...] cidrLimit=64 ...".
std::string describeConfig(const Config &config);

} // namespace ipmasq
