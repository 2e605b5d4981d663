// SPDX-License-Identifier: Apache-2.0
// The reconciler: the last good desired ruleset, what the kernel was last seen to hold, and
// what to do on each event (apply, verify, heal, skip). It holds no descriptors, and knows
// nothing of the config: it receives desired states (desired_state.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/nft/table_backend.h"

namespace ipmasq {

// Why the reconciler looks at the kernel; named in logs.
enum class SyncTrigger { startup, configChange, addressChange, podNetworkChange, resync, nftablesChange, reload, retry };
const char *syncTriggerName(SyncTrigger trigger);

// Restores of an unchanged table (after someone deleted or edited it, or when other
// commits kept a verification from reading it) spaced by a growing delay, as kube-proxy's
// BoundedFrequencyRunner bounds its syncs: the first at once, the next kInitial after
// it, then twice the previous delay each time up to kMax. Once kQuiet passes without a
// restore, the next one is immediate again.
class RestorePacer
{
public:
	using Clock = std::chrono::steady_clock;
	static constexpr std::chrono::milliseconds kInitial{100};
	static constexpr std::chrono::milliseconds kMax{2000};
	static constexpr std::chrono::seconds kQuiet{10};

	// The earliest time the next restore may run (`now` or earlier: at once).
	Clock::time_point allowedAt(Clock::time_point now) const;
	void restored(Clock::time_point now);
	// Whether restores have been needed recently: a new one continues an episode.
	bool busy(Clock::time_point now) const;

private:
	std::optional<Clock::time_point> last_;
	Clock::duration delay_{0};
};

class Reconciler
{
public:
	using Clock = std::chrono::steady_clock;

	struct Settings {
		// The options every desired ruleset was built with: what adoption rebuilds
		// from the kernel's sets (ruleset_mapping.h), and the table's name.
		RulesetOptions ruleset;
		// With a bad config and no good one yet, take the kernel's table as the last
		// good state if it is exactly what these options would build (daemon only).
		bool adoptExistingTable = false;
		// Where desired states come from (the config's path), for the log.
		std::string source;
	};

	// `clock` is steady_clock::now unless a test drives time itself.
	Reconciler(TableBackend &backend, Settings settings, AgentStatus &status,
		   std::function<Clock::time_point()> clock = Clock::now);

	// A new desired state (from desiredFromContent): a new ruleset is applied at the next
	// reconcile().
	void setDesired(DesiredState desired);
	// Why the config makes no desired state (it is bad, or cannot be read): the last good
	// ruleset stays in force, and reconcile() fails with this until a desired state comes.
	// Logged and reported once per distinct message.
	void setConfigError(const Error &error);

	// Make the kernel hold the desired ruleset, doing nothing when nothing changed:
	// apply a new ruleset; skip when the generation is the one of our last commit;
	// verify when it moved; heal a table found deleted or edited (paced, see
	// RestorePacer); re-apply when verification could not get a consistent view.
	// Fails if the config is bad (the last good ruleset still being enforced), or
	// there is no ruleset at all, or the kernel refused or could not be asked.
	Status reconcile(SyncTrigger trigger);

	// A failed sync (a refused or failed commit, a failed read of the kernel, out of
	// memory) is tried again after a delay that starts at kFailureRetryInitial and
	// doubles up to kFailureRetryLimit, keeping what is in force meanwhile. EPERM (another
	// process owns the table, see NetlinkBackend) is tried every kLockedOutRetry: the
	// kernel removes an owner's table silently when the owner exits, so only a look on a
	// short timer notices that the agent may write its table again.
	static constexpr std::chrono::milliseconds kFailureRetryInitial{100};
	static constexpr std::chrono::seconds kFailureRetryLimit{10};
	static constexpr std::chrono::milliseconds kLockedOutRetry{250};

	// When reconcile(SyncTrigger::retry) should run next: a restore waiting for its
	// pace, or a failed sync waiting for its retry. nullopt: nothing pending.
	std::optional<Clock::time_point> nextWake() const { return retryAt_; }

	// Whether there is a ruleset to enforce (from a desired state, or adopted).
	bool hasDesired() const { return desired_ != nullptr; }

private:
	Status configStatus() const;
	void noteSubnets(const std::vector<SubnetChoice> &subnets);
	Status ensureApplied(SyncTrigger trigger);
	Status verify(SyncTrigger trigger, uint32_t generation);
	// A restore is needed (drift: the table was deleted or edited); it runs at retryAt_.
	void needRestore(bool drift);
	Status restoreNow(SyncTrigger trigger);
	Status commit(SyncTrigger trigger, const char *done);
	// What a commit did: an element update, or a replacement and why (for the log).
	struct Committed {
		uint32_t generation;
		bool updated;
		std::string replacedBecause;
	};
	// The update, or the full replacement when there is none or it cannot be sent.
	Result<Committed> updateOrReplace();
	// What the kernel holds is no longer known for sure (`why`, said when the next change
	// replaces the table): element updates wait for a replacement.
	void forgetApplied(std::string why);
	// The table was found deleted or edited: a warning once per episode, and not ready until
	// the next commit.
	void driftFound();
	void recheckAfterCommit(uint32_t committed);
	void tryAdopt();
	// Record a netlink failure: logged and counted once per distinct message.
	Status syncFailure(const Error &error, const char *doing);
	// After a failed sync: when to try again (see kFailureRetryInitial).
	void retryAfterFailure(const Error &error);

	TableBackend &backend_;
	Settings settings_;
	AgentStatus &status_;
	std::function<Clock::time_point()> clock_;

	// Why the last desired state could not be made; empty: it was. Said once per message.
	LogOnce configError_;
	// The last desired state's outputAddress subnets, to log what changes.
	std::vector<SubnetChoice> subnets_;

	// The last good desired ruleset (from the config, or adopted from the kernel), and
	// what we know the kernel holds: the version last committed and that commit's
	// generation.
	// Shared with applied_ while they are the same ruleset: one copy of 100,000 ranges.
	std::shared_ptr<const Ruleset> desired_;
	uint64_t desiredVersion_ = 0;
	uint64_t appliedVersion_ = 0;
	std::optional<uint32_t> appliedGeneration_;
	// The ruleset the kernel holds at appliedGeneration_, as far as we know for sure:
	// set by our own commits, kept while verifications find it intact, dropped when the
	// table drifted, could not be read, or a commit failed, and never set by adoption.
	// Element-level updates are computed against it; without it, the table is replaced.
	std::shared_ptr<const Ruleset> applied_;
	// Why applied_ is not known (the reason the next change replaces the table).
	std::string appliedUnknownBecause_ = "it is the agent's first write since it started";
	// The update path found the table changed outside the agent: the replacement that
	// follows repairs a drift.
	bool driftFoundByUpdate_ = false;

	// Healing: the pace of restores, when a drift was last found (an episode goes on
	// while drifts come less than RestorePacer::kQuiet apart), and a pending restore.
	RestorePacer pacer_;
	std::optional<Clock::time_point> lastDriftAt_;
	bool restorePending_ = false;
	bool pendingIsDrift_ = false;
	std::optional<Clock::time_point> retryAt_;

	LogOnce syncError_;
	LogOnce adoptionNote_; // why the table found was not adopted, or that there is none
	// The delay before the next retry of a failed sync; reset by a success.
	std::chrono::milliseconds failureRetryDelay_ = kFailureRetryInitial;
};

} // namespace ipmasq
