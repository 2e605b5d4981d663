// SPDX-License-Identifier: Apache-2.0
// The egress keys with real traffic (traffic_support.h: a pod, the node and an external host
// in namespaces of their own): what source the external server sees with outputAddress as
// an address, a range and this node's address in a subnet (followed live), and with
// outputInterface and nonMasqueradeInterfaces on a node with two uplinks; IPv4 and IPv6.
#include <catch2/catch.hpp>

#include <chrono>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "netns.h"
#include "traffic_support.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;

namespace {

// SNAT targets outside the node's links, which the external host routes back to the node.
const std::string kSnatV4 = "198.18.0.7";
const std::string kSnatV6 = "2001:db8:99::7";
// The subnet the node has addresses in, on its uplink, for `outputAddress: <CIDR>`.
const std::string kSubnetV4 = "198.18.1.0/24";
const std::string kSubnetV6 = "2001:db8:98::/64";
const std::string kHealth = "http://127.0.0.1:10263";

void routeSnatTargetsBack(const Topology &net)
{
	net.external.runOrFail("ip route add 198.18.0.0/24 via 203.0.113.1 && "
			       "ip route add 198.18.1.0/24 via 203.0.113.1 && "
			       "ip -6 route add 2001:db8:99::/64 via 2001:db8:2::1 && "
			       "ip -6 route add 2001:db8:98::/64 via 2001:db8:2::1");
}

const std::string &server(int family)
{
	return family == AF_INET ? kServerV4 : kServerV6;
}

// Every connection of a burst from the pod, one per source, each `rounds` times: the
// sources the server saw.
std::multiset<std::string> seenFrom(const Topology &net, int family,
				    const std::vector<std::string> &sources, int rounds)
{
	std::multiset<std::string> seen;
	for (int round = 0; round < rounds; round++)
		for (const std::string &source : sources) {
			const Observation o =
				connectFromPod(net, family, server(family), kServerPort, 2s, source);
			INFO("from " << source << ": " << o << "\ntable:\n" << tableListing());
			REQUIRE(o.ok());
			seen.insert(o.address);
		}
	return seen;
}

// From a change of the node's addresses until new connections show `next`: how long it
// took (reported, not required: the resync is an hour away, so a switch at all came from
// the address monitor; the benchmark times it). Every connection in between shows
// `previous` or `next`, never anything else (no passing through a wrong state, such as
// plain masquerade). Bounded in count and time: kChangeSeen only catches a hang.
std::chrono::milliseconds requireSwitch(const Topology &net, const Agent &agent, int family,
					const std::string &previous, const std::string &next,
					std::chrono::steady_clock::time_point changed)
{
	Observation last;
	int connections = 0;
	while (connections < 5000 && std::chrono::steady_clock::now() - changed < kChangeSeen) {
		// At once at first, then every 5 ms: the count stays bounded on a slow machine.
		if (connections >= 100)
			std::this_thread::sleep_for(5ms);
		last = connectFromPod(net, family, 2s);
		connections++;
		INFO("connection " << connections << ": " << last << "\nagent log:\n" << agent.log());
		REQUIRE(last.ok());
		REQUIRE((last.address == previous || last.address == next));
		if (last.address == next)
			break;
	}
	const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
		std::chrono::steady_clock::now() - changed);
	INFO("last connection: " << last << "\ntable:\n" << tableListing() << "\nagent log:\n"
				 << agent.log());
	REQUIRE(last.address == next);
	WARN(fmt::format("{} -> {}: {} ms, {} connections", previous, next, took.count(), connections));
	// The switch is atomic: from now on every connection shows it.
	for (int i = 0; i < 5; i++)
		requireSource(net, agent, family, next);
	return took;
}

} // namespace

TEST_CASE("outputAddress: the server sees the chosen address, in both families")
{
	Topology net;
	SourceEchoServer echo(net.external);
	routeSnatTargetsBack(net);
	Agent agent(fmt::format("outputAddress: {}\noutputAddressIPv6: \"{}\"\n"
				"nonMasqueradeCIDRs: [192.0.2.0/24]\n",
				kSnatV4, kSnatV6),
		    {"--enable-ipv6"});
	requireSource(net, agent, AF_INET, kSnatV4);
	requireSource(net, agent, AF_INET6, kSnatV6);
	// A non-masquerade destination keeps the pod's address, as before.
	requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kPodV4);
	// The log warns that the address is not the node's (replies come back by a route).
	CHECK_THAT(agent.log(), Catch::Contains("198.18.0.7 is not an address of this node"));
}

TEST_CASE("an outputAddress range: every source seen is in it, and more than one is used")
{
	Topology net;
	SourceEchoServer echo(net.external);
	routeSnatTargetsBack(net);
	// The kernel picks a range's address by a hash of the connection's addresses: twenty
	// pod addresses spread over it.
	std::vector<std::string> v4, v6;
	for (int i = 10; i < 30; i++) {
		v4.push_back(fmt::format("198.51.100.{}", i));
		v6.push_back(fmt::format("2001:db8:1::{:x}", i));
		net.pod.runOrFail(fmt::format("ip addr add {}/24 dev eth0 && ip addr add {}/64 dev eth0 nodad",
					      v4.back(), v6.back()));
	}
	Agent agent("outputAddress: 198.18.0.7-198.18.0.9\n"
		    "outputAddressIPv6: \"2001:db8:99::7-2001:db8:99::9\"\n",
		    {"--enable-ipv6"});
	for (const auto &[family, sources, range] :
	     {std::tuple{AF_INET, &v4, std::set<std::string>{"198.18.0.7", "198.18.0.8", "198.18.0.9"}},
	      std::tuple{AF_INET6, &v6,
			 std::set<std::string>{"2001:db8:99::7", "2001:db8:99::8", "2001:db8:99::9"}}}) {
		const std::multiset<std::string> seen = seenFrom(net, family, *sources, 10);
		CHECK(seen.size() == 200);
		const std::set<std::string> distinct(seen.begin(), seen.end());
		INFO("sources seen: " << fmt::format("{}", fmt::join(distinct, ", ")));
		for (const std::string &address : distinct)
			CHECK(range.count(address) == 1);
		CHECK(distinct.size() > 1);
	}
}

TEST_CASE("an outputAddress subnet: this node's address in it, followed live; none: masquerade, "
	  "not ready")
{
	Topology net;
	SourceEchoServer echo(net.external);
	routeSnatTargetsBack(net);
	// Deleting an interface's primary IPv4 address deletes its secondaries too, unless they
	// are promoted: as on a cloud node that moves its per-node address.
	writeSysctl("net/ipv4/conf/to-ext/promote_secondaries", "1");
	runOrFail("ip addr add 198.18.1.5/24 dev to-ext && ip addr add 2001:db8:98::5/64 dev to-ext nodad");
	Agent agent(fmt::format("outputAddress: {}\noutputAddressIPv6: \"{}\"\n", kSubnetV4, kSubnetV6),
		    {"--enable-ipv6", "--health-addr=127.0.0.1:10263"});
	requireSource(net, agent, AF_INET, "198.18.1.5");
	requireSource(net, agent, AF_INET6, "2001:db8:98::5");
	CHECK(curlGet(kHealth + "/readyz") == "200 ok\n");
	CHECK_THAT(curlGet(kHealth + "/metrics"),
		   Catch::Contains("ip_masq_agent_output_address_available{family=\"ipv4\"} 1"));

	// Another address comes, the first goes: new connections use the new one at once.
	for (const auto &[family, previous, next, device] :
	     {std::tuple{AF_INET, "198.18.1.5", "198.18.1.9", "198.18.1.9/24"},
	      std::tuple{AF_INET6, "2001:db8:98::5", "2001:db8:98::9", "2001:db8:98::9/64 nodad"}}) {
		runOrFail(fmt::format("ip addr add {} dev to-ext", device));
		// The higher address changes nothing: the lowest is chosen.
		requireSource(net, agent, family, previous);
		runOrFail(fmt::format("ip addr del {}/{} dev to-ext", previous,
				      family == AF_INET ? 24 : 64));
		requireSwitch(net, agent, family, previous, next, std::chrono::steady_clock::now());
	}

	// None left in the IPv4 subnet: plain masquerade (the node's uplink address), not
	// ready, and the metric says why.
	runOrFail("ip addr del 198.18.1.9/24 dev to-ext");
	requireSwitch(net, agent, AF_INET, "198.18.1.9", kNodeV4, std::chrono::steady_clock::now());
	requireSource(net, agent, AF_INET6, "2001:db8:98::9");
	requireWithin([] { return curlGet(kHealth + "/readyz").starts_with("503 "); }, kChangeSeen,
		      agent.process(), "not ready");
	const std::string ready = curlGet(kHealth + "/readyz");
	CHECK_THAT(ready, Catch::Contains("198.18.1.0/24 (outputAddress") &&
				  Catch::Contains("this node has no address in it"));
	CHECK_THAT(curlGet(kHealth + "/metrics"),
		   Catch::Contains("ip_masq_agent_output_address_available{family=\"ipv4\"} 0"));
	CHECK(countOf(agent.log(), "this node has no address in it") == 1); // said once

	// Back: SNAT again, and ready.
	runOrFail("ip addr add 198.18.1.7/24 dev to-ext");
	requireSwitch(net, agent, AF_INET, kNodeV4, "198.18.1.7", std::chrono::steady_clock::now());
	requireWithin([] { return curlGet(kHealth + "/readyz") == "200 ok\n"; }, kChangeSeen,
		      agent.process(), "ready again");
}

TEST_CASE("two uplinks: only the scoped interface's traffic is source-NATed")
{
	Topology net;
	SourceEchoServer echo(net.external);
	routeSnatTargetsBack(net);
	// A second uplink to the external host, which has a server address behind it only.
	run("ip link del uplink2 2>/dev/null"); // an earlier section's, if it failed half-way
	runOrFail("ip link add uplink2 type veth peer name eth1 netns " + net.external.path());
	runOrFail("ip addr add 198.18.2.1/24 dev uplink2 && ip addr add 2001:db8:3::1/64 dev uplink2 nodad "
		  "&& ip link set uplink2 up && ip route add 198.18.3.0/24 via 198.18.2.2 && "
		  "ip -6 route add 2001:db8:4::/64 via 2001:db8:3::2");
	net.external.runOrFail("ip addr add 198.18.2.2/24 dev eth1 && ip addr add 2001:db8:3::2/64 dev "
			       "eth1 nodad && ip addr add 198.18.3.2/24 dev eth1 && ip addr add "
			       "2001:db8:4::2/64 dev eth1 nodad && ip link set eth1 up");
	const auto viaUplink2 = [&](int family) {
		return family == AF_INET ? std::string("198.18.3.2") : std::string("2001:db8:4::2");
	};

	SECTION("outputInterface: to-ext only")
	{
		Agent agent(fmt::format("outputInterface: to-ext\noutputAddress: {}\n", kSnatV4),
			    {"--enable-ipv6"});
		requireSource(net, agent, AF_INET, kSnatV4);
		requireSource(net, agent, AF_INET6, kNodeV6); // masqueraded: no IPv6 outputAddress
		requireSource(net, agent, AF_INET, viaUplink2(AF_INET), kServerPort, kPodV4);
		requireSource(net, agent, AF_INET6, viaUplink2(AF_INET6), kServerPort, kPodV6);
	}
	SECTION("nonMasqueradeInterfaces: the second uplink, as iptables' wildcard")
	{
		Agent agent("nonMasqueradeInterfaces: [\"uplink+\"]\n", {"--enable-ipv6"});
		requireSource(net, agent, AF_INET, kNodeV4);
		requireSource(net, agent, AF_INET6, kNodeV6);
		requireSource(net, agent, AF_INET, viaUplink2(AF_INET), kServerPort, kPodV4);
		requireSource(net, agent, AF_INET6, viaUplink2(AF_INET6), kServerPort, kPodV6);
	}
	runOrFail("ip link del uplink2");
}
