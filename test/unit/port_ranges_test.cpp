// SPDX-License-Identifier: Apache-2.0
// --to-ports parsing and validation.
#include <catch2/catch.hpp>

#include "ip-masq-agent/port_ranges.h"

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
