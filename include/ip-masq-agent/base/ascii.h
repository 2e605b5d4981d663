// SPDX-License-Identifier: Apache-2.0
// ASCII character classes and decimal numbers for the parsers: independent of the locale,
// unlike <cctype>.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ipmasq::ascii {

constexpr bool isDigit(char c) { return c >= '0' && c <= '9'; }
constexpr bool isLower(char c) { return c >= 'a' && c <= 'z'; }
constexpr bool isUpper(char c) { return c >= 'A' && c <= 'Z'; }
constexpr bool isLetter(char c) { return isLower(c) || isUpper(c); }

// All of `text` as a decimal number: digits only (no sign, no space, not empty). A value
// past 2^64 - 1 is nullopt, never wrapped, so a caller only checks its own bound.
inline std::optional<uint64_t> parseDecimal(std::string_view text)
{
	uint64_t value = 0;
	const char *end = text.data() + text.size();
	const auto [at, ec] = std::from_chars(text.data(), end, value);
	if (text.empty() || ec != std::errc() || at != end)
		return std::nullopt;
	return value;
}

} // namespace ipmasq::ascii
