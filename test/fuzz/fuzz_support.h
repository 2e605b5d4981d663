// SPDX-License-Identifier: Apache-2.0
// Fuzz targets' shared checks: an invariant that does not hold aborts with a message,
// which libFuzzer reports as a crash and saves the input.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq::fuzz {

[[noreturn]] inline void violated(const char *what, std::string_view detail = {})
{
	std::fprintf(stderr, "invariant violated: %s %s\n", what, quoted(detail).c_str());
	std::abort();
}

inline void check(bool ok, const char *what, std::string_view detail = {})
{
	if (!ok)
		violated(what, detail);
}

// Messages that may reach a log: one line, no control bytes (user text is escaped).
inline void checkOneLine(std::string_view message)
{
	for (const char c : message)
		if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
			violated("a message holds a control byte", message);
}

// What nftables interval sets require: sorted, disjoint, non-adjacent, one family.
inline void checkIntervalSet(const IntervalSet &set)
{
	const auto &ranges = set.ranges();
	for (size_t i = 0; i < ranges.size(); i++) {
		check(ranges[i].first.family == set.family() && ranges[i].last.family == set.family(),
		      "interval set: range of another family", ranges[i].toString());
		check(ranges[i].first <= ranges[i].last, "interval set: range ends before it starts",
		      ranges[i].toString());
		check(ranges[i].last <= Address::max(set.family()), "interval set: beyond the family",
		      ranges[i].toString());
		// Disjoint and non-adjacent: a gap of at least one address before the next.
		if (i > 0)
			check(ranges[i - 1].last.value + 1 < ranges[i].first.value,
			      "interval set: ranges overlap or touch", ranges[i].toString());
	}
}

} // namespace ipmasq::fuzz
