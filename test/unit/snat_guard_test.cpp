// SPDX-License-Identifier: Apache-2.0
// The SNAT guard (snatGuard): the section as the config file gives it and its checks, the
// ruleset it makes (sets, rules, counters; its dry run is the golden snat-guard.nft), what an
// edit of it changes (element update or replacement), what a replacement keeps of its
// dynamic sets, and the text of --snat-usage and --explain about it.
#include <catch2/catch.hpp>

#include <algorithm>

#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "ip-masq-agent/config/config_dir.h"
#include "ip-masq-agent/config/snat_guard.h"
#include "ip-masq-agent/diagnose/guard_over.h"
#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/nft/replacement.h"
#include "config_entries.h"

using namespace ipmasq;

namespace {

const std::string kHere = "/etc/config/ip-masq-agent:3: snatGuard: ";

Prefix prefix(const std::string &text)
{
	auto parsed = parsePrefix(text);
	REQUIRE(parsed);
	return *parsed;
}

SnatGuard observeRate(uint32_t rate)
{
	SnatGuard guard;
	guard.mode = SnatGuardMode::observe;
	guard.newConnectionsPerSecond = rate;
	return guard;
}

Config configWith(const SnatGuard &guard)
{
	Config config = defaultConfig({});
	config.snatGuard = guard;
	return config;
}

std::string errorOf(const SnatGuard &guard)
{
	const Status status = validateSnatGuard(guard, kHere);
	REQUIRE_FALSE(status);
	return status.error().message;
}

const Chain &masqChain(const Ruleset &ruleset)
{
	REQUIRE(ruleset.chains.size() == 2);
	return ruleset.chains[1];
}

std::vector<GuardLimit> guardRules(const Ruleset &ruleset)
{
	std::vector<GuardLimit> out;
	for (const Rule &rule : masqChain(ruleset).rules)
		std::visit(Overloaded{[&](const GuardLimit &limit) { out.push_back(limit); },
				      [](const auto &) {}},
			   rule.statement);
	return out;
}

std::vector<std::string> dynamicSetNames(const Ruleset &ruleset)
{
	std::vector<std::string> out;
	for (const DynamicSet &set : ruleset.dynamicSets)
		out.push_back(set.name);
	return out;
}

} // namespace

TEST_CASE("snatGuard: a valid section passes")
{
	SnatGuard guard = observeRate(100);
	guard.openConnections = 2000;
	guard.exempt = {prefix("198.18.0.0/24")};
	CHECK(validateSnatGuard(guard, kHere));
	CHECK(describeSnatGuard(guard) ==
	      "mode=observe newConnectionsPerSecond=100 openConnections=2000 exempt=[198.18.0.0/24]");
}

TEST_CASE("snatGuard: each error names where, the key and the fix")
{
	SECTION("no mode")
	{
		SnatGuard guard = observeRate(20);
		guard.mode.reset();
		const std::string message = errorOf(guard);
		CHECK(message.starts_with(kHere));
		CHECK(message.find("mode is required: observe") != std::string::npos);
		CHECK(message.find("enforce") != std::string::npos);
	}
	SECTION("no limit")
	{
		SnatGuard guard;
		guard.mode = SnatGuardMode::enforce;
		const std::string message = errorOf(guard);
		CHECK(message.starts_with(kHere));
		CHECK(message.find("gives no limit: set newConnectionsPerSecond, openConnections or both") !=
		      std::string::npos);
	}
	SECTION("a limit of 0 or above the bound")
	{
		CHECK(errorOf(observeRate(0)).find("newConnectionsPerSecond is 0: give a whole number from "
						   "1 to 1000000") != std::string::npos);
		SnatGuard guard = observeRate(10);
		guard.openConnections = kMaxSnatGuardLimit + 1;
		CHECK(errorOf(guard).find("openConnections is 1000001: give a whole number from 1 to "
					  "1000000") != std::string::npos);
		guard.openConnections = kMaxSnatGuardLimit;
		CHECK(validateSnatGuard(guard, kHere));
	}
	SECTION("a negative value, as a parser hands it over")
	{
		const auto problem = snatGuardLimitProblem(kHere, "openConnections", -3);
		REQUIRE(problem);
		CHECK(problem->starts_with(kHere + "openConnections is -3: give a whole number"));
		CHECK_FALSE(snatGuardLimitProblem(kHere, "openConnections", 1));
	}
	SECTION("too many exempt CIDRs")
	{
		SnatGuard guard = observeRate(10);
		guard.exempt.assign(kMaxSnatGuardExempt + 1, prefix("198.18.0.0/24"));
		CHECK(errorOf(guard).find("exempt lists 1025 CIDRs, more than 1024") != std::string::npos);
		guard.exempt.pop_back();
		CHECK(validateSnatGuard(guard, kHere));
	}
	SECTION("an unknown mode")
	{
		const auto mode = parseSnatGuardMode("drop");
		REQUIRE_FALSE(mode);
		CHECK(mode.error().message ==
		      "mode \"drop\" is not one the guard knows: use observe (count the connections over a "
		      "limit, drop none) or enforce (drop them)");
		CHECK(parseSnatGuardMode("enforce") == SnatGuardMode::enforce);
		CHECK(parseSnatGuardMode("observe") == SnatGuardMode::observe);
	}
}

TEST_CASE("snatGuard: without the section the ruleset is exactly what it was")
{
	const Config config = defaultConfig({});
	RulesetOptions options;
	options.enableIpv6 = true;
	const Ruleset ruleset = buildRuleset(config, options);
	CHECK(ruleset.dynamicSets.empty());
	CHECK(guardRules(ruleset).empty());
	CHECK_FALSE(ruleset.findSet("guard-exempt-v4"));
}

TEST_CASE("snatGuard: observe makes the sets and rules of its limits, and drops nothing")
{
	SnatGuard guard = observeRate(20);
	guard.exempt = {prefix("198.18.0.0/24"), prefix("2001:db8::/64")};
	const Ruleset ruleset = buildRuleset(configWith(guard), RulesetOptions{});
	CHECK(dynamicSetNames(ruleset) == std::vector<std::string>{"guard-rate-v4", "guard-over-rate-v4"});
	CHECK(ruleset.dynamicSets[0].timeoutMs == 2000);
	CHECK_FALSE(ruleset.dynamicSets[0].counter);
	CHECK(ruleset.dynamicSets[1].counter);
	const AddressSet *exempt = ruleset.findSet("guard-exempt-v4");
	REQUIRE(exempt);
	CHECK(exempt->elements.size() == 1); // the IPv6 prefix goes to guard-exempt-v6 only
	const auto rules = guardRules(ruleset);
	REQUIRE(rules.size() == 1);
	CHECK(rules[0] == GuardLimit{Family::ipv4, GuardLimitKind::newConnections, 20, "guard-exempt-v4",
				     "guard-rate-v4", "guard-over-rate-v4", false});
	// Right before the NAT: after every return, before the masquerade.
	const auto &chainRules = masqChain(ruleset).rules;
	CHECK(std::holds_alternative<ReturnIfDestinationInSet>(chainRules[0].statement));
	CHECK(std::holds_alternative<GuardLimit>(chainRules[1].statement));
	CHECK(std::holds_alternative<Masquerade>(chainRules[2].statement));
	CHECK(chainRules[1].counter == "guard-observed-rate-v4");
	// The guard's counters come last, so that a switch of mode keeps the others.
	CHECK(ruleset.counters.back().name == "guard-observed-rate-v4");
}

TEST_CASE("snatGuard: enforce drops; both limits and both families")
{
	SnatGuard guard = observeRate(20);
	guard.mode = SnatGuardMode::enforce;
	guard.openConnections = 30;
	RulesetOptions options;
	options.enableIpv6 = true;
	const Ruleset ruleset = buildRuleset(configWith(guard), options);
	CHECK(dynamicSetNames(ruleset) ==
	      std::vector<std::string>{"guard-rate-v4", "guard-over-rate-v4", "guard-open-v4", "guard-over-open-v4",
				       "guard-rate-v6", "guard-over-rate-v6", "guard-open-v6", "guard-over-open-v6"});
	CHECK(ruleset.dynamicSets[2].timeoutMs == 0); // ct count goes with add, never a timeout
	const auto rules = guardRules(ruleset);
	REQUIRE(rules.size() == 4);
	for (const GuardLimit &rule : rules)
		CHECK(rule.drop);
	CHECK(rules[1].kind == GuardLimitKind::openConnections);
	CHECK(rules[1].limit == 30);
	CHECK(rules[3].family == Family::ipv6);
	CHECK(ruleset.findSet("guard-exempt-v6"));
}

TEST_CASE("snatGuard: an edit of exempt is an element update; of mode or a limit, a replacement "
	  "that declares the same dynamic sets")
{
	SnatGuard guard = observeRate(20);
	guard.openConnections = 30;
	const Ruleset before = buildRuleset(configWith(guard), RulesetOptions{});

	SnatGuard exempted = guard;
	exempted.exempt = {prefix("198.18.0.0/24")};
	const auto diff = diffElements(before, buildRuleset(configWith(exempted), RulesetOptions{}));
	REQUIRE(diff);
	REQUIRE(diff->sets.size() == 1);
	CHECK(diff->sets[0].set == "guard-exempt-v4");

	for (const auto &edit : {std::function<void(SnatGuard &)>([](SnatGuard &g) { g.mode = SnatGuardMode::enforce; }),
				 std::function<void(SnatGuard &)>([](SnatGuard &g) { g.newConnectionsPerSecond = 50; }),
				 std::function<void(SnatGuard &)>([](SnatGuard &g) { g.openConnections = 40; })}) {
		SnatGuard edited = guard;
		edit(edited);
		const Ruleset after = buildRuleset(configWith(edited), RulesetOptions{});
		CHECK_FALSE(diffElements(before, after));
		CHECK(after.dynamicSets == before.dynamicSets);
	}
	// A limit removed: its sets go.
	SnatGuard rateOnly = guard;
	rateOnly.openConnections.reset();
	CHECK_FALSE(diffElements(before, buildRuleset(configWith(rateOnly), RulesetOptions{})));
}

TEST_CASE("snatGuard: a replacement keeps the dynamic sets the kernel holds as declared, and only those")
{
	using netlink::TableContents;
	Ruleset desired;
	desired.comment = "managed";
	TableContents kernel;
	kernel.generation = 7;
	kernel.comment = "managed";
	kernel.sets = {"guard-rate-v4", "guard-over-rate-v4", "nomasq-v4", "guard-open-v4"};
	kernel.dynamicSets = {{"guard-rate-v4", "declared rate"},
			      {"guard-over-rate-v4", "declared over"},
			      {"guard-open-v4", "declared open"}};
	const std::vector<std::pair<std::string, std::string>> wanted{
		{"guard-rate-v4", "declared rate"}, {"guard-over-rate-v4", "declared over"},
		{"guard-open-v4", "declared differently"}};
	const auto plan = netlink::planReplacement(kernel, desired, {}, wanted);
	REQUIRE(plan);
	CHECK(plan->keptSets == std::vector<std::string>{"guard-rate-v4", "guard-over-rate-v4"});
	CHECK(plan->deleteSets == std::vector<std::string>{"nomasq-v4", "guard-open-v4"});
	// Without the section, nothing is kept.
	const auto without = netlink::planReplacement(kernel, desired, {});
	REQUIRE(without);
	CHECK(without->keptSets.empty());
	CHECK(without->deleteSets == kernel.sets);
}

TEST_CASE("snatGuard: --snat-usage lists who is over each limit, the most attempts first, bounded")
{
	SnatGuard guard = observeRate(20);
	guard.openConnections = 30;
	const Ruleset ruleset = buildRuleset(configWith(guard), RulesetOptions{});
	const auto address = [](const char *text) { return parseAddress(text).value(); };
	std::vector<GuardOverKey> over{
		{GuardLimitKind::newConnections, address("198.51.100.2"), address("203.0.113.2"), 6, 9443, 130},
		{GuardLimitKind::newConnections, address("198.51.100.3"), address("203.0.113.2"), 17, 53, 400},
		{GuardLimitKind::newConnections, address("198.51.100.4"), address("203.0.113.9"), 6, 443, 2},
	};
	const std::string text = guardOverText(
		ruleset, over, {{"guard-rate-v4", 7, 65536}, {"guard-open-v4", 65536, 65536}}, 2);
	INFO(text);
	CHECK(text.find("newConnectionsPerSecond 20 (IPv4, observed: let through): 3 pairs of source and destination "
			"over it\n"
			"  ATTEMPTS  PROTO  CLIENT                                  DESTINATION\n"
			"       400  udp    198.51.100.3                            203.0.113.2:53\n"
			"       130  tcp    198.51.100.2                            203.0.113.2:9443\n"
			"  and 1 more, left out (at most 2 shown)\n"
			"openConnections 30 (IPv4, observed: let through): 0 pairs of source and destination over it\n"
			"set guard-rate-v4: 7 of 65536 keys\n"
			"set guard-open-v4: 65536 of 65536 keys (full: a new key goes unguarded)\n") !=
	      std::string::npos);
	CHECK(guardOverText(buildRuleset(defaultConfig({}), RulesetOptions{}), over).empty());
}

TEST_CASE("snatGuard: --snat-usage counts the keys over a limit from its over set's count when only the "
	  "top ones were kept")
{
	SnatGuard guard = observeRate(20);
	const Ruleset ruleset = buildRuleset(configWith(guard), RulesetOptions{});
	const auto address = [](const char *text) { return parseAddress(text).value(); };
	// What NetlinkBackend::readGuard keeps of a set of 50 keys at a bound of 2.
	const std::vector<GuardOverKey> top{
		{GuardLimitKind::newConnections, address("198.51.100.3"), address("203.0.113.2"), 17, 53, 400},
		{GuardLimitKind::newConnections, address("198.51.100.2"), address("203.0.113.2"), 6, 9443, 130},
	};
	const std::string text = guardOverText(ruleset, top, {{"guard-over-rate-v4", 50, 65536}}, 2);
	INFO(text);
	CHECK(text.find("newConnectionsPerSecond 20 (IPv4, observed: let through): 50 pairs of source and "
			"destination over it\n") != std::string::npos);
	CHECK(text.find("  and 48 more, left out (at most 2 shown)\n") != std::string::npos);
	CHECK(text.find("set guard-over-rate-v4: 50 of 65536 keys\n") != std::string::npos);
}

TEST_CASE("snatGuard in the config file: every key, and without it nothing changes")
{
	const LoadedConfig loaded = test::parseOk("nonMasqueradeCIDRs: [10.0.0.0/8]\n"
						  "snatGuard:\n"
						  "  mode: observe\n"
						  "  newConnectionsPerSecond: 100\n"
						  "  openConnections: 2000\n"
						  "  exempt: [198.18.0.0/24, 198.51.100.7/32]\n");
	REQUIRE(loaded.config.snatGuard);
	const SnatGuard &guard = *loaded.config.snatGuard;
	CHECK(guard.mode == SnatGuardMode::observe);
	CHECK(guard.newConnectionsPerSecond == 100u);
	CHECK(guard.openConnections == 2000u);
	CHECK(guard.exempt == std::vector<Prefix>{prefix("198.18.0.0/24"), prefix("198.51.100.7/32")});
	CHECK(describeConfig(loaded.config).find("snatGuard={mode=observe newConnectionsPerSecond=100 "
						 "openConnections=2000 exempt=[198.18.0.0/24,198.51.100.7/32]}") !=
	      std::string::npos);
	// JSON, a flow mapping, one limit.
	const LoadedConfig json = test::parseOk("{\"snatGuard\": {\"mode\": \"enforce\", \"openConnections\": 30}}");
	REQUIRE(json.config.snatGuard);
	CHECK(json.config.snatGuard->enforces());
	CHECK_FALSE(json.config.snatGuard->newConnectionsPerSecond);
	CHECK_FALSE(test::parseOk("nonMasqueradeCIDRs: [10.0.0.0/8]\n").config.snatGuard);
	CHECK_FALSE(test::parseOk("snatGuard:\n").config.snatGuard); // null: no section
}

TEST_CASE("snatGuard in the config file: each error names the file, line, key and the fix")
{
	const auto error = [](const std::string &section) {
		return test::parseError("nonMasqueradeCIDRs: [10.0.0.0/8]\nsnatGuard:\n" + section);
	};
	CHECK(error("  newConnectionsPerSecond: 20\n") ==
	      "/etc/config/ip-masq-agent:2:1: snatGuard: mode is required: observe (count the connections "
	      "over a limit, drop none: start here) or enforce (drop them)");
	CHECK(error("  mode: observe\n") ==
	      "/etc/config/ip-masq-agent:2:1: snatGuard: gives no limit: set newConnectionsPerSecond, "
	      "openConnections or both, such as newConnectionsPerSecond: 100");
	CHECK_THAT(error("  mode: drop\n  openConnections: 3\n"),
		   Catch::Contains(":3:9: snatGuard.mode: mode \"drop\" is not one the guard knows: use observe"));
	CHECK_THAT(error("  mode: observe\n  openConnections: 0\n"),
		   Catch::Contains(":4:20: snatGuard.openConnections: \"0\" is out of range: give a whole "
				   "number from 1 to 1000000"));
	CHECK_THAT(error("  mode: observe\n  newConnectionsPerSecond: 1000001\n"),
		   Catch::Contains("snatGuard.newConnectionsPerSecond: \"1000001\" is out of range"));
	CHECK_THAT(error("  mode: observe\n  newConnectionsPerSecond: \"20\"\n"),
		   Catch::Contains("snatGuard.newConnectionsPerSecond: expected a whole number from 1 to "
				   "1000000 such as 100, got a quoted string \"20\" (write it without quotes)"));
	CHECK_THAT(error("  mode: observe\n  openConnections: 5\n  exempt: [198.18.0.0/33]\n"),
		   Catch::Contains("snatGuard.exempt[0]: "));
	CHECK_THAT(error("  mode: observe\n  openConnections: 5\n  exempt: [\"2001:db8::/32\"]\n"),
		   Catch::Contains("is an IPv6 CIDR but IPv6 is not enabled"));
	CHECK_THAT(error("  mode: observe\n  openConection: 5\n"),
		   Catch::Contains("snatGuard: unknown key \"openConection\": did you mean \"openConnections\"?"));
	CHECK_THAT(test::parseError("snatGuard: observe\n"),
		   Catch::Contains("snatGuard: expected a mapping such as {mode: observe, newConnectionsPerSecond: 100}"));
}

TEST_CASE("snatGuard with --config-dir: one file gives the section; two are an error naming both")
{
	auto a = parseConfig("snatGuard: {mode: observe, openConnections: 30}\n", "/d/ip-masq-a", {});
	auto b = parseConfig("nonMasqueradeCIDRs: [10.0.0.0/8]\n", "/d/ip-masq-b", {});
	auto c = parseConfig("snatGuard:\n  mode: enforce\n  openConnections: 30\n", "/d/ip-masq-c", {});
	REQUIRE(a);
	REQUIRE(b);
	REQUIRE(c);
	auto merged = mergeConfigs({*a, *b}, {});
	REQUIRE(merged);
	REQUIRE(merged->config.snatGuard);
	CHECK(merged->config.snatGuard->openConnections == 30u);
	auto refused = mergeConfigs({*a, *b, *c}, {});
	REQUIRE_FALSE(refused);
	CHECK_THAT(refused.error().message, Catch::Contains("/d/ip-masq-c") && Catch::Contains("snatGuard: the "
					    "section is also given at /d/ip-masq-a") &&
					    Catch::Contains("only one of the files may give it"));
}

TEST_CASE("snatGuard: --explain says whether a destination and a source are guarded, and what was over")
{
	SnatGuard guard = observeRate(20);
	guard.mode = SnatGuardMode::enforce;
	guard.openConnections = 30;
	guard.exempt = {prefix("198.18.0.0/24")};
	const Ruleset ruleset = buildRuleset(configWith(guard), RulesetOptions{});
	const auto address = [](const char *text) { return parseAddress(text).value(); };
	const std::vector<GuardOverKey> over{
		{GuardLimitKind::newConnections, address("198.51.100.2"), address("203.0.113.2"), 6, 9443, 130},
		{GuardLimitKind::openConnections, address("198.51.100.3"), address("203.0.113.9"), 6, 443, 4}};
	CHECK(guardExplainClause(ruleset, address("203.0.113.2"), {address("198.51.100.2"), address("198.18.0.9")}, over,
				 "") ==
	      "; SNAT guard (enforce): per source toward it, newConnectionsPerSecond 20 and openConnections 30; "
	      "from 198.51.100.2: guarded; from 198.18.0.9: exempt (snatGuard exempt); over a limit toward it "
	      "(the last 10 minutes): 198.51.100.2 tcp/9443 130 attempts over newConnectionsPerSecond");
	CHECK(guardExplainClause(ruleset, address("203.0.113.7"), {}, over, "") ==
	      "; SNAT guard (enforce): per source toward it, newConnectionsPerSecond 20 and openConnections 30; "
	      "no source is over a limit toward it (the last 10 minutes)");
	CHECK(guardExplainClause(ruleset, address("203.0.113.7"), {}, std::nullopt, "no CAP_NET_ADMIN").ends_with(
		"; what it counted could not be read: no CAP_NET_ADMIN"));
	// A non-masquerade destination is never guarded.
	CHECK(guardExplainClause(ruleset, address("10.1.2.3"), {}, over, "") ==
	      "; SNAT guard: not guarded (the agent does not source-NAT it)");
	// No guard: no clause; no IPv6 guard without --enable-ipv6.
	CHECK(guardExplainClause(buildRuleset(defaultConfig({}), RulesetOptions{}), address("203.0.113.2"), {}, over,
				 "")
		      .empty());
	CHECK(guardExplainClause(ruleset, address("2001:db8::1"), {}, over, "").empty());
}
