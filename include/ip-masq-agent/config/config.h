// SPDX-License-Identifier: Apache-2.0
// The agent's config file: upstream's keys and defaults, parsed from YAML or JSON and validated.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/config/discovery_config.h"
#include "ip-masq-agent/config/snat_guard.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/base/error.h"

namespace ipmasq {

inline constexpr const char *kDefaultConfigPath = "/etc/config/ip-masq-agent";
inline constexpr int kDefaultCidrLimit = 64;
inline constexpr Duration kDefaultResyncInterval = std::chrono::seconds(60);
// Upstream sleeps resyncInterval between syncs, so "0s" spins a core. We never go below this.
inline constexpr Duration kMinResyncInterval = std::chrono::seconds(1);

// Limits that keep a hostile or mistaken file from costing more than its size
// (docs/configuration.md, "Limits"). A config file larger than this is refused unread:
// 16 MiB holds about a million CIDRs, 16 times what a Kubernetes ConfigMap can carry.
inline constexpr size_t kMaxConfigFileBytes = 16 * 1024 * 1024;
// The most nonMasqueradeCIDRs entries taken, whatever cidrLimit says: the bound on the
// model's memory (80 bytes an entry) and on the kernel's set. Link-local is not counted.
// masqueradeCIDRs and masqueradeSourceCIDRs have the same bound, each on its own (and
// kMaxConfigValues bounds them all together).
inline constexpr size_t kMaxNonMasqueradeCIDRs = 1000000;
// The largest cidrLimit accepted. Upstream has no maximum; kept high so that manifests
// that "turn the limit off" with a large number keep working (the list is still capped).
inline constexpr int kMaxCidrLimit = 1000000000;
// Nesting deeper than this (under an unknown key: the known keys allow one level) is refused.
inline constexpr int kMaxConfigDepth = 64;
// Values (scalars, lists, mappings) in the whole file: a full list and room for the rest.
// This bounds yaml-cpp too, whose scanner keeps ~48 bytes per block-style scalar until
// the end of the file (so 4 bytes of "- a\n" would cost 48).
inline constexpr size_t kMaxConfigValues = kMaxNonMasqueradeCIDRs + 100000;
// More anchors, or more distinct unknown keys, than this: not an ip-masq-agent config.
inline constexpr size_t kMaxConfigAnchors = 1000;
inline constexpr size_t kMaxUnknownConfigKeys = 100;
// A file's errors are all reported at once, in the order of the file; its message lists
// the first this many and counts the rest ("and N more").
inline constexpr size_t kMaxReportedConfigErrors = 20;
// An unknown key's warning suggests the known key at the smallest edit distance
// (insertions, deletions, substitutions and swaps of two adjacent letters, ignoring case)
// when that distance is at most this and less than half the unknown key's length.
inline constexpr size_t kMaxSuggestionDistance = 3;
// outputInterface and nonMasqueradeInterfaces take at most this many names each: a node
// has a few interfaces; a list this long is a mistake.
inline constexpr size_t kMaxInterfacePatterns = 1024;

// The command-line flags that change how the file is read.
struct ConfigFlags {
	bool nomasqAllReservedRanges = false;
	bool enableIpv6 = false;
	// --strict-config: an unknown key is an error (without it, a warning: upstream
	// ignores unknown keys, and its configs must load as they do there).
	bool strictKeys = false;
};

// Where a config's entries were written: its files in the order read (Origin::file indexes
// this). Not part of what the config means: it compares equal to any other, so that
// moving a line or renaming a file changes no ruleset, while Config's defaulted == still
// compares every key, including any added later.
struct ConfigFiles : std::vector<std::string> {
	using std::vector<std::string>::vector;
	bool operator==(const ConfigFiles &) const { return true; }
};

struct Config {
	// From a file these hold no `spelling`: every message about an entry is made while
	// parsing, where the text is at hand, and a million spellings would cost 30 MB.
	// Each entry's `origin` says where it was written (an index into `files`).
	std::vector<Prefix> nonMasqueradeCIDRs;
	// False: no file gave nonMasqueradeCIDRs, and the list holds the built-in defaults.
	bool nonMasqueradeCIDRsGiven = false;
	// Destinations masqueraded although a broader non-masquerade prefix covers them:
	// the longest prefix decides (policy.h).
	std::vector<Prefix> masqueradeCIDRs;
	// If it lists prefixes of a family, only sources in them are masqueraded (in that
	// family); a family with none listed is not restricted.
	std::vector<Prefix> masqueradeSourceCIDRs;
	// outputAddress and outputAddressIPv6: where traffic of that family that the agent
	// masquerades is source-NATed instead (unset: masquerade).
	std::optional<OutputAddress> outputAddress;
	std::optional<OutputAddress> outputAddressIPv6;
	// outputInterface: only traffic leaving through one of these is considered (empty:
	// all). nonMasqueradeInterfaces: traffic leaving through one of these is never
	// source-NATed. Normalized by the ruleset (duplicates and names inside wildcards go).
	std::vector<InterfacePattern> outputInterfaces;
	std::vector<InterfacePattern> nonMasqueradeInterfaces;
	int cidrLimit = kDefaultCidrLimit;
	bool masqLinkLocal = false;
	bool masqLinkLocalIPv6 = false;
	Duration resyncInterval = kDefaultResyncInterval;
	// nonMasqueradeDiscovery: where more non-masquerade ranges are found on the node
	// (discovery_config.h). Absent: nothing is discovered, upstream's semantics exactly.
	std::optional<NonMasqueradeDiscovery> nonMasqueradeDiscovery;
	// snatGuard: per source and destination, the new and open connections that the
	// agent's SNAT takes, observed or enforced (snat_guard.h). Absent: no guard.
	std::optional<SnatGuard> snatGuard;
	// The files the entries came from, in the order read; Origin::file indexes this.
	ConfigFiles files;
	// The origins of the discovered prefixes added to nonMasqueradeCIDRs (putDiscovered in
	// pod_network.h), one text per prefix; Origin::line indexes this for those.
	ConfigFiles discoveredOrigins;
	// The same prefixes by the source that has each in force (a withdrawn one held down
	// by the source that gave it last): the table's discovered-* sets, which no rule uses
	// and which tell a starting agent what each source had in force.
	RangesBySource discoveredBySource;

	// masqLinkLocal or masqLinkLocalIPv6: whether link-local of `family` is masqueraded.
	bool masqueradesLinkLocal(Family family) const
	{
		return family == Family::ipv4 ? masqLinkLocal : masqLinkLocalIPv6;
	}
	// outputAddress or outputAddressIPv6 (outputAddressKey names it).
	const std::optional<OutputAddress> &outputAddressOf(Family family) const
	{
		return family == Family::ipv4 ? outputAddress : outputAddressIPv6;
	}

	// The same meaning: where the entries were written (`files`, each Prefix's origin
	// and spelling) does not take part, so moving a line or renaming a file changes no
	// ruleset. Every other member does, a key added later included.
	bool operator==(const Config &) const = default;
};

// The key of a family's outputAddress: "outputAddress" or "outputAddressIPv6".
constexpr const char *outputAddressKey(Family family)
{
	return family == Family::ipv4 ? "outputAddress" : "outputAddressIPv6";
}

// A config that passed validation, with the non-fatal findings to log
// (unknown keys, a resyncInterval raised to the minimum).
struct LoadedConfig {
	Config config;
	std::vector<std::string> warnings;
	// Of those, the unknown keys' warnings (one per key, with the suggestion): what
	// /readyz?verbose shows and ip_masq_agent_config_unknown_keys counts.
	std::vector<std::string> unknownKeys;
	bool fromFile = false; // false: the file was absent and defaults apply
	// Whether the file set these keys: a merge of several files (config_dir.h) takes the
	// largest cidrLimit and the shortest resyncInterval of the files that give them.
	bool cidrLimitGiven = false;
	bool resyncIntervalGiven = false;
	// And nonMasqueradeDiscovery's holdDown: the merge takes the longest given.
	bool holdDownGiven = false;
};

// RFC 1918, plus the other reserved IPv4 ranges with --nomasq-all-reserved-ranges.
std::vector<Prefix> defaultNonMasqueradeCIDRs(const ConfigFlags &flags);
Config defaultConfig(const ConfigFlags &flags);

// Parse and validate config text. `source` names it in messages (usually the path).
// Keys absent keep their defaults; an empty document means all defaults. Every error of
// the text is reported at once, in the order of the file (kMaxReportedConfigErrors of
// them listed), except after a YAML syntax error, which is reported alone. Streams the
// text through yaml-cpp's event API: memory is the text plus the model, whatever the input
// (aliases are looked up, never expanded; see docs/configuration.md for the policy).
Result<LoadedConfig> parseConfig(std::string_view text, const std::string &source,
				 const ConfigFlags &flags);
// The same through yaml-cpp's own scanner only, never the fast one (plain_yaml.h): the
// reference that the tests and the fuzzer hold the fast path to.
Result<LoadedConfig> parseConfigWithYamlCpp(std::string_view text, const std::string &source,
					    const ConfigFlags &flags);

// The file's bytes, or nullopt if it does not exist (which means all defaults). The path
// (symlinks followed) must be a regular file of at most kMaxConfigFileBytes: a FIFO, a
// device, a socket or a directory is an error that says which, and never blocks.
Result<std::optional<std::string>> readConfigText(const std::string &path);

// The known key (top-level or of the nonMasqueradeDiscovery section, as `section` says)
// that an unknown `spelling` most likely means (kMaxSuggestionDistance), or nullopt.
std::optional<std::string_view> suggestKey(std::string_view spelling, bool section = false);

// One line for logs: "nonMasqueradeCIDRs=[...] cidrLimit=64 ...". Long lists are
// summarized: the first few entries and the count. nonMasqueradeCIDRs is the operator's
// list (or the defaults); the ranges the pod network adds to it (putDiscovered) are
// "discovered=[...]", after the nonMasqueradeDiscovery section.
std::string describeConfig(const Config &config);

} // namespace ipmasq
