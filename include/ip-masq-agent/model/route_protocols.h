// SPDX-License-Identifier: Apache-2.0
// Route protocol numbers (rtm_protocol) and the names iproute2's rt_protos gives them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ip-masq-agent/base/error.h"

namespace ipmasq {

// A route's protocol: who installed it (bird, kernel, static, ...), 0 to 255.
struct RouteProtocol {
	uint8_t number = 0;

	// The name iproute2 prints ("bird"), or the number as text ("77").
	std::string toString() const;
	bool operator==(const RouteProtocol &) const = default;
	auto operator<=>(const RouteProtocol &) const = default;
};

// The name of a protocol number in iproute2's rt_protos, or nullopt.
std::optional<std::string_view> routeProtocolName(uint8_t number);

// "bird", "bgp", "static", ... (the names of iproute2's rt_protos, as ip-route prints
// them, case-sensitive as iproute2 reads them) or a number from 0 to 255. The table is
// built in, not read from /etc/iproute2: the config means the same on every node. Names
// that a node adds in rt_protos.d are not known: write their numbers.
Result<RouteProtocol> parseRouteProtocol(std::string_view text);

} // namespace ipmasq
