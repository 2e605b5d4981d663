// SPDX-License-Identifier: Apache-2.0
// The daemon against the real kernel: config changes, ConfigMap swaps, self-healing,
// bad configs, signals, --once and --cleanup. Runs in a private network namespace.
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <cstdio>
#include <sys/socket.h>
#include <sys/un.h>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "agent_process.h"
#include "netns.h"
#include "ip-masq-agent/base/unique_fd.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;
using ipmasq::UniqueFd;

namespace {

// A long resync, so anything that happens faster was triggered by inotify or netlink.
const std::string kSlowResync = "resyncInterval: 1h\n";

// The kernel's handle of our table: it changes whenever the table is re-created,
// so an unchanged handle proves the agent wrote nothing.
long tableHandle()
{
	std::string out;
	if (run("nft -j list table inet ip-masq-agent 2>/dev/null", &out) != 0)
		return -1;
	std::smatch m;
	if (!std::regex_search(out, m, std::regex("\"table\": \\{[^}]*\"handle\": ([0-9]+)")))
		return -1;
	return std::stol(m[1]);
}

} // namespace

TEST_CASE("a config edit is applied at once, not at the next resync")
{
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return tableHas("10.0.0.0/8"); }, 5s, agent, "first apply");

	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	requireWithin([] { return tableHas("192.0.2.0/24") && !tableHas("10.0.0.0/8"); }, 5s, agent,
		      "atomic replace by rename");

	dir.overwrite("config", kSlowResync + "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
	requireWithin([] { return tableHas("198.51.100.0/24"); }, 5s, agent, "in-place edit");

	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("an editor's save (rename away, write anew) never passes through defaults")
{
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config"), "-v=1"});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "first apply");

	// vim's default: move the old file away, then create and write the new one.
	// The 5 ms gap is longer than the agent takes to react to the rename, and well
	// inside the 30 ms the agent lets config events settle.
	REQUIRE(std::rename(dir.file("config").c_str(), dir.file("config~").c_str()) == 0);
	std::this_thread::sleep_for(5ms);
	dir.overwrite("config", kSlowResync + "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
	requireWithin([] { return tableHas("198.51.100.0/24"); }, 5s, agent, "saved config applied");
	const std::string log = agent.log();
	INFO(log);
	CHECK(countOf(log, "built-in defaults") == 0);
	CHECK(countOf(log, "info: applied table") == 2);
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("a file still being written is not read, whatever triggers the sync")
{
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config"), "-v=1"});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "first apply");

	{
		// Truncate and write the first line only; the rest comes later.
		std::ofstream out(dir.file("config"), std::ios::trunc);
		out << kSlowResync << std::flush;
		std::this_thread::sleep_for(50ms);
		kill(agent.pid(), SIGHUP); // a reload in the middle of the write
		requireWithin([&] { return agent.log().find("is being written") != std::string::npos; },
			      5s, agent, "write in progress seen");
		CHECK(tableHas("192.0.2.0/24"));
		CHECK_FALSE(tableHas("172.16.0.0/12")); // the half file would mean defaults
		out << "nonMasqueradeCIDRs: [198.51.100.0/24]\n";
	}
	requireWithin([] { return tableHas("198.51.100.0/24"); }, 5s, agent, "complete file applied");
	CHECK(countOf(agent.log(), "info: applied table") == 2);
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("a Kubernetes ConfigMap update (the ..data symlink swap) is applied at once")
{
	TempDir dir;
	// The layout kubelet's atomic writer makes for a ConfigMap volume.
	runOrFail(fmt::format("cd {} && mkdir ..2026_11_21_a && "
			      "printf '{}nonMasqueradeCIDRs: [10.0.0.0/8]\\n' > ..2026_11_21_a/ip-masq-agent && "
			      "ln -s ..2026_11_21_a ..data && ln -s ..data/ip-masq-agent ip-masq-agent",
			      dir.path(), kSlowResync));
	AgentProcess agent({"--config=" + dir.file("ip-masq-agent")});
	requireWithin([] { return tableHas("10.0.0.0/8"); }, 5s, agent, "first apply");

	runOrFail(fmt::format("cd {} && mkdir ..2026_11_21_b && "
			      "printf '{}nonMasqueradeCIDRs: [203.0.113.0/24]\\n' > ..2026_11_21_b/ip-masq-agent && "
			      "ln -s ..2026_11_21_b ..data_tmp && mv -T ..data_tmp ..data && rm -rf ..2026_11_21_a",
			      dir.path(), kSlowResync));
	requireWithin([] { return tableHas("203.0.113.0/24") && !tableHas("10.0.0.0/8"); }, 5s, agent,
		      "ConfigMap swap");
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

namespace {

// Whether one of the agent's sets holds exactly this prefix as an element, from the
// kernel's JSON listing (nft -j), so that a prefix is never found inside a comment or a
// longer address.
bool tableHoldsElement(const std::string &prefix)
{
	std::string out;
	if (run("nft -j list table inet ip-masq-agent 2>/dev/null", &out) != 0)
		return false;
	const size_t slash = prefix.find('/');
	const std::regex element(fmt::format("\\{{\\s*\"prefix\"\\s*:\\s*\\{{\\s*\"addr\"\\s*:\\s*"
					     "\"{}\"\\s*,\\s*\"len\"\\s*:\\s*{}\\s*\\}}",
					     std::regex_replace(prefix.substr(0, slash), std::regex("\\."), "\\."),
					     prefix.substr(slash + 1)));
	return std::regex_search(out, element);
}

// The table's sets hold every prefix of `in` and none of `out`.
std::function<bool()> tableElementsAre(std::vector<std::string> in, std::vector<std::string> out)
{
	return [in, out] {
		return std::all_of(in.begin(), in.end(), tableHoldsElement) &&
		       std::none_of(out.begin(), out.end(), tableHoldsElement);
	};
}

} // namespace

TEST_CASE("--config-dir: adding, editing and removing one of two files is live, without a resync")
{
	TempDir dir;
	// Every file says 1h: the shortest resyncInterval of the files holds.
	dir.write("ip-masq-a", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config-dir=" + dir.path()});
	requireWithin(tableElementsAre({"192.0.2.0/24"}, {"10.0.0.0/8"}), 5s, agent, "first apply");

	dir.write("ip-masq-b", kSlowResync + "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
	// The resync is an hour away: whatever comes within kChangeSeen came from the watch.
	requireWithin(tableElementsAre({"192.0.2.0/24", "198.51.100.0/24"}, {}), kChangeSeen, agent,
		      "file added");

	dir.overwrite("ip-masq-b", kSlowResync + "nonMasqueradeCIDRs: [203.0.113.0/24]\n");
	requireWithin(tableElementsAre({"192.0.2.0/24", "203.0.113.0/24"}, {"198.51.100.0/24"}),
		      kChangeSeen, agent, "file edited in place");

	runOrFail("rm " + dir.file("ip-masq-b"));
	requireWithin(tableElementsAre({"192.0.2.0/24"}, {"203.0.113.0/24", "10.0.0.0/8"}), kChangeSeen,
		      agent, "file removed");

	// A file of another name is not part of the config.
	dir.write("not-ip-masq", kSlowResync + "nonMasqueradeCIDRs: [198.18.0.0/15]\n");
	std::this_thread::sleep_for(300ms);
	CHECK_FALSE(tableHoldsElement("198.18.0.0/15"));
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("--config-dir: a ConfigMap ..data swap in a projected volume is live, without a resync")
{
	TempDir dir;
	// kubelet's atomic writer for a projected volume of two ConfigMaps' keys.
	runOrFail(fmt::format("cd {} && mkdir ..2026_11_23_21_00_00.1 && "
			      "printf '{}nonMasqueradeCIDRs: [192.0.2.0/24]\\n' > ..2026_11_23_21_00_00.1/ip-masq-a && "
			      "printf '{}nonMasqueradeCIDRs: [198.51.100.0/24]\\n' > ..2026_11_23_21_00_00.1/ip-masq-b && "
			      "ln -s ..2026_11_23_21_00_00.1 ..data && ln -s ..data/ip-masq-a ip-masq-a && "
			      "ln -s ..data/ip-masq-b ip-masq-b",
			      dir.path(), kSlowResync, kSlowResync));
	AgentProcess agent({"--config-dir=" + dir.path()});
	requireWithin(tableElementsAre({"192.0.2.0/24", "198.51.100.0/24"}, {}), 5s, agent, "first apply");

	runOrFail(fmt::format("cd {} && mkdir ..2026_11_23_21_05_00.2 && "
			      "cp ..data/ip-masq-a ..2026_11_23_21_05_00.2/ && "
			      "printf '{}nonMasqueradeCIDRs: [203.0.113.0/24]\\n' > ..2026_11_23_21_05_00.2/ip-masq-b && "
			      "ln -s ..2026_11_23_21_05_00.2 ..data_tmp && mv -T ..data_tmp ..data && "
			      "rm -rf ..2026_11_23_21_00_00.1",
			      dir.path(), kSlowResync));
	requireWithin(tableElementsAre({"192.0.2.0/24", "203.0.113.0/24"}, {"198.51.100.0/24"}),
		      kChangeSeen, agent, "ConfigMap swap");
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("--dry-run and --once read --config-dir as the daemon does")
{
	TempDir dir;
	dir.write("ip-masq-a", "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	dir.write("ip-masq-b", "nonMasqueradeCIDRs: [198.51.100.0/24]\nmasqLinkLocal: true\n");
	dir.write("other", "nonMasqueradeCIDRs: [203.0.113.0/24]\n");
	std::string script;
	REQUIRE(run(fmt::format("{} --dry-run --config-dir={}", agentBinary(), dir.path()), &script) == 0);
	CHECK_THAT(script, Catch::Contains(fmt::format("config: {} (ip-masq-a, ip-masq-b)", dir.path())) &&
				   Catch::Contains("192.0.2.0/24") && Catch::Contains("198.51.100.0/24") &&
				   !Catch::Contains("203.0.113.0/24") && !Catch::Contains("10.0.0.0/8") &&
				   !Catch::Contains("169.254.0.0/16"));

	REQUIRE(run(fmt::format("{} --once --config-dir={}", agentBinary(), dir.path())) == 0);
	CHECK(tableElementsAre({"192.0.2.0/24", "198.51.100.0/24"}, {"203.0.113.0/24", "10.0.0.0/8"})());
	deleteTable();

	std::string both;
	CHECK(run(fmt::format("{} --dry-run --config={} --config-dir={}", agentBinary(),
			      dir.file("ip-masq-a"), dir.path()), &both, true) == 2);
	CHECK_THAT(both, Catch::Contains("exclude each other"));
}

TEST_CASE("--dry-run with an outputAddress subnet: this node's address in it, or a warning and masquerade")
{
	TempDir dir;
	dir.write("config", "outputAddress: 198.18.1.0/24\n");
	const std::string command = fmt::format("{} --dry-run --config={} 2>&1", agentBinary(),
						dir.file("config"));
	std::string without;
	REQUIRE(run(command, &without) == 0);
	CHECK_THAT(without, Catch::Contains("198.18.1.0/24 (outputAddress, " + dir.file("config") +
					    ":1): this node has no address in it: its IPv4 traffic "
					    "is masqueraded instead") &&
				    Catch::Contains("counter name \"masq-v4\" masquerade fully-random") &&
				    !Catch::Contains("snat ip to"));

	runOrFail("ip addr add 198.18.1.9/24 dev lo && ip addr add 198.18.1.5/24 dev lo");
	std::string with;
	REQUIRE(run(command, &with) == 0);
	CHECK_THAT(with, Catch::Contains("snat ip to 198.18.1.5 fully-random") &&
				 !Catch::Contains("no address in it"));
	runOrFail("ip addr del 198.18.1.5/24 dev lo && ip addr del 198.18.1.9/24 dev lo");
}

TEST_CASE("the applied line names the interface sets, never as IPv6 intervals")
{
	TempDir dir;
	dir.write("config", "outputInterface: [lo]\nnonMasqueradeInterfaces: [\"wg*\", \"vxlan+\"]\n");
	std::string log;
	REQUIRE(run(fmt::format("{} --once --config={} 2>&1", agentBinary(), dir.file("config")), &log) == 0);
	CHECK_THAT(log, Catch::Contains("4 IPv4 intervals, 1 in masq-ifaces, 2 in nomasq-ifaces in ") &&
				!Catch::Contains("IPv6 source"));
	deleteTable();
}

TEST_CASE("deleting the file means defaults; creating it again applies it")
{
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "first apply");

	runOrFail("rm " + dir.file("config"));
	requireWithin([] { return tableHas("172.16.0.0/12") && !tableHas("192.0.2.0/24"); }, 5s, agent,
		      "deleted: back to defaults");

	dir.overwrite("config", kSlowResync + "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
	requireWithin([] { return tableHas("198.51.100.0/24") && !tableHas("172.16.0.0/12"); }, 5s,
		      agent, "re-created");
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("a table deleted or flushed by hand is restored at once")
{
	TempDir dir;
	dir.write("config", kSlowResync);
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return tableHas("10.0.0.0/8"); }, 5s, agent, "first apply");

	runOrFail("nft delete table inet ip-masq-agent");
	requireWithin([] { return tableHas("10.0.0.0/8"); }, 5s, agent, "restored after delete");

	runOrFail("nft flush ruleset");
	requireWithin([] { return tableHas("10.0.0.0/8"); }, 5s, agent, "restored after flush ruleset");

	runOrFail("nft delete element inet ip-masq-agent nomasq-v4 '{ 10.0.0.0/8 }'");
	requireWithin([] { return tableHas("10.0.0.0/8"); }, 5s, agent, "restored after an element edit");
	CHECK_THAT(agent.log(), Catch::Contains("changed or deleted outside the agent"));
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("no work when nothing changed, also when other tables change")
{
	TempDir dir;
	dir.write("config", "resyncInterval: 1s\n");
	AgentProcess agent({"--config=" + dir.file("config"), "-v=1"});
	requireWithin([] { return tableHas("10.0.0.0/8"); }, 5s, agent, "first apply");
	const long handle = tableHandle();
	REQUIRE(handle > 0);

	// Another component's table changes: the agent looks, and writes nothing. Two resyncs
	// (1 s apart) at least, counted in the log rather than waited for.
	runOrFail("nft add table inet bystander && nft add chain inet bystander c");
	const size_t looked = countOf(agent.log(), "nothing changed");
	requireWithin([&] { return countOf(agent.log(), "nothing changed") >= looked + 2; }, 30s, agent,
		      "two resyncs that found nothing to change");
	const std::string log = agent.log();
	INFO(log);
	CHECK(tableHandle() == handle);
	CHECK(countOf(log, "info: applied table") == 1);
	CHECK(countOf(log, "nothing changed") >= 1);
	CHECK(agent.stop(SIGTERM) == 0);
	runOrFail("nft delete table inet bystander");
	deleteTable();
}

TEST_CASE("a bad config keeps the last good table, logs once, and heals")
{
	TempDir dir;
	dir.write("config", "resyncInterval: 1s\nnonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "first apply");

	dir.write("config", "resyncInterval: 1s\nnonMasqueradeCIDRs: [192.0.2.1/24]\n");
	requireWithin([&] { return agent.log().find("host bits are set") != std::string::npos; }, 5s,
		      agent, "error reported");
	std::this_thread::sleep_for(2500ms); // resyncs with the same bad file
	CHECK(countOf(agent.log(), "host bits are set") == 1);
	CHECK(tableHas("192.0.2.0/24"));

	// Still healed while the config is bad.
	runOrFail("nft delete table inet ip-masq-agent");
	requireWithin([] { return tableHas("192.0.2.0/24"); }, 5s, agent, "healed with a bad config");

	dir.write("config", "resyncInterval: 1s\nnonMasqueradeCIDRs: [198.51.100.0/24]\n");
	requireWithin([] { return tableHas("198.51.100.0/24"); }, 5s, agent, "fixed config applied");
	CHECK_THAT(agent.log(), Catch::Contains("valid again"));
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("started with a bad config, the agent leaves its existing table alone until fixed")
{
	TempDir dir;
	// A table of ours from an earlier run, with content the new config would not have.
	runOrFail("nft add table inet ip-masq-agent && "
		  "nft add set inet ip-masq-agent nomasq-v4 '{ type ipv4_addr; flags interval; }' && "
		  "nft add element inet ip-masq-agent nomasq-v4 '{ 203.0.113.0/24 }'");
	const std::string before = tableListing();
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [abcdefg]\n");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([&] { return agent.log().find("abcdefg") != std::string::npos; }, 5s, agent,
		      "error reported");
	std::this_thread::sleep_for(300ms);
	CHECK(tableListing() == before);
	CHECK(agent.running());

	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
	requireWithin([] { return tableHas("10.0.0.0/8") && !tableHas("203.0.113.0/24"); }, 5s, agent,
		      "applied once fixed");
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("SIGTERM and SIGINT exit cleanly and leave the table; SIGHUP reloads")
{
	TempDir dir;
	dir.write("config", kSlowResync);
	{
		AgentProcess agent({"--config=" + dir.file("config")});
		requireWithin([] { return tableHas("10.0.0.0/8"); }, 5s, agent, "first apply");
		kill(agent.pid(), SIGHUP);
		requireWithin([&] { return agent.log().find("SIGHUP") != std::string::npos; }, 5s, agent,
			      "SIGHUP seen");
		CHECK(agent.stop(SIGTERM) == 0);
		CHECK(tableHas("10.0.0.0/8"));
	}
	{
		AgentProcess agent({"--config=" + dir.file("config")});
		requireWithin([&] { return agent.log().find("info: applied table") != std::string::npos; },
			      5s, agent, "started");
		CHECK(agent.stop(SIGINT) == 0);
		CHECK(tableHas("10.0.0.0/8"));
	}
	deleteTable();
}

TEST_CASE("--once applies and exits; --cleanup removes only the agent's table")
{
	TempDir dir;
	runOrFail("nft add table inet bystander");
	dir.write("config", "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	{
		AgentProcess once({"--once", "--config=" + dir.file("config")});
		CHECK(once.wait() == 0);
		CHECK(tableHas("192.0.2.0/24"));
	}
	dir.write("config", "nonMasqueradeCIDRs: [192.0.2.1/24]\n");
	{
		AgentProcess bad({"--once", "--config=" + dir.file("config")});
		CHECK(bad.wait() != 0);
		CHECK_THAT(bad.log(), Catch::Contains("host bits are set"));
		CHECK(tableHas("192.0.2.0/24"));
	}
	{
		AgentProcess cleanup({"--cleanup"});
		CHECK(cleanup.wait() == 0);
		CHECK(tableListing().empty());
		CHECK_FALSE(tableListing("bystander").empty());
	}
	{
		AgentProcess again({"--cleanup"}); // nothing to delete is not an error
		CHECK(again.wait() == 0);
	}
	runOrFail("nft delete table inet bystander");
}

TEST_CASE("the start-up log names the version and the effective flags")
{
	TempDir dir;
	AgentProcess agent({"--once", "--config=" + dir.file("absent"), "--enable-ipv6"});
	CHECK(agent.wait() == 0);
	const std::string log = agent.log();
	CHECK_THAT(log, Catch::Contains("ip-masq-agent 0.") && Catch::Contains("--enable-ipv6=true") &&
				Catch::Contains("--masq-chain=IP-MASQ-AGENT"));
	CHECK_THAT(log, Catch::Contains("built-in defaults"));
	CHECK_THAT(log, Catch::Contains("applied table inet ip-masq-agent") &&
				Catch::Contains("IPv4 intervals") && Catch::Contains(" ms"));
	deleteTable();
}

namespace {

// A real HTTP client (curl) against the running daemon: "<status> <body>".
std::string httpGet(const std::string &path, const std::string &method = "GET")
{
	std::string out;
	run(fmt::format("curl -s -m 5 -X {} -w '\\n%{{http_code}}' http://127.0.0.1:10263{}", method,
			path),
	    &out);
	const size_t nl = out.rfind('\n');
	if (nl == std::string::npos)
		return "curl failed: " + out;
	return out.substr(nl + 1) + " " + out.substr(0, nl);
}

bool metricIs(const std::string &series, const std::string &value)
{
	return httpGet("/metrics").find("\n" + series + " " + value + "\n") != std::string::npos;
}

} // namespace

TEST_CASE("/healthz and /metrics follow the daemon's state, seen by curl")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	requireWithin([] { return httpGet("/healthz") == "200 ok\n"; }, 5s, agent, "healthy");
	CHECK(metricIs("ip_masq_agent_syncs_total", "1"));
	CHECK(metricIs("ip_masq_agent_nonmasquerade_intervals{family=\"ipv4\"}", "2"));
	CHECK(metricIs("ip_masq_agent_healthy", "1"));
	CHECK_THAT(httpGet("/metrics"), Catch::StartsWith("200 # HELP"));
	CHECK_THAT(httpGet("/nope"), Catch::StartsWith("404 "));
	CHECK_THAT(httpGet("/healthz", "POST"), Catch::StartsWith("405 "));
	CHECK_THAT(httpGet("/healthz", "HEAD"), Catch::StartsWith("200"));

	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.1/24]\n");
	requireWithin([] { return httpGet("/healthz").rfind("503 config invalid", 0) == 0; }, 5s, agent,
		      "unhealthy on a bad config");
	CHECK_THAT(httpGet("/healthz"), Catch::Contains(dir.file("config")) && Catch::Contains("host bits"));
	CHECK(metricIs("ip_masq_agent_config_errors_total", "1"));
	CHECK(metricIs("ip_masq_agent_healthy", "0"));
	CHECK(tableHas("192.0.2.0/24"));

	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24, 198.51.100.0/24]\n");
	requireWithin([] { return httpGet("/healthz") == "200 ok\n"; }, 5s, agent, "healthy again");
	CHECK(metricIs("ip_masq_agent_syncs_total", "2"));

	runOrFail("nft delete table inet ip-masq-agent");
	requireWithin([] { return metricIs("ip_masq_agent_drift_repairs_total", "1"); }, 5s, agent,
		      "drift repaired and counted");
	CHECK(httpGet("/healthz") == "200 ok\n");
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("a health port that cannot be bound is a clear start-up error")
{
	TempDir dir;
	AgentProcess holder({"--config=" + dir.file("absent"), "--health-addr=127.0.0.1:10264"});
	requireWithin([&] { return holder.log().find("serving /healthz") != std::string::npos; }, 5s,
		      holder, "first agent serving");
	AgentProcess second({"--config=" + dir.file("absent"), "--health-addr=127.0.0.1:10264"});
	CHECK(second.wait() != 0);
	CHECK_THAT(second.log(), Catch::Contains("cannot serve /healthz") &&
					 Catch::Contains("--health-addr"));
	CHECK(holder.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("under systemd: READY=1 after the first sync, STATUS= lines, WATCHDOG=1 pings")
{
	TempDir dir;
	const std::string socketPath = dir.file("notify");
	UniqueFd sock(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
	REQUIRE(sock.isValid());
	sockaddr_un address{};
	address.sun_family = AF_UNIX;
	std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", socketPath.c_str());
	REQUIRE(bind(sock.get(), reinterpret_cast<sockaddr *>(&address), sizeof(address)) == 0);

	std::vector<std::string> messages;
	const auto receive = [&] {
		char buf[4096];
		ssize_t n;
		while ((n = recv(sock.get(), buf, sizeof(buf), 0)) > 0)
			messages.emplace_back(buf, static_cast<size_t>(n));
	};
	const auto count = [&](const std::string &needle) {
		receive();
		size_t n = 0;
		for (const std::string &m : messages)
			n += countOf(m, needle);
		return n;
	};

	dir.write("config", kSlowResync);
	AgentProcess agent({"--config=" + dir.file("config")},
			   {"NOTIFY_SOCKET=" + socketPath, "WATCHDOG_USEC=200000"});
	requireWithin([&] { return count("READY=1") == 1; }, 5s, agent, "READY=1");
	CHECK(tableHas("10.0.0.0/8")); // ready means the rules are in force
	CHECK(count("STATUS=table inet ip-masq-agent in force") >= 1);
	// WatchdogSec=200ms: pings every 100ms from the loop.
	requireWithin([&] { return count("WATCHDOG=1") >= 5; }, 5s, agent, "watchdog pings");

	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [abcdefg]\n");
	requireWithin([&] { return count("STATUS=config invalid") >= 1; }, 5s, agent, "STATUS on error");
	CHECK(agent.stop(SIGTERM) == 0);
	CHECK(count("STOPPING=1") == 1);
	CHECK(count("READY=1") == 1);
	deleteTable();
}

TEST_CASE("a config directory that appears later is watched from then on")
{
	TempDir dir;
	const std::string configDir = dir.file("later");
	AgentProcess agent({"--config=" + configDir + "/config", "-v=1"});
	requireWithin([] { return tableHas("172.16.0.0/12"); }, 5s, agent, "defaults while absent");

	// The parent directory is watched while this one is missing: no SIGHUP, and the
	// first resync (default 60s) is far away (kChangeSeen is less).
	runOrFail("mkdir " + configDir);
	dir.write("later/config", "resyncInterval: 1h\nnonMasqueradeCIDRs: [192.0.2.0/24]\n");
	requireWithin([] { return tableHas("192.0.2.0/24"); }, kChangeSeen, agent,
		      "found by the parent's watch");

	// The directory is watched now: an edit is applied without waiting for a resync.
	dir.write("later/config", "resyncInterval: 1h\nnonMasqueradeCIDRs: [198.51.100.0/24]\n");
	requireWithin([] { return tableHas("198.51.100.0/24"); }, 5s, agent, "edit seen by inotify");
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("the default --health-addr serves IPv4 and IPv6; an empty one serves nothing")
{
	TempDir dir;
	{
		AgentProcess agent({"--config=" + dir.file("absent")});
		requireWithin([&] { return agent.log().find("info: applied table") != std::string::npos; },
			      5s, agent, "applied");
		std::string v4, v6;
		CHECK(run("curl -s -m 5 http://127.0.0.1:10263/healthz", &v4) == 0);
		CHECK(run("curl -s -m 5 'http://[::1]:10263/healthz'", &v6) == 0);
		CHECK(v4 == "ok\n");
		CHECK(v6 == "ok\n");
		CHECK(agent.stop(SIGTERM) == 0);
	}
	{
		AgentProcess agent({"--config=" + dir.file("absent"), "--health-addr="});
		requireWithin([&] { return agent.log().find("info: applied table") != std::string::npos; },
			      5s, agent, "applied");
		CHECK(run("curl -s -m 2 http://127.0.0.1:10263/healthz") != 0);
		CHECK(agent.log().find("serving /healthz") == std::string::npos);
		CHECK(agent.stop(SIGTERM) == 0);
	}
	deleteTable();
}
