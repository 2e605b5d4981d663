// SPDX-License-Identifier: Apache-2.0
// Source port ranges for --to-ports: parsing and validation.
#include "ip-masq-agent/model/port_ranges.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

std::string PortRange::toString() const
{
	return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
}

namespace {

// Plain decimal digits only (no sign, no spaces), from 1 to 65535.
std::optional<uint16_t> parsePort(std::string_view text)
{
	const std::optional<uint64_t> value = ascii::parseDecimal(text);
	if (!value || *value < 1 || *value > 65535)
		return std::nullopt;
	return static_cast<uint16_t>(*value);
}

} // namespace

Result<std::vector<PortRange>> parsePortRanges(std::string_view text)
{
	std::vector<PortRange> ranges;
	if (text.empty())
		return ranges;

	const auto invalid = [&](std::string_view item, std::string_view why) {
		return fail(fmt::format("--to-ports {}: {} {} (write ports or ranges of ports "
					"from 1 to 65535, such as \"1024-29999,32768-65535\")",
					quoted(text), quoted(item), why));
	};

	size_t start = 0;
	while (start <= text.size()) {
		size_t comma = text.find(',', start);
		if (comma == std::string_view::npos)
			comma = text.size();
		const std::string_view item = text.substr(start, comma - start);
		start = comma + 1;

		const size_t dash = item.find('-');
		const auto first = parsePort(item.substr(0, dash));
		const auto last = dash == std::string_view::npos ? first
								 : parsePort(item.substr(dash + 1));
		if (item.empty())
			return invalid(item, "is empty");
		if (!first || !last)
			return invalid(item, "is not a port or a range of ports");
		if (*first > *last)
			return invalid(item, "starts after it ends");
		ranges.push_back(PortRange{*first, *last});
	}

	std::sort(ranges.begin(), ranges.end(),
		  [](const PortRange &a, const PortRange &b) { return a.first < b.first; });
	for (size_t i = 1; i < ranges.size(); i++)
		if (ranges[i].first <= ranges[i - 1].last)
			return fail(fmt::format("--to-ports {}: ranges {} and {} overlap (list each "
						"port once)", quoted(text), ranges[i - 1].toString(),
						ranges[i].toString()));
	return ranges;
}

} // namespace ipmasq
