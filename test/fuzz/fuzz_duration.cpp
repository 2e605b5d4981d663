// SPDX-License-Identifier: Apache-2.0
// Fuzz target: Go durations. Text -> parse -> format -> parse gives the same value,
// and any int64 (the first 8 bytes) formats to text that parses back exactly.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz_support.h"
#include "ip-masq-agent/base/duration.h"

using namespace ipmasq;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::string_view text(reinterpret_cast<const char *>(data), size);
	if (auto parsed = parseGoDuration(text)) {
		const std::string formatted = formatGoDuration(*parsed);
		auto again = parseGoDuration(formatted);
		fuzz::check(again && *again == *parsed, "formatGoDuration does not parse back",
			    formatted);
	} else {
		fuzz::checkOneLine(parsed.error().message);
	}

	if (size >= sizeof(int64_t)) {
		int64_t ns = 0;
		std::memcpy(&ns, data, sizeof ns);
		const std::string formatted = formatGoDuration(Duration(ns));
		auto again = parseGoDuration(formatted);
		fuzz::check(again && again->count() == ns, "an int64 does not round-trip", formatted);
	}
	return 0;
}
