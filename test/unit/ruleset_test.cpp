// SPDX-License-Identifier: Apache-2.0
// The desired ruleset: what buildRuleset puts in the agent's table for each config and flag.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <set>

#include "../common/rule_texts.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "../common/ruleset_cases.h"

using namespace ipmasq;

namespace {

Config configWith(std::vector<const char *> cidrs)
{
	Config config;
	for (const char *text : cidrs)
		config.nonMasqueradeCIDRs.push_back(parsePrefix(text).value());
	return config;
}

std::vector<std::string> elements(const Ruleset &ruleset, Family family)
{
	const AddressSet *set = ruleset.findSet(family);
	REQUIRE(set);
	std::vector<std::string> out;
	for (const AddressRange &r : set->elements.ranges())
		out.push_back(r.toString());
	return out;
}

std::vector<std::string> rules(const Ruleset &ruleset, const std::string &chain)
{
	return test::ruleTexts(ruleset, chain);
}

} // namespace

TEST_CASE("the default ruleset: one IPv4 set with RFC 1918 and link-local, jump, return, masquerade")
{
	const Ruleset r = buildRuleset(defaultConfig({}), RulesetOptions{});
	CHECK(r.table == "ip-masq-agent");
	REQUIRE(r.sets.size() == 1);
	CHECK(r.sets[0].name == "nomasq-v4");
	CHECK(elements(r, Family::ipv4) ==
	      std::vector<std::string>{"10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"});
	REQUIRE(r.chains.size() == 2);
	CHECK(r.chains[0].name == "postrouting");
	REQUIRE(r.chains[0].hook);
	CHECK(r.chains[0].hook->priority == kSrcnatPriority + 10);
	CHECK_FALSE(r.chains[1].hook);
	// Without --enable-ipv6 IPv6 traffic is left alone entirely, as upstream (no ip6tables rules).
	CHECK(rules(r, "postrouting") ==
	      std::vector<std::string>{"meta nfproto ipv4 fib daddr type != local jump IP-MASQ-AGENT"});
	CHECK(rules(r, "IP-MASQ-AGENT") ==
	      std::vector<std::string>{"ip daddr @nomasq-v4 return", "masquerade fully-random"});
	for (const Chain &c : r.chains)
		for (const Rule &rule : c.rules)
			CHECK_FALSE(rule.comment.empty());
}

TEST_CASE("masqLinkLocal takes 169.254.0.0/16 out of the set")
{
	Config config = configWith({"10.0.0.0/8"});
	config.masqLinkLocal = true;
	CHECK(elements(buildRuleset(config, {}), Family::ipv4) == std::vector<std::string>{"10.0.0.0/8"});
	config.masqLinkLocal = false;
	CHECK(elements(buildRuleset(config, {}), Family::ipv4) ==
	      std::vector<std::string>{"10.0.0.0/8", "169.254.0.0/16"});
	// A user list that already holds link-local merges with it instead of overlapping.
	Config overlapping = configWith({"169.254.0.0/15"});
	CHECK(elements(buildRuleset(overlapping, {}), Family::ipv4) ==
	      std::vector<std::string>{"169.254.0.0/15"});
}

TEST_CASE("--enable-ipv6 adds the IPv6 set with fe80::/10 unless masqLinkLocalIPv6")
{
	RulesetOptions options;
	options.enableIpv6 = true;
	options.connectionCounters = false; // the shape without counters (see the counter tests)
	Config config = configWith({"10.0.0.0/8", "2001:db8::/32"});
	Ruleset r = buildRuleset(config, options);
	REQUIRE(r.sets.size() == 2);
	CHECK(elements(r, Family::ipv4) == std::vector<std::string>{"10.0.0.0/8", "169.254.0.0/16"});
	CHECK(elements(r, Family::ipv6) == std::vector<std::string>{"2001:db8::/32", "fe80::/10"});
	CHECK(rules(r, "postrouting") ==
	      std::vector<std::string>{"fib daddr type != local jump IP-MASQ-AGENT"});
	CHECK(rules(r, "IP-MASQ-AGENT") ==
	      std::vector<std::string>{"ip daddr @nomasq-v4 return", "ip6 daddr @nomasq-v6 return",
				       "masquerade fully-random"});

	config.masqLinkLocalIPv6 = true;
	CHECK(elements(buildRuleset(config, options), Family::ipv6) ==
	      std::vector<std::string>{"2001:db8::/32"});
	// masqLinkLocalIPv6 does not touch IPv4 link-local.
	CHECK(elements(buildRuleset(config, options), Family::ipv4) ==
	      std::vector<std::string>{"10.0.0.0/8", "169.254.0.0/16"});
}

TEST_CASE("--random-fully=false drops fully-random")
{
	RulesetOptions options;
	options.randomFully = false;
	CHECK(rules(buildRuleset(defaultConfig({}), options), "IP-MASQ-AGENT").back() == "masquerade");
}

TEST_CASE("--to-ports spreads tcp, udp and sctp over the ranges in proportion to their sizes")
{
	RulesetOptions options;
	options.toPorts = {{1024, 29999}, {32768, 65535}};
	const Ruleset r = buildRuleset(defaultConfig({}), options);
	CHECK(rules(r, "IP-MASQ-AGENT") ==
	      std::vector<std::string>{
		      "ip daddr @nomasq-v4 return",
		      "meta l4proto { tcp, udp, sctp } numgen random mod 61744 < 28976 masquerade to "
		      ":1024-29999 fully-random",
		      "meta l4proto { tcp, udp, sctp } masquerade to :32768-65535 fully-random",
		      "masquerade fully-random"});

	// The cascade gives each range exactly size/total of all flows.
	options.toPorts = {{1, 10}, {101, 130}, {1001, 1060}};
	const Ruleset spread = buildRuleset(defaultConfig({}), options);
	const Chain &chain = spread.chains[1];
	double undecided = 1.0;
	std::vector<double> shares;
	for (const Rule &rule : chain.rules) {
		const auto *masq = std::get_if<Masquerade>(&rule.statement);
		if (!masq || !masq->toPorts)
			continue;
		const double p = masq->sample ? double(masq->sample->below) / masq->sample->modulus : 1.0;
		shares.push_back(undecided * p);
		undecided -= undecided * p;
	}
	REQUIRE(shares.size() == 3);
	CHECK(shares[0] == Approx(10.0 / 100));
	CHECK(shares[1] == Approx(30.0 / 100));
	CHECK(shares[2] == Approx(60.0 / 100));
	CHECK(undecided == Approx(0.0).margin(1e-12));
}

TEST_CASE("chain priority: parsed from numbers or nft names, printed as nft lists it")
{
	CHECK(parseChainPriority("110").value() == 110);
	CHECK(parseChainPriority("srcnat").value() == 100);
	CHECK(parseChainPriority("srcnat + 10").value() == 110);
	CHECK(parseChainPriority("srcnat+10").value() == 110);
	CHECK(parseChainPriority("srcnat-5").value() == 95);
	CHECK(parseChainPriority("filter").value() == 0);
	CHECK(parseChainPriority("-150").value() == -150);
	CHECK_THAT(parseChainPriority("-200").error().message, Catch::Contains("at least -199"));
	CHECK_THAT(parseChainPriority("dstnat").error().message, Catch::Contains("\"dstnat\""));
	CHECK_THAT(parseChainPriority("srcnat + x").error().message, Catch::Contains("offset"));

	CHECK(formatChainPriority(100) == "srcnat");
	CHECK(formatChainPriority(110) == "srcnat + 10");
	CHECK(formatChainPriority(90) == "srcnat - 10");
	CHECK(formatChainPriority(111) == "111");
	CHECK(formatChainPriority(0) == "filter");
	CHECK(formatChainPriority(-5) == "filter - 5");
	CHECK(formatChainPriority(60) == "security + 10");
	CHECK(formatChainPriority(-150) == "mangle");
	CHECK(formatChainPriority(-100) == "-100");
	CHECK(formatChainPriority(200) == "200");
}

TEST_CASE("table and chain names must be nft identifiers")
{
	CHECK(validateName("--masq-chain", "IP-MASQ-AGENT"));
	CHECK(validateName("--table", "ip-masq-agent"));
	CHECK(validateName("--table", "_x.y"));
	CHECK_THAT(validateName("--masq-chain", "bad name").error().message,
		   Catch::Contains("--masq-chain \"bad name\""));
	CHECK_FALSE(validateName("--table", ""));
	CHECK_FALSE(validateName("--table", "1abc"));
	CHECK_FALSE(validateName("--table", "a\"b"));
	CHECK_FALSE(validateName("--table", std::string(256, 'a')));
	CHECK_THAT(validateName("--masq-chain", "masquerade").error().message, Catch::Contains("nft keyword"));
	CHECK_FALSE(validateName("--table", "ip"));
	CHECK(validateName("--masq-chain", "MASQUERADE"));
	RulesetOptions clash;
	clash.masqChain = "postrouting";
	CHECK_THAT(validateRulesetOptions(clash).error().message, Catch::Contains("base chain"));
}

TEST_CASE("buildRuleset is a pure function of its inputs")
{
	const Config config = configWith({"10.0.0.0/8", "192.0.2.0/24"});
	RulesetOptions options;
	options.toPorts = {{1024, 65535}};
	CHECK(buildRuleset(config, options) == buildRuleset(config, options));
	RulesetOptions other = options;
	other.masqChain = "OTHER";
	CHECK_FALSE(buildRuleset(config, options) == buildRuleset(config, other));
}

TEST_CASE("chain priority: no arithmetic overflows, each error states the bound crossed")
{
	// Offsets of any size are refused or bounded before any arithmetic.
	for (const char *text : {"srcnat - -9223372036854775807", "srcnat + -9223372036854775808",
				 "srcnat+-5", "mangle - +5"}) {
		INFO(text);
		CHECK_THAT(parseChainPriority(text).error().message, Catch::Contains("without a sign"));
	}
	CHECK_THAT(parseChainPriority("srcnat - 9223372036854775807").error().message,
		   Catch::Contains("at least -199"));
	CHECK_THAT(parseChainPriority("srcnat + 9223372036854775807").error().message,
		   Catch::Contains("at most 2147483647"));
	CHECK_THAT(parseChainPriority("srcnat + 99999999999999999999999999").error().message,
		   Catch::Contains("at most 2147483647"));
	CHECK_THAT(parseChainPriority("-99999999999999999999999999").error().message,
		   Catch::Contains("at least -199"));
	// Every value the kernel holds from -199 up is accepted; one more is refused.
	CHECK(parseChainPriority("2000000000").value() == 2000000000);
	CHECK(parseChainPriority("2147483647").value() == 2147483647);
	CHECK(parseChainPriority("srcnat + 2147483547").value() == 2147483647);
	CHECK_THAT(parseChainPriority("2147483648").error().message, Catch::Contains("at most 2147483647"));
	CHECK_THAT(parseChainPriority("srcnat + 2147483548").error().message,
		   Catch::Contains("at most 2147483647"));
	CHECK(parseChainPriority("-199").value() == -199);
	CHECK(parseChainPriority("mangle - 49").value() == -199);
	CHECK_THAT(parseChainPriority("mangle - 50").error().message, Catch::Contains("at least -199"));
	CHECK_THAT(parseChainPriority("").error().message, Catch::Contains("empty"));
	CHECK_THAT(parseChainPriority("12x").error().message, Catch::Contains("not a number"));
	// User text is escaped in the message.
	CHECK_THAT(parseChainPriority("src\nnat").error().message, Catch::Contains("\"src\\nnat\""));

	// Printing the extremes does not overflow either, and parses back.
	CHECK(formatChainPriority(std::numeric_limits<int>::max()) == "2147483647");
	CHECK(formatChainPriority(std::numeric_limits<int>::min()) == "-2147483648");
	for (int p : {-199, -160, -150, -140, -10, 0, 10, 40, 60, 90, 100, 110, 111, 2147483647})
		CHECK(parseChainPriority(formatChainPriority(p)).value() == p);
}

TEST_CASE("names nft cannot carry are refused with the limit")
{
	CHECK(validateName("--table", std::string(255, 'a')));
	CHECK_THAT(validateName("--table", std::string(256, 'a')).error().message,
		   Catch::Contains("256 characters") && Catch::Contains("at most 255"));
	CHECK_THAT(validateName("--table", "a\nb").error().message, Catch::Contains("\"a\\nb\""));

	// The masquerade chain's name is part of the jump rule's comment, which nft caps at
	// 128 characters: the longest name is what the comment leaves room for.
	RulesetOptions options;
	options.masqChain = std::string(94, 'C');
	CHECK(validateRulesetOptions(options));
	bool fits = true;
	for (const Chain &chain : buildRuleset(Config{}, options).chains)
		for (const Rule &rule : chain.rules)
			fits &= rule.comment.size() <= kMaxNftCommentLength;
	CHECK(fits);
	options.masqChain = std::string(95, 'C');
	CHECK_THAT(validateRulesetOptions(options).error().message,
		   Catch::Contains("--masq-chain is 95 characters long") &&
			   Catch::Contains("limit of 128") && Catch::Contains("at most 94 characters"));
	options.masqChain = std::string(255, 'C');
	CHECK_THAT(validateRulesetOptions(options).error().message, Catch::Contains("at most 94 characters"));

	// The table name is in no comment: the whole nf_tables limit is available.
	RulesetOptions longTable;
	longTable.table = std::string(255, 't');
	CHECK(validateRulesetOptions(longTable));
}

TEST_CASE("masqueradeCIDRs: the set holds the resolved result, and says so in its comment")
{
	Config config = configWith({"10.0.0.0/8", "10.1.2.0/24"});
	const Ruleset plain = buildRuleset(config, RulesetOptions{});
	config.masqueradeCIDRs.push_back(parsePrefix("10.1.0.0/16").value());
	const Ruleset r = buildRuleset(config, RulesetOptions{});
	CHECK(elements(r, Family::ipv4) ==
	      std::vector<std::string>{"10.0.0.0/16", "10.1.2.0/24", "10.2.0.0-10.255.255.255",
				       "169.254.0.0/16"});
	CHECK(r.sets[0].comment == "IPv4 destinations not masqueraded: nonMasqueradeCIDRs and "
				   "link-local, less masqueradeCIDRs");
	CHECK(plain.sets[0].comment == "IPv4 destinations not masqueraded: nonMasqueradeCIDRs and link-local");
	// Nothing else changes: one set, the same chains.
	CHECK(r.sets.size() == 1);
	CHECK(r.chains == plain.chains);
}

TEST_CASE("masqueradeSourceCIDRs: a source set per listed family, matched by the jump")
{
	Config config = defaultConfig({});
	config.masqueradeSourceCIDRs = {parsePrefix("10.244.1.0/24").value(),
					parsePrefix("10.244.0.0/24").value()};
	RulesetOptions noCounters; // the shape without counters (see the counter tests)
	noCounters.connectionCounters = false;
	const Ruleset v4 = buildRuleset(config, noCounters);
	REQUIRE(v4.sets.size() == 2);
	CHECK(v4.sets[1].name == "masq-src-v4");
	CHECK(v4.sets[1].elements.ranges().size() == 1); // normalized: 10.244.0.0/23
	CHECK(v4.sets[1].comment == "IPv4 sources masqueraded: masqueradeSourceCIDRs");
	CHECK(v4.findSet(Family::ipv4)->name == "nomasq-v4");
	CHECK(rules(v4, "postrouting") ==
	      std::vector<std::string>{"ip saddr @masq-src-v4 fib daddr type != local jump IP-MASQ-AGENT"});

	RulesetOptions ipv6 = noCounters;
	ipv6.enableIpv6 = true;
	const Ruleset v4OnlyListed = buildRuleset(config, ipv6);
	CHECK(rules(v4OnlyListed, "postrouting") ==
	      std::vector<std::string>{"ip saddr @masq-src-v4 fib daddr type != local jump IP-MASQ-AGENT",
				       "meta nfproto ipv6 fib daddr type != local jump IP-MASQ-AGENT"});
	CHECK(v4OnlyListed.sets.size() == 3);

	config.masqueradeSourceCIDRs.push_back(parsePrefix("fd00::/8").value());
	const Ruleset both = buildRuleset(config, ipv6);
	CHECK(rules(both, "postrouting") ==
	      std::vector<std::string>{"ip saddr @masq-src-v4 fib daddr type != local jump IP-MASQ-AGENT",
				       "ip6 saddr @masq-src-v6 fib daddr type != local jump IP-MASQ-AGENT"});
	REQUIRE(both.sets.size() == 4);
	CHECK(both.sets[3].name == "masq-src-v6");
	// The return rules still name only the destination sets.
	CHECK(rules(both, "IP-MASQ-AGENT")[0] == "ip daddr @nomasq-v4 return");
	CHECK(rules(both, "IP-MASQ-AGENT")[1] == "ip6 daddr @nomasq-v6 return");

	// Without --enable-ipv6 an IPv6 source (which the config refuses anyway) adds nothing.
	Config v6Only;
	v6Only.masqueradeSourceCIDRs = {parsePrefix("fd00::/8").value()};
	CHECK(buildRuleset(v6Only, RulesetOptions{}) == buildRuleset(Config{}, RulesetOptions{}));
}

TEST_CASE("the comments of the new sets and rules fit, and do not shorten --masq-chain")
{
	RulesetOptions options;
	options.enableIpv6 = true;
	options.masqChain = std::string(94, 'C');
	REQUIRE(validateRulesetOptions(options));
	Config config;
	config.masqueradeCIDRs = {parsePrefix("10.1.0.0/16").value(), parsePrefix("fe80::/64").value()};
	config.masqueradeSourceCIDRs = {parsePrefix("10.0.0.0/8").value()};
	for (const Config &c : {config, Config{}}) {
		const Ruleset r = buildRuleset(c, options);
		for (const AddressSet &set : r.sets)
			CHECK(set.comment.size() <= kMaxNftCommentLength);
		for (const Chain &chain : r.chains)
			for (const Rule &rule : chain.rules)
				CHECK(rule.comment.size() <= kMaxNftCommentLength);
	}
}

TEST_CASE("connection counters: a name per family, decision and reason, and back")
{
	std::vector<std::string> names;
	for (const Family family : {Family::ipv4, Family::ipv6})
		for (const auto &[decision, reason] :
		     {std::pair{Decision::notMasqueraded, DecisionReason::destination},
		      std::pair{Decision::notMasqueraded, DecisionReason::source},
		      std::pair{Decision::notMasqueraded, DecisionReason::interface},
		      std::pair{Decision::masqueraded, DecisionReason::none},
		      std::pair{Decision::snat, DecisionReason::none}}) {
			const CounterLabel label{family, decision, reason};
			const std::string name = counterName(label);
			INFO(name);
			CHECK(counterLabelOf(name) == label);
			REQUIRE(validateName("counter", name));
			names.push_back(name);
		}
	// Distinct: /metrics would otherwise add two counts into one series.
	std::sort(names.begin(), names.end());
	CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
	CHECK(counterName({Family::ipv6, Decision::notMasqueraded, DecisionReason::source}) ==
	      "nomasq-src-v6");
	// Someone else's counter in the table is not one of ours.
	CHECK_FALSE(counterLabelOf("masq-v5"));
	CHECK_FALSE(counterLabelOf("masq"));
	CHECK_FALSE(counterLabelOf(""));
}

TEST_CASE("connection counters: each decision's rule counts into its counter, before its verdict")
{
	const Ruleset r = buildRuleset(defaultConfig({}), RulesetOptions{});
	REQUIRE(r.counters.size() == 2);
	CHECK(r.counters[0].name == "nomasq-dst-v4");
	CHECK(r.counters[0].label ==
	      CounterLabel{Family::ipv4, Decision::notMasqueraded, DecisionReason::destination});
	CHECK(r.counters[1].name == "masq-v4");
	const std::vector<Rule> &masq = r.chains.back().rules;
	REQUIRE(masq.size() == 2);
	CHECK(masq[0].counter == "nomasq-dst-v4");
	CHECK(masq[1].counter == "masq-v4");
	CHECK(test::ruleTexts(r, r.chains.back().name, true)[1] == "counter name \"masq-v4\" masquerade fully-random");
	// The jump counts nothing: the decision is made in the agent's chain.
	CHECK(r.chains.front().rules.front().counter.empty());

	RulesetOptions off;
	off.connectionCounters = false;
	const Ruleset plain = buildRuleset(defaultConfig({}), off);
	CHECK(plain.counters.empty());
	for (const Chain &chain : plain.chains)
		for (const Rule &rule : chain.rules)
			CHECK(rule.counter.empty());
	CHECK(plain.sets == r.sets);
}

TEST_CASE("connection counters: both families get a rule each, so that a count is one family's")
{
	RulesetOptions options;
	options.enableIpv6 = true;
	Config config = defaultConfig({});
	config.masqueradeSourceCIDRs = {parsePrefix("10.244.0.0/16").value()};
	const Ruleset r = buildRuleset(config, options);
	CHECK(rules(r, "IP-MASQ-AGENT") ==
	      std::vector<std::string>{"ip daddr @nomasq-v4 return", "ip6 daddr @nomasq-v6 return",
				       "meta nfproto ipv4 masquerade fully-random",
				       "meta nfproto ipv6 masquerade fully-random"});
	// The IPv4 sources the jump leaves alone are counted where they are left: in the base
	// chain, with no verdict; IPv6 has no source list, so no such rule.
	CHECK(rules(r, "postrouting") ==
	      std::vector<std::string>{"ip saddr @masq-src-v4 fib daddr type != local jump IP-MASQ-AGENT",
				       "meta nfproto ipv6 fib daddr type != local jump IP-MASQ-AGENT",
				       "ip saddr != @masq-src-v4 fib daddr type != local"});
	CHECK(r.chains.front().rules.back().counter == "nomasq-src-v4");
}

TEST_CASE("connection counters: in every case, every rule's counter is declared and every "
	  "counter counts somewhere")
{
	for (const test::RulesetCase &c : test::rulesetCases()) {
		INFO(c.name);
		const auto built = test::buildCase(c);
		REQUIRE(built);
		std::set<std::string> used;
		for (const Chain &chain : built->chains)
			for (const Rule &rule : chain.rules)
				if (!rule.counter.empty())
					used.insert(rule.counter);
		std::set<std::string> declared;
		for (const NamedCounter &counter : built->counters) {
			CHECK(counterLabelOf(counter.name) == counter.label);
			CHECK(counter.comment.size() <= kMaxNftCommentLength);
			declared.insert(counter.name);
		}
		CHECK(used == declared);
		CHECK(declared.size() == built->counters.size());
	}
}
