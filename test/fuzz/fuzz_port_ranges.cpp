// SPDX-License-Identifier: Apache-2.0
// Fuzz target: --to-ports. Accepted lists are sorted, disjoint, within 1-65535, and
// print back (joined with commas) to text that parses to the same list.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "ip-masq-agent/model/port_ranges.h"

using namespace ipmasq;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::string_view text(reinterpret_cast<const char *>(data), size);
	auto ranges = parsePortRanges(text);
	if (!ranges) {
		fuzz::checkOneLine(ranges.error().message);
		return 0;
	}
	std::string printed;
	uint32_t total = 0;
	for (size_t i = 0; i < ranges->size(); i++) {
		const PortRange &r = (*ranges)[i];
		fuzz::check(r.first >= 1 && r.first <= r.last, "range out of order or port 0",
			    r.toString());
		if (i > 0)
			fuzz::check((*ranges)[i - 1].last < r.first, "ranges overlap or are unsorted",
				    r.toString());
		total += r.size();
		printed += (i ? "," : "") + r.toString();
	}
	fuzz::check(total <= 65535, "more ports than exist");
	auto again = parsePortRanges(printed);
	fuzz::check(again && *again == *ranges, "printed ranges do not parse back", printed);
	return 0;
}
