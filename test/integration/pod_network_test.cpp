// SPDX-License-Identifier: Apache-2.0
// The pod network found from the node, through the running agent, judged by real traffic:
// a pod namespace connects through the node (this test's namespace) to an external host,
// which says the source address it saw. The agent's config names no pod range; what it
// finds on the node decides: routes installed by "bird" (as Calico's BGP daemon installs
// them), Flannel's subnet.env, written after the agent started and rewritten live. A
// withdrawn range is masqueraded again after the hold-down, never before the withdraw; a
// prefix outside `within` is ignored. A subnet.env that goes bad (malformed, unreadable)
// keeps its last good range in force and says it is stale (/metrics, /readyz?verbose);
// --once reads the routes once; IPv6 routes join nomasq-v6. (route_discovery_test runs the
// route source against real bird2, VXLAN and the CNI plugins; this test runs the whole path
// into the kernel.)
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "agent_process.h"
#include "netns.h"
#include "pod_network_support.h"
#include "traffic_support.h"

using namespace ipmasq::test;
using namespace std::chrono_literals;

namespace {

// The handles of the agent's table and of `set`: an element update keeps both.
std::string handles(const std::string &set)
{
	return runOrFail("nft -a list table inet ip-masq-agent | grep -o 'ip-masq-agent { # handle [0-9]*'") +
	       runOrFail(fmt::format("nft -a list set inet ip-masq-agent {} | grep -o 'handle [0-9]*'", set));
}

std::string flannelStale()
{
	return staleGauge("flannelSubnetEnv");
}

} // namespace

TEST_CASE_METHOD(PodNetworkNode,
		 "ranges found on the node (routes by protocol, Flannel's subnet.env) are not masqueraded, "
		 "live, and leave after the hold-down")
{
	// The pod network stands in as 203.0.113.0/24 (the external host's link) and
	// 192.0.2.0/24 (its second address): the agent masquerades both unless it finds them.
	dir.write("config", discoveryConfig("203.0.113.0/24, 192.0.2.0/24",
					    "  routeProtocols: [bird]\n  flannelSubnetEnv: " + subnetEnv + "\n"));
	// A route as a BGP daemon installs it (the same path as the link's own route), and one
	// outside `within`.
	runOrFail("ip route add 203.0.113.0/26 dev to-ext proto bird");
	runOrFail("ip route add 203.0.113.0/25 dev to-ext proto bird");
	runOrFail("ip route add 198.18.77.0/24 via 203.0.113.2 proto bird");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	const auto log = [&agent] { return agent.log() + "\n" + nomasqSet(); };
	// Ready: the table is in force (before it, nothing is masqueraded at all).
	requireWithin(ready, kHang, agent, "the agent ready", log);
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

TEST_CASE_METHOD(PodNetworkNode,
		 "a subnet.env that goes bad after a good read: the last good range stays in force and in the "
		 "kernel, the source is stale in /metrics and /readyz?verbose, until the file is good again")
{
	dir.write("config", discoveryConfig("203.0.113.0/24, 192.0.2.0/24", "  flannelSubnetEnv: " + subnetEnv + "\n"));
	dir.write("subnet.env", "FLANNEL_NETWORK=192.0.2.0/24\nFLANNEL_SUBNET=192.0.2.1/26\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	const auto context = [&] {
		return agent.log() + "\n" + nomasqSet() + "\n/readyz?verbose: " + curlGet(kHealth + "/readyz?verbose");
	};
	requireWithin(ready, kHang, agent, "the agent ready", context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent,
		      "FLANNEL_NETWORK not masqueraded", context);
	CHECK(flannelStale() == "0");
	const std::string handle = handles("nomasq-v4");

	// Malformed: the range read before stays, in the kernel's set and for the traffic,
	// past the hold-down (1 s): a failed read is not a withdraw.
	dir.write("subnet.env", "FLANNEL_NETWORK=192.0.2.0/33\nFLANNEL_SUBNET=192.0.2.1/26\n");
	requireWithin([] { return flannelStale() == "1"; }, kHang, agent, "the source stale in /metrics", context);
	const std::string verbose = curlGet(kHealth + "/readyz?verbose");
	CHECK_THAT(verbose, Catch::StartsWith("200 ok\n"));
	CHECK_THAT(verbose, Catch::Contains("warning: pod network: " + subnetEnv + " could not be read (" + subnetEnv +
					    ":1: FLANNEL_NETWORK: ") &&
				    Catch::Contains("192.0.2.0/33") && Catch::Contains("what it gave before (1 range) stays in force"));
	CHECK_THAT(agent.log(), Catch::Contains(subnetEnv + ":1: FLANNEL_NETWORK"));
	std::this_thread::sleep_for(2s);
	CHECK_THAT(nomasqSet(), Catch::Contains("192.0.2.0/24"));
	CHECK(seenFrom(net, kOtherServerV4) == kPodV4);
	CHECK(metricAt(kHealth, "ip_masq_agent_discovered_ranges{source=\"flannelSubnetEnv\"}") == "1");

	// Good again, with another range: not stale, no warning, the new range in force and
	// the old one masqueraded again (after its hold-down).
	dir.write("subnet.env", "FLANNEL_NETWORK=203.0.113.0/24\nFLANNEL_SUBNET=203.0.113.1/26\n");
	requireWithin([&] { return seenFrom(net, kServerV4) == kPodV4; }, kHang, agent, "the new range not masqueraded",
		      context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the old range masqueraded again", context);
	CHECK(flannelStale() == "0");
	CHECK_THAT(curlGet(kHealth + "/readyz?verbose"),
		   !Catch::Contains("warning: pod network") &&
			   Catch::Contains("info: pod network, not masqueraded: 203.0.113.0/24: FLANNEL_NETWORK in " +
					   subnetEnv + ":1"));

	// Unreadable (a directory where the file was, a symlink put in place by a rename, so the
	// file is never absent): stale again, the range in force stays.
	runOrFail(fmt::format("ln -s {0} {1}.dir && mv -T {1}.dir {1}", dir.path(), subnetEnv));
	requireWithin([] { return flannelStale() == "1"; }, kHang, agent, "an unreadable file stale", context);
	CHECK_THAT(curlGet(kHealth + "/readyz?verbose"),
		   Catch::Contains("warning: pod network: " + subnetEnv + " could not be read (" + subnetEnv));
	std::this_thread::sleep_for(2s);
	CHECK(seenFrom(net, kServerV4) == kPodV4);
	CHECK_THAT(nomasqSet(), Catch::Contains("203.0.113.0/24"));
	dir.write("subnet.env", "FLANNEL_NETWORK=203.0.113.0/24\n");
	requireWithin([] { return flannelStale() == "0"; }, kHang, agent, "the file good again", context);
	CHECK(handles("nomasq-v4") == handle);
}

TEST_CASE("--once puts a route of the configured protocol into the kernel's non-masquerade set")
{
	TempDir dir;
	dir.write("config", discoveryConfig("198.18.0.0/15", "  routeProtocols: [bird]\n"));
	runOrFail("ip link add disc0 type veth peer name disc1 && ip link set disc0 up && ip link set disc1 up && "
		  "ip route add 198.18.128.0/24 dev disc0 proto bird && "
		  "ip route add 198.18.129.0/24 dev disc0 proto static && "
		  "ip route add 198.51.100.0/24 dev disc0 proto bird");
	deleteAgentTable();
	std::string out;
	const int status = run(fmt::format("{} --once --config={} 2>&1", agentBinary(), dir.file("config")), &out);
	INFO(out);
	CHECK(status == 0);
	const std::string set = nomasqSet();
	INFO(set);
	CHECK_THAT(set, Catch::Contains("198.18.128.0/24"));
	CHECK_THAT(set, !Catch::Contains("198.18.129.0/24")); // another protocol
	CHECK_THAT(set, !Catch::Contains("198.51.100.0/24")); // outside within
	CHECK_THAT(set, Catch::Contains("10.0.0.0/8"));
	deleteAgentTable();
	(void)run("ip link del disc0");
}

TEST_CASE_METHOD(PodNetworkNode,
		 "IPv6: a route of the configured protocol in 2001:db8::/32 joins nomasq-v6, and leaves it after "
		 "the hold-down when withdrawn, by element updates")
{
	dir.write("config", discoveryConfig("2001:db8::/32", "  routeProtocols: [bird]\n"));
	AgentProcess agent({"--config=" + dir.file("config"), "--enable-ipv6", "--health-addr=127.0.0.1:10263"});
	const auto seenV6 = [&] { return connectFromPod(net, AF_INET6, kServerV6, kServerPort).address; };
	const auto context = [&] { return agent.log() + "\n" + nomasqSet("nomasq-v6"); };
	requireWithin(ready, kHang, agent, "the agent ready", context);
	CHECK(seenV6() == kNodeV6); // nothing found yet: masqueraded
	const std::string handle = handles("nomasq-v6");

	// The server's address, on the link's own path, announced as a BGP daemon installs it.
	runOrFail("ip -6 route add 2001:db8:2::/80 dev to-ext proto bird");
	requireWithin([&] { return seenV6() == kPodV6; }, kHang, agent, "the discovered IPv6 range not masqueraded",
		      context);
	CHECK_THAT(nomasqSet("nomasq-v6"), Catch::Contains("2001:db8:2::/80"));
	CHECK(connectFromPod(net, AF_INET, kServerV4, kServerPort).address == kNodeV4); // IPv4 untouched

	runOrFail("ip -6 route del 2001:db8:2::/80 dev to-ext proto bird");
	requireWithin([&] { return seenV6() == kNodeV6; }, kHang, agent, "the withdrawn IPv6 range masqueraded",
		      context);
	CHECK_THAT(nomasqSet("nomasq-v6"), !Catch::Contains("2001:db8:2::/80"));
	CHECK_THAT(agent.log(), Catch::Contains("pod network: 2001:db8:2::/80 is no longer found on the node"));
	CHECK(handles("nomasq-v6") == handle);
	CHECK_THAT(agent.log(), Catch::Contains("(pod network change)") && Catch::Contains("by an element update"));
}
