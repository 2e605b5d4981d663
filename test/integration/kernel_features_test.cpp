// SPDX-License-Identifier: Apache-2.0
// The start path: a refused fully-random is left out once, for good; an absent table is created.
//
// The fault hook (NetlinkBackend::simulateKernelWithoutFullyRandom, or the agent's
// IP_MASQ_AGENT_TEST_FAULT=kernel-without-fully-random) makes the first commit carry a
// NAT flag the kernel does not know, which it refuses with EINVAL as a kernel that
// predates fully-random does. Runs in a private network namespace.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <regex>
#include <thread>

#include "agent_process.h"
#include "backend_support.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq;
using namespace ipmasq::test;

namespace {

const std::string kFault = "IP_MASQ_AGENT_TEST_FAULT=kernel-without-fully-random";
const std::string kDegradedWarning = "this kernel refuses masquerade fully-random";

std::string listing()
{
	std::string out;
	if (run("nft list table inet ip-masq-agent 2>/dev/null", &out) != 0)
		return {};
	return out;
}

// The kernel's handle of a table: a new one whenever the table is re-created. The
// kernel numbers tables in a namespace consecutively.
long tableHandle(const std::string &table = "ip-masq-agent")
{
	std::string out;
	if (run("nft -j list table inet " + table + " 2>/dev/null", &out) != 0)
		return -1;
	std::smatch m;
	if (!std::regex_search(out, m, std::regex("\"table\": \\{[^}]*\"handle\": ([0-9]+)")))
		return -1;
	return std::stol(m[1]);
}

// The handle of chain `chain` of the agent's table, or -1.
long chainHandle(const std::string &chain)
{
	std::string out;
	if (run("nft -a list chain inet ip-masq-agent " + chain + " 2>/dev/null", &out) != 0)
		return -1;
	std::smatch m;
	if (!std::regex_search(out, m, std::regex("chain " + chain + " \\{ # handle ([0-9]+)")))
		return -1;
	return std::stol(m[1]);
}

} // namespace

TEST_CASE("a kernel that refuses fully-random gets the table without it, and it verifies")
{
	auto backend = freshBackend();
	backend->simulateKernelWithoutFullyRandom();
	const Ruleset ruleset = buildRuleset(defaultConfig({}), RulesetOptions{});

	auto applied = backend->apply(ruleset);
	INFO((applied ? "" : applied.error().message));
	REQUIRE(applied);
	CHECK(backend->kernelLimits().noFullyRandom);
	const std::string table = listing();
	INFO(table);
	CHECK(table.find("masquerade") != std::string::npos);
	CHECK(table.find("fully-random") == std::string::npos);
	// Verification compares with what was really applied: the same, not "different".
	auto checked = backend->check(ruleset);
	REQUIRE(checked);
	CHECK(checked->verdict == TableCheck::same);

	// A later apply sends the adapted table at once (one commit, no refusal).
	auto again = backend->apply(ruleset);
	REQUIRE(again);
	CHECK(*again == backend->generation().value());
	CHECK(backend->check(ruleset).value().verdict == TableCheck::same);
}

TEST_CASE("a kernel with fully-random keeps it (the control of the fallback test)")
{
	auto backend = freshBackend();
	const Ruleset ruleset = buildRuleset(defaultConfig({}), RulesetOptions{});
	REQUIRE(backend->apply(ruleset));
	CHECK_FALSE(backend->kernelLimits().noFullyRandom);
	CHECK(listing().find("masquerade fully-random") != std::string::npos);
}

TEST_CASE("--once on a kernel without fully-random: a working table and one warning")
{
	runOrFail("nft flush ruleset");
	TempDir dir;
	dir.write("config", "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
	AgentProcess agent({"--once", "--config=" + dir.file("config")}, {kFault});
	REQUIRE(agent.wait() == 0);
	INFO(agent.log());
	CHECK(countOf(agent.log(), kDegradedWarning) == 1);
	CHECK(listing().find("198.51.100.0/24") != std::string::npos);
	CHECK(listing().find("masquerade") != std::string::npos);
	CHECK(listing().find("fully-random") == std::string::npos);

	// --cleanup is untouched by the fallback.
	AgentProcess cleanup({"--cleanup"}, {kFault});
	REQUIRE(cleanup.wait() == 0);
	CHECK(listing().empty());
}

TEST_CASE("the daemon on a kernel without fully-random warns once and never re-applies")
{
	runOrFail("nft flush ruleset");
	TempDir dir;
	dir.write("config", "resyncInterval: 1s\nnonMasqueradeCIDRs: [198.51.100.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config"), "-v=1"}, {kFault});
	const auto applied = waitFor([] { return tableHandle() >= 0; }, 5s);
	INFO(agent.log());
	REQUIRE(applied);
	const long handle = tableHandle();

	// Three resyncs (1 s apart), counted in the log: each verifies the table; a mismatch
	// would re-create it.
	requireWithin([&] { return countOf(agent.log(), "nothing changed") >= 3; }, kChangeSeen, agent,
		      "three resyncs that found nothing to change");
	CHECK(tableHandle() == handle);
	CHECK(listing().find("fully-random") == std::string::npos);
	CHECK(countOf(agent.log(), kDegradedWarning) == 1);
	CHECK(agent.stop(SIGTERM) == 0);
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}

TEST_CASE("an absent table is created without a delete; an existing one is replaced")
{
	auto backend = freshBackend();
	const Ruleset ruleset = buildRuleset(defaultConfig({}), RulesetOptions{});
	runOrFail("nft add table inet marker");
	const long marker = tableHandle("marker");
	REQUIRE(marker >= 0);
	runOrFail("nft delete table inet marker");

	// Created in one NEWTABLE: the next handle. The replace transaction (NEWTABLE,
	// DELTABLE, NEWTABLE) would have taken two, and made close() wait (see batch.h).
	REQUIRE(backend->apply(ruleset));
	CHECK(tableHandle() == marker + 1);
	CHECK(backend->check(ruleset).value().verdict == TableCheck::same);

	// Present: replaced around its counters (replacement.h): the same table, new chains.
	const long chain = chainHandle("postrouting");
	REQUIRE(chain >= 0);
	REQUIRE(backend->apply(ruleset));
	CHECK(tableHandle() == marker + 1);
	CHECK(chainHandle("postrouting") > chain);
	CHECK(backend->check(ruleset).value().verdict == TableCheck::same);
}
