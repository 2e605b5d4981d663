// SPDX-License-Identifier: Apache-2.0
// Escaping of untrusted text: no value can break a log line or forge another.
#include <catch2/catch.hpp>

#include <iomanip> // std::quoted, which a call with a std::string must never reach
#include <string>

#include "ip-masq-agent/base/escape.h"

using namespace ipmasq;

TEST_CASE("quoted: printable ASCII passes, quotes and backslashes are escaped")
{
	CHECK(quoted("10.0.0.0/8") == "\"10.0.0.0/8\"");
	CHECK(quoted("") == "\"\"");
	CHECK(quoted("a\"b\\c") == "\"a\\\"b\\\\c\"");
}

TEST_CASE("quoted: a std::string argument is escaped by ours, never by std::quoted (found by ADL)")
{
	const std::string value = "a\nb";
	const std::string text = quoted(value);
	CHECK(text == "\"a\\nb\"");
}

TEST_CASE("escaped: control bytes, newlines and non-ASCII bytes become escapes")
{
	const std::string forged = "10.0.0.0/8\n2026-01-01T00:00:00Z info: all good";
	const std::string out = escaped(forged);
	CHECK(out.find('\n') == std::string::npos);
	CHECK(out == "10.0.0.0/8\\n2026-01-01T00:00:00Z info: all good");
	CHECK(escaped(std::string("\r\t\x1b[31m\x7f\xff\0", 10)) == "\\r\\t\\x1b[31m\\x7f\\xff\\x00");
	for (int byte = 0; byte < 256; byte++) {
		const std::string out1 = escaped(std::string(1, static_cast<char>(byte)));
		for (const char c : out1)
			REQUIRE((c >= 0x20 && c < 0x7f));
	}
}
