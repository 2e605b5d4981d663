// SPDX-License-Identifier: Apache-2.0
// The discovered-range model over a fake clock: within, hold-down (not at start-up), the
// bound, origins, inputs that are waited for or stale, element diffs; what the agent's
// table held at a restart, the section's edits, names that are gone.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "../common/prefixes.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/node/discovered_ranges.h"
#include "ip-masq-agent/node/pod_network.h"
#include "ip-masq-agent/config/policy.h"

using namespace ipmasq;
using namespace std::chrono_literals;
using test::prefix;
using test::texts;
using Clock = DiscoveredRanges::Clock;

namespace {

const Clock::time_point t0{std::chrono::hours(1000)};
const std::string kRoutes = "routes";
const std::string kEnv = "/run/flannel/subnet.env";


Sighting route(const char *text, const char *via = "192.0.2.2")
{
	return Sighting{prefix(text), fmt::format("route {} proto bird via {} dev tunl0", text, via)};
}

DiscoveredRanges::Settings settings(Duration holdDown = 30s, bool ipv6 = false)
{
	DiscoveredRanges::Settings s;
	s.within = {prefix("10.244.0.0/16"), prefix("fd00:10:244::/56")};
	s.holdDown = holdDown;
	s.ipv6 = ipv6;
	return s;
}

using Strings = std::vector<std::string>;

} // namespace

TEST_CASE("model: a prefix inside within comes in as an element added, with its origin")
{
	DiscoveredRanges model(settings());
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	const DiscoveryChanges changes = model.takeChanges(t0);
	CHECK(texts(changes.added) == Strings{"10.244.1.0/26"});
	CHECK(changes.removed.empty());
	CHECK(texts(model.inForce()) == Strings{"10.244.1.0/26"});
	const auto ranges = model.ranges();
	REQUIRE(ranges.size() == 1);
	REQUIRE(ranges[0].origins.size() == 1);
	CHECK(ranges[0].origins[0].source == DiscoverySource::routes);
	CHECK(ranges[0].origins[0].text == "route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0");
	CHECK_FALSE(ranges[0].leavesAt);
	CHECK(model.takeChanges(t0 + 1s).empty()); // nothing new
	CHECK(model.stats().changes == 1);
	CHECK(model.stats().prefixesPerSource[0] == 1);
}

TEST_CASE("model: a prefix outside within is ignored, said and counted once")
{
	DiscoveredRanges model(settings());
	const Sighting services{prefix("10.96.0.0/12"), "route blackhole 10.96.0.0/12 proto bird"};
	model.add(DiscoverySource::routes, kRoutes, services);
	// Partly inside is outside: only prefixes wholly inside count.
	model.add(DiscoverySource::routes, kRoutes, route("10.244.0.0/15"));
	model.add(DiscoverySource::routes, kRoutes, services);
	model.replace(DiscoverySource::flannel, kEnv,
		      {Sighting{prefix("10.96.0.0/12"), "FLANNEL_NETWORK in " + kEnv}}, t0);
	CHECK(model.takeChanges(t0).empty());
	CHECK(model.inForce().empty());
	CHECK(model.stats().outsideWithin == 2);
	const auto messages = model.takeMessages();
	REQUIRE(messages.size() == 2);
	CHECK(messages[0].warning);
	CHECK(messages[0].text == "nonMasqueradeDiscovery: 10.96.0.0/12 (route blackhole 10.96.0.0/12 "
				  "proto bird, from routes) is not inside within "
				  "[10.244.0.0/16,fd00:10:244::/56]: ignored (said once per prefix)");
	CHECK_THAT(messages[1].text, Catch::StartsWith("nonMasqueradeDiscovery: 10.244.0.0/15 ("));
}

TEST_CASE("model: past the remembered prefixes outside within, they are counted, not said")
{
	DiscoveredRanges model(settings());
	for (size_t i = 0; i <= kMaxRememberedOutside + 1; i++) {
		const std::string text = fmt::format("192.0.{}.{}/32", i / 256, i % 256);
		model.noteOutside(DiscoverySource::routes, Sighting{prefix(text.c_str()), "route"});
	}
	CHECK(model.stats().outsideWithin == kMaxRememberedOutside + 2);
	const auto messages = model.takeMessages();
	REQUIRE(messages.size() == kMaxRememberedOutside + 1);
	CHECK(messages.back().text == "nonMasqueradeDiscovery: more than 4096 prefixes outside within: no "
				      "longer said one by one, only counted");
}

TEST_CASE("model: IPv6 prefixes count only with IPv6 enabled")
{
	const Sighting v6{prefix("fd00:10:244::/56"), "FLANNEL_IPV6_NETWORK in " + kEnv};
	DiscoveredRanges off(settings());
	off.replace(DiscoverySource::flannel, kEnv, {v6}, t0);
	CHECK(off.takeChanges(t0).empty());
	CHECK(off.stats().outsideWithin == 0);
	CHECK(off.takeMessages().empty());
	DiscoveredRanges on(settings(30s, true));
	on.replace(DiscoverySource::flannel, kEnv, {v6}, t0);
	CHECK(texts(on.takeChanges(t0).added) == Strings{"fd00:10:244::/56"});
}

TEST_CASE("model: a withdrawn prefix leaves after the hold-down, not before")
{
	DiscoveredRanges model(settings(30s));
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	REQUIRE(model.takeChanges(t0).added.size() == 1);
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"), t0 + 10s);
	CHECK(model.takeChanges(t0 + 10s).empty());
	CHECK(model.takeChanges(t0 + 39s).empty());
	REQUIRE(model.nextWake() == t0 + 40s);
	const auto held = model.ranges();
	REQUIRE(held.size() == 1);
	CHECK(held[0].origins.empty());
	CHECK(held[0].leavesAt == t0 + 40s);
	CHECK(model.stats().heldDown == 1);
	CHECK(model.stats().prefixesPerSource[0] == 0);
	CHECK(texts(model.inForce()) == Strings{"10.244.1.0/26"});
	CHECK(texts(model.takeChanges(t0 + 40s).removed) == Strings{"10.244.1.0/26"});
	CHECK(model.inForce().empty());
	CHECK_FALSE(model.nextWake());
	CHECK(model.stats().changes == 2);
}

TEST_CASE("model: a flap within the hold-down changes nothing")
{
	DiscoveredRanges model(settings(30s));
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	model.takeChanges(t0);
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"), t0 + 1s);
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26", "192.0.2.3")); // another next hop
	CHECK(model.takeChanges(t0 + 2s).empty());
	CHECK_FALSE(model.nextWake());
	CHECK(model.takeChanges(t0 + 60s).empty());
	CHECK(texts(model.inForce()) == Strings{"10.244.1.0/26"});
	CHECK(model.stats().changes == 1);
}

TEST_CASE("model: no hold-down at start-up: the first read is the truth")
{
	DiscoveredRanges model(settings(30s));
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"), t0);
	// Never in force: it is not held, and no element is added and removed.
	CHECK(model.takeChanges(t0).empty());
	CHECK_FALSE(model.nextWake());
	CHECK(model.ranges().empty());
}

TEST_CASE("model: holdDown 0s removes at once")
{
	DiscoveredRanges model(settings(0s));
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	model.takeChanges(t0);
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"), t0 + 1s);
	CHECK(texts(model.takeChanges(t0 + 1s).removed) == Strings{"10.244.1.0/26"});
}

TEST_CASE("model: a prefix stays while any origin gives it; every origin is listed")
{
	DiscoveredRanges model(settings(0s));
	model.replace(DiscoverySource::flannel, kEnv,
		      {Sighting{prefix("10.244.0.0/16"), "FLANNEL_NETWORK in " + kEnv}}, t0);
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26", "192.0.2.3"));
	CHECK(texts(model.takeChanges(t0).added) == Strings{"10.244.0.0/16", "10.244.1.0/26"});
	auto stats = model.stats();
	CHECK(stats.prefixesPerSource[static_cast<size_t>(DiscoverySource::routes)] == 1);
	CHECK(stats.prefixesPerSource[static_cast<size_t>(DiscoverySource::flannel)] == 1);
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"), t0 + 1s);
	CHECK(model.takeChanges(t0 + 1s).empty());

	auto address = parseAddress("10.244.1.9");
	REQUIRE(address);
	const auto covering = model.covering(*address);
	REQUIRE(covering.size() == 2);
	CHECK(covering[0].prefix.toString() == "10.244.0.0/16");
	CHECK(covering[0].origins[0].text == "FLANNEL_NETWORK in /run/flannel/subnet.env");
	CHECK(covering[1].origins.size() == 1);
	CHECK(covering[1].origins[0].text == "route 10.244.1.0/26 proto bird via 192.0.2.3 dev tunl0");
	auto elsewhere = parseAddress("10.244.2.9");
	REQUIRE(elsewhere);
	CHECK(model.covering(*elsewhere).size() == 1);
}

TEST_CASE("model: a file rewritten: what it no longer says is withdrawn, what it says now comes")
{
	DiscoveredRanges model(settings(30s));
	model.expect(DiscoverySource::flannel, kEnv);
	CHECK_FALSE(model.started());
	CHECK(model.inputs()[0].state == DiscoveryInput::State::pending);
	model.replace(DiscoverySource::flannel, kEnv,
		      {Sighting{prefix("10.244.0.0/16"), "FLANNEL_NETWORK in " + kEnv}}, t0);
	CHECK(model.started());
	CHECK(model.takeChanges(t0).added.size() == 1);
	// The same content again: nothing.
	model.replace(DiscoverySource::flannel, kEnv,
		      {Sighting{prefix("10.244.0.0/16"), "FLANNEL_NETWORK in " + kEnv}}, t0 + 1s);
	CHECK(model.takeChanges(t0 + 1s).empty());
	model.replace(DiscoverySource::flannel, kEnv,
		      {Sighting{prefix("10.244.128.0/17"), "FLANNEL_NETWORK in " + kEnv}}, t0 + 2s);
	const DiscoveryChanges changes = model.takeChanges(t0 + 2s);
	CHECK(texts(changes.added) == Strings{"10.244.128.0/17"});
	CHECK(changes.removed.empty()); // held
	CHECK(texts(model.takeChanges(t0 + 32s).removed) == Strings{"10.244.0.0/16"});
	CHECK(model.inputs()[0].state == DiscoveryInput::State::current);
	CHECK(model.inputs()[0].origins == 1);
}

TEST_CASE("model: a failed read keeps what the input said, and says so once")
{
	DiscoveredRanges model(settings(0s));
	model.replace(DiscoverySource::flannel, kEnv,
		      {Sighting{prefix("10.244.0.0/16"), "FLANNEL_NETWORK in " + kEnv}}, t0);
	model.takeChanges(t0);
	model.markStale(DiscoverySource::flannel, kEnv, "/run/flannel/subnet.env:1: FLANNEL_NETWORK is empty");
	model.markStale(DiscoverySource::flannel, kEnv, "/run/flannel/subnet.env:1: FLANNEL_NETWORK is empty");
	CHECK(model.takeChanges(t0 + 1h).empty());
	CHECK(texts(model.inForce()) == Strings{"10.244.0.0/16"});
	CHECK(model.inputs()[0].state == DiscoveryInput::State::stale);
	model.replace(DiscoverySource::flannel, kEnv,
		      {Sighting{prefix("10.244.0.0/16"), "FLANNEL_NETWORK in " + kEnv}}, t0 + 2h);
	const auto messages = model.takeMessages();
	REQUIRE(messages.size() == 2);
	CHECK(messages[0].warning);
	CHECK(messages[0].text == "nonMasqueradeDiscovery: /run/flannel/subnet.env (flannelSubnetEnv): "
				  "/run/flannel/subnet.env:1: FLANNEL_NETWORK is empty; what it gave before "
				  "(1 range) stays in force until it reads again");
	CHECK_FALSE(messages[1].warning);
	CHECK(messages[1].text == "nonMasqueradeDiscovery: /run/flannel/subnet.env (flannelSubnetEnv): "
				  "read again, 1 range");
}

TEST_CASE("model: a file that does not exist yet is waited for, said once, and taken when it comes")
{
	DiscoveredRanges model(settings());
	model.expect(DiscoverySource::flannel, kEnv);
	model.markAbsent(DiscoverySource::flannel, kEnv, t0);
	model.markAbsent(DiscoverySource::flannel, kEnv, t0 + 1s);
	CHECK(model.started());
	CHECK(model.inputs()[0].state == DiscoveryInput::State::absent);
	model.replace(DiscoverySource::flannel, kEnv,
		      {Sighting{prefix("10.244.0.0/16"), "FLANNEL_NETWORK in " + kEnv}}, t0 + 5s);
	CHECK(model.takeChanges(t0 + 5s).added.size() == 1);
	const auto messages = model.takeMessages();
	REQUIRE(messages.size() == 2);
	CHECK(messages[0].text == "nonMasqueradeDiscovery: /run/flannel/subnet.env (flannelSubnetEnv): "
				  "does not exist (yet): waiting for it");
	CHECK(messages[1].text == "nonMasqueradeDiscovery: /run/flannel/subnet.env (flannelSubnetEnv): "
				  "there now, 1 range");
}

TEST_CASE("model: past the bound the last set within it stays, and the model says so")
{
	DiscoveredRanges::Settings s = settings(0s);
	s.maxPrefixes = 3;
	DiscoveredRanges model(s);
	for (const char *p : {"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"})
		model.add(DiscoverySource::routes, kRoutes, route(p));
	CHECK(model.takeChanges(t0).added.size() == 3);
	model.add(DiscoverySource::routes, kRoutes, route("10.244.4.0/24"));
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/24"), t0);
	model.add(DiscoverySource::routes, kRoutes, route("10.244.5.0/24"));
	CHECK(model.takeChanges(t0).empty());
	CHECK(model.stats().overBound);
	CHECK(texts(model.inForce()) == Strings{"10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24"});
	auto messages = model.takeMessages();
	REQUIRE(messages.size() == 1);
	CHECK(messages[0].text == "nonMasqueradeDiscovery: 4 prefixes discovered, more than the 3 the agent "
				  "takes: the 3 in force stay, and no discovered change is applied until "
				  "the sources give at most 3; narrow the sources or within");
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.2.0/24"), t0 + 1s);
	const DiscoveryChanges changes = model.takeChanges(t0 + 1s);
	CHECK(texts(changes.added) == Strings{"10.244.4.0/24", "10.244.5.0/24"});
	CHECK(texts(changes.removed) == Strings{"10.244.1.0/24", "10.244.2.0/24"});
	CHECK_FALSE(model.stats().overBound);
	messages = model.takeMessages();
	REQUIRE(messages.size() == 1);
	CHECK(messages[0].text == "nonMasqueradeDiscovery: 3 prefixes discovered, within the bound of 3 "
				  "again: changes are applied");
}

TEST_CASE("model: removing what was never given, or adding twice, changes nothing")
{
	DiscoveredRanges model(settings(0s));
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"), t0);
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	CHECK(model.takeChanges(t0).added.size() == 1);
	CHECK(model.inputs()[0].origins == 1);
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"), t0);
	CHECK(model.takeChanges(t0).removed.size() == 1);
	model.remove(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"), t0);
	CHECK(model.takeChanges(t0).empty());
	CHECK(model.stats().changes == 2);
}

TEST_CASE("model: the route source's changes, in order, with their origins")
{
	DiscoveredRanges model(settings(0s));
	model.expect(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
	auto gateway = parseAddress("192.0.2.2");
	REQUIRE(gateway);
	SelectedRoute bird{prefix("10.244.1.0/26"), 0, 0, RouteType::unicast, RouteProtocol{12},
			   RouteNextHop{*gateway, 7}, "tunl0"};
	RouteUpdate update;
	update.changes = {RouteChange{true, bird}, RouteChange{false, bird}, RouteChange{true, bird}};
	SelectedRoute services = bird;
	services.destination = prefix("10.96.0.0/12");
	update.outside = {services};
	model.applyRoutes(update, t0);
	model.markCurrent(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
	CHECK(model.started());
	CHECK(texts(model.takeChanges(t0).added) == Strings{"10.244.1.0/26"});
	CHECK(model.ranges()[0].origins[0].text == "route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0");
	CHECK(model.stats().outsideWithin == 1);
}

TEST_CASE("putDiscovered: the ranges in force join nonMasqueradeCIDRs, each with its origins, in place of "
	  "the ones put before, and --explain names them")
{
	DiscoveredRanges model(settings(30s));
	model.expect(DiscoverySource::routes, kRoutes);
	model.expect(DiscoverySource::flannel, kEnv);
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26"));
	model.add(DiscoverySource::routes, kRoutes, route("10.244.1.0/26", "192.0.2.3"));
	model.replace(DiscoverySource::flannel, kEnv, {Sighting{prefix("10.244.0.0/16"), "FLANNEL_NETWORK in " + kEnv + ":1"}},
		      t0);
	model.markCurrent(DiscoverySource::routes, kRoutes);
	(void)model.takeChanges(t0);

	LoadedConfig loaded;
	loaded.config.nonMasqueradeCIDRs = {prefix("192.168.0.0/16")};
	loaded.config.nonMasqueradeCIDRsGiven = true;
	const LoadedConfig given = loaded;
	putDiscovered(loaded.config, model);
	const Config &config = loaded.config;
	REQUIRE(config.nonMasqueradeCIDRs.size() == 3);
	CHECK(config.nonMasqueradeCIDRs[0] == prefix("192.168.0.0/16"));
	CHECK_FALSE(config.nonMasqueradeCIDRs[0].origin.discovered());
	CHECK(texts({config.nonMasqueradeCIDRs[1], config.nonMasqueradeCIDRs[2]}) ==
	      Strings{"10.244.0.0/16", "10.244.1.0/26"});
	CHECK(describeOrigin(config, config.nonMasqueradeCIDRs[2].origin) ==
	      "route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0; route 10.244.1.0/26 proto bird via 192.0.2.3 "
	      "dev tunl0");
	// --explain's words: the deciding entry, the longest that holds the address.
	const auto address = parseAddress("10.244.1.7");
	REQUIRE(address);
	CHECK(describeDecidingEntry(config, explainDecision(config, *address)) ==
	      "discovered 10.244.1.0/26 (route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0; route 10.244.1.0/26 "
	      "proto bird via 192.0.2.3 dev tunl0)");
	// Put again, the ranges replace the ones before: a range that left is gone, none is
	// there twice, and the operator's entry stays.
	model.replace(DiscoverySource::flannel, kEnv, {}, t0 + 1s);
	REQUIRE(texts(model.takeChanges(t0 + 31s).removed) == Strings{"10.244.0.0/16"}); // after the hold-down
	putDiscovered(loaded.config, model);
	CHECK(texts(config.nonMasqueradeCIDRs) == Strings{"192.168.0.0/16", "10.244.1.0/26"});
	REQUIRE(config.discoveredOrigins.size() == 1);
	CHECK(describeOrigin(config, config.nonMasqueradeCIDRs[1].origin) ==
	      "route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0; route 10.244.1.0/26 proto bird via 192.0.2.3 "
	      "dev tunl0");
	// Without the section's ranges the config is as it was.
	putDiscovered(loaded.config, DiscoveredRanges(settings()));
	CHECK(loaded.config == given.config);
	CHECK(loaded.config.discoveredOrigins.empty());
}

namespace {

const std::string kKept = "in the agent's table when it started";

std::vector<Prefix> prefixes(std::initializer_list<const char *> list)
{
	std::vector<Prefix> out;
	for (const char *text : list)
		out.push_back(prefix(text));
	return out;
}

// These cases' pod network, in the documentation ranges.
DiscoveredRanges::Settings docSettings(Duration holdDown = 30s)
{
	DiscoveredRanges::Settings s;
	s.within = {prefix("198.18.0.0/16"), prefix("2001:db8::/32")};
	s.holdDown = holdDown;
	return s;
}

// The one message the model has to say.
std::string onlyMessage(DiscoveredRanges &model)
{
	const auto messages = model.takeMessages();
	REQUIRE(messages.size() == 1);
	return messages[0].text;
}

Sighting flannel(const char *text)
{
	return Sighting{prefix(text), "FLANNEL_NETWORK in " + kEnv + ":1"};
}

} // namespace

TEST_CASE("restart: what the table held is in force at once; a source that reads keeps what it gives, and "
	  "what it no longer gives leaves after a hold-down from the restart")
{
	DiscoveredRanges model(docSettings(30s));
	model.keep(DiscoverySource::flannel, prefixes({"198.18.0.0/16"}), kKept);
	model.keep(DiscoverySource::routes, prefixes({"198.18.1.0/26", "198.18.2.0/26"}), kKept);
	CHECK(model.kept(DiscoverySource::routes) == 2);
	// In force before any read: the first desired state holds them.
	CHECK(texts(model.inForce()) == Strings{"198.18.0.0/16", "198.18.1.0/26", "198.18.2.0/26"});
	CHECK(texts(model.inForceOf(DiscoverySource::routes)) == Strings{"198.18.1.0/26", "198.18.2.0/26"});
	CHECK(texts(model.inForceOf(DiscoverySource::flannel)) == Strings{"198.18.0.0/16"});
	CHECK(model.stats().prefixesPerSource[0] == 2);

	// The routes read (bird has installed one of the two): the other is held from now.
	model.add(DiscoverySource::routes, kRoutes, route("198.18.1.0/26"));
	model.markCurrent(DiscoverySource::routes, kRoutes);
	model.releaseKept(DiscoverySource::routes, t0);
	CHECK(model.kept(DiscoverySource::routes) == 0);
	CHECK(model.takeChanges(t0).empty()); // nothing changes for traffic
	CHECK(model.nextWake() == t0 + 30s);
	CHECK(texts(model.inForceOf(DiscoverySource::routes)) == Strings{"198.18.1.0/26", "198.18.2.0/26"});
	CHECK(model.stats().heldDown == 1);
	// bird installs it within the hold-down: it never leaves.
	model.add(DiscoverySource::routes, kRoutes, route("198.18.2.0/26"));
	CHECK(model.takeChanges(t0 + 31s).empty());
	CHECK(texts(model.inForce()) == Strings{"198.18.0.0/16", "198.18.1.0/26", "198.18.2.0/26"});
	// Withdrawn again: the hold-down as always.
	model.remove(DiscoverySource::routes, kRoutes, route("198.18.2.0/26"), t0 + 40s);
	CHECK(model.takeChanges(t0 + 69s).empty());
	CHECK(texts(model.takeChanges(t0 + 70s).removed) == Strings{"198.18.2.0/26"});
	// Flannel never read: its kept range stays whatever the time.
	CHECK(texts(model.inForceOf(DiscoverySource::flannel)) == Strings{"198.18.0.0/16"});
	CHECK(onlyMessage(model) == "nonMasqueradeDiscovery: routes: of what the agent's table held for it when the "
				     "agent started (2 ranges), those not given now (1 range) leave after the "
				     "hold-down (30s); the rest is what it gives now");
}

TEST_CASE("restart: an empty reading (bird not started yet) holds every kept range down, from the restart")
{
	DiscoveredRanges model(docSettings(30s));
	model.keep(DiscoverySource::routes, prefixes({"198.18.1.0/26"}), kKept);
	model.markCurrent(DiscoverySource::routes, kRoutes);
	model.releaseKept(DiscoverySource::routes, t0 + 5s);
	CHECK(model.takeChanges(t0 + 34s).empty());
	const auto held = model.ranges();
	REQUIRE(held.size() == 1);
	CHECK(held[0].origins.empty());
	CHECK(held[0].leavesAt == t0 + 35s);
	CHECK(texts(model.takeChanges(t0 + 35s).removed) == Strings{"198.18.1.0/26"});
}

TEST_CASE("restart: a source that cannot be read keeps what the table held, stale, until it reads; a cold "
	  "start has nothing to keep and says so")
{
	DiscoveredRanges model(docSettings(1s));
	model.keep(DiscoverySource::flannel, prefixes({"198.18.0.0/16"}), kKept);
	model.markStale(DiscoverySource::flannel, kEnv, kEnv + ":1: FLANNEL_NETWORK: not-a-cidr is not a CIDR");
	CHECK(model.takeChanges(t0 + 1h).empty());
	CHECK(texts(model.inForce()) == Strings{"198.18.0.0/16"});
	REQUIRE(model.inputs().size() == 1);
	CHECK(model.inputs()[0].state == DiscoveryInput::State::stale);
	CHECK(model.whatStays(model.inputs()[0]) ==
	      "what the agent's table held for flannelSubnetEnv when the agent started (1 range) stays in force "
	      "until it reads");
	const auto ranges = model.ranges();
	REQUIRE(ranges.size() == 1);
	REQUIRE(ranges[0].origins.size() == 1);
	CHECK(ranges[0].origins[0].text == kKept);
	CHECK(ranges[0].origins[0].source == DiscoverySource::flannel);
	// It reads, with another range: the new one comes, the kept one is held from now.
	model.replace(DiscoverySource::flannel, kEnv, {flannel("198.18.128.0/17")}, t0 + 2h);
	model.releaseKept(DiscoverySource::flannel, t0 + 2h);
	CHECK(texts(model.takeChanges(t0 + 2h).added) == Strings{"198.18.128.0/17"});
	CHECK(texts(model.takeChanges(t0 + 2h + 1s).removed) == Strings{"198.18.0.0/16"});

	DiscoveredRanges cold(docSettings());
	cold.markStale(DiscoverySource::flannel, kEnv, "malformed");
	CHECK(cold.whatStays(cold.inputs()[0]) == "nothing of it is in force: the agent's table held none of its "
						  "ranges, and no earlier reading of it is known");
	DiscoveryInput reading = cold.inputs()[0];
	DiscoveredRanges::Settings dryRun = docSettings();
	dryRun.readsKernel = false;
	CHECK(DiscoveredRanges(dryRun).whatStays(reading) ==
	      "its ranges are missing here: only the running agent and --once keep what the agent's table held for "
	      "a source");
}

TEST_CASE("restart: a kept range the source still covers, merged by the table's set, leaves at once without "
	  "a change for traffic")
{
	DiscoveredRanges model(docSettings(30s));
	// Two adjacent /26 were read back from the set as one /25.
	model.keep(DiscoverySource::routes, prefixes({"198.18.1.0/25", "198.18.9.0/24"}), kKept);
	model.add(DiscoverySource::routes, kRoutes, route("198.18.1.0/26"));
	model.add(DiscoverySource::routes, kRoutes, route("198.18.1.64/26"));
	model.add(DiscoverySource::routes, kRoutes, route("198.18.9.0/25")); // half of the /24
	model.releaseKept(DiscoverySource::routes, t0);
	const DiscoveryChanges changes = model.takeChanges(t0);
	CHECK(texts(changes.added) == Strings{"198.18.1.0/26", "198.18.1.64/26", "198.18.9.0/25"});
	CHECK(texts(changes.reshaped) == Strings{"198.18.1.0/25"});
	CHECK(changes.removed.empty());
	CHECK(model.stats().heldDown == 1); // the /24's other half is no longer given
	CHECK(model.stats().changes == 3);
	CHECK(texts(model.takeChanges(t0 + 30s).removed) == Strings{"198.18.9.0/24"});
}

TEST_CASE("restart: kept ranges outside within are not kept; a source the section no longer names lets its "
	  "kept ranges go after the hold-down")
{
	DiscoveredRanges model(docSettings(30s));
	model.keep(DiscoverySource::cni, prefixes({"198.19.0.0/16", "198.18.0.0/24"}), kKept);
	CHECK(texts(model.inForce()) == Strings{"198.18.0.0/24"});
	CHECK(model.stats().outsideWithin == 1);
	model.releaseKept(DiscoverySource::cni, t0);
	CHECK(model.takeChanges(t0 + 29s).empty());
	CHECK(texts(model.takeChanges(t0 + 30s).removed) == Strings{"198.18.0.0/24"});
}

TEST_CASE("restart: the kept ranges respect the bound")
{
	DiscoveredRanges::Settings s = docSettings();
	s.maxPrefixes = 2;
	DiscoveredRanges model(s);
	model.keep(DiscoverySource::routes, prefixes({"198.18.1.0/24", "198.18.2.0/24", "198.18.3.0/24"}), kKept);
	CHECK(model.inForce().size() == 2);
	CHECK(onlyMessage(model) == "nonMasqueradeDiscovery: the agent's table holds more ranges than the 2 the agent "
				     "takes: the rest of routes is not kept");
}

TEST_CASE("edit: a lower holdDown never shortens a hold-down under way; a higher one lengthens it from the edit")
{
	DiscoveredRanges model(docSettings(30s));
	for (const char *p : {"198.18.1.0/26", "198.18.2.0/26"})
		model.add(DiscoverySource::routes, kRoutes, route(p));
	model.takeChanges(t0);
	model.remove(DiscoverySource::routes, kRoutes, route("198.18.1.0/26"), t0); // leaves at t0 + 30s
	model.remove(DiscoverySource::routes, kRoutes, route("198.18.2.0/26"), t0 + 20s); // at t0 + 50s
	model.takeChanges(t0 + 20s);
	model.setHoldDown(10s, t0 + 25s); // the later of each deadline and t0 + 35s
	CHECK(model.takeChanges(t0 + 34s).empty());
	CHECK(texts(model.takeChanges(t0 + 35s).removed) == Strings{"198.18.1.0/26"});
	model.setHoldDown(60s, t0 + 40s); // t0 + 100s, the later
	CHECK(model.takeChanges(t0 + 99s).empty());
	CHECK(texts(model.takeChanges(t0 + 100s).removed) == Strings{"198.18.2.0/26"});
	// What is withdrawn after the edit is held by the new value.
	model.add(DiscoverySource::routes, kRoutes, route("198.18.3.0/26"));
	model.takeChanges(t0 + 100s);
	model.remove(DiscoverySource::routes, kRoutes, route("198.18.3.0/26"), t0 + 100s);
	CHECK(model.nextWake() == t0 + 160s);
}

TEST_CASE("edit: a holdDown edited during a stale read keeps the stale ranges")
{
	DiscoveredRanges model(docSettings(30s));
	model.replace(DiscoverySource::flannel, kEnv, {flannel("198.18.0.0/16")}, t0);
	model.takeChanges(t0);
	model.markStale(DiscoverySource::flannel, kEnv, "malformed");
	model.setHoldDown(1s, t0 + 1s);
	CHECK(model.takeChanges(t0 + 1h).empty());
	CHECK(texts(model.inForce()) == Strings{"198.18.0.0/16"});
	CHECK(model.inputs()[0].state == DiscoveryInput::State::stale);
}

TEST_CASE("edit: within narrowed takes out what is outside it at once, held down or not")
{
	DiscoveredRanges model(docSettings(30s));
	model.add(DiscoverySource::routes, kRoutes, route("198.18.1.0/26"));
	model.add(DiscoverySource::routes, kRoutes, route("198.18.200.0/26"));
	model.add(DiscoverySource::routes, kRoutes, route("198.18.201.0/26"));
	model.takeChanges(t0);
	model.remove(DiscoverySource::routes, kRoutes, route("198.18.201.0/26"), t0); // held until t0 + 30s
	model.setWithin(prefixes({"198.18.0.0/17"}), t0 + 1s);
	CHECK(texts(model.takeChanges(t0 + 1s).removed) == Strings{"198.18.200.0/26", "198.18.201.0/26"});
	CHECK(texts(model.inForce()) == Strings{"198.18.1.0/26"});
	CHECK_FALSE(model.nextWake());
	// Given again, it is outside: said, not taken.
	model.add(DiscoverySource::routes, kRoutes, route("198.18.200.0/26"));
	CHECK(model.takeChanges(t0 + 2s).empty());
	CHECK(model.stats().outsideWithin == 1);
}

TEST_CASE("forget: a name that is gone leaves the model; its ranges are held down; the others keep theirs")
{
	DiscoveredRanges model(docSettings(30s));
	const std::string a = "/etc/cni/net.d/10-a.conflist", b = "/etc/cni/net.d/20-b.conflist",
			  c = "/etc/cni/net.d/30-c.conflist";
	model.replace(DiscoverySource::cni, a, {Sighting{prefix("198.18.1.0/24"), "a"}}, t0);
	model.replace(DiscoverySource::cni, b, {Sighting{prefix("198.18.2.0/24"), "b"}}, t0);
	model.replace(DiscoverySource::cni, c, {Sighting{prefix("198.18.3.0/24"), "c"}}, t0);
	model.takeChanges(t0);
	model.forget(DiscoverySource::cni, a, t0 + 1s); // the last input takes its slot
	REQUIRE(model.inputs().size() == 2);
	CHECK(model.stats().inputsPerSource[static_cast<size_t>(DiscoverySource::cni)] == 2);
	// The moved input's origins follow it: c's range is still c's, and goes with it.
	const auto address = parseAddress("198.18.3.1");
	REQUIRE(address);
	REQUIRE(model.covering(*address).size() == 1);
	CHECK(model.covering(*address)[0].origins[0].text == "c");
	model.replace(DiscoverySource::cni, c, {}, t0 + 2s);
	CHECK(model.takeChanges(t0 + 31s).removed.size() == 1); // a's
	CHECK(texts(model.takeChanges(t0 + 32s).removed) == Strings{"198.18.3.0/24"});
	CHECK(texts(model.inForce()) == Strings{"198.18.2.0/24"});
	CHECK(onlyMessage(model) == "nonMasqueradeDiscovery: /etc/cni/net.d/10-a.conflist (cniConfDir): gone; the 1 "
				     "ranges it gave are withdrawn");
}

TEST_CASE("forget: 70,000 names come and go, the model holds what exists now")
{
	DiscoveredRanges model(docSettings(0s));
	for (size_t i = 0; i < 70000; i++) {
		const std::string name = fmt::format("/etc/cni/net.d/{}.conflist", i);
		model.replace(DiscoverySource::cni, name,
			      {Sighting{prefix(fmt::format("198.18.{}.0/24", i % 256).c_str()), name}}, t0);
		if (i >= 2)
			model.forget(DiscoverySource::cni, fmt::format("/etc/cni/net.d/{}.conflist", i - 2), t0);
	}
	CHECK(model.inputs().size() == 2);
	model.takeChanges(t0);
	CHECK(texts(model.inForce()) == Strings{"198.18.110.0/24", "198.18.111.0/24"});
	// Each range is the origin of the file that gives it now.
	const auto address = parseAddress("198.18.111.1");
	REQUIRE(address);
	CHECK(model.covering(*address)[0].origins[0].text == "/etc/cni/net.d/69999.conflist");
}
