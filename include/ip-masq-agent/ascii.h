// SPDX-License-Identifier: Apache-2.0
// ASCII character classes for the parsers: independent of the locale, unlike <cctype>.
#pragma once

namespace ipmasq::ascii {

constexpr bool isDigit(char c) { return c >= '0' && c <= '9'; }
constexpr bool isLower(char c) { return c >= 'a' && c <= 'z'; }
constexpr bool isUpper(char c) { return c >= 'A' && c <= 'Z'; }
constexpr bool isLetter(char c) { return isLower(c) || isUpper(c); }

} // namespace ipmasq::ascii
