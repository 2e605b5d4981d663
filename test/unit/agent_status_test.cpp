// SPDX-License-Identifier: Apache-2.0
// Health and metrics: liveness, transitions of /readyz (/healthz), consistent snapshots
// and the Prometheus exposition.
#include <catch2/catch.hpp>

#include <atomic>
#include <regex>
#include <sstream>
#include <thread>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/daemon/health_server.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

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

TEST_CASE("a bad config on a fresh node says that nothing is in force, not the last good ruleset")
{
	AgentStatus status;
	status.configFailed("/etc/config/ip-masq-agent:1:1: bad");
	CHECK_THAT(status.health().reason, Catch::Contains("config invalid") &&
						   Catch::Contains("no ruleset of the agent is in force") &&
						   !Catch::Contains("stays in force"));
	status.noopResync(); // e.g. an adopted table verified intact
	CHECK_THAT(status.health().reason, Catch::Contains("the last good ruleset stays in force"));
}

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
	CHECK_THAT(status.health().reason, Catch::Contains("config invalid") && Catch::Contains(":1:1: bad") &&
						   Catch::Contains("the last good ruleset stays in force"));
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

TEST_CASE("/metrics: conntrack's families only as the last reading holds them, never in readiness")
{
	AgentStatus status;
	status.syncSucceeded(sampleRuleset(), 1ms);
	// Before the first reading: only the read's own failure counter.
	std::string text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_conntrack_read_failures_total") == "0");
	CHECK_THAT(text, !Catch::Contains("ip_masq_agent_conntrack_entries") &&
				 !Catch::Contains("ip_masq_agent_conntrack_last_read_timestamp_seconds") &&
				 !Catch::Contains("ip_masq_agent_conntrack_insert_total"));

	// A kernel that keeps no chaintoolong and reports no limit.
	netlink::ConntrackStats stats;
	for (const netlink::ConntrackCounter &counter : netlink::kConntrackCounters)
		stats.*counter.value = counter.attribute * 10;
	stats.chainTooLong.reset();
	stats.entries = 1234;
	status.conntrackRead(stats);
	text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_conntrack_insert_failed_total") ==
	      std::to_string(CTA_STATS_INSERT_FAILED * 10));
	CHECK(sample(text, "ip_masq_agent_conntrack_clash_resolve_total") ==
	      std::to_string(CTA_STATS_CLASH_RESOLVE * 10));
	CHECK_THAT(text, Catch::Contains("# TYPE ip_masq_agent_conntrack_drop_total counter\n"));
	CHECK_THAT(text, !Catch::Contains("chain_too_long") &&
				 !Catch::Contains("ip_masq_agent_conntrack_entries_limit"));
	CHECK(sample(text, "ip_masq_agent_conntrack_entries") == "1234");
	CHECK_THAT(text, Catch::Contains("# TYPE ip_masq_agent_conntrack_entries gauge\n"));
	CHECK(std::stod(sample(text, "ip_masq_agent_conntrack_last_read_timestamp_seconds")) > 1.7e9);

	stats.entriesLimit = 262144;
	status.conntrackRead(stats);
	text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_conntrack_entries_limit") == "262144");
	const double readAt = std::stod(sample(text, "ip_masq_agent_conntrack_last_read_timestamp_seconds"));

	// A failed read drops the (now stale) values, keeps the time of the last good one,
	// counts, and leaves readiness alone.
	status.conntrackReadFailed();
	text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_conntrack_read_failures_total") == "1");
	CHECK_THAT(text, !Catch::Contains("ip_masq_agent_conntrack_entries") &&
				 !Catch::Contains("ip_masq_agent_conntrack_insert_total"));
	CHECK(std::stod(sample(text, "ip_masq_agent_conntrack_last_read_timestamp_seconds")) == readAt);
	CHECK(status.health().ok);
	CHECK(sample(text, "ip_masq_agent_healthy") == "1");
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

TEST_CASE("/livez: live while the heartbeat is fresh, not live with its age once stale")
{
	const auto start = std::chrono::steady_clock::now();
	AgentStatus status(start);
	REQUIRE(AgentStatus::kLivenessLimit == 3 * AgentStatus::kHeartbeatPeriod);

	status.loopTurned(start + 1s);
	CHECK(status.liveness(start + 1s).ok);
	CHECK(status.liveness(start + 1s).reason.empty());
	CHECK(status.liveness(start + 1s + AgentStatus::kLivenessLimit).ok); // at the limit
	const auto stale = status.liveness(start + 18s + 400ms); // 17.4 s after the turn
	CHECK_FALSE(stale.ok);
	CHECK_THAT(stale.reason, Catch::Contains("has not turned for 17 s") &&
					 Catch::Contains("the limit is 15 s"));

	// A new turn makes it live again, whatever happened before.
	status.loopTurned(start + 30s);
	CHECK(status.liveness(start + 31s).ok);
	CHECK_FALSE(status.liveness(start + 46s).ok);
	CHECK_THAT(status.liveness(start + 46s).reason, Catch::Contains("for 16 s"));
}

TEST_CASE("/livez before the loop's first turn: live while starting, then not")
{
	const auto start = std::chrono::steady_clock::now();
	AgentStatus status(start);
	// Starting up must not look dead: the process is younger than the limit.
	CHECK(status.liveness(start).ok);
	CHECK(status.liveness(start + 10s).ok);
	// A loop that never starts is as stuck as one that stopped.
	const auto never = status.liveness(start + 20s);
	CHECK_FALSE(never.ok);
	CHECK_THAT(never.reason, Catch::Contains("has not started 20 s after start-up"));
}

TEST_CASE("/livez does not depend on readiness, and readiness not on liveness")
{
	const auto start = std::chrono::steady_clock::now();
	AgentStatus status(start);
	status.loopTurned(start);
	status.configFailed("/etc/config/ip-masq-agent:1:1: bad");
	CHECK(status.liveness(start + 1s).ok); // a bad config is not a reason to restart
	CHECK_FALSE(status.health().ok);

	status.configLoaded();
	status.syncSucceeded(sampleRuleset(), 1ms);
	CHECK(status.health().ok); // readiness is about the table, not the loop
	CHECK_FALSE(status.liveness(start + 60s).ok);
}

TEST_CASE("a snapshot is one state: health, metrics and summary agree")
{
	AgentStatus status;
	status.configLoaded();
	status.syncSucceeded(sampleRuleset(), 2ms);
	status.configFailed("x.yaml:3:1: bad");

	const AgentStatus::Snapshot snapshot = status.snapshot();
	// Later changes do not reach a snapshot already taken.
	status.configLoaded();
	status.syncSucceeded(sampleRuleset(), 2ms);
	CHECK(status.health().ok);

	CHECK_FALSE(snapshot.health().ok);
	CHECK_THAT(snapshot.summary(), Catch::Contains("x.yaml:3:1: bad"));
	const std::string text = snapshot.prometheusText();
	CHECK(sample(text, "ip_masq_agent_healthy") == "0");
	CHECK(sample(text, "ip_masq_agent_syncs_total") == "1");
	CHECK(sample(text, "ip_masq_agent_config_errors_total") == "1");
	CHECK(sample(status.prometheusText(), "ip_masq_agent_healthy") == "1");
	CHECK(sample(status.prometheusText(), "ip_masq_agent_syncs_total") == "2");
}

TEST_CASE("/metrics never mixes two states, while the loop keeps changing them")
{
	// The loop alternates between a failed and a successful sync. After the first
	// success, the agent is healthy exactly when it has one more success than failures:
	// every page must show ip_masq_agent_healthy agreeing with the counters it was
	// rendered with. Rendering from two lock acquisitions pairs one state's gauge with
	// the next state's counters.
	const Ruleset ruleset = sampleRuleset();
	AgentStatus status;
	status.syncSucceeded(ruleset, 1ms);
	std::atomic<bool> stop{false};
	std::thread loop([&] {
		// Until the scrapes are done (a second at most).
		for (long i = 0; i < 1000000000L && !stop.load(); i++) {
			status.syncFailed("x");
			status.syncSucceeded(ruleset, 1ms);
		}
	});
	// Scrape while the loop runs: for a second at most, from its first change on.
	const auto deadline = std::chrono::steady_clock::now() + 1s;
	while (status.snapshot().syncs < 2 && std::chrono::steady_clock::now() < deadline)
		std::this_thread::yield();
	int mixed = 0;
	for (int i = 0; i < 1000000 && std::chrono::steady_clock::now() < deadline; i++) {
		const std::string text = status.prometheusText();
		const bool healthy = sample(text, "ip_masq_agent_healthy") == "1";
		const bool oneMoreSuccess = std::stoull(sample(text, "ip_masq_agent_syncs_total")) ==
					    std::stoull(sample(text, "ip_masq_agent_sync_failures_total")) + 1;
		if (healthy != oneMoreSuccess)
			mixed++;
	}
	stop = true;
	loop.join();
	CHECK(mixed == 0);
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

TEST_CASE("NAT conflicts: a gauge once a check ran, warnings that never make it unready")
{
	AgentStatus status;
	status.syncSucceeded(sampleRuleset(), 3ms);
	CHECK(status.prometheusText().find("ip_masq_agent_nat_conflicts") == std::string::npos);
	// The failures counter is there from the start, at 0: an alert on its rate needs it.
	CHECK(sample(status.prometheusText(), "ip_masq_agent_nat_check_failures_total") == "0");
	CHECK_THAT(status.prometheusText(), Catch::Contains("# TYPE ip_masq_agent_nat_check_failures_total counter\n"));

	status.natConflictsChecked({}, {});
	std::string text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_nat_conflicts{certainty=\"certain\"}") == "0");
	CHECK(sample(text, "ip_masq_agent_nat_conflicts{certainty=\"may\"}") == "0");
	CHECK(sample(text, "ip_masq_agent_nat_conflicts{certainty=\"undetermined\"}") == "0");

	status.natConflictsChecked({2, 1, 3}, {"table ip nat ... masquerades it", "legacy"});
	text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_nat_conflicts{certainty=\"certain\"}") == "2");
	CHECK(sample(text, "ip_masq_agent_nat_conflicts{certainty=\"may\"}") == "1");
	CHECK(sample(text, "ip_masq_agent_nat_conflicts{certainty=\"undetermined\"}") == "3");
	CHECK(status.health().ok);
	CHECK(status.snapshot().warnings.size() == 2);
	CHECK((status.snapshot().natConflicts == AgentStatus::Snapshot::NatConflicts{2, 1, 3}));

	// A pass that could not read the kernel: no stale figure, the warnings it has, and
	// one more failure counted.
	status.natConflictCheckFailed({"legacy"});
	CHECK(status.prometheusText().find("ip_masq_agent_nat_conflicts") == std::string::npos);
	CHECK(status.snapshot().warnings == std::vector<std::string>{"legacy"});
	CHECK(sample(status.prometheusText(), "ip_masq_agent_nat_check_failures_total") == "1");
	CHECK(status.health().ok);
	status.natConflictCheckFailed({});
	CHECK(status.snapshot().natCheckFailures == 2);
	// A later good pass brings the gauge back; the counter never goes back.
	status.natConflictsChecked({0, 0, 1}, {});
	text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_nat_conflicts{certainty=\"undetermined\"}") == "1");
	CHECK(sample(text, "ip_masq_agent_nat_check_failures_total") == "2");
}

TEST_CASE("a check whose thread the kernel refused: a gauge at 0 and a verbose warning, never unready")
{
	AgentStatus status;
	status.syncSucceeded(sampleRuleset(), 3ms);
	// Before the daemon starts its checks, no series: --once has none.
	CHECK(status.prometheusText().find("ip_masq_agent_check_running") == std::string::npos);
	status.checkThread({"nat_conflicts", "the NAT conflict check", "cannot start the thread: pids.max"});
	status.checkThread({"snat_usage", "the SNAT usage read", ""});
	std::string text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_check_running{check=\"nat_conflicts\"}") == "0");
	CHECK(sample(text, "ip_masq_agent_check_running{check=\"snat_usage\"}") == "1");
	CHECK_THAT(text, Catch::Contains("# TYPE ip_masq_agent_check_running gauge\n"));
	CHECK(status.health().ok);
	const std::vector<std::string> warnings = status.snapshot().verboseWarnings();
	REQUIRE(warnings.size() == 1);
	CHECK_THAT(warnings[0], Catch::StartsWith("the NAT conflict check is not running: cannot start "
						  "the thread: pids.max") &&
					Catch::Contains("tries to start it again at each resync"));
	// Started at a later resync: the same series, now 1, and nothing to say.
	status.checkThread({"nat_conflicts", "the NAT conflict check", ""});
	text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_check_running{check=\"nat_conflicts\"}") == "1");
	CHECK(text.find("ip_masq_agent_check_running{check=\"nat_conflicts\"}") ==
	      text.rfind("ip_masq_agent_check_running{check=\"nat_conflicts\"}")); // one series
	CHECK(status.snapshot().verboseWarnings().empty());
}

TEST_CASE("/metrics: the table's connection counters, labelled from their names")
{
	AgentStatus status;
	status.syncSucceeded(sampleRuleset(), 1ms);
	// None read yet (or counters off): no series at all, rather than zeros that would
	// later jump.
	CHECK_THAT(status.prometheusText(), !Catch::Contains("ip_masq_agent_connections_total"));

	status.countersRead({CounterValue{"masq-v4", 7, 420}, CounterValue{"nomasq-dst-v6", 3, 240},
			     CounterValue{"nomasq-src-v4", 2, 120},
			     // Someone else's object in the agent's table: not exported.
			     CounterValue{"their-counter", 99, 9900}});
	const std::string text = status.prometheusText();
	CHECK_THAT(text, Catch::Contains("# TYPE ip_masq_agent_connections_total counter\n"));
	CHECK(sample(text, "ip_masq_agent_connections_total{family=\"ipv4\",decision=\"masqueraded\","
			   "reason=\"none\"}") == "7");
	CHECK(sample(text, "ip_masq_agent_connections_total{family=\"ipv6\",decision="
			   "\"not_masqueraded\",reason=\"destination\"}") == "3");
	CHECK(sample(text, "ip_masq_agent_connections_total{family=\"ipv4\",decision="
			   "\"not_masqueraded\",reason=\"source\"}") == "2");
	// The foreign counter gives no series and no value. (Not a search for "99" in the whole
	// text: the sync's timestamp, 1795782120.599 once, holds those digits.)
	CHECK_THAT(text, !Catch::Contains("their"));
	std::istringstream lines(text);
	size_t series = 0;
	for (std::string line; std::getline(lines, line);)
		if (line.rfind("ip_masq_agent_connections_total{", 0) == 0) {
			series++;
			CHECK_FALSE(line.ends_with(" 99"));
		}
	CHECK(series == 3);
	// Counters, not a readiness matter.
	CHECK(status.health().ok);
}

TEST_CASE("/metrics: the SNAT guard's counters, apart from the connection counters, per limit and mode")
{
	AgentStatus status;
	status.syncSucceeded(sampleRuleset(), 1ms);
	CHECK_THAT(status.prometheusText(), !Catch::Contains("ip_masq_agent_snat_guard_over_total"));
	status.countersRead({CounterValue{"masq-v4", 7, 420}, CounterValue{"guard-observed-rate-v4", 130, 7800},
			     CounterValue{"guard-dropped-open-v6", 4, 320}});
	const std::string text = status.prometheusText();
	CHECK_THAT(text, Catch::Contains("# TYPE ip_masq_agent_snat_guard_over_total counter\n"));
	CHECK(sample(text, "ip_masq_agent_snat_guard_over_total{family=\"ipv4\",limit=\"new_connections\","
			   "mode=\"observe\"}") == "130");
	CHECK(sample(text, "ip_masq_agent_snat_guard_over_total{family=\"ipv6\",limit=\"open_connections\","
			   "mode=\"enforce\"}") == "4");
	// Not connections the table decided on as a masquerade: not in that family.
	CHECK_THAT(text, !Catch::Contains("decision=\"guard"));
	CHECK(sample(text, "ip_masq_agent_connections_total{family=\"ipv4\",decision=\"masqueraded\","
			   "reason=\"none\"}") == "7");
}

TEST_CASE("this node's addresses: stale keeps the agent ready and says so; waiting for a first "
	  "read is not ready, never \"no address\"")
{
	using Following = AgentStatus::AddressFollowing;
	AgentStatus status;
	status.configLoaded();
	status.syncSucceeded(sampleRuleset(), 1ms);
	const SubnetChoice held{Family::ipv4, "198.18.1.0/24 (outputAddress, ip-masq-agent:1)",
				parseAddress("198.18.1.5").value()};
	status.subnetsChosen({held});
	CHECK(status.health().ok);
	CHECK(sample(status.prometheusText(), "ip_masq_agent_node_addresses_stale") == "0");
	CHECK(status.snapshot().verboseWarnings().empty());

	// Stale: the table in force is the one made from the last known addresses, and it
	// stays: ready, with the reason in /readyz?verbose and the gauge.
	status.addressesFollowed({Following::State::stale, "they changed during each of 5 reads"});
	CHECK(status.health().ok);
	CHECK(sample(status.prometheusText(), "ip_masq_agent_node_addresses_stale") == "1");
	const std::vector<std::string> warnings = status.snapshot().verboseWarnings();
	REQUIRE(warnings.size() == 1);
	CHECK_THAT(warnings[0], Catch::StartsWith("this node's addresses are stale (they changed "
						  "during each of 5 reads)"));

	// Waiting: a config with a subnet and addresses never read: not ready, and the reason
	// is the read, not a missing address.
	status.addressesFollowed({Following::State::waiting, "cannot read the node's addresses: x"});
	CHECK_FALSE(status.health().ok);
	CHECK_THAT(status.health().reason,
		   Catch::StartsWith("this node's addresses could not be read yet (cannot read the "
				     "node's addresses: x)") &&
			   !Catch::Contains("no address in it"));
	CHECK(sample(status.prometheusText(), "ip_masq_agent_node_addresses_stale") == "1");

	status.addressesFollowed({});
	CHECK(status.health().ok);
	// Without a subnet the gauge is left out, as output_address_available is.
	status.subnetsChosen({});
	CHECK(sample(status.prometheusText(), "ip_masq_agent_node_addresses_stale") ==
	      "<missing ip_masq_agent_node_addresses_stale>");
}

TEST_CASE("/metrics: SNAT usage with a fixed number of series, whatever the destinations")
{
	AgentStatus status;
	CHECK(sample(status.prometheusText(), "ip_masq_agent_snat_read_failures_total") == "0");
	CHECK(status.prometheusText().find("ip_masq_agent_snat_usage_max_ratio") == std::string::npos);

	SnatPlan plan;
	plan.ipv4 = SnatFamilyPlan{std::nullopt, {{40000, 40099}}};
	const Address node = parseAddress("203.0.113.1").value();
	const auto count = [&](size_t destinations) {
		SnatUsageCounter counter(plan, std::vector<Address>{node});
		for (size_t d = 0; d < destinations; d++)
			for (size_t i = 0; i <= d % 100; i++) {
				ConntrackEntry e;
				e.protocol = kProtoTcp;
				e.sourceNat = true;
				e.originalSource = parseAddress("198.51.100.2").value();
				e.originalSourcePort = static_cast<uint16_t>(50000 + i);
				e.destination = Address{Family::ipv4, AddressValue(0xc6120000 + d)}; // 198.18/15
				e.destinationPort = 443;
				e.translatedSource = node;
				e.translatedPort = static_cast<uint16_t>(40000 + i);
				counter.add(e);
			}
		return counter.finish();
	};
	for (const size_t destinations : {size_t(3), size_t(1000)}) {
		status.snatUsageRead(count(destinations), 1.0);
		const std::string text = status.prometheusText();
		const size_t rows = std::min(destinations, kTopDestinations);
		for (const char *name : {"ip_masq_agent_snat_top_usage_ratio{",
					 "ip_masq_agent_snat_top_connections{",
					 "ip_masq_agent_snat_top_available_ports{"}) {
			size_t n = 0;
			for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1))
				n++;
			CHECK(n == rows);
		}
		CHECK(sample(text, "ip_masq_agent_snat_destinations") == std::to_string(destinations));
	}
	const std::string text = status.prometheusText();
	CHECK(sample(text, "ip_masq_agent_snat_usage_max_ratio") == "1");
	CHECK(sample(text, "ip_masq_agent_snat_destinations_over_threshold{threshold=\"1\"}") == "10");
	CHECK(sample(text, "ip_masq_agent_snat_destinations_over_threshold{threshold=\"0.8\"}") == "210");
	CHECK(sample(text, "ip_masq_agent_snat_top_available_ports{rank=\"1\",family=\"ipv4\","
			   "protocol=\"tcp\",destination=\"198.18.0.99:443\",source=\"203.0.113.1\","
			   "ports=\"40000-40099\"}") == "100");

	// A failed read is metered, and the figures go (a stale reading would pass for now).
	status.snatUsageReadFailed();
	CHECK(sample(status.prometheusText(), "ip_masq_agent_snat_read_failures_total") == "1");
	CHECK(status.prometheusText().find("ip_masq_agent_snat_usage_max_ratio") == std::string::npos);
	CHECK_THAT(status.snapshot().snatUsageText(), Catch::Contains("could not be read"));
}

TEST_CASE("/metrics: who holds the SNAT ports, bounded by rank whatever the clients and destinations")
{
	AgentStatus status;
	SnatPlan plan;
	plan.ipv4 = SnatFamilyPlan{std::nullopt, {{40000, 40999}}};
	const Address node = parseAddress("203.0.113.1").value();
	SnatUsageCounter counter(plan, std::vector<Address>{node});
	// 30 destinations, each with 40 clients: client c holds c + 1 entries toward the 25 TCP
	// ones, c + 2 toward the 5 UDP ones (which rank first).
	uint32_t entries = 0;
	for (uint32_t d = 0; d < 30; d++)
		for (uint32_t c = 0; c < 40; c++)
			for (uint32_t n = 0; n <= c + (d >= 25); n++, entries++) {
				ConntrackEntry e;
				e.protocol = d < 25 ? kProtoTcp : kProtoUdp;
				e.tcpState = 3; // TCP_CONNTRACK_ESTABLISHED
				e.sourceNat = true;
				e.originalSource = Address{Family::ipv4, AddressValue(0xc6120000 + c)}; // 198.18/15
				e.originalSourcePort = static_cast<uint16_t>(50000 + n);
				e.destination = Address{Family::ipv4, AddressValue(0xc0000200 + d)}; // 192.0.2/24
				e.destinationPort = 443;
				e.translatedSource = node;
				e.translatedPort = static_cast<uint16_t>(40000 + entries % 1000);
				counter.add(e);
			}
	SnatUsage usage = counter.finish();
	usage.totals[0].holders.top[0].interface = "cali1a2b";
	status.snatUsageRead(std::move(usage), 1.0);
	const std::string text = status.prometheusText();
	const auto series = [&](const std::string &name) {
		size_t n = 0;
		for (size_t at = text.find("\n" + name + "{"); at != std::string::npos;
		     at = text.find("\n" + name + "{", at + 1))
			n++;
		return n;
	};
	CHECK(series("ip_masq_agent_snat_top_clients") == kTopDestinations);
	CHECK(series("ip_masq_agent_snat_top_clients_left_out") == kTopDestinations);
	CHECK(series("ip_masq_agent_snat_top_clients_left_out_connections") == kTopDestinations);
	CHECK(series("ip_masq_agent_snat_top_client_usage_ratio") == kTopDestinations * kTopClients);
	CHECK(series("ip_masq_agent_snat_top_client_connections") <= kTopDestinations * kTopClients * 3);
	CHECK(std::regex_search(text, std::regex(R"re(ip_masq_agent_snat_top_clients\{rank="1",family="ipv4",protocol="(tcp|udp)",destination="192\.0\.2\.\d+:443",ports="40000-40999"\} 40\n)re")));
	CHECK(std::regex_search(text, std::regex(R"re(ip_masq_agent_snat_top_clients_left_out\{rank="1",[^}]*\} 30\n)re")));
	// The clients left out of a UDP destination hold 2 + 3 + ... + 31 entries, of a TCP one
	// 1 + 2 + ... + 30.
	CHECK(std::regex_search(text, std::regex(R"re(ip_masq_agent_snat_top_clients_left_out_connections\{rank="1",[^}]*\} 495\n)re")));
	CHECK(std::regex_search(text, std::regex(R"re(ip_masq_agent_snat_top_clients_left_out_connections\{rank="10",[^}]*\} 465\n)re")));
	CHECK(std::regex_search(text, std::regex(R"re(ip_masq_agent_snat_top_client_usage_ratio\{rank="1",[^}]*,client_rank="1",source="203\.0\.113\.1",client="198\.18\.0\.39",interface="cali1a2b"\} 0\.041\n)re")));
	CHECK(sample(text, "ip_masq_agent_snat_unattributed_client_connections") == "0");
	// TCP's three states for a TCP destination, not_tcp alone for UDP.
	CHECK(std::regex_search(text, std::regex(R"re(protocol="tcp"[^}]*client_rank="1"[^}]*state="tcp_time_wait"\} 0\n)re")));
	CHECK(std::regex_search(text, std::regex(R"re(protocol="udp"[^}]*client_rank="1"[^}]*state="not_tcp"\} 41\n)re")));
	CHECK_FALSE(std::regex_search(text, std::regex(R"re(protocol="udp"[^}]*state="tcp_)re")));
	CHECK_FALSE(std::regex_search(text, std::regex(R"re(protocol="tcp"[^}]*state="not_tcp")re")));
}

TEST_CASE("the config's unknown keys: a gauge and a warning line each, never unready")
{
	AgentStatus status;
	status.syncSucceeded(sampleRuleset(), 3ms);
	// There from the start, at 0: an alert compares it.
	CHECK(sample(status.prometheusText(), "ip_masq_agent_config_unknown_keys") == "0");
	CHECK_THAT(status.prometheusText(), Catch::Contains("# TYPE ip_masq_agent_config_unknown_keys gauge\n"));

	const std::string typo = "/etc/config/ip-masq-agent:1:1: ignoring unknown key \"nonMasqueradeCIDR\": "
				 "did you mean \"nonMasqueradeCIDRs\"?";
	status.natConflictsChecked({}, {"NAT conflict: x"});
	status.configKeysUnknown({typo, "/etc/config/ip-masq-agent:4:1: ignoring unknown key \"x\""});
	CHECK(sample(status.prometheusText(), "ip_masq_agent_config_unknown_keys") == "2");
	CHECK(status.health().ok);
	// The config's first: it is what the operator wrote, and the likeliest to fix.
	const std::vector<std::string> warnings = status.snapshot().verboseWarnings();
	REQUIRE(warnings.size() == 3);
	CHECK(warnings[0] == typo);
	CHECK(warnings[2] == "NAT conflict: x");
	// A NAT check's pass replaces its own warnings only.
	status.natConflictsChecked({}, {});
	CHECK(status.snapshot().verboseWarnings().size() == 2);

	// The key fixed: the next config has none.
	status.configKeysUnknown({});
	CHECK(sample(status.prometheusText(), "ip_masq_agent_config_unknown_keys") == "0");
	CHECK(status.snapshot().verboseWarnings().empty());
}
