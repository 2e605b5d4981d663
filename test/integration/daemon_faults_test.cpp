// SPDX-License-Identifier: Apache-2.0
// The daemon under faults, as the real binary against the real kernel: restarts with a bad
// config, a vanishing config directory, busy and hostile neighbours. Private namespace.
#include <catch2/catch.hpp>

#include <csignal>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "agent_process.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;

namespace {

const std::string kSlowResync = "resyncInterval: 1h\n";
const std::string kHealth = "http://127.0.0.1:10263";

// The value of a series in /metrics, or "" if absent.
std::string metric(const std::string &series)
{
	const std::string text = curlGet(kHealth + "/metrics");
	const size_t at = text.find("\n" + series + " ");
	if (at == std::string::npos)
		return {};
	const size_t from = at + series.size() + 2;
	return text.substr(from, text.find('\n', from) - from);
}

// Runs `command` in the background for `seconds` (bounded by timeout(1)), as another
// program on the node would; joined by the destructor.
class Neighbour
{
public:
	Neighbour(const std::string &command, int seconds)
		: thread_([command, seconds] {
			  run(fmt::format("timeout {} sh -c '{}' >/dev/null 2>&1", seconds, command));
		  })
	{
	}
	~Neighbour() { thread_.join(); }

private:
	std::thread thread_;
};

// While the defaults are in force, the set holds 172.16.0.0/12.
bool defaultsInForce()
{
	return tableHas("172.16.0.0/12");
}

} // namespace

TEST_CASE("restarted with a bad config, the agent adopts its table and restores it exactly")
{
	struct Variant {
		std::vector<std::string> flags;
		std::string config;
	};
	const std::vector<Variant> variants{
		{{}, "nonMasqueradeCIDRs: [192.0.2.0/24, 198.51.100.0/24]\n"},
		// IPv6, link-local masqueraded, and a range up to the top address.
		{{"--enable-ipv6"}, "masqLinkLocal: true\nmasqLinkLocalIPv6: true\nnonMasqueradeCIDRs: "
				    "[192.0.2.0/24, 198.51.100.0/24, 255.255.255.0/24, 2001:db8::/32]\n"},
		// Exceptions in both families (the sets' comments say so) and a source set.
		{{"--enable-ipv6"}, "nonMasqueradeCIDRs: [10.0.0.0/8, 192.0.2.0/24, 198.51.100.0/24, "
				    "2001:db8::/32]\nmasqueradeCIDRs: [10.1.0.0/16, 2001:db8:1::/48]\n"
				    "masqueradeSourceCIDRs: [203.0.113.0/24]\n"},
	};
	for (const Variant &variant : variants) {
		TempDir dir;
		std::vector<std::string> args = variant.flags;
		args.push_back("--config=" + dir.file("config"));
		dir.write("config", kSlowResync + variant.config);
		{
			AgentProcess first(args);
			requireWithin([] { return tableHas("198.51.100.0/24"); }, 5s, first, "first apply");
			REQUIRE(first.stop(SIGTERM) == 0);
		}
		const std::string before = tableListing();
		REQUIRE_FALSE(before.empty());

		dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [abcdefg]\n");
		AgentProcess agent(args);
		requireWithin([&] { return agent.log().find("adopted table inet ip-masq-agent") !=
					   std::string::npos; },
			      5s, agent, "adopted");
		CHECK(tableListing() == before); // adopted, not rewritten

		runOrFail("nft delete table inet ip-masq-agent");
		requireWithin([&] { return tableListing() == before; }, 5s, agent, "restored after delete");

		runOrFail("nft delete element inet ip-masq-agent nomasq-v4 '{ 192.0.2.0/24 }'");
		runOrFail("nft add element inet ip-masq-agent nomasq-v4 '{ 203.0.113.0/24 }'");
		requireWithin([&] { return tableListing() == before; }, 5s, agent, "restored after an edit");
		CHECK(agent.running());
		CHECK(agent.stop(SIGTERM) == 0);
		deleteTable();
	}
}

TEST_CASE("a fresh node with a bad config gets no table, and the log says why")
{
	TempDir dir;
	deleteTable();
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [abcdefg]\n");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([&] { return agent.log().find("no table inet ip-masq-agent exists to adopt") !=
				   std::string::npos; },
		      5s, agent, "reason logged");
	CHECK_THAT(agent.log(), Catch::Contains("abcdefg"));
	CHECK(tableListing().empty());
	CHECK(agent.stop(SIGTERM) == 0);
}

TEST_CASE("a config directory deleted and re-created is live within 1 s, never via the defaults")
{
	TempDir dir;
	runOrFail("mkdir " + dir.file("cfg"));
	dir.write("cfg/config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("cfg/config")});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "first apply");

	bool sawDefaults = false;
	const auto pollFor = [&](std::chrono::milliseconds span) {
		const auto end = std::chrono::steady_clock::now() + span;
		while (std::chrono::steady_clock::now() < end)
			sawDefaults |= defaultsInForce();
	};
	runOrFail("rm -rf " + dir.file("cfg"));
	pollFor(300ms); // long past the debounce: the agent has seen it gone
	runOrFail("mkdir " + dir.file("cfg"));
	dir.write("cfg/config", kSlowResync + "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
	const auto took = waitFor([&] {
		sawDefaults |= defaultsInForce();
		return tableHas("198.51.100.0/24");
	}, 1000ms);
	INFO(agent.log());
	REQUIRE(took); // no SIGHUP, no resync (1h): the ancestor watch found it
	pollFor(2500ms); // past the grace time: nothing changes any more
	CHECK_FALSE(sawDefaults);
	CHECK(tableHas("198.51.100.0/24"));
	CHECK(countOf(agent.log(), "config (built-in defaults") == 0);

	// Edits inside the re-created directory are watched again.
	dir.write("cfg/config", kSlowResync + "nonMasqueradeCIDRs: [203.0.113.0/24]\n");
	requireWithin([] { return tableHas("203.0.113.0/24"); }, 1s, agent, "edit after re-creation");
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("a file that vanishes and comes back within the grace time never passes through defaults")
{
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "first apply");

	runOrFail("rm " + dir.file("config"));
	bool sawDefaults = false;
	waitFor([&] {
		sawDefaults |= defaultsInForce();
		return false;
	}, 1000ms); // half the grace time, polling the table every few ms
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
	requireWithin([&] {
		sawDefaults |= defaultsInForce();
		return tableHas("198.51.100.0/24");
	}, 1s, agent, "back within the grace time");
	waitFor([&] {
		sawDefaults |= defaultsInForce();
		return false;
	}, 1500ms);
	CHECK_FALSE(sawDefaults);
	CHECK(countOf(agent.log(), "config (built-in defaults") == 0);
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("50,000 CIDRs while another program re-creates its table in a loop: no failure, ready")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	TempDir dir;
	// 50,000 single addresses two apart, so none merge: 50,000 intervals.
	std::string text = "resyncInterval: 1s\ncidrLimit: 50000\nnonMasqueradeCIDRs:\n";
	for (unsigned i = 0; i < 50000; i++)
		text += fmt::format("- 10.{}.{}.{}/32\n", i / 32768, (i / 128) % 256, (i % 128) * 2);
	dir.write("config", text);
	dir.write("other.nft", "table inet bystander\ndelete table inet bystander\n"
			       "table inet bystander {\n\tchain c {\n"
			       "\t\ttype nat hook postrouting priority 50;\n\t}\n}\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263", "-v=1"});
	requireWithin([] { return curlGet(kHealth + "/healthz") == "200 ok\n"; }, 30s, agent, "ready");

	int probes = 0, notReady = 0;
	{
		// Two loops, so that commits come every few milliseconds: reading a table of
		// 50,000 intervals takes longer than that, so verifications race.
		const std::string loop = "while :; do nft -f " + dir.file("other.nft") +
					 " && echo >> " + dir.file("commits") + "; done";
		Neighbour other(loop, 10), another(loop, 10);
		const auto end = std::chrono::steady_clock::now() + 10s;
		while (std::chrono::steady_clock::now() < end) {
			probes++;
			if (curlGet(kHealth + "/healthz") != "200 ok\n")
				notReady++;
			std::this_thread::sleep_for(100ms);
		}
	}
	const std::string log = agent.log();
	INFO(log.substr(log.size() > 20000 ? log.size() - 20000 : 0));
	std::string commits;
	run("wc -l < " + dir.file("commits"), &commits);
	INFO("the neighbours' commits: " << commits);
	CHECK(std::stoi("0" + commits) > 100);
	CHECK(probes > 50);
	CHECK(notReady == 0);
	CHECK(metric("ip_masq_agent_sync_failures_total") == "0");
	CHECK(countOf(log, "error:") == 0);
	CHECK(countOf(log, "outside the agent") == 0); // the neighbour never touched our table
	// The agent did look at its table while the neighbours were busy: found it intact,
	// or could not read it consistently (and wrote it again).
	CHECK(countOf(log, "is intact") + countOf(log, "could not be read consistently") >= 3);
	CHECK(metric("ip_masq_agent_nonmasquerade_intervals{family=\"ipv4\"}") == "50001");
	CHECK(agent.stop(SIGTERM) == 0);
	run("nft delete table inet bystander 2>/dev/null");
	deleteTable();
}

TEST_CASE("a writer deleting the table in a loop: restored at a bounded pace, cheaply, one log line")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263", "-v=1"});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "first apply");

	const double cpuBefore = cpuSeconds(agent.pid());
	REQUIRE(cpuBefore >= 0);
	{
		Neighbour fighter("while :; do nft delete table inet ip-masq-agent; done", 10);
	}
	const double cpu = cpuSeconds(agent.pid()) - cpuBefore;
	// The last restore is at most the pace's cap (2 s) away.
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "restored after the fight");
	const std::string repairs = metric("ip_masq_agent_drift_repairs_total");
	const std::string log = agent.log();
	INFO(log << "\nrepairs: " << repairs << ", CPU: " << cpu << " s");
	REQUIRE_FALSE(repairs.empty());
	WARN("fighting writer: " << repairs << " restores, agent CPU " << cpu << " s in 10 s");
	CHECK(std::stoi(repairs) >= 5);
	CHECK(std::stoi(repairs) <= 15); // 100 ms doubling to 2 s: about 9 in 10 s
	CHECK(cpu < 1.0); // well under a tenth of a core over the 10 s
	CHECK(countOf(log, "changed or deleted outside the agent") == 1); // one episode
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}
