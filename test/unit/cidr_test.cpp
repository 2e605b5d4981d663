// SPDX-License-Identifier: Apache-2.0
// The CIDR model: parsing, alignment errors, printing and interval normalization.
#include <catch2/catch.hpp>

#include <random>

#include "ip-masq-agent/model/cidr.h"

using namespace ipmasq;

namespace {

Prefix P(const char *text)
{
	auto p = parsePrefix(text);
	INFO(text << ": " << (p ? "" : p.error().message));
	REQUIRE(p);
	return *p;
}

std::vector<std::string> texts(const IntervalSet &set)
{
	std::vector<std::string> out;
	for (const AddressRange &r : set.ranges())
		out.push_back(r.toString());
	return out;
}

} // namespace

TEST_CASE("parsePrefix accepts IPv4 and IPv6 networks")
{
	CHECK(P("10.0.0.0/8").toString() == "10.0.0.0/8");
	CHECK(P("10.0.0.0/8").network.family == Family::ipv4);
	CHECK(P("0.0.0.0/0").length == 0);
	CHECK(P("255.255.255.255/32").first() == P("255.255.255.255/32").last());
	CHECK(P("2001:DB8::/32").toString() == "2001:db8::/32");
	CHECK(P("::/0").network.family == Family::ipv6);
	CHECK(P("::1/128").toString() == "::1/128");
	CHECK(P("fe80::/10").last().toString() == "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
	CHECK(P("10.0.0.0/8").spelling == "10.0.0.0/8");
}

TEST_CASE("parsePrefix rejects what upstream rejects, and says why")
{
	const auto message = [](const char *text) {
		auto p = parsePrefix(text);
		REQUIRE_FALSE(p);
		return p.error().message;
	};
	CHECK_THAT(message("abcdefg"), Catch::Contains("\"abcdefg\"") && Catch::Contains("no \"/length\""));
	CHECK_THAT(message("10.256.0.0/16"), Catch::Contains("\"10.256.0.0\" is not a valid IPv4 address"));
	CHECK_THAT(message("10.0.0.0/33"), Catch::Contains("from 0 to 32"));
	CHECK_THAT(message("::/129"), Catch::Contains("from 0 to 128"));
	CHECK_THAT(message("10.0.0.0/"), Catch::Contains("prefix length"));
	CHECK_THAT(message("10.0.0.0/-1"), Catch::Contains("prefix length"));
	CHECK_THAT(message("10.0.0.0/8x"), Catch::Contains("prefix length"));
	CHECK_THAT(message("010.0.0.0/8"), Catch::Contains("not a valid IPv4 address"));
	CHECK_THAT(message("/8"), Catch::Contains("not a valid"));
	CHECK_THAT(message("2001:db8:::/48"), Catch::Contains("not a valid IPv6 address"));
}

TEST_CASE("parsePrefix names the aligned network when host bits are set")
{
	auto p = parsePrefix("10.0.0.1/8");
	REQUIRE_FALSE(p);
	CHECK_THAT(p.error().message, Catch::Contains("\"10.0.0.1/8\"") &&
					      Catch::Contains("host bits are set") &&
					      Catch::Contains("10.0.0.0/8"));
	auto q = parsePrefix("2001:db8::1/32");
	REQUIRE_FALSE(q);
	CHECK_THAT(q.error().message, Catch::Contains("2001:db8::/32"));
	CHECK_FALSE(parsePrefix("0.0.0.1/0"));
}

TEST_CASE("AddressRange prints prefixes, single addresses and ranges as nft does")
{
	CHECK(AddressRange{P("10.0.0.0/8").first(), P("10.0.0.0/8").last()}.toString() == "10.0.0.0/8");
	CHECK(AddressRange{P("0.0.0.0/0").first(), P("0.0.0.0/0").last()}.toString() == "0.0.0.0/0");
	CHECK(AddressRange{P("::/0").first(), P("::/0").last()}.toString() == "::/0");
	CHECK(AddressRange{P("192.0.2.7/32").first(), P("192.0.2.7/32").last()}.toString() == "192.0.2.7");
	CHECK(AddressRange{P("10.0.0.0/8").first(), P("11.0.0.0/9").last()}.toString() ==
	      "10.0.0.0-11.127.255.255");
	// Aligned size but misaligned start is a range, not a prefix.
	CHECK(AddressRange{P("10.1.0.0/16").first(), P("10.2.0.0/16").last()}.prefixLength() == -1);
}

TEST_CASE("normalization merges, drops contained prefixes and sorts")
{
	const auto set = IntervalSet::fromPrefixes(
		Family::ipv4, {P("192.168.0.0/16"), P("10.0.0.0/8"), P("10.1.0.0/16"),
			       P("11.0.0.0/8"), P("172.16.0.0/12"), P("172.32.0.0/12"),
			       P("2001:db8::/32")});
	// 172.16.0.0/12 and 172.32.0.0/12 touch: one range that is not a prefix.
	CHECK(texts(set) == std::vector<std::string>{"10.0.0.0/7", "172.16.0.0-172.47.255.255",
						     "192.168.0.0/16"});

	const auto v6 = IntervalSet::fromPrefixes(Family::ipv6, {P("2001:db8::/33"), P("2001:db8:8000::/33"),
								 P("fe80::/10"), P("10.0.0.0/8")});
	CHECK(texts(v6) == std::vector<std::string>{"2001:db8::/32", "fe80::/10"});
}

TEST_CASE("normalization at the edges of the address space")
{
	CHECK(texts(IntervalSet::fromPrefixes(Family::ipv4, {P("0.0.0.0/0"), P("10.0.0.0/8")})) ==
	      std::vector<std::string>{"0.0.0.0/0"});
	CHECK(texts(IntervalSet::fromPrefixes(Family::ipv4, {P("255.255.255.255/32"), P("0.0.0.0/32"),
							    P("255.255.255.254/32")})) ==
	      std::vector<std::string>{"0.0.0.0", "255.255.255.254/31"});
	CHECK(texts(IntervalSet::fromPrefixes(Family::ipv6, {P("::/0"), P("::1/128")})) ==
	      std::vector<std::string>{"::/0"});
	CHECK(texts(IntervalSet::fromPrefixes(Family::ipv6, {P("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"),
							    P("::/128")})) ==
	      std::vector<std::string>{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"});
	CHECK(IntervalSet::fromPrefixes(Family::ipv4, {}).empty());
}

TEST_CASE("normalization properties hold for random prefix lists")
{
	std::mt19937_64 rng(20261121);
	for (Family family : {Family::ipv4, Family::ipv6}) {
		const unsigned bits = familyBits(family);
		for (int round = 0; round < 200; round++) {
			std::vector<Prefix> prefixes;
			const int n = 1 + static_cast<int>(rng() % 40);
			for (int i = 0; i < n; i++) {
				// Concentrate prefixes in a small space so they overlap and touch.
				const unsigned length = bits - 2 - static_cast<unsigned>(rng() % 6);
				AddressValue value = AddressValue(rng() % 64) << (bits - length);
				Prefix p;
				p.network = Address{family, value};
				p.length = length;
				prefixes.push_back(p);
			}
			const IntervalSet set = IntervalSet::fromPrefixes(family, prefixes);
			const auto &r = set.ranges();
			for (size_t i = 0; i < r.size(); i++) {
				REQUIRE(r[i].first <= r[i].last);
				if (i > 0) // sorted, disjoint and not adjacent
					REQUIRE(r[i - 1].last.value + 1 < r[i].first.value);
			}
			// Same coverage: every probe point is in the set iff it is in some prefix.
			for (int probe = 0; probe < 500; probe++) {
				Address a{family, AddressValue(rng() % (66u << 6)) << (bits - 12)};
				a.value += rng() % 8;
				bool inAny = false;
				for (const Prefix &p : prefixes)
					inAny |= p.first() <= a && a <= p.last();
				REQUIRE(set.contains(a) == inAny);
			}
			for (const Prefix &p : prefixes) {
				REQUIRE(set.contains(p.first()));
				REQUIRE(set.contains(p.last()));
			}
			// Idempotent: normalizing the output again changes nothing.
			REQUIRE(IntervalSet::fromRanges(family, r) == set);
		}
	}
}

TEST_CASE("difference removes one set's addresses from another")
{
	const auto all = IntervalSet::fromPrefixes(Family::ipv4, {P("10.0.0.0/8"), P("192.168.0.0/16")});
	const auto cut = IntervalSet::fromPrefixes(Family::ipv4, {P("10.1.0.0/16"), P("192.168.0.0/16"),
								  P("8.0.0.0/8")});
	CHECK(texts(all.difference(cut)) ==
	      std::vector<std::string>{"10.0.0.0/16", "10.2.0.0-10.255.255.255"});
	CHECK(all.difference(IntervalSet(Family::ipv4)) == all);
	CHECK(all.difference(all).empty());
}

TEST_CASE("addresses print canonically and as network-order bytes")
{
	CHECK(P("192.0.2.0/24").network.bytes() == std::vector<uint8_t>{192, 0, 2, 0});
	CHECK(P("2001:db8::/32").network.bytes().size() == 16);
	CHECK(P("2001:0db8:0000:0000:0000:0000:0000:0000/32").network.toString() == "2001:db8::");
	CHECK(Address::max(Family::ipv4).toString() == "255.255.255.255");
}

namespace {

std::vector<std::string> prefixTexts(const std::vector<Prefix> &prefixes)
{
	std::vector<std::string> out;
	for (const Prefix &p : prefixes)
		out.push_back(p.toString());
	return out;
}

AddressRange range(const char *first, const char *last)
{
	auto a = parseAddress(first);
	auto b = parseAddress(last);
	REQUIRE(a);
	REQUIRE(b);
	return AddressRange{*a, *b};
}

} // namespace

TEST_CASE("a range as the fewest prefixes again, to the edges of the address space")
{
	using S = std::vector<std::string>;
	CHECK(prefixTexts(prefixesOf(range("198.18.1.0", "198.18.1.127"))) == S{"198.18.1.0/25"});
	CHECK(prefixTexts(prefixesOf(range("198.18.1.64", "198.18.2.255"))) ==
	      S{"198.18.1.64/26", "198.18.1.128/25", "198.18.2.0/24"});
	CHECK(prefixTexts(prefixesOf(range("192.0.2.7", "192.0.2.7"))) == S{"192.0.2.7/32"});
	CHECK(prefixTexts(prefixesOf(range("0.0.0.0", "255.255.255.255"))) == S{"0.0.0.0/0"});
	CHECK(prefixTexts(prefixesOf(range("255.255.255.254", "255.255.255.255"))) == S{"255.255.255.254/31"});
	CHECK(prefixTexts(prefixesOf(range("0.0.0.1", "0.0.0.2"))) == S{"0.0.0.1/32", "0.0.0.2/32"});
	CHECK(prefixTexts(prefixesOf(range("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))) == S{"::/0"});
	CHECK(prefixTexts(prefixesOf(range("::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))).size() == 128);
	// The worst case: two prefixes per bit, and they hold exactly the range.
	const auto worst = prefixesOf(range("0.0.0.1", "255.255.255.254"));
	CHECK(worst.size() == 62);
	CHECK(IntervalSet::fromPrefixes(Family::ipv4, worst).ranges() ==
	      std::vector<AddressRange>{range("0.0.0.1", "255.255.255.254")});
}

TEST_CASE("a set holds a range when one of its ranges does")
{
	const IntervalSet set = IntervalSet::fromPrefixes(Family::ipv4, {P("198.18.1.0/26"), P("198.18.1.64/26"),
									 P("198.18.3.0/24")});
	CHECK(set.contains(range("198.18.1.0", "198.18.1.127")));
	CHECK(set.contains(range("198.18.3.7", "198.18.3.9")));
	CHECK_FALSE(set.contains(range("198.18.1.0", "198.18.1.128")));
	CHECK_FALSE(set.contains(range("198.18.2.255", "198.18.3.0")));
	CHECK_FALSE(set.contains(range("198.51.100.1", "198.51.100.1")));
	CHECK_FALSE(set.contains(range("2001:db8::", "2001:db8::")));
}
