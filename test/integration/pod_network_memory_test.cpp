// SPDX-License-Identifier: Apache-2.0
// What the pod network keeps across a restart and an edit of its section, through the running
// agent, judged by real traffic (pod_network_support.h): a restart while subnet.env is
// malformed, while the route dump fails (an injected fault), and before bird has installed
// its routes (bird's kernel protocol emulated: the routes are added and deleted with `ip
// route ... proto bird`, as it does); holdDown edited during a hold-down and during a stale
// read; a source removed from the section, `within` narrowed. And the files' watch and names: a directory deleted and made again is read through
// its watch, set again, not by the 10 s safety net; 65,646 CNI file names come and go beside
// the agent, and the names it holds follow the files present.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "netns.h"
#include "pod_network_support.h"
#include "traffic_support.h"

using namespace ipmasq::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// The pod connects to `server` every 50 ms until `span` after `start`: what the external
// host saw of each connection whose source was not the pod's (empty: every one kept it).
std::vector<std::string> notFromPod(const Topology &net, const std::string &server, Clock::time_point start,
				    std::chrono::milliseconds span)
{
	std::vector<std::string> others;
	for (int i = 0; i < 1000 && Clock::now() - start < span; i++) {
		const Observation seen = connectFromPod(net, AF_INET, server, kServerPort);
		if (seen.address != kPodV4)
			others.push_back(seen.ok() ? seen.address : seen.error);
		std::this_thread::sleep_for(50ms);
	}
	return others;
}

std::vector<std::string> agentArgs(const TempDir &dir, std::vector<std::string> more = {})
{
	more.insert(more.begin(), {"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	return more;
}

std::string verbose()
{
	return curlGet(kHealth + "/readyz?verbose");
}

// A first run of the agent until `inForce` holds, stopped as a rollout stops it (SIGTERM: its
// table stays in the kernel).
void runUntil(const std::vector<std::string> &args, const std::function<bool()> &inForce)
{
	AgentProcess first(args);
	requireWithin(ready, kHang, first, "the first run ready");
	requireWithin(inForce, kHang, first, "the first run's range not masqueraded");
	REQUIRE(first.stop(SIGTERM) == 0);
}

} // namespace

TEST_CASE_METHOD(PodNetworkNode,
		 "a restart while subnet.env is malformed keeps the range the last run had in force, stale, "
		 "until the file reads; --dry-run says what it could not read")
{
	deleteAgentTable();
	dir.write("config", discoveryConfig("192.0.2.0/24, 203.0.113.0/24", "  flannelSubnetEnv: " + subnetEnv + "\n"));
	dir.write("subnet.env", "FLANNEL_NETWORK=192.0.2.0/24\nFLANNEL_SUBNET=192.0.2.1/26\n");
	runUntil(agentArgs(dir), [&] { return seenFrom(net, kOtherServerV4) == kPodV4; });
	CHECK_THAT(nomasqSet("discovered-flannel-v4"), Catch::Contains("192.0.2.0/24"));

	dir.write("subnet.env", "FLANNEL_NETWORK=not-a-cidr\n");
	const auto start = Clock::now();
	AgentProcess agent(agentArgs(dir));
	const auto context = [&] {
		return agent.log() + "\n" + nomasqSet() + "\n/readyz?verbose: " + verbose();
	};
	// The old table is in force until the first sync; after it, the kept range: every
	// connection keeps the pod's source.
	const std::vector<std::string> masqueraded = notFromPod(net, kOtherServerV4, start, 3s);
	INFO(context());
	CHECK(masqueraded.size() == 0u);
	requireWithin([] { return staleGauge("flannelSubnetEnv") == "1"; }, kHang, agent, "the source stale",
		      context);
	CHECK(metricAt(kHealth, "ip_masq_agent_discovered_ranges{source=\"flannelSubnetEnv\"}") == "1");
	CHECK_THAT(verbose(), Catch::Contains("warning: pod network: " + subnetEnv + " could not be read (" +
					      subnetEnv + ":1: FLANNEL_NETWORK") &&
				      Catch::Contains("what the agent's table held for flannelSubnetEnv when the "
						      "agent started (1 range) stays in force until it reads"));
	CHECK_THAT(verbose(), Catch::Contains("info: pod network, not masqueraded: 192.0.2.0/24: in the agent's "
					      "table when it started"));
	CHECK_THAT(nomasqSet("discovered-flannel-v4"), Catch::Contains("192.0.2.0/24"));
	// The dry run keeps nothing: it says what it could not read, and its table lacks it.
	std::string dryRun;
	REQUIRE(run(fmt::format("{} --config={} --dry-run 2>&1", agentBinary(), dir.file("config")), &dryRun) == 0);
	CHECK_THAT(dryRun, Catch::Contains(subnetEnv + " (flannelSubnetEnv): " + subnetEnv + ":1: FLANNEL_NETWORK") &&
				   Catch::Contains("its ranges are missing here: only the running agent and --once keep") &&
				   !Catch::Contains("192.0.2.0/24"));

	// Fixed, with another range: not stale; the new range comes and the kept one leaves after
	// the hold-down (1 s).
	const auto fixed = Clock::now();
	dir.write("subnet.env", "FLANNEL_NETWORK=203.0.113.0/24\n");
	requireWithin([] { return staleGauge("flannelSubnetEnv") == "0"; }, kHang, agent, "not stale", context);
	requireWithin([&] { return seenFrom(net, kServerV4) == kPodV4; }, kHang, agent, "the new range", context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the kept range masqueraded again", context);
	CHECK(Clock::now() - fixed >= 1s);
	const std::string set = nomasqSet("discovered-flannel-v4");
	CHECK_THAT(set, Catch::Contains("203.0.113.0/24") && !Catch::Contains("192.0.2.0/24"));
	CHECK_THAT(agent.log(), Catch::Contains("pod network: 192.0.2.0/24 is no longer found on the node"));
	deleteAgentTable();
}

TEST_CASE_METHOD(PodNetworkNode,
		 "a first start (no table) while subnet.env is malformed has nothing to keep: stale, and says so")
{
	deleteAgentTable();
	dir.write("config", discoveryConfig("192.0.2.0/24", "  flannelSubnetEnv: " + subnetEnv + "\n"));
	dir.write("subnet.env", "FLANNEL_NETWORK=not-a-cidr\n");
	AgentProcess agent(agentArgs(dir));
	const auto context = [&] { return verbose(); };
	requireWithin(ready, kHang, agent, "the agent ready", context);
	requireWithin([] { return staleGauge("flannelSubnetEnv") == "1"; }, kHang, agent, "the source stale",
		      context);
	CHECK(seenFrom(net, kOtherServerV4) == kNodeV4);
	const std::string nothing = "nothing of it is in force: the agent's table held none of its ranges, and no "
				    "earlier reading of it is known";
	CHECK_THAT(verbose(), Catch::Contains("could not be read (" + subnetEnv + ":1: FLANNEL_NETWORK") &&
				      Catch::Contains(nothing));
	CHECK_THAT(agent.log(), Catch::Contains(nothing));
	deleteAgentTable();
}

TEST_CASE_METHOD(PodNetworkNode,
		 "a restart while the route dump fails (an injected fault) keeps the routes' ranges the last run "
		 "had in force, stale; once the routes read, they are what the routes say")
{
	deleteAgentTable();
	dir.write("config", discoveryConfig("203.0.113.0/24", "  routeProtocols: [bird]\n"));
	runOrFail("ip route add 203.0.113.0/26 dev to-ext proto bird");
	runUntil(agentArgs(dir), [&] { return seenFrom(net, kServerV4) == kPodV4; });

	const auto start = Clock::now();
	auto agent = std::make_unique<AgentProcess>(agentArgs(dir),
						    std::vector<std::string>{"IP_MASQ_AGENT_TEST_FAULT=route-dump-fails"});
	const auto context = [&] { return agent->log() + "\n/readyz?verbose: " + verbose(); };
	const std::vector<std::string> masqueraded = notFromPod(net, kServerV4, start, 3s);
	INFO(context());
	CHECK(masqueraded.size() == 0u);
	requireWithin([] { return staleGauge("routes") == "1"; }, kHang, *agent, "the routes stale", context);
	CHECK_THAT(verbose(), Catch::Contains("warning: pod network: routes could not be read (cannot read the node's "
					      "IPv4 routes: the dump failed") &&
				      Catch::Contains("what the agent's table held for routes when the agent started (1 range)"));
	CHECK_THAT(nomasqSet("discovered-routes-v4"), Catch::Contains("203.0.113.0/26"));
	// The route goes meanwhile: nothing that cannot be read is followed, the range stays.
	runOrFail("ip route del 203.0.113.0/26 dev to-ext proto bird");
	std::this_thread::sleep_for(2s); // past the hold-down (1 s), were it withdrawn
	CHECK(seenFrom(net, kServerV4) == kPodV4);

	// Started again without the fault: the routes read, and they no longer give it.
	REQUIRE(agent->stop(SIGTERM) == 0);
	agent = std::make_unique<AgentProcess>(agentArgs(dir));
	requireWithin([] { return staleGauge("routes") == "0"; }, kHang, *agent, "the routes read", context);
	requireWithin([&] { return seenFrom(net, kServerV4) == kNodeV4; }, kHang, *agent,
		      "the range the routes no longer give masqueraded", context);
	CHECK_THAT(agent->log(), Catch::Contains("pod network: 203.0.113.0/26 is no longer found on the node"));
	deleteAgentTable();
}

TEST_CASE_METHOD(PodNetworkNode,
		 "a restart before bird installs its routes (an empty reading): the ranges the last run had in force "
		 "leave only after the hold-down from the restart, and stay when bird installs them within it")
{
	deleteAgentTable();
	const auto holdDown = GENERATE(5s, 10s);
	const bool installed = holdDown == 10s;
	INFO((installed ? "bird installs the route within the hold-down" : "bird never installs the route"));
	dir.write("config", discoveryConfig("203.0.113.0/24", "  routeProtocols: [bird]\n",
					    fmt::format("{}s", holdDown.count())));
	const std::string route = "203.0.113.0/26 dev to-ext proto bird";
	runOrFail("ip route add " + route);
	runUntil(agentArgs(dir), [&] { return seenFrom(net, kServerV4) == kPodV4; });
	runOrFail("ip route del " + route); // bird stopped with the node's agents

	const auto start = Clock::now();
	AgentProcess agent(agentArgs(dir));
	const auto context = [&] { return agent.log() + "\n/readyz?verbose: " + verbose(); };
	std::vector<std::string> masqueraded = notFromPod(net, kServerV4, start, 3s);
	INFO(context());
	CHECK(masqueraded.size() == 0u);
	requireWithin(ready, kHang, agent, "the agent ready", context);
	if (!installed) {
		requireWithin([&] { return seenFrom(net, kServerV4) == kNodeV4; }, kHang, agent,
			      "the range masqueraded after the hold-down", context);
		// Never before the hold-down, counted from the restart.
		CHECK(Clock::now() - start >= holdDown);
		CHECK_THAT(agent.log(), Catch::Contains("pod network: 203.0.113.0/26 is no longer found on the node"));
		deleteAgentTable();
		return;
	}
	runOrFail("ip route add " + route); // bird's kernel protocol installs it
	const auto added = Clock::now();
	masqueraded = notFromPod(net, kServerV4, start, holdDown + 2s);
	if (added - start >= holdDown - 1s) {
		WARN("the route came " << std::chrono::duration_cast<std::chrono::milliseconds>(added - start).count()
				       << " ms after the start, too late to judge");
	} else {
		CHECK(masqueraded.size() == 0u);
		CHECK_THAT(agent.log(), !Catch::Contains("203.0.113.0/26 is no longer found on the node"));
	}
	CHECK(seenFrom(net, kServerV4) == kPodV4);
	runOrFail("ip route del " + route);
	deleteAgentTable();
}

TEST_CASE_METHOD(PodNetworkNode,
		 "holdDown edited during a hold-down: the range leaves at the later of its deadline and the edit "
		 "plus the new value; edited during a stale read: the stale range stays")
{
	deleteAgentTable();
	const std::string sources = "  flannelSubnetEnv: " + subnetEnv + "\n";
	const std::string within = "192.0.2.0/24, 203.0.113.0/24";
	dir.write("config", discoveryConfig(within, sources, "6s"));
	dir.write("subnet.env", "FLANNEL_NETWORK=192.0.2.0/24\n");
	AgentProcess agent(agentArgs(dir));
	const auto context = [&] { return agent.log() + "\n/readyz?verbose: " + verbose(); };
	requireWithin(ready, kHang, agent, "the agent ready", context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent, "FLANNEL_NETWORK",
		      context);

	// Narrowed to another range: 192.0.2.0/24 is held down for 6 s from here; the edit
	// lowers holdDown to 1 s: it leaves 6 s after the withdraw all the same.
	const auto withdrawn = Clock::now();
	dir.write("subnet.env", "FLANNEL_NETWORK=203.0.113.0/24\n");
	requireWithin([&] { return seenFrom(net, kServerV4) == kPodV4; }, kHang, agent, "the new range", context);
	dir.write("config", discoveryConfig(within, sources, "1s"));
	requireWithin([&] { return agent.log().find("holdDown=1s") != std::string::npos; }, kHang, agent,
		      "the edit taken", context);
	CHECK(seenFrom(net, kOtherServerV4) == kPodV4);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the held range masqueraded", context);
	CHECK(Clock::now() - withdrawn >= 6s);

	// Malformed: the range stays, stale; an edit of holdDown meanwhile keeps it.
	dir.write("subnet.env", "FLANNEL_NETWORK=not-a-cidr\n");
	requireWithin([] { return staleGauge("flannelSubnetEnv") == "1"; }, kHang, agent, "stale", context);
	dir.write("config", discoveryConfig(within, sources, "2s"));
	requireWithin([&] { return agent.log().find("holdDown=2s") != std::string::npos; }, kHang, agent,
		      "the second edit taken", context);
	std::this_thread::sleep_for(3s); // past the new value
	INFO(context());
	CHECK(seenFrom(net, kServerV4) == kPodV4);
	CHECK(staleGauge("flannelSubnetEnv") == "1");
	CHECK_THAT(nomasqSet("discovered-flannel-v4"), Catch::Contains("203.0.113.0/24"));
	deleteAgentTable();
}

TEST_CASE_METHOD(PodNetworkNode,
		 "edits of the section: a source removed takes its range out after the hold-down while the source "
		 "that stays keeps its own; within narrowed takes a range out at once, whatever the hold-down")
{
	deleteAgentTable();
	const std::string route = "203.0.113.0/26 dev to-ext proto bird";
	runOrFail("ip route add " + route);
	dir.write("subnet.env", "FLANNEL_NETWORK=192.0.2.0/24\n");
	const std::string bothSources = "  routeProtocols: [bird]\n  flannelSubnetEnv: " + subnetEnv + "\n";
	dir.write("config", discoveryConfig("192.0.2.0/24, 203.0.113.0/24", bothSources, "3s"));
	AgentProcess agent(agentArgs(dir));
	const auto context = [&] { return agent.log() + "\n/readyz?verbose: " + verbose(); };
	requireWithin(ready, kHang, agent, "the agent ready", context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4 && seenFrom(net, kServerV4) == kPodV4; },
		      kHang, agent, "both ranges", context);

	const auto removed = Clock::now();
	dir.write("config", discoveryConfig("192.0.2.0/24, 203.0.113.0/24", "  routeProtocols: [bird]\n", "3s"));
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the removed source's range masqueraded", context);
	CHECK(Clock::now() - removed >= 3s);
	CHECK(seenFrom(net, kServerV4) == kPodV4);
	CHECK_THAT(agent.log(), !Catch::Contains("203.0.113.0/26 is no longer found"));

	// Narrowed, with a hold-down of an hour: out all the same.
	dir.write("config", discoveryConfig("192.0.2.0/24", "  routeProtocols: [bird]\n", "1h"));
	requireWithin([&] { return seenFrom(net, kServerV4) == kNodeV4; }, kHang, agent,
		      "the range outside the narrowed within masqueraded", context);
	CHECK_THAT(nomasqSet("discovered-routes-v4"), !Catch::Contains("203.0.113.0/26"));
	runOrFail("ip route del " + route);

	// The section with Flannel's file again, then no section at all: what it found leaves
	// after the hold-down, as for a source removed.
	dir.write("config", discoveryConfig("192.0.2.0/24", "  flannelSubnetEnv: " + subnetEnv + "\n", "3s"));
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent, "Flannel's range again",
		      context);
	const auto sectionRemoved = Clock::now();
	dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the range masqueraded once the section went", context);
	CHECK(Clock::now() - sectionRemoved >= 3s);
	deleteAgentTable();
}

TEST_CASE_METHOD(PodNetworkNode,
		 "--once keeps what the agent's table holds for a source it cannot read, and takes a source that "
		 "reads as the truth")
{
	deleteAgentTable();
	dir.write("config", discoveryConfig("192.0.2.0/24, 203.0.113.0/24", "  flannelSubnetEnv: " + subnetEnv + "\n"));
	const auto once = [&] {
		std::string out;
		const int status = run(fmt::format("{} --once --config={} 2>&1", agentBinary(), dir.file("config")), &out);
		INFO(out);
		CHECK(status == 0);
		return out;
	};
	dir.write("subnet.env", "FLANNEL_NETWORK=192.0.2.0/24\n");
	(void)once();
	CHECK_THAT(nomasqSet(), Catch::Contains("192.0.2.0/24"));
	dir.write("subnet.env", "FLANNEL_NETWORK=not-a-cidr\n");
	CHECK_THAT(once(), Catch::Contains("what the agent's table held for flannelSubnetEnv when the agent started (1 range)"));
	CHECK_THAT(nomasqSet(), Catch::Contains("192.0.2.0/24"));
	CHECK_THAT(nomasqSet("discovered-flannel-v4"), Catch::Contains("192.0.2.0/24"));
	dir.write("subnet.env", "FLANNEL_NETWORK=203.0.113.0/24\n");
	(void)once();
	CHECK_THAT(nomasqSet(), Catch::Contains("203.0.113.0/24") && !Catch::Contains("192.0.2.0/24"));
	deleteAgentTable();
}

TEST_CASE_METHOD(PodNetworkNode,
		 "a watched directory deleted and made again: the file in it is read through the watch set again, "
		 "not by the 10 s safety net")
{
	deleteAgentTable();
	const bool flannel = GENERATE(true, false);
	INFO((flannel ? "subnet.env's directory" : "the CNI directory"));
	const std::string watched = dir.file(flannel ? "flannel" : "net.d");
	const std::string file = flannel ? "flannel/subnet.env" : "net.d/10-bridge.conflist";
	const std::string content = flannel ? "FLANNEL_NETWORK=192.0.2.0/24\n"
					    : R"({"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge", )"
					      R"("ipam": {"type": "host-local", "ranges": [[{"subnet": "192.0.2.0/24"}]]}}]})";
	const std::string sources = flannel ? "  flannelSubnetEnv: " + watched + "/subnet.env\n"
					    : "  cniConfDir: " + watched + "\n";
	dir.write("config", discoveryConfig("192.0.2.0/24", sources, "0s"));
	REQUIRE(mkdir(watched.c_str(), 0700) == 0);
	dir.write(file, content);
	AgentProcess agent(agentArgs(dir, {"-v=1"}));
	const auto context = [&] { return agent.log(); };
	requireWithin(ready, kHang, agent, "the agent ready", context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent, "the range", context);

	runOrFail("rm -r " + watched);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the range gone with its directory", context);
	REQUIRE(mkdir(watched.c_str(), 0700) == 0);
	dir.write(file, content);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent,
		      "the range in the directory made again", context);
	// The reading that found it again, as the debug log names its cause.
	const std::string log = agent.log();
	const size_t found = log.rfind("pod network: 192.0.2.0/24 is not masqueraded from now on");
	REQUIRE(found != std::string::npos);
	const size_t reading = log.rfind("pod network: reading the files", found);
	REQUIRE(reading != std::string::npos);
	const std::string line = log.substr(reading, log.find('\n', reading) - reading);
	INFO(log);
	CHECK_THAT(line, !Catch::Contains("safety net"));
	deleteAgentTable();
}

namespace {

// One series of the agent's /metrics, read over a socket of this process: a curl per poll
// would be most of the names' test time. "" when it cannot be read.
std::string metricDirect(const std::string &series)
{
	ipmasq::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	sockaddr_in to{};
	to.sin_family = AF_INET;
	to.sin_port = htons(10263);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!fd.isValid() || connect(fd.get(), reinterpret_cast<const sockaddr *>(&to), sizeof(to)) != 0)
		return {};
	const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
	if (send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
		return {};
	std::string reply;
	char buffer[16384];
	for (int i = 0; i < 1000; i++) { // an answer of at most 16 MiB, each read within 5 s
		pollfd readable{fd.get(), POLLIN, 0};
		if (poll(&readable, 1, 5000) <= 0)
			return {};
		const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
		if (n <= 0)
			break;
		reply.append(buffer, static_cast<size_t>(n));
	}
	const size_t at = reply.find("\n" + series + " ");
	if (at == std::string::npos)
		return {};
	const size_t from = at + series.size() + 2;
	return reply.substr(from, reply.find('\n', from) - from);
}

long rssKiB(pid_t pid)
{
	std::ifstream status(fmt::format("/proc/{}/status", pid));
	std::string key;
	long value = -1;
	while (status >> key)
		if (key == "VmRSS:" && status >> value)
			return value;
	return -1;
}

} // namespace

TEST_CASE_METHOD(PodNetworkNode,
		 "65,646 CNI file names come and go beside the agent: the names it holds follow the files present, "
		 "and its memory stays flat")
{
	deleteAgentTable();
	const std::string netd = dir.file("net.d");
	REQUIRE(mkdir(netd.c_str(), 0700) == 0);
	// One file stays all along, and gives a range.
	dir.write("net.d/00-pods.conflist",
		  R"({"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge", )"
		  R"("ipam": {"type": "host-local", "ranges": [[{"subnet": "198.18.0.0/24"}]]}}]})");
	dir.write("config", discoveryConfig("198.18.0.0/15", "  cniConfDir: " + netd + "\n", "0s"));
	AgentProcess agent(agentArgs(dir));
	const auto names = [] { return metricDirect("ip_masq_agent_discovery_inputs{source=\"cniConfDir\"}"); };
	const auto context = [&] { return "names held: " + names() + "\n/readyz?verbose: " + verbose(); };
	requireWithin(ready, kHang, agent, "the agent ready", context);
	requireWithin([&] { return names() == "1"; }, kHang, agent, "the one file's name", context);

	// 63 names at a time beside the one (the agent reads at most 64 files), each name new.
	constexpr int kBatch = 63;
	constexpr int kRounds = 1042; // 65,646 names
	const std::string conf = R"({"cniVersion": "1.0.0", "name": "other", "plugins": [{"type": "bridge"}]})";
	long rssAfterWarmUp = 0;
	for (int round = 0; round < kRounds; round++) {
		for (int i = 0; i < kBatch; i++)
			std::ofstream(fmt::format("{}/r{}-{}.conflist", netd, round, i)) << conf;
		if (!waitFor([&] { return names() == "64"; }, kHang))
			FAIL("round " << round << ": the agent does not hold the 64 names present\n" << context());
		for (int i = 0; i < kBatch; i++)
			REQUIRE(unlink(fmt::format("{}/r{}-{}.conflist", netd, round, i).c_str()) == 0);
		if (!waitFor([&] { return names() == "1"; }, kHang))
			FAIL("round " << round << ": the agent holds names of files that are gone\n" << context());
		if (round == 50)
			rssAfterWarmUp = rssKiB(agent.pid());
	}
	const long rss = rssKiB(agent.pid());
	INFO("RSS after 50 rounds " << rssAfterWarmUp << " KiB, after " << kRounds << " rounds " << rss << " KiB");
	WARN("RSS after 50 rounds " << rssAfterWarmUp << " KiB, after " << kRounds << " rounds " << rss << " KiB");
	// ~190 bytes a name kept would be 12 MiB here.
	CHECK(rss - rssAfterWarmUp < 4096);
	CHECK_THAT(nomasqSet("discovered-cni-v4"), Catch::Contains("198.18.0.0/24"));
	CHECK_THAT(nomasqSet(), Catch::Contains("198.18.0.0/24"));
	deleteAgentTable();
}
