// SPDX-License-Identifier: Apache-2.0
// Fuzz target: CIDR parse <-> format round trip, and IntervalSet normalization.
// Each line of the input is a CIDR; the valid ones also form an interval set.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "ip-masq-agent/model/cidr.h"

using namespace ipmasq;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	std::string_view text(reinterpret_cast<const char *>(data), size);
	std::vector<Prefix> byFamily[2];
	while (!text.empty()) {
		const size_t end = std::min(text.find('\n'), text.size());
		const std::string_view line = text.substr(0, end);
		text.remove_prefix(std::min(end + 1, text.size()));

		auto prefix = parsePrefix(line);
		if (!prefix) {
			fuzz::checkOneLine(prefix.error().message);
			continue;
		}
		// inet_pton reads up to a NUL: text after one must not be silently dropped.
		for (const char c : line)
			fuzz::check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f,
				    "a CIDR with a control byte was accepted", line);
		fuzz::check(prefix->length <= familyBits(prefix->network.family),
			    "prefix length beyond the family", line);
		fuzz::check(prefix->first() <= prefix->last(), "prefix ends before it starts", line);
		const std::string canonical = prefix->toString();
		auto reparsed = parsePrefix(canonical);
		fuzz::check(reparsed && *reparsed == *prefix && reparsed->toString() == canonical,
			    "toString does not parse back to the same prefix", canonical);
		const auto family = prefix->network.family;
		fuzz::check(prefix->network.toString() == canonical.substr(0, canonical.find('/')),
			    "address text differs from the prefix text", canonical);
		byFamily[family == Family::ipv6].push_back(*prefix);
	}
	for (const Family family : {Family::ipv4, Family::ipv6}) {
		const auto &prefixes = byFamily[family == Family::ipv6];
		const IntervalSet set = IntervalSet::fromPrefixes(family, prefixes);
		fuzz::checkIntervalSet(set);
		for (const Prefix &p : prefixes)
			fuzz::check(set.contains(p.first()) && set.contains(p.last()),
				    "a prefix is missing from its set", p.toString());
		// Normalizing twice changes nothing; the difference with itself is empty.
		fuzz::check(IntervalSet::fromRanges(family, set.ranges()) == set,
			    "normalization is not idempotent");
		fuzz::check(set.difference(set).empty(), "a set minus itself is not empty");
		for (const AddressRange &range : set.ranges())
			fuzz::checkOneLine(range.toString());
	}
	return 0;
}
