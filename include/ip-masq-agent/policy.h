// SPDX-License-Identifier: Apache-2.0
// The destination policy: which destinations are masqueraded, decided by the longest prefix
// across nonMasqueradeCIDRs (or the built-in defaults), link-local and masqueradeCIDRs.
#pragma once

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/config.h"
#include "ip-masq-agent/error.h"

namespace ipmasq {

// Check the config as a whole, once every file of it is merged: the same prefix both
// non-masquerade and masquerade is an error naming both entries (file:line); a
// masqueradeCIDRs entry that no non-masquerade prefix covers has no effect, and gets a
// warning (appended to loaded.warnings) naming it.
Status checkConfigPolicy(LoadedConfig &loaded);

// "file:line" of an entry, or "built-in default" for one that has no file.
std::string describeOrigin(const Config &config, const Origin &origin);

} // namespace ipmasq
