// SPDX-License-Identifier: Apache-2.0
// Go duration strings, as upstream's resyncInterval accepts them.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "ip-masq-agent/base/duration.h"

using namespace ipmasq;
using namespace std::chrono_literals;

namespace {

Duration D(const char *text)
{
	auto d = parseGoDuration(text);
	INFO(text << ": " << (d ? "" : d.error().message));
	REQUIRE(d);
	return *d;
}

} // namespace

TEST_CASE("parseGoDuration reads Go's syntax")
{
	CHECK(D("60s") == 60s);
	CHECK(D("1m30s") == 90s);
	CHECK(D("1.5h") == 90min);
	CHECK(D("300ms") == 300ms);
	CHECK(D("0") == 0s);
	CHECK(D("0s") == 0s);
	CHECK(D("2h45m") == 165min);
	CHECK(D("1us") == 1us);
	CHECK(D("1µs") == 1us);
	CHECK(D("1μs") == 1us);
	CHECK(D("5ns") == 5ns);
	CHECK(D(".5s") == 500ms);
	CHECK(D("1.s") == 1s);
	CHECK(D("-1s") == -1s);
	CHECK(D("+2s") == 2s);
	CHECK(D("1.000000001s") == 1000000001ns);
	CHECK(D("1h1m1s1ms1us1ns") == 1h + 1min + 1s + 1ms + 1us + 1ns);
}

TEST_CASE("parseGoDuration rejects what Go rejects")
{
	for (const char *bad : {"", "60", "s", "1x", "1.5", "-", "1m 30s", " 1s", "1s ", "1e3s",
				"9999999999h", "..5s", "1S"}) {
		INFO("input: \"" << bad << "\"");
		auto d = parseGoDuration(bad);
		REQUIRE_FALSE(d);
		CHECK_THAT(d.error().message, Catch::Contains("is not a duration"));
	}
	CHECK_THAT(parseGoDuration("60").error().message, Catch::Contains("unit is missing"));
	CHECK_THAT(parseGoDuration("10d").error().message, Catch::Contains("unknown unit"));
}

TEST_CASE("formatGoDuration prints as Go's Duration.String")
{
	CHECK(formatGoDuration(60s) == "1m0s");
	CHECK(formatGoDuration(90s) == "1m30s");
	CHECK(formatGoDuration(90min) == "1h30m0s");
	CHECK(formatGoDuration(1500ms) == "1.5s");
	CHECK(formatGoDuration(300ms) == "300ms");
	CHECK(formatGoDuration(0s) == "0s");
	CHECK(formatGoDuration(-2s) == "-2s");
	CHECK(formatGoDuration(1500us) == "1.5ms");
	CHECK(formatGoDuration(7ns) == "7ns");
	for (const char *text : {"1m30s", "1.5s", "2h0m5s", "300ms"})
		CHECK(formatGoDuration(D(text)) == text);
}

TEST_CASE("the extremes of int64 parse and print exactly, as in Go")
{
	const Duration min = Duration(std::numeric_limits<int64_t>::min());
	const Duration max = Duration(std::numeric_limits<int64_t>::max());
	CHECK(formatGoDuration(min) == "-2562047h47m16.854775808s");
	CHECK(formatGoDuration(max) == "2562047h47m16.854775807s");
	// Go accepts the minimum int64 (its magnitude is one more than the maximum).
	CHECK(D("-9223372036854775808ns") == min);
	CHECK(D("-2562047h47m16.854775808s") == min);
	CHECK(D("9223372036854775807ns") == max);
	for (const Duration d : {min, max, min + 1ns, max - 1ns, Duration(-1), Duration(1)})
		CHECK(D(formatGoDuration(d).c_str()) == d);
	// One past either end is refused, and the message states the bound.
	CHECK_THAT(parseGoDuration("-9223372036854775809ns").error().message,
		   Catch::Contains("below the minimum, -2562047h47m16.854775808s"));
	CHECK_THAT(parseGoDuration("9223372036854775808ns").error().message,
		   Catch::Contains("above the maximum, 2562047h47m16.854775807s"));
	CHECK_FALSE(parseGoDuration("2562047h47m16.854775808s"));
	CHECK_FALSE(parseGoDuration("-2562047h47m16.854775809s"));
	// Many terms each below the limit still add up past it: refused, not wrapped.
	CHECK_FALSE(parseGoDuration("2562047h2562047h"));
	CHECK_FALSE(parseGoDuration("-9223372036854775808ns1ns"));
}

TEST_CASE("a duration error shows the text escaped")
{
	auto d = parseGoDuration("1x\n2");
	REQUIRE_FALSE(d);
	CHECK_THAT(d.error().message, Catch::Contains("\"1x\\n2\""));
	CHECK(d.error().message.find('\n') == std::string::npos);
}
