// SPDX-License-Identifier: Apache-2.0
// The table's connection counters with real traffic (traffic_support.h: a pod, the node and
// an external host in namespaces of their own): after N connections to a masqueraded and M
// to a non-masqueraded destination, nft and /metrics say N and M more; a table replacement
// and a table deleted by hand never make a count go down; and under a steady stream of new
// connections, kill -9, restarts and config changes that replace the table never make a
// sampled count go back, and the count is exactly the connections made.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <regex>

#include <fmt/format.h>

#include "agent_process.h"
#include "flow_stream.h"
#include "netns.h"
#include "traffic_support.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;

namespace {

const std::string kHealth = "http://127.0.0.1:10264";
const std::string kConfig = "nonMasqueradeCIDRs: [192.0.2.0/24]\n";
// The same decisions with one more rule (an interface exemption): a full replacement,
// not an element update.
const std::string kConfigWithInterfaces = kConfig + "nonMasqueradeInterfaces: [wg9]\n";

using Counts = std::map<std::string, uint64_t>;

// The agent's counters as the kernel holds them: name -> packets (first packets of
// connections, at a nat hook).
Counts kernelCounts()
{
	std::string json;
	run("nft -j list counters table inet ip-masq-agent", &json);
	static const std::regex counter(R"re("name": "([^"]+)"[^}]*"packets": (\d+))re");
	Counts counts;
	for (auto it = std::sregex_iterator(json.begin(), json.end(), counter);
	     it != std::sregex_iterator(); ++it)
		counts[(*it)[1]] = std::stoull((*it)[2]);
	return counts;
}

// ip_masq_agent_connections_total as /metrics shows it: "family/decision/reason" -> value.
Counts metricCounts()
{
	const std::string text = curlGet(kHealth + "/metrics");
	static const std::regex sample(
		R"re(ip_masq_agent_connections_total\{family="(\w+)",decision="(\w+)",reason="(\w+)"\} (\d+))re");
	Counts counts;
	for (auto it = std::sregex_iterator(text.begin(), text.end(), sample);
	     it != std::sregex_iterator(); ++it)
		counts[fmt::format("{}/{}/{}", (*it)[1].str(), (*it)[2].str(), (*it)[3].str())] =
			std::stoull((*it)[4]);
	return counts;
}

uint64_t countOr0(const Counts &counts, const std::string &name)
{
	const auto it = counts.find(name);
	return it == counts.end() ? 0 : it->second;
}

std::string describe(const Counts &counts)
{
	std::string out;
	for (const auto &[name, value] : counts)
		out += fmt::format("{}={} ", name, value);
	return out;
}

// Every count of `before` is still there in `after`, and not lower.
void requireNoneLower(const Counts &before, const Counts &after, const char *what)
{
	INFO(what << ": before " << describe(before) << "\nafter " << describe(after));
	for (const auto &[name, value] : before) {
		INFO(name);
		REQUIRE(after.count(name) == 1);
		CHECK(after.at(name) >= value);
	}
}

// The metrics catch up with the kernel's counters (read every 2 s by the loop).
Counts requireMetricsMatchKernel(const AgentProcess &agent)
{
	Counts metrics;
	const auto same = [&] {
		const Counts kernel = kernelCounts();
		metrics = metricCounts();
		return !metrics.empty() &&
		       countOr0(metrics, "ipv4/masqueraded/none") == countOr0(kernel, "masq-v4") &&
		       countOr0(metrics, "ipv4/not_masqueraded/destination") ==
			       countOr0(kernel, "nomasq-dst-v4") &&
		       countOr0(metrics, "ipv6/masqueraded/none") == countOr0(kernel, "masq-v6");
	};
	requireWithin(same, 30s, agent, "/metrics to show the kernel's counters",
		      [&] { return "kernel: " + describe(kernelCounts()) + "\n/metrics: " + describe(metrics); });
	return metrics;
}

void connect(const Topology &net, const Agent &agent, int family, const std::string &server,
	     const std::string &source, int times)
{
	for (int i = 0; i < times; i++)
		requireSource(net, agent, family, server, kServerPort, source);
}

} // namespace

TEST_CASE("connection counters: exact per decision, in nft and /metrics, never lower")
{
	Topology net;
	SourceEchoServer echo(net.external);
	Agent agent(kConfig, {"--enable-ipv6", "--health-addr=127.0.0.1:10264"});
	requireMetricsMatchKernel(agent.process());

	// N masqueraded and M not, in IPv4; K masqueraded in IPv6.
	const int n = 7, m = 4, k = 3;
	const Counts before = kernelCounts();
	connect(net, agent, AF_INET, kServerV4, kNodeV4, n);
	connect(net, agent, AF_INET, kOtherServerV4, kPodV4, m);
	connect(net, agent, AF_INET6, kServerV6, kNodeV6, k);
	const Counts after = kernelCounts();
	INFO("before: " << describe(before) << "\nafter: " << describe(after) << "\ntable:\n"
			<< tableListing());
	CHECK(countOr0(after, "masq-v4") - countOr0(before, "masq-v4") == uint64_t(n));
	CHECK(countOr0(after, "nomasq-dst-v4") - countOr0(before, "nomasq-dst-v4") == uint64_t(m));
	CHECK(countOr0(after, "masq-v6") - countOr0(before, "masq-v6") == uint64_t(k));
	CHECK(countOr0(after, "nomasq-dst-v6") == countOr0(before, "nomasq-dst-v6"));
	// nft list shows them on the rules too.
	CHECK_THAT(tableListing(), Catch::Contains("counter name \"masq-v4\" masquerade"));
	const Counts metricsBefore = requireMetricsMatchKernel(agent.process());
	CHECK(countOr0(metricsBefore, "ipv4/masqueraded/none") >= uint64_t(n));

	SECTION("a full replacement carries every count over")
	{
		agent.writeConfig(kConfigWithInterfaces);
		requireWithin([] { return tableHas("nomasq-iface-v4"); }, kChangeSeen, agent.process(),
			      "the table with the interface rule");
		requireNoneLower(after, kernelCounts(), "kernel, replaced");
		requireNoneLower(metricsBefore, requireMetricsMatchKernel(agent.process()), "/metrics, replaced");
		// And it goes on counting from there.
		const Counts replaced = kernelCounts();
		connect(net, agent, AF_INET, kServerV4, kNodeV4, 2);
		CHECK(countOr0(kernelCounts(), "masq-v4") == countOr0(replaced, "masq-v4") + 2);
	}
	SECTION("a table deleted by hand comes back with the last counts")
	{
		// The loop reads them every 2 s and has exported `after` (metricsBefore matched
		// the kernel): that is what it carries into the table it restores.
		deleteTable();
		requireWithin([] { return tableHas("masq-v4"); }, kChangeSeen, agent.process(),
			      "the table restored");
		requireNoneLower(after, kernelCounts(), "kernel, restored");
		requireNoneLower(metricsBefore, requireMetricsMatchKernel(agent.process()), "/metrics, restored");
	}
}

TEST_CASE("--connection-counters=false: no counters in the table, none in /metrics")
{
	Topology net;
	SourceEchoServer echo(net.external);
	Agent agent(kConfig, {"--connection-counters=false", "--health-addr=127.0.0.1:10264"});
	connect(net, agent, AF_INET, kServerV4, kNodeV4, 2);
	CHECK(kernelCounts().empty());
	CHECK_THAT(tableListing(), !Catch::Contains("counter"));
	requireWithin([] { return curlGet(kHealth + "/metrics").starts_with("200 "); }, kChangeSeen,
		      agent.process(), "/metrics");
	CHECK_THAT(curlGet(kHealth + "/metrics"), !Catch::Contains("ip_masq_agent_connections_total"));
}

namespace {

// 10,000 non-masquerade CIDRs (every other /24 of 10.0.0.0/8: none merge), which make a
// replacement's encoding take tens of milliseconds; with `linkLocal` the destination set's
// comment and elements change, which only a replacement can apply.
std::string largeConfig(bool linkLocal)
{
	std::string text = kSlowResync + "cidrLimit: 10001\nnonMasqueradeCIDRs:\n";
	for (int i = 0; i < 10000; i++)
		text += fmt::format("  - 10.{}.{}.0/24\n", i / 128, (i % 128) * 2);
	text += "  - 192.0.2.0/24\n";
	if (linkLocal)
		text += "masqLinkLocal: true\n";
	return text;
}

// The sampled /metrics counters, each never lower than before across agent processes.
class MetricWatch
{
public:
	void sample()
	{
		for (const auto &[name, value] : metricCounts()) {
			const auto last = last_.find(name);
			if (last != last_.end() && value < last->second && decreases_++ == 0)
				firstDecrease_ = fmt::format("{}: {} after {}", name, value, last->second);
			last_[name] = value;
		}
		samples_++;
	}
	size_t samples() const { return samples_; }
	size_t decreases() const { return decreases_; }
	const std::string &firstDecrease() const { return firstDecrease_; }

private:
	Counts last_;
	size_t samples_ = 0;
	size_t decreases_ = 0;
	std::string firstDecrease_;
};

} // namespace

TEST_CASE("under a stream of new connections, kill -9, restarts and replacements: no count goes "
	  "back, and every connection is counted once")
{
	Topology net;
	constexpr uint16_t kFlowPort = 8081;
	AcceptingServer server(net.external, kFlowPort);
	TempDir dir;
	dir.write("config", largeConfig(false));
	const std::vector<std::string> args{"--config=" + dir.file("config"),
					    "--health-addr=127.0.0.1:10264"};
	deleteTable();
	auto agent = std::make_unique<AgentProcess>(args);
	const auto ready = [&](const char *what) {
		requireWithin([] { return curlGet(kHealth + "/readyz") == "200 ok\n"; }, 30s, *agent,
			      what);
	};
	ready("the first agent ready");
	const uint64_t initial = countOr0(kernelCounts(), "masq-v4");

	CounterSampler sampler;
	MetricWatch metrics;
	FlowStream flows(net, kServerV4, kFlowPort, 1000, 200000, 240s);
	constexpr int kRounds = 20;
	bool linkLocal = false;
	for (int round = 0; round < kRounds; round++) {
		// Connections flow between any two blows.
		const size_t before = flows.established();
		requireWithin([&] { return flows.established() >= before + 200; }, 30s, *agent,
			      "200 more connections established");
		metrics.sample();
		if (round % 2 == 1) {
			// A config change that only a replacement applies, and the kill at once:
			// sometimes before the commit, sometimes after, never half-way.
			linkLocal = !linkLocal;
			dir.write("config", largeConfig(linkLocal));
			usleep(static_cast<useconds_t>(round % 4) * 20000);
		}
		agent->stop(SIGKILL);
		agent = std::make_unique<AgentProcess>(args);
		ready("the restarted agent ready");
		metrics.sample();
	}
	const FlowStream::Totals totals = flows.stop();
	const CounterSampler::Report sampled = sampler.stop();
	const uint64_t counted = countOr0(kernelCounts(), "masq-v4") - initial;
	// /metrics catches up with the kernel within its 2 s read period.
	requireMetricsMatchKernel(*agent);
	metrics.sample();

	INFO("connections established " << totals.established << ", failed " << totals.failed
					 << " (" << totals.firstError << "); counted by masq-v4: "
					 << counted << "; kernel samples " << sampled.samples
					 << " (failed reads " << sampled.failedReads << "), first decrease: "
					 << sampled.firstDecrease << "; /metrics samples "
					 << metrics.samples() << ", first decrease: "
					 << metrics.firstDecrease() << "\nlast agent's log:\n"
					 << agent->log());
	REQUIRE(totals.failed == 0);
	// Every connection left the node masqueraded: none passed the node un-NATed.
	std::string sources;
	for (const auto &[address, count] : server.sources())
		sources += fmt::format("{}: {}; ", address, count);
	INFO("the server saw connections from " << sources);
	CHECK(server.sources() == std::map<std::string, size_t>{{kNodeV4, server.accepted()}});
	CHECK(sampled.decreases == 0);
	CHECK(metrics.decreases() == 0);
	CHECK(counted == totals.established);
	CHECK(sampled.samples > 100);
	WARN(fmt::format("{} connections in {} kill -9 and restarts ({} with a config change that "
			 "replaces the table): {} counted; {} kernel samples, {} /metrics samples",
			 totals.established, kRounds, kRounds / 2, counted, sampled.samples,
			 metrics.samples()));
	agent->stop(SIGTERM);
	deleteTable();
}
