// SPDX-License-Identifier: Apache-2.0
// NodeAddressView: one read, then the announced changes in order; what is watched, what is
// kept, and when it is stale.
#include <catch2/catch.hpp>

#include <algorithm>

#include "ip-masq-agent/node/node_address_view.h"

using namespace ipmasq;

namespace {

// "203.0.113.7/24" on interface `ifindex`; `tentative` for IPv6 under duplicate address
// detection.
NodeAddress address(std::string_view cidr, uint32_t ifindex, bool tentative = false)
{
	const std::string text(cidr);
	const size_t slash = text.find('/');
	auto parsed = parseAddress(text.substr(0, slash));
	INFO(text);
	REQUIRE(parsed);
	NodeAddress out;
	out.address = *parsed;
	out.prefixLength = static_cast<unsigned>(std::stoul(text.substr(slash + 1)));
	out.ifindex = ifindex;
	out.peer = out.address;
	out.tentative = tentative;
	out.permanent = true;
	return out;
}

AddressChange added(NodeAddress a)
{
	return AddressChange{AddressChange::Kind::addedOrChanged, std::move(a)};
}

AddressChange removed(NodeAddress a)
{
	return AddressChange{AddressChange::Kind::removed, std::move(a)};
}

// The view's addresses as "address/len@ifindex[ tentative]" lines, sorted.
std::vector<std::string> lines(const NodeAddressView &view)
{
	const NodeAddresses addresses = view.addresses();
	REQUIRE(addresses.known());
	std::vector<std::string> out;
	for (const NodeAddress &a : addresses.addresses)
		out.push_back(a.address.toString() + "/" + std::to_string(a.prefixLength) + "@" +
			      std::to_string(a.ifindex) + (a.tentative ? " tentative" : ""));
	std::sort(out.begin(), out.end());
	return out;
}

// The outputAddress subnets, as the daemon watches them.
const std::vector<Prefix> &watched()
{
	static const std::vector<Prefix> subnets = {parsePrefix("198.18.1.0/24").value_or(Prefix{}),
						    parsePrefix("2001:db8:98::/64").value_or(Prefix{})};
	return subnets;
}

} // namespace

TEST_CASE("view: unknown until read; changes before the first read are left to it")
{
	NodeAddressView view;
	CHECK(view.state() == NodeAddressView::State::unknown);
	CHECK_FALSE(view.addresses().known());
	CHECK_FALSE(view.apply(added(address("198.18.1.5/24", 2)), watched()));
	CHECK_FALSE(view.addresses().known());
	view.replace({address("198.18.1.5/24", 2)});
	CHECK(view.state() == NodeAddressView::State::current);
	CHECK(lines(view) == std::vector<std::string>{"198.18.1.5/24@2"});
}

TEST_CASE("view: a change says whether it touched a watched subnet")
{
	NodeAddressView view;
	view.replace({address("198.18.1.5/24", 2), address("10.0.0.1/8", 3)});
	CHECK_FALSE(view.apply(added(address("198.18.2.7/24", 9)), watched())); // next door
	CHECK_FALSE(view.apply(removed(address("10.0.0.1/8", 3)), watched()));
	CHECK_FALSE(view.apply(added(address("2001:db8:97::1/64", 9)), watched()));
	CHECK(view.apply(added(address("198.18.1.9/24", 9)), watched()));
	CHECK(view.apply(added(address("2001:db8:98::9/64", 9, true)), watched()));
	CHECK(view.apply(removed(address("198.18.1.5/24", 2)), watched()));
	// The family counts: an IPv4 subnet does not watch IPv6 addresses.
	const auto mapped = parseAddress("::ffff:198.18.1.1");
	REQUIRE(mapped);
	CHECK_FALSE(NodeAddressView::inAny(*mapped, watched()));
	CHECK(lines(view) == std::vector<std::string>{"198.18.1.9/24@9", "198.18.2.7/24@9",
						      "2001:db8:97::1/64@9",
						      "2001:db8:98::9/64@9 tentative"});
}

TEST_CASE("view: a notification carries the address's whole state")
{
	NodeAddressView view;
	view.replace({address("2001:db8:98::9/64", 4, true)});
	// Duplicate address detection ends: RTM_NEWADDR of the same address, not tentative.
	CHECK(view.apply(added(address("2001:db8:98::9/64", 4)), watched()));
	CHECK(lines(view) == std::vector<std::string>{"2001:db8:98::9/64@4"});
	// An IPv6 address is one per interface: a new prefix length replaces it.
	view.apply(added(address("2001:db8:98::9/56", 4)), watched());
	CHECK(lines(view) == std::vector<std::string>{"2001:db8:98::9/56@4"});
	// IPv4 tells the same address apart by prefix length (and peer): two entries, and
	// removing one leaves the other.
	view.apply(added(address("198.18.1.5/24", 4)), watched());
	view.apply(added(address("198.18.1.5/16", 4)), watched());
	view.apply(removed(address("198.18.1.5/24", 4)), watched());
	CHECK(lines(view) == std::vector<std::string>{"198.18.1.5/16@4", "2001:db8:98::9/56@4"});
	// The same address on another interface is another entry.
	view.apply(added(address("198.18.1.5/16", 5)), watched());
	CHECK(view.size() == 3);
}

TEST_CASE("view: the name a read gave an interface survives a change of the address's flags")
{
	NodeAddressView view;
	NodeAddress named = address("2001:db8:98::9/64", 4, true);
	named.interface = "eth0";
	view.replace({named});
	view.apply(added(address("2001:db8:98::9/64", 4)), watched()); // no name in it
	const NodeAddresses addresses = view.addresses();
	REQUIRE(addresses.complete);
	REQUIRE(addresses.addresses.size() == 1);
	CHECK(addresses.addresses.front().interface == "eth0");
	CHECK_FALSE(addresses.addresses.front().tentative);
}

TEST_CASE("view: changes that raced the read, applied after it, leave what the kernel has")
{
	// The monitor subscribed at t0; the read saw the state at t2. Changes at t1 (before the
	// read) and t3 (after it) are all in the monitor's queue, in order, and are applied
	// after the read: each leaves its address as it was last announced.
	const NodeAddress a = address("198.18.1.5/24", 2);
	const NodeAddress b = address("198.18.1.9/24", 2);
	const NodeAddress c = address("2001:db8:98::5/64", 2, true);
	const NodeAddress cDone = address("2001:db8:98::5/64", 2);
	SECTION("removed at t1, added again at t3")
	{
		NodeAddressView view;
		view.replace({}); // the read at t2: a was gone
		view.apply(removed(a), watched());
		view.apply(added(a), watched());
		CHECK(lines(view) == std::vector<std::string>{"198.18.1.5/24@2"});
	}
	SECTION("added at t1, removed at t1 too: the read never saw it")
	{
		NodeAddressView view;
		view.replace({b});
		view.apply(added(a), watched());
		view.apply(removed(a), watched());
		CHECK(lines(view) == std::vector<std::string>{"198.18.1.9/24@2"});
	}
	SECTION("detection ended at t1 (the read shows it done), announced again at t3")
	{
		NodeAddressView view;
		view.replace({cDone});
		view.apply(added(c), watched()); // the queued notification of t0+ (tentative)
		view.apply(added(cDone), watched()); // and the one that ended it
		CHECK(lines(view) == std::vector<std::string>{"2001:db8:98::5/64@2"});
	}
}

TEST_CASE("view: lost changes make it stale until the next read; its bound too")
{
	NodeAddressView view(2);
	view.replace({address("198.18.1.5/24", 2)});
	view.lose();
	CHECK(view.state() == NodeAddressView::State::stale);
	// The snapshot says so: known, no longer complete.
	CHECK(view.addresses().known());
	CHECK(view.addresses().stale);
	CHECK_FALSE(view.addresses().complete);
	// What is known stays in use, and changes still apply.
	view.apply(added(address("198.18.1.9/24", 2)), watched());
	CHECK(view.size() == 2);
	view.replace({address("198.18.1.7/24", 2)});
	CHECK(view.state() == NodeAddressView::State::current);

	view.apply(added(address("198.18.1.8/24", 2)), watched());
	CHECK(view.state() == NodeAddressView::State::current);
	// A third address passes the bound: refused, and the view is no longer complete.
	view.apply(added(address("198.18.1.10/24", 2)), watched());
	CHECK(view.state() == NodeAddressView::State::stale);
	CHECK(view.size() == 2);
	// Losing changes of an unknown view says nothing new.
	NodeAddressView unknown;
	unknown.lose();
	CHECK(unknown.state() == NodeAddressView::State::unknown);
}
