// SPDX-License-Identifier: Apache-2.0
// The daemon's NAT conflict report against --explain, over generated rulesets in other
// tables (nft and iptables-nft: prefixes, `!=`, ranges, sets, ports, SNAT, an output
// interface, before and after the agent) and configs (nested ranges, masqueradeCIDRs,
// masqueradeSourceCIDRs, each outputAddress form). For each case the running daemon's first
// complete cycle (its /readyz?verbose, and the packets it sampled, from its --v=1 log) and
// `ip-masq-agent --explain` with the same config file:
//   - every conflict the daemon reports is in --explain's line for the packet it names,
//     word for word, with the entry it names;
//   - every conflict --explain finds for a packet the daemon sampled is in the daemon's
//     report (a "may" also as the same rule made certain by a port its rule matches);
//   - the addresses the generated rules match (each prefix's first address and the one
//     after it) are sampled: every conflict --explain finds there is in the report, which
//     the daemon's old sample (each of its own ranges' first address) missed;
//   - every rule quoted is nft's listing of that handle.
//
// Environment: IPMASQ_PARITY_SEED=N (the generator's seed), IPMASQ_PARITY_CASES=N (default
// 100, at most 1,000). Every case runs: the meson timeout covers the default count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "agent_process.h"
#include "nat_components.h"
#include "traffic_support.h"

using namespace ipmasq;
using namespace ipmasq::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kCiSeed = 20261207;
constexpr size_t kDefaultCases = 100, kMaxCases = 1000;
const std::string kHealthAddr = "127.0.0.1:10263";
const std::string kHealth = "http://" + kHealthAddr;
// A first cycle comes right after the first sync; only a hang takes this long.
constexpr auto kCycleDeadline = 60s;

using Rng = std::mt19937_64;

size_t pick(Rng &rng, size_t n)
{
	return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

// A /16 to /24 of 198.18.0.0/15, or 192.0.2.0/24.
Prefix somePrefix(Rng &rng)
{
	if (pick(rng, 5) == 0)
		return parsePrefix("192.0.2.0/24").value();
	const unsigned length = 16 + unsigned(pick(rng, 9));
	const AddressValue host = (AddressValue(198) << 24) | (AddressValue(18 + pick(rng, 2)) << 16) |
				  (AddressValue(pick(rng, 256)) << 8);
	const AddressValue mask = ~((AddressValue(1) << (32 - length)) - 1) & 0xffffffff;
	Prefix p;
	p.network = Address{Family::ipv4, host & mask};
	p.length = length;
	return p;
}

struct Case {
	std::string config;
	std::vector<std::string> commands; // nft and iptables-nft, in order
	std::vector<Address> matched; // the boundaries of the rules' destination matches
	std::string description;
};

void boundaries(const Prefix &p, std::vector<Address> &out)
{
	out.push_back(p.first());
	out.push_back(Address{Family::ipv4, p.last().value + 1});
}

// One rule of another component, in its own syntax.
std::string someRule(Rng &rng, Case &c, std::set<std::string> &chains)
{
	const Prefix prefix = somePrefix(rng), second = somePrefix(rng);
	const std::string p = prefix.toString();
	const bool after = pick(rng, 4) == 0;
	const std::string chain = after ? "late" : "post";
	if (chains.insert(chain).second)
		c.commands.push_back(fmt::format("nft 'add chain ip other {} {{ type nat hook postrouting priority srcnat{}; }}'",
						 chain, after ? " + 20" : ""));
	const auto nft = [&](const std::string &rule) {
		c.commands.push_back(fmt::format("nft add rule ip other {} {}", chain, rule));
		return fmt::format("{}: {}", chain, rule);
	};
	switch (pick(rng, 9)) {
	case 0: boundaries(prefix, c.matched); return nft(fmt::format("ip daddr {} masquerade", p));
	case 1: boundaries(prefix, c.matched); return nft(fmt::format("ip daddr != {} fib daddr type != local masquerade", p));
	case 2: boundaries(prefix, c.matched); return nft(fmt::format("ip daddr {} snat to 198.18.250.9", p));
	case 3: return nft("th dport 53 masquerade");
	case 4: boundaries(prefix, c.matched); return nft(fmt::format("ip daddr {} udp dport 53 masquerade", p));
	case 5: {
		const auto [low, high] = std::minmax(prefix.first(), second.first());
		c.matched.push_back(low);
		c.matched.push_back(Address{Family::ipv4, high.value + 1});
		return nft(fmt::format("ip daddr {}-{} masquerade", low.toString(), high.toString()));
	}
	case 6: {
		// Two prefixes in an anonymous set: disjoint, or the outer one alone.
		std::vector<Prefix> in{prefix, second};
		std::sort(in.begin(), in.end(), [](const Prefix &a, const Prefix &b) { return a.length < b.length; });
		if (in[0].contains(in[1].first()))
			in.pop_back();
		std::string elements;
		for (const Prefix &e : in) {
			boundaries(e, c.matched);
			elements += (elements.empty() ? "" : ", ") + e.toString();
		}
		return nft(fmt::format("ip daddr {{ {} }} masquerade", elements));
	}
	case 7: return nft("oifname \"eth9\" masquerade");
	default:
		boundaries(prefix, c.matched);
		c.commands.push_back(fmt::format("iptables-nft -w -t nat -A POSTROUTING ! -d {} -m addrtype ! --dst-type LOCAL "
						 "-j MASQUERADE", p));
		return fmt::format("iptables: ! -d {} -m addrtype ! --dst-type LOCAL -j MASQUERADE", p);
	}
}

Case generate(uint64_t seed, size_t index)
{
	Rng rng(seed * 0x9e3779b97f4a7c15ULL + index);
	Case c;
	std::vector<std::string> exempt{"198.18.0.0/15"};
	for (size_t i = 0, n = pick(rng, 3); i < n; i++)
		exempt.push_back(somePrefix(rng).toString());
	c.config = fmt::format("nonMasqueradeCIDRs: [{}]\n", fmt::join(exempt, ", "));
	if (pick(rng, 3) == 0) {
		const std::string inner = somePrefix(rng).toString();
		if (std::find(exempt.begin(), exempt.end(), inner) == exempt.end())
			c.config += fmt::format("masqueradeCIDRs: [{}]\n", inner);
	}
	if (pick(rng, 4) == 0)
		c.config += "masqueradeSourceCIDRs: [198.51.100.0/24]\n";
	static const char *kOutput[] = {"", "203.0.113.7", "203.0.113.10-203.0.113.12"};
	if (const char *output = kOutput[pick(rng, 3)]; *output)
		c.config += fmt::format("outputAddress: {}\n", output);
	c.commands.push_back("nft add table ip other");
	std::set<std::string> chains;
	std::vector<std::string> rules;
	for (size_t i = 0, n = 1 + pick(rng, 3); i < n; i++)
		rules.push_back(someRule(rng, c, chains));
	c.description = fmt::format("config:\n{}rules: {}", c.config, fmt::join(rules, "; "));
	return c;
}

// ---- The daemon's report and --explain's lines, read back ----

// A rule and what it does, as describeRule() words it: the chain, the action, the rule.
struct RuleClause {
	std::string chain; // "table ip other chain post (priority srcnat, before the agent)"
	std::string action; // "masquerades it", "may masquerade it"
	std::string rule; // "rule handle 7 (`...`)"
	std::string text() const { return chain + " " + action + ": " + rule; }
	bool certain() const { return action.rfind("may ", 0) != 0; }
};

std::optional<RuleClause> clauseOf(const std::string &text)
{
	static const std::regex parts(R"(^(table \S+ \S+ chain \S+ \([^)]*\)) (.*?): )"
				      R"((rule handle \d+(?: in chain \S+)? \(`[^`]*`\))$)");
	std::smatch m;
	if (!std::regex_match(text, m, parts))
		return std::nullopt;
	return RuleClause{m[1], m[2], m[3]};
}

struct Reported {
	RuleClause clause;
	std::string kind; // "exempted", "first", "undetermined"
	std::string agentAction; // for "first": "SNATs to 203.0.113.7"
	std::string entry;
	std::string packet; // SampledPacket::toString(): "198.19.0.0 from 198.51.100.0 port 53/udp"
	std::string line;
};

// "IPv4 traffic from any source to 198.19.0.0 on any port" as the packet's key.
std::string packetKey(const std::string &source, const std::string &destination, const std::string &port)
{
	return destination + (source == "any source" ? "" : " from " + source) + (port.empty() ? "" : " port " + port);
}

Reported readReported(const std::string &line)
{
	// The traffic: "IPv4 traffic from any source to 198.19.0.0 on any port".
	static const std::string traffic = R"(IPv4 traffic from (any source|\S+) to (\S+) (?:on any port|port (\S+)))";
	static const std::regex exempted(R"(^(.*`\)), which undoes (.*): )" + traffic +
					 " is not masqueraded by the agent$");
	static const std::regex first(R"(^(.*`\)), before the agent (.*) )" + traffic + R"( \((.*)\)$)");
	std::smatch m;
	Reported r;
	r.line = line;
	if (std::regex_match(line, m, exempted)) {
		r.kind = "exempted";
		r.entry = m[2];
		r.packet = packetKey(m[3], m[4], m[5]);
	} else if (std::regex_match(line, m, first)) {
		r.kind = "first";
		r.agentAction = m[2];
		r.entry = m[6];
		r.packet = packetKey(m[3], m[4], m[5]);
	} else {
		FAIL("a report line this test cannot read: " << line);
	}
	const auto clause = clauseOf(m[1]);
	INFO(line);
	REQUIRE(clause);
	r.clause = *clause;
	return r;
}

std::vector<Reported> report()
{
	std::vector<Reported> out;
	const std::string verbose = curlGet(kHealth + "/readyz?verbose");
	const std::string prefix = "warning: NAT conflict: ";
	size_t at = 0;
	while ((at = verbose.find(prefix, at)) != std::string::npos) {
		const size_t end = verbose.find('\n', at);
		out.push_back(readReported(verbose.substr(at + prefix.size(), end - at - prefix.size())));
		at = end;
	}
	return out;
}

// The packets of the daemon's cycle, from its --v=1 lines.
std::vector<std::string> sampledPackets(const std::string &log)
{
	std::vector<std::string> out;
	// The list follows "...rules match: " on the cycle's line, the marker on the ports' line.
	const std::pair<const char *, const char *> lines[] = {
		{"the conflict check's cycle: ", "other tables' rules match: "},
		{"packets with the ports that decide its \"may\" conflicts: ", ""}};
	for (const auto &[marker, before] : lines) {
		size_t at = log.find(marker);
		if (at == std::string::npos)
			continue;
		at += std::string_view(marker).size();
		if (*before)
			at = log.find(before, at) + std::string_view(before).size();
		const std::string line = log.substr(at, log.find('\n', at) - at);
		for (size_t from = 0; from < line.size();) {
			const size_t comma = std::min(line.find(", ", from), line.size());
			out.push_back(line.substr(from, comma - from));
			from = comma + 2;
		}
	}
	return out;
}

// One --explain line: what it decided (with the entry) and its node-wide clauses.
struct Explained {
	std::string line;
	std::vector<std::string> clauses; // "but <rule>[, before the agent X]", "other tables' NAT may undo that: <rule>"
};

std::map<std::string, Explained> explain(const std::string &configPath, const std::vector<std::string> &packets)
{
	// Grouped by source and port: --explain takes one of each for all its destinations.
	std::map<std::pair<std::string, std::string>, std::vector<std::string>> groups;
	static const std::regex key(R"(^(\S+)(?: from (\S+))?(?: port (\S+))?$)");
	for (const std::string &p : packets) {
		std::smatch m;
		INFO(p);
		REQUIRE(std::regex_match(p, m, key));
		groups[{m[2], m[3]}].push_back(m[1]);
	}
	std::map<std::string, Explained> out;
	for (const auto &[group, destinations] : groups) {
		std::string args;
		for (const std::string &d : destinations)
			args += " --explain=" + d;
		if (!group.first.empty())
			args += " --explain-source=" + group.first;
		if (!group.second.empty())
			args += " --explain-port=" + group.second;
		std::string text;
		const int status = run(fmt::format("{} --config={}{}", agentBinary(), configPath, args), &text);
		INFO(text);
		REQUIRE(status == 0);
		std::istringstream lines(text);
		std::string line;
		for (size_t i = 0; std::getline(lines, line) && i < destinations.size(); i++) {
			Explained e{line, {}};
			static const std::regex clause(R"(; (but |other tables' NAT may undo that: ))");
			std::vector<size_t> starts;
			for (auto it = std::sregex_iterator(line.begin(), line.end(), clause); it != std::sregex_iterator(); ++it)
				starts.push_back(size_t(it->position()));
			for (size_t c = 0; c < starts.size(); c++) {
				const size_t end = c + 1 < starts.size() ? starts[c + 1] : line.size();
				e.clauses.push_back(line.substr(starts[c] + 2, end - starts[c] - 2));
			}
			out[packetKey(group.first.empty() ? "any source" : group.first, destinations[i], group.second)] = e;
		}
	}
	return out;
}

std::string clauseText(const Reported &r)
{
	if (r.kind == "first")
		return "but " + r.clause.text() + ", before the agent " + r.agentAction;
	return "but " + r.clause.text();
}

// Whether the report holds what --explain said in `clause` for a packet decided by `line`:
// the same rule and action for the entry the line names, or, for a "may", the same rule
// certain.
bool reportHolds(const std::vector<Reported> &reported, std::string clause, const std::string &line)
{
	for (const std::string lead : {"but ", "other tables' NAT may undo that: "})
		if (clause.rfind(lead, 0) == 0)
			clause = clause.substr(lead.size());
	const auto said = clauseOf(clause.substr(0, clause.find(", before the agent ")));
	if (!said)
		return false;
	return std::any_of(reported.begin(), reported.end(), [&](const Reported &r) {
		const bool sameRule = r.clause.chain == said->chain && r.clause.rule == said->rule;
		const bool sameAction = r.clause.action == said->action || (!said->certain() && r.clause.certain());
		return sameRule && sameAction && line.find(r.entry) != std::string::npos;
	});
}

struct Tally {
	size_t cases = 0, packets = 0, fromRules = 0, withPorts = 0, conflicts = 0, matchedChecked = 0;
	size_t beyondConfig = 0; // conflicts reported for a packet the config's sample does not hold
};

void runCase(const Case &c, Tally &tally)
{
	INFO(c.description);
	flushRuleset();
	runAll(c.commands);
	TempDir dir;
	dir.write("config", c.config);
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=" + kHealthAddr, "--v=1"});
	requireWithin([] { return !natConflictGauge(curlGet(kHealth + "/metrics"), "certain").empty(); }, kCycleDeadline,
		      agent, "the first complete cycle");
	const std::string log = agent.log();
	const std::vector<Reported> reported = report();
	const std::vector<std::string> packets = sampledPackets(log);
	INFO("agent log:\n" << log << "\nnft list ruleset:\n" << runOrFail("nft list ruleset"));
	REQUIRE(!packets.empty());
	const std::string verbose = curlGet(kHealth + "/readyz?verbose");
	if (!reported.empty())
		CHECK(requireQuotesAsNft(verbose) == reported.size());

	// Every packet the daemon sampled, and the addresses the rules match (any source, any
	// port, and from the source the config samples).
	std::vector<std::string> asked = packets;
	std::vector<std::string> matched;
	for (const Address &a : c.matched) {
		const std::string from = c.config.find("masqueradeSourceCIDRs") != std::string::npos ? " from 198.51.100.0" : "";
		matched.push_back(a.toString() + from);
	}
	asked.insert(asked.end(), matched.begin(), matched.end());
	const std::map<std::string, Explained> explained = explain(dir.file("config"), asked);

	// The daemon's words are --explain's, for the packet it names.
	for (const Reported &r : reported) {
		INFO("reported: " << r.line);
		const auto it = explained.find(r.packet);
		REQUIRE(it != explained.end()); // a packet it sampled
		INFO("--explain: " << it->second.line);
		CHECK(std::find(it->second.clauses.begin(), it->second.clauses.end(), clauseText(r)) != it->second.clauses.end());
		CHECK(it->second.line.find(r.entry) != std::string::npos);
	}
	// What --explain finds for every packet the daemon sampled, and where the rules match,
	// is in the report.
	for (const std::string &p : asked) {
		const Explained &e = explained.at(p);
		INFO("--explain: " << e.line);
		for (const std::string &clause : e.clauses) {
			INFO("clause: " << clause);
			CHECK(reportHolds(reported, clause, e.line));
		}
	}
	tally.cases++;
	tally.packets += packets.size();
	tally.fromRules += log.find("packets, 0 of them where other tables' rules match") == std::string::npos ? 1 : 0;
	tally.withPorts += log.find("ports that decide its \"may\" conflicts") != std::string::npos ? 1 : 0;
	tally.conflicts += reported.empty() ? 0 : 1;
	tally.matchedChecked += matched.size();
	// Conflicts found only at a packet the config's own sample does not hold (each of its
	// ranges' first address, any port): what the old sample missed.
	std::smatch m;
	REQUIRE(std::regex_search(log, m, std::regex(R"(cycle: (\d+) packets, (\d+) of them)")));
	const std::vector<std::string> configs(packets.begin(), packets.begin() + long(std::stoul(m[1]) - std::stoul(m[2])));
	for (const Reported &r : reported)
		tally.beyondConfig += std::find(configs.begin(), configs.end(), r.packet) == configs.end() ? 1 : 0;
	(void)agent.stop(SIGTERM);
	(void)run("nft delete table inet ip-masq-agent 2>/dev/null");
}

} // namespace

TEST_CASE("the daemon's conflict report and --explain agree on every packet the daemon samples, and "
	  "it samples where the generated rules match")
{
	const uint64_t seed = envNumber("IPMASQ_PARITY_SEED", kCiSeed);
	const size_t count = std::min(envNumber("IPMASQ_PARITY_CASES", kDefaultCases), kMaxCases);
	CAPTURE(seed);
	// The node has an address on an uplink, as a node does: fib and addrtype know it.
	runOrFail("ip link add parity0 type veth peer name parity1 && ip addr add 203.0.113.1/24 dev parity0 && "
		  "ip link set parity0 up && ip link set parity1 up");
	Tally tally;
	for (size_t i = 0; i < count; i++) {
		INFO("case " << i << " of seed " << seed);
		runCase(generate(seed, i), tally);
	}
	flushRuleset();
	WARN(fmt::format("seed {}: {} cases, {} packets sampled, {} cases with packets from the rules, {} with "
			 "port samples, {} with a conflict; {} conflicts at packets beyond the config's sample; {} "
			 "addresses the rules match asked about",
			 seed, tally.cases, tally.packets, tally.fromRules, tally.withPorts, tally.conflicts,
			 tally.beyondConfig, tally.matchedChecked));
	CHECK(tally.cases == count);
	// The generator reaches what the test is about (the CI seed does).
	if (count >= kDefaultCases) {
		CHECK(tally.fromRules >= count / 2);
		CHECK(tally.withPorts >= 3);
		CHECK(tally.conflicts >= count / 2);
		CHECK(tally.beyondConfig >= count / 4);
	}
}
