// SPDX-License-Identifier: Apache-2.0
// The daemon's NAT conflict check against real traffic: other components' rules (written
// with the real iptables-nft and nft, as they write them) next to the running agent, in
// this test's private network namespaces. What the daemon reports (/metrics, its log,
// /readyz?verbose) must match what the external server sees, and a clean node reports
// nothing.
#include <catch2/catch.hpp>

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

// The agent exempts the analogue of a cluster CIDR (198.18.0.0/15) and one more range,
// 192.0.2.0/24, where the second external server is; other components exempt only the
// first.
const std::string kConfig = "nonMasqueradeCIDRs: [198.18.0.0/15, 192.0.2.0/24]\n";
const std::string kClusterCidr = "198.18.0.0/15";

// The gauge's sample for `certainty`, or "" while it is not exported.
std::string gauge(const std::string &certainty)
{
	const std::string text = curlGet(kHealth + "/metrics");
	const std::string series = fmt::format("ip_masq_agent_nat_conflicts{{certainty=\"{}\"}} ", certainty);
	const size_t at = text.find(series);
	if (at == std::string::npos)
		return {};
	const size_t from = at + series.size();
	return text.substr(from, text.find('\n', from) - from);
}

std::string metricsAndReadiness()
{
	return "/metrics:\n" + curlGet(kHealth + "/metrics") + "\n/readyz?verbose:\n" +
	       curlGet(kHealth + "/readyz?verbose") + "\nnft list ruleset:\n" +
	       runOrFail("nft list ruleset");
}

void requireGauge(const Agent &agent, const std::string &certain, const std::string &may)
{
	requireWithin([&] { return gauge("certain") == certain && gauge("may") == may; }, 30s,
		      agent.process(), "the conflict gauge", metricsAndReadiness);
}

// The check runs in the daemon after every sync and at most every few seconds after
// other tables change; this waits longer than that and then looks.
void requireNothingReported(const Agent &agent)
{
	requireGauge(agent, "0", "0");
	std::this_thread::sleep_for(4s);
	INFO(metricsAndReadiness() << "\nagent log:\n" << agent.log());
	CHECK(gauge("certain") == "0");
	CHECK(gauge("may") == "0");
	CHECK(agent.log().find("NAT conflict") == std::string::npos);
	CHECK(curlGet(kHealth + "/readyz?verbose") == "200 ok\n");
}

// Rules of other components in the node; the whole ruleset but the agent's table goes
// again at the end (the agent's destructor deletes its own).
class Rules
{
public:
	explicit Rules(const std::vector<std::string> &commands) { runAll(commands); }
	~Rules() { run("iptables-nft -w -t nat -F; iptables-nft -w -t nat -X; "
		       "nft delete table ip nat 2>/dev/null; nft delete table ip kube-proxy 2>/dev/null"); }
	Rules(const Rules &) = delete;
	Rules &operator=(const Rules &) = delete;
};

Agent startAgent(const std::string &config = kConfig)
{
	return Agent(config, {"--health-addr=127.0.0.1:10263"});
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
	requireWithin([&] { return !gauge("certain").empty() && gauge("certain") != "0"; }, 30s,
		      agent.process(), "a certain conflict", metricsAndReadiness);
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
	// Said once: later passes find the same conflict and say nothing.
	std::this_thread::sleep_for(4s);
	CHECK(countOf(agent.log(), "which undoes nonMasqueradeCIDRs 192.0.2.0/24") == 1);
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
		requireWithin([&] { return !gauge("may").empty() && gauge("may") != "0"; }, 30s,
			      agent.process(), "a may conflict", metricsAndReadiness);
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
	requireWithin([&] { return !gauge("certain").empty() && gauge("certain") != "0"; }, 30s,
		      agent.process(), "a certain conflict", metricsAndReadiness);
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
	// Added while the agent runs: the monitor's notification starts a pass.
	Rules rules({statisticRule()});
	requireWithin([&] { return !gauge("may").empty() && gauge("may") != "0"; }, 30s,
		      agent.process(), "a may conflict", metricsAndReadiness);
	CHECK(gauge("certain") == "0");
	CHECK(agent.log().find("may masquerade it: rule handle") != std::string::npos);
}
