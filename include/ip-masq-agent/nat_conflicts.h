// SPDX-License-Identifier: Apache-2.0
// The daemon's conflict check as values: a bounded sample of the agent's decisions, the
// rules of other tables that undo them (nat_evaluator.h), and what changed since the
// last check.
//
// Pure: the daemon reads the kernel (netlink/nat_reader.h) and logs; everything it decides
// about conflicts is decided here, so that the unit tests and the benchmark see the same.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/config.h"
#include "ip-masq-agent/nat_evaluator.h"
#include "ip-masq-agent/nat_ruleset.h"
#include "ip-masq-agent/node_addresses.h"

namespace ipmasq {

// One decision of the agent to check: the first packet of a connection from `source` (or
// from any source of the family) to `destination`, leaving by an interface not known.
struct SampledDecision {
	Address destination;
	std::optional<Address> source; // nullopt: any source (no masqueradeSourceCIDRs entry)
	// The interface it leaves by; nullopt: not known (the daemon's samples), so a rule
	// that matches on it "may".
	std::optional<std::string> outputInterface;
	bool masquerades = false; // the agent's decision, by the config
	// Where the agent's own SNAT puts the source (outputAddress of the family: the
	// address, the range, or the whole subnet); nullopt: masquerade. Another table's SNAT
	// into it does what the agent would, and is no conflict.
	std::optional<AddressRange> agentSnat = {};
	// What decides it, in --explain's words: "nonMasqueradeCIDRs 198.18.0.0/15 (FILE:LINE)",
	// "built-in default 10.0.0.0/8", "no entry covers it".
	std::string entry;

	bool operator==(const SampledDecision &) const = default;
};

struct SampleLimits {
	// Destinations of each family: the first address of each non-masquerade interval and
	// of each masqueraded range between them; beyond this many, evenly spaced ones.
	size_t maxDestinations = 64;
	// Sources of each family: the first address of each masqueradeSourceCIDRs interval.
	size_t maxSources = 8;
};

// The decisions the check looks at, for the families the agent handles (IPv6 with
// enableIpv6): at most maxDestinations * maxSources per family.
std::vector<SampledDecision> sampleDecisions(const Config &config, bool enableIpv6,
					     const SampleLimits &limits = {});

// A rule of another table that undoes one of the agent's decisions.
struct NatConflict {
	enum class Kind {
		natsExempted, // NATs a destination the agent exempts
		natsFirst, // rewrites the source before the agent masquerades (snat elsewhere)
	};
	Kind kind = Kind::natsExempted;
	Family family = Family::ipv4;
	bool certain = true; // false: "may" (a match the evaluator could not decide)
	nat::Outcome outcome; // the deciding rule and its base chain
	std::string ruleText; // as nft lists it ("" when not found)
	std::string entry; // the configured entry it undoes (SampledDecision::entry)
	SampledDecision example; // the first sampled decision it was found for

	// The same rule doing the same thing to the same entry, with the same certainty.
	bool sameAs(const NatConflict &other) const;
	// The rule and what it does: "table ip nat chain POSTROUTING (priority srcnat, before
	// the agent) masquerades it: rule handle 7 (`ip daddr != ... masquerade`)".
	std::string describeRule() const;
	// For the log and /readyz?verbose, e.g. "table ip nat chain POSTROUTING (priority
	// srcnat, before the agent) masquerades it: rule handle 7 (`ip daddr != ...
	// masquerade`), which undoes nonMasqueradeCIDRs 198.18.0.0/15 (FILE:LINE): IPv4 traffic
	// from any source to 198.18.0.0 is not masqueraded by the agent".
	std::string describe() const;
};

struct CheckLimits {
	size_t maxConflicts = 64; // distinct conflicts kept
	// Evaluation steps (nat_evaluator.h: rules and chain ends) over the whole pass: a
	// pathological ruleset ends the pass early instead of taking the loop's time.
	size_t maxSteps = 2000000;
};

// One pass over the sample.
struct ConflictPass {
	std::vector<NatConflict> conflicts; // each distinct conflict once, in sample order
	size_t evaluated = 0; // samples evaluated
	size_t steps = 0; // evaluation steps taken
	bool complete = true; // false: a limit ended the pass before the last sample
};

// Evaluates every sample against `ruleset`. `agent` gives the agent's table and priority;
// its decision comes from each sample.
ConflictPass findConflicts(const nat::NatRuleset &ruleset, std::span<const SampledDecision> samples,
			   const nat::NodeAddresses &node, const nat::AgentPlacement &agent,
			   const CheckLimits &limits = {});

// The daemon's check spread over passes: each pass resumes at the first sample the last
// one did not reach (a step budget per pass keeps each of the loop's turns short), and
// once the last sample is done the cycle's conflicts are the result, diffed as a whole.
class ConflictCycle
{
public:
	// A new sample: start over.
	void restart();
	// Where the next pass starts, in the sample.
	size_t next() const { return next_; }
	// One pass over the samples from next() on; the cycle's conflicts (each distinct one
	// once, at most maxConflicts) when it reached the last of `sampleCount`, else none.
	std::optional<std::vector<NatConflict>> add(const ConflictPass &pass, size_t sampleCount,
						    size_t maxConflicts = CheckLimits{}.maxConflicts);

private:
	size_t next_ = 0;
	std::vector<NatConflict> conflicts_;
};

// The node's addresses as the evaluator needs them (fib and addrtype): a full dump of them
// is complete.
nat::NodeAddresses evaluatorAddresses(const std::vector<NodeAddress> &addresses);

// What changed from one pass to the next: found (in `after`, not `before`) and resolved
// (in `before`, not `after`), each in its list's order.
struct ConflictChanges {
	std::vector<NatConflict> found;
	std::vector<NatConflict> resolved;
};
ConflictChanges diffConflicts(const std::vector<NatConflict> &before,
			      const std::vector<NatConflict> &after);

} // namespace ipmasq
