// SPDX-License-Identifier: Apache-2.0
// The daemon's NAT conflict check (other_tables/conflicts.h) on a thread of its own: it
// reads other tables and evaluates the desired state's sampled packets in paced, bounded
// passes, and reports to the log and the status. Nothing it reads or evaluates can delay
// the loop, which restores the agent's table: however large or hostile another table is,
// it costs this thread, at a low priority, and at most a tenth of one core.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/diagnose/conflicts.h"
#include "ip-masq-agent/diagnose/samples.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/base/paced_thread.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

class ConflictCheck
{
public:
	explicit ConflictCheck(AgentStatus &status);
	~ConflictCheck() = default; // stops and joins the thread
	ConflictCheck(const ConflictCheck &) = delete;
	ConflictCheck &operator=(const ConflictCheck &) = delete;

	// The desired state changed: the agent's ruleset and the packets to check. A new cycle
	// starts with the next pass.
	void setDesired(const Ruleset &ruleset, SamplePlan samples);
	// The loop's snapshot of this node's addresses (fib and addrtype matches), shared with
	// the SNAT usage read: the next pass uses it. Until one comes, nothing is known of them.
	void setNodeAddresses(std::shared_ptr<const NodeAddresses> addresses);
	// Starts the thread (the loop calls it after its first sync: the agent's own table
	// comes first). Without a thread nothing is checked: --once has none. A refused start
	// (a limit on tasks) is an Error naming the limit; it may be retried.
	Status start() { return thread_.start(); }
	bool running() const { return thread_.running(); }
	// Other tables changed, or the agent's was synced: a pass is due, as soon as the pace
	// allows.
	void nudge() { thread_.nudge(); }

	// At least this long between passes, and ten times as long as the last pass took (its
	// thread's CPU time): a ruleset that makes a pass slow costs at most a tenth of a core.
	static constexpr std::chrono::seconds kPeriod{3};
	// Evaluation steps per pass (about 0.1 s of CPU at upstream's leftover chain of 10,000
	// rules); a cycle over the whole sample may take several passes.
	static constexpr size_t kStepsPerPass = 100000;

private:
	struct Input;
	// One pass (PacedThread::Pass): true when the cycle goes on in the next pass.
	bool pass();
	bool pass(Input &input);
	bool linearizeAgent(Input &input);
	// Other tables' NAT: what the last read holds while the kernel's generation is unchanged,
	// read again otherwise; nullptr when it cannot be read (reported to the status).
	const nft::NatRuleset *otherTables(std::vector<std::string> &warnings);
	// Evaluates the cycle as far as this pass's steps go: its conflicts once it is done.
	std::optional<std::vector<NatConflict>> evaluate(const nft::NatRuleset &ruleset, const nft::Table &agent,
							 const NodeAddresses &addresses);
	// A cycle's packets: the desired state's, and those where other tables' rules match.
	std::vector<SampledPacket> cycleSamples(const SamplePlan &plan, const nft::NatRuleset &ruleset,
						const NodeAddresses &node);
	void report(std::vector<NatConflict> conflicts, std::vector<std::string> warnings);
	std::vector<std::string> legacyWarnings();

	AgentStatus &status_;
	// Under thread_.locked(): a new desired state for the thread, the latest addresses.
	std::shared_ptr<Input> next_;
	std::shared_ptr<const NodeAddresses> addresses_ = std::make_shared<const NodeAddresses>();

	// The thread's own.
	std::shared_ptr<Input> input_;
	ConflictCycle cycle_;
	uint64_t inputSerial_ = 0; // counts the desired states passes started on
	std::optional<nft::NatRuleset> read_; // the last read of other tables, while it holds
	// What the last complete cycle evaluated: a pass that would evaluate the same has nothing
	// new to find, so a neighbour that stops changing costs a generation request per pass.
	struct Evaluated {
		uint32_t generation = 0;
		uint64_t inputSerial = 0;
		std::shared_ptr<const NodeAddresses> addresses;
		std::vector<std::string> warnings;
		bool operator==(const Evaluated &) const = default;
	};
	std::optional<Evaluated> evaluated_;
	std::vector<NatConflict> conflicts_; // the last complete cycle's
	std::vector<RuleSamples::Cut> cuts_; // where the last cycle's bound cut what other tables match
	LogOnce readError_; // other tables' NAT could not be read
	bool legacySaid_[2] = {false, false}; // IPv4, IPv6

	PacedThread thread_; // last: it is stopped before the members its passes use go
};

} // namespace ipmasq
