// SPDX-License-Identifier: Apache-2.0
// Go duration strings, as upstream's resyncInterval accepts them.
#include <catch2/catch.hpp>

#include "ip-masq-agent/duration.h"

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
