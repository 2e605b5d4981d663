// SPDX-License-Identifier: Apache-2.0
// From the config's content to the desired state: the one path every mode takes.
#include <catch2/catch.hpp>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "../common/rule_texts.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "../common/kernel_table.h"
#include "../common/ruleset_cases.h"

using namespace ipmasq;

namespace {

const ConfigLocation kDirectory = ConfigLocation::directory("/etc/config");

Ruleset rulesetOf(const std::string &text)
{
	return buildRuleset(parseConfig(text, "test", {}).value().config, {});
}

} // namespace

TEST_CASE("--config-dir content: the files merge; one bad file makes it an error naming that file")
{
	const auto two = [](const std::string &second) {
		return ConfigContent{{{"/etc/config/ip-masq-agent", "nonMasqueradeCIDRs: [10.0.0.0/8]\n"},
				      {"/etc/config/ip-masq-agent-reconciled", second}}};
	};
	auto merged = desiredFromContent(two("nonMasqueradeCIDRs: [192.0.2.0/24]\nresyncInterval: 5m\n"),
					 kDirectory, {}, {}, NodeAddresses{});
	REQUIRE(merged);
	CHECK(merged->ruleset == rulesetOf("nonMasqueradeCIDRs: [10.0.0.0/8, 192.0.2.0/24]\n"));
	CHECK(merged->resyncInterval == std::chrono::minutes(5));
	CHECK(merged->origin == "/etc/config (ip-masq-agent, ip-masq-agent-reconciled)");

	auto bad = desiredFromContent(two("nonMasqueradeCIDRs: [192.0.2.1/24]\n"), kDirectory, {}, {},
				      NodeAddresses{});
	REQUIRE_FALSE(bad);
	CHECK_THAT(bad.error().message, Catch::StartsWith("/etc/config/ip-masq-agent-reconciled"));
}

TEST_CASE("no file: the built-in defaults, and the origin says why")
{
	auto desired = desiredFromContent(ConfigContent::absent(),
					  ConfigLocation::file("/etc/config/ip-masq-agent"), {}, {},
					  NodeAddresses{});
	REQUIRE(desired);
	CHECK(desired->ruleset == buildRuleset(defaultConfig({}), {}));
	CHECK(desired->resyncInterval == kDefaultResyncInterval);
	CHECK_THAT(desired->origin, Catch::StartsWith("(built-in defaults"));
	CHECK(desired->warnings.empty());
}

TEST_CASE("the warnings and the summary of the config travel with the desired state")
{
	auto desired = desiredFromContent(
		ConfigContent::single("/etc/config/ip-masq-agent",
				      "nonMasqueradeCIDRs: [10.0.0.0/8]\nnoSuchKey: 1\n"),
		ConfigLocation::file("/etc/config/ip-masq-agent"), {}, {}, NodeAddresses{});
	REQUIRE(desired);
	REQUIRE(desired->warnings.size() == 1);
	CHECK_THAT(desired->warnings.front(), Catch::Contains("noSuchKey"));
	CHECK_THAT(desired->summary, Catch::StartsWith("nonMasqueradeCIDRs=[10.0.0.0/8]"));
}

// The forward mapping (buildRuleset) and the reverse one (adoption's) are pinned
// together: every shared case's ruleset is rebuilt, exactly, from its own sets.
TEST_CASE("round trip: every ruleset case is rebuilt from its own sets")
{
	for (const test::RulesetCase &c : test::rulesetCases()) {
		INFO("case " << c.name);
		auto built = test::buildCaseWithOptions(c);
		REQUIRE(built);
		const auto rebuilt = rulesetFromKernel(built->options, test::kernelTableOf(built->ruleset));
		if (!c.adoptable) {
			// A guard's limits and mode are in its rules only: such a table is never
			// adopted (left as it is until the config is good).
			CHECK_FALSE(rebuilt);
			continue;
		}
		REQUIRE(rebuilt);
		CHECK(*rebuilt == built->ruleset);
	}
}

TEST_CASE("reverse mapping: sets that no config makes with these options give no candidate")
{
	const test::RulesetCase ipv6{"ipv6", "nonMasqueradeCIDRs: [10.0.0.0/8, \"fd00::/8\"]\n",
				     {"--enable-ipv6"}};
	auto built = test::buildCaseWithOptions(ipv6);
	REQUIRE(built);
	const std::vector<AddressSet> &sets = built->ruleset.sets;
	const auto reverse = [](const RulesetOptions &options, std::vector<AddressSet> kernelSets) {
		return rulesetFromKernel(options, KernelTable{std::move(kernelSets), {}});
	};

	// The IPv6 set without --enable-ipv6: one set too many.
	CHECK_FALSE(reverse(RulesetOptions{}, sets));
	// A set missing.
	CHECK_FALSE(reverse(built->options, {sets.front()}));
	// A comment the agent does not write (edited by hand, or another version's).
	std::vector<AddressSet> edited = sets;
	edited.front().comment += " (edited)";
	CHECK_FALSE(reverse(built->options, edited));
	// A set of another name.
	edited = sets;
	edited.front().name = "nomasq-extra";
	CHECK_FALSE(reverse(built->options, edited));
	// The same sets with other elements: the same ruleset, with those elements.
	edited = sets;
	edited.front().elements = IntervalSet::fromPrefixes(Family::ipv4, {builtinPrefix("192.0.2.0/24")});
	auto candidate = reverse(built->options, edited);
	REQUIRE(candidate);
	CHECK(candidate->sets == edited);
	CHECK(candidate->chains == built->ruleset.chains);
}

TEST_CASE("the discovered-* sets: a set per source the section names, read back per source as prefixes; "
	  "adoption rebuilds them, and one the agent did not write gives no candidate")
{
	const test::RulesetCase discovery{"discovery", "nonMasqueradeDiscovery:\n"
						       "  within: [198.18.0.0/15]\n"
						       "  routeProtocols: [bird]\n"
						       "  cniConfDir: /etc/cni/net.d\n", {}};
	auto built = test::buildCaseWithOptions(discovery);
	REQUIRE(built);
	std::vector<std::string> names;
	for (const AddressSet &set : built->ruleset.sets)
		names.push_back(set.name);
	CHECK(names == std::vector<std::string>{"nomasq-v4", "discovered-routes-v4", "discovered-cni-v4"});
	// No rule uses them.
	for (const Chain &chain : built->ruleset.chains)
		for (const Rule &rule : chain.rules)
			CHECK_THAT(rule.comment, !Catch::Contains("discovered"));

	std::vector<AddressSet> sets = built->ruleset.sets;
	// Two adjacent /26 of the routes, merged by the set, and a CNI range.
	sets[1].elements = IntervalSet::fromPrefixes(
		Family::ipv4, {builtinPrefix("198.18.1.0/26"), builtinPrefix("198.18.1.64/26"), builtinPrefix("198.18.2.64/26"),
			       builtinPrefix("198.18.2.128/25")});
	sets[2].elements = IntervalSet::fromPrefixes(Family::ipv4, {builtinPrefix("198.18.9.0/24")});
	const KernelTable kernel{sets, {}};
	const RangesBySource kept = discoveredInKernel(kernel);
	const auto texts = [](const std::vector<Prefix> &prefixes) {
		std::vector<std::string> out;
		for (const Prefix &prefix : prefixes)
			out.push_back(prefix.toString());
		return out;
	};
	using Strings = std::vector<std::string>;
	CHECK(texts(kept.of(DiscoverySource::routes)) == Strings{"198.18.1.0/25", "198.18.2.64/26", "198.18.2.128/25"});
	CHECK(kept.of(DiscoverySource::flannel).empty());
	CHECK(texts(kept.of(DiscoverySource::cni)) == Strings{"198.18.9.0/24"});
	const auto adopted = rulesetFromKernel(built->options, kernel);
	REQUIRE(adopted);
	CHECK(adopted->sets == sets);

	// A set of that name whose comment the agent does not write is not its memory.
	sets[1].comment = "someone else's";
	CHECK(discoveredInKernel(KernelTable{sets, {}}).of(DiscoverySource::routes).empty());
	CHECK_FALSE(rulesetFromKernel(built->options, KernelTable{sets, {}}));
}

namespace {

NodeAddress nodeAddress(const char *text, const char *interface)
{
	auto address = parseAddress(text);
	REQUIRE(address);
	return NodeAddress{*address, 24, interface, 2, false, false, false, false, true};
}

// On a node with these addresses (nullopt: not known, never read).
Result<DesiredState> desiredOn(const std::string &text,
			       const std::optional<std::vector<NodeAddress>> &node)
{
	return desiredFromContent(ConfigContent::single("/etc/config/ip-masq-agent", text),
				  ConfigLocation::file("/etc/config/ip-masq-agent"), {}, {},
				  node ? NodeAddresses{*node, true} : NodeAddresses{});
}

} // namespace

TEST_CASE("an outputAddress subnet: this node's address in it, or none and why")
{
	const std::string config = "outputAddress: 203.0.113.0/24\n";
	const std::vector<NodeAddress> node{nodeAddress("198.51.100.4", "eth0"),
					    nodeAddress("203.0.113.9", "eth1"),
					    nodeAddress("203.0.113.5", "eth1")};
	auto desired = desiredOn(config, node);
	REQUIRE(desired);
	REQUIRE(desired->subnets.size() == 1);
	CHECK(desired->subnets[0].subnet ==
	      "203.0.113.0/24 (outputAddress, /etc/config/ip-masq-agent:1)");
	CHECK(desired->subnets[0].address == parseAddress("203.0.113.5").value()); // the lowest
	CHECK_THAT(test::ruleTexts(desired->ruleset, desired->ruleset.chains.back().name).back(),
		   Catch::StartsWith("snat ip to 203.0.113.5"));

	// None of the node's addresses in it (or none known): masquerade, and the choice says so.
	for (const std::optional<std::vector<NodeAddress>> &elsewhere :
	     {std::optional(std::vector<NodeAddress>{node[0]}), std::optional<std::vector<NodeAddress>>()}) {
		auto fallback = desiredOn(config, elsewhere);
		REQUIRE(fallback);
		REQUIRE(fallback->subnets.size() == 1);
		CHECK_FALSE(fallback->subnets[0].address);
		CHECK(test::ruleTexts(fallback->ruleset, fallback->ruleset.chains.back().name).back() ==
		      "masquerade fully-random");
	}
	CHECK(chooseSubnetAddresses(loadConfigContent(ConfigContent::single("f", config), {}).value(),
				    NodeAddresses{node, true})
		      .ipv4 == parseAddress("203.0.113.5").value());
}

TEST_CASE("an outputAddress that is not this node's is used, with a warning that says why")
{
	const std::vector<NodeAddress> node{nodeAddress("203.0.113.7", "eth0")};
	auto own = desiredOn("outputAddress: 203.0.113.7\n", node);
	REQUIRE(own);
	CHECK(own->warnings.empty());
	auto foreign = desiredOn("outputAddress: 203.0.113.8-203.0.113.9\n", node);
	REQUIRE(foreign);
	REQUIRE(foreign->warnings.size() == 1);
	CHECK_THAT(foreign->warnings[0],
		   Catch::StartsWith("/etc/config/ip-masq-agent:1: outputAddress: 203.0.113.8-203.0.113.9 "
				     "is not an address of this node"));
	// Unknown addresses: no warning either way.
	auto unknown = desiredOn("outputAddress: 203.0.113.8\n", std::nullopt);
	REQUIRE(unknown);
	CHECK(unknown->warnings.empty());
}

TEST_CASE("--once and --dry-run: a failed read of the node's addresses is an error for a config "
	  "with a subnet, never \"no address\"")
{
	const auto loaded = [](const std::string &text) {
		auto config = loadConfigContent(ConfigContent::single("/etc/config/ip-masq-agent", text), {});
		REQUIRE(config);
		return std::move(*config);
	};
	const Result<std::vector<NodeAddress>> failed =
		fail("cannot read the node's addresses: they changed during each of 5 reads", EINTR);
	NodeAddress own;
	own.address = parseAddress("198.18.1.5").value();
	own.prefixLength = 24;
	own.ifindex = 2;
	const Result<std::vector<NodeAddress>> read = std::vector<NodeAddress>{own};

	const LoadedConfig subnet = loaded("outputAddress: 198.18.1.0/24\n");
	auto refused = addressesForConfig(subnet, failed);
	REQUIRE_FALSE(refused);
	CHECK(refused.error().errnum == EINTR);
	CHECK(refused.error().message ==
	      "cannot read the node's addresses: they changed during each of 5 reads: the "
	      "outputAddress subnet (198.18.1.0/24) cannot be chosen without them (a read that "
	      "failed is not \"no address\"); nothing is applied, try again");
	auto given = addressesForConfig(subnet, read);
	REQUIRE(given);
	REQUIRE(given->complete);
	CHECK(given->addresses.size() == 1);
	CHECK(chooseSubnetAddresses(subnet, *given).ipv4 == own.address);

	// Without a subnet the addresses only serve a warning: the config goes on without them.
	auto without = addressesForConfig(loaded("outputAddress: 198.18.1.7\n"), failed);
	REQUIRE(without);
	CHECK_FALSE(without->known());
}
