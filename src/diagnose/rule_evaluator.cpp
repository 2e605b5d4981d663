// SPDX-License-Identifier: Apache-2.0
// One rule on one path: three-valued bytes, the packet as the hook sees it, and each
// statement's effect.
#include "ip-masq-agent/diagnose/rule_evaluator.h"

#include <algorithm>
#include <cstring>
#include <set>

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

// The codec's model by name, not `using namespace nft`: the model layer has its own
// Rule, Chain and Statement.
using nft::AddressTypeMatch;
using nft::BitwiseOp;
using nft::Bytes;
using nft::CmpOp;
using nft::Compare;
using nft::Constant;
using nft::CounterStatement;
using nft::FromCt;
using nft::FromFib;
using nft::FromMeta;
using nft::FromPayload;
using nft::InRange;
using nft::InSet;
using nft::MapData;
using nft::Masked;
using nft::NatKind;
using nft::NatStatement;
using nft::Other;
using nft::OtherLoad;
using nft::PayloadBase;
using nft::ReadId;
using nft::Rule;
using nft::Set;
using nft::SetCt;
using nft::SetMeta;
using nft::SetVerdict;
using nft::Slice;
using nft::Statement;
using nft::Swapped;
using nft::Table;
using nft::Value;
using nft::ValueId;
using nft::Verdict;
using nft::VerdictCode;
using nft::VerdictMap;
using nft::XtMark;

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

// ---- What the rules read of the packet (meta, ct, fib, addrtype) ----

Known metaValue(const Packet &packet, uint32_t key, std::optional<uint32_t> mark)
{
	switch (key) {
	case NFT_META_PROTOCOL:
		return packet.source.family == Family::ipv4 ? Known::of(Bytes{0x08, 0x00})
							    : Known::of(Bytes{0x86, 0xdd});
	case NFT_META_MARK:
		return mark ? Known::u32(*mark) : Known::unknown(4);
	case NFT_META_IIFNAME:
		return interfaceName(packet.inputInterface);
	case NFT_META_OIFNAME:
		return interfaceName(packet.outputInterface);
	case NFT_META_NFPROTO:
		return Known::of(Bytes{nfproto(packet)});
	case NFT_META_L4PROTO:
		return packet.l4proto ? Known::of(Bytes{*packet.l4proto}) : Known::unknown(1);
	default:
		return Known::unknown(IFNAMSIZ); // the widest meta value
	}
}

Known ctValue(const Packet &packet, uint32_t key, std::optional<uint32_t> ctMark)
{
	switch (key) {
	case NFT_CT_STATE:
		return Known::u32(8); // NF_CT_STATE_BIT(IP_CT_NEW): a first packet
	case NFT_CT_DIRECTION:
		return Known::of(Bytes{0}); // IP_CT_DIR_ORIGINAL
	case NFT_CT_STATUS: {
		// In host byte order: the byte of IPS_EXPECTED ... IPS_SRC_NAT_DONE is known clear.
		Known status = Known::unknown(4);
		status.known[std::endian::native == std::endian::little ? 0 : 3] = packet.untranslated;
		return status;
	}
	case NFT_CT_MARK:
		return ctMark ? Known::u32(*ctMark) : Known::unknown(4);
	case NFT_CT_L3PROTOCOL:
		return Known::of(Bytes{nfproto(packet)});
	case NFT_CT_PROTOCOL:
		return packet.l4proto ? Known::of(Bytes{*packet.l4proto}) : Known::unknown(1);
	default:
		return Known::unknown(16);
	}
}

Known fibValue(const Packet &packet, const NodeAddresses &node, const FromFib &fib)
{
	const uint32_t where = fib.flags & (NFTA_FIB_F_SADDR | NFTA_FIB_F_DADDR);
	const bool onInterface = fib.flags & (NFTA_FIB_F_IIF | NFTA_FIB_F_OIF | NFTA_FIB_F_PRESENT);
	if (fib.result != NFT_FIB_RESULT_ADDRTYPE || onInterface ||
	    (where != NFTA_FIB_F_SADDR && where != NFTA_FIB_F_DADDR))
		return Known::unknown(IFNAMSIZ);
	if (where == NFTA_FIB_F_SADDR && !packet.sourceKnown)
		return Known::unknown(4);
	const auto type = addressType(where == NFTA_FIB_F_SADDR ? packet.source : packet.destination, node);
	return type ? Known::u32(*type) : Known::unknown(4);
}

Tri typeMatches(const NodeAddresses &node, uint16_t mask, bool invert, const Address &address)
{
	if (mask == 0)
		return Tri::yes; // not asked
	const auto type = addressType(address, node);
	if (!type)
		return Tri::maybe;
	return triOf((*type < 16 && (mask & (1u << *type))) != invert);
}

Tri addressTypeMatches(const Packet &packet, const NodeAddresses &node, const AddressTypeMatch &m)
{
	if (m.limitInterface)
		return Tri::maybe;
	const Tri bySource = packet.sourceKnown || m.source == 0
				     ? typeMatches(node, m.source, m.invertSource, packet.source)
				     : Tri::maybe;
	return triAnd(bySource, typeMatches(node, m.destination, m.invertDestination, packet.destination));
}

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

} // namespace

// The packet's headers as the rules read them, and the "may" points recorded so far.
class RuleEvaluator::Impl
{
public:
	Impl(const Packet &packet, const NodeAddresses &node, const Limits &limits,
	     std::vector<MayPoint> &mayPoints)
		: packet_(packet), node_(node), limits_(limits), mayPoints_(mayPoints),
		  network_(networkHeader(packet)), transport_(transportHeader(packet))
	{
	}

	// How `rule` ends, on each path it forks into, for a packet with these marks.
	std::vector<RuleExit> evaluateRule(const Table &table, const Rule &rule, std::optional<uint32_t> mark,
					   std::optional<uint32_t> ctMark, const RuleRef &ref);

private:
	void evaluate(const Table &table, const Statement &statement, RuleRun &run, const RuleRef &ref);
	void define(const Table &table, ValueId id, RuleRun &run, const RuleRef &ref);
	void match(Tri t, RuleRun &run, const RuleRef &ref, const std::string &why);
	const Set *usableSet(const Table &table, const std::string &name, RuleRun &run,
			     const RuleRef &ref, const Known &key);
	void verdictMap(const Table &table, const VerdictMap &v, RuleRun &run, const RuleRef &ref);
	void nat(const NatStatement &n, RuleRun &run);
	void other(const Other &o, RuleRun &run, const RuleRef &ref);
	void may(const RuleRef &rule, const std::string &reason);

	const Packet &packet_;
	const NodeAddresses &node_;
	const Limits &limits_;
	std::vector<MayPoint> &mayPoints_;
	Known network_, transport_;
	std::set<std::string> mayKeys_;
};

void RuleEvaluator::Impl::may(const RuleRef &rule, const std::string &unsafeReason)
{
	const std::string reason = escaped(unsafeReason);
	const std::string key = fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", tableFamilyName(rule.family),
					    rule.table, rule.chain, rule.handle, rule.position, reason);
	if (mayKeys_.insert(key).second)
		mayPoints_.push_back({rule, reason});
}

std::vector<RuleExit> RuleEvaluator::Impl::evaluateRule(const Table &t, const Rule &rule,
							std::optional<uint32_t> mark,
							std::optional<uint32_t> ctMark, const RuleRef &ref)
{
	RuleRun run;
	run.rule = &rule;
	run.values.resize(rule.values.size());
	run.mark = mark;
	run.ctMark = ctMark;
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
void RuleEvaluator::Impl::match(Tri t, RuleRun &run, const RuleRef &ref, const std::string &why)
{
	if (t == Tri::no) {
		run.breakRule();
	} else if (t == Tri::maybe) {
		may(ref, why);
		run.forkBreak();
	}
}

// The set a look-up uses, or nullptr after forking "may" (set missing, not usable, key not
// known) on `run`.
const Set *RuleEvaluator::Impl::usableSet(const Table &t, const std::string &name, RuleRun &run,
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

void RuleEvaluator::Impl::verdictMap(const Table &t, const VerdictMap &v, RuleRun &run, const RuleRef &ref)
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

void RuleEvaluator::Impl::nat(const NatStatement &n, RuleRun &run)
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

void RuleEvaluator::Impl::define(const Table &t, ValueId id, RuleRun &run, const RuleRef &ref)
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
			[&](const FromMeta &m) { out = metaValue(packet_, m.key, run.mark); },
			[&](const FromCt &c) { out = ctValue(packet_, c.key, run.ctMark); },
			[&](const FromFib &f) { out = fibValue(packet_, node_, f); },
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

void RuleEvaluator::Impl::evaluate(const Table &t, const Statement &statement, RuleRun &run, const RuleRef &ref)
{
	std::visit(
		Overloaded{
			[&](const Compare &c) {
				match(compare(run.read(c.lhs), c.op, c.data), run, ref,
				      fmt::format("a comparison with {:02x} reads bytes that are not known",
						  fmt::join(c.data, "")));
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
				match(addressTypeMatches(packet_, node_, a), run, ref,
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
void RuleEvaluator::Impl::other(const Other &o, RuleRun &run, const RuleRef &ref)
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

RuleEvaluator::RuleEvaluator(const Packet &packet, const NodeAddresses &node, const Limits &limits,
			     std::vector<MayPoint> &mayPoints)
	: impl_(std::make_unique<Impl>(packet, node, limits, mayPoints))
{
}

RuleEvaluator::~RuleEvaluator() = default;

std::vector<RuleExit> RuleEvaluator::evaluate(const Table &table, const Rule &rule, std::optional<uint32_t> mark,
					      std::optional<uint32_t> ctMark, const RuleRef &ref)
{
	return impl_->evaluateRule(table, rule, mark, ctMark, ref);
}

} // namespace ipmasq::nat
