// SPDX-License-Identifier: Apache-2.0
// Next to kube-proxy's nftables mode: real traffic from a pod through a node that holds
// kube-proxy's tables (written here from kube-proxy's documented layout) and the agent's.
//
// kube-proxy (pkg/proxy/nftables) keeps `table ip kube-proxy` and `table ip6 kube-proxy`.
// A Service's chain jumps to `mark-for-masquerade` (mark |= 0x4000) for traffic it wants
// masqueraded, and its `nat-postrouting` base chain (priority srcnat) jumps to
// `masquerading`, which returns unless the mark is set, clears it and masquerades
// fully-random. The agent's chain runs later (srcnat + 10), so kube-proxy decides first.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <regex>
#include <thread>
#include <sys/socket.h>

#include <fmt/format.h>

#include "agent_process.h"
#include "nat_components.h"
#include "netns.h"
#include "traffic_support.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;

namespace {

// The "ClusterIPs" of one Service whose endpoint is the external server: kube-proxy DNATs
// them to kServerV4/kServerV6 port kServerPort and, as with --masquerade-all, marks every
// connection for masquerading.
const std::string kServiceV4 = "198.18.0.10";
const std::string kServiceV6 = "2001:db8:3::10";
constexpr uint16_t kServicePort = 80;

constexpr uint16_t kHealthPort = 10263;

// kube-proxy's three base chains in every shape, as nft -f text.
constexpr const char *kHookChains = R"(	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}
	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}
)";

// One family's kube-proxy table, as `nft -f` input: the base chains, the jump chains and
// the service dispatch map kube-proxy creates at start-up, with one Service in them.
// nat-output's priority is kube-proxy's `dstnat` as a number: nft before 1.0.7 (Debian 12
// has 1.0.6) accepts that name on the prerouting hook only.
std::string kubeProxyTable(const std::string &family)
{
	const bool v4 = family == "ip";
	const std::string addrType = v4 ? "ipv4_addr" : "ipv6_addr";
	const std::string service = v4 ? kServiceV4 : kServiceV6;
	const std::string endpoint =
		v4 ? fmt::format("{}:{}", kServerV4, kServerPort)
		   : fmt::format("[{}]:{}", kServerV6, kServerPort);
	return fmt::format(
		R"(table {family} kube-proxy {{
	comment "rules for kube-proxy"
	map service-ips {{
		type {addrType} . inet_proto . inet_service : verdict
		comment "ClusterIP, ExternalIP and LoadBalancer IP traffic"
		elements = {{ {service} . tcp . {servicePort} : goto service-4QMBNJ7W-default/ext/tcp/http }}
	}}
{hooks}	chain services {{
		{family} daddr . meta l4proto . th dport vmap @service-ips
	}}
	chain mark-for-masquerade {{
		mark set mark or 0x4000
	}}
	chain masquerading {{
		mark and 0x4000 == 0 return
		mark set mark xor 0x4000
		masquerade fully-random
	}}
	chain service-4QMBNJ7W-default/ext/tcp/http {{
		{family} daddr {service} tcp dport {servicePort} jump mark-for-masquerade
		goto endpoint-5TPGNJF2-default/ext/tcp/http__{endpointName}
	}}
	chain endpoint-5TPGNJF2-default/ext/tcp/http__{endpointName} {{
		meta l4proto tcp dnat to {endpoint}
	}}
}}
)",
		fmt::arg("family", family), fmt::arg("addrType", addrType), fmt::arg("hooks", kHookChains),
		fmt::arg("service", service), fmt::arg("servicePort", kServicePort),
		fmt::arg("endpoint", endpoint),
		fmt::arg("endpointName", v4 ? kServerV4 : std::string("2001.db8.2..2")));
}

// `nft -j list table FAMILY kube-proxy`: every object with its handle.
std::string kubeProxyJson(const std::string &family)
{
	return runOrFail("nft -j list table " + family + " kube-proxy");
}

// kube-proxy's tables for both families in the node (this process's namespace); deleted
// again at the end of the test case.
class KubeProxy
{
public:
	KubeProxy() : file_(dir_.file("kube-proxy.nft"))
	{
		dir_.write("kube-proxy.nft", kubeProxyTable("ip") + kubeProxyTable("ip6"));
		runOrFail("nft -f " + file_);
	}

	~KubeProxy()
	{
		run("nft delete table ip kube-proxy 2>/dev/null");
		run("nft delete table ip6 kube-proxy 2>/dev/null");
	}

	KubeProxy(const KubeProxy &) = delete;
	KubeProxy &operator=(const KubeProxy &) = delete;

	// What kube-proxy does when it restarts: its tables go and come back, in two commits.
	void recreate() const
	{
		runOrFail("nft delete table ip kube-proxy && nft delete table ip6 kube-proxy");
		runOrFail("nft -f " + file_);
	}

	// A full resync in one transaction: the tables are flushed and refilled atomically.
	void flushAndRefill() const
	{
		dir_.write("refill.nft", "add table ip kube-proxy\nflush table ip kube-proxy\n"
					 "add table ip6 kube-proxy\nflush table ip6 kube-proxy\n" +
						 kubeProxyTable("ip") + kubeProxyTable("ip6"));
		runOrFail("nft -f " + dir_.file("refill.nft"));
	}

private:
	TempDir dir_;
	std::string file_;
};

// The agent's /metrics, fetched with a real HTTP client.
std::string metrics()
{
	return runOrFail(fmt::format("curl -sS --max-time 5 http://127.0.0.1:{}/metrics", kHealthPort));
}

// The value of an unlabelled sample in a Prometheus text exposition, or -1.
double sampleValue(const std::string &exposition, const std::string &name)
{
	const std::string prefix = "\n" + name + " ";
	const size_t at = ("\n" + exposition).find(prefix);
	if (at == std::string::npos)
		return -1;
	return std::stod(exposition.substr(at + prefix.size() - 1));
}

double metric(const std::string &name)
{
	const std::string text = metrics();
	const double value = sampleValue(text, name);
	INFO("/metrics:\n" << text);
	REQUIRE(value >= 0);
	return value;
}

// The agent's table as JSON: its handle (and every object's) changes when it is re-created.
// The agent's table as nft lists it, handles included (a rewrite changes them), without
// its counters' values: the traffic the test sends moves them.
std::string agentTableJson()
{
	static const std::regex values(R"(, "packets": \d+, "bytes": \d+)");
	return std::regex_replace(runOrFail("nft -j list table inet ip-masq-agent"), values, "");
}

const std::string kAppliedLine = "applied table inet ip-masq-agent";

// The agent's config: the external server's subnets are non-masquerade, 192.0.2.0/24 is not.
const std::string kConfig = "nonMasqueradeCIDRs: [203.0.113.0/24, \"2001:db8:2::/64\"]\n";

} // namespace

TEST_CASE("kube-proxy's masquerade mark wins; unmarked traffic follows the agent's config")
{
	Topology net;
	SourceEchoServer server(net.external);
	KubeProxy kubeProxy;
	const std::string beforeV4 = kubeProxyJson("ip");
	const std::string beforeV6 = kubeProxyJson("ip6");

	{
		Agent agent(kConfig, {"--enable-ipv6"});

		// A Service kube-proxy marked: masqueraded by kube-proxy, although its endpoint
		// (after DNAT) is in the agent's nonMasqueradeCIDRs.
		requireSource(net, agent, AF_INET, kServiceV4, kServicePort, kNodeV4);
		requireSource(net, agent, AF_INET6, kServiceV6, kServicePort, kNodeV6);
		// The same endpoint reached directly (no mark): the agent's config says keep the
		// pod's address.
		requireSource(net, agent, AF_INET, kServerV4, kServerPort, kPodV4);
		requireSource(net, agent, AF_INET6, kServerV6, kServerPort, kPodV6);
		// Unmarked, to a destination the config does not list: the agent masquerades.
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kNodeV4);

		// A config change makes the agent commit again: kube-proxy's tables stay as they are.
		agent.writeConfig("nonMasqueradeCIDRs: [192.0.2.0/24]\n");
		const auto switched = waitFor([&] {
			const Observation o = connectFromPod(net, AF_INET, kOtherServerV4, kServerPort, 2s);
			return o.ok() && o.address == kPodV4;
		}, kChangeSeen);
		INFO("agent log:\n" << agent.log());
		REQUIRE(switched);
		requireSource(net, agent, AF_INET, kServerV4, kServerPort, kNodeV4);
		requireSource(net, agent, AF_INET, kServiceV4, kServicePort, kNodeV4);
		CHECK(countOf(agent.log(), kAppliedLine) == 2);
	}

	// Every object of kube-proxy's, handles included, is as kube-proxy left it.
	CHECK(kubeProxyJson("ip") == beforeV4);
	CHECK(kubeProxyJson("ip6") == beforeV6);
}

TEST_CASE("kube-proxy re-creating its tables does not make the agent rewrite its own")
{
	Topology net;
	SourceEchoServer server(net.external);
	KubeProxy kubeProxy;
	Agent agent(kConfig, {"--enable-ipv6", fmt::format("--health-addr=127.0.0.1:{}", kHealthPort)});
	// Serving /metrics, with the first sync counted.
	const auto ready = waitFor([] {
		std::string text;
		run(fmt::format("curl -s --max-time 1 http://127.0.0.1:{}/metrics", kHealthPort), &text);
		return sampleValue(text, "ip_masq_agent_syncs_total") == 1;
	}, 5s);
	INFO("agent log:\n" << agent.log());
	REQUIRE(ready);

	const std::string tableBefore = agentTableJson();
	const double syncsBefore = metric("ip_masq_agent_syncs_total");
	const size_t appliedBefore = countOf(agent.log(), kAppliedLine);
	REQUIRE(appliedBefore == 1);

	// Each change, then SIGHUP: the agent looks at the kernel now (the generation moved, so
	// it compares its table) and must find its table intact, writing nothing.
	const auto checkUntouched = [&](const char *what) {
		// A look at the kernel ends in a no-op resync, or (wrongly here) in a commit.
		const auto looks = [] {
			const std::string text = metrics();
			return sampleValue(text, "ip_masq_agent_noop_resyncs_total") +
			       sampleValue(text, "ip_masq_agent_syncs_total");
		};
		const double looksBefore = looks();
		// A notification about kube-proxy's table is no reason to wake: give it time anyway.
		std::this_thread::sleep_for(300ms);
		REQUIRE(kill(agent.pid(), SIGHUP) == 0);
		const auto looked = waitFor([&] {
			return looks() > looksBefore;
		}, 5s);
		INFO(what << "\nagent log:\n" << agent.log() << "\n/metrics:\n" << metrics());
		REQUIRE(looked);
		CHECK(countOf(agent.log(), kAppliedLine) == appliedBefore);
		CHECK(metric("ip_masq_agent_syncs_total") == syncsBefore);
		CHECK(metric("ip_masq_agent_drift_repairs_total") == 0);
		CHECK(agentTableJson() == tableBefore);
		// And traffic is as before on both sides.
		requireSource(net, agent, AF_INET, kServiceV4, kServicePort, kNodeV4);
		requireSource(net, agent, AF_INET, kServerV4, kServerPort, kPodV4);
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kNodeV4);
	};

	kubeProxy.recreate();
	checkUntouched("after kube-proxy deleted and re-created its tables");
	kubeProxy.flushAndRefill();
	checkUntouched("after kube-proxy flushed and refilled its tables in one transaction");
}

// ---- kube-proxy's three nftables shapes, with real Services ----
//
// kube-proxy marks a Service connection for masquerading when its client is off the cluster
// (`ip daddr @cluster-ips ip saddr != <pod CIDR>`), and masquerades a hairpin (a pod that
// reaches itself through its Service). Its `masquerading` chain took three shapes:
// - before kubernetes PR #135800: `mark and 0x4000 == 0 return`, `mark set mark xor
//   0x4000`, `masquerade fully-random`; a hairpin is marked in the endpoint's chain;
// - PR #135800: the same as one rule;
// - PR #136499 (today's): that rule, and `ct status dnat ip saddr . ip daddr . meta l4proto
//   . th dport @hairpin-connections masquerade fully-random` instead of the endpoint's mark.
// None of them NATs a plain pod connection, the only kind the agent decides on: the agent
// must report nothing, and every Service flow must behave as kube-proxy intends.

namespace {

enum class Shape { beforePr135800, pr135800, current };

const std::string kClusterIpToServer = "198.18.0.10"; // endpoint: the external server, non-masquerade
const std::string kClusterIpToPod = "198.18.0.11"; // endpoint: the pod itself (a hairpin)
const std::string kPodCidr = "198.51.100.0/24";

std::string masqueradingChain(Shape shape)
{
	const std::string oneRule =
		"meta mark & 0x00004000 != 0x00000000 meta mark set meta mark ^ 0x00004000 masquerade fully-random";
	switch (shape) {
	case Shape::beforePr135800:
		return "mark and 0x4000 == 0 return\n\t\tmark set mark xor 0x4000\n\t\tmasquerade fully-random";
	case Shape::pr135800: return oneRule;
	case Shape::current:
		return oneRule + "\n\t\tct status dnat ip saddr . ip daddr . meta l4proto . th dport "
				 "@hairpin-connections masquerade fully-random";
	}
	return {};
}

// kube-proxy's `ip kube-proxy` table in `shape`, with two ClusterIP Services.
std::string kubeProxyShape(Shape shape)
{
	// Before PR #136499 the endpoint's chain marks its own pod's connections (a hairpin).
	const std::string hairpinMark =
		shape == Shape::current ? "" : fmt::format("ip saddr {} jump mark-for-masquerade\n\t\t", kPodV4);
	return fmt::format(
		R"(table ip kube-proxy {{
	comment "rules for kube-proxy"
	set cluster-ips {{
		type ipv4_addr
		elements = {{ {toServer}, {toPod} }}
	}}
	set hairpin-connections {{
		type ipv4_addr . ipv4_addr . inet_proto . inet_service
		elements = {{ {pod} . {pod} . tcp . {port} }}
	}}
	map service-ips {{
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = {{ {toServer} . tcp . 80 : goto service-to-server, {toPod} . tcp . 80 : goto service-to-pod }}
	}}
{hooks}	chain services {{
		ip daddr @cluster-ips ip saddr != {podCidr} jump mark-for-masquerade
		ip daddr . meta l4proto . th dport vmap @service-ips
	}}
	chain mark-for-masquerade {{
		mark set mark or 0x4000
	}}
	chain masquerading {{
		{masquerading}
	}}
	chain service-to-server {{
		meta l4proto tcp dnat to {server}:{port}
	}}
	chain service-to-pod {{
		{hairpinMark}meta l4proto tcp dnat to {pod}:{port}
	}}
}}
)",
		fmt::arg("hooks", kHookChains), fmt::arg("toServer", kClusterIpToServer), fmt::arg("toPod", kClusterIpToPod), fmt::arg("pod", kPodV4),
		fmt::arg("port", kServerPort), fmt::arg("podCidr", kPodCidr), fmt::arg("server", kServerV4),
		fmt::arg("masquerading", masqueradingChain(shape)), fmt::arg("hairpinMark", hairpinMark));
}

// What the server at the far end saw as the source of one connection.
std::string sourceSeen(const Netns &client, const std::string &address, uint16_t port)
{
	const Observation o = connectFrom(client, AF_INET, address, port);
	INFO("to " << address << ":" << port << ": " << o);
	REQUIRE(o.ok());
	return o.address;
}

} // namespace

TEST_CASE("kube-proxy's nftables rules in each of their three shapes: no conflict, and its Services work")
{
	const auto [shape, name] = GENERATE(std::pair{Shape::beforePr135800, "before PR #135800"},
					    std::pair{Shape::pr135800, "PR #135800"},
					    std::pair{Shape::current, "PR #136499 (today's)"});
	INFO("kube-proxy's shape: " << name);
	Topology net;
	SourceEchoServer server(net.external);
	SourceEchoServer podServer(net.pod); // the hairpin's endpoint
	// An off-cluster client: the external host reaches the ClusterIPs through the node.
	net.external.runOrFail("ip route add 198.18.0.0/24 via " + kNodeV4);
	TempDir dir;
	dir.write("kube-proxy.nft", kubeProxyShape(shape));
	runOrFail("nft -f " + dir.file("kube-proxy.nft"));
	{
		// The pod network and the endpoints' range are non-masquerade, as a cluster lists them.
		// The Agent's destructor waits for a complete NAT check and requires it to report
		// nothing (no conflict of any certainty).
		Agent agent(fmt::format("nonMasqueradeCIDRs: [{}, 203.0.113.0/24]\n", kPodCidr), {});
		// A plain pod connection to a non-masquerade destination keeps the pod's address.
		requireSource(net, agent, AF_INET, kServerV4, kServerPort, kPodV4);
		// The same endpoint through its ClusterIP from a pod: kube-proxy does not mark it.
		CHECK(sourceSeen(net.pod, kClusterIpToServer, 80) == kPodV4);
		// From off the cluster (192.0.2.2): kube-proxy marks and masquerades it.
		CHECK(sourceSeen(net.external, kClusterIpToServer, 80) == kNodeV4);
		// A pod reaching itself through its Service: masqueraded to the node's address on
		// the pod's link, so the reply comes back through the node.
		CHECK(sourceSeen(net.pod, kClusterIpToPod, 80) == "198.51.100.1");
		// Not listed: the agent masquerades.
		requireSource(net, agent, AF_INET, kOtherServerV4, kServerPort, kNodeV4);
		// Every kube-proxy rule the agent reads prints as nft lists it.
		const auto ruleset = ipmasq::nft::readNatRuleset();
		REQUIRE(ruleset);
		CHECK(requireNftText(*ruleset).rules >= 3);
	}
	runOrFail("nft delete table ip kube-proxy");
}
