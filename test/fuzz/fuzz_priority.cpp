// SPDX-License-Identifier: Apache-2.0
// Fuzz target: --priority. Accepted values are within the NAT range and print (as nft
// lists them) to text that parses back to the same number; any int32 prints safely.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz_support.h"
#include "ip-masq-agent/model/ruleset.h"

using namespace ipmasq;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::string_view text(reinterpret_cast<const char *>(data), size);
	if (auto priority = parseChainPriority(text)) {
		fuzz::check(*priority >= kMinNatPriority && *priority <= kMaxPriority,
			    "accepted priority out of range", text);
		const std::string printed = formatChainPriority(*priority);
		auto again = parseChainPriority(printed);
		fuzz::check(again && *again == *priority, "printed priority does not parse back",
			    printed);
	} else {
		fuzz::checkOneLine(priority.error().message);
	}

	if (size >= sizeof(int32_t)) {
		int32_t value = 0;
		std::memcpy(&value, data, sizeof value);
		const std::string printed = formatChainPriority(value);
		auto again = parseChainPriority(printed);
		fuzz::check(again ? *again == value : value < kMinNatPriority,
			    "an int32 priority does not round-trip", printed);
	}
	return 0;
}
