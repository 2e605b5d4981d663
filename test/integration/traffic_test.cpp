// SPDX-License-Identifier: Apache-2.0
// Real traffic through the agent's table: a pod, the node and an external host, each in a
// network namespace of its own (traffic_support.h); a TCP server on the external host
// reports the source it sees.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "traffic_support.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;

namespace {

// How long after a config change a new connection first showed the new source.
struct Reaction {
	std::chrono::microseconds took{};
	int connections = 0; // tried until then, the one that showed it included
};

std::ostream &operator<<(std::ostream &out, const Reaction &r)
{
	return out << fmt::format("{:.1f} ms ({} connection{})", double(r.took.count()) / 1000,
				  r.connections, r.connections == 1 ? "" : "s");
}

// From a config change until a new connection shows `source`: the agent's reaction time,
// reported, not required (the resync is an hour away, so any reaction came from the
// change; the benchmark times a config swap). kChangeSeen only catches a hang.
Reaction requireReaction(const Topology &net, const Agent &agent, int family,
			 const std::string &source, std::chrono::steady_clock::time_point changed)
{
	Reaction r;
	Observation last;
	bool seen = false;
	while (!seen && r.connections < 5000 &&
	       std::chrono::steady_clock::now() - changed < kChangeSeen) {
		if (r.connections > 0)
			std::this_thread::sleep_for(r.connections < 100 ? 2ms : 5ms);
		last = connectFromPod(net, family, 2s);
		r.connections++;
		seen = last.ok() && last.address == source;
	}
	r.took = std::chrono::duration_cast<std::chrono::microseconds>(
		std::chrono::steady_clock::now() - changed);
	INFO("waiting for source " << source << " for " << r << "; last connection: " << last
				  << "\ntable:\n" << tableListing() << "\nagent log:\n"
				  << agent.log());
	REQUIRE(seen);
	// The switch is atomic: from now on every connection shows the new source.
	for (int i = 0; i < 5; i++)
		requireSource(net, agent, family, source);
	return r;
}

} // namespace

TEST_CASE("IPv4: masqueraded to the node's address unless the destination is non-masquerade")
{
	Topology net;
	SourceEchoServer server(net.external);

	SECTION("default config (RFC 1918 only): the server sees the node")
	{
		Agent agent("", {});
		requireSource(net, agent, AF_INET, kNodeV4);
	}
	SECTION("the external subnet in nonMasqueradeCIDRs: the server sees the pod")
	{
		Agent agent("nonMasqueradeCIDRs: [203.0.113.0/24]\n", {});
		requireSource(net, agent, AF_INET, kPodV4);
	}
}

TEST_CASE("IPv6: masqueraded only with --enable-ipv6, unless the destination is non-masquerade")
{
	Topology net;
	SourceEchoServer server(net.external);

	SECTION("--enable-ipv6, default config: the server sees the node")
	{
		Agent agent("", {"--enable-ipv6"});
		requireSource(net, agent, AF_INET6, kNodeV6);
		requireSource(net, agent, AF_INET, kNodeV4);
	}
	SECTION("--enable-ipv6, the external subnet in nonMasqueradeCIDRs: the server sees the pod")
	{
		Agent agent("nonMasqueradeCIDRs: [\"2001:db8:2::/64\"]\n", {"--enable-ipv6"});
		requireSource(net, agent, AF_INET6, kPodV6);
		requireSource(net, agent, AF_INET, kNodeV4);
	}
	SECTION("without --enable-ipv6 IPv6 is not touched, while IPv4 is masqueraded")
	{
		Agent agent("", {});
		requireSource(net, agent, AF_INET6, kPodV6);
		requireSource(net, agent, AF_INET, kNodeV4);
	}
}

TEST_CASE("--to-ports: masqueraded source ports stay inside the ranges")
{
	Topology net;
	SourceEchoServer server(net.external);
	// Distinct ranges per section: conntrack keeps closed connections (TIME_WAIT) in the
	// node for minutes, and they still hold their NAT ports.

	SECTION("one range")
	{
		Agent agent("", {"--enable-ipv6", "--to-ports=40000-40099"});
		for (int family : {AF_INET, AF_INET6}) {
			for (int i = 0; i < 20; i++) {
				const Observation o = connectFromPod(net, family);
				INFO("connection " << i << ": " << o << "\nagent log:\n" << agent.log());
				REQUIRE(o.ok());
				CHECK(o.address == (family == AF_INET ? kNodeV4 : kNodeV6));
				CHECK(o.port >= 40000);
				CHECK(o.port <= 40099);
			}
		}
	}
	SECTION("two ranges: both are used, nothing outside them")
	{
		Agent agent("", {"--to-ports=41000-41049,42000-42049"});
		// Half the flows go to each range: all 60 in one range has probability 2^-59.
		int low = 0, high = 0;
		for (int i = 0; i < 60; i++) {
			const Observation o = connectFromPod(net, AF_INET);
			INFO("connection " << i << ": " << o << "\nagent log:\n" << agent.log());
			REQUIRE(o.ok());
			CHECK(o.address == kNodeV4);
			const bool inLow = o.port >= 41000 && o.port <= 41049;
			const bool inHigh = o.port >= 42000 && o.port <= 42049;
			CHECK((inLow || inHigh));
			low += inLow;
			high += inHigh;
		}
		INFO(low << " connections in 41000-41049, " << high << " in 42000-42049");
		CHECK(low > 0);
		CHECK(high > 0);
	}
}

TEST_CASE("a config change reaches new connections, without a restart or a resync")
{
	Topology net;
	SourceEchoServer server(net.external);
	Agent agent("", {"--enable-ipv6"});
	requireSource(net, agent, AF_INET, kNodeV4);
	requireSource(net, agent, AF_INET6, kNodeV6);

	auto changed = std::chrono::steady_clock::now();
	agent.writeConfig("nonMasqueradeCIDRs: [203.0.113.0/24, \"2001:db8:2::/64\"]\n");
	const auto toPod = requireReaction(net, agent, AF_INET, kPodV4, changed);
	requireSource(net, agent, AF_INET6, kPodV6);

	changed = std::chrono::steady_clock::now();
	agent.overwriteConfig("nonMasqueradeCIDRs: [203.0.113.0/24]\n");
	const auto v6ToNode = requireReaction(net, agent, AF_INET6, kNodeV6, changed);
	requireSource(net, agent, AF_INET, kPodV4);

	changed = std::chrono::steady_clock::now();
	agent.writeConfig("");
	const auto toNode = requireReaction(net, agent, AF_INET, kNodeV4, changed);

	WARN("from the config write to the first connection with the new source: "
	     << toPod << " renamed, IPv4 to the pod's source; " << v6ToNode
	     << " edited in place, IPv6 to the node's; " << toNode
	     << " renamed, IPv4 to the node's");
}

namespace {

// Second addresses beside the first ones of the topology: a neighbour of the external
// server in its own subnet, and a second pod source that routes choose for the other
// external destination only (the pod's own address stays the source of everything else).
inline const std::string kNeighbourV4 = "203.0.113.3";
inline const std::string kNeighbourV6 = "2001:db8:2::3";
inline const std::string kSecondPodV4 = "198.51.100.3";
inline const std::string kSecondPodV6 = "2001:db8:1::3";

void addNeighbours(const Topology &net)
{
	net.external.runOrFail(fmt::format("ip addr add {}/24 dev eth0 && ip addr add {}/64 dev eth0 nodad",
					   kNeighbourV4, kNeighbourV6));
}

// Connections from the pod to kOtherServerV4 and kNeighbourV6 leave from its second address.
// The IPv6 one is deprecated (preferred_lft 0), else IPv6 would pick the newest address
// for everything; a route's explicit source still uses it.
void addSecondPodSource(const Topology &net)
{
	net.pod.runOrFail(fmt::format("ip addr add {}/24 dev eth0 && "
				      "ip addr add {}/64 dev eth0 nodad preferred_lft 0 && "
				      "ip route add {}/32 via 198.51.100.1 src {} && "
				      "ip -6 route add {}/128 via 2001:db8:1::1 src {}",
				      kSecondPodV4, kSecondPodV6, kOtherServerV4, kSecondPodV4,
				      kNeighbourV6, kSecondPodV6));
}

} // namespace

TEST_CASE("masqueradeCIDRs: an exception inside a non-masquerade range is masqueraded, its neighbours are not")
{
	Topology net;
	addNeighbours(net);
	SourceEchoServer server(net.external);

	SECTION("IPv4")
	{
		Agent agent("nonMasqueradeCIDRs: [203.0.113.0/24]\nmasqueradeCIDRs: [203.0.113.2/32]\n", {});
		requireSource(net, agent, AF_INET, kServerV4, kServerPort, kNodeV4);
		requireSource(net, agent, AF_INET, kNeighbourV4, kServerPort, kPodV4);
	}
	SECTION("IPv6, with --enable-ipv6")
	{
		Agent agent("nonMasqueradeCIDRs: [\"2001:db8:2::/64\"]\n"
			    "masqueradeCIDRs: [\"2001:db8:2::2/128\"]\n",
			    {"--enable-ipv6"});
		requireSource(net, agent, AF_INET6, kServerV6, kServerPort, kNodeV6);
		requireSource(net, agent, AF_INET6, kNeighbourV6, kServerPort, kPodV6);
	}
}

TEST_CASE("masqueradeSourceCIDRs: only sources in the list are masqueraded")
{
	Topology net;
	addNeighbours(net);
	addSecondPodSource(net);
	SourceEchoServer server(net.external);

	SECTION("IPv4: the listed pod is masqueraded, a source outside the list is not")
	{
		Agent agent("masqueradeSourceCIDRs: [198.51.100.2/32]\n", {});
		requireSource(net, agent, AF_INET, kServerV4, kServerPort, kNodeV4);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kSecondPodV4);
	}
	SECTION("IPv6, with --enable-ipv6: the same, IPv4 restricted alike")
	{
		Agent agent("masqueradeSourceCIDRs: [198.51.100.2/32, \"2001:db8:1::2/128\"]\n",
			    {"--enable-ipv6"});
		requireSource(net, agent, AF_INET6, kServerV6, kServerPort, kNodeV6);
		requireSource(net, agent, AF_INET6, kNeighbourV6, kServerPort, kSecondPodV6);
		requireSource(net, agent, AF_INET, kServerV4, kServerPort, kNodeV4);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kSecondPodV4);
	}
	SECTION("--enable-ipv6 with IPv4 sources only: IPv6 is not restricted")
	{
		Agent agent("masqueradeSourceCIDRs: [198.51.100.2/32]\n", {"--enable-ipv6"});
		requireSource(net, agent, AF_INET6, kNeighbourV6, kServerPort, kNodeV6);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kSecondPodV4);
	}
}
