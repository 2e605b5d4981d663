// SPDX-License-Identifier: Apache-2.0
// --to-ports parsing and validation.
#include <catch2/catch.hpp>

#include "ip-masq-agent/model/port_ranges.h"

using namespace ipmasq;

TEST_CASE("parsePortRanges accepts ports and ranges, sorted")
{
	auto r = parsePortRanges("32768-65535,1024-29999");
	REQUIRE(r);
	CHECK(*r == std::vector<PortRange>{{1024, 29999}, {32768, 65535}});
	CHECK((*r)[0].size() == 28976);
	CHECK((*r)[1].toString() == "32768-65535");

	auto single = parsePortRanges("8080");
	REQUIRE(single);
	CHECK(*single == std::vector<PortRange>{{8080, 8080}});
	CHECK((*single)[0].toString() == "8080");

	CHECK(parsePortRanges("1-65535").value() == std::vector<PortRange>{{1, 65535}});
	CHECK(parsePortRanges("").value().empty());
	CHECK(parsePortRanges("100-199,200-299").value().size() == 2);
}

TEST_CASE("parsePortRanges rejects bad ranges with the flag and the reason")
{
	const auto message = [](const char *text) {
		auto r = parsePortRanges(text);
		INFO("input: " << text);
		REQUIRE_FALSE(r);
		return r.error().message;
	};
	CHECK_THAT(message("0-100"), Catch::Contains("--to-ports") && Catch::Contains("not a port"));
	CHECK_THAT(message("1-65536"), Catch::Contains("not a port"));
	CHECK_THAT(message("2000-1000"), Catch::Contains("starts after it ends"));
	CHECK_THAT(message("1000-2000,1500-2500"), Catch::Contains("overlap"));
	CHECK_THAT(message("1000,1000"), Catch::Contains("overlap"));
	CHECK_THAT(message("1000-2000,"), Catch::Contains("is empty"));
	CHECK_THAT(message("abc"), Catch::Contains("not a port"));
	CHECK_THAT(message("1-2-3"), Catch::Contains("not a port"));
	CHECK_THAT(message("-5"), Catch::Contains("not a port"));
	CHECK_THAT(message(" 80"), Catch::Contains("not a port"));
}

TEST_CASE("parsePortRanges: huge numbers are out of range, not wrapped")
{
	for (const char *text : {"4294967297", "18446744073709551617", "1-4294967297",
				 "99999999999999999999999999999999", "65536", "1-99999999999999999999"}) {
		INFO("input: " << text);
		auto r = parsePortRanges(text);
		REQUIRE_FALSE(r);
		CHECK_THAT(r.error().message, Catch::Contains("not a port"));
	}
	// Every port once, as single ports: the largest list there can be.
	std::string all;
	for (int port = 1; port <= 65535; port++)
		// Two appends, not "," + string: GCC bug 105329's bogus -Wrestrict at -O3.
		all.append(port > 1 ? "," : "").append(std::to_string(port));
	auto r = parsePortRanges(all);
	REQUIRE(r);
	CHECK(r->size() == 65535);
}

TEST_CASE("parsePortRanges: user text in the message is escaped")
{
	auto r = parsePortRanges("80,\n90x");
	REQUIRE_FALSE(r);
	CHECK_THAT(r.error().message, Catch::Contains("\"80,\\n90x\"") && Catch::Contains("\"\\n90x\""));
	CHECK(r.error().message.find('\n') == std::string::npos);
}
