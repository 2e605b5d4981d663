// SPDX-License-Identifier: Apache-2.0
// Prefixes in tests: parsed from a test's own text (a malformed one fails the test), and
// printed back as text for comparisons.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"

namespace ipmasq::test {

inline Prefix prefix(const char *text)
{
	auto parsed = parsePrefix(text);
	INFO(text << ": " << (parsed ? "" : parsed.error().message));
	REQUIRE(parsed);
	return *parsed;
}

inline std::vector<std::string> texts(const std::vector<Prefix> &prefixes)
{
	std::vector<std::string> out;
	for (const Prefix &p : prefixes)
		out.push_back(p.toString());
	return out;
}

} // namespace ipmasq::test
