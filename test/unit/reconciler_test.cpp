// SPDX-License-Identifier: Apache-2.0
// The reconciler's decisions, event by event, against a fake kernel and a fake clock.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <sstream>

#include <fmt/format.h>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/nft/guarded_backend.h"
#include "ip-masq-agent/daemon/element_update.h"
#include "ip-masq-agent/daemon/reconciler.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

#include "../common/kernel_table.h"
#include "captured_stderr.h"

using namespace ipmasq;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using ipmasq::test::CapturedStderr;

namespace {

// The kernel as the reconciler sees it: one table, a generation id, scripted answers.
class FakeKernel final : public TableBackend
{
public:
	explicit FakeKernel(const Clock::time_point &now) : now_(now) {}

	std::optional<Ruleset> table;
	uint32_t gen = 7;
	std::vector<Clock::time_point> applies; // when each apply happened
	int checks = 0;
	std::deque<TableCheck> scriptedChecks; // answered before any real comparison
	std::optional<std::string> applyError;
	int applyErrno = EINVAL;
	bool applyThrows = false; // out of memory inside the backend
	std::vector<ElementDiff> updates; // element updates the kernel committed
	std::vector<uint32_t> updateGuards; // the generation each update was sent against
	int refusedUpdates = 0;
	int commitsBeforeUpdates = 0; // the next this many updates: someone commits right before
	bool editBeforeNextUpdate = false; // someone edits our table right before the next update
	bool deleteAfterNextApply = false;   // a writer deletes the table right after a commit
	std::vector<Ruleset> checked; // what each check() compared the kernel's table with

	Result<uint32_t> apply(const Ruleset &ruleset) override
	{
		if (applyThrows)
			throw std::bad_alloc();
		if (applyError)
			return fail(*applyError, applyErrno);
		applies.push_back(now_);
		table = ruleset;
		const uint32_t committed = ++gen;
		if (deleteAfterNextApply) {
			deleteAfterNextApply = false;
			table.reset();
			gen++;
		}
		return committed;
	}
	Result<uint32_t> updateElements(const std::string &name, const ElementDiff &diff,
					uint32_t generation) override
	{
		updateGuards.push_back(generation);
		if (commitsBeforeUpdates > 0) {
			commitsBeforeUpdates--;
			gen++;
		}
		if (editBeforeNextUpdate) {
			editBeforeNextUpdate = false;
			ourTableEdited();
		}
		if (generation != gen) {
			refusedUpdates++;
			return fail("stale generation", ERESTART);
		}
		if (!table || table->table != name)
			return fail("no such table", ENOENT);
		// As the kernel does: every removed range must be there exactly.
		for (const SetElementChanges &changes : diff.sets) {
			auto set = std::find_if(table->sets.begin(), table->sets.end(),
						[&](const AddressSet &s) { return s.name == changes.set; });
			if (set == table->sets.end())
				return fail("no such set", ENOENT);
			std::vector<AddressRange> ranges = set->elements.ranges();
			for (const AddressRange &removed : changes.removed) {
				auto it = std::find(ranges.begin(), ranges.end(), removed);
				if (it == ranges.end())
					return fail("no such element", ENOENT);
				ranges.erase(it);
			}
			ranges.insert(ranges.end(), changes.added.begin(), changes.added.end());
			set->elements = IntervalSet::fromRanges(set->family(), std::move(ranges));
		}
		updates.push_back(diff);
		return ++gen;
	}
	Result<uint32_t> generation() override { return gen; }
	Result<CheckedTable> check(const Ruleset &ruleset) override
	{
		checks++;
		checked.push_back(ruleset);
		TableCheck answer = table && *table == ruleset ? TableCheck::same : TableCheck::different;
		if (!scriptedChecks.empty()) {
			answer = scriptedChecks.front();
			scriptedChecks.pop_front();
		}
		return CheckedTable{answer, answer == TableCheck::same ? std::optional(gen) : std::nullopt};
	}
	Result<std::vector<CounterValue>> readCounters(const std::string &) override
	{
		return std::vector<CounterValue>();
	}
	Result<std::optional<KernelTable>> readTable(const std::string &name) override
	{
		if (!table || table->table != name)
			return std::optional<KernelTable>();
		return std::optional(test::kernelTableOf(*table));
	}

	// Someone else commits: another table, or ours deleted or edited.
	void otherTableCommitted() { gen++; }
	void ourTableDeleted()
	{
		table.reset();
		gen++;
	}
	void ourTableEdited()
	{
		table->sets.front().elements = IntervalSet::fromPrefixes(
			Family::ipv4, {parsePrefix("203.0.113.0/24").value()});
		gen++;
	}

private:
	const Clock::time_point &now_;
};

constexpr const char *kPath = "/etc/config/ip-masq-agent";

// The desired table of a config text, as the ruleset layer builds it: the tests name
// rulesets by the configs that make them, for readability.
Ruleset rulesetOf(const std::string &text, const RulesetOptions &options = {})
{
	return buildRuleset(parseConfig(text, "test", {}).value().config, options);
}

struct Fixture {
	Clock::time_point now = Clock::time_point(100h);
	FakeKernel kernel{now};
	AgentStatus status;
	RulesetOptions options;
	Reconciler reconciler;

	explicit Fixture(bool adopt = false, RulesetOptions rulesetOptions = {})
		: options(std::move(rulesetOptions)),
		  reconciler(kernel, Reconciler::Settings{options, adopt, kPath}, status,
			     [this] { return now; })
	{
	}

	// The reconciler receives desired states as the daemon hands them over: a ruleset
	// (built with these options), or why the config could not make one.
	void desire(const std::string &configText)
	{
		reconciler.setDesired(DesiredState{rulesetOf(configText, options),
						   DesiredState::Cause::config, kDefaultResyncInterval,
						   kPath, configText, {}, {}, {}, {}, {}});
	}
	void broken(const std::string &why) { reconciler.setConfigError(Error(why)); }
	Status sync(SyncTrigger trigger) { return reconciler.reconcile(trigger); }
	Ruleset rulesetOf(const std::string &text, const RulesetOptions &with = {}) const
	{
		return ::rulesetOf(text, with);
	}
	std::string metric(const std::string &series) const
	{
		std::istringstream in(status.prometheusText());
		std::string line;
		while (std::getline(in, line))
			if (line.rfind(series + " ", 0) == 0)
				return line.substr(series.size() + 1);
		return "<missing>";
	}
};

const std::string kGood = "nonMasqueradeCIDRs: [192.0.2.0/24]\n";
const std::string kOther = "nonMasqueradeCIDRs: [198.51.100.0/24]\n";
// What desiredFromContent says of "nonMasqueradeCIDRs: [192.0.2.1/24]".
const std::string kBad = "/etc/config/ip-masq-agent:1:22: nonMasqueradeCIDRs: \"192.0.2.1/24\" "
			 "has host bits set (did you mean 192.0.2.0/24?)";

} // namespace

TEST_CASE("a new config is applied; nothing is done while the generation stays ours")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));
	REQUIRE(f.kernel.applies.size() == 1);
	CHECK(f.kernel.table == f.rulesetOf(kGood));
	CHECK(f.status.health().ok);

	for (int i = 0; i < 5; i++)
		REQUIRE(f.sync(SyncTrigger::resync));
	CHECK(f.kernel.applies.size() == 1);
	CHECK(f.kernel.checks == 0); // not even a look at the table
	CHECK(f.metric("ip_masq_agent_noop_resyncs_total") == "5");

	f.desire(kOther);
	REQUIRE(f.sync(SyncTrigger::configChange));
	CHECK(f.kernel.applies.size() == 1); // only the elements changed: updated in place
	CHECK(f.kernel.updates.size() == 1);
	CHECK(f.kernel.table == f.rulesetOf(kOther));
}

TEST_CASE("another component's commit: the table is verified once, not rewritten")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));
	f.kernel.otherTableCommitted();
	REQUIRE(f.sync(SyncTrigger::resync));
	CHECK(f.kernel.checks == 1);
	CHECK(f.kernel.applies.size() == 1);
	REQUIRE(f.sync(SyncTrigger::resync)); // that generation is known to be fine now
	CHECK(f.kernel.checks == 1);
}

TEST_CASE("a table deleted or edited by someone else is restored and counted")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));

	f.kernel.ourTableDeleted();
	REQUIRE(f.sync(SyncTrigger::nftablesChange));
	CHECK(f.kernel.applies.size() == 2);
	CHECK(f.kernel.table == f.rulesetOf(kGood));
	CHECK(f.metric("ip_masq_agent_drift_repairs_total") == "1");
	CHECK(f.status.health().ok);

	f.now += 1min; // a new episode: restored at once again
	f.kernel.ourTableEdited();
	REQUIRE(f.sync(SyncTrigger::nftablesChange));
	CHECK(f.kernel.applies.size() == 3);
	CHECK(f.kernel.table == f.rulesetOf(kGood));
	CHECK(f.metric("ip_masq_agent_drift_repairs_total") == "2");
}

TEST_CASE("a bad config keeps the last good ruleset in force, and it is still healed")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));

	f.broken(kBad);
	const Status bad = f.sync(SyncTrigger::configChange);
	REQUIRE_FALSE(bad);
	CHECK_THAT(bad.error().message, Catch::Contains("host bits"));
	CHECK(f.kernel.applies.size() == 1);
	CHECK_FALSE(f.status.health().ok);

	f.kernel.ourTableDeleted();
	CHECK_FALSE(f.sync(SyncTrigger::nftablesChange)); // still reports the bad config
	CHECK(f.kernel.table == f.rulesetOf(kGood));

	f.desire(kOther);
	REQUIRE(f.sync(SyncTrigger::configChange));
	CHECK(f.kernel.table == f.rulesetOf(kOther));
	CHECK(f.status.health().ok);
}

TEST_CASE("a read that other commits keep interrupting is no failure: the table is rewritten")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));

	f.kernel.otherTableCommitted();
	f.kernel.scriptedChecks = {TableCheck::unsettled};
	REQUIRE(f.sync(SyncTrigger::resync));
	CHECK(f.kernel.applies.size() == 2); // atomic and idempotent: the question is settled
	CHECK(f.kernel.table == f.rulesetOf(kGood));
	CHECK(f.status.health().ok);
	CHECK(f.metric("ip_masq_agent_sync_failures_total") == "0");
	CHECK(f.metric("ip_masq_agent_drift_repairs_total") == "0"); // nothing had drifted

	// Unsettled again right away: the rewrite waits for its pace, and health stays ok.
	f.kernel.otherTableCommitted();
	f.kernel.scriptedChecks = {TableCheck::unsettled};
	REQUIRE(f.sync(SyncTrigger::resync));
	CHECK(f.kernel.applies.size() == 2);
	REQUIRE(f.reconciler.nextWake());
	CHECK(*f.reconciler.nextWake() == f.now + RestorePacer::kInitial);
	CHECK(f.status.health().ok);
	f.now = *f.reconciler.nextWake();
	REQUIRE(f.sync(SyncTrigger::retry));
	CHECK(f.kernel.applies.size() == 3);
	CHECK_FALSE(f.reconciler.nextWake());
}

TEST_CASE("a table deleted right after a restore's commit is restored at the pace, after that one")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));
	f.kernel.applies.clear();

	// Deleted: restored at once. Deleted again: the next restore kInitial later.
	f.kernel.ourTableDeleted();
	REQUIRE(f.sync(SyncTrigger::nftablesChange));
	REQUIRE(f.kernel.applies.size() == 1);
	f.kernel.ourTableDeleted();
	REQUIRE(f.sync(SyncTrigger::nftablesChange));
	REQUIRE(f.reconciler.nextWake());
	CHECK(*f.reconciler.nextWake() == f.now + RestorePacer::kInitial);

	// That restore's commit is followed at once by another delete, which the check after
	// the commit finds (notifications are off during it): its restore waits twice as long,
	// from this one, not from the restore before (which would be due already: at once).
	f.now = *f.reconciler.nextWake();
	f.kernel.deleteAfterNextApply = true;
	REQUIRE(f.sync(SyncTrigger::retry));
	REQUIRE(f.kernel.applies.size() == 2);
	REQUIRE(f.reconciler.nextWake());
	CHECK(*f.reconciler.nextWake() == f.now + 2 * RestorePacer::kInitial);
	REQUIRE(f.sync(SyncTrigger::retry)); // the loop calls back: too early, nothing
	CHECK(f.kernel.applies.size() == 2);
	f.now = *f.reconciler.nextWake();
	REQUIRE(f.sync(SyncTrigger::retry));
	CHECK(f.kernel.applies.size() == 3);
}

TEST_CASE("a writer fighting the agent gets its table restored at a bounded, growing pace")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));
	f.kernel.applies.clear();

	// Every 10 ms for 10 s, the writer deletes the table; the loop delivers the
	// notification, and the retry when its time has come.
	const auto start = f.now;
	int checksBefore = f.kernel.checks;
	for (int tick = 0; tick < 1000; tick++) {
		if (f.kernel.table)
			f.kernel.ourTableDeleted();
		REQUIRE(f.sync(SyncTrigger::nftablesChange));
		if (auto wake = f.reconciler.nextWake(); wake && *wake <= f.now)
			REQUIRE(f.sync(SyncTrigger::retry));
		f.now += 10ms;
		if (auto wake = f.reconciler.nextWake(); wake && *wake <= f.now)
			REQUIRE(f.sync(SyncTrigger::retry));
	}
	const auto &applies = f.kernel.applies;
	INFO("restores: " << applies.size());
	REQUIRE(applies.size() >= 5);
	CHECK(applies.size() <= 12); // 0, .1, .3, .7, 1.5, 3.1, 5.1, 7.1, 9.1 s
	CHECK(applies.front() == start); // the first at once
	for (size_t i = 1; i < applies.size(); i++) {
		const auto gap = applies[i] - applies[i - 1];
		CHECK(gap >= RestorePacer::kInitial);
		CHECK(gap <= RestorePacer::kMax + 20ms);
		if (i > 1)
			CHECK(gap >= applies[i - 1] - applies[i - 2]); // growing, up to the cap
	}
	// While a restore waits, notifications cost no table dumps.
	CHECK(f.kernel.checks - checksBefore <= static_cast<int>(applies.size()) + 1);
	CHECK(f.metric("ip_masq_agent_drift_repairs_total") == std::to_string(applies.size()));

	// The writer stops; the pending restore runs, and the table stays.
	while (auto wake = f.reconciler.nextWake()) {
		f.now = *wake;
		REQUIRE(f.sync(SyncTrigger::retry));
	}
	CHECK(f.kernel.table == f.rulesetOf(kGood));
	CHECK(f.status.health().ok);

	// Long quiet: the next deletion is restored at once.
	f.now += RestorePacer::kQuiet + 1s;
	const size_t before = applies.size();
	f.kernel.ourTableDeleted();
	REQUIRE(f.sync(SyncTrigger::nftablesChange));
	CHECK(applies.size() == before + 1);
}

TEST_CASE("a new config is applied at once even while restores are paced")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));
	f.kernel.ourTableDeleted();
	REQUIRE(f.sync(SyncTrigger::nftablesChange)); // restore 1, at once
	f.kernel.ourTableDeleted();
	REQUIRE(f.sync(SyncTrigger::nftablesChange)); // restore 2 waits
	REQUIRE(f.reconciler.nextWake());
	f.desire(kOther);
	REQUIRE(f.sync(SyncTrigger::configChange));
	CHECK(f.kernel.table == f.rulesetOf(kOther));
	CHECK_FALSE(f.reconciler.nextWake());
}

TEST_CASE("started with a bad config, the agent adopts its table from the kernel and heals it")
{
	for (const std::string &earlier :
	     {kGood, std::string("masqLinkLocal: true\nnonMasqueradeCIDRs: [10.0.0.0/8]\n"),
	      std::string("nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqueradeSourceCIDRs: [10.244.0.0/16]\n"),
	      std::string("nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqueradeCIDRs: [10.1.0.0/16]\n")}) {
		Fixture f(true);
		const Ruleset inKernel = f.rulesetOf(earlier);
		f.kernel.table = inKernel;
		f.broken(kBad);
		CHECK_FALSE(f.sync(SyncTrigger::startup));
		CHECK(f.kernel.applies.empty()); // adopted, not rewritten
		CHECK_FALSE(f.status.health().ok); // the config is still bad: not ready

		f.kernel.ourTableDeleted();
		CHECK_FALSE(f.sync(SyncTrigger::nftablesChange));
		CHECK(f.kernel.table == inKernel); // exactly as it was

		f.now += 1min;
		f.kernel.ourTableEdited();
		CHECK_FALSE(f.sync(SyncTrigger::nftablesChange));
		CHECK(f.kernel.table == inKernel);

		f.desire(kOther); // fixed: the config wins
		REQUIRE(f.sync(SyncTrigger::configChange));
		CHECK(f.kernel.table == f.rulesetOf(kOther));
	}
}

TEST_CASE("adoption: only a table these flags would build; none on a fresh node")
{
	SECTION("a fresh node: no table, none applied")
	{
		Fixture f(true);
		f.broken(kBad);
		const Status s = f.sync(SyncTrigger::startup);
		REQUIRE_FALSE(s);
		CHECK_THAT(s.error().message, Catch::Contains("host bits"));
		CHECK_FALSE(f.kernel.table);
		CHECK(f.kernel.applies.empty());
		CHECK_FALSE(f.status.health().ok);
	}
	SECTION("a table made with other flags is left alone")
	{
		Fixture f(true);
		RulesetOptions other;
		other.masqChain = "OTHER-CHAIN";
		const Ruleset foreign = f.rulesetOf(kGood, other);
		f.kernel.table = foreign;
		f.broken(kBad);
		CHECK_FALSE(f.sync(SyncTrigger::startup));
		CHECK_FALSE(f.reconciler.hasDesired());
		f.kernel.ourTableEdited();
		CHECK_FALSE(f.sync(SyncTrigger::nftablesChange));
		CHECK(f.kernel.applies.empty());
	}
	SECTION("without adoption (--once), a bad config applies nothing")
	{
		Fixture f(false);
		f.kernel.table = f.rulesetOf(kGood);
		f.broken(kBad);
		CHECK_FALSE(f.sync(SyncTrigger::startup));
		CHECK_FALSE(f.reconciler.hasDesired());
	}
}

TEST_CASE("someone changing the table right after our commit is caught by the recheck")
{
	Fixture f;
	f.desire(kGood);
	// The kernel says "different" on the recheck after our commit: a change slipped in
	// while notifications were off.
	f.kernel.scriptedChecks = {};
	REQUIRE(f.sync(SyncTrigger::startup));
	f.kernel.otherTableCommitted();
	f.kernel.scriptedChecks = {TableCheck::different};
	REQUIRE(f.sync(SyncTrigger::resync)); // verify says different: restore at once
	CHECK(f.kernel.applies.size() == 2);
}

TEST_CASE("a kernel refusal is a failure, reported in health, and the next success clears it")
{
	Fixture f;
	f.desire(kGood);
	f.kernel.applyError = "set nomasq-v4: Invalid argument";
	const Status s = f.sync(SyncTrigger::startup);
	REQUIRE_FALSE(s);
	CHECK_FALSE(f.status.health().ok);
	CHECK(f.metric("ip_masq_agent_sync_failures_total") == "1");
	f.kernel.applyError.reset();
	REQUIRE(f.sync(SyncTrigger::resync));
	CHECK(f.status.health().ok);
}

namespace {

// 20 CIDRs that do not merge, one of them changed: an element-only change well below the set's size.
std::string manyCidrs(int changed)
{
	std::string text = "nonMasqueradeCIDRs: [";
	for (int i = 0; i < 20; i++)
		text += fmt::format("{}10.{}.0.0/16", i ? ", " : "", i == 5 ? changed : 2 * i);
	return text + "]\n";
}

} // namespace

TEST_CASE("a change of set elements only is an element update against our generation")
{
	Fixture f;
	f.desire(manyCidrs(10));
	REQUIRE(f.sync(SyncTrigger::startup));
	REQUIRE(f.kernel.applies.size() == 1);

	f.desire(manyCidrs(200));
	REQUIRE(f.sync(SyncTrigger::configChange));
	CHECK(f.kernel.applies.size() == 1); // not replaced
	REQUIRE(f.kernel.updates.size() == 1);
	const ElementDiff &diff = f.kernel.updates.front();
	REQUIRE(diff.sets.size() == 1);
	CHECK(diff.sets[0].removed.size() == 1);
	CHECK(diff.sets[0].added.size() == 1);
	CHECK(f.kernel.table == f.rulesetOf(manyCidrs(200)));
	CHECK(f.status.health().ok);

	// Nothing changed since: the no-op resync stays a generation read.
	const int checks = f.kernel.checks;
	REQUIRE(f.sync(SyncTrigger::resync));
	CHECK(f.kernel.checks == checks);
	CHECK(f.kernel.updates.size() == 1);

	// Another table's commit, verified intact: the next update is guarded by that
	// generation and still goes through.
	f.kernel.otherTableCommitted();
	REQUIRE(f.sync(SyncTrigger::nftablesChange));
	f.desire(manyCidrs(210));
	REQUIRE(f.sync(SyncTrigger::configChange));
	CHECK(f.kernel.updates.size() == 2);
	CHECK(f.kernel.applies.size() == 1);
	CHECK(f.kernel.table == f.rulesetOf(manyCidrs(210)));
}

TEST_CASE("a change beyond elements, or a diff larger than the new sets, replaces the table")
{
	Fixture f;
	f.desire(manyCidrs(10));
	REQUIRE(f.sync(SyncTrigger::startup));

	// masqLinkLocal: one range less, and the set's comment changes with it.
	f.desire("masqLinkLocal: true\n" + manyCidrs(10));
	REQUIRE(f.sync(SyncTrigger::configChange));
	CHECK(f.kernel.updates.empty());
	CHECK(f.kernel.refusedUpdates == 0);
	CHECK(f.kernel.applies.size() == 2);
	CHECK(f.kernel.table == f.rulesetOf("masqLinkLocal: true\n" + manyCidrs(10)));

	Fixture g(false, RulesetOptions{});
	g.desire(manyCidrs(10));
	REQUIRE(g.sync(SyncTrigger::startup));
	g.desire(kGood); // 20 ranges removed, 1 added: more than the 2 it holds now
	REQUIRE(g.sync(SyncTrigger::configChange));
	CHECK(g.kernel.updates.empty());
	CHECK(g.kernel.applies.size() == 2);
	CHECK(g.kernel.table == g.rulesetOf(kGood));

}

TEST_CASE("someone else's commit before a change: one read confirms the table, and the change is "
	  "an element update against that read's generation")
{
	Fixture f;
	f.desire(manyCidrs(10));
	REQUIRE(f.sync(SyncTrigger::startup));
	const uint32_t ours = f.kernel.gen;
	// Another table committed (kube-proxy's); the monitor does not wake the agent for it.
	f.kernel.otherTableCommitted();
	CapturedStderr log;
	f.desire(manyCidrs(200));
	REQUIRE(f.sync(SyncTrigger::configChange));
	const std::string text = log.text();
	INFO(text);
	CHECK(f.kernel.applies.size() == 1); // not replaced
	REQUIRE(f.kernel.updates.size() == 1);
	CHECK(f.kernel.refusedUpdates == 1); // sent against the generation of our commit first
	REQUIRE(f.kernel.updateGuards.size() == 2);
	CHECK(f.kernel.updateGuards[0] == ours);
	CHECK(f.kernel.updateGuards[1] == ours + 1); // the generation the read was at
	// One read, of what the agent last wrote (not of the new ruleset).
	REQUIRE(f.kernel.checks == 1);
	CHECK(f.kernel.checked.front() == f.rulesetOf(manyCidrs(10)));
	CHECK(f.kernel.table == f.rulesetOf(manyCidrs(200)));
	CHECK_THAT(text, Catch::Contains("(config change)") && Catch::Contains("by an element update"));
	CHECK(f.status.health().ok);
	CHECK(f.metric("ip_masq_agent_sync_failures_total") == "0");
	CHECK(f.metric("ip_masq_agent_drift_repairs_total") == "0");

	// A commit between the read and the update (a race): read again, sent again.
	f.kernel.commitsBeforeUpdates = 2;
	f.desire(manyCidrs(210));
	REQUIRE(f.sync(SyncTrigger::configChange));
	CHECK(f.kernel.applies.size() == 1);
	CHECK(f.kernel.updates.size() == 2);
	CHECK(f.kernel.checks == 3);
	CHECK(f.kernel.table == f.rulesetOf(manyCidrs(210)));
}

TEST_CASE("its own table changed outside the agent before a change: replaced, and the log says why")
{
	Fixture f;
	f.desire(manyCidrs(10));
	REQUIRE(f.sync(SyncTrigger::startup));
	f.desire(manyCidrs(200));
	f.kernel.editBeforeNextUpdate = true; // found by the update's read, before any notification
	CapturedStderr log;
	REQUIRE(f.sync(SyncTrigger::configChange));
	const std::string text = log.text();
	INFO(text);
	CHECK(f.kernel.updates.empty());
	CHECK(f.kernel.checks == 1);
	CHECK(f.kernel.applies.size() == 2);
	CHECK(f.kernel.table == f.rulesetOf(manyCidrs(200)));
	CHECK_THAT(text, Catch::Contains("applied table inet ip-masq-agent (config change)") &&
				 Catch::Contains("by a replacement, because its table was changed outside the agent"));
	CHECK_THAT(text, Catch::Contains("was changed or deleted outside the agent"));
	CHECK(f.metric("ip_masq_agent_drift_repairs_total") == "1");
	CHECK(f.status.health().ok);

	// Known again: the next change is an update.
	f.desire(manyCidrs(210));
	REQUIRE(f.sync(SyncTrigger::configChange));
	CHECK(f.kernel.updates.size() == 1);
}

TEST_CASE("commits that keep racing the element update: read and sent again a bounded number of "
	  "times, then replaced, and the log says why")
{
	Fixture f;
	f.desire(manyCidrs(10));
	REQUIRE(f.sync(SyncTrigger::startup));
	f.desire(manyCidrs(200));
	f.kernel.commitsBeforeUpdates = 1000; // someone commits right before every attempt
	CapturedStderr log;
	REQUIRE(f.sync(SyncTrigger::configChange));
	const std::string text = log.text();
	INFO(text);
	CHECK(f.kernel.updates.empty());
	// The first attempt, then one read and one attempt per race.
	CHECK(f.kernel.refusedUpdates == kUpdateRaces + 1);
	CHECK(f.kernel.checks == kUpdateRaces);
	CHECK(f.kernel.applies.size() == 2);
	CHECK(f.kernel.table == f.rulesetOf(manyCidrs(200)));
	CHECK_THAT(text, Catch::Contains(fmt::format("by a replacement, because someone else committed {} times "
						     "during the update", kUpdateRaces)));
	CHECK(f.status.health().ok);
	CHECK(f.metric("ip_masq_agent_sync_failures_total") == "0");
	CHECK(f.metric("ip_masq_agent_drift_repairs_total") == "0"); // nothing had drifted
}

TEST_CASE("every replacement of a new ruleset says why it was not an element update")
{
	Fixture f;
	CapturedStderr log;
	f.desire(manyCidrs(10));
	REQUIRE(f.sync(SyncTrigger::startup));
	f.desire(kGood); // 20 ranges removed, 1 added: more than the 2 it holds then
	REQUIRE(f.sync(SyncTrigger::configChange));
	f.desire("masqLinkLocal: true\n" + kGood); // a set's comment changes too
	REQUIRE(f.sync(SyncTrigger::configChange));
	f.desire("masqLinkLocal: true\nnonMasqueradeCIDRs: [192.0.2.0/24, 198.51.100.0/24]\n");
	f.kernel.scriptedChecks = {TableCheck::unsettled};
	f.kernel.commitsBeforeUpdates = 1;
	REQUIRE(f.sync(SyncTrigger::configChange));
	const std::string text = log.text();
	INFO(text);
	CHECK(f.kernel.updates.empty());
	CHECK(f.kernel.applies.size() == 4);
	CHECK_THAT(text, Catch::Contains("(start-up): 21 IPv4 intervals") &&
				 Catch::Contains("by a replacement, because it is the agent's first write since it started"));
	CHECK_THAT(text, Catch::Contains("by a replacement, because the change is not only in set elements"));
	CHECK_THAT(text, Catch::Contains("by a replacement, because the update would send more elements than "
					 "the table holds"));
	CHECK_THAT(text, Catch::Contains("by a replacement, because other commits kept its table from being "
					 "read consistently"));
}

TEST_CASE("after drift or adoption, the next change replaces the table")
{
	SECTION("drift found, restore pending: a new config replaces")
	{
		Fixture f;
		f.desire(manyCidrs(10));
		REQUIRE(f.sync(SyncTrigger::startup));
		f.kernel.ourTableDeleted();
		REQUIRE(f.sync(SyncTrigger::nftablesChange)); // restore 1, at once
		f.kernel.ourTableEdited();
		REQUIRE(f.sync(SyncTrigger::nftablesChange)); // restore 2 waits its pace
		REQUIRE(f.reconciler.nextWake());
		f.desire(manyCidrs(200));
		REQUIRE(f.sync(SyncTrigger::configChange));
		CHECK(f.kernel.updates.empty());
		CHECK(f.kernel.refusedUpdates == 0); // not even tried
		CHECK(f.kernel.table == f.rulesetOf(manyCidrs(200)));
	}
	SECTION("an adopted table: the fixed config replaces it")
	{
		Fixture f(true);
		f.kernel.table = f.rulesetOf(manyCidrs(10));
		f.broken(kBad);
		CHECK_FALSE(f.sync(SyncTrigger::startup));
		REQUIRE(f.reconciler.hasDesired());
		REQUIRE(f.kernel.applies.empty());
		f.desire(manyCidrs(200));
		REQUIRE(f.sync(SyncTrigger::configChange));
		CHECK(f.kernel.updates.empty());
		CHECK(f.kernel.refusedUpdates == 0);
		CHECK(f.kernel.applies.size() == 1);
		CHECK(f.kernel.table == f.rulesetOf(manyCidrs(200)));
	}
}

TEST_CASE("a failed sync is retried with a growing delay; a success ends the retries")
{
	Fixture f;
	f.desire(kGood);
	f.kernel.applyError = "set nomasq-v4: Invalid argument";
	REQUIRE_FALSE(f.sync(SyncTrigger::startup));
	REQUIRE(f.reconciler.nextWake());
	CHECK(*f.reconciler.nextWake() == f.now + Reconciler::kFailureRetryInitial);
	f.now += Reconciler::kFailureRetryInitial;
	REQUIRE_FALSE(f.sync(SyncTrigger::retry));
	REQUIRE(f.reconciler.nextWake());
	CHECK(*f.reconciler.nextWake() == f.now + 2 * Reconciler::kFailureRetryInitial);
	for (int i = 0; i < 20; i++) {
		f.now = *f.reconciler.nextWake();
		REQUIRE_FALSE(f.sync(SyncTrigger::retry));
	}
	CHECK(*f.reconciler.nextWake() - f.now == Clock::duration(Reconciler::kFailureRetryLimit));

	f.kernel.applyError.reset();
	f.now = *f.reconciler.nextWake();
	REQUIRE(f.sync(SyncTrigger::retry));
	CHECK(f.kernel.table == f.rulesetOf(kGood));
	CHECK_FALSE(f.reconciler.nextWake());
	CHECK(f.status.health().ok);
}

TEST_CASE("locked out by the table's owner (EPERM): tried again every 250 ms, not at the resync")
{
	Fixture f;
	f.desire(kGood);
	REQUIRE(f.sync(SyncTrigger::startup));
	f.kernel.ourTableDeleted();
	f.kernel.applyError = "table inet ip-masq-agent is held by another process";
	f.kernel.applyErrno = EPERM;
	REQUIRE_FALSE(f.sync(SyncTrigger::nftablesChange));
	const int checks = f.kernel.checks;
	for (int i = 0; i < 10; i++) {
		REQUIRE(f.reconciler.nextWake());
		CHECK(*f.reconciler.nextWake() == f.now + Reconciler::kLockedOutRetry);
		f.now += Reconciler::kLockedOutRetry;
		REQUIRE_FALSE(f.sync(SyncTrigger::retry));
	}
	CHECK(f.kernel.checks == checks); // each retry goes straight to the restore
	f.kernel.applyError.reset(); // the owner exited
	f.now += Reconciler::kLockedOutRetry;
	REQUIRE(f.sync(SyncTrigger::retry));
	CHECK(f.kernel.table == f.rulesetOf(kGood));
	CHECK_FALSE(f.reconciler.nextWake());
}

TEST_CASE("out of memory inside the backend: an ENOMEM failure, retried, never an exception")
{
	Fixture f;
	GuardedBackend guarded(f.kernel);
	Reconciler reconciler(guarded, Reconciler::Settings{{}, true, kPath}, f.status,
			      [&f] { return f.now; });
	reconciler.setDesired(DesiredState{rulesetOf(kGood), DesiredState::Cause::config,
					   kDefaultResyncInterval, kPath, kGood, {}, {}, {}, {}, {}});
	REQUIRE(reconciler.reconcile(SyncTrigger::startup));
	f.kernel.ourTableDeleted();
	f.kernel.applyThrows = true;
	Status restored;
	REQUIRE_NOTHROW(restored = reconciler.reconcile(SyncTrigger::nftablesChange));
	REQUIRE_FALSE(restored);
	CHECK(restored.error().errnum == ENOMEM);
	CHECK_THAT(restored.error().message, Catch::Contains("out of memory"));
	CHECK_FALSE(f.status.health().ok);
	REQUIRE(reconciler.nextWake());

	f.kernel.applyThrows = false;
	f.now = *reconciler.nextWake();
	REQUIRE(reconciler.reconcile(SyncTrigger::retry));
	CHECK(f.kernel.table == f.rulesetOf(kGood));
	CHECK(f.status.health().ok);
}
