// SPDX-License-Identifier: Apache-2.0
// What the SNAT guard counted, as a person reads it: the sources over each limit toward
// each destination (the kernel's over sets, read back), the most attempts first.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

// The most keys listed per limit; a line counts the rest.
inline constexpr size_t kTopGuardOver = 20;

// The guard's part of --snat-usage: for each limit of `desired`'s guard (its GuardLimit
// rules: the limit, the mode), the keys of `over` that went over it, the most attempts
// first, at most `top`. "" when `desired` has no guard.
// `fill`: how full each of its dynamic sets is (a line each, "full" when it is); an over
// set's count there is how many keys are over its limit, when `over` holds only the top
// ones (NetlinkBackend::readGuard).
std::string guardOverText(const Ruleset &desired, std::vector<GuardOverKey> over,
			  const std::vector<DynamicSetFill> &fill = {}, size_t top = kTopGuardOver);

// --explain's clause for `destination`: whether the guard of `desired` limits connections
// the agent source-NATs toward it (its limits and mode), whether each of `sources` (those of
// its family) is exempt, and what `over` (nullopt: the over sets could not be read, `why`)
// says of it: the keys over a limit toward it, the most attempts first, at most 3. "" when
// `desired` has no guard of that family.
std::string guardExplainClause(const Ruleset &desired, const Address &destination,
			       const std::vector<Address> &sources,
			       const std::optional<std::vector<GuardOverKey>> &over, const std::string &why);

} // namespace ipmasq
