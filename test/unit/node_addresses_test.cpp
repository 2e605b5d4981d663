// SPDX-License-Identifier: Apache-2.0
// The choice of the node's address in a subnet (outputAddress: <CIDR>), over addresses
// written as data: family, containment, IPv6's unusable states, lowest first, ties.
#include <catch2/catch.hpp>

#include <algorithm>

#include "ip-masq-agent/model/node_addresses.h"

using namespace ipmasq;

namespace {

Prefix prefix(std::string_view text)
{
	auto parsed = parsePrefix(text);
	INFO(text);
	REQUIRE(parsed);
	return *parsed;
}

// "203.0.113.7/24" on `interface`, with the kernel's flags as words: "secondary",
// "tentative", "dadfailed", "deprecated".
NodeAddress nodeAddress(std::string_view cidr, std::string interface, uint32_t ifindex,
			std::initializer_list<std::string_view> flags = {})
{
	const std::string text(cidr);
	const size_t slash = text.find('/');
	auto address = parseAddress(text.substr(0, slash));
	INFO(text);
	REQUIRE(address);
	NodeAddress out;
	out.address = *address;
	out.prefixLength = static_cast<unsigned>(std::stoul(text.substr(slash + 1)));
	out.interface = std::move(interface);
	out.ifindex = ifindex;
	out.permanent = true;
	for (const std::string_view flag : flags) {
		if (flag == "secondary")
			out.secondary = true;
		else if (flag == "tentative")
			out.tentative = true;
		else if (flag == "dadfailed")
			out.dadFailed = true;
		else if (flag == "deprecated")
			out.deprecated = true;
		else
			FAIL("unknown flag " << flag);
	}
	return out;
}

// The picked address as "address dev interface", or "none".
std::string pick(std::string_view subnet, const std::vector<NodeAddress> &addresses)
{
	const std::optional<NodeAddress> picked = pickAddressIn(prefix(subnet), addresses);
	if (!picked)
		return "none";
	return picked->address.toString() + " dev " + picked->interface;
}

} // namespace

TEST_CASE("no addresses, no choice")
{
	CHECK(pick("203.0.113.0/24", {}) == "none");
	CHECK(pick("2001:db8::/64", {}) == "none");
	CHECK(pick("0.0.0.0/0", {}) == "none");
}

TEST_CASE("only addresses inside the subnet count")
{
	const std::vector<NodeAddress> addresses = {
		nodeAddress("10.0.0.5/8", "eth0", 2),
		nodeAddress("203.0.112.255/23", "eth0", 2), // just below
		nodeAddress("203.0.114.0/23", "eth0", 2), // just above
	};
	CHECK(pick("203.0.113.0/24", addresses) == "none");

	std::vector<NodeAddress> withInside = addresses;
	withInside.push_back(nodeAddress("203.0.113.255/24", "eth1", 3)); // the last address
	CHECK(pick("203.0.113.0/24", withInside) == "203.0.113.255 dev eth1");
	withInside.push_back(nodeAddress("203.0.113.0/24", "eth1", 3)); // the first
	CHECK(pick("203.0.113.0/24", withInside) == "203.0.113.0 dev eth1");
}

TEST_CASE("the subnet's family decides; the other family never matches")
{
	const std::vector<NodeAddress> addresses = {
		nodeAddress("2001:db8::7/64", "eth0", 2),
		nodeAddress("::ffff:203.0.113.7/96", "eth0", 2), // IPv4-mapped: still IPv6
		nodeAddress("203.0.113.9/24", "eth0", 2),
	};
	CHECK(pick("203.0.113.0/24", addresses) == "203.0.113.9 dev eth0");
	CHECK(pick("0.0.0.0/0", addresses) == "203.0.113.9 dev eth0");
	CHECK(pick("2001:db8::/32", addresses) == "2001:db8::7 dev eth0");
	CHECK(pick("::/0", addresses) == "::ffff:203.0.113.7 dev eth0"); // lowest IPv6
	// A numerically equal value of the other family is not inside.
	CHECK(pick("::/96", {nodeAddress("0.0.0.1/32", "eth0", 2)}) == "none");
}

TEST_CASE("the numerically lowest address wins, in any order")
{
	std::vector<NodeAddress> addresses = {
		nodeAddress("203.0.113.20/24", "eth0", 2),
		nodeAddress("203.0.113.3/24", "eth1", 3, {"secondary"}),
		nodeAddress("203.0.113.100/24", "eth2", 4),
		nodeAddress("203.0.113.4/24", "eth0", 2, {"secondary"}),
	};
	for (int rotation = 0; rotation < 4; rotation++) {
		INFO("rotation " << rotation);
		CHECK(pick("203.0.113.0/24", addresses) == "203.0.113.3 dev eth1");
		std::rotate(addresses.begin(), addresses.begin() + 1, addresses.end());
	}
	// Numerically, not as text: .3 < .20 < .100.
	CHECK(pick("203.0.113.16/28", addresses) == "203.0.113.20 dev eth0");
	CHECK(pick("2001:db8::/32", {nodeAddress("2001:db8::10/64", "eth0", 2),
				     nodeAddress("2001:db8::9/64", "eth0", 2),
				     nodeAddress("2001:db8:0:1::1/64", "eth0", 2)}) ==
	      "2001:db8::9 dev eth0");
}

TEST_CASE("IPv4: secondary and deprecated addresses are usable")
{
	CHECK(pick("203.0.113.0/24", {nodeAddress("203.0.113.7/24", "eth0", 2, {"secondary"})}) ==
	      "203.0.113.7 dev eth0");
	CHECK(pick("203.0.113.0/24", {nodeAddress("203.0.113.7/24", "eth0", 2, {"deprecated"})}) ==
	      "203.0.113.7 dev eth0");
}

TEST_CASE("IPv6: tentative, dadfailed and deprecated addresses are skipped")
{
	const std::string flag = GENERATE("tentative", "dadfailed", "deprecated");
	INFO(flag);
	const std::vector<NodeAddress> addresses = {
		nodeAddress("2001:db8::1/64", "eth0", 2, {flag}), // lowest, but not usable
		nodeAddress("2001:db8::2/64", "eth0", 2),
	};
	CHECK(pick("2001:db8::/64", addresses) == "2001:db8::2 dev eth0");
	CHECK(pick("2001:db8::1/128", addresses) == "none");
	// dadfailed comes with tentative: still skipped.
	CHECK(pick("2001:db8::/64", {nodeAddress("2001:db8::1/64", "eth0", 2,
						 {"tentative", "dadfailed"})}) == "none");
}

TEST_CASE("an address on several interfaces: the lowest ifindex")
{
	std::vector<NodeAddress> addresses = {
		nodeAddress("203.0.113.7/24", "eth1", 7),
		nodeAddress("203.0.113.7/32", "lo", 1),
		nodeAddress("203.0.113.7/24", "eth0", 3),
	};
	for (int rotation = 0; rotation < 3; rotation++) {
		INFO("rotation " << rotation);
		const auto picked = pickAddressIn(prefix("203.0.113.0/24"), addresses);
		REQUIRE(picked);
		CHECK(picked->ifindex == 1);
		CHECK(picked->interface == "lo");
		CHECK(picked->prefixLength == 32);
		std::rotate(addresses.begin(), addresses.begin() + 1, addresses.end());
	}
	// An unusable copy does not take part: the usable one on a higher ifindex wins.
	CHECK(pick("2001:db8::/64", {nodeAddress("2001:db8::7/64", "eth0", 2, {"tentative"}),
				     nodeAddress("2001:db8::7/64", "eth1", 5)}) ==
	      "2001:db8::7 dev eth1");
}

TEST_CASE("/32, /128 and /0 subnets")
{
	const std::vector<NodeAddress> addresses = {
		nodeAddress("198.51.100.9/24", "eth0", 2),
		nodeAddress("203.0.113.7/24", "eth0", 2),
		nodeAddress("2001:db8::7/64", "eth0", 2),
		nodeAddress("2001:db8::1:7/64", "eth0", 2),
	};
	CHECK(pick("203.0.113.7/32", addresses) == "203.0.113.7 dev eth0");
	CHECK(pick("203.0.113.8/32", addresses) == "none");
	CHECK(pick("2001:db8::1:7/128", addresses) == "2001:db8::1:7 dev eth0");
	CHECK(pick("2001:db8::1:8/128", addresses) == "none");
	CHECK(pick("0.0.0.0/0", addresses) == "198.51.100.9 dev eth0");
	CHECK(pick("::/0", addresses) == "2001:db8::7 dev eth0");
}

TEST_CASE("the whole entry comes back, and prints as ip does")
{
	const NodeAddress address = nodeAddress("203.0.113.7/24", "eth0", 2, {"secondary"});
	const auto picked = pickAddressIn(prefix("203.0.113.0/24"), {address});
	REQUIRE(picked);
	CHECK(*picked == address);
	CHECK(picked->toString() == "203.0.113.7/24 dev eth0 secondary");
	CHECK(nodeAddress("2001:db8::7/64", "d0", 4, {"tentative", "dadfailed"}).toString() ==
	      "2001:db8::7/64 dev d0 tentative dadfailed");
}
