// SPDX-License-Identifier: Apache-2.0
// The nf_tables change monitor against the real kernel, in a private network namespace.
#include <catch2/catch.hpp>

#include <poll.h>

#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/netlink/monitor.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "netns.h"

using namespace ipmasq;
using ipmasq::test::runOrFail;

namespace {

NftablesMonitor openMonitor()
{
	auto monitor = NftablesMonitor::open();
	INFO((monitor ? "" : monitor.error().message));
	REQUIRE(monitor);
	return std::move(*monitor);
}

bool drain(NftablesMonitor &monitor)
{
	auto changed = monitor.drain();
	INFO((changed ? "" : changed.error().message));
	REQUIRE(changed);
	return *changed;
}

bool readable(const NftablesMonitor &monitor)
{
	pollfd pfd{monitor.fd(), POLLIN, 0};
	return poll(&pfd, 1, 0) == 1;
}

} // namespace

TEST_CASE("drain() reports changes by anyone, once")
{
	runOrFail("nft flush ruleset");
	NftablesMonitor monitor = openMonitor();
	REQUIRE(monitor.fd() >= 0);
	CHECK_FALSE(readable(monitor));
	CHECK_FALSE(drain(monitor));

	runOrFail("nft add table inet x");
	CHECK(readable(monitor));
	CHECK(drain(monitor));
	CHECK_FALSE(readable(monitor));
	CHECK_FALSE(drain(monitor));

	runOrFail("nft delete table inet x");
	CHECK(drain(monitor));
	CHECK_FALSE(drain(monitor));
}

TEST_CASE("the agent's own commits can be ignored")
{
	runOrFail("nft flush ruleset");
	auto backend = NetlinkBackend::open();
	REQUIRE(backend);
	const Ruleset ruleset = buildRuleset(defaultConfig({}), RulesetOptions{});

	NftablesMonitor seesAll = openMonitor();
	NftablesMonitor ignoresAgent = openMonitor();
	ignoresAgent.ignoreChangesFrom((*backend)->portId());

	REQUIRE((*backend)->apply(ruleset));
	CHECK(drain(seesAll));
	CHECK_FALSE(drain(ignoresAgent));

	runOrFail("nft add element inet ip-masq-agent nomasq-v4 '{ 203.0.113.7 }'");
	CHECK(drain(seesAll));
	CHECK(drain(ignoresAgent));
}

TEST_CASE("lost notifications count as a change")
{
	runOrFail("nft flush ruleset");
	NftablesMonitor monitor = openMonitor();
	// One notification per element: far more than the default receive buffer holds,
	// so the kernel drops some and reports ENOBUFS.
	Config config;
	for (int i = 0; i < 20000; i++)
		config.nonMasqueradeCIDRs.push_back(
			parsePrefix("10." + std::to_string(i >> 8) + "." + std::to_string(i & 255) +
				    ".0/25")
				.value());
	auto backend = NetlinkBackend::open();
	REQUIRE(backend);
	REQUIRE((*backend)->apply(buildRuleset(config, RulesetOptions{})));

	CHECK(drain(monitor));
	CHECK_FALSE(drain(monitor));
}

TEST_CASE("watchOnlyTable: other tables' changes do not count, any change to ours does")
{
	runOrFail("nft flush ruleset");
	NftablesMonitor monitor = openMonitor();
	monitor.watchOnlyTable("ip-masq-agent");

	runOrFail("nft add table inet bystander && nft add chain inet bystander c && "
		  "nft add rule inet bystander c counter");
	runOrFail("nft add table ip ip-masq-agent"); // same name, another family
	CHECK_FALSE(drain(monitor));

	const struct {
		const char *what;
		const char *command;
	} ours[] = {
		{"table created", "nft add table inet ip-masq-agent"},
		{"set", "nft add set inet ip-masq-agent s '{ type ipv4_addr; flags interval; }'"},
		{"element", "nft add element inet ip-masq-agent s '{ 192.0.2.0/24 }'"},
		{"element deleted", "nft delete element inet ip-masq-agent s '{ 192.0.2.0/24 }'"},
		{"chain", "nft add chain inet ip-masq-agent c"},
		{"rule", "nft add rule inet ip-masq-agent c counter"},
		{"flush ruleset", "nft flush ruleset"},
	};
	for (const auto &change : ours) {
		INFO(change.what);
		runOrFail(change.command);
		CHECK(drain(monitor));
		CHECK_FALSE(drain(monitor));
	}
}

TEST_CASE("takeOtherTablesChanged: other ip, ip6 and inet tables, apart from ours, once")
{
	runOrFail("nft flush ruleset");
	NftablesMonitor monitor = openMonitor();
	monitor.watchOnlyTable("ip-masq-agent");
	CHECK_FALSE(monitor.takeOtherTablesChanged());

	for (const char *command :
	     {"iptables-nft -w -t nat -A POSTROUTING -s 198.51.100.0/24 -j MASQUERADE",
	      "nft add table ip6 other", "nft add table inet bystander"}) {
		INFO(command);
		runOrFail(command);
		CHECK_FALSE(drain(monitor)); // not ours
		CHECK(monitor.takeOtherTablesChanged());
		CHECK_FALSE(monitor.takeOtherTablesChanged());
	}
	// A bridge or arp table never sees routed IP packets at a nat hook.
	runOrFail("nft add table bridge b && nft add table arp a");
	CHECK_FALSE(drain(monitor));
	CHECK_FALSE(monitor.takeOtherTablesChanged());
	// Changes to our own table are ours only.
	runOrFail("nft add table inet ip-masq-agent");
	CHECK(drain(monitor));
	CHECK_FALSE(monitor.takeOtherTablesChanged());
}
