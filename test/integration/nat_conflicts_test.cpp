// SPDX-License-Identifier: Apache-2.0
// The daemon's NAT conflict check against real traffic: other components' rules (written
// with the real iptables-nft and nft, as they write them) next to the running agent, in
// this test's private network namespaces. What the daemon reports (/metrics, its log,
// /readyz?verbose) must match what the external server sees, and a clean node reports
// nothing.
//
// The check runs on a thread of its own, at most one pass every few seconds (paced by its
// CPU time too): every wait here is for a state, with a deadline only a hang misses.
#include <catch2/catch.hpp>

#include <memory>
#include <regex>
#include <sys/socket.h>

#include <fmt/format.h>

#include "agent_process.h"
#include "nat_components.h"
#include "traffic_support.h"

using namespace ipmasq;
using namespace ipmasq::test;
using namespace std::chrono_literals;

namespace {

const std::string kHealth = "http://127.0.0.1:10263";

// Generous: a pass is due at most every 3 s (more on a slow machine, whose CPU time paces
// it too); only a hang takes this long.
constexpr auto kCheckDeadline = 60s;

// The agent exempts the analogue of a cluster CIDR (198.18.0.0/15) and one more range,
// 192.0.2.0/24, where the second external server is; other components exempt only the
// first.
const std::string kConfig = "nonMasqueradeCIDRs: [198.18.0.0/15, 192.0.2.0/24]\n";
const std::string kClusterCidr = "198.18.0.0/15";

// The gauge's sample for `certainty`, or "" while it is not exported.
std::string gauge(const std::string &certainty)
{
	return natConflictGauge(curlGet(kHealth + "/metrics"), certainty);
}

// A counter's value in /metrics, or "" when it is not there.
std::string counter(const std::string &name)
{
	return metricAt(kHealth, name);
}

std::string metricsAndReadiness()
{
	return "/metrics:\n" + curlGet(kHealth + "/metrics") + "\n/readyz?verbose:\n" +
	       curlGet(kHealth + "/readyz?verbose") + "\nnft list ruleset:\n" +
	       runOrFail("nft list ruleset");
}

void requireGauge(const Agent &agent, const std::string &certain, const std::string &may,
		  const std::string &undetermined = "0")
{
	requireWithin([&] {
		return gauge("certain") == certain && gauge("may") == may && gauge("undetermined") == undetermined;
	}, kCheckDeadline, agent.process(), "the conflict gauge", metricsAndReadiness);
}

void requireNonZero(const Agent &agent, const char *certainty)
{
	requireWithin([&] { return !gauge(certainty).empty() && gauge(certainty) != "0"; }, kCheckDeadline,
		      agent.process(), certainty, metricsAndReadiness);
	// Every rule /readyz?verbose quotes is nft's text of that handle.
	CHECK(requireQuotesAsNft(curlGet(kHealth + "/readyz?verbose")) > 0);
}

// The first complete cycle finds nothing, and /readyz?verbose says nothing (the Agent's
// destructor checks the log and the gauge once more).
void requireNothingReported(const Agent &agent)
{
	requireGauge(agent, "0", "0");
	INFO(metricsAndReadiness() << "\nagent log:\n" << agent.log());
	CHECK(agent.log().find("NAT conflict") == std::string::npos);
	CHECK(curlGet(kHealth + "/readyz?verbose") == "200 ok\n");
	CHECK(counter("ip_masq_agent_nat_check_failures_total") == "0");
}

// Rules of other components in the node; the whole ruleset but the agent's table goes
// again at the end (the agent's destructor deletes its own).
class Rules
{
public:
	explicit Rules(const std::vector<std::string> &commands) { runAll(commands); }
	~Rules() { run("iptables-nft -w -t nat -F; iptables-nft -w -t nat -X; "
		       "nft delete table ip nat 2>/dev/null; nft delete table ip kube-proxy 2>/dev/null; "
		       "nft delete table ip other 2>/dev/null"); }
	Rules(const Rules &) = delete;
	Rules &operator=(const Rules &) = delete;
};

Agent startAgent(const std::string &config = kConfig)
{
	return Agent(config, {"--health-addr=127.0.0.1:10263"});
}

// The external host routes 198.18.0.0/15 (the SNAT targets below) back through the node,
// and the node has an address in 198.18.200.0/24 (an outputAddress subnet) on its uplink.
void routeSnatTargets(const Topology &net)
{
	net.external.runOrFail("ip route add 198.18.0.0/15 via 203.0.113.1");
	runOrFail("ip addr add 198.18.200.1/24 dev to-ext");
}

} // namespace

TEST_CASE("the agent's table alone: nothing reported, and traffic as the agent decides")
{
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	Agent agent = startAgent();
	requireNothingReported(agent);
	requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kPodV4);
	requireSource(net, agent, AF_INET, kNodeV4);
}

TEST_CASE("kubelet's rule undoes an exemption: reported, and the server sees the node")
{
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	Rules rules({kubeletRule("iptables-nft", kClusterCidr)});
	Agent agent = startAgent();
	agent.expectNatConflicts();
	requireNonZero(agent, "certain");
	INFO(agent.log());
	CHECK(agent.log().find("NAT conflict: table ip nat chain POSTROUTING (priority srcnat, "
			       "before the agent) masquerades it: rule handle") != std::string::npos);
	CHECK(agent.log().find("which undoes nonMasqueradeCIDRs 192.0.2.0/24") != std::string::npos);
	// Its own cluster CIDR is no conflict.
	CHECK(agent.log().find("undoes nonMasqueradeCIDRs 198.18.0.0/15") == std::string::npos);
	const std::string verbose = curlGet(kHealth + "/readyz?verbose");
	CHECK(verbose.starts_with("200 ok\nwarning: NAT conflict: table ip nat chain POSTROUTING"));
	CHECK(curlGet(kHealth + "/readyz") == "200 ok\n");
	CHECK(curlGet(kHealth + "/readyz?verbose=0") == "200 ok\n");
	CHECK(curlGet(kHealth + "/healthz?x=1&verbose").starts_with("200 ok\nwarning: NAT conflict: "));
	// What was reported is what happens: the agent exempts it, the node masquerades it.
	requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kNodeV4);
}

TEST_CASE("a rule written again with a new handle is the same conflict: said once, never resolved")
{
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	Rules rules({kubeletRule("iptables-nft", kClusterCidr)});
	Agent agent = startAgent();
	agent.expectNatConflicts();
	requireNonZero(agent, "certain");
	const std::string found = gauge("certain");
	// iptables-nft -F + -A, as iptables-restore does: the same rule under a new handle,
	// three times. /readyz?verbose names the handle the last complete cycle saw, so once it
	// names the new one, a cycle has run on the rewritten rule.
	for (int rewrite = 0; rewrite < 3; rewrite++) {
		runAll({"iptables-nft -w -t nat -F POSTROUTING", kubeletRule("iptables-nft", kClusterCidr)});
		const std::string listing = runOrFail("nft -a list chain ip nat POSTROUTING");
		std::smatch m;
		REQUIRE(std::regex_search(listing, m, std::regex(R"(masquerade # handle (\d+))")));
		const std::string handle = "rule handle " + m[1].str();
		requireWithin([&] { return curlGet(kHealth + "/readyz?verbose").find(handle) != std::string::npos; },
			      kCheckDeadline, agent.process(), "a cycle on the rewritten rule", metricsAndReadiness);
	}
	INFO(agent.log());
	CHECK(countOf(agent.log(), "which undoes nonMasqueradeCIDRs 192.0.2.0/24") == 1);
	CHECK(agent.log().find("NAT conflict resolved") == std::string::npos);
	CHECK(gauge("certain") == found);
}

TEST_CASE("a neighbour that stops changing is read once, not at every pass; a commit is read again")
{
	Topology net;
	flushRuleset();
	Rules rules({kubeletRule("iptables-nft", kClusterCidr)});
	// Resyncs every second (no-ops: nothing is committed) nudge the check again and again.
	Agent agent(kConfig + "resyncInterval: 1s\n", {"--health-addr=127.0.0.1:10263", "--v=1"});
	agent.expectNatConflicts();
	requireNonZero(agent, "certain");
	const std::string read = "other tables' NAT read at generation", reused = "not read again";
	const auto requireReused = [&](size_t times) {
		requireWithin([&] { return countOf(agent.log(), reused) >= times; }, kCheckDeadline, agent.process(),
			      "passes that keep the last read", metricsAndReadiness);
	};
	requireReused(2);
	const size_t reads = countOf(agent.log(), read);
	requireReused(countOf(agent.log(), reused) + 2);
	INFO(agent.log());
	CHECK(countOf(agent.log(), read) == reads);
	// Any commit (here, a table of no interest) is a new generation: read again.
	runOrFail("nft add table ip other");
	requireWithin([&] { return countOf(agent.log(), read) > reads; }, kCheckDeadline, agent.process(),
		      "a read after a commit", metricsAndReadiness);
	CHECK(gauge("certain") != "0");
}

TEST_CASE("a masquerade or SNAT before the agent's own SNAT, to another address: a certain conflict")
{
	// The issue's first and second cases. The old design called both "no conflict" (a
	// masquerade was skipped; an SNAT into the agent's outputAddress subnet did "what the
	// agent would"); the kernel NATs a connection once, in the first chain that does, so
	// the operator's outputAddress is undone.
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	routeSnatTargets(net);
	SECTION("kubelet's masquerade, outputAddress 198.18.100.7")
	{
		Rules rules({kubeletRule("iptables-nft", kClusterCidr)});
		Agent agent = startAgent("nonMasqueradeCIDRs: [198.18.0.0/15]\noutputAddress: 198.18.100.7\n");
		agent.expectNatConflicts();
		requireNonZero(agent, "certain");
		INFO(agent.log());
		CHECK(agent.log().find("NAT conflict: table ip nat chain POSTROUTING (priority srcnat, before "
				       "the agent) masquerades it: rule handle") != std::string::npos);
		CHECK(agent.log().find(", before the agent SNATs to 198.18.100.7 IPv4 traffic") != std::string::npos);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kNodeV4);
	}
	SECTION("an SNAT into the outputAddress subnet, to an address this node did not pick")
	{
		Rules rules({"nft add table ip other",
			     "nft 'add chain ip other post { type nat hook postrouting priority srcnat; }'",
			     "nft add rule ip other post ip daddr != { 198.18.0.0/15, 169.254.0.0/16 } fib daddr type != local snat to 198.18.200.9"});
		Agent agent = startAgent("nonMasqueradeCIDRs: [198.18.0.0/15]\noutputAddress: 198.18.200.0/24\n");
		agent.expectNatConflicts();
		requireNonZero(agent, "certain");
		INFO(agent.log());
		CHECK(agent.log().find("rewrites its source to 198.18.200.9: rule handle") != std::string::npos);
		CHECK(agent.log().find(", before the agent SNATs to 198.18.200.1 IPv4 traffic") != std::string::npos);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, "198.18.200.9");
	}
	SECTION("the same SNAT to the address this node picked does what the agent would: no conflict")
	{
		Rules rules({"nft add table ip other",
			     "nft 'add chain ip other post { type nat hook postrouting priority srcnat; }'",
			     "nft add rule ip other post ip daddr != { 198.18.0.0/15, 169.254.0.0/16 } fib daddr type != local snat to 198.18.200.1"});
		Agent agent = startAgent("nonMasqueradeCIDRs: [198.18.0.0/15]\noutputAddress: 198.18.200.0/24\n");
		requireNothingReported(agent);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, "198.18.200.1");
	}
}

TEST_CASE("NETMAP before the agent: the address it maps to, a certain conflict with a known source")
{
	// The issue's third case: an iptables target the old evaluator did not understand
	// read as "nothing".
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	routeSnatTargets(net);
	Rules rules({netmapRule("198.51.100.0/24", "198.18.50.0/24")});
	// With masqueradeSourceCIDRs the sampled packets have a source (the range's first
	// address), which NETMAP maps.
	Agent agent = startAgent(kConfig + "masqueradeSourceCIDRs: [198.51.100.0/24]\n");
	agent.expectNatConflicts();
	requireNonZero(agent, "certain");
	INFO(agent.log());
	CHECK(agent.log().find("rewrites its source to 198.18.50.0: rule handle") != std::string::npos);
	requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, "198.18.50.2");
}

TEST_CASE("Docker's rule: not for a pod subnet outside its own; for one inside, may")
{
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	SECTION("outside")
	{
		Rules rules({dockerRule("198.19.0.0/16")});
		Agent agent = startAgent(kConfig + "masqueradeSourceCIDRs: [198.51.100.0/24]\n");
		requireNothingReported(agent);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kPodV4);
	}
	SECTION("inside")
	{
		Rules rules({dockerRule("198.51.100.0/24")});
		Agent agent = startAgent(kConfig + "masqueradeSourceCIDRs: [198.51.100.0/24]\n");
		agent.expectNatConflicts();
		// The output interface of a sampled packet is not known: `! -o docker0` may.
		requireNonZero(agent, "may");
		INFO(agent.log());
		CHECK(agent.log().find("may masquerade it") != std::string::npos);
		CHECK(agent.log().find("from 198.51.100.0 to 192.0.2.0") != std::string::npos);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kNodeV4);
	}
}

TEST_CASE("upstream's leftover chain: reported until it is removed, then resolved")
{
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	const std::vector<std::string> leftover = upstreamAgentRules({kClusterCidr});
	Rules rules(leftover);
	Agent agent = startAgent();
	agent.expectNatConflicts();
	requireNonZero(agent, "certain");
	CHECK(agent.log().find("in chain IP-MASQ-AGENT") != std::string::npos);
	requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kNodeV4);

	// The migration: the jump first, then the chain (docs/kubernetes.md).
	std::string jump = leftover.back();
	jump.replace(jump.find(" -A POSTROUTING"), 15, " -D POSTROUTING");
	runAll({jump, "iptables-nft -w -t nat -F IP-MASQ-AGENT", "iptables-nft -w -t nat -X IP-MASQ-AGENT"});
	requireGauge(agent, "0", "0");
	requireWithin([&] { return agent.log().find("NAT conflict resolved: ") != std::string::npos; }, 30s,
		      agent.process(), "the conflict resolved in the log");
	CHECK(curlGet(kHealth + "/readyz?verbose") == "200 ok\n");
	requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kPodV4);
}

TEST_CASE("kube-proxy's mark rules: nothing reported for unmarked traffic")
{
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	TempDir dir;
	dir.write("rules.nft", kubeProxyTable());
	std::vector<std::string> commands{"nft -f " + dir.file("rules.nft"), kubeProxyIptablesRule()};
	for (const std::string &c : kubeProxyIptablesChain())
		commands.push_back(c);
	Rules rules(commands);
	Agent agent = startAgent();
	requireNothingReported(agent);
	requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kPodV4);
}

TEST_CASE("a match the evaluator does not know: reported as may")
{
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	Agent agent = startAgent();
	agent.expectNatConflicts();
	requireGauge(agent, "0", "0");
	// Added while the agent runs: the monitor's notification makes a pass due.
	Rules rules({statisticRule()});
	requireNonZero(agent, "may");
	CHECK(gauge("certain") == "0");
	CHECK(agent.log().find("may masquerade it: rule handle") != std::string::npos);
}

TEST_CASE("other tables that cannot be read: counted, said in the log and /readyz?verbose, and "
	  "the check resumes once they can")
{
	Topology net;
	flushRuleset();
	Agent agent = startAgent();
	agent.expectNatConflicts();
	requireGauge(agent, "0", "0");
	// More tables than the reader lists (1,000): the read fails as a whole.
	TempDir dir;
	std::string many;
	for (int i = 0; i < 1001; i++)
		many += fmt::format("table ip filler{}\n", i);
	dir.write("many.nft", many);
	runOrFail("nft -f " + dir.file("many.nft"));
	requireWithin([&] { return counter("ip_masq_agent_nat_check_failures_total") != "0"; }, kCheckDeadline,
		      agent.process(), "a failed pass counted", metricsAndReadiness);
	INFO(metricsAndReadiness() << "\nagent log:\n" << agent.log());
	// No gauge while the check cannot look: never a zero that reads as "no conflict".
	CHECK(gauge("certain").empty());
	CHECK(agent.log().find("more than 1000 tables") != std::string::npos);
	CHECK_THAT(curlGet(kHealth + "/readyz?verbose"),
		   Catch::StartsWith("200 ok\nwarning: ") && Catch::Contains("more than 1000 tables"));

	std::string fewer;
	for (int i = 0; i < 1001; i++)
		fewer += fmt::format("delete table ip filler{}\n", i);
	dir.write("fewer.nft", fewer);
	runOrFail("nft -f " + dir.file("fewer.nft"));
	requireGauge(agent, "0", "0");
	requireWithin([&] { return agent.log().find("other tables' NAT is readable again") != std::string::npos; },
		      5s, agent.process(), "the recovery said");
	CHECK(curlGet(kHealth + "/readyz?verbose") == "200 ok\n");
}

namespace {

// --explain's lines for `args`, with `config` in a file of its own.
std::string explainWith(const std::string &config, const std::string &args)
{
	TempDir dir;
	dir.write("config", config);
	std::string out;
	const int status = run(fmt::format("{} --config={} {}", agentBinary(), dir.file("config"), args), &out);
	INFO(out);
	REQUIRE(status == 0);
	return out;
}

// "rule handle N" of the one rule of `table`'s chain `chain` that nft lists as `text`.
std::string ruleHandle(const std::string &table, const std::string &chain, const std::string &text)
{
	const std::string listing = runOrFail(fmt::format("nft -a list chain {} {}", table, chain));
	const size_t at = listing.find(text + " # handle ");
	INFO(listing);
	REQUIRE(at != std::string::npos);
	const size_t digits = at + text.size() + 10;
	return "rule handle " + listing.substr(digits, listing.find('\n', digits) - digits);
}

// The conflict, said in the log and in /readyz?verbose, quoted as nft lists the rule.
void requireReported(const Agent &agent, const std::vector<std::string> &parts)
{
	const std::string verbose = curlGet(kHealth + "/readyz?verbose");
	INFO(metricsAndReadiness() << "\nagent log:\n" << agent.log());
	for (const std::string &part : parts) {
		CHECK(agent.log().find(part) != std::string::npos);
		CHECK(verbose.find(part) != std::string::npos);
	}
	CHECK(requireQuotesAsNft(verbose) > 0);
	CHECK(requireQuotesAsNft(agent.log()) > 0);
}

const std::string kNatTable = "nft 'add chain ip other post { type nat hook postrouting priority srcnat; }'";

// The external host answers at `address` too, and the node routes `routed` to it.
void serveAlsoAt(const Topology &net, const std::string &address, const std::string &routed)
{
	net.external.runOrFail("ip addr add " + address + "/32 dev eth0");
	runOrFail("ip route add " + routed + " via " + kServerV4);
}

} // namespace

TEST_CASE("a CNI's masquerade of part of an exempt range: sampled where its rule matches, reported, "
	  "and the server there sees the node")
{
	// The issue's third case: the sample took only 198.18.0.0 of 198.18.0.0/15, which the
	// CNI's rule leaves alone, and the gauge said 0 while pod traffic to 198.19.9.2 left
	// masqueraded.
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	serveAlsoAt(net, "198.19.9.2", "198.19.0.0/16");
	const std::string config = "nonMasqueradeCIDRs: [198.18.0.0/15]\n";
	auto rules = std::make_unique<Rules>(std::vector<std::string>{
		"nft add table ip other", kNatTable, "nft add rule ip other post ip daddr 198.19.0.0/16 masquerade"});
	const std::string handle = ruleHandle("ip other", "post", "ip daddr 198.19.0.0/16 masquerade");
	Agent agent = startAgent(config);
	agent.expectNatConflicts();
	requireGauge(agent, "1", "0");
	requireReported(agent, {"NAT conflict: table ip other chain post (priority srcnat, before the agent) "
				"masquerades it: " + handle + " (`ip daddr 198.19.0.0/16 masquerade`), which undoes "
				"nonMasqueradeCIDRs 198.18.0.0/15 (",
				"/config:2): IPv4 traffic from any source to 198.19.0.0 on any port is not masqueraded by the agent"});
	CHECK_THAT(curlGet(kHealth + "/readyz?verbose"), Catch::StartsWith("200 ok\nwarning: NAT conflict: table ip other"));
	CHECK_THAT(explainWith(config, "--explain=198.19.9.2"),
		   Catch::Contains("; but table ip other chain post (priority srcnat, before the agent) masquerades "
				   "it: " + handle + " (`ip daddr 198.19.0.0/16 masquerade`)"));
	requireSource(net, agent, AF_INET, "198.19.9.2", kServerPort, kNodeV4);

	// The rule gone: resolved, and the pod's own address again.
	rules.reset();
	requireGauge(agent, "0", "0");
	requireWithin([&] { return agent.log().find("NAT conflict resolved: ") != std::string::npos; }, kCheckDeadline,
		      agent.process(), "the conflict resolved in the log", metricsAndReadiness);
	requireSource(net, agent, AF_INET, "198.19.9.2", kServerPort, kPodV4);
}

TEST_CASE("a neighbour's th dport 53 masquerade: certain for DNS traffic to each exempt entry, quoted "
	  "as nft lists it, and a connection to port 53 arrives masqueraded")
{
	// The issue's first case: reported as "may" for a packet of any port; the port its
	// rule matches decides it.
	Topology net;
	SourceEchoServer dns(net.external, 53);
	SourceEchoServer other(net.external);
	flushRuleset();
	serveAlsoAt(net, "198.18.53.2", "198.18.53.2/32");
	const std::string config = "nonMasqueradeCIDRs: [198.18.0.0/15]\n";
	Rules rules({"nft add table ip other", kNatTable, "nft add rule ip other post th dport 53 masquerade"});
	const std::string handle = ruleHandle("ip other", "post", "th dport 53 masquerade");
	Agent agent = startAgent(config);
	agent.expectNatConflicts();
	// Link-local and 198.18.0.0/15, each certain for 53/udp (the may of any port dropped).
	requireGauge(agent, "2", "0");
	const std::string rule = "NAT conflict: table ip other chain post (priority srcnat, before the agent) "
				 "masquerades it: " + handle + " (`th dport 53 masquerade`), which undoes ";
	requireReported(agent, {rule + "nonMasqueradeCIDRs 198.18.0.0/15 (",
				"/config:2): IPv4 traffic from any source to 198.18.0.0 port 53/udp is not masqueraded by the agent",
				rule + "link-local 169.254.0.0/16: IPv4 traffic from any source to 169.254.0.0 port 53/udp "
				       "is not masqueraded by the agent"});
	CHECK(agent.log().find("may masquerade it") == std::string::npos);
	CHECK_THAT(explainWith(config, "--explain=198.18.53.2 --explain-port=53/tcp"),
		   Catch::Contains("; but table ip other chain post (priority srcnat, before the agent) masquerades "
				   "it: " + handle + " (`th dport 53 masquerade`)"));
	// The kernel: port 53 masqueraded, another port not.
	requireSource(net, agent, AF_INET, "198.18.53.2", 53, kNodeV4);
	requireSource(net, agent, AF_INET, "198.18.53.2", kServerPort, kPodV4);
}

TEST_CASE("outputAddress, and a masquerade before it: sampled where the rule bites inside a masqueraded "
	  "range, reported, and the server sees the node")
{
	// The issue's second case. The agent SNATs 198.18.128.0/17 and 198.19.0.0/16 (one range
	// of its own, sampled at 198.18.128.0, which the neighbour's rule leaves alone) to
	// 203.0.113.7; the neighbour masquerades what is not in 198.18.0.0/16 first.
	Topology net;
	SourceEchoServer server(net.external);
	flushRuleset();
	serveAlsoAt(net, "198.19.0.2", "198.19.0.0/16");
	const std::string config = "nonMasqueradeCIDRs: [198.18.0.0/15]\n"
				   "masqueradeCIDRs: [198.18.128.0/17, 198.19.0.0/16]\n"
				   "outputAddress: 203.0.113.7\n";
	const std::string text = "ip daddr != 198.18.0.0/16 fib daddr type != local masquerade";
	Rules rules({"nft add table ip nat",
		     "nft 'add chain ip nat POSTROUTING { type nat hook postrouting priority srcnat; }'",
		     "nft add rule ip nat POSTROUTING " + text});
	const std::string handle = ruleHandle("ip nat", "POSTROUTING", text);
	Agent agent = startAgent(config);
	agent.expectNatConflicts();
	// Also 0.0.0.1 (no entry covers it) and link-local, both sampled before.
	requireGauge(agent, "3", "0");
	requireReported(agent, {"NAT conflict: table ip nat chain POSTROUTING (priority srcnat, before the agent) "
				"masquerades it: " + handle + " (`" + text + "`), before the agent SNATs to 203.0.113.7 "
				"IPv4 traffic from any source to 198.19.0.0 on any port (masqueradeCIDRs 198.19.0.0/16 ("});
	CHECK_THAT(explainWith(config, "--explain=198.19.0.2"),
		   Catch::Contains("; but table ip nat chain POSTROUTING (priority srcnat, before the agent) "
				   "masquerades it: " + handle + " (`" + text + "`), before the agent SNATs to 203.0.113.7"));
	requireSource(net, agent, AF_INET, "198.19.0.2", kServerPort, kNodeV4);
}
