// SPDX-License-Identifier: Apache-2.0
// The egress keys with real traffic (traffic_support.h: a pod, the node and an external host
// in namespaces of their own): what source the external server sees with outputAddress as
// an address, a range and this node's address in a subnet (followed live), and with
// outputInterface and nonMasqueradeInterfaces on a node with two uplinks; IPv4 and IPv6; and a
// subnet's address held through pod-like churn of veths, addresses and routes beside 5,000
// other addresses.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <map>
#include <set>
#include <sys/wait.h>
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

namespace {

std::string metricValue(const std::string &series)
{
	return metricAt(kHealth, series);
}

// What a node with pods does all day, as `ip -batch` input: per pod a veth pair comes up
// with addresses next to the outputAddress subnets (IPv4 in the /24s on either side, IPv6
// in a neighbouring /64, under duplicate address detection) and a route, then all of it
// goes again; every tenth pod also adds an IPv6 address inside the subnet, higher than the
// node's, which changes no choice.
std::string podChurn(int pods)
{
	std::string batch;
	for (int k = 0; k < pods; k++) {
		const int host = k % 250 + 1;
		batch += fmt::format("link add vp{0} type veth peer name vp{0}p\n"
				     "address add 198.18.{1}.{2}/24 dev vp{0}\n"
				     "link set vp{0} up\nlink set vp{0}p up\n"
				     "address add 2001:db8:97::{3:x}/64 dev vp{0}\n"
				     "route add 198.18.3.{2}/32 dev vp{0}\n",
				     k, k % 2 == 0 ? 0 : 2, host, k + 1);
		if (k % 10 == 0)
			batch += fmt::format("address add 2001:db8:98::{:x}/64 dev vp{}\n", 0x100 + k, k);
		batch += fmt::format("route del 198.18.3.{1}/32 dev vp{0}\n"
				     "address del 198.18.{2}.{1}/24 dev vp{0}\n"
				     "link del vp{0}\n",
				     k, host, k % 2 == 0 ? 0 : 2);
	}
	return batch;
}

// Addresses flapping as fast as `ip` can change them (thousands a second), on an interface
// of their own, in the /24 below the IPv4 subnet: what a busy node's agents and CNI do in
// bursts, and what interrupts any read of every address.
std::string addressFlapping(int flaps)
{
	std::string batch;
	for (int i = 0; i < flaps; i++)
		batch += fmt::format("address add 198.18.0.{0}/24 dev flap0\n"
				     "address del 198.18.0.{0}/24 dev flap0\n",
				     i % 250 + 1);
	return batch;
}

} // namespace

TEST_CASE("an outputAddress subnet next to pod churn and 5,000 other addresses: the address held, "
	  "no table re-made, always ready")
{
	Topology net;
	SourceEchoServer echo(net.external);
	routeSnatTargetsBack(net);
	// The churn's veths run duplicate address detection, as a node's do.
	writeSysctl("net/ipv6/conf/default/accept_dad", "1");
	TempDir files;
	// 5,000 addresses on another interface: every read of all of them takes milliseconds,
	// long enough for the churn to interrupt it.
	std::string bulk;
	for (int i = 0; i < 5000; i++)
		bulk += fmt::format("address add 198.19.{}.{}/32 dev bulk0\n", i / 250, i % 250 + 1);
	files.write("bulk.batch", bulk);
	files.write("churn.batch", podChurn(300));
	files.write("flap.batch", addressFlapping(20000));
	runOrFail("ip link add bulk0 type veth peer name bulk0p && ip link set bulk0 up && "
		  "ip link set bulk0p up && ip -batch " + files.file("bulk.batch"));
	runOrFail("ip link add flap0 type veth peer name flap0p && ip link set flap0 up");
	runOrFail("ip addr add 198.18.1.5/24 dev to-ext && ip addr add 2001:db8:98::5/64 dev to-ext nodad");
	Agent agent(fmt::format("outputAddress: {}\noutputAddressIPv6: \"{}\"\n", kSubnetV4, kSubnetV6),
		    {"--enable-ipv6", "--health-addr=127.0.0.1:10263"});
	requireSource(net, agent, AF_INET, "198.18.1.5");
	requireSource(net, agent, AF_INET6, "2001:db8:98::5");
	requireWithin([] { return curlGet(kHealth + "/readyz") == "200 ok\n"; }, 5s, agent.process(),
		      "ready");
	const std::string syncs = metricValue("ip_masq_agent_syncs_total");
	REQUIRE_FALSE(syncs.empty());
	const double cpuBefore = cpuSeconds(agent.pid());

	// The churn runs in the background (300 pods once; 40,000 address changes a round,
	// repeated until the probes below are done; killed after 120 s) while connections and
	// probes check, again and again, what the node does. The flapping lasts until there
	// have been kMinProbes probes: a count, whatever the machine's speed.
	constexpr int kMinProbes = 20;
	const ChildStreams quiet{"/dev/null", ChildStreams::kDevNull, ChildStreams::kDevNull};
	const pid_t churn = spawnChild({"ip", "-batch", files.file("churn.batch")}, quiet);
	const pid_t flap = spawnChild(
		{"sh", "-c", fmt::format("while :; do ip -batch {} || exit 1; [ -e {} ] && exit 0; done",
					 files.file("flap.batch"), files.file("probed"))},
		quiet);
	REQUIRE(churn > 0);
	REQUIRE(flap > 0);
	const auto started = std::chrono::steady_clock::now();
	int probes = 0, notReady = 0, connections = 0;
	std::map<std::string, int> seen;
	std::string firstNotReady;
	int status = -1, flapStatus = -1;
	bool churning = true, flapping = true;
	while (churning || flapping) {
		if (churning && waitpid(churn, &status, WNOHANG) == churn)
			churning = false;
		if (flapping && waitpid(flap, &flapStatus, WNOHANG) == flap)
			flapping = false;
		if (!churning && probes >= kMinProbes)
			files.write("probed", ""); // the flapping ends with its current round
		if (std::chrono::steady_clock::now() - started > 120s) { // only a hang takes this long
			kill(churn, SIGKILL);
			kill(flap, SIGKILL);
			waitpid(churn, &status, 0);
			waitpid(flap, &flapStatus, 0);
			FAIL("the churn did not end within 120 s");
		}
		const std::string ready = curlGet(kHealth + "/readyz");
		probes++;
		if (ready != "200 ok\n" && notReady++ == 0)
			firstNotReady = ready;
		const Observation o = connectFromPod(net, probes % 2 ? AF_INET : AF_INET6, 2s);
		connections++;
		seen[o.ok() ? o.address : "no answer: " + o.error]++;
	}
	const double cpu = cpuSeconds(agent.pid()) - cpuBefore;
	const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
	std::string sources;
	for (const auto &[source, count] : seen)
		sources += fmt::format("{} x{}; ", source, count);
	const std::string log = agent.log();
	INFO("sources seen: " << sources << "\nfirst not ready: " << firstNotReady
			      << "\nagent log (end):\n" << log.substr(log.size() > 8000 ? log.size() - 8000 : 0));
	REQUIRE(WIFEXITED(status));
	CHECK(WEXITSTATUS(status) == 0);
	// The flapping exits 0 only once "probed" exists, written at kMinProbes probes (and the
	// 120 s bound fails inside the loop): this also says there were that many.
	REQUIRE(WIFEXITED(flapStatus));
	CHECK(WEXITSTATUS(flapStatus) == 0);
	CHECK(notReady == 0);
	// Every connection kept the subnets' addresses: never masqueraded, never stuck.
	CHECK(seen == std::map<std::string, int>{{"198.18.1.5", (connections + 1) / 2},
						 {"2001:db8:98::5", connections / 2}});
	// Not one commit: nothing in the churn changed what a subnet gives.
	CHECK(metricValue("ip_masq_agent_syncs_total") == syncs);
	CHECK(countOf(log, "node address change") == 0);
	CHECK(countOf(log, "no address in it") == 0);
	// Lost notifications, if the loop fell behind, are caught up with by one read once
	// the churn is over (10 s: only a hang misses it).
	requireWithin([] { return metricValue("ip_masq_agent_node_addresses_stale") == "0"; }, 10s,
		      agent.process(), "the addresses followed again");
	WARN(fmt::format("300 pods' churn and rounds of 40,000 address changes next to the subnets, 5,000 other addresses: {:.1f} s, "
			 "{} probes, {} connections; the agent used {:.0f} ms of CPU ({:.2f} ms per "
			 "pod)", took, probes, connections, cpu * 1000, cpu * 1000 / 300));
	runOrFail("ip link del bulk0 && ip link del flap0");
	writeSysctl("net/ipv6/conf/default/accept_dad", "0");
}

TEST_CASE("notifications lost while the agent was stopped: it subscribes again, reads once, and "
	  "SNATs to what the node has now")
{
	Topology net;
	SourceEchoServer echo(net.external);
	routeSnatTargetsBack(net);
	TempDir files;
	// More additions than the monitor's queue holds (about 2,000 fit), then the change
	// that matters, last: it is among the notifications the kernel drops.
	std::string flood;
	for (int i = 0; i < 6000; i++)
		flood += fmt::format("address add 198.19.{}.{}/32 dev bulk0\n", i / 250, i % 250 + 1);
	flood += "address add 198.18.1.3/24 dev to-ext\n";
	files.write("flood.batch", flood);
	runOrFail("ip link add bulk0 type veth peer name bulk0p && ip link set bulk0 up");
	runOrFail("ip addr add 198.18.1.5/24 dev to-ext");
	Agent agent(fmt::format("outputAddress: {}\n", kSubnetV4),
		    {"--health-addr=127.0.0.1:10263", "--v=1"});
	requireSource(net, agent, AF_INET, "198.18.1.5");
	const std::string syncs = metricValue("ip_masq_agent_syncs_total");

	REQUIRE(kill(agent.pid(), SIGSTOP) == 0);
	runOrFail("ip -batch " + files.file("flood.batch"));
	REQUIRE(kill(agent.pid(), SIGCONT) == 0);

	requireSwitch(net, agent, AF_INET, "198.18.1.5", "198.18.1.3", std::chrono::steady_clock::now());
	requireWithin([] { return metricValue("ip_masq_agent_node_addresses_stale") == "0"; }, 10s,
		      agent.process(), "the addresses followed again");
	const std::string log = agent.log();
	INFO(log.substr(log.size() > 6000 ? log.size() - 6000 : 0));
	// The path under test was taken: notifications were lost, and caught up with.
	CHECK(countOf(log, "the kernel dropped address notifications") >= 1);
	// One table for the one change that mattered.
	CHECK(std::stoi(metricValue("ip_masq_agent_syncs_total")) == std::stoi(syncs) + 1);
	CHECK(curlGet(kHealth + "/readyz") == "200 ok\n");
	runOrFail("ip link del bulk0 && ip addr del 198.18.1.3/24 dev to-ext && "
		  "ip addr del 198.18.1.5/24 dev to-ext");
}
