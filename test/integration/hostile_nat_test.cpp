// SPDX-License-Identifier: Apache-2.0
// Other tables written by a hostile or busy neighbour, next to the running agent: a verdict
// map of 200,000 elements behind forking marks, chains of 100,000 rules, a walk that
// reaches its bound, a table rewritten with new handles every few milliseconds, thousands
// of commits a second next to a 30,000-rule table. The loop never stalls, memory stays
// bounded, a bound answers "may", churn without change logs nothing, and the check keeps
// reading.
// Private network namespace.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <malloc.h>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <vector>
#include <unistd.h>

#include <fmt/format.h>

#include "agent_process.h"
#include "nat_components.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;

namespace {

const std::string kHealth = "http://127.0.0.1:10263";
// Deadlines that only a hang misses: each is many times what an idle 2-core machine takes.
constexpr auto kHang = 180s;

std::string readFile(const std::string &path)
{
	std::ifstream in(path);
	std::ostringstream out;
	out << in.rdbuf();
	return out.str();
}

// The ruleset a neighbour writes, as nft -f input.
void loadNft(const TempDir &dir, const std::string &name, const std::string &text)
{
	dir.write(name, text);
	runOrFail("nft -f " + dir.file(name));
}

// `count` elements 10.x.y.z of a verdict map that accept or return, and `forks` rules that
// each fork the packet mark on a protocol the check does not know: 2^forks mark states reach
// the map, looked up with a source the check does not know either. Loopback is left alone,
// so that the health endpoint stays reachable.
std::string forkingVerdictMap(size_t count, int forks)
{
	std::string elements;
	for (size_t i = 0; i < count; i++) {
		const uint32_t a = (10u << 24) + uint32_t(i);
		elements += fmt::format("{}{}.{}.{}.{} : {}", i ? ", " : "", a >> 24, (a >> 16) & 255,
					(a >> 8) & 255, a & 255, i % 2 ? "accept" : "return");
	}
	std::string rules;
	for (int b = 0; b < forks; b++)
		rules += fmt::format("\t\tmeta l4proto {} meta mark set meta mark | {}\n", b, 1u << b);
	return fmt::format("table ip hostile {{\n\tmap big {{\n\t\ttype ipv4_addr : verdict\n"
			   "\t\telements = {{ {} }}\n\t}}\n\tchain post {{\n"
			   "\t\ttype nat hook postrouting priority srcnat - 10; policy accept;\n"
			   "\t\toifname \"lo\" accept\n{}\t\tip saddr vmap @big\n\t\tmasquerade\n\t}}\n}}\n",
			   elements, rules);
}

// Upstream ip-masq-agent's chain with `count` RETURN rules (100.x.y.0/24), as
// iptables-nft-restore input.
std::string upstreamChain(size_t count)
{
	std::string out = "*nat\n:POSTROUTING ACCEPT [0:0]\n:IP-MASQ-AGENT - [0:0]\n"
			  "-A POSTROUTING -m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT\n";
	for (size_t i = 0; i < count; i++) {
		const uint32_t a = (100u << 24) + (uint32_t(i) << 8);
		out += fmt::format("-A IP-MASQ-AGENT -d {}.{}.{}.0/24 -m comment --comment "
				   "\"ip-masq-agent: local traffic is not subject to MASQUERADE\" -j RETURN\n",
				   a >> 24, (a >> 16) & 255, (a >> 8) & 255);
	}
	return out + "-A IP-MASQ-AGENT -j MASQUERADE\nCOMMIT\n";
}

std::string metric(const std::string &series)
{
	return metricAt(kHealth, series);
}

bool conflictGaugeAtLeast(const char *certainty, double value)
{
	const std::string v = metric(fmt::format("ip_masq_agent_nat_conflicts{{certainty=\"{}\"}}", certainty));
	return !v.empty() && std::stod(v) >= value;
}

// Runs the agent once (--explain ...) to its end; its output, and its peak resident memory.
// A forked child counts what it shares with its parent until it execs, so the test gives
// back what it freed first (its large ruleset texts) for the figure to be the agent's.
struct OneShot {
	std::string output;
	long peakKiB = 0;
	double userSeconds = 0, systemSeconds = 0; // the kernel's work for it in the second
	int status = -1;
};
OneShot runOnce(const std::vector<std::string> &args)
{
	(void)malloc_trim(0);
	TempDir dir;
	std::vector<std::string> argv{agentBinary()};
	argv.insert(argv.end(), args.begin(), args.end());
	const int fd = ::open(dir.file("out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	REQUIRE(fd >= 0);
	const pid_t pid = spawnChild(argv, ChildStreams{"/dev/null", fd, ChildStreams::kDevNull});
	::close(fd);
	REQUIRE(pid > 0);
	OneShot shot;
	rusage usage{};
	// No deadline here but the test's own timeout: --explain's walk is bounded by steps.
	REQUIRE(wait4(pid, &shot.status, 0, &usage) == pid);
	shot.peakKiB = usage.ru_maxrss;
	shot.userSeconds = double(usage.ru_utime.tv_sec) + double(usage.ru_utime.tv_usec) / 1e6;
	shot.systemSeconds = double(usage.ru_stime.tv_sec) + double(usage.ru_stime.tv_usec) / 1e6;
	shot.output = readFile(dir.file("out"));
	return shot;
}

// A verdict map of `count` source addresses (a third jump to a masquerade) and a set of
// `count` intervals, both looked up with the packet's source, which the check does not know.
std::string bigLookups(uint32_t count)
{
	std::string verdicts, ranges;
	for (uint32_t i = 0; i < count; i++) {
		const uint32_t a = (100u << 24) + i, r = (13u << 24) + (i << 8);
		const auto dotted = [](uint32_t x) {
			return fmt::format("{}.{}.{}.{}", x >> 24, (x >> 16) & 255, (x >> 8) & 255, x & 255);
		};
		verdicts += fmt::format("{}{} : {}", i ? ", " : "", dotted(a), i % 3 ? "accept" : "jump c1");
		ranges += fmt::format("{}{}-{}", i ? ", " : "", dotted(r), dotted(r + 127));
	}
	return fmt::format("table ip big {{\n\tmap verdicts {{ type ipv4_addr : verdict; elements = {{ {} }} }}\n"
			   "\tset ranges {{ type ipv4_addr; flags interval; elements = {{ {} }} }}\n"
			   "\tchain c1 {{ masquerade; }}\n"
			   "\tchain post {{ type nat hook postrouting priority srcnat; policy accept;\n"
			   "\t\toifname \"lo\" accept\n\t\tip saddr vmap @verdicts\n"
			   "\t\tip saddr @ranges masquerade\n\t}}\n}}\n",
			   verdicts, ranges);
}

} // namespace

TEST_CASE("a verdict map and an interval set of 200,000 elements, keys unknown: --explain reads "
	  "them once, and the check rests while they do not change")
{
	flushRuleset();
	TempDir dir;
	loadNft(dir, "big.nft", bigLookups(200000));
	const OneShot explained = runOnce({"--config=/nonexistent", "--explain=10.1.2.3"});
	INFO(explained.output);
	CHECK(explained.status == 0);
	CHECK_THAT(explained.output, Catch::Contains("chain post (priority srcnat, before the agent) may masquerade it"));
	WARN(fmt::format("--explain next to a 200,000-element verdict map and a 200,000-interval set: "
			 "{:.2f} s user, {:.2f} s system (the kernel's dumps of the two sets), peak {} KiB",
			 explained.userSeconds, explained.systemSeconds, explained.peakKiB));
	// The daemon: its first check cycle reads them; then nothing changes (a resync every 2 s
	// finds its own table intact). What it costs then, the whole process, as a figure: a
	// check pass with nothing new asks the ruleset's generation and rests.
	dir.write("config", "resyncInterval: 2s\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	requireWithin([] { return conflictGaugeAtLeast("may", 1); }, kHang, agent, "the check's first cycle");
	// A figure, not a check: long enough for a few resyncs and check passes.
	constexpr auto kWindow = 10s;
	const double before = cpuSeconds(agent.pid());
	std::this_thread::sleep_for(kWindow);
	const double used = cpuSeconds(agent.pid()) - before;
	WARN(fmt::format("the daemon next to them, once they stop changing, with a resync every 2 s: "
			 "{:.1f} % of a core over {} s", used / double(kWindow.count()) * 100, kWindow.count()));
	CHECK(conflictGaugeAtLeast("may", 1));
	flushRuleset();
}

TEST_CASE("a verdict map of 200,000 elements behind forking marks never stalls the loop")
{
	flushRuleset();
	TempDir dir;
	loadNft(dir, "hostile.nft", forkingVerdictMap(200000, 16));
	// Five sampled destinations (0.0.0.1, link-local's two, 192.0.2.0 and 192.0.3.0), each
	// at the step bound: a cycle of five paced passes.
	dir.write("config", "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	requireWithin([] { return curlGet(kHealth + "/readyz").rfind("200", 0) == 0; }, kHang, agent,
		      "the agent ready");
	// Liveness is asked all along the first cycles of the check, which reach the step
	// bound on every sample, and the agent's table is deleted meanwhile.
	size_t probes = 0, notLive = 0;
	bool deleted = false;
	requireWithin(
		[&] {
			probes++;
			if (curlGet(kHealth + "/livez").rfind("200", 0) != 0)
				notLive++;
			if (!deleted && probes == 5) {
				deleteAgentTable();
				deleted = true;
			}
			return deleted && conflictGaugeAtLeast("undetermined", 1);
		},
		kHang, agent, "the check's first cycle, with its bound reached");
	CHECK(notLive == 0);
	INFO(agent.log());
	// Restored at the reconciler's pace (at once, for a first deletion), not after the check.
	CHECK(countOf(agent.log(), "restoring it") >= 1);
	requireWithin([] { return !agentTableListing().empty(); }, kHang, agent, "the table restored");
	const std::string verbose = curlGet(kHealth + "/readyz?verbose");
	CHECK_THAT(verbose, Catch::Contains("the evaluation stopped after"));
	// --explain answers, and says "may", never "nothing undoes that".
	const OneShot explained = runOnce({"--config=/nonexistent", "--explain=192.0.2.1"});
	INFO(explained.output);
	CHECK(explained.status == 0);
	CHECK_THAT(explained.output, Catch::Contains("other tables' NAT may undo that"));
	CHECK_THAT(explained.output, !Catch::Contains("no other table's NAT undoes that"));
	WARN(fmt::format("--explain next to it: peak {} KiB", explained.peakKiB));
	flushRuleset();
}

TEST_CASE("100,000 rules and a map and a set of 200,000 elements: memory stays bounded")
{
	// docs/design.md ("What it reads"): the reader holds at most 24 MiB of decoded rules and
	// sets; with the agent's own few MiB the process stays below this.
	constexpr long kBoundKiB = 40 * 1024;
	flushRuleset();
	TempDir dir;
	dir.write("upstream.rules", upstreamChain(100000));
	runOrFail("iptables-nft-restore < " + dir.file("upstream.rules"));
	const OneShot rules = runOnce({"--config=/nonexistent", "--explain=192.0.2.1"});
	INFO(rules.output);
	WARN(fmt::format("100,000 rules: --explain peak {} KiB", rules.peakKiB));
	CHECK(rules.peakKiB < kBoundKiB);
	// Beyond the reader's rules: that table could not be read, which is "may".
	CHECK_THAT(rules.output, Catch::Contains("could not be read"));
	CHECK_THAT(rules.output, !Catch::Contains("no other table's NAT undoes that"));

	flushRuleset();
	{
		std::string elements, pairs;
		for (uint32_t i = 0; i < 200000; i++) {
			const std::string address = fmt::format("100.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
			elements += (i ? ", " : "") + address;
			pairs += (i ? ", " : "") + address + " : 203.0.113.9";
		}
		loadNft(dir, "sets.nft",
			fmt::format("table ip big {{\n\tset many {{ type ipv4_addr; elements = {{ {} }} }}\n"
				    "\tmap sources {{ type ipv4_addr : ipv4_addr; elements = {{ {} }} }}\n"
				    "\tchain post {{ type nat hook postrouting priority srcnat; policy accept;\n"
				    "\t\tip daddr @many return\n\t\tsnat to ip daddr map @sources\n\t}}\n}}\n",
				    elements, pairs));
	}
	const OneShot sets = runOnce({"--config=/nonexistent", "--explain=100.0.1.2", "--explain=192.0.2.1"});
	INFO(sets.output);
	WARN(fmt::format("a set and a map of 200,000 elements: --explain peak {} KiB", sets.peakKiB));
	CHECK(sets.peakKiB < kBoundKiB);
	CHECK(sets.status == 0);

	// The daemon next to both: its table, deleted while the first check reads them, is back
	// at the reconciler's pace.
	runOrFail("iptables-nft-restore < " + dir.file("upstream.rules"));
	AgentProcess agent({"--config=/nonexistent", "--health-addr=127.0.0.1:10263"});
	requireWithin([] { return !agentTableListing().empty(); }, kHang, agent, "the first sync");
	deleteAgentTable();
	requireWithin([] { return !agentTableListing().empty(); }, kHang, agent, "the table restored");
	requireWithin([] { return conflictGaugeAtLeast("undetermined", 1); }, kHang, agent,
		      "the check's first cycle");
	const std::string status = readFile(fmt::format("/proc/{}/status", agent.pid()));
	INFO(status);
	const size_t at = status.find("VmHWM:");
	REQUIRE(at != std::string::npos);
	const long daemonPeak = std::stol(status.substr(at + 6));
	WARN(fmt::format("the daemon next to them: peak {} KiB", daemonPeak));
	CHECK(daemonPeak < kBoundKiB);
	flushRuleset();
}

TEST_CASE("a walk that reaches its bound answers may, before a certain masquerade")
{
	flushRuleset();
	TempDir dir;
	// One path of 120,000 steps: three jumps through a chain of 40,000 rules that never
	// match (the mark is 0), then a masquerade every packet reaches. The walk stops at its
	// bound (100,000 steps) before it gets there.
	std::string rules;
	for (int i = 0; i < 40000; i++)
		rules += "\t\tmeta mark 0x00001234 accept\n";
	loadNft(dir, "long.nft",
		fmt::format("table ip long {{\n\tchain many {{\n{}\t}}\n\tchain post {{\n"
			    "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
			    "\t\toifname \"lo\" accept\n\t\tjump many\n\t\tjump many\n\t\tjump many\n"
			    "\t\tmasquerade\n\t}}\n}}\n", rules));
	// The agent exempts 10.1.2.3 (a built-in default): the masquerade undoes that.
	const OneShot explained = runOnce({"--config=/nonexistent", "--explain=10.1.2.3"});
	INFO(explained.output);
	CHECK_THAT(explained.output, Catch::Contains("stopped after"));
	CHECK_THAT(explained.output, Catch::Contains("other tables' NAT may undo that"));
	CHECK_THAT(explained.output, !Catch::Contains("no other table's NAT undoes that"));
	flushRuleset();
}

TEST_CASE("a table rewritten with new handles every few milliseconds: each conflict once")
{
	flushRuleset();
	TempDir dir;
	// kubelet's rule in a table of its own, rewritten whole again and again (flush and
	// add, as iptables-nft-restore does): the same rule with a new handle each time.
	dir.write("kubelet.nft", "flush chain ip kubelet post\n"
				 "add rule ip kubelet post ip daddr != 10.0.0.0/8 fib daddr type != local masquerade\n");
	runOrFail("nft add table ip kubelet && nft add chain ip kubelet post "
		  "'{ type nat hook postrouting priority srcnat; policy accept; }' && nft -f " +
		  dir.file("kubelet.nft"));
	AgentProcess agent({"--config=/nonexistent", "--health-addr=127.0.0.1:10263"});
	requireWithin([] { return conflictGaugeAtLeast("certain", 1); }, kHang, agent,
		      "the first cycle's conflicts");
	const std::string gauge = metric("ip_masq_agent_nat_conflicts{certainty=\"certain\"}");
	const size_t found = countOf(agent.log(), "warning: NAT conflict:");
	{
		Neighbour writer("while :; do nft -f " + dir.file("kubelet.nft") + "; sleep 0.005; done", 120);
		// Every rewrite makes a pass due: wait for three more complete cycles.
		const double cycles = std::stod(metric("ip_masq_agent_nat_check_cycles_total"));
		requireWithin([&] { return std::stod(metric("ip_masq_agent_nat_check_cycles_total")) >= cycles + 3; },
			      kHang, agent, "three cycles of the check while the table is rewritten");
		INFO(runOrFail("nft -a list table ip kubelet"));
	}
	INFO(agent.log());
	CHECK(countOf(agent.log(), "warning: NAT conflict:") == found);
	CHECK(countOf(agent.log(), "NAT conflict resolved") == 0);
	CHECK(metric("ip_masq_agent_nat_conflicts{certainty=\"certain\"}") == gauge);
	flushRuleset();
}

TEST_CASE("thousands of commits a second next to a 30,000-rule table: the check still reads it")
{
	flushRuleset();
	TempDir dir;
	// Upstream's chain masquerades 192.0.2.0/24, which the agent's config exempts.
	dir.write("upstream.rules", upstreamChain(30000));
	runOrFail("iptables-nft-restore < " + dir.file("upstream.rules"));
	dir.write("config", "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	// A writer that commits as fast as it can, to a table of its own: nft -i makes each
	// line a transaction of its own, thousands a second, each adding or deleting a chain.
	runOrFail("nft add table ip busy");
	Neighbour busy("while :; do yes | head -n 1000000 | sed \"s/.*/add chain ip busy c\\ndelete chain ip busy c/\" | nft -i; done",
		       300);
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	requireWithin([] { return conflictGaugeAtLeast("certain", 1); }, kHang, agent,
		      "the check's first cycle, with upstream's chain read");
	CHECK(metric("ip_masq_agent_nat_check_failures_total") == "0");
	flushRuleset();
}
