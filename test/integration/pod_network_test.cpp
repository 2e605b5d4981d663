// SPDX-License-Identifier: Apache-2.0
// The pod network found from the node, through the running agent, judged by real traffic:
// a pod namespace connects through the node (this test's namespace) to an external host,
// which says the source address it saw. The agent's config names no pod range; what it
// finds on the node decides: routes installed by "bird" (as Calico's BGP daemon installs
// them), Flannel's subnet.env, written after the agent started and rewritten live. A
// withdrawn range is masqueraded again after the hold-down, never before the withdraw; a
// prefix outside `within` is ignored. (route_discovery_test runs the route source against
// real bird2, VXLAN and the CNI plugins; this test runs the whole path into the kernel.)
#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <chrono>
#include <string>

#include <fmt/format.h>

#include "agent_process.h"
#include "netns.h"
#include "traffic_support.h"

using namespace ipmasq::test;
using namespace std::chrono_literals;

namespace {

// Deadlines only a hang misses; the hold-down itself is 1 s.
constexpr auto kHang = 30s;

// The source the external host sees for a connection from the pod to `server`.
std::string seenFrom(const Topology &net, const std::string &server)
{
	return connectFromPod(net, AF_INET, server, kServerPort).address;
}

std::string nomasqSet()
{
	std::string out;
	(void)run("nft list set inet ip-masq-agent nomasq-v4 2>&1", &out);
	return out;
}

} // namespace

TEST_CASE("ranges found on the node (routes by protocol, Flannel's subnet.env) are not masqueraded, "
	  "live, and leave after the hold-down")
{
	Topology net;
	SourceEchoServer server(net.external);
	TempDir dir;
	const std::string subnetEnv = dir.file("subnet.env");
	// The pod network stands in as 203.0.113.0/24 (the external host's link) and
	// 192.0.2.0/24 (its second address): the agent masquerades both unless it finds them.
	dir.write("config", fmt::format("nonMasqueradeCIDRs: [10.0.0.0/8]\n"
					"nonMasqueradeDiscovery:\n"
					"  within: [203.0.113.0/24, 192.0.2.0/24]\n"
					"  routeProtocols: [bird]\n"
					"  flannelSubnetEnv: {}\n"
					"  holdDown: 1s\n",
					subnetEnv));
	// A route as a BGP daemon installs it (the same path as the link's own route), and one
	// outside `within`.
	runOrFail("ip route add 203.0.113.0/26 dev to-ext proto bird");
	runOrFail("ip route add 203.0.113.0/25 dev to-ext proto bird");
	runOrFail("ip route add 198.18.77.0/24 via 203.0.113.2 proto bird");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	const auto log = [&agent] { return agent.log() + "\n" + nomasqSet(); };
	// Ready: the table is in force (before it, nothing is masqueraded at all).
	requireWithin([] { return curlGet("http://127.0.0.1:10263/readyz").rfind("200", 0) == 0; }, kHang, agent,
		      "the agent ready", log);
	requireWithin([&] { return seenFrom(net, kServerV4) == kPodV4; }, kHang, agent,
		      "the route's range not masqueraded", log);
	CHECK(seenFrom(net, kOtherServerV4) == kNodeV4); // subnet.env does not exist yet
	CHECK_THAT(nomasqSet(), !Catch::Contains("198.18.77.0/24"));
	CHECK_THAT(agent.log(), Catch::Contains("198.18.77.0/24") && Catch::Contains("is not inside within"));
	const std::string handle = runOrFail("nft -a list set inet ip-masq-agent nomasq-v4 | grep -o 'handle [0-9]*'");
	// Where each range came from: --explain names every origin that holds the address,
	// --dry-run lists the ranges with theirs.
	std::string explained, dryRun;
	REQUIRE(run(fmt::format("{} --config={} --explain={} 2>/dev/null", agentBinary(), dir.file("config"), kServerV4),
		    &explained) == 0);
	CHECK_THAT(explained, Catch::StartsWith(kServerV4 + ": not masqueraded: discovered 203.0.113.0/26 (route "
						"203.0.113.0/26 proto bird dev to-ext); also found on the node: "
						"203.0.113.0/25 (route 203.0.113.0/25 proto bird dev to-ext)"));
	REQUIRE(run(fmt::format("{} --config={} --dry-run 2>/dev/null", agentBinary(), dir.file("config")), &dryRun) == 0);
	CHECK_THAT(dryRun, Catch::Contains("# Not masqueraded, found on this node (nonMasqueradeDiscovery): 2\n"
					   "#   203.0.113.0/25: route 203.0.113.0/25 proto bird dev to-ext\n"
					   "#   203.0.113.0/26: route 203.0.113.0/26 proto bird dev to-ext\n"));

	SECTION("Flannel's file, written after the start and rewritten")
	{
		dir.write("subnet.env", "FLANNEL_NETWORK=192.0.2.0/24\nFLANNEL_SUBNET=192.0.2.1/26\n");
		requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent,
			      "FLANNEL_NETWORK not masqueraded", log);
		dir.write("subnet.env", "FLANNEL_NETWORK=198.18.0.0/16\n"); // outside within
		requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
			      "the old FLANNEL_NETWORK masqueraded again", log);
		CHECK_THAT(agent.log(), Catch::Contains("192.0.2.0/24 is no longer found on the node"));
	}
	SECTION("a withdrawn route: in force for the hold-down, then masqueraded")
	{
		const auto withdrawn = std::chrono::steady_clock::now();
		runOrFail("ip route del 203.0.113.0/26 dev to-ext proto bird && ip route del 203.0.113.0/25 dev to-ext proto bird");
		requireWithin([&] { return seenFrom(net, kServerV4) == kNodeV4; }, kHang, agent,
			      "the withdrawn range masqueraded", log);
		// Never before the hold-down: the log says when it left.
		CHECK(std::chrono::steady_clock::now() - withdrawn >= 1s);
		CHECK_THAT(agent.log(), Catch::Contains("203.0.113.0/26 is no longer found on the node"));
	}
	// Element updates, never a rewrite: the set keeps its handle.
	CHECK(runOrFail("nft -a list set inet ip-masq-agent nomasq-v4 | grep -o 'handle [0-9]*'") == handle);
	CHECK_THAT(agent.log(), Catch::Contains("(pod network change)") && Catch::Contains("by an element update"));
	(void)run("ip route del 198.18.77.0/24 2>/dev/null; ip route del 203.0.113.0/26 2>/dev/null; "
		  "ip route del 203.0.113.0/25 2>/dev/null");
}
