// SPDX-License-Identifier: Apache-2.0
// The destination policy: which destinations are masqueraded, decided by the longest prefix
// across nonMasqueradeCIDRs (or the built-in defaults), link-local and masqueradeCIDRs.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/sampled_packet.h"

namespace ipmasq {

// Link-local (169.254.0.0/16, fe80::/10): non-masquerade unless masqLinkLocal(IPv6).
Prefix linkLocalPrefix(Family family);

// Check the config as a whole, once every file of it is merged: the same prefix both
// non-masquerade and masquerade is an error naming both entries (file:line); a
// masqueradeCIDRs entry that no non-masquerade prefix covers has no effect, and gets a
// warning (appended to loaded.warnings) naming it.
Status checkConfigPolicy(LoadedConfig &loaded);

// "file:line" of an entry, or "built-in default" for one that has no file.
std::string describeOrigin(const Config &config, const Origin &origin);

// The destinations of `family` that are not masqueraded: every address whose longest
// matching prefix, among nonMasqueradeCIDRs (the defaults when no file gave the key),
// link-local (unless masqLinkLocal / masqLinkLocalIPv6) and masqueradeCIDRs, is a
// non-masquerade one. On a tie (the same prefix in both), the masqueradeCIDRs entry wins:
// an operator's exception beats a built-in entry (a default or link-local), and two
// explicit entries are refused by checkConfigPolicy. Without masqueradeCIDRs this is the
// union of the non-masquerade prefixes. O(n log n), no recursion: prefixes either nest or
// are disjoint, so one sorted sweep with a stack of the enclosing prefixes decides.
IntervalSet resolveNonMasquerade(const Config &config, Family family);

// The sources of `family` that masqueradeSourceCIDRs lists, normalized; empty when it
// lists none of that family (then no source of that family is restricted).
IntervalSet masqueradeSources(const Config &config, Family family);

// Of `prefixes`, the longest that contains `address` (the first listed among equals), or
// nullptr.
const Prefix *longestCovering(const std::vector<Prefix> &prefixes, const Address &address);

// One entry that takes part in the destination decision.
struct ExplainEntry {
	enum class Kind {
		nonMasquerade, // nonMasqueradeCIDRs, or a built-in default when none is given
		linkLocal,     // 169.254.0.0/16 or fe80::/10, unless masqLinkLocal(IPv6)
		masquerade,    // masqueradeCIDRs
	};
	Kind kind;
	Prefix prefix;
};

// The longest prefix covering a destination decides; a masqueradeCIDRs entry wins a tie
// (only a built-in entry can tie with one: the same prefix in both lists is refused).
struct ExplainDecision {
	bool masqueraded = true;
	std::optional<ExplainEntry> decidedBy; // nullopt: no entry covers it (masqueraded)
	// The most specific entry of the other verdict that also covers it, if any.
	std::optional<ExplainEntry> overrides;
};

// The entries of the config that decide one address of a family the agent handles (no
// local-address or source check): what --explain and the samples name. --explain's verdict
// is the desired ruleset's; this, a linear scan apart from resolveNonMasquerade's sweep, is
// also what the tests and fuzz_config check that sweep against.
ExplainDecision explainDecision(const Config &config, const Address &destination);

// An entry in --explain's words: "nonMasqueradeCIDRs 198.18.0.0/15 (FILE:LINE)",
// "built-in default 10.0.0.0/8", "link-local 169.254.0.0/16", "masqueradeCIDRs ...".
std::string describeEntry(const Config &config, const ExplainEntry &entry);

// The entry that decides, described, or "no entry covers it" (masqueraded).
std::string describeDecidingEntry(const Config &config, const ExplainDecision &decision);

struct SampleLimits {
	// Destinations of each family: the first address of each non-masquerade interval and
	// of each masqueraded range between them; beyond this many, evenly spaced ones.
	size_t maxDestinations = 64;
	// Sources of each family: the first address of each masqueradeSourceCIDRs interval.
	size_t maxSources = 8;
};

// Names the entry that decides any destination as --explain does
// (describeDecidingEntry(config, explainDecision(config, destination))), without the
// config: its destination entries are kept apart, sorted (16 bytes an IPv4 entry, 32 an
// IPv6 one), and a look-up is one binary search per prefix length. The NAT conflict check
// names with it the addresses it samples from other tables' rules.
std::shared_ptr<const DecidingEntries> decidingEntries(const Config &config);

// The packets the NAT conflict check looks at, for the families the agent handles (IPv6
// with enableIpv6): at most maxDestinations * maxSources per family, plus link-local's
// interval (the entry the agent adds itself, which other components most often leave out).
std::vector<SampledPacket> samplePackets(const Config &config, bool enableIpv6,
					 const SampleLimits &limits = {});

} // namespace ipmasq
