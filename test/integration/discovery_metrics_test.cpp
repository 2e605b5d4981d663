// SPDX-License-Identifier: Apache-2.0
// nonMasqueradeDiscovery's metrics through the running agent, each read from /metrics at a
// moment its value is known, with real traffic where the ranges decide (a pod namespace
// connects through the node, this test's namespace, to an external host that says the source
// it saw): the changes counted and the prefixes outside `within` counted once each, as routes
// come; a withdrawn range in its hold-down; and more ranges than the agent's bound
// (kMaxDiscoveredPrefixes routes and one more: nothing discovered goes in force until one
// leaves).
#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <chrono>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/config/discovery_config.h"
#include "netns.h"
#include "traffic_support.h"

using namespace ipmasq;
using namespace ipmasq::test;
using namespace std::chrono_literals;

namespace {

constexpr auto kHang = 30s;
const std::string kHealth = "http://127.0.0.1:10263";

std::string seenFrom(const Topology &net, const std::string &server)
{
	return connectFromPod(net, AF_INET, server, kServerPort).address;
}

std::string metric(const std::string &series)
{
	return metricAt(kHealth, "ip_masq_agent_" + series);
}

// Waits (a hang only) until the series says `value`.
void requireMetric(const AgentProcess &agent, const std::string &series, const std::string &value)
{
	requireWithin([&] { return metric(series) == value; }, kHang, agent,
		      fmt::format("ip_masq_agent_{} {}", series, value).c_str(),
		      [&] { return "/metrics: " + curlGet(kHealth + "/metrics"); });
}

bool ready()
{
	return curlGet(kHealth + "/readyz").rfind("200", 0) == 0;
}

} // namespace

TEST_CASE("the discovery metrics as routes come and go: changes, prefixes outside within, a range "
	  "held down")
{
	Topology net;
	SourceEchoServer server(net.external);
	TempDir dir;
	// A BGP daemon's routes: 192.0.2.0/25 (the external host's second address is in it) and a
	// prefix outside `within`, before the agent starts. A withdrawn range stays an hour.
	runOrFail("ip route add 192.0.2.0/25 via 203.0.113.2 proto bird && "
		  "ip route add 198.18.5.0/24 via 203.0.113.2 proto bird");
	dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n"
			    "nonMasqueradeDiscovery:\n"
			    "  within: [192.0.2.0/24, 203.0.113.0/24]\n"
			    "  routeProtocols: [bird]\n"
			    "  holdDown: 1h\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	requireWithin(ready, kHang, agent, "the agent ready");
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent,
		      "the route's range not masqueraded");
	// The first read: one range in force (one change), one prefix outside within.
	requireMetric(agent, "discovered_range_changes_total", "1");
	CHECK(metric("discovered_outside_within_total") == "1");
	CHECK(metric("discovered_ranges_held_down") == "0");
	CHECK(metric("discovered_over_bound") == "0");

	// One more range; another prefix outside within; the first one outside withdrawn and
	// announced again (counted once: it was said before).
	runOrFail("ip route add 203.0.113.0/26 dev to-ext proto bird");
	requireWithin([&] { return seenFrom(net, kServerV4) == kPodV4; }, kHang, agent,
		      "the new range not masqueraded");
	runOrFail("ip route add 198.18.6.0/24 via 203.0.113.2 proto bird && "
		  "ip route del 198.18.5.0/24 && ip route add 198.18.5.0/24 via 203.0.113.2 proto bird && "
		  "ip route add 192.0.2.128/25 via 203.0.113.2 proto bird");
	// Notifications are read in order: once the last route's range counts, the others have.
	requireMetric(agent, "discovered_range_changes_total", "3");
	CHECK(metric("discovered_outside_within_total") == "2");

	// Withdrawn: held down for the hour, in force meanwhile; a hold-down changes no element.
	runOrFail("ip route del 192.0.2.0/25");
	requireMetric(agent, "discovered_ranges_held_down", "1");
	CHECK(seenFrom(net, kOtherServerV4) == kPodV4);
	CHECK(metric("discovered_range_changes_total") == "3");
	CHECK_THAT(curlGet(kHealth + "/readyz?verbose"), Catch::Contains("192.0.2.0/25: withdrawn, leaves in"));
	// Announced again within it: it never left.
	runOrFail("ip route add 192.0.2.0/25 via 203.0.113.2 proto bird");
	requireMetric(agent, "discovered_ranges_held_down", "0");
	CHECK(metric("discovered_range_changes_total") == "3");
	CHECK(metric("discovered_outside_within_total") == "2");
	CHECK(seenFrom(net, kOtherServerV4) == kPodV4);
}

TEST_CASE("more ranges than the bound: none goes in force, the gauge says so, until one leaves")
{
	Topology net;
	SourceEchoServer server(net.external);
	TempDir dir;
	// kMaxDiscoveredPrefixes routes and one more: 192.0.2.0/25 (the external host's second
	// address is in it) and /32s of 198.18.0.0/15, as a BGP daemon installs them.
	const size_t hosts = kMaxDiscoveredPrefixes;
	{
		std::ofstream batch(dir.file("routes"));
		batch << "route add 192.0.2.0/25 via 203.0.113.2 proto bird\n";
		for (size_t i = 0; i < hosts; i++)
			batch << fmt::format("route add 198.{}.{}.{}/32 dev to-ext proto bird\n", 18 + i / 65536,
					     i / 256 % 256, i % 256);
	}
	runOrFail("ip -batch " + dir.file("routes"));
	dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n"
			    "nonMasqueradeDiscovery:\n"
			    "  within: [192.0.2.0/24, 198.18.0.0/15]\n"
			    "  routeProtocols: [bird]\n"
			    "  holdDown: 0s\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	requireMetric(agent, "discovered_over_bound", "1");
	requireWithin(ready, kHang, agent, "the agent ready");
	CHECK(metric("discovered_ranges{source=\"routes\"}") == std::to_string(hosts + 1));
	CHECK(metric("discovered_range_changes_total") == "0");
	CHECK(seenFrom(net, kOtherServerV4) == kNodeV4); // found, but over the bound: not in force
	CHECK_THAT(agent.log(), Catch::Contains(fmt::format("{} prefixes discovered, more than the {} the agent takes",
							    hosts + 1, kMaxDiscoveredPrefixes)));
	CHECK_THAT(curlGet(kHealth + "/readyz?verbose"),
		   Catch::Contains(fmt::format("more than {} ranges found", kMaxDiscoveredPrefixes)));

	// One leaves: within the bound, every range goes in force.
	runOrFail("ip route del 198.18.0.0/32");
	requireMetric(agent, "discovered_over_bound", "0");
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent,
		      "the ranges in force once within the bound");
	CHECK(metric("discovered_range_changes_total") == std::to_string(hosts));
	// Said with the change that brought it, before the sync that puts the ranges in force
	// (not at the pod network's next read, up to 10 s later).
	const std::string log = agent.log();
	const std::string within = fmt::format("{} prefixes discovered, within the bound of {} again", hosts,
					       kMaxDiscoveredPrefixes);
	const size_t saidAt = log.find(within);
	const size_t appliedAt = log.find("(pod network change)");
	REQUIRE(saidAt != std::string::npos);
	REQUIRE(appliedAt != std::string::npos);
	CHECK(saidAt < appliedAt);
	// 65,536 ranges in at once: a line for each of the first 20 and one that counts the rest.
	size_t named = 0;
	for (size_t at = log.find("is not masqueraded from now on"); at != std::string::npos;
	     at = log.find("is not masqueraded from now on", at + 1))
		named++;
	CHECK(named == 20);
	CHECK_THAT(log, Catch::Contains(fmt::format("pod network: {} more ranges are not masqueraded from now on "
						    "(the first 20 are named above)", hosts - 20)));
	runOrFail("ip route flush proto bird");
}
