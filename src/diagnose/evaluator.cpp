// SPDX-License-Identifier: Apache-2.0
// The NAT evaluator: every nat postrouting base chain, in priority order, for one synthetic
// first packet, with three-valued bytes and a bounded, forking walk over decoded rules.
#include "ip-masq-agent/diagnose/evaluator.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/base/overloaded.h"

namespace ipmasq::nat {

using namespace nft;

namespace {

// Three-valued truth: what a match says about the packet.
enum class Tri { no, yes, maybe };

Tri triNot(Tri t)
{
	return t == Tri::maybe ? Tri::maybe : (t == Tri::yes ? Tri::no : Tri::yes);
}

Tri triAnd(Tri a, Tri b)
{
	if (a == Tri::no || b == Tri::no)
		return Tri::no;
	return a == Tri::yes && b == Tri::yes ? Tri::yes : Tri::maybe;
}

Tri triOf(bool b)
{
	return b ? Tri::yes : Tri::no;
}

// Bytes, each known or not.
struct Known {
	Bytes bytes;
	std::vector<bool> known;

	static Known unknown(size_t len) { return {Bytes(len, 0), std::vector<bool>(len, false)}; }
	static Known of(Bytes bytes)
	{
		const size_t len = bytes.size();
		return {std::move(bytes), std::vector<bool>(len, true)};
	}
	static Known of(std::span<const uint8_t> bytes) { return of(Bytes(bytes.begin(), bytes.end())); }
	static Known u32(uint32_t host)
	{
		Bytes b(4);
		std::memcpy(b.data(), &host, 4);
		return of(std::move(b));
	}
	bool allKnown() const { return std::all_of(known.begin(), known.end(), [](bool k) { return k; }); }
	std::optional<uint32_t> asU32() const
	{
		if (bytes.size() < 4 || !std::all_of(known.begin(), known.begin() + 4, [](bool k) { return k; }))
			return std::nullopt;
		uint32_t v;
		std::memcpy(&v, bytes.data(), 4);
		return v;
	}
};

Tri equalBytes(const Known &a, std::span<const uint8_t> b)
{
	bool unknown = false;
	for (size_t i = 0; i < b.size() && i < a.bytes.size(); i++) {
		if (!a.known[i])
			unknown = true;
		else if (a.bytes[i] != b[i])
			return Tri::no;
	}
	return unknown ? Tri::maybe : Tri::yes;
}

Tri compare(const Known &a, CmpOp op, std::span<const uint8_t> b)
{
	if (op == CmpOp::eq)
		return equalBytes(a, b);
	if (op == CmpOp::neq)
		return triNot(equalBytes(a, b));
	int sign = 0; // memcmp's, on bytes that may be unknown
	for (size_t i = 0; i < b.size() && i < a.bytes.size() && sign == 0; i++) {
		if (!a.known[i])
			return Tri::maybe;
		if (a.bytes[i] != b[i])
			sign = a.bytes[i] < b[i] ? -1 : 1;
	}
	switch (op) {
	case CmpOp::lt: return triOf(sign < 0);
	case CmpOp::lte: return triOf(sign <= 0);
	case CmpOp::gt: return triOf(sign > 0);
	case CmpOp::gte: return triOf(sign >= 0);
	case CmpOp::eq:
	case CmpOp::neq:
		break;
	}
	return Tri::maybe;
}

// ---- The packet as the hook sees it ----

bool hasPorts(std::optional<uint8_t> l4proto)
{
	return l4proto && (*l4proto == IPPROTO_TCP || *l4proto == IPPROTO_UDP ||
			   *l4proto == IPPROTO_SCTP || *l4proto == IPPROTO_UDPLITE ||
			   *l4proto == IPPROTO_DCCP);
}

void put(Known &into, size_t at, std::span<const uint8_t> bytes)
{
	for (size_t i = 0; i < bytes.size(); i++) {
		into.bytes[at + i] = bytes[i];
		into.known[at + i] = true;
	}
}

// The network header with what the synthetic packet fixes: addresses and protocol.
Known networkHeader(const Packet &packet)
{
	const bool v4 = packet.source.family == Family::ipv4;
	Known header = Known::unknown(v4 ? 20 : 40);
	if (packet.l4proto)
		put(header, v4 ? 9 : 6, std::span(&*packet.l4proto, 1));
	if (packet.sourceKnown)
		put(header, v4 ? 12 : 8, packet.source.bytes());
	put(header, v4 ? 16 : 24, packet.destination.bytes());
	return header;
}

Known transportHeader(const Packet &packet)
{
	Known header = Known::unknown(8);
	if (!hasPorts(packet.l4proto))
		return header;
	for (const auto &[at, port] : {std::pair{0, packet.sourcePort}, std::pair{2, packet.destinationPort}})
		if (port) {
			const uint8_t bytes[] = {uint8_t(*port >> 8), uint8_t(*port & 0xff)};
			put(header, size_t(at), bytes);
		}
	return header;
}

Known slice(const Known &from, uint32_t offset, uint32_t len)
{
	Known v = Known::unknown(len);
	for (uint32_t i = 0; i < len && size_t(offset) + i < from.bytes.size(); i++) {
		v.bytes[i] = from.bytes[offset + i];
		v.known[i] = from.known[offset + i];
	}
	return v;
}

Known interfaceName(const std::optional<std::string> &name)
{
	if (!name)
		return Known::unknown(IFNAMSIZ);
	Bytes bytes(IFNAMSIZ, 0);
	std::memcpy(bytes.data(), name->data(), std::min<size_t>(name->size(), IFNAMSIZ - 1));
	return Known::of(std::move(bytes));
}

uint8_t nfproto(const Packet &packet)
{
	return packet.source.family == Family::ipv4 ? NFPROTO_IPV4 : NFPROTO_IPV6;
}

// ---- Address types (fib daddr type, -m addrtype) ----

bool inPrefix(const Address &address, const NodeAddress &local)
{
	if (address.family != local.address.family)
		return false;
	const unsigned bits = familyBits(address.family);
	const unsigned shift = bits - std::min(local.prefixLength, bits);
	return shift >= 128 || (address.value >> shift) == (local.address.value >> shift);
}

// The RTN_* type the kernel's local table gives `address`, or nullopt when the evaluator
// cannot tell (a subnet's broadcast or network address, an address list not complete).
std::optional<uint32_t> addressType(const Address &address, const NodeAddresses &node)
{
	const bool v4 = address.family == Family::ipv4;
	const AddressValue a = address.value;
	if ((v4 && (a >> 28) == 0xe) || (!v4 && (a >> 120) == 0xff))
		return RTN_MULTICAST;
	if (v4 && (a == 0xffffffff || (a >> 24) == 0))
		return RTN_BROADCAST;
	if (node.isLocal(address))
		return RTN_LOCAL;
	for (const NodeAddress &local : node.addresses) {
		const unsigned bits = familyBits(address.family);
		if (!inPrefix(address, local) || local.prefixLength >= bits - 1)
			continue;
		const unsigned hostBits = bits - local.prefixLength;
		const AddressValue hostMask =
			hostBits >= 128 ? ~AddressValue(0) : (AddressValue(1) << hostBits) - 1;
		// IPv4 broadcast and network addresses, IPv6 subnet-router anycast.
		if ((a & hostMask) == 0 || (v4 && (a & hostMask) == hostMask))
			return std::nullopt;
	}
	return node.complete ? std::optional<uint32_t>(RTN_UNICAST) : std::nullopt;
}

// ---- The walk ----

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

// How a rule ends on one path.
struct RuleExit {
	enum class Kind { next, verdict, nat, undetermined } kind = Kind::next;
	Verdict verdict = {};
	NatAction action = NatAction::none;
	std::optional<AddressRange> addresses = {};
	std::string reason = {};
	std::optional<uint32_t> mark = {}, ctMark = {};

	// Built field by field: GCC 12 at -O3 takes an aggregate with a defaulted Verdict for
	// one that may be read uninitialized (-Wmaybe-uninitialized), which fails the release
	// build.
	static RuleExit undetermined(std::string reason)
	{
		RuleExit e;
		e.kind = Kind::undetermined;
		e.action = NatAction::undetermined;
		e.reason = std::move(reason);
		return e;
	}
};

// One rule's evaluation on one path: its values and the marks as the rule goes, and the
// exits it produced so far (forks leave one each).
struct RuleRun {
	const Rule *rule = nullptr;
	std::vector<Known> values;
	std::optional<uint32_t> mark, ctMark;
	std::vector<RuleExit> exits;
	bool ended = false;

	void exit(RuleExit e)
	{
		if (e.kind == RuleExit::Kind::next || e.kind == RuleExit::Kind::verdict) {
			e.mark = mark;
			e.ctMark = ctMark;
		}
		exits.push_back(std::move(e));
	}
	void endWith(RuleExit e)
	{
		exit(std::move(e));
		ended = true;
	}
	void breakRule() { endWith({}); }
	void forkBreak() { exit({}); }
	void undetermined(std::string reason)
	{
		endWith(RuleExit::undetermined(std::move(reason)));
	}
	void verdict(Verdict v) { endWith({RuleExit::Kind::verdict, std::move(v)}); }
	Known read(ReadId id) const
	{
		Known out;
		for (const Slice &s : rule->read(id)) {
			const Known part = s.kind == Slice::Kind::value ? slice(values[s.value], s.offset, s.len)
					 : s.kind == Slice::Kind::zero ? Known::of(Bytes(s.len, 0))
								       : Known::unknown(s.len);
			out.bytes.insert(out.bytes.end(), part.bytes.begin(), part.bytes.end());
			out.known.insert(out.known.end(), part.known.begin(), part.known.end());
		}
		return out;
	}
};

std::string hexBytes(const Bytes &bytes)
{
	return fmt::format("{:02x}", fmt::join(bytes, ""));
}

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
	std::vector<RuleExit> evaluateRule(const Table &table, const Rule &rule, const State &state,
					   const RuleRef &ref);
	void evaluate(const Table &table, const Statement &statement, RuleRun &run, const RuleRef &ref);
	void define(const Table &table, ValueId id, RuleRun &run, const RuleRef &ref);
	void match(Tri t, RuleRun &run, const RuleRef &ref, const std::string &why);
	const Set *usableSet(const Table &table, const std::string &name, RuleRun &run,
			     const RuleRef &ref, const Known &key);
	void verdictMap(const Table &table, const VerdictMap &v, RuleRun &run, const RuleRef &ref);
	void nat(const NatStatement &n, RuleRun &run);
	void other(const Other &o, RuleRun &run, const RuleRef &ref);
	Known metaValue(uint32_t key, std::optional<uint32_t> mark) const;
	Known ctValue(uint32_t key, std::optional<uint32_t> ctMark) const;
	Known fibValue(const FromFib &fib) const;
	Tri addressTypeMatches(const AddressTypeMatch &m) const;
	Tri typeMatches(uint16_t mask, bool invert, const Address &address) const;
	void reach(Outcome outcome);
	void may(const RuleRef &rule, const std::string &reason);
	RuleRef ruleRef(const State &state) const;
	Placement placementOf(int32_t priority) const;
	Outcome at(const State &state, std::optional<RuleRef> rule, NatAction action,
		   std::optional<AddressRange> addresses = std::nullopt) const;
	// Reaches an undetermined outcome in the base chain `state` is in.
	void giveUp(const State &state, std::optional<RuleRef> rule, std::string reason);

	const NatRuleset &ruleset_;
	const Table *agent_;
	const Packet &packet_;
	const NodeAddresses &node_;
	const Limits &limits_;
	NatVerdict &out_;
	Known network_, transport_;
	int32_t agentPriority_ = 110;
	size_t steps_ = 0;
	std::vector<std::unordered_map<std::string, uint32_t>> chainIndex_;
	std::set<std::string> mayKeys_;
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
	: ruleset_(ruleset), agent_(agent), packet_(packet), node_(node), limits_(limits), out_(out),
	  network_(networkHeader(packet)), transport_(transportHeader(packet))
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

void Walk::may(const RuleRef &rule, const std::string &unsafeReason)
{
	const std::string reason = escaped(unsafeReason);
	const std::string key = fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", tableFamilyName(rule.family),
					    rule.table, rule.chain, rule.handle, rule.position, reason);
	if (mayKeys_.insert(key).second)
		out_.mayPoints.push_back({rule, reason});
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
	for (const RuleExit &exit : evaluateRule(t, chain.rules[state.top.rule], state, ref))
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

std::vector<RuleExit> Walk::evaluateRule(const Table &t, const Rule &rule, const State &state,
					 const RuleRef &ref)
{
	RuleRun run;
	run.rule = &rule;
	run.values.resize(rule.values.size());
	run.mark = state.mark;
	run.ctMark = state.ctMark;
	size_t defined = 0;
	for (size_t i = 0; i < rule.statements.size() && !run.ended; i++) {
		// The values loaded before this statement, in order (a map's may end the rule).
		while (defined < rule.values.size() && rule.values[defined].before <= i && !run.ended)
			define(t, static_cast<ValueId>(defined++), run, ref);
		if (!run.ended)
			evaluate(t, rule.statements[i], run, ref);
	}
	if (!run.ended)
		run.exit({}); // NFT_CONTINUE to the end: on to the next rule
	return std::move(run.exits);
}

// A match: no ends the rule; maybe forks a "does not match" exit and goes on.
void Walk::match(Tri t, RuleRun &run, const RuleRef &ref, const std::string &why)
{
	if (t == Tri::no) {
		run.breakRule();
	} else if (t == Tri::maybe) {
		may(ref, why);
		run.forkBreak();
	}
}

Known Walk::metaValue(uint32_t key, std::optional<uint32_t> mark) const
{
	switch (key) {
	case NFT_META_PROTOCOL:
		return packet_.source.family == Family::ipv4 ? Known::of(Bytes{0x08, 0x00})
							     : Known::of(Bytes{0x86, 0xdd});
	case NFT_META_MARK:
		return mark ? Known::u32(*mark) : Known::unknown(4);
	case NFT_META_IIFNAME:
		return interfaceName(packet_.inputInterface);
	case NFT_META_OIFNAME:
		return interfaceName(packet_.outputInterface);
	case NFT_META_NFPROTO:
		return Known::of(Bytes{nfproto(packet_)});
	case NFT_META_L4PROTO:
		return packet_.l4proto ? Known::of(Bytes{*packet_.l4proto}) : Known::unknown(1);
	default:
		return Known::unknown(IFNAMSIZ); // the widest meta value
	}
}

Known Walk::ctValue(uint32_t key, std::optional<uint32_t> ctMark) const
{
	switch (key) {
	case NFT_CT_STATE:
		return Known::u32(8); // NF_CT_STATE_BIT(IP_CT_NEW): a first packet
	case NFT_CT_DIRECTION:
		return Known::of(Bytes{0}); // IP_CT_DIR_ORIGINAL
	case NFT_CT_STATUS: {
		// In host byte order: the byte of IPS_EXPECTED ... IPS_SRC_NAT_DONE is known clear.
		Known status = Known::unknown(4);
		status.known[std::endian::native == std::endian::little ? 0 : 3] = packet_.untranslated;
		return status;
	}
	case NFT_CT_MARK:
		return ctMark ? Known::u32(*ctMark) : Known::unknown(4);
	case NFT_CT_L3PROTOCOL:
		return Known::of(Bytes{nfproto(packet_)});
	case NFT_CT_PROTOCOL:
		return packet_.l4proto ? Known::of(Bytes{*packet_.l4proto}) : Known::unknown(1);
	default:
		return Known::unknown(16);
	}
}

Known Walk::fibValue(const FromFib &fib) const
{
	const uint32_t where = fib.flags & (NFTA_FIB_F_SADDR | NFTA_FIB_F_DADDR);
	const bool onInterface = fib.flags & (NFTA_FIB_F_IIF | NFTA_FIB_F_OIF | NFTA_FIB_F_PRESENT);
	if (fib.result != NFT_FIB_RESULT_ADDRTYPE || onInterface ||
	    (where != NFTA_FIB_F_SADDR && where != NFTA_FIB_F_DADDR))
		return Known::unknown(IFNAMSIZ);
	if (where == NFTA_FIB_F_SADDR && !packet_.sourceKnown)
		return Known::unknown(4);
	const auto type = addressType(where == NFTA_FIB_F_SADDR ? packet_.source : packet_.destination, node_);
	return type ? Known::u32(*type) : Known::unknown(4);
}

Tri Walk::typeMatches(uint16_t mask, bool invert, const Address &address) const
{
	if (mask == 0)
		return Tri::yes; // not asked
	const auto type = addressType(address, node_);
	if (!type)
		return Tri::maybe;
	return triOf((*type < 16 && (mask & (1u << *type))) != invert);
}

Tri Walk::addressTypeMatches(const AddressTypeMatch &m) const
{
	if (m.limitInterface)
		return Tri::maybe;
	const Tri bySource = packet_.sourceKnown || m.source == 0
				     ? typeMatches(m.source, m.invertSource, packet_.source)
				     : Tri::maybe;
	return triAnd(bySource, typeMatches(m.destination, m.invertDestination, packet_.destination));
}

// The set a look-up uses, or nullptr after forking "may" (set missing, not usable, key not
// known) on `run`.
const Set *Walk::usableSet(const Table &t, const std::string &name, RuleRun &run,
			   const RuleRef &ref, const Known &key)
{
	const Set *set = t.findSet(name);
	std::string why = !set ? fmt::format("set {} was not read", name) : set->unusable();
	if (why.empty() && !key.allKnown())
		why = fmt::format("the key of the look-up in {} is not known", name);
	if (why.empty())
		return set;
	may(ref, why);
	run.forkBreak();
	return nullptr;
}

void Walk::verdictMap(const Table &t, const VerdictMap &v, RuleRun &run, const RuleRef &ref)
{
	const Known key = run.read(v.key);
	const Set *set = usableSet(t, v.set, run, ref, key);
	if (set) {
		const auto found = set->find(key.bytes);
		if (!found)
			return run.breakRule();
		const Verdict *verdict = *found == Set::kCatchAll ? set->catchAllVerdict() : set->verdict(*found);
		if (!verdict)
			return run.undetermined(fmt::format("verdict map {} holds an element without a verdict",
							    v.set));
		if (verdict->code != VerdictCode::continueRule)
			run.verdict(*verdict);
		return;
	}
	// The key is not known: every verdict the map holds is possible (a list made when the
	// set was read: no scan of its elements here).
	const Set *known = t.findSet(v.set);
	if (!known || !known->unusable().empty())
		return run.undetermined(fmt::format("verdict map {} cannot be searched", v.set));
	if (known->verdicts().size() > limits_.maxVerdicts)
		return run.undetermined(fmt::format("verdict map {} has more than {} verdicts", v.set,
						    limits_.maxVerdicts));
	for (const Verdict &verdict : known->verdicts())
		if (verdict.code != VerdictCode::breakRule)
			run.exit({RuleExit::Kind::verdict, verdict});
	run.ended = true;
}

// Where a NAT statement puts the address: the range its reads give, mapped for NETMAP when
// the source is known.
std::optional<AddressRange> natRange(const NatStatement &n, const RuleRun &run, const Packet &packet)
{
	if (!n.addressMin || !n.addressMax)
		return std::nullopt;
	const Family family = packet.source.family;
	const Known lo = run.read(*n.addressMin), hi = run.read(*n.addressMax);
	const size_t len = family == Family::ipv4 ? 4 : 16;
	if (lo.bytes.size() != len || hi.bytes.size() != len || !lo.allKnown() || !hi.allKnown())
		return std::nullopt;
	AddressRange range{Address::fromBytes(family, lo.bytes.data()), Address::fromBytes(family, hi.bytes.data())};
	if ((n.flags & NF_NAT_RANGE_NETMAP) && packet.sourceKnown && n.kind == NatKind::snat) {
		// nf_nat's netmap: the prefix's network bits, the source's host bits.
		const AddressValue netmask = ~(range.first.value ^ range.last.value);
		const Address mapped{family, (packet.source.value & ~netmask) | (range.first.value & netmask)};
		range = {mapped, mapped};
	}
	return range;
}

void Walk::nat(const NatStatement &n, RuleRun &run)
{
	// In an inet table, "snat ip" does nothing to an IPv6 packet.
	if (n.family && *n.family != packet_.source.family)
		return;
	static constexpr NatAction kActions[] = {NatAction::masquerade, NatAction::snat,
						 NatAction::dnat, NatAction::redirect};
	RuleExit e{RuleExit::Kind::nat};
	e.action = kActions[static_cast<size_t>(n.kind)];
	e.addresses = natRange(n, run, packet_);
	run.endWith(std::move(e));
}

// A bitwise and/xor byte by byte (a byte masked to 0 is known); a shift is unknown.
Known masked(const Masked &m, const Known &source, uint32_t len)
{
	Known out = Known::unknown(len);
	const auto mask = m.mask(), xorValue = m.xorValue();
	if (m.op != BitwiseOp::boolean || mask.size() < len || xorValue.size() < len || source.bytes.size() < len)
		return out;
	for (uint32_t i = 0; i < len; i++)
		if (mask[i] == 0 || source.known[i]) {
			out.bytes[i] = (source.bytes[i] & mask[i]) ^ xorValue[i];
			out.known[i] = true;
		}
	return out;
}

// ntoh/hton in units of `size` bytes: a swap on a little-endian host; a unit is known
// when all its bytes are.
Known swapped(const Swapped &s, const Known &source, uint32_t len)
{
	if (s.size != 2 && s.size != 4 && s.size != 8)
		return Known::unknown(len);
	Known out = source;
	if (std::endian::native == std::endian::big)
		return out;
	for (size_t unit = 0; unit + s.size <= out.bytes.size(); unit += s.size) {
		const bool known = std::all_of(source.known.begin() + long(unit), source.known.begin() + long(unit + s.size),
					       [](bool k) { return k; });
		for (size_t i = 0; i < s.size; i++) {
			out.bytes[unit + i] = source.bytes[unit + s.size - 1 - i];
			out.known[unit + i] = known;
		}
	}
	return out;
}

void Walk::define(const Table &t, ValueId id, RuleRun &run, const RuleRef &ref)
{
	const Value &value = run.rule->values[id];
	Known &out = run.values[id];
	std::visit(
		Overloaded{
			[&](const FromPayload &p) {
				out = p.base == PayloadBase::network	 ? slice(network_, p.offset, value.len)
				      : p.base == PayloadBase::transport ? slice(transport_, p.offset, value.len)
									 : Known::unknown(value.len);
			},
			[&](const FromMeta &m) { out = metaValue(m.key, run.mark); },
			[&](const FromCt &c) { out = ctValue(c.key, run.ctMark); },
			[&](const FromFib &f) { out = fibValue(f); },
			[&](const Constant &c) { out = Known::of(c.bytes); },
			[&](const OtherLoad &) { out = Known::unknown(value.len); },
			[&](const Masked &m) { out = masked(m, run.read(m.source), value.len); },
			[&](const Swapped &s) { out = swapped(s, run.read(s.source), value.len); },
			[&](const MapData &m) {
				const Known key = run.read(m.key);
				out = Known::unknown(value.len);
				const Set *set = usableSet(t, m.set, run, ref, key);
				if (!set)
					return; // forked: a path without an element, and one with any data
				const auto found = set->find(key.bytes);
				if (!found)
					return run.breakRule();
				out = Known::of(*found == Set::kCatchAll ? set->catchAllData() : set->data(*found));
			},
		},
		value.source);
	out.bytes.resize(value.len, 0);
	out.known.resize(value.len, false);
}

void Walk::evaluate(const Table &t, const Statement &statement, RuleRun &run, const RuleRef &ref)
{
	std::visit(
		Overloaded{
			[&](const Compare &c) {
				match(compare(run.read(c.lhs), c.op, c.data), run, ref,
				      fmt::format("a comparison with {} reads bytes that are not known",
						  hexBytes(c.data)));
			},
			[&](const InRange &r) {
				const Known v = run.read(r.lhs);
				const Tri in = triAnd(compare(v, CmpOp::gte, r.from()), compare(v, CmpOp::lte, r.to()));
				match(r.negated ? triNot(in) : in, run, ref,
				      "a range compares bytes that are not known");
			},
			[&](const InSet &s) {
				const Known key = run.read(s.key);
				if (const Set *set = usableSet(t, s.set, run, ref, key))
					if (set->find(key.bytes).has_value() == s.invert)
						run.breakRule();
			},
			[&](const VerdictMap &v) { verdictMap(t, v, run, ref); },
			[&](const SetVerdict &v) { run.verdict(v.verdict); },
			[&](const SetMeta &m) {
				if (m.key == NFT_META_MARK)
					run.mark = run.read(m.value).asU32();
			},
			[&](const SetCt &c) {
				if (c.key == NFT_CT_MARK)
					run.ctMark = run.read(c.value).asU32();
			},
			[&](const AddressTypeMatch &a) {
				match(addressTypeMatches(a), run, ref,
				      "iptables match addrtype: the address type is not known");
			},
			[&](const XtMark &x) {
				if (run.mark)
					run.mark = (*run.mark & ~x.mask) ^ x.value;
			},
			[&](const NatStatement &n) { nat(n, run); },
			[&](const CounterStatement &) {},
			[&](const Other &o) { other(o, run, ref); },
		},
		statement);
}

// A statement known by its effect alone: none, a match that may fail, or one that may also
// decide the packet's fate or go on having changed anything.
void Walk::other(const Other &o, RuleRun &run, const RuleRef &ref)
{
	if (o.effect == Other::Effect::none)
		return;
	may(ref, o.reason());
	run.forkBreak(); // it may not match
	if (o.effect != Other::Effect::mayDecide)
		return;
	run.exit(RuleExit::undetermined(o.reason()));
	run.mark.reset();
	run.ctMark.reset();
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
