// SPDX-License-Identifier: Apache-2.0
// The dry-run renderer: golden outputs and the shape of the nft script.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ip-masq-agent/nft_text.h"
#include "ip-masq-agent/ruleset_mapping.h"
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

} // namespace

// To accept a deliberate change of output: UPDATE_GOLDEN=1 meson test -C build nft_text
TEST_CASE("rendered rulesets match the golden files")
{
	const bool update = std::getenv("UPDATE_GOLDEN") != nullptr;
	for (const test::RulesetCase &c : test::rulesetCases()) {
		auto ruleset = test::buildCase(c);
		INFO("case " << c.name << (ruleset ? "" : ": " + ruleset.error().message));
		REQUIRE(ruleset);
		const std::string rendered = renderNftScript(*ruleset);
		const std::string path = std::string(GOLDEN_DIR) + "/" + c.name + ".nft";
		if (update)
			std::ofstream(path) << rendered;
		const std::string golden = readFile(path);
		INFO("golden file " << path << " (set UPDATE_GOLDEN=1 to rewrite it)");
		CHECK(rendered == golden);
	}
}

TEST_CASE("rendering is deterministic and independent of input order")
{
	auto a = parseConfig("nonMasqueradeCIDRs: [192.168.0.0/16, 10.0.0.0/8, 10.1.0.0/16]\n", "a", {});
	auto b = parseConfig("nonMasqueradeCIDRs: [10.0.0.0/8, 192.168.0.0/16]\n", "b", {});
	REQUIRE(a);
	REQUIRE(b);
	const RulesetOptions options;
	CHECK(renderNftScript(buildRuleset(a->config, options)) ==
	      renderNftScript(buildRuleset(a->config, options)));
	CHECK(renderTable(buildRuleset(a->config, options)) ==
	      renderTable(buildRuleset(b->config, options)));
}

TEST_CASE("the script replaces only the agent's table, in one file")
{
	const Ruleset ruleset = buildRuleset(defaultConfig({}), RulesetOptions{});
	const std::string script = renderNftScript(ruleset, {"first", "", "second"});
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
	CHECK(renderStatement(JumpIfNotLocal{Family::ipv4, "X", {}}) ==
	      "meta nfproto ipv4 fib daddr type != local jump X");
	CHECK(renderStatement(JumpIfNotLocal{std::nullopt, "X", {}}) == "fib daddr type != local jump X");
	CHECK(renderStatement(JumpIfNotLocal{Family::ipv4, "X", "masq-src-v4"}) ==
	      "ip saddr @masq-src-v4 fib daddr type != local jump X");
	CHECK(renderStatement(JumpIfNotLocal{Family::ipv6, "X", "masq-src-v6"}) ==
	      "ip6 saddr @masq-src-v6 fib daddr type != local jump X");
	CHECK(renderStatement(ReturnIfDestinationInSet{Family::ipv6, "s"}) == "ip6 daddr @s return");
	CHECK(renderStatement(Masquerade{std::nullopt, std::nullopt, false}) == "masquerade");
	CHECK(renderStatement(Masquerade{PortRange{1024, 2047}, RandomSample{3000, 1024}, true}) ==
	      "meta l4proto { tcp, udp, sctp } numgen random mod 3000 < 1024 masquerade to :1024-2047 "
	      "fully-random");
}
