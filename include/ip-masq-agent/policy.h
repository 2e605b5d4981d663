// SPDX-License-Identifier: Apache-2.0
// The destination policy: which destinations are masqueraded, decided by the longest prefix
// across nonMasqueradeCIDRs (or the built-in defaults), link-local and masqueradeCIDRs.
#pragma once

#include <string>

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/config.h"
#include "ip-masq-agent/error.h"

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

} // namespace ipmasq
