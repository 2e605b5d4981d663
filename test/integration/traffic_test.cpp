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

// From a config change until a new connection shows `source`: the agent's reaction time.
Reaction requireReaction(const Topology &net, const Agent &agent, int family,
			 const std::string &source, std::chrono::steady_clock::time_point changed)
{
	Reaction r;
	Observation last;
	bool seen = false;
	while (!seen && r.connections < 1000 && std::chrono::steady_clock::now() - changed < 3s) {
		if (r.connections > 0)
			std::this_thread::sleep_for(2ms);
		last = connectFromPod(net, family, 500ms);
		r.connections++;
		seen = last.ok() && last.address == source;
	}
	r.took = std::chrono::duration_cast<std::chrono::microseconds>(
		std::chrono::steady_clock::now() - changed);
	INFO("waiting for source " << source << " for " << r << "; last connection: " << last
				  << "\ntable:\n" << tableListing() << "\nagent log:\n"
				  << agent.log());
	REQUIRE(seen);
	REQUIRE(r.took <= 1s);
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

TEST_CASE("a config change reaches new connections within a second")
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
