// SPDX-License-Identifier: Apache-2.0
// The SNAT guard (snatGuard) against real traffic (traffic_support.h: a pod, the node and an
// external host in namespaces of their own), its table applied by the netlink backend:
// observe lets every connection through and counts those over the limit per source and
// destination; enforce lets through at most the burst plus the rate times the elapsed time,
// while another source's connections all succeed and an exempt one is never limited;
// openConnections stops the 31st open connection of a source held at 30; UDP is counted
// too, and IPv6 is limited alike. Traffic never looks like drift, and a replacement (a
// switch of mode, a new backend as after a restart) keeps the guard's sets: their handles
// and what they hold. Then the same through the running agent, its config file edited. Last,
// the daemon's read of the sets: the keys most over each limit, at its bound, and every set's
// count.
#include <arpa/inet.h>
#include <csignal>
#include <map>
#include <poll.h>
#include <regex>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "backend_support.h"
#include "netns.h"
#include "traffic_support.h"

using namespace std::chrono_literals;
using namespace ipmasq;
using namespace ipmasq::test;

namespace {

// The pod's other addresses: a second client, and one the guard exempts.
const std::string kSecondClient = "198.51.100.3";
const std::string kExemptClient = "198.51.100.4";

// The pod namespace answers from all three addresses; the node routes the /24 to it.
void addClients(const Topology &net)
{
	net.pod.runOrFail(fmt::format("ip addr add {}/24 dev eth0 && ip addr add {}/24 dev eth0", kSecondClient,
				      kExemptClient));
}

Config guardConfig(SnatGuardMode mode, std::optional<uint32_t> rate, std::optional<uint32_t> open)
{
	Config config = defaultConfig({});
	SnatGuard guard;
	guard.mode = mode;
	guard.newConnectionsPerSecond = rate;
	guard.openConnections = open;
	auto exempt = parsePrefix(kExemptClient + "/32");
	REQUIRE(exempt);
	guard.exempt = {*exempt};
	config.snatGuard = guard;
	return config;
}

Ruleset guardRuleset(SnatGuardMode mode, std::optional<uint32_t> rate, std::optional<uint32_t> open,
		     bool enableIpv6 = false)
{
	RulesetOptions options;
	options.enableIpv6 = enableIpv6;
	return buildRuleset(guardConfig(mode, rate, open), options);
}

void apply(NetlinkBackend &backend, const Ruleset &ruleset)
{
	const auto applied = backend.apply(ruleset);
	INFO((applied ? "" : applied.error().message));
	REQUIRE(applied);
}

// The three hosts with the pod's other clients, the external host's sinks, and the node's
// backend, which applied `ruleset`.
struct GuardedNode {
	explicit GuardedNode(const Ruleset &ruleset) : sinks(sinksOn(net.external, AF_INET)), backend(freshBackend())
	{
		addClients(net);
		apply(*backend, ruleset);
	}

	Topology net;
	Sinks sinks;
	std::unique_ptr<NetlinkBackend> backend;
};

using Clock = std::chrono::steady_clock;

// `count` TCP connections from `source` toward the external sinks, started at once (every
// first SYN leaves together), each given `timeout` to be established. How many were, and
// the time from the first connect() to the last answer.
struct Burst {
	size_t established = 0;
	double elapsedSeconds = 0;
	std::vector<UniqueFd> held;
};

Burst connectAtOnce(const Netns &pod, const std::string &source, size_t count, std::chrono::milliseconds timeout,
		    int family = AF_INET)
{
	Burst burst;
	const auto started = Clock::now();
	std::vector<UniqueFd> pending = inNetns(pod.fd(), [&] {
		std::vector<UniqueFd> fds;
		for (size_t i = 0; i < count; i++) {
			UniqueFd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
			const sockaddr_storage from = socketAddress(family, source, 0);
			const sockaddr_storage to =
				socketAddress(family, family == AF_INET ? kServerV4 : kServerV6, kSinkPort);
			if (bind(fd.get(), reinterpret_cast<const sockaddr *>(&from), lengthOf(family)) == 0)
				(void)connect(fd.get(), reinterpret_cast<const sockaddr *>(&to), lengthOf(family));
			fds.push_back(std::move(fd));
		}
		return fds;
	});
	const auto deadline = started + timeout;
	// At least one look after the deadline too: a test process that a busy machine did not
	// run until then still counts what the kernel established meanwhile (the elapsed time
	// below says how long that was).
	for (bool looked = false; !pending.empty() && (!looked || Clock::now() < deadline); looked = true) {
		std::vector<pollfd> polls;
		for (const UniqueFd &fd : pending)
			polls.push_back({fd.get(), POLLOUT, 0});
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
		if (poll(polls.data(), polls.size(), std::max<int>(0, static_cast<int>(left.count()))) <= 0)
			continue;
		std::vector<UniqueFd> still;
		for (size_t i = 0; i < pending.size(); i++) {
			if (!(polls[i].revents & (POLLOUT | POLLERR | POLLHUP))) {
				still.push_back(std::move(pending[i]));
				continue;
			}
			int error = -1;
			socklen_t length = sizeof(error);
			if (getsockopt(pending[i].get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) {
				burst.established++;
				burst.held.push_back(std::move(pending[i]));
			}
		}
		pending = std::move(still);
	}
	burst.elapsedSeconds = std::chrono::duration<double>(Clock::now() - started).count();
	return burst;
}

// The packets the over set `set` counted for `client` toward the sinks over `protocol`, as
// `nft list` shows the element; nullopt when it holds none for them.
std::optional<uint64_t> overCount(const std::string &set, const std::string &client, const char *protocol = "tcp",
				  const std::string &server = kServerV4)
{
	const std::string listing = runOrFail("nft list set inet ip-masq-agent " + set);
	const std::regex element(fmt::format(R"({} \. {} \. {} \. {} [^,}}]*counter packets (\d+))",
					     std::regex_replace(client, std::regex(R"(\.)"), R"(\.)"),
					     std::regex_replace(server, std::regex(R"(\.)"), R"(\.)"), protocol,
					     kSinkPort));
	std::smatch match;
	INFO(listing);
	if (!std::regex_search(listing, match, element))
		return std::nullopt;
	return std::stoull(match[1]);
}

// The handle of every dynamic set of the agent's table (the guard's, but for the exempt
// set, which a replacement makes again like the other interval sets), by name, as `nft -a
// list table` shows it.
std::map<std::string, std::string> dynamicSetHandles()
{
	const std::string listing = runOrFail("nft -a list table inet ip-masq-agent");
	std::map<std::string, std::string> handles;
	const std::regex set(R"(set (guard-(?:rate|open|over-rate|over-open)-v[46]) \{ # handle (\d+))");
	for (auto it = std::sregex_iterator(listing.begin(), listing.end(), set); it != std::sregex_iterator(); ++it)
		handles[(*it)[1]] = (*it)[2];
	return handles;
}

void requireInSync(NetlinkBackend &backend, const Ruleset &ruleset)
{
	const auto checked = backend.check(ruleset);
	REQUIRE(checked);
	CHECK(checked->verdict == TableCheck::same);
}

const std::string kHealth = "http://127.0.0.1:10263";

// The agent's config with the guard in `mode`: openConnections 30, the exempt client; its
// table verified every second, so that traffic that looked like drift would be repaired.
std::string agentConfig(const char *mode)
{
	return fmt::format("resyncInterval: 1s\nsnatGuard:\n  mode: {}\n  openConnections: 30\n"
			   "  exempt: [{}/32]\n", mode, kExemptClient);
}

uint64_t metricNumber(const std::string &series)
{
	const std::string value = metricAt(kHealth, series);
	return value.empty() ? 0 : std::stoull(value);
}

} // namespace

TEST_CASE("observe: 150 connections at once against 20 per second all connect, and the over set names the pod")
{
	const Ruleset ruleset = guardRuleset(SnatGuardMode::observe, 20, std::nullopt);
	GuardedNode node(ruleset);
	const Topology &net = node.net;

	const Burst burst = connectAtOnce(net.pod, kPodV4, 150, 20s);
	CHECK(burst.established == 150);
	// The bucket lets through its burst and then the rate: the rest were over it.
	const double within = 20 + 20 * burst.elapsedSeconds;
	const auto over = overCount("guard-over-rate-v4", kPodV4);
	REQUIRE(over);
	INFO("elapsed " << burst.elapsedSeconds << " s");
	CHECK(double(*over) >= 150 - within);
	CHECK_FALSE(overCount("guard-over-rate-v4", kSecondClient));
	// Traffic filled the dynamic sets; the table is still exactly the desired one.
	requireInSync(*node.backend, ruleset);
}

TEST_CASE("enforce: at most the burst plus the rate per second get through; another source and an exempt one all do")
{
	const Ruleset ruleset = guardRuleset(SnatGuardMode::enforce, 20, std::nullopt);
	GuardedNode node(ruleset);
	const Topology &net = node.net;

	// Less than a second each: a SYN retransmission (after 1 s) is not what is measured.
	const Burst burst = connectAtOnce(net.pod, kPodV4, 150, 900ms);
	INFO("established " << burst.established << " in " << burst.elapsedSeconds << " s");
	CHECK(double(burst.established) <= 20 + 20 * burst.elapsedSeconds);
	const auto over = overCount("guard-over-rate-v4", kPodV4);
	REQUIRE(over);
	CHECK(*over >= 150 - burst.established);

	// Another source has its own bucket: 15 connections, one by one, all succeed.
	for (int i = 0; i < 15; i++) {
		INFO("connection " << i + 1 << " of the second client");
		CHECK(tcpFrom(net.pod, AF_INET, kServerV4, 5s, kSecondClient).isValid());
		std::this_thread::sleep_for(100ms);
	}
	// An exempt source is never limited.
	const Burst exempt = connectAtOnce(net.pod, kExemptClient, 150, 20s);
	CHECK(exempt.established == 150);
	CHECK_FALSE(overCount("guard-over-rate-v4", kExemptClient));
	requireInSync(*node.backend, ruleset);
}

TEST_CASE("IPv6 (--enable-ipv6): enforce lets through at most the burst plus the rate per second, and "
	  "counts the rest per source and destination")
{
	Topology net;
	const Sinks sinks = sinksOn(net.external, AF_INET6);
	auto backend = freshBackend();
	const Ruleset ruleset = guardRuleset(SnatGuardMode::enforce, 20, std::nullopt, true);
	apply(*backend, ruleset);
	const Burst burst = connectAtOnce(net.pod, kPodV6, 150, 900ms, AF_INET6);
	INFO("established " << burst.established << " in " << burst.elapsedSeconds << " s");
	CHECK(burst.established >= 1);
	CHECK(double(burst.established) <= 20 + 20 * burst.elapsedSeconds);
	const auto over = overCount("guard-over-rate-v6", kPodV6, "tcp", kServerV6);
	REQUIRE(over);
	CHECK(*over >= 150 - burst.established);
	CHECK_FALSE(overCount("guard-over-rate-v4", kPodV4));
	requireInSync(*backend, ruleset);
}

TEST_CASE("openConnections: 30 held stop the 31st of that source, not another's; a switch of mode and a "
	  "new backend keep the sets, their handles and their counts")
{
	const Ruleset observe = guardRuleset(SnatGuardMode::observe, std::nullopt, 30);
	GuardedNode node(observe);
	const Topology &net = node.net;
	std::unique_ptr<NetlinkBackend> &backend = node.backend;
	std::vector<UniqueFd> held;
	for (int i = 0; i < 30; i++) {
		held.push_back(tcpFrom(net.pod, AF_INET, kServerV4, 5s, kPodV4));
		INFO("connection " << i + 1);
		REQUIRE(held.back().isValid());
	}
	// Observed: the 31st connects, and is counted over.
	held.push_back(tcpFrom(net.pod, AF_INET, kServerV4, 5s, kPodV4));
	REQUIRE(held.back().isValid());
	CHECK(overCount("guard-over-open-v4", kPodV4) >= 1u);
	held.pop_back();
	requireInSync(*backend, observe);
	const auto handles = dynamicSetHandles();
	REQUIRE(handles.size() == 2); // guard-open-v4, guard-over-open-v4

	// Enforced from now on, by a replacement that keeps the open set and its count of 30:
	// the 31st is dropped, every SYN of it (3 s: two retransmissions).
	const Ruleset enforce = guardRuleset(SnatGuardMode::enforce, std::nullopt, 30);
	apply(*backend, enforce);
	CHECK(dynamicSetHandles() == handles);
	CHECK_FALSE(tcpFrom(net.pod, AF_INET, kServerV4, 3s, kPodV4).isValid());
	CHECK(tcpFrom(net.pod, AF_INET, kServerV4, 5s, kSecondClient).isValid());
	requireInSync(*backend, enforce);

	// A new backend, as a restarted agent has: its first apply replaces the table, and
	// keeps them too.
	backend.reset();
	auto restarted = NetlinkBackend::open();
	REQUIRE(restarted);
	apply(**restarted, enforce);
	CHECK(dynamicSetHandles() == handles);
	CHECK_FALSE(tcpFrom(net.pod, AF_INET, kServerV4, 3s, kPodV4).isValid());
	requireInSync(**restarted, enforce);

	// Reset (conntrack's entries go to CLOSE, which ct count does not count): the key's
	// count falls to 0, and the set's garbage collection takes the key out.
	for (const UniqueFd &fd : held) {
		const linger reset{1, 0};
		REQUIRE(setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)) == 0);
	}
	held.clear();
	const auto holdsKeys = [] {
		return runOrFail("nft list set inet ip-masq-agent guard-open-v4").find("elements = {") != std::string::npos;
	};
	const auto deadline = Clock::now() + 60s;
	while (holdsKeys() && Clock::now() < deadline)
		std::this_thread::sleep_for(200ms);
	CHECK_FALSE(holdsKeys());
	CHECK(tcpFrom(net.pod, AF_INET, kServerV4, 5s, kPodV4).isValid());
}

TEST_CASE("UDP: 60 flows at once over 20 per second are counted over, per source and destination")
{
	Topology net;
	const Sinks sinks = sinksOn(net.external, AF_INET);
	auto backend = freshBackend();
	apply(*backend, guardRuleset(SnatGuardMode::observe, 20, std::nullopt));
	const auto started = Clock::now();
	std::vector<UniqueFd> flows;
	for (int i = 0; i < 60; i++)
		flows.push_back(udpFrom(net.pod, AF_INET, kServerV4));
	const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
	const auto over = overCount("guard-over-rate-v4", kPodV4, "udp");
	REQUIRE(over);
	INFO("elapsed " << elapsed << " s");
	CHECK(double(*over) >= 60 - (20 + 20 * elapsed));
	CHECK_FALSE(overCount("guard-over-rate-v4", kPodV4, "tcp"));
}

TEST_CASE("through the agent: observe, then enforce by an edit of the config file, then a restart, all "
	  "keep the guard's sets and what they count; traffic is never drift; --snat-usage and /metrics say "
	  "who was over")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	Topology net;
	addClients(net);
	const Sinks sinks = sinksOn(net.external, AF_INET);
	deleteAgentTable();
	TempDir dir;
	dir.write("config", agentConfig("observe"));
	const std::vector<std::string> args{"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"};
	auto agent = std::make_unique<AgentProcess>(args);
	requireWithin([] { return agentTableHas("ct count over 30"); }, kChangeSeen, *agent,
		      "the guard in the agent's table");

	std::vector<UniqueFd> held;
	for (int i = 0; i < 31; i++) {
		held.push_back(tcpFrom(net.pod, AF_INET, kServerV4, 5s, kPodV4));
		INFO("connection " << i + 1 << " (observed: all connect)");
		REQUIRE(held.back().isValid());
	}
	const auto handles = dynamicSetHandles();
	REQUIRE(handles.size() == 2);
	// A commit elsewhere makes the agent read its table again (the guard's sets full of
	// traffic meanwhile): three times it finds it as desired, and repairs nothing.
	for (int i = 0; i < 3; i++) {
		const uint64_t inSync = metricNumber("ip_masq_agent_noop_resyncs_total");
		runOrFail(fmt::format("nft add table inet neighbour-{}", i));
		requireWithin([&] { return metricNumber("ip_masq_agent_noop_resyncs_total") > inSync; }, 60s, *agent,
			      "a read of the table after a commit elsewhere that finds it as desired");
	}
	runOrFail("nft delete table inet neighbour-0; nft delete table inet neighbour-1; nft delete table inet neighbour-2");
	CHECK(metricNumber("ip_masq_agent_drift_repairs_total") == 0);
	CHECK(dynamicSetHandles() == handles);
	const std::string observed =
		"ip_masq_agent_snat_guard_over_total{family=\"ipv4\",limit=\"open_connections\",mode=\"observe\"}";
	requireWithin([&] { return metricNumber(observed) >= 1; }, 60s, *agent, "the 31st counted over in /metrics");
	// The daemon's reading of the over sets (every 10 s with the SNAT usage): /snat-usage and
	// the series name the source and the destination, and say how full the sets are.
	const std::string topOver = fmt::format(
		"ip_masq_agent_snat_guard_top_over_attempts{{rank=\"1\",family=\"ipv4\",limit=\"open_connections\","
		"protocol=\"tcp\",client=\"{}\",destination=\"{}:{}\"}}", kPodV4, kServerV4, kSinkPort);
	requireWithin([&] { return metricNumber(topOver) >= 1; }, 60s, *agent, "the source over in /metrics, by rank");
	CHECK(metricAt(kHealth, "ip_masq_agent_snat_guard_set_elements{set=\"guard-open-v4\"}") == "1");
	CHECK(metricAt(kHealth, "ip_masq_agent_snat_guard_set_size{set=\"guard-open-v4\"}") == "65536");
	const std::string served = curlGet(kHealth + "/snat-usage");
	INFO(served);
	CHECK(std::regex_search(served, std::regex(R"(openConnections 30 \(IPv4, observed: let through\): 1 pair of source and destination over it)")));
	CHECK_THAT(served, Catch::Contains("set guard-open-v4: 1 of 65536 keys\n"));
	// By hand: who is over, toward what.
	std::string usage;
	REQUIRE(run(agentBinary() + " --snat-usage --config=" + dir.file("config"), &usage) == 0);
	INFO(usage);
	CHECK(std::regex_search(usage, std::regex(R"(openConnections 30 \(IPv4, observed: let through\): 1 pair of source and destination over it)")));
	CHECK_THAT(usage, Catch::Contains("set guard-open-v4: 1 of 65536 keys\n") &&
				  Catch::Contains("set guard-over-open-v4: 1 of 65536 keys\n"));
	CHECK(std::regex_search(usage, std::regex(fmt::format(R"(\s+[1-9]\d*\s+tcp\s+198\.51\.100\.2\s+203\.0\.113\.2:{})",
							      kSinkPort))));

	std::string explained;
	REQUIRE(run(fmt::format("{} --explain={} --explain-source={} --config={}", agentBinary(), kServerV4, kPodV4,
				dir.file("config")),
		    &explained) == 0);
	INFO(explained);
	CHECK(std::regex_search(explained,
				std::regex(R"(SNAT guard \(observe\): per source toward it, openConnections 30; from )"
					   R"(198\.51\.100\.2: guarded; over a limit toward it \(the last 10 minutes\): )"
					   R"(198\.51\.100\.2 tcp/9443 (1 attempt|([2-9]|[1-9]\d+) attempts) over openConnections)")));

	// Enforce, by an edit: the rules change, the sets and their count of 31 stay.
	dir.write("config", agentConfig("enforce"));
	requireWithin([] { return agentTableHas("counter name \"guard-dropped-open-v4\" drop"); }, kChangeSeen, *agent,
		      "the guard enforced");
	CHECK(dynamicSetHandles() == handles);
	CHECK_FALSE(tcpFrom(net.pod, AF_INET, kServerV4, 3s, kPodV4).isValid());
	CHECK(tcpFrom(net.pod, AF_INET, kServerV4, 5s, kExemptClient).isValid());

	// A restart: its first sync replaces the table, and keeps them too.
	REQUIRE(agent->stop(SIGTERM) == 0);
	agent = std::make_unique<AgentProcess>(args);
	requireWithin([] { return metricNumber("ip_masq_agent_syncs_total") >= 1; }, kChangeSeen, *agent,
		      "the restarted agent's first sync");
	CHECK(dynamicSetHandles() == handles);
	CHECK_FALSE(tcpFrom(net.pod, AF_INET, kServerV4, 3s, kPodV4).isValid());
	CHECK(metricNumber("ip_masq_agent_drift_repairs_total") == 0);
	agent.reset();
	deleteAgentTable();
}

TEST_CASE("the daemon's read of the guard keeps the keys most over each limit, at its bound, and counts "
	  "every set whole, each in one dump; --explain's read keeps every key")
{
	const Ruleset ruleset = guardRuleset(SnatGuardMode::observe, 20, 30);
	auto backend = freshBackend();
	apply(*backend, ruleset);
	// 50 keys over the rate limit, the i-th with i attempts, and 40 tracked for the open limit,
	// as traffic would leave them.
	std::string script = "add element inet ip-masq-agent guard-over-rate-v4 {\n";
	for (int i = 1; i <= 50; i++)
		script += fmt::format("198.18.0.{} . 192.0.2.1 . tcp . 443 counter packets {} bytes 0,\n", i, i);
	script += "}\nadd element inet ip-masq-agent guard-open-v4 {\n";
	for (int i = 1; i <= 40; i++)
		script += fmt::format("198.18.1.{} . 192.0.2.1 . tcp . 443,\n", i);
	script += "}\n";
	runOrFail("nft -f - <<'EOF'\n" + script + "EOF\n");

	const auto read = backend->readGuard(ruleset.table, ruleset.dynamicSets, 3);
	INFO((read ? "" : read.error().message));
	REQUIRE(read);
	REQUIRE(read->over.size() == 3);
	for (size_t i = 0; i < 3; i++) {
		CHECK(read->over[i].kind == GuardLimitKind::newConnections);
		CHECK(read->over[i].attempts == 50 - i);
		CHECK(read->over[i].source.toString() == fmt::format("198.18.0.{}", 50 - i));
		CHECK(read->over[i].destination.toString() == "192.0.2.1");
		CHECK(read->over[i].port == 443);
	}
	std::map<std::string, size_t> fill;
	for (const DynamicSetFill &set : read->fill) {
		CHECK(set.size == 65536);
		fill[set.set] = set.elements;
	}
	CHECK(fill == std::map<std::string, size_t>{{"guard-rate-v4", 0}, {"guard-over-rate-v4", 50},
						     {"guard-open-v4", 40}, {"guard-over-open-v4", 0}});

	const auto every = backend->readGuardOver(ruleset.table, ruleset.dynamicSets);
	REQUIRE(every);
	CHECK(every->size() == 50);
}
