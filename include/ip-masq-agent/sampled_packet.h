// SPDX-License-Identifier: Apache-2.0
// One packet the NAT conflict check evaluates: what the desired state samples from the
// config (policy.h) and the check consumes (other_tables/conflicts.h), without either side
// including the other's model.
#pragma once

#include <optional>
#include <string>

#include "ip-masq-agent/cidr.h"

namespace ipmasq {

// The first packet of a connection from `source` (or from any source of the family) to
// `destination`, leaving by `outputInterface` (nullopt: not known, so a rule that matches
// on it "may").
struct SampledPacket {
	Address destination;
	std::optional<Address> source = {};
	std::optional<std::string> outputInterface = {};
	// The config entry that decides it, in --explain's words: "nonMasqueradeCIDRs
	// 198.18.0.0/15 (FILE:LINE)", "built-in default 10.0.0.0/8", "no entry covers it".
	std::string entry = {};
	bool operator==(const SampledPacket &) const = default;
};

} // namespace ipmasq
