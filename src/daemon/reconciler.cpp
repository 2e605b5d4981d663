// SPDX-License-Identifier: Apache-2.0
// The reconciler: desired ruleset vs the kernel's table; apply, verify, heal (paced) or skip.
#include "ip-masq-agent/daemon/reconciler.h"

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "ip-masq-agent/daemon/element_update.h"

namespace ipmasq {

namespace {

// "2 IPv4 intervals, 1 IPv4 source intervals, 2 in nomasq-ifaces, 1 in discovered-routes-v4".
// An interface set's keys are 128 bits wide, as IPv6 addresses are: it is named, never
// counted as a family's; so is a set no rule uses for a decision of its own.
std::string describeSet(const Ruleset &ruleset, const AddressSet &set)
{
	if (&set == ruleset.findSet(set.family()))
		return fmt::format("{} {} intervals", set.elements.size(), familyName(set.family()));
	if (!set.interfaceNames && set.name == sourceSetName(set.family()))
		return fmt::format("{} {} source intervals", set.elements.size(), familyName(set.family()));
	return fmt::format("{} in {}", set.elements.size(), set.name);
}

std::string summarize(const Ruleset &ruleset)
{
	std::string sets;
	for (const AddressSet &set : ruleset.sets)
		sets += fmt::format("{}{}", sets.empty() ? "" : ", ", describeSet(ruleset, set));
	return sets.empty() ? "no sets" : sets;
}

template<typename Duration>
double milliseconds(Duration d)
{
	return std::chrono::duration<double, std::milli>(d).count();
}

} // namespace

const char *syncTriggerName(SyncTrigger trigger)
{
	switch (trigger) {
	case SyncTrigger::startup: return "start-up";
	case SyncTrigger::configChange: return "config change";
	case SyncTrigger::addressChange: return "node address change";
	case SyncTrigger::podNetworkChange: return "pod network change";
	case SyncTrigger::resync: return "resync";
	case SyncTrigger::nftablesChange: return "nftables change";
	case SyncTrigger::reload: return "SIGHUP";
	case SyncTrigger::retry: return "paced restore";
	}
	return "?";
}

RestorePacer::Clock::time_point RestorePacer::allowedAt(Clock::time_point now) const
{
	if (!busy(now))
		return now;
	return *last_ + delay_;
}

bool RestorePacer::busy(Clock::time_point now) const
{
	return last_ && now - *last_ < kQuiet;
}

void RestorePacer::restored(Clock::time_point now)
{
	if (!busy(now))
		delay_ = kInitial;
	else
		delay_ = std::min<Clock::duration>(std::max<Clock::duration>(2 * delay_, kInitial), kMax);
	last_ = now;
}

Reconciler::Reconciler(TableBackend &backend, Settings settings, AgentStatus &status,
		       std::function<Clock::time_point()> clock)
	: backend_(backend), settings_(std::move(settings)), status_(status), clock_(std::move(clock))
{
}

Status Reconciler::configStatus() const
{
	return configError_.last().empty() ? Status() : fail(configError_.last());
}

void Reconciler::setConfigError(const Error &error)
{
	// Say it (and count it) once per change, not once per resync.
	if (configError_.changed(error.message)) {
		log::error({{"file", settings_.source}, {"err", error.message}}, "{}; {}", error.message,
			   desired_ ? "keeping the last good ruleset in force"
				    : "no ruleset of this config is applied");
		status_.configFailed(error.message);
	}
}

void Reconciler::setDesired(DesiredState desired)
{
	if (desired.cause == DesiredState::Cause::config) {
		for (const std::string &warning : desired.warnings)
			log::warning("{}", warning);
		if (configError_.clear())
			log::info("the config is valid again");
		log::info("config {}: {}", desired.origin, desired.summary);
	}
	noteSubnets(desired.subnets);
	// Compare rulesets once per config change, not on every sync.
	if (!desired_ || desired.ruleset != *desired_) {
		desired_ = std::make_shared<const Ruleset>(std::move(desired.ruleset));
		desiredVersion_++;
	}
}

void Reconciler::noteSubnets(const std::vector<SubnetChoice> &subnets)
{
	// Said when it changes: the address a subnet gives, or that it gives none.
	for (const SubnetChoice &choice : subnets) {
		const auto before = std::find_if(subnets_.begin(), subnets_.end(), [&](const SubnetChoice &c) {
			return c.family == choice.family && c.subnet == choice.subnet;
		});
		if (before != subnets_.end() && before->address == choice.address)
			continue;
		if (choice.address)
			log::info("{}: SNAT to {}, this node's address in it", choice.subnet,
				  choice.address->toString());
		else
			log::warning("{}: this node has no address in it: its {} traffic is masqueraded "
				     "instead, and the agent reports not ready until one appears",
				     choice.subnet, familyName(choice.family));
	}
	subnets_ = subnets;
	status_.subnetsChosen(subnets);
}

void Reconciler::tryAdopt()
{
	const std::string &table = settings_.ruleset.table;
	const auto note = [this](const std::string &message, bool warning) {
		if (adoptionNote_.changed(message))
			log::write(warning ? log::Level::warning : log::Level::info, message);
	};
	auto kernel = backend_.readTable(table);
	if (!kernel)
		return note(fmt::format("cannot adopt table inet {}: {}", table, kernel.error().message),
			    true);
	if (!*kernel)
		return note(fmt::format("no table inet {} exists to adopt: nothing is applied until "
					"the config is fixed", table),
			    false);
	auto generation = backend_.generation();
	if (!generation)
		return note(fmt::format("cannot adopt table inet {}: {}", table,
					generation.error().message),
			    true);

	auto candidate = rulesetFromKernel(settings_.ruleset, **kernel);
	if (!candidate)
		return note(fmt::format("table inet {} exists but cannot be adopted: its sets and "
					"rules are not what these flags make (another version or "
					"other flags made it); it is left as it is until the config "
					"is fixed", table),
			    true);
	auto checked = backend_.check(*candidate);
	if (!checked)
		return note(fmt::format("cannot adopt table inet {}: {}", table, checked.error().message),
			    true);
	if (checked->verdict == TableCheck::unsettled)
		return; // others kept committing: the next event tries again
	if (checked->verdict == TableCheck::same) {
		desired_ = std::make_shared<const Ruleset>(std::move(*candidate));
		desiredVersion_++;
		appliedVersion_ = desiredVersion_;
		appliedGeneration_ = checked->generation.value_or(*generation);
		// Adopted, not committed by us: the next change replaces.
		forgetApplied("the agent adopted it from the kernel and has not written it since");
		log::info("adopted table inet {} as it is in the kernel ({}) as the last good "
			  "ruleset: it is restored if deleted or edited, until the config is fixed",
			  table, summarize(*desired_));
		return;
	}
	note(fmt::format("table inet {} exists but cannot be adopted: it is not what these flags "
			 "build (another version or other flags made it; run with -v=1 for the "
			 "first difference); it is left as it is until the config is fixed", table),
	     true);
}

Status Reconciler::reconcile(SyncTrigger trigger)
{
	if (!desired_ && settings_.adoptExistingTable && !configError_.last().empty())
		tryAdopt();
	if (!desired_) {
		if (!configError_.last().empty())
			return fail(configError_.last());
		return fail("no config has been read yet", EAGAIN);
	}
	const Status kernel = ensureApplied(trigger);
	// The config error is cleared only once the new config's ruleset was handed to the
	// kernel, not when it was read; a refusal then shows as the sync error.
	if (configError_.last().empty())
		status_.configLoaded();
	if (!kernel) {
		retryAfterFailure(kernel.error());
		return kernel;
	}
	failureRetryDelay_ = kFailureRetryInitial;
	if (!restorePending_)
		retryAt_.reset(); // a retry after a failure is done with
	return configStatus();
}

void Reconciler::retryAfterFailure(const Error &error)
{
	const auto now = clock_();
	const auto delay = error.errnum == EPERM ? Clock::duration(kLockedOutRetry)
						 : Clock::duration(failureRetryDelay_);
	if (error.errnum != EPERM)
		failureRetryDelay_ = std::min<std::chrono::milliseconds>(2 * failureRetryDelay_,
									  kFailureRetryLimit);
	// A paced restore already due earlier keeps its time.
	if (!retryAt_ || *retryAt_ <= now)
		retryAt_ = now + delay;
	log::debug("the sync failed ({}); trying again in {:.0f} ms", error.message,
		   milliseconds(*retryAt_ - now));
}

Status Reconciler::syncFailure(const Error &error, const char *doing)
{
	const std::string message = fmt::format("{}: {}", doing, error.message);
	if (syncError_.changed(message))
		log::error("{}", message);
	status_.syncFailed(message);
	return fail(Error(message, error.errnum));
}

Status Reconciler::ensureApplied(SyncTrigger trigger)
{
	// A new desired ruleset is applied at once, whatever the pace of restores.
	if (appliedVersion_ != desiredVersion_) {
		restorePending_ = false;
		pendingIsDrift_ = false;
		retryAt_.reset();
		return commit(trigger, "applied");
	}
	// A restore is already due: nothing to look at until its time comes, so a writer
	// fighting the agent costs it a notification read per change, no table dumps.
	if (restorePending_) {
		if (clock_() < *retryAt_) {
			log::debug("{}: table inet {} is restored in {:.0f} ms", syncTriggerName(trigger),
				   desired_->table, milliseconds(*retryAt_ - clock_()));
			return {};
		}
		return restoreNow(trigger);
	}

	auto generation = backend_.generation();
	if (!generation)
		return syncFailure(generation.error(), "reading the ruleset generation");
	if (appliedGeneration_ == *generation) {
		log::debug("{}: nothing changed (generation {})", syncTriggerName(trigger), *generation);
		syncError_.clear();
		status_.noopResync();
		return {};
	}
	return verify(trigger, *generation);
}

Status Reconciler::verify(SyncTrigger trigger, uint32_t generation)
{
	// Something changed nftables since our last commit: most often another table
	// (kube-proxy's). Look at ours before writing anything.
	auto checked = backend_.check(*desired_);
	if (!checked)
		return syncFailure(checked.error(),
				   fmt::format("reading table inet {}", desired_->table).c_str());
	switch (checked->verdict) {
	case TableCheck::same:
		appliedGeneration_ = checked->generation.value_or(generation);
		log::debug("{}: nftables changed elsewhere, table inet {} is intact (generation {})",
			   syncTriggerName(trigger), desired_->table, *appliedGeneration_);
		syncError_.clear();
		status_.noopResync();
		return {};
	case TableCheck::unsettled:
		// Not a failure: the replacement is atomic and idempotent, so writing our
		// table again settles the question (at the restore pace).
		log::debug("{}: other commits kept table inet {} from being read consistently; "
			   "writing it again", syncTriggerName(trigger), desired_->table);
		needRestore(false);
		break;
	case TableCheck::different:
		needRestore(true);
		break;
	}
	if (clock_() < *retryAt_) {
		log::debug("{}: restore of table inet {} paced: in {:.0f} ms", syncTriggerName(trigger),
			   desired_->table, milliseconds(*retryAt_ - clock_()));
		return {};
	}
	return restoreNow(trigger);
}

void Reconciler::driftFound()
{
	const auto now = clock_();
	// One line per episode (drifts less than kQuiet apart): a writer fighting the agent
	// does not flood the log.
	if (!lastDriftAt_ || now - *lastDriftAt_ >= RestorePacer::kQuiet)
		log::warning({{"table", desired_->table}},
			     "table inet {} was changed or deleted outside the agent; restoring "
			     "it (while this goes on, restores are spaced by a delay growing "
			     "from {} ms to {} ms)", desired_->table,
			     RestorePacer::kInitial.count(), RestorePacer::kMax.count());
	lastDriftAt_ = now;
	status_.tableDrifted();
}

void Reconciler::forgetApplied(std::string why)
{
	applied_.reset();
	appliedUnknownBecause_ = std::move(why);
}

void Reconciler::needRestore(bool drift)
{
	const auto now = clock_();
	if (drift)
		driftFound();
	// Whatever the kernel holds now, it is not known well enough to diff against.
	forgetApplied(drift ? "its table was changed outside the agent"
			    : "other commits kept its table from being read consistently");
	restorePending_ = true;
	pendingIsDrift_ = pendingIsDrift_ || drift;
	retryAt_ = std::max(pacer_.allowedAt(now), now);
}

Status Reconciler::restoreNow(SyncTrigger trigger)
{
	const bool drift = pendingIsDrift_;
	restorePending_ = false;
	pendingIsDrift_ = false;
	retryAt_.reset();
	Status committed = commit(trigger, drift ? "restored" : "rewrote");
	if (!committed) {
		// Still to do: the retry (retryAfterFailure) goes straight to the restore,
		// without reading the table again.
		restorePending_ = true;
		pendingIsDrift_ = drift;
		return committed;
	}
	pacer_.restored(clock_());
	// A change that the check after the commit found (recheckAfterCommit) was paced
	// before this restore counted: from the one before, often due already. It waits for
	// the pace after this one, as any later change does.
	if (restorePending_)
		retryAt_ = std::max(pacer_.allowedAt(clock_()), clock_());
	if (drift)
		status_.driftRepaired();
	return {};
}


Result<Reconciler::Committed> Reconciler::updateOrReplace()
{
	driftFoundByUpdate_ = false;
	UpdatePlan plan = planElementUpdate(appliedGeneration_ ? applied_.get() : nullptr, appliedUnknownBecause_,
					    *desired_);
	if (plan.diff) {
		auto updated = sendElementUpdate(backend_, desired_->table, *applied_, *plan.diff, *appliedGeneration_);
		if (!updated)
			return fail(updated.error());
		if (updated->generation)
			return Committed{*updated->generation, true, {}};
		if (updated->drift) {
			driftFound();
			driftFoundByUpdate_ = true;
		}
		plan.replaceBecause = std::move(updated->replaceBecause);
	}
	auto replaced = backend_.apply(*desired_);
	if (!replaced)
		return fail(replaced.error());
	return Committed{*replaced, false, std::move(plan.replaceBecause)};
}

Status Reconciler::commit(SyncTrigger trigger, const char *done)
{
	const auto start = std::chrono::steady_clock::now();
	auto committed = updateOrReplace();
	const auto took = std::chrono::steady_clock::now() - start;
	if (!committed) {
		// A commit whose outcome may be unknown, or a read that failed before it.
		forgetApplied("the agent's last sync of it failed");
		if (syncError_.changed(committed.error().message))
			log::error("applying table inet {} failed, the previous ruleset stays in "
				   "force: {}", desired_->table, committed.error().message);
		status_.syncFailed(committed.error().message);
		return fail(committed.error());
	}
	syncError_.clear();
	status_.syncSucceeded(*desired_, took);
	if (driftFoundByUpdate_)
		status_.driftRepaired();
	const bool restore = appliedVersion_ == desiredVersion_;
	appliedVersion_ = desiredVersion_;
	appliedGeneration_ = committed->generation;
	applied_ = desired_;
	const std::string how = committed->updated
		? " by an element update"
		: fmt::format(" by a replacement, because {}", committed->replacedBecause);
	// A new ruleset is news; restores are announced once per episode (needRestore).
	log::Fields fields{{"table", desired_->table}, {"trigger", syncTriggerName(trigger)},
			   {"sets", summarize(*desired_)}, {"ms", milliseconds(took)},
			   {"generation", static_cast<uint64_t>(committed->generation)},
			   {"path", committed->updated ? "element update" : "replace"}};
	if (!committed->updated)
		fields.push_back({"reason", committed->replacedBecause});
	if (restore)
		log::debug(fields, "{} table inet {} ({}): {} in {:.1f} ms{} (generation {})", done,
			   desired_->table, syncTriggerName(trigger), summarize(*desired_),
			   milliseconds(took), how, committed->generation);
	else
		log::info(fields, "{} table inet {} ({}): {} in {:.1f} ms{} (generation {})", done,
			  desired_->table, syncTriggerName(trigger), summarize(*desired_),
			  milliseconds(took), how, committed->generation);
	recheckAfterCommit(committed->generation);
	return {};
}

void Reconciler::recheckAfterCommit(uint32_t committed)
{
	// Change notifications are off during our commit (they would double its cost), so
	// someone may have changed our table unseen right after it: look once. Unsettled
	// or failing, appliedGeneration_ stays that of our commit, so the next event
	// verifies again.
	auto now = backend_.generation();
	if (!now || *now == committed)
		return;
	auto checked = backend_.check(*desired_);
	log::debug("after commit {}: generation {}, table {}", committed, *now,
		   !checked ? checked.error().message
		   : checked->verdict == TableCheck::same ? "intact"
		   : checked->verdict == TableCheck::different ? "changed" : "unsettled");
	if (!checked || checked->verdict == TableCheck::unsettled)
		return;
	if (checked->verdict == TableCheck::same) {
		appliedGeneration_ = checked->generation.value_or(*now);
		return;
	}
	needRestore(true); // the loop calls back at retryAt_ (at once if the pace allows)
}

} // namespace ipmasq
