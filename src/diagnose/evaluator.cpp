// SPDX-License-Identifier: Apache-2.0
// The NAT evaluator: every nat postrouting base chain, in priority order, for one synthetic
// first packet, a bounded, forking walk over decoded rules (each rule: rule_evaluator.h).
#include "ip-masq-agent/diagnose/evaluator.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/diagnose/rule_evaluator.h"

namespace ipmasq::nat {

// The codec's model by name, not `using namespace nft`: the model layer has its own
// Rule, Chain and Statement.
using nft::Chain;
using nft::NatRuleset;
using nft::Table;
using nft::TableFamily;
using nft::Verdict;
using nft::VerdictCode;
using nft::isNatPostrouting;

namespace {

// A base chain in the hook.
struct Entry {
	int32_t priority = 0;
	bool agent = false;
	uint32_t table = 0, chain = 0;
	ChainRef ref;
};

// A place in a chain of the entry's table (a jump or goto never leaves the table).
struct Frame {
	uint32_t chain = 0, rule = 0;
	auto operator<=>(const Frame &) const = default;
};

// The frames under the top of every stack a walk made, each kept once: a stack is the id of
// the stack under its top frame and that frame, so equal stacks have equal ids (by
// induction from the empty one, 0), and a state is a few numbers that compare exactly.
class Stacks
{
public:
	// The stack of `top` on the stack `below`.
	uint32_t push(uint32_t below, Frame top)
	{
		const auto [at, added] = ids_.try_emplace({below, top}, static_cast<uint32_t>(frames_.size() + 1));
		if (added)
			frames_.push_back({below, top});
		return at->second;
	}
	// The stack under the top of `stack` (not empty), and that top.
	std::pair<uint32_t, Frame> pop(uint32_t stack) const { return frames_[stack - 1]; }

private:
	std::map<std::pair<uint32_t, Frame>, uint32_t> ids_;
	std::vector<std::pair<uint32_t, Frame>> frames_;
};

// Where a path is, between two rules. Registers do not survive a rule boundary (each rule
// loads what it reads), so this is all that decides the path's future, and two paths in
// equal states share it.
struct State {
	uint32_t entry = 0; // index into the order
	uint32_t depth = 0; // of the stack; 0: the entry has not started
	Frame top; // where the path is (with depth > 0)
	uint32_t below = 0; // the rest of the stack (Stacks)
	std::optional<uint32_t> mark, ctMark;
	auto operator<=>(const State &) const = default;
};

// The state after `state`'s entry: the next one, its chain not started.
State nextEntry(const State &state)
{
	return {.entry = state.entry + 1, .depth = 0, .top = {}, .below = 0, .mark = state.mark, .ctMark = state.ctMark};
}

// Where the paths go: every nat postrouting base chain of one order, rule after rule, each
// rule's exits followed (jump, goto, return, accept, the policy), each state walked once.
class Walk
{
public:
	Walk(const NatRuleset &ruleset, const Table *agent, const Packet &packet,
	     const NodeAddresses &node, const Limits &limits, NatVerdict &out);

	std::vector<Entry> entries() const;
	// Walks one order of the entries.
	void run(const std::vector<Entry> &order);
	bool exhausted() const { return steps_ >= limits_.maxSteps; }
	size_t steps() const { return steps_; }

private:
	const Table &table(uint32_t index) const
	{
		return index < ruleset_.tables.size() ? ruleset_.tables[index] : *agent_;
	}
	void step(State state);
	void afterRule(const State &state, const RuleExit &exit, const RuleRef &rule);
	void applyVerdict(State state, const Verdict &verdict, const RuleRef &rule);
	void endOfBaseChain(State state);
	// Leaves the current chain: back to the rule after the jump, or the base chain's end.
	void returnFromChain(State state);
	void reach(Outcome outcome);
	RuleRef ruleRef(const State &state) const;
	Placement placementOf(int32_t priority) const;
	Outcome at(const State &state, std::optional<RuleRef> rule, NatAction action,
		   std::optional<AddressRange> addresses = std::nullopt) const;
	// Reaches an undetermined outcome in the base chain `state` is in.
	void giveUp(const State &state, std::optional<RuleRef> rule, std::string reason);

	const NatRuleset &ruleset_;
	const Table *agent_;
	const Packet &packet_;
	const Limits &limits_;
	NatVerdict &out_;
	RuleEvaluator rules_;
	int32_t agentPriority_ = 110;
	size_t steps_ = 0;
	std::vector<std::unordered_map<std::string, uint32_t>> chainIndex_;
	bool reached_ = false; // the current order reached an outcome
	std::vector<Entry> order_; // the order being walked
	std::vector<State> work_; // the states of the order still to walk
	Stacks stacks_;
};

bool familyApplies(TableFamily family, Family packet)
{
	return family == TableFamily::inet || (family == TableFamily::ip) == (packet == Family::ipv4);
}

Walk::Walk(const NatRuleset &ruleset, const Table *agent, const Packet &packet,
	   const NodeAddresses &node, const Limits &limits, NatVerdict &out)
	: ruleset_(ruleset), agent_(agent), packet_(packet), limits_(limits), out_(out),
	  rules_(packet, node, limits, out.mayPoints)
{
	const size_t tables = ruleset_.tables.size() + (agent_ ? 1 : 0);
	chainIndex_.resize(tables);
	for (uint32_t t = 0; t < tables; t++) {
		const auto &chains = table(t).chains;
		for (size_t c = 0; c < chains.size(); c++) {
			chainIndex_[t].emplace(chains[c].name, static_cast<uint32_t>(c));
			if (t == ruleset_.tables.size() && isNatPostrouting(chains[c]))
				agentPriority_ = chains[c].base->priority;
		}
	}
}

std::vector<Entry> Walk::entries() const
{
	std::vector<Entry> found;
	for (uint32_t t = 0; t < chainIndex_.size(); t++) {
		const Table &tab = table(t);
		if (!familyApplies(tab.family, packet_.source.family))
			continue;
		for (size_t c = 0; c < tab.chains.size(); c++) {
			const Chain &chain = tab.chains[c];
			if (isNatPostrouting(chain))
				found.push_back({chain.base->priority, t == ruleset_.tables.size(), t,
						 static_cast<uint32_t>(c),
						 {tab.family, tab.name, chain.name, chain.base->priority}});
		}
	}
	// Priority first; among equals a stable order of names (the kernel's is by
	// registration, which a dump does not tell: the caller tries every order).
	std::sort(found.begin(), found.end(), [](const Entry &a, const Entry &b) {
		return std::tie(a.priority, a.ref.family, a.ref.table, a.ref.chain, a.agent) <
		       std::tie(b.priority, b.ref.family, b.ref.table, b.ref.chain, b.agent);
	});
	return found;
}

RuleRef Walk::ruleRef(const State &state) const
{
	const Table &t = table(order_[state.entry].table);
	const Chain &chain = t.chains[state.top.chain];
	return {t.family, t.name, chain.name, chain.rules[state.top.rule].handle, state.top.rule};
}

Placement Walk::placementOf(int32_t priority) const
{
	if (priority < agentPriority_)
		return Placement::beforeAgent;
	return priority == agentPriority_ ? Placement::tiedWithAgent : Placement::afterAgent;
}

// An outcome in the base chain `state` is in, decided by `rule`.
Outcome Walk::at(const State &state, std::optional<RuleRef> rule, NatAction action,
		 std::optional<AddressRange> addresses) const
{
	const Entry &entry = order_[state.entry];
	Outcome o;
	o.action = action;
	o.addresses = std::move(addresses);
	o.base = entry.ref;
	o.placement = entry.agent ? Placement::tiedWithAgent : placementOf(entry.priority);
	o.rule = std::move(rule);
	o.decider = entry.agent ? Decider::agent : Decider::rule;
	return o;
}

void Walk::giveUp(const State &state, std::optional<RuleRef> rule, std::string reason)
{
	Outcome o = at(state, std::move(rule), NatAction::undetermined);
	o.decider = Decider::evaluator;
	o.reason = std::move(reason);
	reach(std::move(o));
}

void Walk::reach(Outcome outcome)
{
	// Reasons quote names from the kernel, which may hold any byte: make them safe to log.
	outcome.reason = escaped(outcome.reason);
	reached_ = true;
	auto &outcomes = out_.outcomes;
	if (std::find(outcomes.begin(), outcomes.end(), outcome) == outcomes.end())
		outcomes.push_back(std::move(outcome));
}

Outcome undeterminedOutcome(std::string reason)
{
	Outcome o;
	o.action = NatAction::undetermined;
	o.decider = Decider::evaluator;
	o.reason = std::move(reason);
	return o;
}

void Walk::run(const std::vector<Entry> &order)
{
	order_ = order;
	reached_ = false;
	// Exact states in a tree: no input can make two of them compare equal, nor slow the
	// look-up down (a hash of states that rules choose could be made to collide).
	std::set<State> visited;
	State start;
	start.mark = packet_.mark;
	start.ctMark = packet_.ctMark;
	work_ = {std::move(start)};
	while (!work_.empty()) {
		if (steps_ >= limits_.maxSteps) {
			reach(undeterminedOutcome(
				fmt::format("the evaluation stopped after {} steps (its bound)", limits_.maxSteps)));
			break;
		}
		State state = std::move(work_.back());
		work_.pop_back();
		// Two paths that meet in the same state share their future: walk it once.
		if (!visited.insert(state).second)
			continue;
		steps_++;
		step(std::move(state));
	}
	// Only a path that loops (goto in a circle) ends without an outcome.
	if (!reached_)
		reach(undeterminedOutcome("no path through the chains ends (a loop)"));
}

void Walk::step(State state)
{
	if (state.entry >= order_.size()) {
		reach({}); // nobody NATed it
		return;
	}
	const Entry &entry = order_[state.entry];
	const Table &t = table(entry.table);
	if (!t.unreadable.empty())
		return giveUp(state, std::nullopt, t.unreadable);
	if (state.depth == 0) {
		state.depth = 1;
		state.top = {entry.chain, 0};
	}
	const Chain &chain = t.chains[state.top.chain];
	if (state.top.rule >= chain.rules.size()) {
		returnFromChain(std::move(state)); // the end of a chain: an implicit return
		return;
	}
	const RuleRef ref = ruleRef(state);
	for (const RuleExit &exit : rules_.evaluate(t, chain.rules[state.top.rule], state.mark, state.ctMark, ref))
		afterRule(state, exit, ref);
}

void Walk::returnFromChain(State state)
{
	if (state.depth == 1)
		return endOfBaseChain(std::move(state));
	state.depth--;
	std::tie(state.below, state.top) = stacks_.pop(state.below);
	work_.push_back(std::move(state));
}

void Walk::endOfBaseChain(State state)
{
	const Entry &entry = order_[state.entry];
	const VerdictCode policy = table(entry.table).chains[entry.chain].base->policy;
	if (policy == VerdictCode::accept) {
		work_.push_back(nextEntry(state));
		return;
	}
	if (policy != VerdictCode::drop)
		return giveUp(state, std::nullopt, "the base chain's policy is neither accept nor drop");
	Outcome o = at(state, std::nullopt, NatAction::dropped);
	o.decider = Decider::policy;
	reach(std::move(o));
}

void Walk::afterRule(const State &state, const RuleExit &exit, const RuleRef &rule)
{
	State next = state;
	next.mark = exit.mark;
	next.ctMark = exit.ctMark;
	switch (exit.kind) {
	case RuleExit::Kind::next:
		next.top.rule++;
		work_.push_back(std::move(next));
		return;
	case RuleExit::Kind::verdict:
		applyVerdict(std::move(next), exit.verdict, rule);
		return;
	case RuleExit::Kind::nat:
		reach(at(state, rule, exit.action, exit.addresses));
		return;
	case RuleExit::Kind::undetermined:
		giveUp(state, rule, exit.reason);
		return;
	}
}

void Walk::applyVerdict(State state, const Verdict &verdict, const RuleRef &rule)
{
	switch (verdict.code) {
	case VerdictCode::accept:
		// accept ends this base chain only: the next nat chain still runs.
		work_.push_back(nextEntry(state));
		return;
	case VerdictCode::drop:
		reach(at(state, rule, NatAction::dropped));
		return;
	case VerdictCode::queue:
	case VerdictCode::stolen:
		return giveUp(state, rule, "the packet is handed to user space (queue)");
	case VerdictCode::continueRule:
	case VerdictCode::breakRule:
		state.top.rule++;
		work_.push_back(std::move(state));
		return;
	case VerdictCode::returnToCaller:
		returnFromChain(std::move(state));
		return;
	case VerdictCode::jump:
	case VerdictCode::goTo:
		break;
	}
	const auto &index = chainIndex_[order_[state.entry].table];
	const auto target = index.find(verdict.chain);
	if (target == index.end())
		return giveUp(state, rule, fmt::format("chain {} was not read", verdict.chain));
	if (verdict.code == VerdictCode::jump) {
		// At most 64 whatever the caller asks, as evaluator.h says (the kernel's own
		// limit is 16).
		if (state.depth > std::min<size_t>(limits_.maxJumpDepth, 64))
			return giveUp(state, rule, fmt::format("jumps nest deeper than {}", limits_.maxJumpDepth));
		state.top.rule++;
		state.below = stacks_.push(state.below, state.top);
		state.depth++;
	}
	state.top = {target->second, 0};
	work_.push_back(std::move(state));
}

// Every order of the entries that equal priorities allow, up to `max` (the sorted one
// first). `complete` says whether all were listed.
std::vector<std::vector<Entry>> orders(const std::vector<Entry> &sorted, size_t max, bool &complete)
{
	std::vector<std::vector<Entry>> out{sorted};
	complete = true;
	for (size_t start = 0, end; start < sorted.size(); start = end) {
		end = start + 1;
		while (end < sorted.size() && sorted[end].priority == sorted[start].priority)
			end++;
		if (end - start == 1)
			continue;
		std::vector<std::vector<Entry>> grown;
		for (const auto &base : out) {
			std::vector<size_t> perm(end - start);
			std::iota(perm.begin(), perm.end(), 0);
			do {
				if (grown.size() >= max) {
					complete = false;
					break;
				}
				auto order = base;
				for (size_t i = 0; i < perm.size(); i++)
					order[start + i] = base[start + perm[i]];
				grown.push_back(std::move(order));
			} while (std::next_permutation(perm.begin(), perm.end()));
		}
		out = std::move(grown);
	}
	return out;
}

} // namespace

bool NatVerdict::certain() const
{
	if (outcomes.empty())
		return false;
	const Outcome &first = outcomes.front();
	return std::all_of(outcomes.begin(), outcomes.end(), [&first](const Outcome &o) {
		return o.action != NatAction::undetermined && o.action == first.action &&
		       o.addresses == first.addresses;
	});
}

const Outcome &NatVerdict::decision() const
{
	static const Outcome kNone;
	return outcomes.empty() ? kNone : outcomes.front();
}

NatVerdict evaluate(const NatRuleset &ruleset, const Table *agent, const Packet &packet,
		    const NodeAddresses &node, const Limits &limits)
{
	NatVerdict verdict;
	if (packet.source.family != packet.destination.family) {
		verdict.outcomes.push_back(
			undeterminedOutcome("the packet's source and destination are of different families"));
		return verdict;
	}
	Walk walk(ruleset, agent, packet, node, limits, verdict);
	bool complete = true;
	for (const auto &order : orders(walk.entries(), std::max<size_t>(limits.maxOrders, 1), complete)) {
		if (walk.exhausted())
			break;
		walk.run(order);
	}
	if (!complete)
		verdict.outcomes.push_back(undeterminedOutcome(fmt::format(
			"more than {} orders of base chains with equal priorities", limits.maxOrders)));
	// A table the reader gave up on may have kept no chain (reader.h): where it sits in the
	// hook is not known, but it may do anything to every packet of its family. Without
	// this it would vanish from the walk, and "no chain NATs it" would be said unproven.
	for (const Table &t : ruleset.tables)
		if (!t.unreadable.empty() && familyApplies(t.family, packet.source.family) &&
		    std::none_of(t.chains.begin(), t.chains.end(), isNatPostrouting))
			verdict.outcomes.push_back(undeterminedOutcome(escaped(t.unreadable)));
	verdict.steps = walk.steps();
	return verdict;
}

} // namespace ipmasq::nat


