// SPDX-License-Identifier: Apache-2.0
// Go duration strings: parsing and printing.
#include "ip-masq-agent/base/duration.h"

#include <array>
#include <cstdint>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

namespace {

__extension__ typedef __int128 Int128; // room to detect int64 overflow

constexpr int64_t kNs = 1, kUs = 1000, kMs = 1000 * kUs, kS = 1000 * kMs, kM = 60 * kS,
		  kH = 60 * kM;

// Longest spellings first, so "ms" is not read as "m" followed by garbage.
constexpr std::array<std::pair<std::string_view, int64_t>, 8> kUnits{{
	{"ns", kNs}, {"us", kUs}, {"\xc2\xb5s", kUs}, {"\xce\xbcs", kUs},
	{"ms", kMs}, {"s", kS}, {"m", kM}, {"h", kH},
}};

using ascii::isDigit;

// Fractional digits kept: 10^18 keeps more than nanosecond precision for every unit.
constexpr Int128 kFractionScaleLimit = static_cast<Int128>(1000000000000000000LL);

// Takes one term ("1.5h") off the front of `s` into `nanoseconds`; nullptr, or why it is
// not one (kTooLarge: its number exceeds `limit`).
constexpr const char *kTooLarge = "too large";
const char *takeTerm(std::string_view &s, Int128 limit, Int128 &nanoseconds)
{
	Int128 whole = 0;
	size_t i = 0;
	bool digits = false;
	for (; i < s.size() && isDigit(s[i]); i++) {
		whole = whole * 10 + (s[i] - '0');
		digits = true;
		if (whole > limit)
			return kTooLarge;
	}
	Int128 fraction = 0, scale = 1;
	if (i < s.size() && s[i] == '.')
		for (i++; i < s.size() && isDigit(s[i]); i++) {
			digits = true;
			// Digits past nanoseconds of an hour cannot change the result.
			if (scale < kFractionScaleLimit) {
				fraction = fraction * 10 + (s[i] - '0');
				scale *= 10;
			}
		}
	if (!digits)
		return "a number is missing";
	s.remove_prefix(i);
	for (const auto &[name, unit] : kUnits)
		if (s.substr(0, name.size()) == name &&
		    (s.size() == name.size() || isDigit(s[name.size()]) || s[name.size()] == '.')) {
			s.remove_prefix(name.size());
			nanoseconds = whole * unit + fraction * unit / scale;
			return nullptr;
		}
	return s.empty() || isDigit(s[0]) ? "a unit is missing (ns, us, ms, s, m, h)" : "unknown unit";
}

} // namespace

Result<Duration> parseGoDuration(std::string_view text)
{
	const auto invalid = [&](std::string_view why) {
		return fail(fmt::format("{} is not a duration: {} (write e.g. \"60s\", \"1m30s\", "
					"\"1.5h\" or \"300ms\")", quoted(text), why));
	};
	std::string_view s = text;
	bool negative = false;
	if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
		negative = s[0] == '-';
		s.remove_prefix(1);
	}
	if (s == "0")
		return Duration(0);
	if (s.empty())
		return invalid("it is empty");
	// Go's bounds: the magnitude may reach 2^63 for a negative duration (the minimum
	// int64), 2^63 - 1 otherwise. Every step stays far inside 128 bits: each number is
	// capped at `limit` before it is multiplied by a unit (at most 3.6e12), and the total
	// is checked after every term, so nothing can overflow.
	const Int128 limit = negative ? Int128(std::numeric_limits<int64_t>::max()) + 1
				      : Int128(std::numeric_limits<int64_t>::max());
	Int128 total = 0;
	while (!s.empty()) {
		Int128 term = 0;
		const char *why = takeTerm(s, limit, term);
		total += term;
		if (why == kTooLarge || (!why && total > limit))
			return invalid(negative ? "it is below the minimum, -2562047h47m16.854775808s"
						: "it is above the maximum, 2562047h47m16.854775807s");
		if (why)
			return invalid(why);
	}
	// total <= 2^63 when negative, so -total fits int64 exactly.
	return Duration(static_cast<int64_t>(negative ? -total : total));
}

std::string formatGoDuration(Duration duration)
{
	int64_t ns = duration.count();
	if (ns == 0)
		return "0s";
	std::string sign = ns < 0 ? "-" : "";
	// |INT64_MIN| does not fit in int64; format it through unsigned.
	uint64_t u = ns < 0 ? uint64_t(0) - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);

	const auto withFraction = [](uint64_t value, uint64_t unit, int digits) {
		std::string out = std::to_string(value / unit);
		uint64_t rest = value % unit;
		if (rest == 0)
			return out;
		std::string frac = fmt::format("{:0{}}", rest, digits);
		while (!frac.empty() && frac.back() == '0')
			frac.pop_back();
		return out + "." + frac;
	};

	if (u < static_cast<uint64_t>(kUs))
		return sign + std::to_string(u) + "ns";
	if (u < static_cast<uint64_t>(kMs))
		return sign + withFraction(u, kUs, 3) + "µs";
	if (u < static_cast<uint64_t>(kS))
		return sign + withFraction(u, kMs, 6) + "ms";

	std::string out = sign;
	if (u >= static_cast<uint64_t>(kH)) {
		out += std::to_string(u / kH) + "h";
		u %= kH;
		out += std::to_string(u / kM) + "m";
		u %= kM;
	} else if (u >= static_cast<uint64_t>(kM)) {
		out += std::to_string(u / kM) + "m";
		u %= kM;
	}
	return out + withFraction(u, kS, 9) + "s";
}

} // namespace ipmasq
