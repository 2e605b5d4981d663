// SPDX-License-Identifier: Apache-2.0
// Other tables that undo the agent's decisions: what a conflict is (one definition, here),
// which sampled packets have one, and what changed since the last check.
//
// A conflict is an outcome of the whole node, decided by a rule of another table (or by
// something the evaluator cannot tell), after which the packet leaves with another source
// than the agent's own rules alone would give it: the agent exempts it and another table
// NATs it, or another table NATs it first to another address. It is certain when the
// kernel does it for sure; anything the evaluator cannot decide (a match, a target, an
// address, a bound) makes it "may", never "no conflict". A drop is not NAT.
//
// Pure: the daemon and --explain read the kernel (nft/codec/table_reader.h); everything they
// say about conflicts is decided here, and said in the words below.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/diagnose/evaluator.h"
#include "ip-masq-agent/nft/codec/model.h"
#include "ip-masq-agent/model/sampled_packet.h"

namespace ipmasq {

struct NatConflict {
	enum class Kind {
		natsExempted, // NATs what the agent leaves alone
		natsFirst, // NATs it before the agent's own NAT, to another source
		undetermined, // the evaluator cannot tell what happens (a bound, an unknown target)
	};
	Kind kind = Kind::natsExempted;
	Family family = Family::ipv4;
	bool certain = true; // false: "may"
	nat::Outcome outcome; // the deciding rule and its base chain
	std::string ruleText; // as nft lists it ("" when there is no rule)
	std::string agentAction; // what the agent's rules alone do: "masquerades", "SNATs to X"
	SampledPacket example; // the first sampled packet it was found for
	// A "may" found for a packet of any port: the protocols and ports that make the port
	// matches true of the rules where the walk could not tell (th dport 53: 53/udp and
	// 53/tcp), which a packet with one of them decides. Not part of its identity.
	std::vector<PortProtocol> ports = {};

	// The same conflict: what it does to which decision, by the rule's content and place
	// (table, chain, text), never its handle, which changes when a rule is written again.
	bool sameAs(const NatConflict &other) const;
	// The rule and what it does: "table ip nat chain POSTROUTING (priority srcnat, before
	// the agent) masquerades it: rule handle 7 (`ip daddr != ... masquerade`)".
	std::string describeRule() const;
	// For the log and /readyz?verbose: the rule, and the decision it undoes.
	std::string describe() const;
};

// The conflicts one packet shows: `node` is the whole node's verdict, `agentAlone` the
// verdict of the agent's table alone for the same packet.
std::vector<NatConflict> conflictsOf(const SampledPacket &packet, const nat::NatVerdict &node,
				     const nat::NatVerdict &agentAlone, const NodeAddresses &addresses,
				     const nft::NatRuleset &ruleset, const nft::Table *agent);

struct CheckLimits {
	size_t maxConflicts = 64; // distinct conflicts kept
	// Evaluation steps over the whole pass: a pathological ruleset ends the pass early.
	size_t maxSteps = 2000000;
	nat::Limits evaluation = {};
};

// One pass over samples.
struct ConflictPass {
	std::vector<NatConflict> conflicts; // each distinct conflict once, in sample order
	size_t evaluated = 0; // samples evaluated
	size_t steps = 0; // evaluation steps taken
	bool complete = true; // false: a limit ended the pass before the last sample
};

ConflictPass findConflicts(const nft::NatRuleset &ruleset, const nft::Table *agent,
			   std::span<const SampledPacket> samples, const NodeAddresses &addresses,
			   const CheckLimits &limits = {});

// The packets that decide "may" conflicts found for packets of any port: each conflict's
// example with each of its ports (NatConflict::ports), each packet once, at most `max`.
std::vector<SampledPacket> portSamples(const std::vector<NatConflict> &conflicts, size_t max);

// The list without each "may" conflict whose certain twin (the same conflict, found certain
// for another sampled packet: with a port its rule matches) it holds: a rule that certainly
// undoes a decision for some of the traffic is reported once, as certain.
std::vector<NatConflict> withoutMayTwins(std::vector<NatConflict> conflicts);

// The check spread over passes: each resumes at the first sample the last did not reach,
// and once the last sample is done the cycle's conflicts are the result, diffed as a
// whole (a conflict is never "resolved" for a sample that was not evaluated). When the
// given samples are done, the cycle goes on once over portSamples() of what it found.
class ConflictCycle
{
public:
	// A new cycle over `samples` (it runs even over none).
	void restart(std::vector<SampledPacket> samples);
	// No cycle: what the stopped one found is dropped.
	void stop();
	bool running() const { return running_; }
	size_t next() const { return next_; }
	// Every sample of the cycle so far, the port samples once they are added.
	const std::vector<SampledPacket> &samples() const { return samples_; }
	std::span<const SampledPacket> rest() const { return std::span(samples_).subspan(next_); }
	// A pass over rest(). The cycle's conflicts (withoutMayTwins) once its last sample is done.
	std::optional<std::vector<NatConflict>> add(const ConflictPass &pass,
						    size_t maxConflicts = CheckLimits{}.maxConflicts,
						    size_t maxPortSamples = kMaxPortSamples);

	// Port samples per cycle: as many as the conflicts kept.
	static constexpr size_t kMaxPortSamples = CheckLimits{}.maxConflicts;

private:
	std::vector<SampledPacket> samples_;
	size_t next_ = 0;
	bool running_ = false;
	bool portsAdded_ = false;
	std::vector<NatConflict> conflicts_;
};

struct ConflictChanges {
	std::vector<NatConflict> found;
	std::vector<NatConflict> resolved;
};
ConflictChanges diffConflicts(const std::vector<NatConflict> &before, const std::vector<NatConflict> &after);

// ---- Outcomes in words ----

// The table a reference names (`agent` for the agent's own), the rule in it, or nullptr.
const nft::Table *findTable(const nft::NatRuleset &ruleset, const nft::Table *agent, nft::TableFamily family,
			    const std::string &name);
const nft::Rule *findRule(const nft::Table &table, const nat::RuleRef &ref);

// One outcome in a sentence, without a trailing period:
//   "table ip nat chain POSTROUTING (priority srcnat, before the agent) masquerades it:
//    rule handle 7", "no chain NATs it", "the agent masquerades it",
//   "the evaluator cannot tell: <reason>"
// With `certain` false (a verdict with other possible outcomes) the action reads "may
// masquerade it", "may rewrite its source"...
std::string describeOutcome(const nat::Outcome &outcome, bool certain = true);

// Legacy iptables (x_tables) keeps its tables out of nf_tables, where no conflict can be
// found; /proc/net/ip_tables_names and ip6_tables_names list the ones that exist in this
// network namespace. `procNet` is /proc/net (a test may point elsewhere); a missing file
// means the module is not loaded.
struct LegacyNat {
	bool ipv4 = false; // an ip_tables nat table exists
	bool ipv6 = false; // an ip6_tables nat table exists
};
Result<LegacyNat> legacyNatTables(const std::string &procNet = "/proc/net");

} // namespace ipmasq
