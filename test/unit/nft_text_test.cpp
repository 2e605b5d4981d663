// SPDX-License-Identifier: Apache-2.0
// The dry-run renderer: golden outputs and the shape of the nft script.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ip-masq-agent/nft/nft_text.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "../common/ruleset_cases.h"

using namespace ipmasq;

namespace {

std::string readFile(const std::string &path)
{
	std::ifstream in(path);
	std::ostringstream out;
	out << in.rdbuf();
	return out.str();
}

std::string rendered(const Result<std::string> &text)
{
	INFO((text ? "" : text.error().message));
	REQUIRE(text);
	return *text;
}

// A statement as the dry run prints it: in a rule of a chain of its own, encoded as the
// agent sends it and read back by the codec. The sets it may name exist.
std::string statementText(Statement statement)
{
	Ruleset ruleset;
	ruleset.table = "t";
	for (const auto &[name, family] : {std::pair{"masq-src-v4", Family::ipv4}, {"masq-src-v6", Family::ipv6},
					   {"s", Family::ipv6}})
		ruleset.sets.push_back(AddressSet{name, IntervalSet::fromPrefixes(family, {}), {}});
	ruleset.sets.push_back(AddressSet{"ifs", IntervalSet::fromPrefixes(Family::ipv6, {}), {}, true});
	ruleset.chains.push_back(Chain{"X", std::nullopt, {}, {Rule{std::move(statement), {}}}});
	const std::string table = rendered(renderTable(ruleset));
	const size_t chain = table.find("\tchain X {\n\t\t");
	REQUIRE(chain != std::string::npos);
	const size_t from = chain + std::string_view("\tchain X {\n\t\t").size();
	return table.substr(from, table.find('\n', from) - from);
}

} // namespace

// To accept a deliberate change of output: UPDATE_GOLDEN=1 meson test -C build nft_text
TEST_CASE("rendered rulesets match the golden files")
{
	const bool update = std::getenv("UPDATE_GOLDEN") != nullptr;
	for (const test::RulesetCase &c : test::rulesetCases()) {
		auto ruleset = test::buildCase(c);
		INFO("case " << c.name << (ruleset ? "" : ": " + ruleset.error().message));
		REQUIRE(ruleset);
		const std::string script = rendered(renderNftScript(*ruleset));
		const std::string path = std::string(GOLDEN_DIR) + "/" + c.name + ".nft";
		if (update)
			std::ofstream(path) << script;
		const std::string golden = readFile(path);
		INFO("golden file " << path << " (set UPDATE_GOLDEN=1 to rewrite it)");
		CHECK(script == golden);
	}
}

TEST_CASE("rendering is deterministic and independent of input order")
{
	auto a = parseConfig("nonMasqueradeCIDRs: [192.168.0.0/16, 10.0.0.0/8, 10.1.0.0/16]\n", "a", {});
	auto b = parseConfig("nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\n", "b", {});
	REQUIRE(a);
	REQUIRE(b);
	const RulesetOptions options;
	CHECK(rendered(renderNftScript(buildRuleset(a->config, options))) ==
	      rendered(renderNftScript(buildRuleset(a->config, options))));
	CHECK(rendered(renderTable(buildRuleset(a->config, options))) ==
	      rendered(renderTable(buildRuleset(b->config, options))));
}

TEST_CASE("the script replaces only the agent's table, in one file")
{
	const Ruleset ruleset = buildRuleset(defaultConfig({}), RulesetOptions{});
	const std::string script = rendered(renderNftScript(ruleset, {"first", "", "second"}));
	CHECK_THAT(script, Catch::StartsWith("#!/usr/sbin/nft -f\n# first\n#\n# second\n"
					     "table inet ip-masq-agent\n"
					     "delete table inet ip-masq-agent\n"
					     "table inet ip-masq-agent {\n"));
	// Nothing outside our table: no flush ruleset, no other table.
	CHECK(script.find("flush") == std::string::npos);
	size_t tables = 0;
	for (size_t pos = 0; (pos = script.find("table ", pos)) != std::string::npos; pos++)
		tables++;
	CHECK(tables == 3);
}

TEST_CASE("statements render in nft's listing syntax")
{
	CHECK(statementText(JumpIfNotLocal{Family::ipv4, "X", {}}) ==
	      "meta nfproto ipv4 fib daddr type != local jump X");
	CHECK(statementText(JumpIfNotLocal{std::nullopt, "X", {}}) == "fib daddr type != local jump X");
	CHECK(statementText(JumpIfNotLocal{Family::ipv4, "X", "masq-src-v4"}) ==
	      "ip saddr @masq-src-v4 fib daddr type != local jump X");
	CHECK(statementText(JumpIfNotLocal{Family::ipv6, "X", "masq-src-v6"}) ==
	      "ip6 saddr @masq-src-v6 fib daddr type != local jump X");
	CHECK(statementText(ReturnIfDestinationInSet{Family::ipv6, "s"}) == "ip6 daddr @s return");
	CHECK(statementText(Masquerade{std::nullopt, std::nullopt, false}) == "masquerade");
	CHECK(statementText(Masquerade{PortRange{1024, 2047}, RandomSample{3000, 1024}, true}) ==
	      "meta l4proto { tcp, udp, sctp } numgen random mod 3000 < 1024 masquerade to :1024-2047 "
	      "fully-random");
	const Address v6a = parseAddress("2001:db8::1").value(), v6b = parseAddress("2001:db8::9").value();
	CHECK(statementText(SourceNat{Family::ipv6, {v6a, v6b}, PortRange{1024, 2047}, std::nullopt, false}) ==
	      "meta l4proto { tcp, udp, sctp } snat ip6 to [2001:db8::1]-[2001:db8::9]:1024-2047");
	CHECK(statementText(SourceNat{Family::ipv6, {v6a, v6a}, std::nullopt, std::nullopt, true, true}) ==
	      "meta nfproto ipv6 snat ip6 to 2001:db8::1 fully-random");
	CHECK(statementText(MatchUnlistedSource{Family::ipv4, "masq-src-v4", {}}) ==
	      "ip saddr != @masq-src-v4 fib daddr type != local");
	CHECK(statementText(ReturnIfOutputInterfaceInSet{"ifs", Family::ipv6}) == "meta nfproto ipv6 oifname @ifs return");
}
