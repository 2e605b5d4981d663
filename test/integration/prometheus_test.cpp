// SPDX-License-Identifier: Apache-2.0
// The agent's /metrics as Prometheus itself reads it: promtool's linter, and a real
// Prometheus server scraping the agent inside the test's private network namespace.
// Skipped (exit 77) only when Debian's prometheus package is not installed. Its own main
// (below); Catch2's implementation: test/common/catch_runner.cpp.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "../common/catch_runner.h"
#include "agent_process.h"
#include "ip-masq-agent/conntrack/conntrack_stats.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;

namespace {

constexpr uint16_t kHealthPort = 10263;
constexpr uint16_t kPrometheusPort = 9090;

// The counters the agent has today: none of them moves while the agent is idle (no config
// change, no nftables change, a resync interval of an hour), so Prometheus must hold exactly
// what /metrics says. Counters added later are checked to be there and not ahead of /metrics.
const std::set<std::string> kIdleCounters = {
	"ip_masq_agent_syncs_total",
	"ip_masq_agent_sync_failures_total",
	"ip_masq_agent_noop_resyncs_total",
	"ip_masq_agent_drift_repairs_total",
	"ip_masq_agent_config_errors_total",
	"ip_masq_agent_sync_duration_seconds",
	"ip_masq_agent_nat_check_failures_total",
};

// The agent in this process's namespace, serving /healthz and /metrics on 127.0.0.1.
class ServingAgent
{
public:
	ServingAgent()
	{
		dir_.write("config", "resyncInterval: 1h\nnonMasqueradeCIDRs: [203.0.113.0/24]\n");
		process_ = std::make_unique<AgentProcess>(std::vector<std::string>{
			"--config=" + dir_.file("config"), "--enable-ipv6",
			fmt::format("--health-addr=127.0.0.1:{}", kHealthPort)});
		// Serving, the first sync counted, and the NAT conflict check's first cycle done
		// (it runs on its own thread, after the first sync: its gauge appears then).
		const auto ready = waitFor([] {
			std::string text;
			run(fmt::format("curl -s --max-time 1 http://127.0.0.1:{}/metrics", kHealthPort),
			    &text);
			return text.find("\nip_masq_agent_syncs_total 1\n") != std::string::npos &&
			       text.find("\nip_masq_agent_nat_conflicts{certainty=\"undetermined\"} ") !=
				       std::string::npos;
		}, 60s);
		INFO("agent log:\n" << process_->log());
		REQUIRE(ready);
	}

	~ServingAgent()
	{
		process_.reset();
		run("nft delete table inet ip-masq-agent 2>/dev/null");
	}

	ServingAgent(const ServingAgent &) = delete;
	ServingAgent &operator=(const ServingAgent &) = delete;

	std::string log() const { return process_->log(); }

private:
	TempDir dir_;
	std::unique_ptr<AgentProcess> process_;
};

std::string agentMetrics()
{
	return runOrFail(fmt::format("curl -sS --max-time 5 http://127.0.0.1:{}/metrics", kHealthPort));
}

// One sample line of a text exposition: `series` is the name with its labels, as written.
struct Sample {
	std::string series;
	std::string family; // the metric family the sample belongs to (its # TYPE name)
	std::string type; // counter, gauge, histogram, ...
	double value = 0;
};

// The samples of a Prometheus text exposition, each with its family's declared type.
std::vector<Sample> parseExposition(const std::string &text)
{
	std::map<std::string, std::string> types;
	std::vector<Sample> samples;
	std::istringstream in(text);
	std::string line;
	for (int lines = 0; lines < 100000 && std::getline(in, line); lines++) {
		if (line.rfind("# TYPE ", 0) == 0) {
			std::istringstream words(line.substr(7));
			std::string name, type;
			words >> name >> type;
			types[name] = type;
			continue;
		}
		if (line.empty() || line[0] == '#')
			continue;
		// NAME{LABELS} VALUE [TIMESTAMP]: label values may hold spaces, not an
		// unescaped '}'.
		const size_t brace = line.find('}');
		const size_t space = line.find(' ', brace == std::string::npos ? 0 : brace);
		INFO("sample line: " << line);
		REQUIRE(space != std::string::npos);
		Sample s;
		s.series = line.substr(0, space);
		s.value = std::strtod(line.c_str() + space + 1, nullptr);
		const std::string name = s.series.substr(0, s.series.find('{'));
		// A histogram's samples are NAME_bucket, NAME_sum and NAME_count.
		for (const std::string &candidate :
		     {name, name.substr(0, name.rfind('_'))}) {
			if (types.count(candidate)) {
				s.family = candidate;
				s.type = types[candidate];
				break;
			}
		}
		INFO("sample line without a # TYPE: " << line);
		REQUIRE(!s.type.empty());
		samples.push_back(s);
	}
	return samples;
}

// A process other than the agent (Prometheus), its output in a log file. Stopped with
// SIGTERM (then SIGKILL) by the destructor; dies with the test (PR_SET_PDEATHSIG).
class ChildProcess
{
public:
	ChildProcess(const std::vector<std::string> &argv, const std::string &logPath)
		: logPath_(logPath)
	{
		const int log = open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		REQUIRE(log >= 0);
		pid_ = spawnChild(argv, ChildStreams{"/dev/null", log, log});
		close(log);
		REQUIRE(pid_ >= 0);
	}

	~ChildProcess()
	{
		kill(pid_, SIGTERM);
		const auto gone = waitFor([this] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, 10s);
		if (!gone) {
			kill(pid_, SIGKILL);
			waitpid(pid_, nullptr, 0);
		}
	}

	ChildProcess(const ChildProcess &) = delete;
	ChildProcess &operator=(const ChildProcess &) = delete;

	std::string log() const
	{
		std::string out;
		run("cat '" + logPath_ + "'", &out);
		return out;
	}

private:
	pid_t pid_ = -1;
	std::string logPath_;
};

// Prometheus scraping the agent every second, on 127.0.0.1 of this namespace, and
// evaluating the alert rules of manifests/prometheus/ every second; its data in a
// temporary directory that goes with it.
class Prometheus
{
public:
	Prometheus()
	{
		dir_.write("prometheus.yml",
			   fmt::format("global:\n"
				       "  scrape_interval: 1s\n"
				       "  scrape_timeout: 1s\n"
				       "  evaluation_interval: 1s\n"
				       "rule_files: ['{}']\n"
				       "scrape_configs:\n"
				       "  - job_name: ip-masq-agent\n"
				       "    static_configs:\n"
				       "      - targets: ['127.0.0.1:{}']\n",
				       ALERT_RULES, kHealthPort));
		server_ = std::make_unique<ChildProcess>(
			std::vector<std::string>{
				"prometheus", "--config.file=" + dir_.file("prometheus.yml"),
				"--storage.tsdb.path=" + dir_.file("data"),
				fmt::format("--web.listen-address=127.0.0.1:{}", kPrometheusPort)},
			dir_.file("prometheus.log"));
	}

	Prometheus(const Prometheus &) = delete;
	Prometheus &operator=(const Prometheus &) = delete;

	std::string log() const { return server_->log(); }

	// The raw JSON answer of GET /api/v1/`path`.
	std::string api(const std::string &path) const
	{
		std::string out;
		run(fmt::format("curl -sS --max-time 5 http://127.0.0.1:{}/api/v1/{} 2>&1",
				kPrometheusPort, path),
		    &out);
		return out;
	}

	// The raw JSON answer of /api/v1/query for `query`.
	std::string query(const std::string &promql) const
	{
		// Single-quoted for the shell: each ' becomes '\''.
		std::string quoted;
		for (char c : promql)
			quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
		std::string out;
		run(fmt::format("curl -sS --max-time 5 -G --data-urlencode 'query={}' "
				"http://127.0.0.1:{}/api/v1/query 2>&1",
				quoted, kPrometheusPort),
		    &out);
		return out;
	}

	// The value of the one series `selector` selects now, or nothing when it selects
	// none (or more than one, or Prometheus does not answer).
	std::optional<std::string> value(const std::string &selector) const
	{
		const std::string answer = query(selector);
		const std::string marker = "\"value\":[";
		const size_t at = answer.find(marker);
		if (answer.find("\"status\":\"success\"") == std::string::npos ||
		    at == std::string::npos || answer.find(marker, at + 1) != std::string::npos)
			return std::nullopt;
		const size_t open = answer.find(",\"", at);
		const size_t close = answer.find('"', open + 2);
		if (open == std::string::npos || close == std::string::npos)
			return std::nullopt;
		return answer.substr(open + 2, close - open - 2);
	}

private:
	TempDir dir_; // destroyed after the server has stopped
	std::unique_ptr<ChildProcess> server_;
};

} // namespace

TEST_CASE("promtool check metrics finds nothing wrong in /metrics")
{
	// The linter speaks up on a bad exposition: otherwise silence would prove nothing.
	std::string complaint;
	const int badStatus = run("printf '# HELP bad_metric Bad.\\n# TYPE bad_metric counter\\n"
				  "bad_metric 1\\n' | promtool check metrics",
				  &complaint, true);
	INFO("promtool on a counter without _total: " << complaint);
	REQUIRE(badStatus != 0);
	REQUIRE(complaint.find("bad_metric") != std::string::npos);

	ServingAgent agent;
	TempDir dir;
	dir.write("metrics", agentMetrics());
	std::string report;
	const int status = run("promtool check metrics < " + dir.file("metrics"), &report, true);
	std::string exposition;
	run("cat " + dir.file("metrics"), &exposition);
	INFO("/metrics:\n" << exposition << "\npromtool:\n" << report);
	CHECK(status == 0);
	CHECK(report.empty());
	CHECK(exposition.find("ip_masq_agent_syncs_total 1") != std::string::npos);
}

TEST_CASE("a real Prometheus scrapes the agent: up, and the values /metrics shows")
{
	ServingAgent agent;
	Prometheus prometheus;

	const std::string up = "up{job=\"ip-masq-agent\",instance=\"127.0.0.1:" +
			       std::to_string(kHealthPort) + "\"}";
	const auto scraped = waitFor([&] { return prometheus.value(up) == "1"; }, 20s);
	INFO("query " << up << ": " << prometheus.query(up) << "\nprometheus log:\n"
		      << prometheus.log() << "\nagent log:\n" << agent.log());
	REQUIRE(scraped);

	const std::vector<Sample> before = parseExposition(agentMetrics());
	std::map<std::string, std::optional<std::string>> scrapedValues;
	for (const Sample &s : before)
		scrapedValues[s.series] = prometheus.value(s.series);
	const std::vector<Sample> after = parseExposition(agentMetrics());
	std::map<std::string, double> afterValues;
	for (const Sample &s : after)
		afterValues[s.series] = s.value;

	int counters = 0, histogramSamples = 0;
	for (const Sample &s : before) {
		const auto &got = scrapedValues[s.series];
		INFO(s.series << " (" << s.type << "): /metrics " << s.value << " then "
			      << afterValues[s.series] << ", Prometheus "
			      << (got ? *got : std::string("nothing")));
		REQUIRE(got.has_value());
		if (s.type != "counter" && s.type != "histogram")
			continue;
		counters += s.type == "counter";
		histogramSamples += s.type == "histogram";
		const double scrapedValue = std::strtod(got->c_str(), nullptr);
		if (kIdleCounters.count(s.family)) {
			CHECK(scrapedValue == s.value);
			CHECK(afterValues[s.series] == s.value);
		} else {
			CHECK(scrapedValue <= afterValues[s.series]);
		}
	}
	CHECK(counters >= 5);
	CHECK(histogramSamples >= 3);
	CHECK(prometheus.value("ip_masq_agent_syncs_total") == "1");
	CHECK(prometheus.value("ip_masq_agent_sync_duration_seconds_count") == "1");
	CHECK(prometheus.value("ip_masq_agent_healthy") == "1");

	// Conntrack's families, read by the agent's loop over ctnetlink: every statistic this
	// kernel keeps, the entries against their limit (as the alert divides them), and the
	// read's own health.
	std::set<std::string> families;
	for (const Sample &s : before)
		families.insert(s.family + " " + s.type);
	for (const auto &counter : ipmasq::netlink::kConntrackCounters) {
		const std::string name = fmt::format("ip_masq_agent_conntrack_{}_total", counter.name);
		INFO(name);
		CHECK(families.count(name + " counter"));
	}
	for (const std::string gauge : {"ip_masq_agent_conntrack_entries",
					"ip_masq_agent_conntrack_entries_limit",
					"ip_masq_agent_conntrack_last_read_timestamp_seconds"})
		CHECK(families.count(gauge + " gauge"));
	CHECK(prometheus.value("ip_masq_agent_conntrack_read_failures_total") == "0");

	// The NAT conflict check: each certainty of the gauge (none next to the agent's own
	// table), and the passes that could not read other tables.
	CHECK(families.count("ip_masq_agent_nat_conflicts gauge"));
	CHECK(families.count("ip_masq_agent_nat_check_failures_total counter"));
	for (const char *certainty : {"certain", "may", "undetermined"}) {
		INFO(certainty);
		CHECK(prometheus.value(fmt::format("ip_masq_agent_nat_conflicts{{certainty=\"{}\"}}", certainty)) == "0");
	}
	CHECK(prometheus.value("ip_masq_agent_nat_check_failures_total") == "0");
	const auto ratio = prometheus.value(
		"ip_masq_agent_conntrack_entries / ip_masq_agent_conntrack_entries_limit");
	REQUIRE(ratio);
	CHECK(std::strtod(ratio->c_str(), nullptr) < 0.9);

	// The SNAT usage, read on its own thread right after the first sync: nothing is
	// source-NATed on this idle node, which the alerts' gauge says as 0, not as absence.
	std::optional<std::string> snat;
	CHECK(waitFor([&] { return (snat = prometheus.value("ip_masq_agent_snat_usage_max_ratio")).has_value(); },
		      30s));
	CHECK(snat == "0");
	CHECK(prometheus.value("ip_masq_agent_snat_read_failures_total") == "0");
}

TEST_CASE("Prometheus loads the alert rules and evaluates them on the agent: all healthy, none firing")
{
	// Every alert of the rules file. IPMasqAgentOutputAddressMissing's metric is absent
	// here (no outputAddress subnet): it evaluates, healthy, to nothing; so do the SNAT
	// guard's (no snatGuard section).
	const std::vector<std::string> alerts{
		"IPMasqAgentNotReady", "IPMasqAgentSyncFailing", "IPMasqAgentTableRepairsClimbing",
		"IPMasqAgentConntrackInsertFailures", "IPMasqAgentConntrackTableNearlyFull",
		"IPMasqAgentConntrackUnreadable", "IPMasqAgentOutputAddressMissing",
		"IPMasqAgentNatConflict", "IPMasqAgentNatCheckUnreadable",
		"IPMasqAgentSnatPortsNearlyExhausted", "IPMasqAgentSnatPortsExhausted",
		"IPMasqAgentConfigUnknownKeys", "IPMasqAgentSnatGuardDropping", "IPMasqAgentSnatGuardWouldDrop"};
	ServingAgent agent;
	Prometheus prometheus;
	std::string rules;
	const auto evaluated = waitFor([&] {
		rules = prometheus.api("rules");
		return countOf(rules, "\"health\":\"ok\"") == alerts.size();
	}, 30s);
	INFO("/api/v1/rules: " << rules << "\nprometheus log:\n" << prometheus.log());
	REQUIRE(evaluated);
	CHECK(countOf(rules, "\"type\":\"alerting\"") == alerts.size());
	CHECK(countOf(rules, "\"state\":\"inactive\"") == alerts.size());
	for (const std::string &alert : alerts)
		CHECK_THAT(rules, Catch::Contains(fmt::format("\"name\":\"{}\"", alert)));
}

int main(int argc, char *argv[])
{
	if (run("command -v prometheus >/dev/null && command -v promtool >/dev/null") != 0) {
		std::fprintf(stderr, "SKIP: prometheus and promtool not found "
				     "(Debian: apt-get install prometheus)\n");
		return 77; // meson's "skipped"
	}
	const std::string why = enterPrivateNetns();
	if (!why.empty()) {
		std::fprintf(stderr, "SKIP: %s\n", why.c_str());
		return 77;
	}
	return runCatchSession(argc, argv);
}
