// SPDX-License-Identifier: Apache-2.0
// Following the node's routes for nonMasqueradeDiscovery against the real kernel, each case
// in network namespaces of its own: BGP with Debian's bird2 (a peer announcing a pod range,
// the node's blackhole for its own block, a withdraw, a prefix outside within), a
// Flannel-shaped VXLAN with onlink routes (iproute2), the routes the kernel removes without
// a word, and the scale case (100,000 routes of another protocol, 1,000 selected, 100 added
// and removed as changes), and the real CNI bridge and host-local plugins setting a pod up
// from the conflist whose ranges the agent reads. The route source feeds the discovered-range model as the daemon
// will; the model's clock is injected, so the hold-down is checked without waiting for it.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <optional>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/node/cni_conf.h"
#include "ip-masq-agent/node/discovered_ranges.h"
#include "ip-masq-agent/node/route_source.h"
#include "netns.h"
#include "traffic_support.h"

using namespace ipmasq;
using namespace std::chrono_literals;
using test::Netns;
using test::TempDir;
using Clock = DiscoveredRanges::Clock;
using Strings = std::vector<std::string>;

namespace {

Prefix prefix(const char *text)
{
	auto parsed = parsePrefix(text);
	REQUIRE(parsed);
	return *parsed;
}

Strings texts(const std::vector<Prefix> &prefixes)
{
	Strings out;
	for (const Prefix &p : prefixes)
		out.push_back(p.toString());
	return out;
}

// A route source opened in `node` and the model it feeds, as the daemon's loop will hold
// them. The model's clock is `now`, moved by the test.
class Follower
{
public:
	Follower(const Netns &node, RouteFilter filter, Duration holdDown)
		: model_(DiscoveredRanges::Settings{filter.within, holdDown, filter.ipv6, kMaxDiscoveredPrefixes})
	{
		auto opened = test::inNetns(node.fd(), [&] {
			return std::optional<Result<RouteSource>>(RouteSource::open(filter));
		});
		REQUIRE(opened);
		INFO((*opened ? "" : opened->error().message));
		REQUIRE(*opened);
		source_.emplace(std::move(**opened));
		model_.expect(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
	}

	// The first reading, or one asked for.
	void reread()
	{
		RouteSourceUpdate update = source_->reread();
		INFO((update.failure ? update.failure->message : ""));
		REQUIRE_FALSE(update.failure);
		model_.applyRoutes(update.update, now);
		model_.markCurrent(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
		changes_ += update.update.changes.size();
	}

	// Reads what the kernel says until `condition` holds; fails after kChangeSeen (a hang).
	void waitUntil(const std::function<bool()> &condition, const char *what)
	{
		const auto deadline = Clock::now() + test::kChangeSeen;
		while (!condition()) {
			INFO(what << "\nselected now:\n" << describe());
			REQUIRE(Clock::now() < deadline);
			pollfd pfd{source_->fd(), POLLIN, 0};
			(void)poll(&pfd, 1, 100);
			RouteSourceUpdate update = source_->drain();
			INFO((update.failure ? update.failure->message : ""));
			REQUIRE_FALSE(update.failure);
			model_.applyRoutes(update.update, now);
			changes_ += update.update.changes.size();
			if (update.update.mustReread)
				reread();
		}
	}

	// The set in force after the model's changes at `now`.
	Strings inForce()
	{
		model_.takeChanges(now);
		return texts(model_.inForce());
	}

	std::string describe() const
	{
		std::string out;
		for (const SelectedRoute &route : source_->routes().all())
			out += "  " + route.origin() + "\n";
		return out;
	}

	Strings origins() const
	{
		Strings out;
		for (const SelectedRoute &route : source_->routes().all())
			out.push_back(route.origin());
		return out;
	}

	RouteSource &source() { return *source_; }
	DiscoveredRanges &model() { return model_; }
	size_t changesSeen() const { return changes_; }

	Clock::time_point now{std::chrono::hours(1000)};

private:
	std::optional<RouteSource> source_;
	DiscoveredRanges model_;
	size_t changes_ = 0;
};

// bird, Debian's bird2, run in the foreground in `ns` with its own config and control
// socket (never the system's service or files); killed with the test (PR_SET_PDEATHSIG)
// or by the destructor.
class Bird
{
public:
	Bird(const Netns &ns, const TempDir &dir, const std::string &name, const std::string &config)
		: socket_(dir.file(name + ".ctl"))
	{
		const std::string conf = dir.file(name + ".conf");
		std::ofstream(conf) << config;
		const std::string pidFile = dir.file(name + ".pid");
		const std::string log = dir.file(name + ".log");
		const pid_t parent = getpid();
		pid_ = fork();
		REQUIRE(pid_ >= 0);
		if (pid_ == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent || setns(ns.fd(), CLONE_NEWNET) != 0)
				_exit(126);
			const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
			if (out >= 0) {
				dup2(out, 1);
				dup2(out, 2);
			}
			execlp("bird", "bird", "-f", "-c", conf.c_str(), "-s", socket_.c_str(), "-P",
			       pidFile.c_str(), static_cast<char *>(nullptr));
			_exit(127);
		}
		const auto ready = test::waitFor([&] { return control("show status").find("Daemon is up") != std::string::npos; },
						 test::kChangeSeen);
		INFO("bird " << name << " did not start; its log: " << test::runOrFail("cat " + log + " || true"));
		REQUIRE(ready);
	}
	~Bird()
	{
		kill(pid_, SIGKILL);
		waitpid(pid_, nullptr, 0);
	}
	Bird(const Bird &) = delete;
	Bird &operator=(const Bird &) = delete;

	// birdc on this bird's own control socket.
	std::string control(const std::string &command) const
	{
		std::string output;
		test::run("birdc -s " + socket_ + " " + command, &output, true);
		return output;
	}

private:
	std::string socket_;
	pid_t pid_ = -1;
};

// Timers short enough that a session is up in seconds, not minutes.
const std::string kBgpTimers = "connect delay time 1; connect retry time 1; error wait time 1, 2;";

} // namespace

TEST_CASE("BGP with bird2: a peer's pod range and the node's own blackhole; a withdraw after the hold-down")
{
	Netns node;
	Netns peer;
	node.runOrFail("ip link set lo up && ip link add uplink type veth peer name uplink netns " + peer.path() +
		       " && ip addr add 192.0.2.1/24 dev uplink && ip link set uplink up");
	peer.runOrFail("ip link set lo up && ip addr add 192.0.2.2/24 dev uplink && ip link set uplink up");
	TempDir dir;
	// The peer announces its pod block, and a service range (outside within: a BGP peer
	// may announce such prefixes, and the agent must not take them).
	Bird peerBird(peer, dir, "peer", fmt::format(R"(router id 192.0.2.2;
protocol device {{ }}
protocol static pods {{ ipv4; route 10.244.2.0/26 blackhole; route 10.96.0.0/12 blackhole; }}
protocol bgp node {{ local 192.0.2.2 as 64513; neighbor 192.0.2.1 as 64512; {}
  ipv4 {{ import none; export all; }}; }}
)", kBgpTimers));
	// The node installs what it learns, and a blackhole for its own block, as Calico does.
	Bird nodeBird(node, dir, "node", fmt::format(R"(router id 192.0.2.1;
protocol device {{ }}
protocol kernel {{ ipv4 {{ import none; export all; }}; }}
protocol static own_block {{ ipv4; route 10.244.1.0/26 blackhole; }}
protocol bgp peer {{ local 192.0.2.1 as 64512; neighbor 192.0.2.2 as 64513; {}
  ipv4 {{ import all; export none; }}; }}
)", kBgpTimers));

	RouteFilter filter;
	filter.protocols = {RouteProtocol{12}};
	filter.within = {prefix("10.244.0.0/16")};
	Follower follower(node, filter, 30s);
	follower.reread();
	follower.waitUntil([&] {
		return follower.source().routes().size() == 2 && follower.model().stats().outsideWithin == 1;
	}, "the node's blackhole and the peer's routes, installed by bird");
	CHECK(follower.origins() == Strings{"route blackhole 10.244.1.0/26 proto bird metric 32",
					    "route 10.244.2.0/26 proto bird metric 32 via 192.0.2.2 dev uplink"});
	CHECK(follower.inForce() == Strings{"10.244.1.0/26", "10.244.2.0/26"});
	// The service range is in the kernel, of the same protocol, and outside within: said
	// once, not kept.
	CHECK_THAT(node.runOrFail("ip route show proto bird"), Catch::Contains("10.96.0.0/12"));
	const auto messages = follower.model().takeMessages();
	REQUIRE(messages.size() == 1);
	CHECK(messages[0].text == "nonMasqueradeDiscovery: 10.96.0.0/12 (route 10.96.0.0/12 proto bird metric "
				  "32 via 192.0.2.2 dev uplink, from routes) is not inside within "
				  "[10.244.0.0/16]: ignored (said once per prefix)");
	auto address = parseAddress("10.244.2.7");
	REQUIRE(address);
	const auto covering = follower.model().covering(*address);
	REQUIRE(covering.size() == 1);
	CHECK(covering[0].origins[0].text == "route 10.244.2.0/26 proto bird metric 32 via 192.0.2.2 dev uplink");

	// The withdraw: the peer's pods protocol goes down, bird removes the route.
	CHECK_THAT(peerBird.control("disable pods"), Catch::Contains("disabled"));
	follower.waitUntil([&] { return follower.source().routes().size() == 1; }, "the withdrawn route removed");
	CHECK_THAT(node.runOrFail("ip route show proto bird"), !Catch::Contains("10.244.2.0/26"));
	follower.now += 29s;
	CHECK(follower.inForce() == Strings{"10.244.1.0/26", "10.244.2.0/26"}); // held down
	follower.now += 1s;
	CHECK(follower.inForce() == Strings{"10.244.1.0/26"});
	// Announced again: back at once.
	CHECK_THAT(peerBird.control("enable pods"), Catch::Contains("enabled"));
	follower.waitUntil([&] { return follower.source().routes().size() == 2; }, "the route announced again");
	CHECK(follower.inForce() == Strings{"10.244.1.0/26", "10.244.2.0/26"});
	CHECK(follower.source().rereads() == 1); // all of it from notifications
}

TEST_CASE("BGP with bird2 through the running agent: the peer's pod range is not masqueraded, the "
	  "node's own blackholed block is in the set, a prefix outside within is not, a withdraw is "
	  "masqueraded after the hold-down")
{
	// The node is this test's namespace; the external host stands in for a peer node that
	// announces its pod block 192.0.2.0/24 (its second address is in it) and a service range
	// outside `within`. The node's bird installs what it learns and a blackhole for its own
	// block, as Calico does; the agent reads both from the kernel.
	test::Topology net;
	test::SourceEchoServer server(net.external);
	TempDir dir;
	// The agent first: its nat table brings conntrack into the namespace, so the BGP session
	// is tracked from its first packet (picked up mid-stream it would be masqueraded with a
	// new port and reset once).
	dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n"
			    "nonMasqueradeDiscovery:\n"
			    "  within: [192.0.2.0/24, 198.18.0.0/15]\n"
			    "  routeProtocols: [bird]\n"
			    "  holdDown: 1s\n");
	test::AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	test::requireWithin([] { return test::curlGet("http://127.0.0.1:10263/readyz").rfind("200", 0) == 0; },
			    test::kChangeSeen, agent, "the agent ready before bird starts");
	Bird peerBird(net.external, dir, "peer", fmt::format(R"(router id 203.0.113.2;
protocol device {{ }}
protocol static pods {{ ipv4; route 192.0.2.0/24 blackhole; }}
protocol static services {{ ipv4; route 203.0.113.128/25 blackhole; }}
protocol bgp node {{ local 203.0.113.2 as 64513; neighbor 203.0.113.1 as 64512; {}
  ipv4 {{ import none; export all; }}; }}
)", kBgpTimers));
	Bird nodeBird(Netns::current(), dir, "node", fmt::format(R"(router id 203.0.113.1;
protocol device {{ }}
protocol kernel {{ ipv4 {{ import none; export all; }}; }}
protocol static own_block {{ ipv4; route 198.18.1.0/26 blackhole; }}
protocol bgp peer {{ local 203.0.113.1 as 64512; neighbor 203.0.113.2 as 64513; {}
  ipv4 {{ import all; export none; }}; }}
)", kBgpTimers));
	const auto seen = [&net](const std::string &server) {
		return test::connectFromPod(net, AF_INET, server, test::kServerPort).address;
	};
	const auto context = [&agent] {
		std::string set;
		(void)test::run("nft list set inet ip-masq-agent nomasq-v4 2>&1; ip route show proto bird", &set);
		return agent.log() + "\n" + set;
	};
	test::requireWithin([] { return test::curlGet("http://127.0.0.1:10263/readyz").rfind("200", 0) == 0; },
			    test::kChangeSeen, agent, "the agent ready", context);
	test::requireWithin([&] { return seen(test::kOtherServerV4) == test::kPodV4; }, test::kChangeSeen, agent,
			    "the peer's pod range learned over BGP, not masqueraded", context);
	CHECK(seen(test::kServerV4) == test::kNodeV4);
	std::string set;
	(void)test::run("nft list set inet ip-masq-agent nomasq-v4", &set);
	CHECK_THAT(set, Catch::Contains("198.18.1.0/26") && Catch::Contains("192.0.2.0/24") &&
				!Catch::Contains("203.0.113.128/25"));
	CHECK_THAT(agent.log(), Catch::Contains("203.0.113.128/25") && Catch::Contains("is not inside within"));

	// The withdraw: the peer's pods protocol goes down, bird removes the route, and the
	// agent masquerades the range again once the hold-down ends, not before.
	const auto withdrawn = Clock::now();
	CHECK_THAT(peerBird.control("disable pods"), Catch::Contains("disabled"));
	test::requireWithin([&] { return seen(test::kOtherServerV4) == test::kNodeV4; }, test::kChangeSeen, agent,
			    "the withdrawn range masqueraded again", context);
	CHECK(Clock::now() - withdrawn >= 1s);
	CHECK_THAT(agent.log(), Catch::Contains("192.0.2.0/24 is no longer found on the node"));
}

TEST_CASE("Flannel-shaped VXLAN: onlink routes through flannel.1, followed; its link going down")
{
	Netns node;
	node.runOrFail("ip link set lo up && ip link add eth0 type veth peer name eth0p && ip link set eth0 up "
		       "&& ip link set eth0p up && ip addr add 192.0.2.1/24 dev eth0 "
		       "&& ip link add flannel.1 type vxlan id 1 local 192.0.2.1 dev eth0 dstport 8472 nolearning "
		       "&& ip addr add 10.244.1.0/32 dev flannel.1 && ip link set flannel.1 up "
		       "&& ip route add 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink "
		       "&& ip route add 10.244.3.0/24 via 10.244.3.0 dev flannel.1 onlink "
		       // Not through flannel.1: not selected, whatever its protocol.
		       "&& ip route add 10.244.9.0/24 via 192.0.2.9 dev eth0");
	RouteFilter filter;
	filter.interfaces = {InterfacePattern{"flannel.1", false, {}}};
	filter.within = {prefix("10.244.0.0/16")};
	Follower follower(node, filter, 0s);
	follower.reread();
	CHECK(follower.origins() == Strings{"route 10.244.2.0/24 proto boot via 10.244.2.0 dev flannel.1",
					    "route 10.244.3.0/24 proto boot via 10.244.3.0 dev flannel.1"});
	CHECK(follower.inForce() == Strings{"10.244.2.0/24", "10.244.3.0/24"});

	// A node joins, another leaves (flanneld's own changes).
	node.runOrFail("ip route add 10.244.4.0/24 via 10.244.4.0 dev flannel.1 onlink "
		       "&& ip route del 10.244.2.0/24");
	follower.waitUntil([&] { return follower.inForce() == Strings{"10.244.3.0/24", "10.244.4.0/24"}; },
			   "a route added and one removed");
	// flannel.1 goes down: the kernel removes its IPv4 routes without a notification.
	node.runOrFail("ip link set flannel.1 down");
	follower.waitUntil([&] { return follower.inForce().empty(); }, "routes gone with the link");
	CHECK(node.runOrFail("ip route show dev flannel.1").empty());
	// Up again, flanneld adds its routes again.
	node.runOrFail("ip link set flannel.1 up && ip route add 10.244.5.0/24 via 10.244.5.0 dev flannel.1 onlink");
	follower.waitUntil([&] { return follower.inForce() == Strings{"10.244.5.0/24"}; }, "the route added again");
	CHECK(follower.source().rereads() == 1);
}

TEST_CASE("routes the kernel removes with an address are found by a new reading; replace, IPv6, types")
{
	Netns node;
	node.runOrFail("ip link set lo up && ip link add eth0 type veth peer name eth0p && ip link set eth0 up "
		       "&& ip link set eth0p up && ip addr add 192.0.2.1/24 dev eth0 "
		       "&& ip -6 addr add 2001:db8::1/64 dev eth0 nodad "
		       "&& ip route add 10.244.1.0/26 via 192.0.2.2 proto bird "
		       "&& ip route add unreachable 10.244.2.0/26 proto bird "
		       "&& ip route add 10.244.3.0/26 via 192.0.2.2 proto bird table 100 "
		       "&& ip -6 route add fd00:10:244:1::/64 via 2001:db8::2 proto bird");
	RouteFilter filter;
	filter.protocols = {RouteProtocol{12}};
	filter.within = {prefix("10.244.0.0/16"), prefix("fd00:10:244::/56")};
	filter.ipv6 = true;
	Follower follower(node, filter, 0s);
	follower.reread();
	CHECK(follower.origins() == Strings{"route 10.244.1.0/26 proto bird via 192.0.2.2 dev eth0",
					    "route unreachable 10.244.2.0/26 proto bird",
					    "route fd00:10:244:1::/64 proto bird metric 1024 via 2001:db8::2 dev eth0"});

	// Replaced by a route of another protocol: no longer selected.
	node.runOrFail("ip route replace 10.244.2.0/26 via 192.0.2.3 proto static");
	follower.waitUntil([&] { return follower.source().routes().size() == 2; }, "the replaced route dropped");
	// The address goes: the kernel flushes the IPv4 route through it, and says nothing.
	node.runOrFail("ip addr del 192.0.2.1/24 dev eth0");
	follower.waitUntil([&] { return follower.source().routes().size() == 1; }, "the flushed route dropped");
	CHECK(follower.origins() == Strings{"route fd00:10:244:1::/64 proto bird metric 1024 via 2001:db8::2 dev eth0"});
	CHECK(follower.source().rereads() == 2); // the address deletion asked for one
	CHECK(follower.inForce() == Strings{"fd00:10:244:1::/64"});

	// Without IPv6 the IPv6 routes are not even read.
	RouteFilter v4 = filter;
	v4.ipv6 = false;
	Follower ipv4Only(node, v4, 0s);
	ipv4Only.reread();
	CHECK(ipv4Only.source().routes().size() == 0);
}

TEST_CASE("scale: 100,000 routes of another protocol and 1,000 selected; 100 added and removed as changes")
{
	Netns node;
	node.runOrFail("ip link set lo up && ip link add eth0 type veth peer name eth0p && ip link set eth0 up "
		       "&& ip link set eth0p up && ip addr add 192.0.2.1/24 dev eth0");
	TempDir dir;
	{
		std::ofstream batch(dir.file("routes"));
		// A BGP node's table: 100,000 /32s of proto bgp in 198.18.0.0/15.
		for (int i = 0; i < 100000; i++)
			batch << fmt::format("route add 198.{}.{}.{}/32 via 192.0.2.2 proto bgp\n", 18 + i / 65536,
					     i / 256 % 256, i % 256);
		// The pod network: 1,000 /26 blocks of proto bird.
		for (int i = 0; i < 1000; i++)
			batch << fmt::format("route add 10.244.{}.{}/26 via 192.0.2.3 proto bird\n", i / 4, (i % 4) * 64);
	}
	node.runOrFail("ip -batch " + dir.file("routes"));
	RouteFilter filter;
	filter.protocols = {RouteProtocol{12}};
	filter.within = {prefix("10.244.0.0/16")};
	Follower follower(node, filter, 0s);
	follower.reread();
	REQUIRE(follower.source().routes().size() == 1000);
	Strings expected;
	for (int i = 0; i < 1000; i++)
		expected.push_back(fmt::format("10.244.{}.{}/26", i / 4, (i % 4) * 64));
	std::sort(expected.begin(), expected.end());
	Strings inForce = follower.inForce();
	std::sort(inForce.begin(), inForce.end());
	CHECK(inForce == expected);

	// 100 more selected routes, then gone again: each seen as one change.
	{
		std::ofstream add(dir.file("add")), del(dir.file("del"));
		for (int i = 0; i < 100; i++) {
			const std::string route = fmt::format("10.244.{}.{}/29 via 192.0.2.3 proto bird", 250 + i / 32,
							      (i % 32) * 8);
			add << "route add " << route << "\n";
			del << "route del " << route << "\n";
		}
	}
	const size_t before = follower.changesSeen();
	node.runOrFail("ip -batch " + dir.file("add"));
	follower.waitUntil([&] { return follower.source().routes().size() == 1100; }, "100 routes added");
	CHECK(follower.changesSeen() - before == 100);
	CHECK(follower.model().takeChanges(follower.now).added.size() == 100);
	// Churn of the other protocol costs nothing kept.
	node.runOrFail("ip route add 198.19.255.1/32 via 192.0.2.2 proto bgp && ip -batch " + dir.file("del"));
	follower.waitUntil([&] { return follower.source().routes().size() == 1000; }, "100 routes removed");
	CHECK(follower.changesSeen() - before == 200);
	CHECK(follower.model().takeChanges(follower.now).removed.size() == 100);
	CHECK(follower.source().rereads() == 1);
	CHECK(follower.source().overruns() == 0);
}

TEST_CASE("the real bridge and host-local plugins set a pod up from the conflist whose ranges are read")
{
	Netns node;
	Netns pod;
	node.runOrFail("ip link set lo up");
	TempDir dir;
	const std::string confDir = dir.file("net.d");
	test::runOrFail("mkdir " + confDir);
	// host-local keeps its leases in the test's directory, not /var/lib/cni.
	const std::string plugin = fmt::format(R"({{"type": "bridge", "bridge": "cni0", "isGateway": true,
  "ipam": {{"type": "host-local", "dataDir": "{}",
    "ranges": [[{{"subnet": "10.244.1.0/24"}}]], "routes": [{{"dst": "0.0.0.0/0"}}]}}}})",
					       dir.file("ipam"));
	std::ofstream(confDir + "/10-podnet.conflist")
		<< R"({"cniVersion": "0.4.0", "name": "podnet", "plugins": [)" << plugin << "]}";
	auto files = readCniConfDir(confDir);
	REQUIRE(files);
	REQUIRE(*files);
	REQUIRE((*files)->size() == 1);
	const Result<CniConf> &conf = (*files)->front().conf;
	INFO((conf ? "" : conf.error().message));
	REQUIRE(conf);
	REQUIRE(conf->subnets.size() == 1);
	const Prefix subnet = conf->subnets[0].prefix;
	CHECK(subnet.toString() == "10.244.1.0/24");
	CHECK(conf->subnets[0].plugin == "bridge");

	// The runtime's part: the plugin's config with the list's name and version, on stdin.
	std::ofstream(dir.file("bridge.json"))
		<< plugin.substr(0, plugin.size() - 1) << R"(, "cniVersion": "0.4.0", "name": "podnet"})";
	const std::string result = node.runOrFail(fmt::format(
		"CNI_COMMAND=ADD CNI_CONTAINERID=route-discovery CNI_NETNS={} CNI_IFNAME=eth0 "
		"CNI_PATH=/usr/lib/cni /usr/lib/cni/bridge < {}",
		pod.path(), dir.file("bridge.json")));
	INFO(result);
	const size_t at = result.find("\"address\": \"");
	REQUIRE(at != std::string::npos);
	const std::string cidr = result.substr(at + 12, result.find('"', at + 12) - at - 12);
	const size_t slash = cidr.find('/');
	auto podAddress = parseAddress(cidr.substr(0, slash));
	REQUIRE(podAddress);
	CHECK(subnet.first() <= *podAddress);
	CHECK(*podAddress <= subnet.last());
	CHECK_THAT(pod.runOrFail("ip -4 addr show dev eth0"), Catch::Contains(cidr));

	// The bridge's connected route is what routeInterfaces: [cni0] selects on the node.
	RouteFilter filter;
	filter.interfaces = {InterfacePattern{"cni0", false, {}}};
	filter.within = {prefix("10.244.0.0/16")};
	Follower follower(node, filter, 0s);
	follower.reread();
	CHECK(follower.origins() == Strings{"route 10.244.1.0/24 proto kernel dev cni0"});
}
