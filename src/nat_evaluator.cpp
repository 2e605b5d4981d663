// SPDX-License-Identifier: Apache-2.0
// The NAT evaluator: every nat postrouting base chain, in priority order, for one
// synthetic first packet, with three-valued registers and a bounded, forking walk.
#include "ip-masq-agent/nat_evaluator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <fmt/format.h>

#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/overloaded.h"

namespace ipmasq::nat {

namespace {

// nf_tables' register file as bytes: the verdict register (16 bytes) and then NFT_REG_1..4,
// which NFT_REG32_00..15 address in 4-byte steps.
constexpr size_t kRegisterBytes = 16 + 4 * NFT_REG_SIZE;

// The byte offset of register `reg` for an access of `len` bytes, if it fits.
std::optional<size_t> registerOffset(uint32_t reg, size_t len)
{
	size_t offset;
	if (reg >= NFT_REG_1 && reg <= NFT_REG_4)
		offset = reg * NFT_REG_SIZE;
	else if (reg >= NFT_REG32_00 && reg <= NFT_REG32_15)
		offset = 16 + (reg - NFT_REG32_00) * 4;
	else
		return std::nullopt;
	if (len > kRegisterBytes - offset)
		return std::nullopt;
	return offset;
}

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
struct Value {
	Bytes bytes;
	std::vector<bool> known;

	static Value unknown(size_t len) { return {Bytes(len, 0), std::vector<bool>(len, false)}; }
	static Value of(Bytes bytes)
	{
		const size_t len = bytes.size();
		return {std::move(bytes), std::vector<bool>(len, true)};
	}
	static Value u32(uint32_t host)
	{
		Bytes b(4);
		std::memcpy(b.data(), &host, 4);
		return of(std::move(b));
	}
	bool allKnown() const
	{
		return std::all_of(known.begin(), known.end(), [](bool k) { return k; });
	}
	std::optional<uint32_t> asU32() const
	{
		if (bytes.size() < 4 || !std::all_of(known.begin(), known.begin() + 4, [](bool k) { return k; }))
			return std::nullopt;
		uint32_t v;
		std::memcpy(&v, bytes.data(), 4);
		return v;
	}
};

class Registers
{
public:
	Registers() { known_.fill(false); value_.fill(0); }

	// Stores `v` at `reg` as the kernel's loads do: the rest of the last 4-byte word is
	// zeroed. False when the register does not hold it.
	bool store(uint32_t reg, const Value &v)
	{
		const size_t padded = (v.bytes.size() + 3) / 4 * 4;
		const auto offset = registerOffset(reg, padded);
		if (!offset)
			return false;
		for (size_t i = 0; i < padded; i++) {
			value_[*offset + i] = i < v.bytes.size() ? v.bytes[i] : 0;
			known_[*offset + i] = i < v.bytes.size() ? v.known[i] : true;
		}
		return true;
	}
	// Marks `len` bytes (0: all to the end) from `reg` unknown; false on a bad register.
	bool forget(uint32_t reg, size_t len)
	{
		const auto offset = registerOffset(reg, 0);
		if (!offset)
			return false;
		const size_t end = len == 0 ? kRegisterBytes : std::min(kRegisterBytes, *offset + len);
		for (size_t i = *offset; i < end; i++)
			known_[i] = false;
		return true;
	}
	void forgetAll() { known_.fill(false); }
	std::optional<Value> load(uint32_t reg, size_t len) const
	{
		const auto offset = registerOffset(reg, len);
		if (!offset)
			return std::nullopt;
		Value v = Value::unknown(len);
		for (size_t i = 0; i < len; i++) {
			v.bytes[i] = value_[*offset + i];
			v.known[i] = known_[*offset + i];
		}
		return v;
	}

private:
	std::array<uint8_t, kRegisterBytes> value_;
	std::array<bool, kRegisterBytes> known_;
};

// memcmp(a, b) on bytes that may be unknown: the sign, or nullopt.
std::optional<int> compareBytes(const Value &a, const Bytes &b)
{
	for (size_t i = 0; i < b.size(); i++) {
		if (!a.known[i])
			return std::nullopt;
		if (a.bytes[i] != b[i])
			return a.bytes[i] < b[i] ? -1 : 1;
	}
	return 0;
}

Tri equalBytes(const Value &a, const Bytes &b)
{
	bool unknown = false;
	for (size_t i = 0; i < b.size(); i++) {
		if (!a.known[i])
			unknown = true;
		else if (a.bytes[i] != b[i])
			return Tri::no;
	}
	return unknown ? Tri::maybe : Tri::yes;
}

Tri compare(const Value &a, CmpOp op, const Bytes &b)
{
	if (op == CmpOp::eq)
		return equalBytes(a, b);
	if (op == CmpOp::neq)
		return triNot(equalBytes(a, b));
	const auto d = compareBytes(a, b);
	if (!d)
		return Tri::maybe;
	switch (op) {
	case CmpOp::lt:
		return triOf(*d < 0);
	case CmpOp::lte:
		return triOf(*d <= 0);
	case CmpOp::gt:
		return triOf(*d > 0);
	case CmpOp::gte:
		return triOf(*d >= 0);
	case CmpOp::eq:
	case CmpOp::neq:
		break;
	}
	return Tri::maybe;
}

bool isLittleEndianHost()
{
	const uint16_t probe = 1;
	uint8_t first;
	std::memcpy(&first, &probe, 1);
	return first == 1;
}

// ---- The packet as the hook sees it ----

bool hasPorts(std::optional<uint8_t> l4proto)
{
	if (!l4proto)
		return false;
	switch (*l4proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_SCTP:
	case IPPROTO_UDPLITE:
	case IPPROTO_DCCP:
		return true;
	default:
		return false;
	}
}

// The network header with what the synthetic packet fixes: addresses and protocol. The
// rest (version/IHL, lengths, TTL, flow label...) is unknown.
Value networkHeader(const Packet &packet)
{
	const bool v4 = packet.source.family == Family::ipv4;
	Value header = Value::unknown(v4 ? 20 : 40);
	const auto put = [&header](size_t at, const Bytes &bytes) {
		for (size_t i = 0; i < bytes.size(); i++) {
			header.bytes[at + i] = bytes[i];
			header.known[at + i] = true;
		}
	};
	if (packet.l4proto)
		put(v4 ? 9 : 6, {*packet.l4proto});
	if (packet.sourceKnown)
		put(v4 ? 12 : 8, packet.source.bytes());
	put(v4 ? 16 : 24, packet.destination.bytes());
	return header;
}

Value transportHeader(const Packet &packet)
{
	Value header = Value::unknown(8);
	if (!hasPorts(packet.l4proto))
		return header;
	const auto putPort = [&header](size_t at, std::optional<uint16_t> port) {
		if (!port)
			return;
		header.bytes[at] = static_cast<uint8_t>(*port >> 8);
		header.bytes[at + 1] = static_cast<uint8_t>(*port & 0xff);
		header.known[at] = header.known[at + 1] = true;
	};
	putPort(0, packet.sourcePort);
	putPort(2, packet.destinationPort);
	return header;
}

Value slice(const Value &from, uint32_t offset, uint32_t len)
{
	Value v = Value::unknown(len);
	for (uint32_t i = 0; i < len; i++) {
		const size_t at = size_t(offset) + i;
		if (at < from.bytes.size()) {
			v.bytes[i] = from.bytes[at];
			v.known[i] = from.known[at];
		}
	}
	return v;
}

Value ifname(const std::optional<std::string> &name)
{
	if (!name)
		return Value::unknown(IFNAMSIZ);
	Bytes bytes(IFNAMSIZ, 0);
	std::memcpy(bytes.data(), name->data(), std::min<size_t>(name->size(), IFNAMSIZ - 1));
	return Value::of(std::move(bytes));
}

Value byteValue(std::optional<uint8_t> b)
{
	return b ? Value::of({*b}) : Value::unknown(1);
}

Value u32Value(std::optional<uint32_t> v)
{
	return v ? Value::u32(*v) : Value::unknown(4);
}

uint8_t nfproto(const Packet &packet)
{
	return packet.source.family == Family::ipv4 ? NFPROTO_IPV4 : NFPROTO_IPV6;
}

// ---- Address types (fib daddr type, -m addrtype) ----

bool inPrefix(const Address &address, const LocalAddress &local)
{
	if (address.family != local.address.family)
		return false;
	const unsigned bits = familyBits(address.family);
	if (local.prefixLength == 0)
		return true;
	const unsigned shift = bits - std::min(local.prefixLength, bits);
	return (address.value >> shift) == (local.address.value >> shift);
}

// The RTN_* type the kernel's local table gives `address`, or nullopt when the evaluator
// cannot tell (a subnet's broadcast or network address, or an address list that is not
// complete).
std::optional<uint32_t> addressType(const Address &address, const NodeAddresses &node)
{
	const bool v4 = address.family == Family::ipv4;
	const AddressValue a = address.value;
	if (v4 && (a >> 28) == 0xe)
		return RTN_MULTICAST;
	if (!v4 && (a >> 120) == 0xff)
		return RTN_MULTICAST;
	if (v4 && (a == 0xffffffff || (a >> 24) == 0))
		return RTN_BROADCAST;
	if ((v4 && (a >> 24) == 127) || (!v4 && a == 1))
		return RTN_LOCAL;
	for (const LocalAddress &local : node.addresses)
		if (local.address == address)
			return RTN_LOCAL;
	for (const LocalAddress &local : node.addresses) {
		if (!inPrefix(address, local))
			continue;
		const unsigned bits = familyBits(address.family);
		if (local.prefixLength >= bits - 1)
			continue;
		// A /0 of IPv6 has 128 host bits: a shift by 128 would be undefined.
		const unsigned hostBits = bits - local.prefixLength;
		const AddressValue hostMask =
			hostBits >= 128 ? ~AddressValue(0) : (AddressValue(1) << hostBits) - 1;
		const AddressValue host = a & hostMask;
		// IPv4 broadcast and network addresses, IPv6 subnet-router anycast.
		if (host == 0 || (v4 && host == hostMask))
			return std::nullopt;
	}
	if (!node.complete)
		return std::nullopt;
	return RTN_UNICAST;
}

// ---- Sets ----

int compareKeys(const Bytes &a, const Bytes &b)
{
	const size_t len = std::min(a.size(), b.size());
	return len == 0 ? 0 : std::memcmp(a.data(), b.data(), len); // an empty vector's data() may be null
}

// A set ready for look-ups: its elements sorted by key, or why it cannot be used.
struct PreparedSet {
	const Set *set = nullptr;
	std::vector<const SetElement *> sorted;
	const SetElement *catchAll = nullptr;
	std::string unusable;
};

PreparedSet prepareSet(const Set &set)
{
	PreparedSet prepared;
	prepared.set = &set;
	if (!set.complete)
		prepared.unusable = fmt::format("set {} was not read whole", set.name);
	else if (set.flags & (NFT_SET_EVAL | NFT_SET_TIMEOUT))
		prepared.unusable = fmt::format("set {} changes by itself (dynamic or with timeouts)",
						set.name);
	else if ((set.flags & NFT_SET_INTERVAL) && (set.flags & NFT_SET_CONCAT))
		prepared.unusable = fmt::format("set {} holds concatenated ranges", set.name);
	if (!prepared.unusable.empty())
		return prepared;
	for (const SetElement &element : set.elements) {
		if (element.catchAll) {
			prepared.catchAll = &element;
			continue;
		}
		if (element.key.size() != set.keyLen || !element.keyEnd.empty()) {
			prepared.unusable = fmt::format("set {} holds elements of another shape",
							set.name);
			return prepared;
		}
		prepared.sorted.push_back(&element);
	}
	// Ends before starts at the same key: a range that starts where another ends wins.
	std::stable_sort(prepared.sorted.begin(), prepared.sorted.end(),
			 [](const SetElement *a, const SetElement *b) {
				 const int d = compareKeys(a->key, b->key);
				 return d != 0 ? d < 0 : (a->intervalEnd && !b->intervalEnd);
			 });
	return prepared;
}

// The element `key` finds: nullptr for none. Only for keys that are wholly known.
const SetElement *findElement(const PreparedSet &prepared, const Bytes &key)
{
	const auto &sorted = prepared.sorted;
	const auto after = std::upper_bound(sorted.begin(), sorted.end(), key,
					    [](const Bytes &k, const SetElement *e) {
						    return compareKeys(k, e->key) < 0;
					    });
	const SetElement *found = nullptr;
	if (prepared.set->flags & NFT_SET_INTERVAL) {
		if (after != sorted.begin() && !(*(after - 1))->intervalEnd)
			found = *(after - 1);
	} else if (after != sorted.begin() && compareKeys((*(after - 1))->key, key) == 0) {
		found = *(after - 1);
	}
	return found ? found : prepared.catchAll;
}

// ---- The walk ----

// A base chain in the hook, or the agent's.
struct Entry {
	int32_t priority = 0;
	bool agent = false;
	uint32_t table = 0;
	uint32_t chain = 0;
	ChainRef ref;
};

struct Frame {
	uint32_t table = 0;
	uint32_t chain = 0;
	uint32_t rule = 0;

	auto operator<=>(const Frame &) const = default;
};

// Where a path is, between two rules. Registers do not survive a rule boundary (each
// rule loads what it reads), so this is all that decides the path's future.
struct State {
	uint32_t entry = 0; // index into the order
	std::vector<Frame> stack; // empty: the entry has not started
	std::optional<uint32_t> mark;
	std::optional<uint32_t> ctMark;

	auto operator<=>(const State &) const = default;
};

// How a rule ends on one path.
struct RuleExit {
	enum class Kind { next, verdict, nat, undetermined } kind = Kind::next;
	Verdict verdict;
	NatAction action = NatAction::none;
	std::optional<Address> address;
	std::string reason;
	std::optional<uint32_t> mark;
	std::optional<uint32_t> ctMark;
};

// One rule's evaluation on one path: the registers and marks as the rule goes, and the
// exits it produced so far (forks leave one each).
struct RuleRun {
	Registers regs;
	std::optional<uint32_t> mark;
	std::optional<uint32_t> ctMark;
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
		RuleExit e;
		e.kind = RuleExit::Kind::undetermined;
		e.reason = std::move(reason);
		endWith(std::move(e));
	}
	void nat(NatAction action, std::optional<Address> address = std::nullopt)
	{
		RuleExit e;
		e.kind = RuleExit::Kind::nat;
		e.action = action;
		e.address = address;
		endWith(std::move(e));
	}
	void verdict(Verdict v)
	{
		RuleExit e;
		e.kind = RuleExit::Kind::verdict;
		e.verdict = std::move(v);
		endWith(std::move(e));
	}
};

std::string hexBytes(const Bytes &bytes)
{
	std::string out;
	for (uint8_t b : bytes)
		out += fmt::format("{:02x}", b);
	return out;
}

class Walk
{
public:
	Walk(const NatRuleset &ruleset, const Packet &packet, const NodeAddresses &node,
	     const AgentPlacement &agent, const Limits &limits, NatVerdict &out)
		: ruleset_(ruleset), packet_(packet), node_(node), agent_(agent), limits_(limits),
		  out_(out), network_(networkHeader(packet)), transport_(transportHeader(packet))
	{
		indexChains();
	}

	std::vector<Entry> entries() const;
	// Walks one order of the entries; the outcomes it reached.
	std::set<size_t> run(const std::vector<Entry> &order);
	bool exhausted() const { return steps_ >= limits_.maxRuleEvaluations; }
	size_t steps() const { return steps_; }

private:
	void indexChains();
	void step(const std::vector<Entry> &order, State state, std::vector<State> &work);
	void afterRule(const std::vector<Entry> &order, const State &state, const RuleExit &exit,
		       const RuleRef &rule, std::vector<State> &work);
	void applyVerdict(const std::vector<Entry> &order, State state, const Verdict &verdict,
			  const RuleRef &rule, std::vector<State> &work);
	void endOfBaseChain(const std::vector<Entry> &order, State state, std::vector<State> &work);
	void nextEntry(State state, std::vector<State> &work);
	std::vector<RuleExit> evaluateRule(const Table &table, const Rule &rule, const State &state,
					   const RuleRef &ref);
	void evaluateExpression(const Table &table, const Expression &expression, RuleRun &run,
				const RuleRef &ref);
	void match(Tri t, RuleRun &run, const RuleRef &ref, const std::string &why);
	void lookup(const Table &table, const Lookup &l, RuleRun &run, const RuleRef &ref);
	void compatMatch(const CompatMatch &m, RuleRun &run, const RuleRef &ref);
	void compatTarget(const CompatTarget &t, RuleRun &run, const RuleRef &ref);
	Value metaValue(uint32_t key, std::optional<uint32_t> mark) const;
	Value ctValue(uint32_t key, std::optional<uint32_t> ctMark) const;
	Value fibValue(const Fib &fib) const;
	Tri addrtypeMatches(uint16_t mask, bool invert, const Address &address) const;
	std::optional<Address> natAddress(const Nat &nat, const Registers &regs) const;
	void reach(Outcome outcome);
	void may(const RuleRef &rule, const std::string &reason);
	RuleRef ruleRef(const Frame &frame) const;
	Placement placementOf(int32_t priority) const;
	const PreparedSet &prepared(const Set &set);

	const NatRuleset &ruleset_;
	const Packet &packet_;
	const NodeAddresses &node_;
	const AgentPlacement &agent_;
	const Limits &limits_;
	NatVerdict &out_;
	Value network_;
	Value transport_;
	size_t steps_ = 0;
	std::vector<std::unordered_map<std::string, uint32_t>> chainIndex_;
	std::map<const Set *, PreparedSet> sets_;
	std::set<std::string> mayKeys_;
	std::set<size_t> reached_; // outcomes reached by the current order
};

void Walk::indexChains()
{
	chainIndex_.resize(ruleset_.tables.size());
	for (size_t t = 0; t < ruleset_.tables.size(); t++) {
		const auto &chains = ruleset_.tables[t].chains;
		for (size_t c = 0; c < chains.size(); c++)
			chainIndex_[t].emplace(chains[c].name, static_cast<uint32_t>(c));
	}
}

bool familyApplies(TableFamily family, Family packet)
{
	switch (family) {
	case TableFamily::inet:
		return true;
	case TableFamily::ip:
		return packet == Family::ipv4;
	case TableFamily::ip6:
		return packet == Family::ipv6;
	}
	return false;
}

std::vector<Entry> Walk::entries() const
{
	std::vector<Entry> found;
	for (size_t t = 0; t < ruleset_.tables.size(); t++) {
		const Table &table = ruleset_.tables[t];
		if (!familyApplies(table.family, packet_.source.family))
			continue;
		if (table.family == TableFamily::inet && table.name == agent_.table)
			continue; // the agent's own: placed from its decision instead
		for (size_t c = 0; c < table.chains.size(); c++) {
			const Chain &chain = table.chains[c];
			if (!chain.base || chain.base->type != "nat" ||
			    chain.base->hook != NF_INET_POST_ROUTING)
				continue;
			found.push_back({chain.base->priority, false, static_cast<uint32_t>(t),
					 static_cast<uint32_t>(c),
					 {table.family, table.name, chain.name, chain.base->priority}});
		}
	}
	Entry agent;
	agent.priority = agent_.priority;
	agent.agent = true;
	agent.ref = {TableFamily::inet, agent_.table, "(the agent)", agent_.priority};
	found.push_back(agent);
	// Priority first; among equals a stable order of names (the kernel's is by
	// registration, which a dump does not tell: the caller tries every order).
	std::sort(found.begin(), found.end(), [](const Entry &a, const Entry &b) {
		return std::tie(a.priority, a.ref.family, a.ref.table, a.ref.chain, a.agent) <
		       std::tie(b.priority, b.ref.family, b.ref.table, b.ref.chain, b.agent);
	});
	return found;
}

RuleRef Walk::ruleRef(const Frame &frame) const
{
	const Table &table = ruleset_.tables[frame.table];
	const Chain &chain = table.chains[frame.chain];
	return {table.family, table.name, chain.name, chain.rules[frame.rule].handle, frame.rule};
}

Placement Walk::placementOf(int32_t priority) const
{
	if (priority < agent_.priority)
		return Placement::beforeAgent;
	return priority == agent_.priority ? Placement::tiedWithAgent : Placement::afterAgent;
}

void Walk::reach(Outcome outcome)
{
	// Reasons quote names from the kernel, which may hold any byte: make them safe to log.
	outcome.reason = escaped(outcome.reason);
	auto &outcomes = out_.outcomes;
	const auto it = std::find(outcomes.begin(), outcomes.end(), outcome);
	if (it != outcomes.end()) {
		reached_.insert(static_cast<size_t>(it - outcomes.begin()));
		return;
	}
	reached_.insert(outcomes.size());
	outcomes.push_back(std::move(outcome));
}

void Walk::may(const RuleRef &rule, const std::string &unsafeReason)
{
	const std::string reason = escaped(unsafeReason);
	const std::string key = fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}",
					    tableFamilyName(rule.family), rule.table, rule.chain,
					    rule.handle, rule.position, reason);
	if (mayKeys_.insert(key).second)
		out_.mayPoints.push_back({rule, reason});
}

std::set<size_t> Walk::run(const std::vector<Entry> &order)
{
	reached_.clear();
	std::set<State> visited;
	State start;
	start.mark = packet_.mark;
	start.ctMark = packet_.ctMark;
	std::vector<State> work{std::move(start)};
	while (!work.empty()) {
		if (steps_ >= limits_.maxRuleEvaluations) {
			Outcome o;
			o.action = NatAction::undetermined;
			o.decider = Decider::evaluator;
			o.reason = fmt::format("the evaluation stopped after {} steps (its bound)",
					       limits_.maxRuleEvaluations);
			reach(std::move(o));
			break;
		}
		State state = std::move(work.back());
		work.pop_back();
		// Two paths that meet in the same state share their future: walk it once.
		if (!visited.insert(state).second)
			continue;
		steps_++;
		step(order, std::move(state), work);
	}
	if (reached_.empty()) {
		// Only a path that loops (goto in a circle) ends without an outcome.
		Outcome o;
		o.action = NatAction::undetermined;
		o.decider = Decider::evaluator;
		o.reason = "no path through the chains ends (a loop)";
		reach(std::move(o));
	}
	return reached_;
}

void Walk::nextEntry(State state, std::vector<State> &work)
{
	state.entry++;
	state.stack.clear();
	work.push_back(std::move(state));
}

void Walk::step(const std::vector<Entry> &order, State state, std::vector<State> &work)
{
	if (state.entry >= order.size()) {
		reach({}); // nobody NATed it
		return;
	}
	const Entry &entry = order[state.entry];
	if (entry.agent) {
		if (agent_.masquerades) {
			Outcome o;
			o.action = NatAction::masquerade;
			o.decider = Decider::agent;
			o.placement = Placement::tiedWithAgent;
			reach(std::move(o));
		} else {
			nextEntry(std::move(state), work);
		}
		return;
	}
	if (state.stack.empty())
		state.stack.push_back({entry.table, entry.chain, 0});
	const Frame frame = state.stack.back();
	const Table &table = ruleset_.tables[frame.table];
	const Chain &chain = table.chains[frame.chain];
	if (frame.rule >= chain.rules.size()) {
		// The end of a chain: an implicit return, or the base chain's policy.
		state.stack.pop_back();
		if (state.stack.empty())
			endOfBaseChain(order, std::move(state), work);
		else
			work.push_back(std::move(state));
		return;
	}
	const RuleRef ref = ruleRef(frame);
	for (const RuleExit &exit : evaluateRule(table, chain.rules[frame.rule], state, ref))
		afterRule(order, state, exit, ref, work);
}

void Walk::endOfBaseChain(const std::vector<Entry> &order, State state, std::vector<State> &work)
{
	const Entry &entry = order[state.entry];
	const Chain &chain = ruleset_.tables[entry.table].chains[entry.chain];
	switch (chain.base->policy) {
	case VerdictCode::drop: {
		Outcome o;
		o.action = NatAction::dropped;
		o.decider = Decider::policy;
		o.base = entry.ref;
		o.placement = placementOf(entry.priority);
		reach(std::move(o));
		return;
	}
	case VerdictCode::accept:
		nextEntry(std::move(state), work);
		return;
	case VerdictCode::queue:
	case VerdictCode::stolen:
	case VerdictCode::continueRule:
	case VerdictCode::breakRule:
	case VerdictCode::jump:
	case VerdictCode::goTo:
	case VerdictCode::returnToCaller:
		break;
	}
	Outcome o;
	o.action = NatAction::undetermined;
	o.decider = Decider::evaluator;
	o.base = entry.ref;
	o.placement = placementOf(entry.priority);
	o.reason = "the base chain's policy is neither accept nor drop";
	reach(std::move(o));
}

void Walk::afterRule(const std::vector<Entry> &order, const State &state, const RuleExit &exit,
		     const RuleRef &rule, std::vector<State> &work)
{
	const Entry &entry = order[state.entry];
	Outcome o;
	o.base = entry.ref;
	o.placement = placementOf(entry.priority);
	o.rule = rule;
	switch (exit.kind) {
	case RuleExit::Kind::next: {
		State next = state;
		next.stack.back().rule++;
		next.mark = exit.mark;
		next.ctMark = exit.ctMark;
		work.push_back(std::move(next));
		return;
	}
	case RuleExit::Kind::verdict: {
		State next = state;
		next.mark = exit.mark;
		next.ctMark = exit.ctMark;
		applyVerdict(order, std::move(next), exit.verdict, rule, work);
		return;
	}
	case RuleExit::Kind::nat:
		o.action = exit.action;
		o.address = exit.address;
		o.decider = Decider::rule;
		reach(std::move(o));
		return;
	case RuleExit::Kind::undetermined:
		o.action = NatAction::undetermined;
		o.decider = Decider::evaluator;
		o.reason = exit.reason;
		reach(std::move(o));
		return;
	}
}

void Walk::applyVerdict(const std::vector<Entry> &order, State state, const Verdict &verdict,
			const RuleRef &rule, std::vector<State> &work)
{
	const Entry &entry = order[state.entry];
	Outcome o;
	o.base = entry.ref;
	o.placement = placementOf(entry.priority);
	o.rule = rule;
	o.decider = Decider::evaluator;
	o.action = NatAction::undetermined;
	switch (verdict.code) {
	case VerdictCode::accept:
		// accept ends this base chain only: the next nat chain still runs.
		nextEntry(std::move(state), work);
		return;
	case VerdictCode::drop:
		o.action = NatAction::dropped;
		o.decider = Decider::rule;
		reach(std::move(o));
		return;
	case VerdictCode::queue:
	case VerdictCode::stolen:
		o.reason = "the packet is handed to user space (queue)";
		reach(std::move(o));
		return;
	case VerdictCode::continueRule:
	case VerdictCode::breakRule:
		state.stack.back().rule++;
		work.push_back(std::move(state));
		return;
	case VerdictCode::returnToCaller:
		state.stack.pop_back();
		if (state.stack.empty())
			endOfBaseChain(order, std::move(state), work);
		else
			work.push_back(std::move(state));
		return;
	case VerdictCode::jump:
	case VerdictCode::goTo:
		break;
	}
	const Frame from = state.stack.back();
	const auto &index = chainIndex_[from.table];
	const auto target = index.find(verdict.chain);
	if (target == index.end()) {
		o.reason = fmt::format("chain {} was not read", verdict.chain);
		reach(std::move(o));
		return;
	}
	if (verdict.code == VerdictCode::jump) {
		// Capped whatever the caller asks: every state carries its stack, so a deep one
		// would make each step slow (the kernel's own limit is 16).
		if (state.stack.size() > std::min<size_t>(limits_.maxJumpDepth, 64)) {
			o.reason = fmt::format("jumps nest deeper than {}", limits_.maxJumpDepth);
			reach(std::move(o));
			return;
		}
		state.stack.back().rule++;
		state.stack.push_back({from.table, target->second, 0});
	} else {
		state.stack.back() = {from.table, target->second, 0};
	}
	work.push_back(std::move(state));
}

std::vector<RuleExit> Walk::evaluateRule(const Table &table, const Rule &rule, const State &state,
					 const RuleRef &ref)
{
	RuleRun run;
	run.mark = state.mark;
	run.ctMark = state.ctMark;
	size_t evaluated = 0;
	for (const Expression &expression : rule.expressions) {
		if (evaluated++ >= limits_.maxExpressionsPerRule) {
			run.undetermined(fmt::format("the rule has more than {} expressions",
						     limits_.maxExpressionsPerRule));
			break;
		}
		evaluateExpression(table, expression, run, ref);
		if (run.ended)
			break;
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

Value Walk::metaValue(uint32_t key, std::optional<uint32_t> mark) const
{
	switch (key) {
	case NFT_META_PROTOCOL:
		return packet_.source.family == Family::ipv4 ? Value::of({0x08, 0x00})
							     : Value::of({0x86, 0xdd});
	case NFT_META_MARK:
		return u32Value(mark);
	case NFT_META_IIFNAME:
		return ifname(packet_.inputInterface);
	case NFT_META_OIFNAME:
		return ifname(packet_.outputInterface);
	case NFT_META_NFPROTO:
		return Value::of({nfproto(packet_)});
	case NFT_META_L4PROTO:
		return byteValue(packet_.l4proto);
	default:
		return Value::unknown(IFNAMSIZ); // the widest meta value
	}
}

Value Walk::ctValue(uint32_t key, std::optional<uint32_t> ctMark) const
{
	switch (key) {
	case NFT_CT_STATE:
		return Value::u32(8); // NF_CT_STATE_BIT(IP_CT_NEW): a first packet
	case NFT_CT_DIRECTION:
		return Value::of({0}); // IP_CT_DIR_ORIGINAL
	case NFT_CT_MARK:
		return u32Value(ctMark);
	case NFT_CT_L3PROTOCOL:
		return Value::of({nfproto(packet_)});
	case NFT_CT_PROTOCOL:
		return byteValue(packet_.l4proto);
	default:
		return Value::unknown(16);
	}
}

Value Walk::fibValue(const Fib &fib) const
{
	const uint32_t where = fib.flags & (NFTA_FIB_F_SADDR | NFTA_FIB_F_DADDR);
	const bool onInterface = fib.flags & (NFTA_FIB_F_IIF | NFTA_FIB_F_OIF | NFTA_FIB_F_PRESENT);
	if (fib.result != NFT_FIB_RESULT_ADDRTYPE || onInterface ||
	    (where != NFTA_FIB_F_SADDR && where != NFTA_FIB_F_DADDR))
		return Value::unknown(IFNAMSIZ);
	if (where == NFTA_FIB_F_SADDR && !packet_.sourceKnown)
		return Value::unknown(4);
	const Address &address = where == NFTA_FIB_F_SADDR ? packet_.source : packet_.destination;
	const auto type = addressType(address, node_);
	return type ? Value::u32(*type) : Value::unknown(4);
}

Tri Walk::addrtypeMatches(uint16_t mask, bool invert, const Address &address) const
{
	if (mask == 0)
		return Tri::yes; // not asked
	const auto type = addressType(address, node_);
	if (!type)
		return Tri::maybe;
	const bool in = *type < 16 && (mask & (1u << *type));
	return triOf(in != invert);
}

void Walk::compatMatch(const CompatMatch &m, RuleRun &run, const RuleRef &ref)
{
	const auto u16At = [&m](size_t at) {
		uint16_t v;
		std::memcpy(&v, m.info.data() + at, 2);
		return v;
	};
	const auto u32At = [&m](size_t at) {
		uint32_t v;
		std::memcpy(&v, m.info.data() + at, 4);
		return v;
	};
	const std::string name = fmt::format("iptables match {} (revision {})", m.name, m.revision);
	if (m.name == "comment")
		return;
	if (m.name == "addrtype" && (m.revision == 0 || m.revision == 1) && m.info.size() >= 8 &&
	    (m.revision == 1 || m.info.size() >= 12)) {
		const uint16_t source = u16At(0), dest = u16At(2);
		bool invertSource, invertDest;
		if (m.revision == 1) {
			const uint32_t flags = u32At(4);
			if (flags & (XT_ADDRTYPE_LIMIT_IFACE_IN | XT_ADDRTYPE_LIMIT_IFACE_OUT)) {
				match(Tri::maybe, run, ref,
				      name + ": types on one interface are not evaluated");
				return;
			}
			invertSource = flags & XT_ADDRTYPE_INVERT_SOURCE;
			invertDest = flags & XT_ADDRTYPE_INVERT_DEST;
		} else {
			invertSource = u32At(4) != 0;
			invertDest = u32At(8) != 0;
		}
		const Tri bySource = packet_.sourceKnown || source == 0
					     ? addrtypeMatches(source, invertSource, packet_.source)
					     : Tri::maybe;
		const Tri t = triAnd(bySource,
				     addrtypeMatches(dest, invertDest, packet_.destination));
		match(t, run, ref, name + ": the address type is not known");
		return;
	}
	if (m.name == "mark" && m.revision == 1 && m.info.size() >= 9) {
		const uint32_t mark = u32At(0), mask = u32At(4);
		const bool invert = m.info[8] != 0;
		const Tri t = run.mark ? triOf(((*run.mark & mask) == mark) != invert) : Tri::maybe;
		match(t, run, ref, name + ": the packet mark is not known");
		return;
	}
	match(Tri::maybe, run, ref, name + " is not understood");
}

// SNAT/DNAT targets: the first address of the range, when the target gives one.
std::optional<Address> compatNatAddress(const CompatTarget &t, Family family)
{
	uint32_t flags;
	size_t at;
	if (family == Family::ipv4 && t.revision == 0) {
		// nf_nat_ipv4_multi_range_compat: rangesize, then flags, min_ip.
		if (t.info.size() < 12)
			return std::nullopt;
		std::memcpy(&flags, t.info.data() + 4, 4);
		at = 8;
	} else {
		// nf_nat_range / nf_nat_range2: flags, then min_addr.
		if (t.info.size() < 20)
			return std::nullopt;
		std::memcpy(&flags, t.info.data(), 4);
		at = 4;
	}
	if (!(flags & NF_NAT_RANGE_MAP_IPS))
		return std::nullopt;
	AddressValue v = 0;
	const size_t len = family == Family::ipv4 ? 4 : 16;
	for (size_t i = 0; i < len; i++)
		v = (v << 8) | t.info[at + i];
	return Address{family, v};
}

void Walk::compatTarget(const CompatTarget &t, RuleRun &run, const RuleRef &ref)
{
	const Family family = packet_.source.family;
	if (t.name == "MASQUERADE")
		return run.nat(NatAction::masquerade);
	if (t.name == "SNAT")
		return run.nat(NatAction::snat, compatNatAddress(t, family));
	if (t.name == "DNAT")
		return run.nat(NatAction::dnat, compatNatAddress(t, family));
	if (t.name == "REDIRECT")
		return run.nat(NatAction::redirect);
	if (t.name == "MARK" && t.revision == 2 && t.info.size() >= 8) {
		// xt_mark_tginfo2: mark = (mark & ~mask) ^ value (--set/--or/--xor/--and-mark).
		uint32_t value, mask;
		std::memcpy(&value, t.info.data(), 4);
		std::memcpy(&mask, t.info.data() + 4, 4);
		if (run.mark)
			run.mark = (*run.mark & ~mask) ^ value;
		return run.endWith({}); // XT_CONTINUE: on to the next rule
	}
	if (t.name == "LOG")
		return run.endWith({});
	if (t.name == "RETURN")
		return run.verdict({VerdictCode::returnToCaller, {}});
	if (t.name == "ACCEPT")
		return run.verdict({VerdictCode::accept, {}});
	if (t.name == "DROP")
		return run.verdict({VerdictCode::drop, {}});
	// Unknown: it may go on (XT_CONTINUE, marks changed) or decide anything.
	const std::string why = fmt::format("iptables target {} (revision {}) is not understood",
					    t.name, t.revision);
	may(ref, why);
	RuleExit onwards;
	run.mark.reset();
	run.ctMark.reset();
	run.exit(onwards);
	run.undetermined(why);
}

std::optional<Address> Walk::natAddress(const Nat &nat, const Registers &regs) const
{
	if (!nat.addrMinReg)
		return std::nullopt;
	const Family family = packet_.source.family;
	const size_t len = family == Family::ipv4 ? 4 : 16;
	const auto v = regs.load(*nat.addrMinReg, len);
	if (!v || !v->allKnown())
		return std::nullopt;
	AddressValue value = 0;
	for (uint8_t b : v->bytes)
		value = (value << 8) | b;
	return Address{family, value};
}

const PreparedSet &Walk::prepared(const Set &set)
{
	auto it = sets_.find(&set);
	if (it == sets_.end())
		it = sets_.emplace(&set, prepareSet(set)).first;
	return it->second;
}

void Walk::lookup(const Table &table, const Lookup &l, RuleRun &run, const RuleRef &ref)
{
	const Set *set = table.findSet(l.set);
	if (!set) {
		// Nothing known of it: it may match, and a map may load anything.
		may(ref, fmt::format("set {} was not read", l.set));
		run.forkBreak();
		if (l.dreg && *l.dreg == NFT_REG_VERDICT)
			return run.undetermined(fmt::format("verdict map {} was not read", l.set));
		if (l.dreg)
			run.regs.forget(*l.dreg, 0);
		return;
	}
	const auto key = run.regs.load(l.sreg, set->keyLen);
	if (!key)
		return run.undetermined(fmt::format("a look-up in {} reads past the registers", l.set));
	const PreparedSet &p = prepared(*set);
	const bool isVmap = l.dreg && *l.dreg == NFT_REG_VERDICT;
	std::string unknownWhy = p.unusable;
	if (unknownWhy.empty() && !key->allKnown())
		unknownWhy = fmt::format("the key of the look-up in {} is not known", l.set);
	if (!unknownWhy.empty()) {
		may(ref, unknownWhy);
		run.forkBreak();
		if (!isVmap) {
			if (l.dreg)
				run.regs.forget(*l.dreg, set->dataLen);
			return;
		}
		// Every verdict the map holds is possible.
		std::vector<Verdict> verdicts;
		for (const SetElement &e : set->elements)
			if (e.verdict && std::find(verdicts.begin(), verdicts.end(), *e.verdict) == verdicts.end())
				verdicts.push_back(*e.verdict);
		if (verdicts.size() > limits_.maxCandidates)
			return run.undetermined(fmt::format("verdict map {} has more than {} verdicts",
							    l.set, limits_.maxCandidates));
		for (const Verdict &v : verdicts) {
			RuleExit e;
			e.kind = RuleExit::Kind::verdict;
			e.verdict = v;
			run.exit(std::move(e));
		}
		run.ended = true;
		return;
	}
	const SetElement *found = findElement(p, key->bytes);
	if (!l.dreg) {
		if ((found != nullptr) == l.invert)
			run.breakRule();
		return;
	}
	if (!found)
		return run.breakRule();
	if (isVmap) {
		if (!found->verdict)
			return run.undetermined(fmt::format("verdict map {} holds an element without "
							    "a verdict", l.set));
		if (found->verdict->code != VerdictCode::continueRule)
			run.verdict(*found->verdict);
		return;
	}
	if (!run.regs.store(*l.dreg, Value::of(found->data)))
		run.undetermined(fmt::format("a look-up in {} writes past the registers", l.set));
}

// The bytes of a bitwise result that can be known.
Value bitwise(const Bitwise &b, const Value &source)
{
	Value out = Value::unknown(b.len);
	if (b.op != BitwiseOp::boolean || b.mask.size() < b.len || b.xorValue.size() < b.len)
		return out;
	for (uint32_t i = 0; i < b.len; i++) {
		if (b.mask[i] == 0 || source.known[i]) {
			out.bytes[i] = (source.bytes[i] & b.mask[i]) ^ b.xorValue[i];
			out.known[i] = true;
		}
	}
	return out;
}

// ntoh/hton in units of `size` bytes: a swap on a little-endian host.
Value byteorder(const Byteorder &b, const Value &source)
{
	Value out = source;
	if (b.size != 2 && b.size != 4 && b.size != 8)
		return Value::unknown(b.len);
	if (!isLittleEndianHost())
		return out;
	for (size_t unit = 0; unit + b.size <= b.len; unit += b.size) {
		const bool known = std::all_of(source.known.begin() + unit,
					       source.known.begin() + unit + b.size,
					       [](bool k) { return k; });
		for (size_t i = 0; i < b.size; i++) {
			out.bytes[unit + i] = source.bytes[unit + b.size - 1 - i];
			out.known[unit + i] = known;
		}
	}
	return out;
}

void Walk::evaluateExpression(const Table &table, const Expression &expression, RuleRun &run,
			      const RuleRef &ref)
{
	const auto store = [&](uint32_t reg, const Value &v) {
		if (!run.regs.store(reg, v))
			run.undetermined("an expression writes past the registers");
	};
	const auto loadOr = [&](uint32_t reg, size_t len) -> std::optional<Value> {
		auto v = run.regs.load(reg, len);
		if (!v)
			run.undetermined("an expression reads past the registers");
		return v;
	};
	std::visit(
		Overloaded{
			[&](const PayloadLoad &p) {
				switch (p.base) {
				case PayloadBase::network:
					return store(p.dreg, slice(network_, p.offset, p.len));
				case PayloadBase::transport:
					return store(p.dreg, slice(transport_, p.offset, p.len));
				case PayloadBase::link:
				case PayloadBase::inner:
					return store(p.dreg, Value::unknown(p.len));
				}
			},
			[&](const MetaLoad &m) { store(m.dreg, metaValue(m.key, run.mark)); },
			[&](const MetaSet &m) {
				if (m.key != NFT_META_MARK)
					return; // nothing NAT's decision here depends on
				if (const auto v = loadOr(m.sreg, 4))
					run.mark = v->asU32();
			},
			[&](const CtLoad &c) { store(c.dreg, ctValue(c.key, run.ctMark)); },
			[&](const CtSet &c) {
				if (c.key != NFT_CT_MARK)
					return;
				if (const auto v = loadOr(c.sreg, 4))
					run.ctMark = v->asU32();
			},
			[&](const Fib &f) { store(f.dreg, fibValue(f)); },
			[&](const Bitwise &b) {
				if (const auto v = loadOr(b.sreg, b.len))
					store(b.dreg, bitwise(b, *v));
			},
			[&](const Byteorder &b) {
				if (const auto v = loadOr(b.sreg, b.len))
					store(b.dreg, byteorder(b, *v));
			},
			[&](const Cmp &c) {
				if (const auto v = loadOr(c.sreg, c.data.size()))
					match(compare(*v, c.op, c.data), run, ref,
					      fmt::format("a comparison with {} reads bytes that are "
							  "not known", hexBytes(c.data)));
			},
			[&](const Range &r) {
				const size_t len = std::max(r.from.size(), r.to.size());
				if (r.from.size() != r.to.size())
					return run.undetermined("a range's bounds differ in length");
				const auto v = loadOr(r.sreg, len);
				if (!v)
					return;
				Tri in = triAnd(compare(*v, CmpOp::gte, r.from),
						compare(*v, CmpOp::lte, r.to));
				match(r.negated ? triNot(in) : in, run, ref,
				      "a range compares bytes that are not known");
			},
			[&](const Lookup &l) { lookup(table, l, run, ref); },
			[&](const Immediate &i) { store(i.dreg, Value::of(i.data)); },
			[&](const ImmediateVerdict &v) {
				if (v.verdict.code != VerdictCode::continueRule)
					run.verdict(v.verdict);
			},
			[&](const Masquerade &) { run.nat(NatAction::masquerade); },
			[&](const Nat &n) {
				// In an inet table, "snat ip" does nothing to an IPv6 packet.
				if (n.family != NFPROTO_INET && n.family != 0 && n.family != nfproto(packet_))
					return;
				if (n.type == NatType::snat)
					run.nat(NatAction::snat, natAddress(n, run.regs));
				else
					run.nat(NatAction::dnat, natAddress(n, run.regs));
			},
			[&](const Redirect &) { run.nat(NatAction::redirect); },
			[&](const Counter &) {},
			[&](const Log &) {},
			[&](const Passthrough &) {},
			[&](const RateMatch &r) {
				match(Tri::maybe, run, ref, fmt::format("{} depends on earlier traffic",
									 r.name));
			},
			[&](const OpaqueLoad &o) {
				if (!run.regs.forget(o.dreg, o.len))
					run.undetermined("an expression writes past the registers");
			},
			[&](const CompatMatch &m) { compatMatch(m, run, ref); },
			[&](const CompatTarget &t) { compatTarget(t, run, ref); },
			[&](const Unknown &u) {
				// It may not match, may go on having changed anything, or may
				// decide a verdict of its own.
				const std::string why =
					fmt::format("expression {} is not understood", u.name);
				may(ref, why);
				run.forkBreak();
				RuleExit decides;
				decides.kind = RuleExit::Kind::undetermined;
				decides.reason = why;
				run.exit(std::move(decides));
				run.regs.forgetAll();
				run.mark.reset();
				run.ctMark.reset();
			},
		},
		expression);
}

// Every order of the entries that equal priorities allow, up to `max` (the sorted one
// first). `complete` says whether all were listed.
std::vector<std::vector<Entry>> orders(const std::vector<Entry> &sorted, size_t max, bool &complete)
{
	std::vector<std::vector<Entry>> out{sorted};
	complete = true;
	size_t start = 0;
	while (start < sorted.size()) {
		size_t end = start + 1;
		while (end < sorted.size() && sorted[end].priority == sorted[start].priority)
			end++;
		if (end - start > 1) {
			std::vector<std::vector<Entry>> grown;
			for (const auto &base : out) {
				std::vector<size_t> perm(end - start);
				for (size_t i = 0; i < perm.size(); i++)
					perm[i] = i;
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
		start = end;
	}
	return out;
}

} // namespace

const char *natActionName(NatAction action)
{
	switch (action) {
	case NatAction::none:
		return "no NAT";
	case NatAction::masquerade:
		return "masquerade";
	case NatAction::snat:
		return "snat";
	case NatAction::dnat:
		return "dnat";
	case NatAction::redirect:
		return "redirect";
	case NatAction::dropped:
		return "drop";
	case NatAction::undetermined:
		return "undetermined";
	}
	return "?";
}

bool NatVerdict::certain() const
{
	if (outcomes.empty())
		return false;
	const Outcome &first = outcomes.front();
	return std::all_of(outcomes.begin(), outcomes.end(), [&first](const Outcome &o) {
		return o.action != NatAction::undetermined && o.action == first.action &&
		       o.address == first.address;
	});
}

const Outcome &NatVerdict::decision() const
{
	static const Outcome kNone;
	return outcomes.empty() ? kNone : outcomes.front();
}

NatVerdict evaluate(const NatRuleset &ruleset, const Packet &packet, const NodeAddresses &node,
		    const AgentPlacement &agent, const Limits &limits)
{
	NatVerdict verdict;
	if (packet.source.family != packet.destination.family) {
		Outcome o;
		o.action = NatAction::undetermined;
		o.decider = Decider::evaluator;
		o.reason = "the packet's source and destination are of different families";
		verdict.outcomes.push_back(std::move(o));
		return verdict;
	}
	Walk walk(ruleset, packet, node, agent, limits, verdict);
	const std::vector<Entry> sorted = walk.entries();
	for (size_t i = 0; i < sorted.size(); i++) {
		const bool tiedBefore = i > 0 && sorted[i - 1].priority == sorted[i].priority;
		const bool tiedAfter = i + 1 < sorted.size() && sorted[i + 1].priority == sorted[i].priority;
		if (tiedBefore || tiedAfter)
			verdict.tiedChains.push_back(sorted[i].ref);
	}
	bool complete = true;
	std::optional<std::set<size_t>> first;
	for (const auto &order : orders(sorted, std::max<size_t>(limits.maxOrders, 1), complete)) {
		if (walk.exhausted())
			break;
		const std::set<size_t> reached = walk.run(order);
		if (!first)
			first = reached;
		else if (reached != *first)
			verdict.orderMatters = true;
	}
	if (!complete) {
		Outcome o;
		o.action = NatAction::undetermined;
		o.decider = Decider::evaluator;
		o.reason = fmt::format("more than {} orders of base chains with equal priorities",
				       limits.maxOrders);
		verdict.outcomes.push_back(std::move(o));
	}
	verdict.rulesEvaluated = walk.steps();
	return verdict;
}

} // namespace ipmasq::nat
