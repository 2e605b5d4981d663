// SPDX-License-Identifier: Apache-2.0
// Route protocols: iproute2's rt_protos names, and numbers.
#include "ip-masq-agent/model/route_protocols.h"

#include <array>
#include <utility>

#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

namespace {

// iproute2 6.1's /etc/iproute2/rt_protos, which follows the kernel's RTPROT_* numbers.
constexpr std::array<std::pair<uint8_t, std::string_view>, 22> kNames{{
	{0, "unspec"},	   {1, "redirect"}, {2, "kernel"},  {3, "boot"},	{4, "static"},
	{8, "gated"},	   {9, "ra"},	    {10, "mrt"},    {11, "zebra"},	{12, "bird"},
	{13, "dnrouted"},  {14, "xorp"},    {15, "ntk"},    {16, "dhcp"},	{18, "keepalived"},
	{42, "babel"},	   {99, "openr"},   {186, "bgp"},   {187, "isis"},	{188, "ospf"},
	{189, "rip"},	   {192, "eigrp"},
}};

} // namespace

std::optional<std::string_view> routeProtocolName(uint8_t number)
{
	for (const auto &[value, name] : kNames)
		if (value == number)
			return name;
	return std::nullopt;
}

std::string RouteProtocol::toString() const
{
	if (const auto name = routeProtocolName(number))
		return std::string(*name);
	return fmt::format("{}", number);
}

Result<RouteProtocol> parseRouteProtocol(std::string_view text)
{
	for (const auto &[value, name] : kNames)
		if (text == name)
			return RouteProtocol{value};
	// A number: decimal digits, at most 255, without a leading zero (iproute2 would read
	// "012" as octal).
	const std::optional<uint64_t> value = ascii::parseDecimal(text);
	if (value && *value <= 255 && (text[0] != '0' || text.size() == 1))
		return RouteProtocol{static_cast<uint8_t>(*value)};
	return fail(fmt::format("{} is not a route protocol: write a name that ip-route prints "
				"(bird, bgp, static, kernel, boot, zebra, ...) or a number from 0 "
				"to 255",
				quoted(text)));
}

} // namespace ipmasq
