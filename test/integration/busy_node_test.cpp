// SPDX-License-Identifier: Apache-2.0
// The agent on a node where other components commit too (kube-proxy commits on every Service
// and endpoint change): a change of set elements is an element update whatever others
// committed before or during it, and the table and its set keep their handles. Through the
// running agent: another table committed between two config changes and between two pod
// network changes; 1,000 routes of `proto bird` in force, 100 added and 100 removed with
// `ip -batch` while another process commits its own table every few milliseconds, watched
// with `nft monitor`; the log names the operator's list and the discovered ranges apart.
#include <catch2/catch.hpp>

#include <chrono>
#include <regex>
#include <set>
#include <string>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/daemon/daemon.h"
#include "netns.h"

using namespace ipmasq::test;
using namespace std::chrono_literals;

namespace {

// A long resync: what the agent does within a test's deadline, a change made it do.
const std::string kSlowResync = "resyncInterval: 1h\n";

// The handles of the agent's table and of its IPv4 set: a replacement makes the set again.
std::string handles()
{
	std::string table, set;
	(void)run("nft -a list table inet ip-masq-agent | grep -o 'ip-masq-agent { # handle [0-9]*'", &table);
	(void)run("nft -a list set inet ip-masq-agent nomasq-v4 | grep -o 'handle [0-9]*'", &set);
	return table + set;
}

// Every CIDR the agent's IPv4 set lists.
std::set<std::string> setElements()
{
	std::string listing;
	(void)run("nft list set inet ip-masq-agent nomasq-v4 2>/dev/null", &listing);
	std::set<std::string> out;
	const std::regex cidr("[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+/[0-9]+");
	for (auto it = std::sregex_iterator(listing.begin(), listing.end(), cidr); it != std::sregex_iterator(); ++it)
		out.insert(it->str());
	return out;
}

// The log lines of syncs that `trigger` caused ("config change", "pod network change").
std::vector<std::string> syncLines(const std::string &log, const std::string &trigger)
{
	std::vector<std::string> out;
	size_t at = 0;
	while ((at = log.find("(" + trigger + "):", at)) != std::string::npos) {
		const size_t start = log.rfind('\n', at) + 1;
		const size_t end = log.find('\n', at);
		out.push_back(log.substr(start, end - start));
		at = end;
	}
	return out;
}

// Every sync `trigger` caused was an element update (and there were `count` of them), and the
// table and its set have the handles they had `before`.
void requireElementUpdates(const AgentProcess &agent, const std::string &trigger, size_t count,
			   const std::string &before)
{
	CHECK(handles() == before);
	const std::string log = agent.log();
	INFO(log);
	const std::vector<std::string> lines = syncLines(log, trigger);
	CHECK(lines.size() == count);
	for (const std::string &line : lines)
		CHECK_THAT(line, Catch::Contains("by an element update") && !Catch::Contains("replacement"));
}

// Another component commits: a table of its own, ip `name`.
void commitElsewhere(const std::string &name)
{
	runOrFail("nft add table ip " + name);
}

// The agent stopped (SIGTERM: its table stays), its table and the tables `others` removed.
void finish(AgentProcess &agent, const std::vector<std::string> &others)
{
	CHECK(agent.stop(SIGTERM) == 0);
	deleteAgentTable();
	for (const std::string &name : others)
		(void)run("nft delete table ip " + name);
}

// The i-th /28 of the pod network: every other one in 198.18.0.0/15, so that none merge.
std::string podRange(int i)
{
	return fmt::format("198.18.{}.{}/28", i * 32 / 256, i * 32 % 256);
}

// An `ip -batch` file of `verb` (add, del) for the pod ranges [first, last).
std::string routeBatch(const TempDir &dir, const std::string &name, const std::string &verb, int first, int last)
{
	std::string text;
	for (int i = first; i < last; i++)
		text += fmt::format("route {} {} dev disc0 proto bird\n", verb, podRange(i));
	dir.write(name, text);
	return dir.file(name);
}

// A config that lists no range of its own: the pod network's routes of `proto bird` in
// 198.18.0.0/15 are found on the node.
std::string discoveryConfig()
{
	return kSlowResync + "nonMasqueradeCIDRs: []\n"
			     "nonMasqueradeDiscovery:\n"
			     "  within: [198.18.0.0/15]\n"
			     "  routeProtocols: [bird]\n"
			     "  holdDown: 1s\n";
}

// The link the pod network's routes go through.
struct PodLink {
	PodLink() { runOrFail("ip link add disc0 type veth peer name disc1 && ip link set disc0 up && ip link set disc1 up"); }
	~PodLink() { (void)run("ip link del disc0 2>/dev/null"); }
	PodLink(const PodLink &) = delete;
	PodLink &operator=(const PodLink &) = delete;
};

} // namespace

TEST_CASE("config changes with another table committed before each are element updates, and keep the set")
{
	TempDir dir;
	std::string cidrs = "198.18.0.0/16, 192.0.2.0/24";
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [" + cidrs + "]\n");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, kChangeSeen, agent, "the first apply");
	const std::string before = handles();

	int changes = 0;
	for (const std::string added : {"198.51.100.0/24", "203.0.113.0/24"}) {
		// Another component commits its own table: the agent is not woken for that, and
		// its generation is no longer the kernel's when the config changes.
		commitElsewhere(fmt::format("other-{}", changes));
		cidrs += ", " + added;
		dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [" + cidrs + "]\n");
		requireWithin([&] { return tableHas(added); }, kChangeSeen, agent, "the change applied");
		requireElementUpdates(agent, "config change", ++changes, before);
	}
	finish(agent, {"other-0", "other-1"});
}

TEST_CASE("pod network changes with another table committed before each are element updates, and keep "
	  "the set")
{
	PodLink link;
	TempDir dir;
	dir.write("config", discoveryConfig());
	runOrFail("ip route add 198.18.1.0/24 dev disc0 proto bird");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return tableHas("198.18.1.0/24"); }, kChangeSeen, agent, "the route found at start");
	const std::string before = handles();

	commitElsewhere("other-a");
	runOrFail("ip route add 198.18.3.0/24 dev disc0 proto bird");
	requireWithin([] { return tableHas("198.18.3.0/24"); }, kChangeSeen, agent, "a new route's range in force");
	requireElementUpdates(agent, "pod network change", 1, before);

	commitElsewhere("other-b");
	runOrFail("ip route del 198.18.1.0/24 dev disc0 proto bird");
	requireWithin([] { return !tableHas("198.18.1.0/24"); }, kChangeSeen, agent,
		      "a withdrawn route's range gone after its hold-down");
	requireElementUpdates(agent, "pod network change", 2, before);
	finish(agent, {"other-a", "other-b"});
}

TEST_CASE("nft monitor sees only element events of the agent's table when 100 of 1,000 discovered ranges "
	  "are added and 100 removed in bursts, while another process commits every few milliseconds")
{
	PodLink link;
	TempDir dir;
	runOrFail("ip -batch " + routeBatch(dir, "first", "add", 0, 1000));
	dir.write("config", discoveryConfig());
	AgentProcess agent({"--config=" + dir.file("config")});
	const auto context = [&] { return fmt::format("{} ranges in the set", setElements().size()); };
	requireWithin([] { return setElements().size() == 1001; }, kChangeSeen, agent,
		      "the 1,000 ranges and link-local in force", context);
	// The config line names the operator's (empty) list and the ranges found apart.
	CHECK_THAT(agent.log(), Catch::Contains("nonMasqueradeCIDRs=[] nonMasqueradeDiscovery={within=[198.18.0.0/15] "
						"routeProtocols=[bird] holdDown=1s} discovered=[198.18.0.0/28,") &&
					Catch::Contains(",... (1000 entries)] cidrLimit="));
	const std::string before = handles();

	// nft monitor, subscribed before anything below happens: a probe commit it has shown.
	const std::string monitorFile = dir.file("monitor");
	Neighbour monitor("nft monitor > " + monitorFile + " 2>&1", 300);
	// A table of the test's own made and deleted until the monitor shows it.
	const auto probe = [&](const std::string &name, const char *what) {
		requireWithin(
			[&] {
				runOrFail(fmt::format("nft add table ip {0} && nft delete table ip {0}", name));
				std::string text;
				(void)run("cat " + monitorFile + " 2>/dev/null", &text);
				return text.find("add table ip " + name) != std::string::npos;
			},
			kChangeSeen, agent, what);
	};
	probe("probe-start", "nft monitor listening");

	// Another component commits its own table every few milliseconds, at most 4,000 times
	// and 120 s, until the test ends.
	Neighbour busy("i=0; while [ $i -lt 2000 ]; do nft add table ip busy; nft delete table ip busy; "
		       "i=$((i+1)); done", 120);

	const size_t addedBefore = syncLines(agent.log(), "pod network change").size();
	auto start = std::chrono::steady_clock::now();
	runOrFail("ip -batch " + routeBatch(dir, "more", "add", 1000, 1100));
	const auto addTook = std::chrono::steady_clock::now() - start;
	requireWithin([] { return setElements().size() == 1101; }, kChangeSeen, agent, "100 more ranges in force",
		      context);
	const size_t addSyncs = syncLines(agent.log(), "pod network change").size() - addedBefore;

	start = std::chrono::steady_clock::now();
	runOrFail("ip -batch " + routeBatch(dir, "fewer", "del", 0, 100));
	const auto removeTook = std::chrono::steady_clock::now() - start;
	std::set<std::string> expected{"169.254.0.0/16"};
	for (int i = 100; i < 1100; i++)
		expected.insert(podRange(i));
	requireWithin([&] { return setElements() == expected; }, kChangeSeen, agent,
		      "the 100 withdrawn ranges gone after their hold-down", context);
	const size_t removeSyncs = syncLines(agent.log(), "pod network change").size() - addedBefore - addSyncs;
	busy.stop();

	// Everything the agent did is in the monitor's output once a later probe is.
	probe("probe-end", "the monitor caught up");
	monitor.stop();
	std::string events;
	(void)run("grep 'inet ip-masq-agent' " + monitorFile, &events);
	INFO("nft monitor, the agent's table:\n" << events.substr(0, 4000));
	CHECK(countOf(events, "add element inet ip-masq-agent nomasq-v4") > 0);
	CHECK(countOf(events, "delete element inet ip-masq-agent nomasq-v4") > 0);
	CHECK(countOf(events, "add element inet ip-masq-agent discovered-routes-v4") > 0);
	CHECK(countOf(events, "delete element inet ip-masq-agent discovered-routes-v4") > 0);
	size_t lines = 0;
	for (size_t at = 0, end; at < events.size(); at = end + 1, lines++) {
		end = events.find('\n', at);
		if (end == std::string::npos)
			end = events.size();
		const std::string line = events.substr(at, end - at);
		// Elements of the set the rule looks up, and of the routes' own set (what the
		// table holds per source across a restart): nothing else.
		CHECK_THAT(line, Catch::StartsWith("add element inet ip-masq-agent nomasq-v4 ") ||
					 Catch::StartsWith("delete element inet ip-masq-agent nomasq-v4 ") ||
					 Catch::StartsWith("add element inet ip-masq-agent discovered-routes-v4 ") ||
					 Catch::StartsWith("delete element inet ip-masq-agent discovered-routes-v4 "));
	}
	CHECK(lines >= 2);
	CHECK(setElements() == expected);
	requireElementUpdates(agent, "pod network change", addedBefore + addSyncs + removeSyncs, before);

	// A burst that arrived together went in as one update. Whether `ip -batch` was done
	// within the loop's window is the machine's business: only then is it one.
	WARN("ip -batch of the additions took " << addTook / 1ms << " ms, applied in " << addSyncs
						<< " syncs; of the removals " << removeTook / 1ms << " ms, "
						<< removeSyncs << " syncs");
	if (addTook < ipmasq::Daemon::kPodNetworkCoalesce)
		CHECK(addSyncs == 1);
	if (removeTook < ipmasq::Daemon::kPodNetworkCoalesce)
		CHECK(removeSyncs == 1);
	finish(agent, {});
}
