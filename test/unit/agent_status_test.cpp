// SPDX-License-Identifier: Apache-2.0
// Health and metrics: transitions of /healthz and the Prometheus exposition.
#include <catch2/catch.hpp>

#include <regex>
#include <sstream>

#include "ip-masq-agent/agent_status.h"
#include "ip-masq-agent/health_server.h"

using namespace ipmasq;
using namespace std::chrono_literals;

namespace {

Ruleset sampleRuleset()
{
	Config config;
	config.nonMasqueradeCIDRs = {parsePrefix("10.0.0.0/8").value(), parsePrefix("2001:db8::/32").value()};
	RulesetOptions options;
	options.enableIpv6 = true;
	return buildRuleset(config, options);
}

// The value of an unlabelled or labelled sample line in Prometheus text.
std::string sample(const std::string &text, const std::string &series)
{
	std::istringstream in(text);
	std::string line;
	while (std::getline(in, line))
		if (line.rfind(series + " ", 0) == 0)
			return line.substr(series.size() + 1);
	return "<missing " + series + ">";
}

} // namespace

TEST_CASE("/healthz: not ok until a sync, then ok; every failure names its reason")
{
	AgentStatus status;
	CHECK_FALSE(status.health().ok);
	CHECK_THAT(status.health().reason, Catch::Contains("no sync"));

	status.configLoaded();
	status.syncSucceeded(sampleRuleset(), 2ms);
	CHECK(status.health().ok);
	CHECK(status.health().reason.empty());

	status.configFailed("/etc/config/ip-masq-agent:1:1: bad");
	CHECK_FALSE(status.health().ok);
	CHECK_THAT(status.health().reason, Catch::Contains("config invalid") && Catch::Contains(":1:1: bad"));
	status.configLoaded();
	CHECK(status.health().ok);

	status.tableDrifted();
	CHECK_THAT(status.health().reason, Catch::Contains("not yet restored"));
	status.syncSucceeded(sampleRuleset(), 1ms);
	CHECK(status.health().ok);

	status.syncFailed("set nomasq-v4: File exists");
	CHECK_THAT(status.health().reason, Catch::Contains("kernel rejected") && Catch::Contains("File exists"));
	status.syncSucceeded(sampleRuleset(), 1ms);
	CHECK(status.health().ok);

	// A transient failure (a dump that kept changing) ends with the next sync that
	// finds the table intact, not only with a commit.
	status.syncFailed("table ip-masq-agent kept changing while it was read");
	CHECK_FALSE(status.health().ok);
	status.noopResync();
	CHECK(status.health().ok);
}

TEST_CASE("/metrics: counters, histogram, gauges and build info in Prometheus text")
{
	AgentStatus status;
	status.syncSucceeded(sampleRuleset(), 3ms);
	status.syncSucceeded(sampleRuleset(), 700ms);
	status.noopResync();
	status.noopResync();
	status.noopResync();
	status.syncFailed("x");
	status.tableDrifted();
	status.driftRepaired();
	status.configFailed("y");
	const std::string text = status.prometheusText();

	CHECK(sample(text, "ip_masq_agent_syncs_total") == "2");
	CHECK(sample(text, "ip_masq_agent_sync_failures_total") == "1");
	CHECK(sample(text, "ip_masq_agent_noop_resyncs_total") == "3");
	CHECK(sample(text, "ip_masq_agent_drift_repairs_total") == "1");
	CHECK(sample(text, "ip_masq_agent_config_errors_total") == "1");
	CHECK(sample(text, "ip_masq_agent_healthy") == "0");
	CHECK(std::stod(sample(text, "ip_masq_agent_last_successful_sync_timestamp_seconds")) > 1.7e9);
	CHECK(sample(text, "ip_masq_agent_sync_duration_seconds_bucket{le=\"0.001\"}") == "0");
	CHECK(sample(text, "ip_masq_agent_sync_duration_seconds_bucket{le=\"0.005\"}") == "1");
	CHECK(sample(text, "ip_masq_agent_sync_duration_seconds_bucket{le=\"1\"}") == "2");
	CHECK(sample(text, "ip_masq_agent_sync_duration_seconds_bucket{le=\"+Inf\"}") == "2");
	CHECK(sample(text, "ip_masq_agent_sync_duration_seconds_count") == "2");
	CHECK(std::stod(sample(text, "ip_masq_agent_sync_duration_seconds_sum")) == Approx(0.703));
	// 10.0.0.0/8 + link-local; 2001:db8::/32 + fe80::/10
	CHECK(sample(text, "ip_masq_agent_nonmasquerade_intervals{family=\"ipv4\"}") == "2");
	CHECK(sample(text, "ip_masq_agent_nonmasquerade_intervals{family=\"ipv6\"}") == "2");
	CHECK_THAT(text, Catch::Contains("ip_masq_agent_build_info{version=\"0."));

	// Every sample line belongs to a family announced with HELP and TYPE.
	std::istringstream in(text);
	std::string line;
	const std::regex sampleLine("([a-z_]+?)(_bucket|_sum|_count)?(\\{[^}]*\\})? [-+0-9.eInf]+");
	while (std::getline(in, line)) {
		if (line.rfind("#", 0) == 0)
			continue;
		std::smatch m;
		INFO(line);
		REQUIRE(std::regex_match(line, m, sampleLine));
		CHECK_THAT(text, Catch::Contains("# TYPE " + m[1].str() + " "));
	}
}

TEST_CASE("the loop's heartbeat: none before the first turn, then the time of the last")
{
	AgentStatus status;
	CHECK_FALSE(status.lastLoopTurn().has_value());
	const auto before = std::chrono::steady_clock::now();
	status.loopTurned();
	const auto beat = status.lastLoopTurn();
	REQUIRE(beat.has_value());
	CHECK(*beat >= before);
	CHECK(*beat <= std::chrono::steady_clock::now());
}

TEST_CASE("--health-addr forms")
{
	CHECK(parseListenAddress(":10263").value().host.empty());
	CHECK(parseListenAddress(":10263").value().port == 10263);
	CHECK(parseListenAddress("127.0.0.1:8080").value().host == "127.0.0.1");
	CHECK(parseListenAddress("[::1]:8080").value().host == "::1");
	CHECK(parseListenAddress(":0").value().port == 0);
	CHECK_THAT(parseListenAddress("8080").error().message, Catch::Contains("no port"));
	CHECK_THAT(parseListenAddress("::1:8080").error().message, Catch::Contains("brackets"));
	CHECK_THAT(parseListenAddress("localhost:8080").error().message, Catch::Contains("not an IP address"));
	CHECK_THAT(parseListenAddress(":70000").error().message, Catch::Contains("0 to 65535"));
}
