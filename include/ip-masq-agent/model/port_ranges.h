// SPDX-License-Identifier: Apache-2.0
// Source port ranges for --to-ports ("1024-29999,32768-65535").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/base/error.h"

namespace ipmasq {

struct PortRange {
	uint16_t first = 0;
	uint16_t last = 0;

	uint32_t size() const { return uint32_t(last) - first + 1; }
	std::string toString() const; // "8080" or "1024-29999"

	bool operator==(const PortRange &) const = default;
};

// Parse a comma-separated list of ports or port ranges. Each port is 1-65535, each
// range is first-last with first <= last, ranges must not overlap. The result is
// sorted ascending. An empty string is an empty list (the flag is off).
Result<std::vector<PortRange>> parsePortRanges(std::string_view text);

} // namespace ipmasq
