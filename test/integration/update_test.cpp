// SPDX-License-Identifier: Apache-2.0
// Element-level updates against the real kernel: parity with a full apply, the generation guard.
#include <catch2/catch.hpp>

#include <cerrno>
#include <regex>

#include <fmt/format.h>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/daemon/element_update.h"
#include "ip-masq-agent/daemon/reconciler.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "agent_process.h"
#include "backend_support.h"
#include "netns.h"

using namespace ipmasq;
using ipmasq::test::freshBackend;
using ipmasq::test::runOrFail;

namespace {

const std::string kListTable = "nft list table inet ip-masq-agent";


RulesetOptions dualStack()
{
	RulesetOptions options;
	options.enableIpv6 = true;
	return options;
}

// Link-local is left out (masqLinkLocal), so that a set can be emptied or start at 0.
Ruleset rulesetOf(const std::vector<std::string> &cidrs, RulesetOptions options = dualStack())
{
	Config config;
	config.masqLinkLocal = true;
	config.masqLinkLocalIPv6 = true;
	for (const std::string &text : cidrs) {
		auto prefix = parsePrefix(text);
		INFO(text);
		REQUIRE(prefix);
		config.nonMasqueradeCIDRs.push_back(*prefix);
	}
	return buildRuleset(config, options);
}

void requireApplied(NetlinkBackend &backend, const Ruleset &ruleset)
{
	auto applied = backend.apply(ruleset);
	INFO((applied ? "" : applied.error().message));
	REQUIRE(applied);
}

// The table's handle: a new one each time the table is created, the same while it lives.
std::string tableHandle()
{
	const std::string listing = runOrFail("nft -a list table inet ip-masq-agent");
	std::smatch m;
	REQUIRE(std::regex_search(listing, m, std::regex(R"(table inet ip-masq-agent \{ # handle (\d+))")));
	return m[1];
}

// The base chain's handle: a new one each time a replacement creates the chains again, the
// same through an element update. (A replacement keeps the table itself, and its counters:
// the table's handle does not tell a replacement.)
std::string baseChainHandle()
{
	const std::string listing = runOrFail("nft -a list table inet ip-masq-agent");
	std::smatch m;
	REQUIRE(std::regex_search(listing, m, std::regex(R"(chain postrouting \{ # handle (\d+))")));
	return m[1];
}

bool matches(NetlinkBackend &backend, const Ruleset &ruleset)
{
	auto result = backend.matches(ruleset);
	INFO((result ? "" : result.error().message));
	REQUIRE(result);
	return *result;
}

// `before` applied, then updated to `after` by elements: the table lists exactly as a
// full apply of `after` in an empty ruleset, the table was not replaced, and the
// returned generation is the kernel's.
void requireUpdateParity(const std::string &name, const Ruleset &before, const Ruleset &after)
{
	INFO("update: " << name);
	auto backend = freshBackend();
	requireApplied(*backend, before);
	const std::string handle = tableHandle();
	auto generation = backend->generation();
	REQUIRE(generation);

	auto diff = diffElements(before, after);
	REQUIRE(diff);
	REQUIRE_FALSE(diff->empty());
	auto updated = backend->updateElements(after.table, *diff, *generation);
	INFO((updated ? "" : updated.error().message));
	REQUIRE(updated);
	CHECK(*updated == backend->generation().value());
	CHECK(*updated != *generation);
	const std::string viaUpdate = runOrFail(kListTable);
	CHECK(tableHandle() == handle);
	CHECK(matches(*backend, after));

	auto fresh = freshBackend();
	requireApplied(*fresh, after);
	CHECK(viaUpdate == runOrFail(kListTable));
}

// A backend through which another program commits (a table of its own) right before each
// of the next `interruptions` element updates is sent: after the agent knew the generation,
// before the kernel sees the batch.
class InterruptedBackend final : public TableBackend
{
public:
	explicit InterruptedBackend(NetlinkBackend &inner) : inner_(inner) {}

	std::vector<Error> updateErrors;
	int updates = 0;
	int interruptions = 0;

	Result<uint32_t> apply(const Ruleset &ruleset) override { return inner_.apply(ruleset); }
	Result<uint32_t> updateElements(const std::string &table, const ElementDiff &diff,
					uint32_t generation) override
	{
		updates++;
		if (interruptions > 0) {
			interruptions--;
			runOrFail(fmt::format("nft add table inet someone-else-{}", ++commits_));
		}
		auto result = inner_.updateElements(table, diff, generation);
		if (!result)
			updateErrors.push_back(result.error());
		return result;
	}
	Result<uint32_t> generation() override { return inner_.generation(); }
	Result<CheckedTable> check(const Ruleset &ruleset) override
	{
		checks++;
		return inner_.check(ruleset);
	}
	int checks = 0;
	Result<std::vector<CounterValue>> readCounters(const std::string &table) override
	{
		return inner_.readCounters(table);
	}
	Result<std::optional<KernelTable>> readTable(const std::string &table) override
	{
		return inner_.readTable(table);
	}

private:
	NetlinkBackend &inner_;
	int commits_ = 0; // a new table each time: adding one that exists commits nothing
};

std::string configText(const std::vector<std::string> &cidrs)
{
	std::string text = "nonMasqueradeCIDRs: [";
	for (size_t i = 0; i < cidrs.size(); i++)
		text += (i ? ", " : "") + cidrs[i];
	return text + "]\n";
}

} // namespace

TEST_CASE("element updates list exactly like a full apply of the same ruleset")
{
	requireUpdateParity("add IPv4", rulesetOf({"10.0.0.0/8"}),
			    rulesetOf({"10.0.0.0/8", "192.0.2.0/24"}));
	requireUpdateParity("remove IPv4", rulesetOf({"10.0.0.0/8", "192.0.2.0/24"}),
			    rulesetOf({"10.0.0.0/8"}));
	requireUpdateParity("split", rulesetOf({"10.0.0.0/8"}),
			    rulesetOf({"10.0.0.0/9", "10.192.0.0/10"}));
	requireUpdateParity("merge", rulesetOf({"10.0.0.0/9", "10.192.0.0/10"}),
			    rulesetOf({"10.0.0.0/8"}));
	requireUpdateParity("extend (an end moves, the start stays)", rulesetOf({"10.0.0.0/9"}),
			    rulesetOf({"10.0.0.0/8"}));
	requireUpdateParity("IPv6 add, remove, split",
			    rulesetOf({"2001:db8::/32", "fd00::/8"}),
			    rulesetOf({"2001:db8::/33", "2001:db8:c000::/34", "fc00::/8"}));
	requireUpdateParity("both families at once", rulesetOf({"10.0.0.0/8", "fd00::/8"}),
			    rulesetOf({"172.16.0.0/12", "fd00::/9"}));
	requireUpdateParity("to the top address: added",
			    rulesetOf({"10.0.0.0/8", "2001:db8::/32"}),
			    rulesetOf({"10.0.0.0/8", "255.255.255.255/32", "2001:db8::/32",
				       "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"}));
	requireUpdateParity("to the top address: reshaped",
			    rulesetOf({"255.255.255.255/32", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"}),
			    rulesetOf({"255.255.255.0/24", "ffff::/16"}));
	requireUpdateParity("to the top address: removed",
			    rulesetOf({"10.0.0.0/8", "240.0.0.0/4", "ff00::/8", "2001:db8::/32"}),
			    rulesetOf({"10.0.0.0/8", "2001:db8::/32"}));
	requireUpdateParity("from address 0: added (the leading end element goes)",
			    rulesetOf({"10.0.0.0/8", "2001:db8::/32"}),
			    rulesetOf({"0.0.0.0/8", "10.0.0.0/8", "::/3", "2001:db8::/32"}));
	requireUpdateParity("from address 0: removed (the leading end element comes)",
			    rulesetOf({"0.0.0.0/8", "10.0.0.0/8", "::/3"}),
			    rulesetOf({"10.0.0.0/8", "2001:db8::/32"}));
	requireUpdateParity("everything to something", rulesetOf({"0.0.0.0/0", "::/0"}),
			    rulesetOf({"10.0.0.0/8", "2001:db8::/32"}));
	requireUpdateParity("emptied sets", rulesetOf({"10.0.0.0/8", "192.0.2.0/24", "fd00::/8"}),
			    rulesetOf({}));
	requireUpdateParity("filled from empty", rulesetOf({}),
			    rulesetOf({"10.0.0.0/8", "255.255.255.255/32", "fd00::/8", "::/128"}));

	std::vector<std::string> many, changed;
	for (int i = 0; i < 3000; i++) { // several messages of removals and additions
		many.push_back(fmt::format("10.{}.{}.0/24", i / 200, (i % 200) + 1));
		changed.push_back(fmt::format("10.{}.{}.0/{}", i / 200, (i % 200) + 1, i % 3 ? 24 : 25));
	}
	requireUpdateParity("1,000 of 3,000 ranges reshaped", rulesetOf(many), rulesetOf(changed));
}

namespace {

// A ruleset with sources and exceptions besides the non-masquerade CIDRs (both families).
Ruleset rulesetWith(std::vector<std::string> sources, std::vector<std::string> exceptions)
{
	Config config;
	config.nonMasqueradeCIDRs = {parsePrefix("10.0.0.0/8").value(), parsePrefix("fd00::/8").value()};
	for (const std::string &text : sources)
		config.masqueradeSourceCIDRs.push_back(parsePrefix(text).value());
	for (const std::string &text : exceptions)
		config.masqueradeCIDRs.push_back(parsePrefix(text).value());
	RulesetOptions options;
	options.enableIpv6 = true;
	return buildRuleset(config, options);
}

} // namespace

TEST_CASE("a change of masqueradeSourceCIDRs or masqueradeCIDRs alone is an element update")
{
	requireUpdateParity("sources changed in both families",
			    rulesetWith({"198.51.100.0/24", "2001:db8:1::/64"}, {}),
			    rulesetWith({"198.51.100.0/25", "203.0.113.0/24", "2001:db8:1::/48"}, {}));
	requireUpdateParity("exceptions changed",
			    rulesetWith({"198.51.100.0/24"}, {"10.1.0.0/16", "fd00::2/128"}),
			    rulesetWith({"198.51.100.0/24"}, {"10.2.0.0/16", "10.3.3.3/32", "fd00::1/128"}));
	// A family's first source changes the jump rules: no element diff, a replacement.
	CHECK_FALSE(diffElements(rulesetWith({"198.51.100.0/24"}, {}),
				 rulesetWith({"198.51.100.0/24", "2001:db8:1::/64"}, {})));
}

namespace {

// A ruleset with both interface keys, and the default CIDRs.
Ruleset rulesetWithInterfaces(std::vector<std::string> output, std::vector<std::string> excluded)
{
	Config config = defaultConfig({});
	for (const std::string &name : output)
		config.outputInterfaces.push_back(parseInterfacePattern(name).value());
	for (const std::string &name : excluded)
		config.nonMasqueradeInterfaces.push_back(parseInterfacePattern(name).value());
	return buildRuleset(config, {});
}

} // namespace

TEST_CASE("a change of outputInterface or nonMasqueradeInterfaces alone is an element update")
{
	requireUpdateParity("names added and removed",
			    rulesetWithInterfaces({"eth0", "vlan*"}, {"wg0"}),
			    rulesetWithInterfaces({"eth0", "eth1", "ens*"}, {"wg0", "tun*"}));
	// Adjacent patterns are one range of keys in the model and two in the kernel: the
	// update names exactly the kernel's elements when the range changes shape.
	requireUpdateParity("adjacent wildcards joined and split",
			    rulesetWithInterfaces({"eth*"}, {"a"}),
			    rulesetWithInterfaces({"eth*", "eti", "eti0"}, {"a", "b*"}));
	requireUpdateParity("adjacent wildcards taken apart",
			    rulesetWithInterfaces({"eth*", "eti", "eti0"}, {"a", "b*"}),
			    rulesetWithInterfaces({"eti"}, {"b*"}));
	// The first name of a key changes the jump rules: no element diff, a replacement.
	CHECK_FALSE(diffElements(rulesetWithInterfaces({}, {}), rulesetWithInterfaces({"eth0"}, {})));
}

TEST_CASE("the table is kept by an element update and replaced by a rule change")
{
	auto backend = freshBackend();
	const Ruleset first = rulesetOf({"10.0.0.0/8"});
	requireApplied(*backend, first);
	const std::string handle = tableHandle();
	const std::string chain = baseChainHandle();

	const Ruleset second = rulesetOf({"10.0.0.0/8", "192.0.2.0/24"});
	REQUIRE(backend->updateElements(second.table, *diffElements(first, second),
					backend->generation().value()));
	CHECK(tableHandle() == handle);
	CHECK(baseChainHandle() == chain);

	RulesetOptions ports = dualStack();
	ports.toPorts = {PortRange{1024, 65535}};
	const Ruleset otherRules = rulesetOf({"10.0.0.0/8", "192.0.2.0/24"}, ports);
	REQUIRE_FALSE(diffElements(second, otherRules)); // not an element-only change
	requireApplied(*backend, otherRules);
	CHECK(baseChainHandle() != chain); // the chains and rules made again
	CHECK(tableHandle() == handle); // around the counters, which go on counting
	CHECK(matches(*backend, otherRules));
}

TEST_CASE("a read of the table that other tables' commits keep interrupting is one consistent read, at the "
	  "generation read after it")
{
	auto backend = freshBackend();
	// 16,384 ranges (every other /30 of 198.18.0.0/15): dumps of many messages, a while long.
	std::vector<std::string> many;
	for (int i = 0; i < 16384; i++)
		many.push_back(fmt::format("198.{}.{}.{}/30", 18 + i / 8192, i / 32 % 256, i % 32 * 8));
	const Ruleset ruleset = rulesetOf(many);
	requireApplied(*backend, ruleset);
	test::Neighbour busy("i=0; while [ $i -lt 5000 ]; do nft add table ip busy; nft delete table ip busy; "
			     "i=$((i+1)); done", 120);
	int spanned = 0; // reads during which someone committed
	for (int i = 0; i < 10; i++) {
		const uint32_t before = backend->generation().value();
		auto checked = backend->check(ruleset);
		INFO((checked ? "" : checked.error().message));
		REQUIRE(checked);
		CHECK(checked->verdict == TableCheck::same);
		REQUIRE(checked->generation);
		spanned += *checked->generation != before;
	}
	WARN(spanned << " of 10 reads spanned other tables' commits");
	busy.stop();
	// The generation it answers with is the kernel's, at which the table was so: an update
	// guarded by it goes through.
	auto checked = backend->check(ruleset);
	REQUIRE(checked);
	REQUIRE(checked->generation);
	CHECK(*checked->generation == backend->generation().value());
	const Ruleset fewer = rulesetOf(std::vector<std::string>(many.begin() + 1, many.end()));
	REQUIRE(backend->updateElements(ruleset.table, *diffElements(ruleset, fewer), *checked->generation));
	CHECK(matches(*backend, fewer));
}

TEST_CASE("a commit by anyone since the diff's generation makes the kernel refuse the update")
{
	auto backend = freshBackend();
	const Ruleset before = rulesetOf({"10.0.0.0/8", "fd00::/8"});
	const Ruleset after = rulesetOf({"10.0.0.0/9", "fd00::/8"});
	requireApplied(*backend, before);
	auto generation = backend->generation();
	REQUIRE(generation);
	const std::string listed = runOrFail(kListTable);

	runOrFail("nft add table inet someone-else"); // another program commits
	auto refused = backend->updateElements(before.table, *diffElements(before, after), *generation);
	REQUIRE_FALSE(refused);
	INFO(refused.error().message);
	CHECK(refused.error().errnum == ERESTART);
	CHECK(runOrFail(kListTable) == listed); // nothing changed
	CHECK(matches(*backend, before));

	// The current generation is accepted.
	REQUIRE(backend->updateElements(before.table, *diffElements(before, after),
					backend->generation().value()));
	CHECK(matches(*backend, after));
}

TEST_CASE("another program's commit before an element update: the table is read once and the update "
	  "sent against that read; replaced only when commits keep racing the update")
{
	auto netlink = freshBackend();
	InterruptedBackend backend(*netlink);
	AgentStatus status;
	const ConfigLocation location = ConfigLocation::file("/etc/config/ip-masq-agent");
	Reconciler reconciler(backend, Reconciler::Settings{{}, false, location.path}, status);
	const auto desire = [&](const std::vector<std::string> &list) {
		auto desired = desiredFromContent(ConfigContent::single(location.path, configText(list)),
						  location, {}, {}, NodeAddresses{});
		REQUIRE(desired);
		reconciler.setDesired(std::move(*desired));
	};
	const auto inKernel = [&](const std::vector<std::string> &list) {
		Config config;
		for (const std::string &text : list)
			config.nonMasqueradeCIDRs.push_back(parsePrefix(text).value());
		return matches(*netlink, buildRuleset(config, {}));
	};
	std::vector<std::string> cidrs{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"};
	desire(cidrs);
	REQUIRE(reconciler.reconcile(SyncTrigger::startup));
	const std::string chain = baseChainHandle();
	const std::string table = tableHandle();

	// Once: refused, read, sent again against the generation of the read.
	cidrs[1] = "172.16.0.0/13";
	desire(cidrs);
	backend.interruptions = 1;
	Status synced = reconciler.reconcile(SyncTrigger::configChange);
	INFO((synced ? "" : synced.error().message));
	REQUIRE(synced);
	CHECK(backend.updates == 2);
	REQUIRE(backend.updateErrors.size() == 1);
	CHECK(backend.updateErrors[0].errnum == ERESTART);
	CHECK(backend.checks == 1);
	CHECK(inKernel(cidrs));
	CHECK(baseChainHandle() == chain); // updated in place
	CHECK(tableHandle() == table);
	CHECK(status.health().ok);

	// Before every attempt: after the bounded number of reads and attempts, replaced.
	cidrs[2] = "192.168.0.0/17";
	desire(cidrs);
	backend.updates = 0;
	backend.checks = 0;
	backend.updateErrors.clear();
	backend.interruptions = 100;
	synced = reconciler.reconcile(SyncTrigger::configChange);
	INFO((synced ? "" : synced.error().message));
	REQUIRE(synced);
	CHECK(backend.updates == kUpdateRaces + 1);
	CHECK(backend.checks == kUpdateRaces);
	CHECK(backend.updateErrors.size() == static_cast<size_t>(kUpdateRaces + 1));
	CHECK(inKernel(cidrs));
	CHECK(baseChainHandle() != chain); // replaced
	CHECK(status.health().ok);
	CHECK(runOrFail("nft list tables").find("someone-else") != std::string::npos);
}
