// SPDX-License-Identifier: Apache-2.0
// Decoded rules in nft's listing syntax: the rule rebuilt as nft rebuilds it, then printed.
//
// The steps follow nft 1.0.6 (netlink_delinearize.c, payload.c, expression.c, statement.c,
// segtree.c), read, not copied: each register's value becomes an expression tree; the
// statements are then post-processed in order with a protocol context (which protocol each
// header base holds), which names raw payload loads, splits merged loads into fields,
// turns masks into fields, prefixes and flags, merges `>=`/`<=` pairs into ranges and
// leaves out protocol matches that a later match implies; then each statement prints.
// Trees nest at most kMaxDepth deep (a deeper part prints as unknown), so nothing here
// recurses without bound.
#include "ip-masq-agent/nft/codec/rule_text.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_log.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_synproxy.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/vocabulary.h"
#include "ip-masq-agent/base/overloaded.h"

namespace ipmasq::nft {

namespace {

constexpr int kMaxDepth = 16;

// nft's proto_unknown: a protocol match on a number nft has no header for.
const Protocol kUnknownProtocol{"unknown", Base::invalid, 0, 0, {}, {}};

// nft's operators (enum ops), in its order.
enum class Op : uint8_t { none, implicit, hton, ntoh, lshift, rshift, band, bxor, bor, eq, neq, lt, gt, lte, gte, neg };

enum class Kind : uint8_t {
	value, verdict, payload, exthdr, meta, ct, load, binop, unary, concat, prefix, range, setRef, map, mapping,
	list, flagcmp, relational, catchAll, unknown
};

using NodeId = int32_t;
constexpr NodeId kNone = -1;

// nft's struct expr, as far as listing needs it.
struct Node {
	Kind kind = Kind::unknown;
	Type type = Type::invalid;
	ByteOrder order = ByteOrder::invalid;
	uint32_t bits = 0;
	Wide value = 0; // a value: nft's integer (imported big-endian, swapped for host types)
	Bytes raw = {}; // a string value's bytes
	std::string text = {}; // a load's or verdict's text, an unknown part's description
	std::string after = {}; // a hash's text after its input
	// payload: where; protocol and field once named; exthdr's raw fields reuse them
	Base base = Base::invalid;
	uint32_t offset = 0;
	const Protocol *protocol = nullptr;
	int field = -1;
	bool protocolKey = false; // EXPR_F_PROTOCOL: the match names the next protocol
	// meta and ct
	uint32_t key = 0;
	int direction = -1;
	uint8_t nfproto = 0;
	Op op = Op::none;
	NodeId a = kNone, b = kNone, c = kNone; // operands: left, right (flagcmp: value), mask
	std::vector<NodeId> items = {}; // concat, list, an anonymous set's elements
	const Set *set = nullptr;
	bool anonymous = false, verdictMap = false, intervalEnd = false;
	// exthdr: the header (option, chunk) and field once named (field), its number and flags
	const ExthdrHeader *header = nullptr;
	uint8_t headerType = 0;
	uint32_t exthdrFlags = 0;
};

// A statement as nft's struct stmt: an expression (a match, a vmap) or a statement that
// prints itself from its operands.
struct Stmt {
	enum class Kind : uint8_t { expression, verdict, counter, nat, metaSet, ctSet, payloadSet, exthdrSet, xt, other };
	Kind kind = Kind::expression;
	NodeId expr = kNone; // expression; nat: address; payloadSet: the field written
	NodeId proto = kNone; // nat: ports; payloadSet: the value
	std::vector<NodeId> operands = {}; // other: its reads
	const Statement *source = nullptr;
	bool removed = false;
	bool natFamily = false; // nat: `snat ip to`, in an inet table or with a map
};

// nft's proto_ctx: the protocol each base holds, as the rule's matches establish it.
struct ProtocolContext {
	TableFamily family = TableFamily::ip;
	std::array<const Protocol *, 5> protocol{};
	uint8_t icmpType = 0;
	std::vector<const Protocol *> stackedLinks; // link headers below the current one (ether, vlan...)

	const Protocol *&at(Base base) { return protocol[size_t(base)]; }
};

// nft's payload_dep_ctx: the statements that are protocol dependencies, by base.
struct Dependencies {
	std::array<std::optional<size_t>, 6> pdeps{};
	std::optional<size_t> prev;
	uint8_t icmpType = 0;
};

// Text from the kernel as nft prints it, but on one line and never closing a quote early:
// quotes and control characters escaped (nft prints them raw; such a rule cannot be read
// back by nft either way), a backslash as it is (nft's own `eth\*`).
std::string printable(std::string_view text)
{
	std::string out;
	for (const char c : text) {
		const auto byte = static_cast<unsigned char>(c);
		if (c == '"')
			out += "\\\"";
		else if (byte < 0x20 || byte == 0x7f)
			out += c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : fmt::format("\\x{:02x}", byte);
		else
			out += c;
	}
	return out;
}

uint32_t paddedBits(uint32_t bits)
{
	return (bits + 31) / 32 * 32;
}

// Shifts of a value by a width the kernel gave: 128 or more bits shift everything out.
Wide shiftedLeft(Wide v, uint32_t bits)
{
	return bits >= 128 ? 0 : v << bits;
}

Wide shiftedRight(Wide v, uint32_t bits)
{
	return bits >= 128 ? 0 : v >> bits;
}

Wide mask(uint32_t bits)
{
	return bits >= 128 ? ~Wide(0) : (Wide(1) << bits) - 1;
}

Wide swapBytes(Wide v, uint32_t bytes)
{
	Wide out = 0;
	for (uint32_t i = 0; i < bytes && i < 16; i++, v >>= 8)
		out = (out << 8) | (v & 0xff);
	return out;
}

int lowestSet(Wide v)
{
	for (int i = 0; i < 128; i++)
		if ((v >> i) & 1)
			return i;
	return -1;
}

// `bits` bits (at most 128) of big-endian `bytes` from bit `from`, the first bit the most
// significant.
Wide bitsAt(const Bytes &bytes, uint32_t from, uint32_t bits)
{
	Wide out = 0;
	for (uint32_t i = from; i < from + bits && i / 8 < bytes.size(); i++)
		out = (out << 1) | ((bytes[i / 8] >> (7 - i % 8)) & 1);
	return out;
}

// The first clear bit at or above `from` (mpz_scan0).
int firstClear(Wide v, int from)
{
	for (int i = from; i < 128; i++)
		if (!((v >> i) & 1))
			return i;
	return 128;
}

int popcount(Wide v)
{
	return __builtin_popcountll(uint64_t(v)) + __builtin_popcountll(uint64_t(v >> 64));
}

bool isBitmask(Type type)
{
	return typeInfo(type).base == Type::bitmask;
}

bool isString(Type type)
{
	return typeInfo(type).base == Type::string;
}

std::string verdictText(const Verdict &v)
{
	switch (v.code) {
	case VerdictCode::accept: return "accept";
	case VerdictCode::drop: return "drop";
	case VerdictCode::queue: return "queue";
	case VerdictCode::stolen: return "stolen";
	case VerdictCode::continueRule: return "continue";
	case VerdictCode::breakRule: return "break";
	case VerdictCode::jump: return "jump " + printable(v.chain);
	case VerdictCode::goTo: return "goto " + printable(v.chain);
	case VerdictCode::returnToCaller: return "return";
	}
	return "continue";
}

std::string natFlagsText(uint32_t flags)
{
	std::string out;
	for (const auto &[flag, name] : {std::pair{NF_NAT_RANGE_PROTO_RANDOM, "random"},
					 {NF_NAT_RANGE_PROTO_RANDOM_FULLY, "fully-random"}, {NF_NAT_RANGE_PERSISTENT, "persistent"}})
		if (flags & flag)
			out += (out.empty() ? " " : ",") + std::string(name);
	return out;
}

// iptables' addrtype match as nft (with libxtables) translates it: one of the two types
// (the source when both are given).
std::string addrtypeText(const AddressTypeMatch &m)
{
	const bool source = m.source != 0;
	const uint16_t types = source ? m.source : m.destination;
	std::vector<std::string> names;
	for (uint32_t t = 0; t < 12; t++)
		if (types & (1u << t))
			names.push_back(integerText(Type::fibAddr, t, 32));
	const std::string list = names.size() == 1 ? names[0] : "{ " + fmt::format("{}", fmt::join(names, ", ")) + " }";
	const char *iface = (m.limitInterface & XT_ADDRTYPE_LIMIT_IFACE_OUT)  ? " . oif"
			    : (m.limitInterface & XT_ADDRTYPE_LIMIT_IFACE_IN) ? " . iif" : "";
	return fmt::format("fib {}{} type {}{}", source ? "saddr" : "daddr", iface,
			   (source ? m.invertSource : m.invertDestination) ? "!= " : "", list);
}

// iptables' MARK target as nft (with libxtables) translates --set/--and/--or/--xor-mark.
std::string markTargetText(const XtMark &m)
{
	if (m.mask == 0xffffffff)
		return fmt::format("meta mark set {:#x}", m.value);
	if (m.value == 0)
		return fmt::format("meta mark set mark and {:#x}", ~m.mask);
	if (m.value == m.mask)
		return fmt::format("meta mark set mark or {:#x}", m.value);
	if (m.mask == 0)
		return fmt::format("meta mark set mark xor {:#x}", m.value);
	return fmt::format("meta mark set mark and {:#x} xor {:#x}", ~m.mask, m.value);
}

std::string logText(const Log &l)
{
	static constexpr const char *kLevels[] = {"emerg", "alert", "crit", "err", "warn", "notice", "info", "debug", "audit"};
	std::string out = "log";
	if (l.prefix)
		out += fmt::format(" prefix \"{}\"", printable(*l.prefix));
	if (l.group)
		out += fmt::format(" group {}", *l.group);
	if (l.snaplen)
		out += fmt::format(" snaplen {}", *l.snaplen);
	if (l.queueThreshold)
		out += fmt::format(" queue-threshold {}", *l.queueThreshold);
	if (l.level && *l.level != 4) // LOG_WARNING, the default
		out += fmt::format(" level {}", *l.level < std::size(kLevels) ? kLevels[*l.level] : "unknown");
	const uint32_t flags = l.flags.value_or(0);
	if ((flags & NF_LOG_MASK) == NF_LOG_MASK)
		return out + " flags all";
	if (flags & (NF_LOG_TCPSEQ | NF_LOG_TCPOPT))
		out += std::string(" flags tcp") + ((flags & NF_LOG_TCPSEQ) ? " sequence" : "") +
		       ((flags & NF_LOG_TCPOPT) ? ((flags & NF_LOG_TCPSEQ) ? ",options" : " options") : "");
	for (const auto &[flag, text] : {std::pair{NF_LOG_IPOPT, " flags ip options"}, {NF_LOG_UID, " flags skuid"},
					 {NF_LOG_MACDECODE, " flags ether"}})
		if (flags & flag)
			out += text;
	return out;
}

// nft's get_rate: bytes as the largest unit that divides them.
std::string rateText(uint64_t bytes)
{
	static constexpr const char *kUnits[] = {"bytes", "kbytes", "mbytes"};
	size_t unit = 0;
	for (; bytes && unit + 1 < std::size(kUnits) && bytes % 1024 == 0; unit++)
		bytes /= 1024;
	return fmt::format("{} {}", bytes, kUnits[unit]);
}

std::string limitText(const Limit &l)
{
	const char *unit = l.unit == 1 ? "second" : l.unit == 60 ? "minute" : l.unit == 3600 ? "hour"
			   : l.unit == 86400 ? "day" : l.unit == 604800 ? "week" : "error";
	const char *over = (l.flags & NFT_LIMIT_F_INV) ? "over " : "";
	if (l.type == NFT_LIMIT_PKTS)
		return fmt::format("limit rate {}{}/{}", over, l.rate, unit) +
		       (l.burst && l.burst != 5 ? fmt::format(" burst {} packets", l.burst) : "");
	return fmt::format("limit rate {}{}/{}", over, rateText(l.rate), unit) +
	       (l.burst ? fmt::format(" burst {}", rateText(l.burst)) : "");
}

const char *opText(Op op)
{
	static constexpr const char *kOps[] = {nullptr, nullptr, "hton", "ntoh", "<<", ">>", "&", "^", "|",
					       "==", "!=", "<", ">", "<=", ">=", "!"};
	return kOps[size_t(op)];
}

int precedence(Op op)
{
	switch (op) {
	case Op::lshift:
	case Op::rshift: return 1;
	case Op::band: return 2;
	case Op::bxor: return 3;
	case Op::bor: return 4;
	default: return 0;
	}
}

// The subtypes of a concatenation's type id, first part first.
std::vector<Type> subtypes(uint32_t typeId)
{
	std::vector<Type> out;
	for (; typeId; typeId >>= kTypeBits)
		out.insert(out.begin(), typeOfId(typeId & ((1u << kTypeBits) - 1)).value_or(Type::invalid));
	return out;
}

// nft's range_expr_is_prefix: low-high is low/len when their difference is a run of low
// ones that low has clear (equal bounds are a full-length prefix).
std::optional<uint32_t> prefixOfRange(Wide low, Wide high, uint32_t bits)
{
	const Wide differ = low ^ high;
	const int ones = firstClear(differ, 0);
	if (ones < int(bits) && ((differ >> ones) != 0))
		return std::nullopt;
	const uint32_t length = bits - uint32_t(ones);
	const int lowest = lowestSet(low);
	if (lowest >= 0 && lowest < int(bits - length))
		return std::nullopt;
	return length;
}

// A value's bytes as nft exports them in its byte order (a string's as they are).
Bytes exported(const Node &n)
{
	const size_t len = (n.bits + 7) / 8;
	if (isString(n.type) || len > 16)
		return n.raw;
	Bytes out(len);
	Wide v = n.value;
	for (size_t i = 0; i < len; i++, v >>= 8)
		out[n.order == ByteOrder::host ? i : len - 1 - i] = uint8_t(v & 0xff);
	return out;
}

// The key node of an element (a mapping's left side).
NodeId keyOf(const std::deque<Node> &nodes, NodeId e)
{
	return nodes[size_t(e)].kind == Kind::mapping ? nodes[size_t(e)].a : e;
}

// nft's range_mask_len: how long a prefix start-end is, or -1.
int maskLength(Wide start, Wide end, uint32_t bits)
{
	int len = int(bits);
	while (start <= end && !(start & 1) && (end & 1) && len-- > 0) {
		start >>= 1;
		end >>= 1;
	}
	return start == end ? len : -1;
}

class Printer
{
public:
	Printer(const Table &table, const Rule &rule) : table_(table), rule_(rule), valueNodes_(rule.values.size(), kNone)
	{
		context_.family = table.family;
		if (table.family == TableFamily::inet)
			context_.at(Base::link) = &protocols::inet;
		else
			context_.at(Base::network) = table.family == TableFamily::ip ? &protocols::ip : &protocols::ip6;
	}

	std::string text();

private:
	// ---- Nodes ----
	NodeId add(Node node)
	{
		nodes_.push_back(std::move(node));
		return static_cast<NodeId>(nodes_.size() - 1);
	}
	Node &at(NodeId id) { return nodes_[size_t(id)]; }
	const Node &at(NodeId id) const { return nodes_[size_t(id)]; }
	NodeId unknown(std::string what) { return add({.kind = Kind::unknown, .text = std::move(what)}); }
	NodeId valueOf(std::span<const uint8_t> bytes, uint32_t bits = 0);
	NodeId binop(Op op, NodeId left, NodeId right)
	{
		const Node &l = at(left);
		return add({.kind = Kind::binop, .type = l.type, .order = l.order, .bits = l.bits, .op = op, .a = left, .b = right});
	}
	NodeId relational(Op op, NodeId left, NodeId right)
	{
		return add({.kind = Kind::relational, .type = Type::verdict, .op = op, .a = left, .b = right});
	}
	NodeId clone(NodeId id, int depth = 0);
	void setType(NodeId id, Type type, ByteOrder order);

	// ---- Building: registers into trees, statements ----
	NodeId valueNode(ValueId id, int depth);
	NodeId readNode(ReadId read, int depth);
	NodeId payloadRaw(Base base, uint32_t offsetBits, uint32_t bits);
	NodeId metaNode(uint32_t key);
	NodeId ctNode(uint32_t key, int direction);
	NodeId loadNode(const Expression &load, std::optional<ReadId> input, uint32_t len, int depth);
	NodeId exthdrNode(const Exthdr &x);
	bool findExthdrField(Node &n, uint32_t offset, uint32_t bits, uint32_t flags);
	bool exthdrTrim(NodeId id, const Node &maskNode, int &shift);
	void killExthdrDependency(const Node &n);
	std::string printExthdr(const Node &n);
	NodeId bitwise(const Masked &m, uint32_t len, int depth);
	NodeId compare(const Compare &c);
	void build(const Statement &s);
	void buildNat(Stmt &s, const NatStatement &n);
	void buildOther(Stmt &s, const Other &o);
	bool natMap(NodeId addr, std::optional<Family> family, bool ranges) const;

	// ---- An anonymous set's elements ----
	NodeId setRef(const std::string &name, uint32_t keyBits);
	void setElements(Node &ref, const Set &set);
	NodeId elementKey(std::span<const uint8_t> key, const Set &set, bool interval);
	NodeId elementData(const Set &set, size_t i);
	NodeId toPrefix(NodeId range);
	NodeId reduceRange(NodeId range);
	Bytes sortNumber(NodeId id) const;
	std::vector<NodeId> sorted(std::vector<NodeId> elements) const;
	NodeId interval(NodeId low, Wide high);
	std::vector<NodeId> decompose(std::vector<NodeId> elements);
	std::vector<NodeId> concatRanges(std::vector<NodeId> elements);

	// ---- Post-processing, in nft's order ----
	void postprocess();
	void natStatement(size_t i);
	void payloadStatement(Stmt &s);
	void payloadWriteBinop(Stmt &s);
	void expressionStatement(size_t index);
	void mergeRange(size_t index);
	void process(NodeId &id, int depth = 0);
	void processBinop(NodeId id, int depth);
	NodeId processValue(NodeId id);
	void processRelational(NodeId id, int depth);
	const Protocol *protocolAt(Base base);
	const Protocol *headerOf(const Node &payload, uint32_t &skip);
	void completePayload(NodeId id);
	NodeId fieldNode(const Protocol &desc, size_t i);
	std::vector<NodeId> expandPayload(NodeId id);
	void payloadMatch(NodeId relationalId, NodeId payload);
	void icmpCheck(NodeId payload, const Node &value);
	void payloadFields(NodeId relationalId, NodeId payload);
	bool stackedOn(const Node &left, NodeId value);
	bool trimPayload(NodeId id, const Node &maskNode, int &shift);
	void adjust(NodeId id, int shift, uint32_t bits, int depth = 0);
	bool binopTrim(NodeId expr, NodeId &binopRef);
	void relationalBinop(NodeId id);
	bool isPrefixMask(const Node &m) const;
	NodeId flagList(NodeId id);
	NodeId bitmaskToBinops(NodeId id);
	NodeId stringValue(NodeId id);
	void ctType(NodeId id);
	void updateContext(NodeId relationalId);
	bool dependencyExists(Base base) const;
	const Node *dependency(Base base);
	void releaseDependency(Base base);
	void storeDependency(size_t stmt, Base base);
	void killDependency(NodeId id);
	bool mayKillDependency(const Node &p);
	bool metaMayKill(NodeId relationalId);
	void metaOrCtMatch(NodeId relationalId, Base base);

	// ---- Printing ----
	std::string print(NodeId id, bool numeric = false, int depth = 0);
	std::string printValue(const Node &n, bool numeric);
	std::string printPayload(const Node &n);
	std::string printStatement(const Stmt &s);
	std::string printNat(const Stmt &s, const NatStatement &n);
	std::string printOther(const Stmt &s, const Other &o);
	std::string objrefText(const Stmt &s, const Objref &r);
	std::string dynsetText(const Stmt &s, const Dynset &d);

	const Table &table_;
	const Rule &rule_;
	std::deque<Node> nodes_; // a deque: adding a node leaves references to the others valid
	std::vector<NodeId> valueNodes_; // built once, cloned for each read
	std::vector<Stmt> stmts_;
	size_t current_ = 0; // the statement being post-processed
	ProtocolContext context_;
	Dependencies deps_;
};

// ---- Nodes ----

NodeId Printer::valueOf(std::span<const uint8_t> bytes, uint32_t bits)
{
	Node n{.kind = Kind::value, .bits = bits ? bits : uint32_t(bytes.size() * 8)};
	n.raw.assign(bytes.begin(), bytes.end());
	n.value = integerOf(bytes, ByteOrder::big);
	return add(std::move(n));
}

NodeId Printer::clone(NodeId id, int depth)
{
	if (id == kNone)
		return kNone;
	if (depth > kMaxDepth)
		return unknown("nesting");
	Node n = at(id);
	n.a = clone(n.a, depth + 1);
	n.b = clone(n.b, depth + 1);
	n.c = clone(n.c, depth + 1);
	for (NodeId &item : n.items)
		item = clone(item, depth + 1);
	return add(std::move(n));
}

// nft's expr_set_type: a value or set gets the type its left-hand side gives it.
void Printer::setType(NodeId id, Type type, ByteOrder order)
{
	Node &n = at(id);
	switch (n.kind) {
	case Kind::range:
	case Kind::prefix:
		for (NodeId side : {n.a, n.b})
			if (side != kNone)
				setType(side, type, order);
		break;
	case Kind::list:
		for (NodeId item : n.items)
			setType(item, type, order);
		break;
	case Kind::mapping:
		setType(n.a, type, order);
		return;
	default:
		break;
	}
	at(id).type = type;
	at(id).order = order;
}

// ---- Building ----

NodeId Printer::payloadRaw(Base base, uint32_t offsetBits, uint32_t bits)
{
	Node n{.kind = Kind::payload, .type = Type::xinteger, .order = ByteOrder::big, .bits = bits,
	       .base = base, .offset = offsetBits};
	// nft names a transport header's first two 16-bit fields right away (th sport/dport).
	if (base == Base::transport && bits == 16 && (offsetBits == 0 || offsetBits == 16)) {
		n.protocol = &protocols::th;
		n.field = offsetBits == 0 ? 1 : 2;
		n.type = Type::inetService;
	}
	return add(std::move(n));
}

NodeId Printer::metaNode(uint32_t key)
{
	const Key k = metaKey(key);
	if (!k.name)
		return unknown(fmt::format("meta key {}", key));
	Node n{.kind = Kind::meta, .type = k.type, .order = k.order, .bits = k.bits, .key = key};
	// nft's meta base: the protocol matches' level (nfproto and protocol name the network
	// header, l4proto the transport's).
	n.protocolKey = key == NFT_META_IIFTYPE || key == NFT_META_NFPROTO || key == NFT_META_L4PROTO ||
			key == NFT_META_PROTOCOL;
	n.base = key == NFT_META_L4PROTO ? Base::network
		 : key == NFT_META_NFPROTO || key == NFT_META_PROTOCOL ? Base::link : Base::invalid;
	return add(std::move(n));
}

NodeId Printer::ctNode(uint32_t key, int direction)
{
	const Key k = ctKey(key, table_.family == TableFamily::ip);
	if (!k.name)
		return unknown(fmt::format("ct key {}", key));
	Node n{.kind = Kind::ct, .type = k.type, .order = k.order, .bits = k.bits, .key = key, .direction = direction};
	switch (key) {
	case NFT_CT_SRC:
	case NFT_CT_DST: n.base = Base::network; break;
	case NFT_CT_PROTO_SRC:
	case NFT_CT_PROTO_DST: n.base = Base::transport; break;
	case NFT_CT_PROTOCOL: n.base = Base::network; n.protocolKey = true; break;
	case NFT_CT_L3PROTOCOL: n.base = Base::link; n.protocolKey = true; break;
	default: break;
	}
	return add(std::move(n));
}

std::string fibText(const Fib &f)
{
	std::string out = "fib ";
	uint32_t flags = f.flags & ~NFTA_FIB_F_PRESENT;
	for (const auto &[flag, name] : {std::pair{NFTA_FIB_F_SADDR, "saddr"}, {NFTA_FIB_F_DADDR, "daddr"},
					 {NFTA_FIB_F_MARK, " . mark"}, {NFTA_FIB_F_IIF, " . iif"}, {NFTA_FIB_F_OIF, " . oif"}})
		if (flags & flag) {
			out += name;
			flags &= ~flag;
		}
	if (flags)
		out += fmt::format("0x{:x}", flags);
	static constexpr const char *kResults[] = {"unknown", "oif", "oifname", "type"};
	return out + " " + (f.result < std::size(kResults) ? kResults[f.result] : "unknown");
}

// nft's xfrm_expr_print: `ipsec in spnum 1 ip saddr`.
std::string xfrmText(const Xfrm &x)
{
	const Key k = xfrmKey(x.key);
	const char *dir = x.direction == 0 ? "in" : x.direction == 1 ? "out" : nullptr;
	const char *family = x.key == NFT_XFRM_KEY_DADDR_IP4 || x.key == NFT_XFRM_KEY_SADDR_IP4   ? " ip"
			     : x.key == NFT_XFRM_KEY_DADDR_IP6 || x.key == NFT_XFRM_KEY_SADDR_IP6 ? " ip6" : "";
	if (!dir || !k.name)
		return {};
	return fmt::format("ipsec {}{}{} {}", dir, x.spnum ? fmt::format(" spnum {}", x.spnum) : "", family, k.name);
}

// A load only the kernel can answer (fib, numgen, hash, rt, socket, osf, xfrm, exthdr): its
// text, type and width.
NodeId Printer::loadNode(const Expression &load, std::optional<ReadId> input, uint32_t len, int depth)
{
	Node n{.kind = Kind::load, .type = Type::integer, .order = ByteOrder::host, .bits = len * 8};
	const auto keyed = [&n](const Key &k, std::string text) {
		n.type = k.type;
		n.order = k.order;
		n.bits = k.bits;
		n.text = k.name ? std::move(text) : std::string();
	};
	std::visit(
		Overloaded{
			[&](const Fib &f) {
				n.text = fibText(f);
				n.type = f.result == NFT_FIB_RESULT_ADDRTYPE ? Type::fibAddr
					 : f.result == NFT_FIB_RESULT_OIF    ? Type::ifindex : Type::ifname;
				n.bits = f.result == NFT_FIB_RESULT_OIFNAME ? 128 : 32;
			},
			[&](const Numgen &g) {
				n.text = fmt::format("numgen {} mod {}", g.type == NFT_NG_INCREMENTAL ? "inc"
									 : g.type == NFT_NG_RANDOM ? "random" : "[unknown: numgen type]",
						     g.modulus) + (g.offset ? fmt::format(" offset {}", g.offset) : "");
				n.bits = 32;
			},
			[&](const Hash &h) {
				const std::string after = fmt::format(" mod {}", h.modulus) +
							  (h.seed ? fmt::format(" seed 0x{:x}", *h.seed) : "") +
							  (h.offset ? fmt::format(" offset {}", h.offset) : "");
				n.bits = 32;
				if (h.type == NFT_HASH_SYM) {
					n.text = "symhash" + after;
				} else {
					n.text = "jhash ";
					n.after = after;
					n.a = input ? readNode(*input, depth + 1) : unknown("hash input");
				}
			},
			[&](const Rt &r) {
				const char *family = r.key == NFT_RT_NEXTHOP4 ? "ip " : r.key == NFT_RT_NEXTHOP6 ? "ip6 " : "";
				keyed(rtKey(r.key), fmt::format("rt {}{}", family, rtKey(r.key).name ? rtKey(r.key).name : ""));
			},
			[&](const Socket &s) {
				keyed(socketKey(s.key), fmt::format("socket {}", socketKey(s.key).name ? socketKey(s.key).name : ""));
				if (s.key == NFT_SOCKET_CGROUPV2)
					n.text += fmt::format(" level {}", s.level);
			},
			[&](const Osf &o) {
				const char *ttl = o.ttl == 1 ? "ttl loose " : o.ttl == 2 ? "ttl skip " : "";
				n.text = fmt::format("osf {}{}", ttl, (o.flags & NFT_OSF_F_VERSION) ? "version" : "name");
				n.type = Type::string;
				n.bits = 128;
			},
			[&](const Xfrm &x) { keyed(xfrmKey(x.key), xfrmText(x)); },
			[&](const auto &) {},
		},
		load);
	if (n.text.empty())
		return unknown(nameOf(load));
	return add(std::move(n));
}

// nft's netlink_parse_bitwise: `& mask ^ xor` as and, xor and or operations (the xor's
// bits outside the mask are an `|`), or a shift.
NodeId Printer::bitwise(const Masked &m, uint32_t len, int depth)
{
	NodeId left = readNode(m.source, depth + 1);
	const uint32_t bits = at(left).bits ? at(left).bits : len * 8;
	if (m.op != BitwiseOp::boolean) {
		const uint8_t shift[4] = {uint8_t(m.shift), uint8_t(m.shift >> 8), uint8_t(m.shift >> 16), uint8_t(m.shift >> 24)};
		NodeId right = valueOf(shift); // read big-endian as nft reads it; post-processing swaps it
		at(right).order = ByteOrder::host;
		NodeId b = binop(m.op == BitwiseOp::leftShift ? Op::lshift : Op::rshift, left, right);
		at(b).bits = bits;
		return b;
	}
	const Wide fullMask = integerOf(m.mask(), ByteOrder::big), fullXor = integerOf(m.xorValue(), ByteOrder::big);
	Wide mk = fullMask, x = fullXor, o = 0;
	if (firstClear(mk, 0) != int(len * 8) || x != 0) {
		o = (mk & x) ^ x;
		x &= mk;
		mk |= o;
	}
	NodeId expr = left;
	const auto operand = [&](Wide v) {
		NodeId id = valueOf(m.mask());
		at(id).value = v;
		return id;
	};
	if (!(bits > 0 && firstClear(mk, 0) == int(bits))) {
		expr = binop(Op::band, expr, operand(mk));
		at(expr).bits = bits;
	}
	if (x != 0) {
		expr = binop(Op::bxor, expr, operand(x));
		at(expr).bits = bits;
	}
	if (o != 0) {
		expr = binop(Op::bor, expr, operand(o));
		at(expr).bits = bits;
	}
	return expr;
}

NodeId Printer::valueNode(ValueId id, int depth)
{
	if (depth > kMaxDepth)
		return unknown("nesting");
	if (valueNodes_[id] != kNone)
		return clone(valueNodes_[id]);
	const Value &v = rule_.values[id];
	NodeId node = std::visit(
		Overloaded{
			[&](const FromPayload &p) {
				return payloadRaw(static_cast<Base>(size_t(p.base) + 1), p.offset * 8, v.len * 8);
			},
			[&](const FromMeta &m) { return metaNode(m.key); },
			[&](const FromCt &c) { return ctNode(c.key, c.direction ? int(*c.direction) : -1); },
			[&](const FromFib &f) { return loadNode(Fib{f.flags, f.result, std::nullopt}, std::nullopt, v.len, depth); },
			[&](const Constant &c) { return valueOf(c.bytes); },
			[&](const Masked &m) { return bitwise(m, v.len, depth); },
			[&](const Swapped &s) {
				NodeId arg = readNode(s.source, depth + 1);
				return add({.kind = Kind::unary, .bits = at(arg).bits, .op = s.toNetwork ? Op::hton : Op::ntoh, .a = arg});
			},
			[&](const MapData &m) {
				const Set *set = table_.findSet(m.set);
				NodeId key = readNode(m.key, depth + 1);
				return add({.kind = Kind::map, .a = key, .b = setRef(m.set, set ? set->keyLen * 8 : 0)});
			},
			[&](const OtherLoad &o) {
				if (const auto *x = std::get_if<Exthdr>(o.load.get()))
					return exthdrNode(*x);
				return loadNode(*o.load, o.input, v.len, depth);
			},
		},
		v.source);
	valueNodes_[id] = node;
	return clone(node);
}

// What a read gives, as nft's netlink_get_register gives it: the value in the register
// (whole, even when fewer bytes are read), or the concatenation of the values of the
// registers it spans.
NodeId Printer::readNode(ReadId read, int depth)
{
	std::vector<NodeId> parts;
	uint32_t pad = 0; // zero bytes allowed after the last part: its register's padding
	for (const Slice &s : rule_.read(read)) {
		if (s.kind == Slice::Kind::zero && s.len <= pad) {
			pad -= s.len;
			continue;
		}
		if (s.kind != Slice::Kind::value || s.offset != 0)
			return unknown("register");
		const uint32_t len = rule_.values[s.value].len;
		if (s.len != len && rule_.read(read).size() != 1)
			return unknown("register");
		parts.push_back(valueNode(s.value, depth + 1));
		pad = (4 - len % 4) % 4;
	}
	if (parts.empty())
		return unknown("register");
	if (parts.size() == 1)
		return parts[0];
	Node concat{.kind = Kind::concat};
	concat.items = std::move(parts);
	for (NodeId p : concat.items)
		concat.bits += paddedBits(at(p).bits);
	return add(std::move(concat));
}

NodeId Printer::compare(const Compare &c)
{
	NodeId left = readNode(c.lhs, 0);
	NodeId right = valueOf(c.data);
	const uint32_t dataBits = uint32_t(c.data.size() * 8);
	Node &l = at(left);
	if (l.kind == Kind::concat) {
		// nft splits the constant over the concatenation's parts, each padded to 32 bits.
		Node parts{.kind = Kind::concat, .bits = dataBits};
		uint32_t at32 = 0;
		for (NodeId item : l.items) {
			const uint32_t bits = nodes_[size_t(item)].bits, bytes = (bits + 7) / 8;
			if (at32 + bytes > c.data.size())
				return relational(Op::eq, left, unknown("value"));
			parts.items.push_back(valueOf(std::span(c.data).subspan(at32, bytes), bits));
			at32 += paddedBits(bits) / 8;
		}
		right = add(std::move(parts));
	} else if (l.bits > dataBits && !isString(l.type)) {
		// Fewer bytes than the value: a prefix of it.
		at(right).value = shiftedLeft(at(right).value, l.bits - dataBits);
		at(right).bits = l.bits;
		right = add({.kind = Kind::prefix, .bits = l.bits, .value = dataBits, .a = right});
	}
	static constexpr Op kOps[] = {Op::eq, Op::neq, Op::lt, Op::lte, Op::gt, Op::gte};
	return relational(kOps[size_t(c.op)], left, right);
}

NodeId Printer::setRef(const std::string &name, uint32_t keyBits)
{
	const Set *set = table_.findSet(name);
	Node ref{.kind = Kind::setRef, .bits = keyBits, .text = name, .set = set};
	ref.anonymous = (set && (set->flags & NFT_SET_ANONYMOUS)) || name.rfind("__set", 0) == 0;
	ref.verdictMap = set && set->isVerdictMap();
	if (set) {
		if (const auto type = typeOfId(set->keyType & ((1u << kTypeBits) - 1)); type && set->keyType < (1u << kTypeBits))
			ref.type = set->rawPayloadKey ? Type::xinteger : *type;
		ref.order = static_cast<ByteOrder>(set->keyByteorder);
	}
	if (ref.anonymous && set && set->holdsElements())
		setElements(ref, *set);
	else if (ref.anonymous)
		ref.items.push_back(unknown("set elements"));
	return add(std::move(ref));
}

void Printer::build(const Statement &statement)
{
	Stmt s{.source = &statement};
	std::visit(
		Overloaded{
			[&](const Compare &c) { s.expr = compare(c); },
			[&](const InRange &r) {
				NodeId left = readNode(r.lhs, 0);
				NodeId range = add({.kind = Kind::range, .a = valueOf(r.from()), .b = valueOf(r.to())});
				s.expr = relational(r.negated ? Op::neq : Op::eq, left, range);
			},
			[&](const InSet &in) {
				NodeId left = readNode(in.key, 0);
				s.expr = relational(in.invert ? Op::neq : Op::eq, left, setRef(in.set, at(left).bits));
			},
			[&](const VerdictMap &v) {
				NodeId left = readNode(v.key, 0);
				s.expr = add({.kind = Kind::map, .a = left, .b = setRef(v.set, at(left).bits)});
			},
			[&](const SetVerdict &) { s.kind = Stmt::Kind::verdict; },
			[&](const SetMeta &m) {
				s.kind = Stmt::Kind::metaSet;
				s.expr = readNode(m.value, 0);
				setType(s.expr, metaKey(m.key).type, metaKey(m.key).order);
			},
			[&](const SetCt &c) {
				s.kind = Stmt::Kind::ctSet;
				s.expr = readNode(c.value, 0);
				const Key k = ctKey(c.key, table_.family == TableFamily::ip);
				setType(s.expr, k.type, k.order);
			},
			[&](const AddressTypeMatch &) { s.kind = Stmt::Kind::xt; },
			[&](const XtMark &) { s.kind = Stmt::Kind::xt; },
			[&](const NatStatement &n) { buildNat(s, n); },
			[&](const CounterStatement &) { s.kind = Stmt::Kind::counter; },
			[&](const Other &o) { buildOther(s, o); },
		},
		statement);
	stmts_.push_back(std::move(s));
}

// A statement the NAT walk does not follow, with its operands typed as nft types them: a
// payload write (netlink_parse_payload_stmt) and dup's address and device.
void Printer::buildOther(Stmt &s, const Other &o)
{
	s.kind = Stmt::Kind::other;
	for (ReadId r : o.detail->reads)
		s.operands.push_back(readNode(r, 0));
	if (const auto *p = std::get_if<Payload>(&o.expression()); p && s.operands.size() == 1) {
		s.kind = Stmt::Kind::payloadSet;
		s.expr = payloadRaw(Base(p->base + 1), p->offset * 8, p->len * 8);
		s.proto = s.operands[0];
	} else if (const auto *x = std::get_if<Exthdr>(&o.expression())) {
		// A write of the field (`tcp option maxseg size set 1360`), or the option stripped
		// (`reset tcp option sack-perm`, the header present).
		s.kind = Stmt::Kind::exthdrSet;
		Exthdr header = *x;
		if (s.operands.empty())
			header.flags |= NFT_EXTHDR_F_PRESENT;
		s.expr = exthdrNode(header);
		s.proto = s.operands.empty() ? kNone : s.operands[0];
		if (s.proto != kNone)
			setType(s.proto, at(s.expr).type, at(s.expr).order);
	} else if (std::holds_alternative<Dup>(o.expression()) && !s.operands.empty()) {
		setType(s.operands[0], table_.family == TableFamily::ip6 ? Type::ip6addr : Type::ipaddr, ByteOrder::big);
		if (s.operands.size() > 1)
			setType(s.operands[1], Type::ifindex, ByteOrder::host);
	}
}

// nft's is_nat_addr_map / is_nat_proto_map: an address taken from a map whose data are
// address ranges (`snat ip to ip saddr map { ... : 198.51.100.0/24 }`) or address and port.
bool Printer::natMap(NodeId addr, std::optional<Family> family, bool ranges) const
{
	const Node &n = at(addr);
	if (n.kind != Kind::map || at(n.b).kind != Kind::setRef || !at(n.b).set || !family)
		return false;
	const Set &set = *at(n.b).set;
	const uint32_t bits = set.dataLen * 8, address = *family == Family::ipv4 ? 32 : 128;
	if (ranges)
		return set.dataInterval && (bits == 2 * address || bits == 2 * (address + 32));
	return bits == address + 32;
}

// nft's netlink_parse_nat: the address and port registers as values, ranges or prefixes.
void Printer::buildNat(Stmt &s, const NatStatement &n)
{
	s.kind = Stmt::Kind::nat;
	s.natFamily = table_.family == TableFamily::inet;
	const bool v4 = n.family ? *n.family == Family::ipv4 : table_.family == TableFamily::ip;
	const auto differs = [this, &n](std::optional<ReadId> lo, std::optional<ReadId> hi) {
		if (!hi || std::ranges::equal(rule_.read(*hi), rule_.read(*lo)))
			return false;
		// An iptables target always carries both ends: equal ones are one value.
		return !n.xtables || constantOf(rule_, *lo) != constantOf(rule_, *hi);
	};
	if (n.addressMin) {
		s.expr = readNode(*n.addressMin, 0);
		setType(s.expr, v4 ? Type::ipaddr : Type::ip6addr, ByteOrder::big);
		if (natMap(s.expr, n.family, true)) {
			s.natFamily = true;
			return;
		}
		if (differs(n.addressMin, n.addressMax)) {
			const NodeId high = readNode(*n.addressMax, 0);
			setType(high, v4 ? Type::ipaddr : Type::ip6addr, ByteOrder::big);
			s.expr = add({.kind = Kind::range, .a = s.expr, .b = high});
			// libxtables prints an iptables target's range as it is.
			if (!n.xtables && at(at(s.expr).a).kind == Kind::value && at(high).kind == Kind::value)
				s.expr = toPrefix(s.expr);
		}
	}
	if (s.expr != kNone && natMap(s.expr, n.family, false)) {
		s.natFamily = true;
		return;
	}
	if (n.portMin) {
		s.proto = readNode(*n.portMin, 0);
		setType(s.proto, Type::inetService, ByteOrder::big);
		if (differs(n.portMin, n.portMax)) {
			const NodeId high = readNode(*n.portMax, 0);
			setType(high, Type::inetService, ByteOrder::big);
			s.proto = add({.kind = Kind::range, .a = s.proto, .b = high});
		}
	}
}

// ---- An anonymous set's elements, as nft lists them (netlink.c, segtree.c) ----


NodeId Printer::elementKey(std::span<const uint8_t> key, const Set &set, bool interval)
{
	const std::vector<Type> parts = subtypes(set.keyType);
	if (parts.size() <= 1) {
		NodeId v = valueOf(key);
		Node &n = at(v);
		n.type = parts.empty() ? Type::invalid : set.rawPayloadKey ? Type::xinteger : parts[0];
		n.order = static_cast<ByteOrder>(set.keyByteorder);
		if (!interval && n.order == ByteOrder::host)
			n.value = swapBytes(n.value, n.bits / 8);
		return isBitmask(n.type) ? bitmaskToBinops(v) : v;
	}
	// Each part as wide as its type, padded to 32 bits; its own byte order.
	Node concat{.kind = Kind::concat, .bits = uint32_t(key.size() * 8)};
	size_t at8 = 0;
	for (Type t : parts) {
		const uint32_t bits = (typeInfo(t).bits + 7) / 8 * 8;
		if (bits == 0 || at8 + bits / 8 > key.size())
			return unknown("set elements");
		NodeId v = valueOf(key.subspan(at8, bits / 8), typeInfo(t).bits);
		Node &n = at(v);
		n.type = t;
		n.order = typeInfo(t).order;
		if (isString(t) || (!interval && n.order == ByteOrder::host))
			n.value = swapBytes(n.value, bits / 8);
		concat.items.push_back(isBitmask(t) ? bitmaskToBinops(v) : v);
		at8 += paddedBits(bits) / 8;
	}
	return add(std::move(concat));
}

NodeId Printer::elementData(const Set &set, size_t i)
{
	if (const Verdict *v = i == Set::kCatchAll ? set.catchAllVerdict() : set.verdict(i))
		return add({.kind = Kind::verdict, .text = verdictText(*v)});
	if (set.flags & NFT_SET_OBJECT) {
		const std::string_view object = set.objectName(i);
		Node name{.kind = Kind::value, .type = Type::string, .bits = uint32_t(object.size() * 8)};
		name.raw.assign(object.begin(), object.end());
		return add(std::move(name));
	}
	const auto data = i == Set::kCatchAll ? set.catchAllData() : set.data(i);
	const std::vector<Type> parts = subtypes(set.dataType);
	if (data.empty() || parts.empty())
		return unknown("map data");
	const auto typed = [&](std::span<const uint8_t> bytes, Type t, ByteOrder order) {
		NodeId v = valueOf(bytes, typeInfo(t).bits ? typeInfo(t).bits : uint32_t(bytes.size() * 8));
		at(v).type = t;
		at(v).order = order;
		if (order == ByteOrder::host)
			at(v).value = swapBytes(at(v).value, uint32_t(bytes.size()));
		return v;
	};
	if (parts.size() == 1 && !set.dataInterval)
		return typed(data, parts[0], static_cast<ByteOrder>(set.dataByteorder));
	// Concatenated data, or ranges of it (a NAT map's `address . port` or `a-b`): the lows,
	// then the highs, each part padded to 32 bits.
	std::vector<NodeId> lows, highs;
	size_t at8 = 0;
	for (int half = 0; half < (set.dataInterval ? 2 : 1); half++)
		for (Type t : parts) {
			const size_t bytes = parts.size() == 1 ? data.size() / 2 : (typeInfo(t).bits + 7) / 8;
			if (bytes == 0 || at8 + bytes > data.size())
				return unknown("map data");
			(half ? highs : lows).push_back(typed(data.subspan(at8, bytes), t, typeInfo(t).order));
			at8 += parts.size() == 1 ? bytes : paddedBits(uint32_t(bytes * 8)) / 8;
		}
	Node out{.kind = Kind::concat};
	for (size_t p = 0; p < lows.size(); p++)
		out.items.push_back(highs.empty() ? lows[p] : reduceRange(add({.kind = Kind::range, .a = lows[p], .b = highs[p]})));
	return out.items.size() == 1 ? out.items[0] : add(std::move(out));
}


NodeId Printer::toPrefix(NodeId range)
{
	const Node &r = at(range);
	const Node &low = at(r.a);
	const auto length = prefixOfRange(low.value, at(r.b).value, low.bits);
	if (!length)
		return range;
	return add({.kind = Kind::prefix, .bits = low.bits, .value = *length, .a = r.a});
}

NodeId Printer::reduceRange(NodeId range)
{
	const Node &r = at(range);
	if (at(r.a).value == at(r.b).value)
		return r.a;
	const Type t = at(r.a).type;
	return t == Type::ipaddr || t == Type::ip6addr ? toPrefix(range) : range;
}

void Printer::setElements(Node &ref, const Set &set)
{
	const bool interval = set.flags & NFT_SET_INTERVAL;
	const bool map = (set.flags & (NFT_SET_MAP | NFT_SET_OBJECT)) != 0;
	std::vector<NodeId> elements;
	for (size_t listed = 0; listed < set.size(); listed++) {
		const size_t i = set.listedAt(listed);
		NodeId key = elementKey(set.key(i), set, interval);
		at(key).intervalEnd = set.intervalEnd(i);
		if (!set.keyEnd(i).empty()) { // a concatenation of ranges: its last key follows
			elements.push_back(key);
			key = elementKey(set.keyEnd(i), set, interval);
			at(key).intervalEnd = true;
		}
		if (map && !set.intervalEnd(i)) {
			key = add({.kind = Kind::mapping, .a = key, .b = elementData(set, i)});
		}
		elements.push_back(key);
	}
	if (interval && (set.flags & NFT_SET_CONCAT))
		ref.items = concatRanges(std::move(elements));
	else if (interval)
		ref.items = decompose(std::move(elements));
	else
		ref.items = sorted(std::move(elements));
	if (set.hasCatchAll()) {
		NodeId all = add({.kind = Kind::catchAll});
		ref.items.push_back(map ? add({.kind = Kind::mapping, .a = all, .b = elementData(set, Set::kCatchAll)}) : all);
	}
}

// ---- Orders and ranges of elements ----


// The number nft sorts a hash set's element by (mergesort.c), most significant byte first
// without leading zeros: a concatenation's bytes read as one little-endian number, anything
// else its key's value; the catch-all last.
Bytes Printer::sortNumber(NodeId id) const
{
	const Node *n = &nodes_[size_t(id)];
	for (int depth = 0; (n->kind == Kind::mapping || n->kind == Kind::binop) && depth < kMaxDepth; depth++)
		n = &nodes_[size_t(n->a)];
	Bytes number;
	if (n->kind == Kind::catchAll) {
		number.assign(64, 0xff);
	} else if (n->kind == Kind::concat) {
		// The parts' bytes one after the other, read as one little-endian number.
		for (NodeId part : n->items) {
			const Bytes b = exported(nodes_[size_t(part)]);
			number.insert(number.end(), b.begin(), b.end());
		}
		std::reverse(number.begin(), number.end());
	} else {
		for (int shift = 120; shift >= 0; shift -= 8)
			number.push_back(uint8_t(n->value >> shift));
	}
	number.erase(number.begin(), std::find_if(number.begin(), number.end(), [](uint8_t b) { return b != 0; }));
	return number;
}

using SortKeyed = std::pair<Bytes, NodeId>;

// nft's list_expr_sort: a merge sort (the first half the larger) whose merge takes the
// second half's element first when numbers are equal, so equal numbers (flags sorted by
// their lowest) come out in nft's order. Its recursion is log2 of the elements deep.
void nftSort(std::span<SortKeyed> v)
{
	if (v.size() < 2)
		return;
	const size_t half = (v.size() + 1) / 2;
	nftSort(v.first(half));
	nftSort(v.subspan(half));
	const auto less = [](const SortKeyed &x, const SortKeyed &y) {
		return x.first.size() != y.first.size() ? x.first.size() < y.first.size() : x.first < y.first;
	};
	std::vector<SortKeyed> merged;
	merged.reserve(v.size());
	size_t i = 0, j = half;
	while (i < half || j < v.size())
		merged.push_back(std::move(j == v.size() || (i < half && less(v[i], v[j])) ? v[i++] : v[j++]));
	std::move(merged.begin(), merged.end(), v.begin());
}

std::vector<NodeId> Printer::sorted(std::vector<NodeId> elements) const
{
	std::vector<SortKeyed> keyed;
	for (NodeId e : elements)
		keyed.emplace_back(sortNumber(e), e);
	nftSort(keyed);
	std::vector<NodeId> out;
	for (const auto &[key, e] : keyed)
		out.push_back(e);
	return out;
}


// One interval of an interval set, from its start `low` to `high` (inclusive) as nft lists
// it: the value alone, a prefix, a wildcard name, or a range.
NodeId Printer::interval(NodeId low, Wide high)
{
	const NodeId key = keyOf(nodes_, low);
	Node lowKey = at(key);
	const Wide range = high - lowKey.value;
	NodeId element;
	if (range == 0) {
		element = key;
	} else if ((range & (range + 1)) == 0 && (lowKey.value & range) == 0 &&
		   (typeInfo(lowKey.type).prefix || isString(lowKey.type))) {
		const uint32_t length = lowKey.bits - uint32_t(firstClear(range, 0));
		const size_t nameLen = strnlen(reinterpret_cast<const char *>(lowKey.raw.data()), lowKey.raw.size());
		if (!isString(lowKey.type) || length % 8 || nameLen == 0 || nameLen >= lowKey.raw.size()) {
			element = add({.kind = Kind::prefix, .bits = lowKey.bits, .value = length, .a = key});
		} else {
			lowKey.raw.resize(nameLen);
			lowKey.raw.push_back('*');
			element = add(std::move(lowKey));
		}
	} else {
		Node top = lowKey;
		top.value = high;
		element = add({.kind = Kind::range, .a = key, .b = add(std::move(top))});
	}
	if (at(low).kind == Kind::mapping)
		return add({.kind = Kind::mapping, .a = element, .b = at(low).b});
	return element;
}

// nft's interval_map_decompose: the boundaries sorted, adjacent ranges split where a start
// follows a start, then each start with its end as one interval.
std::vector<NodeId> Printer::decompose(std::vector<NodeId> elements)
{
	const auto value = [this](NodeId e) { return at(keyOf(nodes_, e)).value; };
	std::sort(elements.begin(), elements.end(), [&](NodeId x, NodeId y) {
		if (value(x) != value(y))
			return value(x) < value(y);
		return at(keyOf(nodes_, x)).intervalEnd && !at(keyOf(nodes_, y)).intervalEnd;
	});
	std::vector<NodeId> out;
	std::optional<NodeId> low;
	for (NodeId e : elements) {
		const bool end = at(keyOf(nodes_, e)).intervalEnd;
		if (low && !end) { // a start right after a start: the first ends where this begins
			out.push_back(interval(*low, value(e) - 1));
			low.reset();
		}
		if (low) {
			out.push_back(interval(*low, value(e) - 1));
			low.reset();
		} else if (!end) {
			low = e;
		}
	}
	if (low) // open to the top
		out.push_back(interval(*low, mask(at(keyOf(nodes_, *low)).bits)));
	return out;
}


// nft's concat_range_aggregate: each part of a start and its end as one value, a prefix,
// a wildcard name or a range.
std::vector<NodeId> Printer::concatRanges(std::vector<NodeId> elements)
{
	std::vector<NodeId> out;
	for (size_t i = 0; i + 1 < elements.size(); i += 2) {
		Node &start = at(keyOf(nodes_, elements[i]));
		const NodeId endId = keyOf(nodes_, elements[i + 1]);
		if (start.kind != Kind::concat || at(endId).kind != Kind::concat ||
		    start.items.size() != at(endId).items.size())
			return {unknown("set elements")};
		for (size_t p = 0; p < start.items.size(); p++) {
			const Node r1 = at(start.items[p]);
			NodeId &r2id = at(endId).items[p];
			const Node r2 = at(r2id);
			const bool text = isString(r1.type);
			const Wide v1 = text ? integerOf(r1.raw, ByteOrder::big) : r1.value;
			const Wide v2 = text ? integerOf(r2.raw, ByteOrder::big) : r2.value;
			if (v1 == v2)
				continue;
			const int length = maskLength(v1, v2, r1.bits);
			if (length >= 0 && length % 8 == 0 && text) {
				Node wildcard = r1;
				wildcard.raw.resize(size_t(length / 8));
				wildcard.raw.push_back('*');
				r2id = add(std::move(wildcard));
			} else if (length < 0 || !typeInfo(r1.type).prefix) {
				r2id = add({.kind = Kind::range, .a = start.items[p], .b = r2id});
			} else {
				r2id = add({.kind = Kind::prefix, .bits = r1.bits, .value = uint32_t(length), .a = start.items[p]});
			}
		}
		out.push_back(elements[i + 1]);
	}
	return out;
}

// ---- Post-processing (netlink_delinearize.c's rule_parse_postprocess) ----

void Printer::postprocess()
{
	for (size_t i = 0; i < stmts_.size(); i++) {
		current_ = i;
		Stmt &s = stmts_[i];
		switch (s.kind) {
		case Stmt::Kind::expression:
			expressionStatement(i);
			i = current_; // expansion replaced the statement by several
			break;
		case Stmt::Kind::metaSet:
			process(stmts_[i].expr);
			break;
		case Stmt::Kind::ctSet:
			process(stmts_[i].expr);
			if (std::get<SetCt>(*stmts_[i].source).key == NFT_CT_EVENTMASK)
				stmts_[i].expr = flagList(stmts_[i].expr);
			break;
		case Stmt::Kind::nat:
			natStatement(i);
			break;
		case Stmt::Kind::payloadSet:
			payloadStatement(stmts_[i]);
			break;
		case Stmt::Kind::other:
			for (NodeId &operand : stmts_[i].operands)
				process(operand);
			break;
		case Stmt::Kind::verdict:
		case Stmt::Kind::counter:
		case Stmt::Kind::exthdrSet:
		case Stmt::Kind::xt:
			break;
		}
		deps_.prev = stmts_[i].removed ? std::nullopt : std::optional(i);
		if (stmts_[i].kind != Stmt::Kind::expression)
			deps_ = {};
	}
}

void Printer::natStatement(size_t i)
{
	if (stmts_[i].expr != kNone)
		process(stmts_[i].expr);
	if (stmts_[i].proto != kNone) {
		deps_ = {};
		process(stmts_[i].proto);
	}
}

void Printer::expressionStatement(size_t index)
{
	NodeId expr = stmts_[index].expr;
	process(expr, 0);
	if (current_ != index || stmts_[index].removed)
		return; // replaced (expanded into fields)
	stmts_[index].expr = expr;
	if (deps_.prev && !stmts_[*deps_.prev].removed && stmts_[*deps_.prev].kind == Stmt::Kind::expression)
		mergeRange(index);
}

bool isKnown(const Node &payload)
{
	return payload.protocol && payload.field >= 0;
}

// nft's stmt_payload_postprocess: the field written, named, and its value typed by it.
void Printer::payloadStatement(Stmt &s)
{
	completePayload(s.expr);
	if (!isKnown(at(s.expr)))
		payloadWriteBinop(s);
	process(s.expr);
	setType(s.proto, at(s.expr).type, at(s.expr).order);
	process(s.proto);
}

// nft's stmt_payload_binop_postprocess: a write of part of a load is nft's
// `(x & mask) | value` (or `x | value`, `x & mask`) over the bytes around a field; the
// mask names the field, the value is shifted to it.
void Printer::payloadWriteBinop(Stmt &s)
{
	const Node v = at(s.proto);
	if (v.kind != Kind::binop || at(v.b).kind != Kind::value)
		return;
	const Node &left = at(v.a);
	if (left.kind == Kind::binop) {
		const NodeId payload = left.a, maskId = left.b;
		const Node &p = at(payload), &dest = at(s.expr);
		if (v.op != Op::bor || left.op != Op::band || p.kind != Kind::payload || at(maskId).kind != Kind::value ||
		    p.base != dest.base || p.offset != dest.offset || p.bits != dest.bits)
			return;
		const Wide saved = at(maskId).value;
		at(maskId).value = mask(p.bits) ^ saved ^ at(v.b).value;
		NodeId binopRef = v.a;
		if (!binopTrim(s.proto, binopRef) || !isKnown(at(payload))) {
			at(maskId).value = saved;
			return;
		}
		s.expr = payload;
		s.proto = v.b;
		return;
	}
	if (left.kind != Kind::payload || (v.op != Op::band && v.op != Op::bor))
		return;
	const NodeId payload = v.a, value = v.b;
	if (v.op == Op::band)
		at(value).value = mask(at(payload).bits) ^ at(value).value;
	int shift = 0;
	if (trimPayload(payload, at(value), shift)) {
		adjust(value, shift, at(payload).bits);
		completePayload(payload);
		setType(value, at(payload).type, at(payload).order);
	}
	if (!isKnown(at(payload)))
		return;
	if (v.op == Op::band) // the mask cleared the field: a write of zero
		at(value).value = 0;
	s.expr = payload;
	s.proto = value;
}

// nft's expr_may_merge_range: `x >= a` then `x <= b` is `x a-b`; `x < a` then `x > b` is
// `x != a-b` (it compares only the kinds of the left sides).
void Printer::mergeRange(size_t index)
{
	const Node &cur = at(stmts_[index].expr), &prev = at(stmts_[*deps_.prev].expr);
	if (cur.kind != Kind::relational || prev.kind != Kind::relational)
		return;
	const auto leftKind = [this](const Node &r) {
		const Node &l = at(r.a);
		return l.kind == Kind::unary ? at(l.a).kind : l.kind;
	};
	if (leftKind(cur) != leftKind(prev))
		return;
	Op op;
	if (cur.op == Op::lte && prev.op == Op::gte)
		op = Op::eq;
	else if (cur.op == Op::gt && prev.op == Op::lt)
		op = Op::neq;
	else
		return;
	const NodeId left = cur.a, high = cur.b, low = prev.b;
	NodeId range = add({.kind = Kind::range, .a = low, .b = high});
	setType(range, at(high).type, at(high).order);
	stmts_[*deps_.prev].removed = true;
	stmts_[index].expr = relational(op, left, range);
}

void Printer::process(NodeId &id, int depth)
{
	if (id == kNone || depth > kMaxDepth)
		return;
	Node &n = at(id);
	switch (n.kind) {
	case Kind::map:
		if (at(n.a).kind == Kind::binop && at(n.a).op == Op::band && at(at(n.a).a).kind == Kind::payload &&
		    at(at(n.a).b).kind == Kind::value)
			binopTrim(id, at(id).a);
		process(at(id).a, depth + 1);
		break;
	case Kind::mapping:
		process(at(id).a, depth + 1);
		process(at(id).b, depth + 1);
		break;
	case Kind::concat:
		for (size_t i = 0; i < at(id).items.size(); i++) {
			NodeId item = at(id).items[i];
			process(item, depth + 1);
			at(id).items[i] = item;
		}
		break;
	case Kind::unary:
		process(at(id).a, depth + 1);
		at(id).type = at(at(id).a).type;
		at(id).order = ByteOrder::invalid; // nft's !byteorder
		break;
	case Kind::binop:
		processBinop(id, depth);
		break;
	case Kind::relational:
		processRelational(id, depth);
		break;
	case Kind::payload:
		completePayload(id);
		killDependency(id);
		break;
	case Kind::value:
		id = processValue(id);
		break;
	case Kind::range:
	case Kind::prefix:
		process(at(id).a, depth + 1);
		process(at(id).b, depth + 1);
		break;
	case Kind::ct:
		ctType(id);
		break;
	case Kind::load:
		process(at(id).a, depth + 1); // a hash's input
		break;
	case Kind::exthdr:
		killExthdrDependency(n);
		break;
	default:
		break;
	}
}

// nft's value post-processing: host byte order swapped, strings as names or wildcards,
// several flags as `a | b`.
NodeId Printer::processValue(NodeId id)
{
	Node &n = at(id);
	if (n.order == ByteOrder::host)
		n.value = swapBytes(n.value, n.bits / 8);
	if (isString(n.type))
		id = stringValue(id);
	return isBitmask(at(id).type) ? bitmaskToBinops(id) : id;
}

void Printer::processBinop(NodeId id, int depth)
{
	process(at(id).a, depth + 1);
	const Node &left = at(at(id).a);
	if (at(id).op == Op::lshift || at(id).op == Op::rshift)
		setType(at(id).b, Type::integer, ByteOrder::host);
	else
		setType(at(id).b, left.type, left.order);
	process(at(id).b, depth + 1);
	at(id).type = at(at(id).a).type;
	at(id).order = at(at(id).a).order;
}

void Printer::processRelational(NodeId id, int depth)
{
	if (at(at(id).a).kind == Kind::payload)
		return payloadMatch(id, at(id).a);
	process(at(id).a, depth + 1);
	const Node &left = at(at(id).a);
	setType(at(id).b, left.type, left.order);
	process(at(id).b, depth + 1);
	switch (at(at(id).a).kind) {
	case Kind::ct:
	case Kind::meta:
		metaOrCtMatch(id, at(at(id).a).base);
		break;
	case Kind::binop:
		relationalBinop(id);
		break;
	default:
		break;
	}
}

// ---- Payload (payload.c) ----

const Protocol *Printer::protocolAt(Base base)
{
	return context_.at(base);
}

// nft's get_stacked_desc: a link-layer load past the first header reads a stacked one
// (`ether type 8021q vlan id 10`); `skip` is the bits of the headers before it.
const Protocol *Printer::headerOf(const Node &p, uint32_t &skip)
{
	skip = 0;
	const Protocol *top = protocolAt(p.base);
	if (!top || p.base != Base::link || p.offset < top->length)
		return top;
	uint32_t offset = p.offset;
	for (const Protocol *stacked : context_.stackedLinks) {
		if (offset < stacked->length)
			return stacked;
		offset -= stacked->length;
		skip += stacked->length;
	}
	return top;
}

// nft's payload_expr_complete: a raw load that is exactly one field of the protocol its
// base holds gets that field's name and type.
void Printer::completePayload(NodeId id)
{
	Node &p = at(id);
	uint32_t skip = 0;
	const Protocol *desc = headerOf(p, skip);
	if (!desc || desc == &protocols::inet)
		return;
	for (size_t i = 1; i < desc->fields.size(); i++) {
		const Field &f = desc->fields[i];
		if (f.offset != p.offset - skip || f.bits != p.bits)
			continue;
		if (f.icmpDependency && context_.icmpType && context_.icmpType != icmpTypeOf(f.icmpDependency))
			continue;
		p.type = f.type;
		p.protocol = desc;
		p.field = int(i);
		return;
	}
}

NodeId Printer::fieldNode(const Protocol &desc, size_t i)
{
	const Field &f = desc.fields[i];
	return add({.kind = Kind::payload, .type = f.type, .order = ByteOrder::big, .bits = f.bits, .base = desc.base,
		    .offset = f.offset, .protocol = &desc, .field = int(i), .protocolKey = desc.isProtocolKey(i)});
}

// nft's payload_expr_expand: a load merged from adjacent fields split into them.
std::vector<NodeId> Printer::expandPayload(NodeId id)
{
	Node p = at(id);
	std::vector<NodeId> out;
	uint32_t skip = 0;
	const Protocol *desc = headerOf(p, skip);
	uint32_t offset = p.offset - skip;
	for (size_t i = 1; desc && desc != &protocols::inet && i < desc->fields.size(); i++) {
		const Field &f = desc->fields[i];
		if (f.bits == 0)
			break;
		if (f.offset != offset)
			continue;
		if (f.icmpDependency && context_.icmpType && context_.icmpType != icmpTypeOf(f.icmpDependency))
			continue;
		if (f.bits <= p.bits) {
			out.push_back(fieldNode(*desc, i));
			p.bits -= f.bits;
			offset += f.bits;
			if (p.bits == 0)
				return out;
		} else {
			out.push_back(fieldNode(*desc, i));
			at(out.back()).bits = p.bits;
			return out;
		}
	}
	out.push_back(payloadRaw(p.base, offset + skip, p.bits));
	return out;
}

// nft's payload_match_postprocess.
void Printer::payloadMatch(NodeId relationalId, NodeId payload)
{
	const Node &r = at(relationalId);
	if ((r.op == Op::eq || r.op == Op::neq) && r.kind == Kind::relational) {
		if (at(r.b).kind == Kind::value)
			return payloadFields(relationalId, payload);
		if (at(r.b).kind == Kind::setRef && at(r.b).anonymous && !at(r.b).items.empty() &&
		    at(at(r.b).items[0]).kind == Kind::value)
			icmpCheck(payload, at(at(r.b).items[0]));
	}
	completePayload(payload);
	setType(at(relationalId).b, at(payload).type, at(payload).order);
	killDependency(payload);
}

// nft's payload_icmp_check: a set of ICMP types names the ICMP field it is looked up with.
void Printer::icmpCheck(NodeId payload, const Node &value)
{
	Node &p = at(payload);
	const Protocol *desc = protocolAt(Base::transport);
	if (p.base != Base::transport || p.bits != 8 || value.bits != 8 || context_.icmpType ||
	    (desc != &protocols::icmp && desc != &protocols::icmp6))
		return;
	for (size_t i = 1; i < desc->fields.size(); i++) {
		const Field &f = desc->fields[i];
		if (f.offset != p.offset || f.bits != p.bits)
			continue;
		if (desc->protocolKey != i)
			return;
		p.protocol = desc;
		p.field = int(i);
		p.type = f.type;
		context_.icmpType = uint8_t(value.value);
		return;
	}
}

// nft's payload_match_expand: a match on merged fields becomes one match per field, each
// a possible protocol dependency of what follows.
void Printer::payloadFields(NodeId relationalId, NodeId payload)
{
	const Op op = at(relationalId).op;
	const Node right = at(at(relationalId).b);
	uint32_t remaining = right.bits;
	for (NodeId left : expandPayload(payload)) {
		const Node l = at(left);
		// The field's share of the constant: its most significant bits (from the bytes: a
		// merged load may be wider than 128 bits).
		const uint32_t take = std::min(l.bits, remaining);
		Node part = right;
		part.bits = l.bits;
		part.value = right.raw.size() * 8 == right.bits ? bitsAt(right.raw, right.bits - remaining, take)
								: shiftedRight(right.value, remaining - take) & mask(take);
		part.raw = {};
		remaining -= take;
		part.type = l.type;
		part.order = l.order;
		NodeId value = add(std::move(part));
		if (l.protocol && l.field >= 0 && l.bits < l.protocol->fields[size_t(l.field)].bits) {
			const uint32_t full = l.protocol->fields[size_t(l.field)].bits;
			at(value).value = shiftedLeft(at(value).value, full - l.bits);
			at(value).bits = full;
			value = add({.kind = Kind::prefix, .bits = full, .value = l.bits, .a = value});
		}
		NodeId rel = relational(op, left, value);
		if (op == Op::eq)
			updateContext(rel);
		stmts_.insert(stmts_.begin() + long(current_), Stmt{.kind = Stmt::Kind::expression, .expr = rel});
		const size_t index = current_++;
		Base base = l.base;
		if (stackedOn(l, value))
			base = Base(size_t(base) - 1);
		killDependency(left);
		if (op == Op::eq && l.protocolKey)
			storeDependency(index, base);
	}
	stmts_[current_].removed = true; // the merged match, replaced
}

// nft's payload_is_stacked: a protocol match whose next protocol is at the same base (vlan).
bool Printer::stackedOn(const Node &left, NodeId value)
{
	const Protocol *desc = protocolAt(left.base);
	if (!left.protocolKey || !desc)
		return false;
	const Protocol *next = desc->above(uint32_t(at(value).value));
	return next && next->base == desc->base;
}

// nft's payload_expr_trim: a mask that selects one field of a byte-aligned load names it.
bool Printer::trimPayload(NodeId id, const Node &maskNode, int &shift)
{
	Node &p = at(id);
	uint32_t skip = 0;
	const Protocol *desc = headerOf(p, skip);
	if (!desc)
		return false;
	const int maskOffset = std::max(lowestSet(maskNode.value), 0);
	const int maskLen = firstClear(maskNode.value, maskOffset + 1);
	const uint32_t off = (maskNode.bits + 7) / 8 * 8 - uint32_t(maskLen);
	uint32_t offset = p.offset - skip + off, remaining = p.bits, len = 0;
	for (size_t i = 1; i < desc->fields.size(); i++) {
		const Field &f = desc->fields[i];
		if (f.offset != offset)
			continue;
		if (f.bits > remaining)
			return false;
		remaining -= f.bits;
		offset += f.bits;
		len += f.bits;
		if (remaining == 0)
			return false;
		if (uint32_t(maskOffset) + len == uint32_t(maskLen)) {
			p.offset += off;
			p.bits = len;
			shift = maskOffset;
			return true;
		}
	}
	return false;
}

// nft's binop_adjust: the constants a trimmed mask was compared with, shifted to the field.
void Printer::adjust(NodeId id, int shift, uint32_t bits, int depth)
{
	if (id == kNone || depth > kMaxDepth)
		return;
	Node &n = at(id);
	switch (n.kind) {
	case Kind::value:
		n.value = shiftedRight(n.value, uint32_t(shift));
		n.bits = bits;
		break;
	case Kind::range:
	case Kind::mapping:
	case Kind::prefix:
		adjust(n.a, shift, bits, depth + 1);
		if (n.kind == Kind::range)
			adjust(at(id).b, shift, bits, depth + 1);
		break;
	case Kind::setRef:
		if (n.anonymous)
			for (NodeId item : std::vector<NodeId>(n.items))
				adjust(item, shift, bits, depth + 1);
		break;
	default:
		break;
	}
}

// nft's __binop_postprocess: `payload & mask` that selects a field becomes the field.
bool Printer::binopTrim(NodeId expr, NodeId &binopRef)
{
	const NodeId binopId = binopRef;
	const NodeId left = at(binopId).a;
	int shift = 0;
	const bool payload = at(left).kind == Kind::payload;
	if (payload ? !trimPayload(left, at(at(binopId).b), shift)
		    : at(left).kind != Kind::exthdr || !exthdrTrim(left, at(at(binopId).b), shift))
		return false;
	adjust(at(expr).b, shift, at(left).bits);
	binopRef = left;
	if (at(expr).kind == Kind::map)
		at(expr).a = left;
	if (payload)
		payloadMatch(expr, left);
	else
		setType(at(expr).b, at(left).type, at(left).order);
	return true;
}

// ---- Extension headers, options, chunks (exthdr.c, tcpopt.c, ipopt.c, sctp_chunk.c) ----

NodeId Printer::exthdrNode(const Exthdr &x)
{
	Node n{.kind = Kind::exthdr, .order = ByteOrder::big, .key = x.op};
	n.headerType = x.type;
	findExthdrField(n, x.offset * 8, x.len * 8, x.flags);
	return add(std::move(n));
}

// nft's exthdr_init_raw: the header of that number whose field lies at `offset`, `bits`
// long (a present check is a boolean); without one, the header unnamed or the field.
bool Printer::findExthdrField(Node &n, uint32_t offset, uint32_t bits, uint32_t flags)
{
	n.offset = offset;
	n.bits = bits;
	n.exthdrFlags = flags;
	n.type = (flags & NFT_EXTHDR_F_PRESENT) ? Type::boolean : Type::integer;
	const auto headers = exthdrHeaders(n.key, n.headerType);
	n.header = headers.empty() ? nullptr : &headers.front();
	n.field = -1;
	for (const ExthdrHeader &header : headers)
		for (size_t i = 0; i < header.fields.size(); i++)
			if (header.fields[i].offset == offset && header.fields[i].bits == bits) {
				n.header = &header;
				n.field = int(i);
				if (!(flags & NFT_EXTHDR_F_PRESENT))
					n.type = header.fields[i].type;
				return true;
			}
	return false;
}

// nft's exthdr_find_template: a mask that selects one field of the load names it.
bool Printer::exthdrTrim(NodeId id, const Node &maskNode, int &shift)
{
	Node &n = at(id);
	const int maskOffset = std::max(lowestSet(maskNode.value), 0);
	const int maskLen = firstClear(maskNode.value, maskOffset + 1);
	const uint32_t offset = n.offset + (maskNode.bits + 7) / 8 * 8 - uint32_t(maskLen);
	const bool options = n.key == NFT_EXTHDR_OP_IPV4 || n.key == NFT_EXTHDR_OP_TCPOPT;
	if ((!options && n.key != NFT_EXTHDR_OP_IPV6) || (options && n.field >= 0))
		return false;
	if (!findExthdrField(n, offset, uint32_t(maskLen - maskOffset), 0))
		return false;
	shift = maskOffset;
	return true;
}

// nft's exthdr_dependency_kill: an option or extension header implies its protocol.
void Printer::killExthdrDependency(const Node &n)
{
	const Base base = n.key == NFT_EXTHDR_OP_TCPOPT ? Base::transport
			  : n.key == NFT_EXTHDR_OP_IPV6 || n.key == NFT_EXTHDR_OP_IPV4 ? Base::network : Base::invalid;
	if (base != Base::invalid && dependencyExists(base))
		releaseDependency(base);
}

// nft's exthdr_expr_print.
std::string Printer::printExthdr(const Node &n)
{
	const bool present = n.exthdrFlags & NFT_EXTHDR_F_PRESENT;
	const char *field = n.header && n.field >= 0 ? n.header->fields[size_t(n.field)].name : nullptr;
	const std::string unknownField = fmt::format("{}exthdr field]", kUnknownMarker);
	switch (n.key) {
	case NFT_EXTHDR_OP_TCPOPT:
		if (!n.header)
			return present && n.offset == 0 ? fmt::format("tcp option {}", n.headerType)
							: fmt::format("tcp option @{},{},{}", n.headerType, n.offset, n.bits);
		if (present)
			return fmt::format("tcp option {}", n.header->name);
		return fmt::format("tcp option {}{} {}", n.header->name, n.offset / 64 ? std::to_string(n.offset / 64) : "",
				   field ? field : unknownField);
	case NFT_EXTHDR_OP_IPV4:
	case NFT_EXTHDR_OP_SCTP:
		if (!n.header)
			break;
		return fmt::format("{} {}{}{}", n.key == NFT_EXTHDR_OP_IPV4 ? "ip option" : "sctp chunk", n.header->name,
				   present ? "" : " ", present ? "" : field ? field : unknownField.c_str());
	case NFT_EXTHDR_OP_IPV6:
		if (present)
			return fmt::format("exthdr {}", n.header ? n.header->name : "unknown-exthdr");
		if (!n.header || !field)
			break;
		return fmt::format("{} {}", n.header->name, field);
	default:
		break;
	}
	return fmt::format("{}exthdr]", kUnknownMarker);
}

// ---- Masks, flags and prefixes (relational_binop_postprocess) ----

void Printer::relationalBinop(NodeId id)
{
	const NodeId binop = at(id).a, right = at(id).b;
	const Node b = at(binop);
	const Op op = at(id).op;
	if (b.op == Op::band && (op == Op::eq || op == Op::neq) && isBitmask(at(right).type)) {
		const Node &r = at(right);
		if (r.kind == Kind::value && r.value == 0) {
			// `x & flags != 0`: the flags, implicitly; `== 0`: none of them (`!`).
			at(id).a = b.a;
			at(id).b = flagList(b.b);
			at(id).op = op == Op::neq ? Op::implicit : Op::neg;
		} else if (r.kind == Kind::value && at(b.b).kind == Kind::value && r.value == at(b.b).value) {
			// `x & flag == flag` stays as it is.
		} else if (r.kind == Kind::value || r.kind == Kind::binop) {
			at(id) = Node{.kind = Kind::flagcmp, .op = op, .a = b.a, .b = r.kind == Kind::binop ? flagList(right) : right,
				      .c = flagList(b.b)};
		}
		return;
	}
	if (b.op == Op::band && typeInfo(at(b.a).type).prefix && at(right).kind == Kind::value &&
	    at(b.b).kind == Kind::value && isPrefixMask(at(b.b))) {
		const Node &m = at(b.b);
		const int first = lowestSet(m.value);
		const uint32_t length = first < 0 ? 0 : uint32_t(firstClear(m.value, first) - first);
		at(id).a = b.a;
		at(id).b = add({.kind = Kind::prefix, .bits = at(b.a).bits, .value = length, .a = right});
		return;
	}
	if (b.op == Op::band && at(b.b).kind == Kind::value) {
		NodeId left = at(id).a;
		if (binopTrim(id, left))
			at(id).a = left;
		return;
	}
	if (b.op == Op::rshift && at(b.a).kind == Kind::binop && at(b.a).op == Op::band && at(b.b).kind == Kind::value &&
	    at(at(b.a).b).kind == Kind::value) {
		// `ip version @s`: the mask and the shift of a field looked up in a set.
		NodeId inner = b.a;
		if (binopTrim(binop, inner))
			at(binop).a = inner;
		if (at(at(binop).b).value == 0)
			at(id).a = at(binop).a;
	}
}

// nft's expr_mask_is_prefix: the mask's ones run to its top.
bool Printer::isPrefixMask(const Node &m) const
{
	const int first = lowestSet(m.value);
	return first < 0 || firstClear(m.value, first + 1) >= int(m.bits);
}

// nft's binop_tree_to_list: `a | b | c` as the list a,b,c; a single value as it is.
NodeId Printer::flagList(NodeId id)
{
	if (at(id).kind != Kind::binop || at(id).op != Op::bor)
		return id;
	Node list{.kind = Kind::list};
	std::vector<NodeId> work{id}; // depth first, left to right, without recursion
	while (!work.empty() && list.items.size() < 128) {
		const NodeId n = work.back();
		work.pop_back();
		if (at(n).kind == Kind::binop && at(n).op == Op::bor) {
			work.push_back(at(n).b);
			work.push_back(at(n).a);
		} else {
			list.items.push_back(n);
		}
	}
	return add(std::move(list));
}

// nft's bitmask_expr_to_binops: a value of several flags as `a | b`.
NodeId Printer::bitmaskToBinops(NodeId id)
{
	const Node v = at(id);
	if (v.kind != Kind::value || popcount(v.value) < 2)
		return id;
	NodeId out = kNone;
	for (int bit = 0; bit < 128; bit++)
		if ((v.value >> bit) & 1) {
			Node flag = v;
			flag.value = Wide(1) << bit;
			const NodeId f = add(std::move(flag));
			out = out == kNone ? f : binop(Op::bor, out, f);
		}
	return out;
}

// nft's expr_postprocess_string: a name compared without its NUL is a wildcard (`eth*`),
// a name that ends in a star is escaped (`eth\*`).
NodeId Printer::stringValue(NodeId id)
{
	Node &n = at(id);
	if (n.raw.empty())
		return id;
	if (n.raw.back() != 0) {
		n.raw.push_back('*');
		return id;
	}
	n.raw.resize(strnlen(reinterpret_cast<const char *>(n.raw.data()), n.raw.size()));
	if (!n.raw.empty() && n.raw.back() == '*')
		n.raw.insert(n.raw.end() - 1, '\\');
	return id;
}

// nft's ct_expr_update_type: ct saddr and daddr take their type from the network protocol.
void Printer::ctType(NodeId id)
{
	Node &n = at(id);
	const Protocol *desc = protocolAt(n.base);
	switch (n.key) {
	case NFT_CT_SRC:
	case NFT_CT_DST:
		if (desc == &protocols::ip || desc == &protocols::ip6) {
			n.type = desc == &protocols::ip ? Type::ipaddr : Type::ip6addr;
			n.nfproto = desc == &protocols::ip ? NFPROTO_IPV4 : NFPROTO_IPV6;
		}
		n.bits = typeInfo(n.type).bits;
		break;
	case NFT_CT_PROTO_SRC:
	case NFT_CT_PROTO_DST:
		if (desc)
			n.type = Type::inetService;
		break;
	default:
		break;
	}
}

// ---- Protocol context and dependencies ----

// nft's relational_expr_pctx_update: a match on a protocol key names the protocol above.
void Printer::updateContext(NodeId relationalId)
{
	const Node &left = at(at(relationalId).a), &right = at(at(relationalId).b);
	if (!left.protocolKey || right.kind != Kind::value)
		return;
	const auto value = uint32_t(right.value);
	switch (left.kind) {
	case Kind::payload: {
		const Protocol *base = protocolAt(left.base);
		const Protocol *desc = base ? base->above(value) : nullptr;
		if (desc && desc->base == Base::link && base->base == Base::link && left.protocol &&
		    context_.stackedLinks.size() < kMaxDepth)
			context_.stackedLinks.push_back(base);
		if (!desc) {
			if (base == &protocols::icmp)
				context_.icmpType = uint8_t(value ? value : 8); // echo-reply counts as echo
			else if (base == &protocols::icmp6)
				context_.icmpType = uint8_t(value == 129 ? 128 : value);
			return;
		}
		context_.at(desc->base) = desc;
		return;
	}
	case Kind::meta:
		if (left.key == NFT_META_NFPROTO) {
			const Protocol *hook = context_.family == TableFamily::inet ? &protocols::inet
					       : context_.family == TableFamily::ip ? &protocols::ip : &protocols::ip6;
			const Protocol *desc = hook->above(value);
			if (!desc && hook != &protocols::inet &&
			    value == (context_.family == TableFamily::ip ? NFPROTO_IPV4 : NFPROTO_IPV6))
				desc = hook;
			context_.at(Base::network) = desc ? desc : &kUnknownProtocol;
		} else if (left.key == NFT_META_IIFTYPE) { // the link layer of an input interface
			context_.at(Base::link) = value == 1 ? &protocols::ether : &kUnknownProtocol; // ARPHRD_ETHER
		} else if (left.key == NFT_META_L4PROTO) {
			const Protocol *desc = protocols::inetService.above(value);
			context_.at(Base::transport) = desc ? desc : &kUnknownProtocol;
		}
		return;
	case Kind::ct: {
		const Protocol *base = protocolAt(left.base);
		if (const Protocol *desc = base ? base->above(value) : nullptr)
			context_.at(Base(size_t(left.base) + 1)) = desc;
		return;
	}
	default:
		return;
	}
}

bool Printer::dependencyExists(Base base) const
{
	return deps_.pdeps[size_t(base)] || (base == Base::transport && deps_.pdeps[size_t(Base::inner)]);
}

const Node *Printer::dependency(Base base)
{
	if (auto i = deps_.pdeps[size_t(base)])
		return &at(stmts_[*i].expr);
	if (auto i = deps_.pdeps[size_t(Base::inner)]; i && base == Base::transport)
		return &at(stmts_[*i].expr);
	return nullptr;
}

void Printer::releaseDependency(Base base)
{
	auto &slot = deps_.pdeps[size_t(base)] ? deps_.pdeps[size_t(base)] : deps_.pdeps[size_t(Base::inner)];
	if (!slot || (!deps_.pdeps[size_t(base)] && base != Base::transport))
		return;
	stmts_[*slot].removed = true;
	if (deps_.prev == slot)
		deps_.prev.reset();
	slot.reset();
}

// nft's payload_dependency_store: `icmp type echo-request` is kept (an id or sequence
// field needs the echo type, which nft adds as a set the listing keeps).
void Printer::storeDependency(size_t stmt, Base base)
{
	const Node &dep = at(stmts_[stmt].expr);
	const Node &left = at(dep.a), &right = at(dep.b);
	if (left.kind == Kind::payload && right.kind == Kind::value && right.bits == 8 &&
	    (left.protocol == &protocols::icmp || left.protocol == &protocols::icmp6)) {
		uint8_t type = uint8_t(right.value);
		if (left.protocol == &protocols::icmp && type == 0)
			type = 8;
		deps_.icmpType = type;
		if (left.protocol == &protocols::icmp ? type == 8 : (type == 128 || type == 129))
			return;
	}
	deps_.pdeps[size_t(base) + 1] = stmt;
}

// nft's payload_dependency_kill.
void Printer::killDependency(NodeId id)
{
	const Node &p = at(id);
	if (p.protocol && dependencyExists(p.base) && mayKillDependency(p))
		releaseDependency(p.base);
}

bool Printer::mayKillDependency(const Node &p)
{
	const Node *dep = dependency(p.base);
	if (!dep)
		return false;
	const Node &depLeft = at(dep->a);
	const bool depPayload = depLeft.kind == Kind::payload;
	// In an inet table `ip protocol` / `ip6 nexthdr` also says which family: kept.
	if (context_.family == TableFamily::inet && depPayload) {
		if (depLeft.base == Base::network && (depLeft.protocol == &protocols::ip || depLeft.protocol == &protocols::ip6) &&
		    p.base == Base::transport)
			return false;
		if (dep->op == Op::eq && p.base == depLeft.base && p.protocolKey)
			return false;
	}
	if (p.base != Base::transport)
		return true;
	// A meta or ct dependency reads as base 0 here, as in nft.
	if (!depPayload || depLeft.base != Base::transport)
		return true;
	if (depLeft.protocol == &protocols::icmp || depLeft.protocol == &protocols::icmp6) {
		const uint8_t dependency = p.protocol->fields[size_t(p.field)].icmpDependency;
		return dependency != 0 && depLeft.protocol == p.protocol && deps_.icmpType == icmpTypeOf(dependency);
	}
	return true;
}

// nft's meta_may_dependency_kill: an nfproto match is implied by an ICMP l4proto of its
// family, in ip and ip6 tables by any match of the table's family.
bool Printer::metaMayKill(NodeId relationalId)
{
	const Node *dep = dependency(Base::network);
	if (!dep)
		return true;
	const Node &depLeft = at(dep->a);
	uint8_t nfproto = 0;
	if (depLeft.kind == Kind::meta && depLeft.key == NFT_META_NFPROTO)
		nfproto = uint8_t(at(dep->b).value);
	else if (depLeft.kind == Kind::meta && depLeft.key == NFT_META_PROTOCOL)
		nfproto = at(dep->b).value == 0x0800 ? NFPROTO_IPV4 : at(dep->b).value == 0x86dd ? NFPROTO_IPV6 : 0;
	else
		return true;
	if (context_.family != TableFamily::inet)
		return (context_.family == TableFamily::ip ? NFPROTO_IPV4 : NFPROTO_IPV6) == nfproto;
	const Node &self = at(at(relationalId).a);
	if (self.key != NFT_META_L4PROTO)
		return true;
	const auto l4proto = uint8_t(at(at(relationalId).b).value);
	if (l4proto != IPPROTO_ICMP && l4proto != IPPROTO_ICMPV6)
		return false;
	return !((nfproto == NFPROTO_IPV4 && l4proto == IPPROTO_ICMPV6) || (nfproto == NFPROTO_IPV6 && l4proto == IPPROTO_ICMP));
}

// nft's ct_meta_common_postprocess.
void Printer::metaOrCtMatch(NodeId relationalId, Base base)
{
	const Node &r = at(relationalId);
	const Kind rightKind = at(r.b).kind;
	if (r.op != Op::eq || rightKind == Kind::range || rightKind == Kind::setRef)
		return;
	updateContext(relationalId);
	if (base >= Base::transport)
		return;
	if (dependencyExists(base) && metaMayKill(relationalId))
		releaseDependency(base);
	if (at(at(relationalId).a).protocolKey)
		storeDependency(current_, base);
}

// ---- Printing (expression.c, statement.c) ----



std::string Printer::printValue(const Node &n, bool numeric)
{
	if (isString(n.type)) {
		const auto nul = std::find(n.raw.begin(), n.raw.end(), 0);
		return "\"" + printable(std::string(n.raw.begin(), nul)) + "\"";
	}
	if (n.bits > 128)
		return fmt::format("{}0x{:02x}]", kUnknownMarker, fmt::join(n.raw, ""));
	return integerText(n.type, n.value, n.bits, numeric);
}

std::string Printer::printPayload(const Node &n)
{
	if (n.protocol && n.field >= 0)
		return fmt::format("{} {}", n.protocol->name, n.protocol->fields[size_t(n.field)].name);
	static constexpr const char *kBases[] = {"invalid", "ll", "nh", "th", "ih"};
	return fmt::format("@{},{},{}", kBases[size_t(n.base)], n.offset, n.bits);
}

std::string ctText(const Node &n)
{
	std::string out = "ct ";
	if (n.direction == 0 || n.direction == 1)
		out += n.direction == 0 ? "original " : "reply ";
	if ((n.key == NFT_CT_SRC || n.key == NFT_CT_DST) && n.direction >= 0 && n.nfproto)
		out += n.nfproto == NFPROTO_IPV4 ? "ip " : "ip6 ";
	return out + ctKey(n.key, false).name;
}

std::string Printer::print(NodeId id, bool numeric, int depth)
{
	if (id == kNone || depth > kMaxDepth)
		return fmt::format("{}nesting]", kUnknownMarker);
	const Node &n = at(id);
	const auto sub = [&](NodeId child, bool num = false) { return print(child, num || numeric, depth + 1); };
	const auto joined = [&](const char *separator) {
		std::string out;
		for (NodeId item : n.items)
			out += (out.empty() ? "" : separator) + sub(item);
		return out;
	};
	switch (n.kind) {
	case Kind::value: return printValue(n, numeric);
	case Kind::verdict: return n.text;
	case Kind::payload: return printPayload(n);
	case Kind::meta: {
		const char *name = metaKey(n.key).name;
		return metaUnqualified(n.key) ? name : fmt::format("meta {}", name);
	}
	case Kind::ct: return ctText(n);
	case Kind::load: return n.a == kNone ? n.text : n.text + sub(n.a) + n.after;
	case Kind::binop: {
		const auto arg = [&](NodeId child) {
			const Node &c = at(child);
			const bool paren = c.kind == Kind::binop && precedence(n.op) && precedence(n.op) < precedence(c.op);
			return paren ? "(" + sub(child) + ")" : sub(child);
		};
		return fmt::format("{} {} {}", arg(n.a), opText(n.op), arg(n.b));
	}
	case Kind::relational: {
		// nft's must_print_eq_op: `==` only before a flag value or after a binop.
		const bool eq = (isBitmask(at(n.b).type) && at(n.b).kind == Kind::value) || at(n.a).kind == Kind::binop;
		const char *op = opText(n.op);
		return op && (n.op != Op::eq || eq) ? fmt::format("{} {} {}", sub(n.a), op, sub(n.b))
						     : fmt::format("{} {}", sub(n.a), sub(n.b));
	}
	case Kind::unary: return sub(n.a);
	case Kind::concat: return joined(" . ");
	case Kind::list: return joined(",");
	case Kind::prefix: return fmt::format("{}/{}", sub(n.a), uint32_t(n.value));
	case Kind::range: return fmt::format("{}-{}", sub(n.a, true), sub(n.b, true));
	case Kind::setRef: return n.anonymous ? "{ " + joined(", ") + " }" : "@" + printable(n.text);
	case Kind::map:
		return fmt::format("{} {} {}", sub(n.a), at(n.b).verdictMap ? "vmap" : "map", sub(n.b));
	case Kind::mapping: return fmt::format("{} : {}", sub(n.a), sub(n.b));
	case Kind::flagcmp:
		return fmt::format("{}{}{} / {}", sub(n.a), n.op == Op::neq ? " != " : " ", sub(n.b), sub(n.c));
	case Kind::catchAll: return "*";
	case Kind::exthdr: return printExthdr(n);
	case Kind::unknown: break;
	}
	return fmt::format("{}{}]", kUnknownMarker, printable(n.text));
}





std::string Printer::printStatement(const Stmt &s)
{
	if (s.kind == Stmt::Kind::expression)
		return print(s.expr);
	if (s.kind == Stmt::Kind::payloadSet)
		return print(s.expr) + " set " + print(s.proto);
	if (s.kind == Stmt::Kind::exthdrSet) // nft post-processes neither side
		return s.proto == kNone ? "reset " + print(s.expr) : print(s.expr) + " set " + print(s.proto);
	return std::visit(
		Overloaded{
			[&](const SetVerdict &v) { return verdictText(v.verdict); },
			[&](const CounterStatement &c) { return fmt::format("counter packets {} bytes {}", c.packets, c.bytes); },
			[&](const SetMeta &m) {
				const char *name = metaKey(m.key).name;
				return fmt::format("{}{} set {}", metaUnqualified(m.key) ? "" : "meta ",
						   name ? name : "[unknown: meta key]", print(s.expr));
			},
			[&](const SetCt &c) {
				const char *name = ctKey(c.key, false).name;
				const char *dir = !c.direction ? "" : *c.direction == 0 ? "original " : "reply ";
				return fmt::format("ct {}{} set {}", dir, name ? name : "[unknown: ct key]", print(s.expr));
			},
			[&](const AddressTypeMatch &a) { return addrtypeText(a); },
			[&](const XtMark &x) { return markTargetText(x); },
			[&](const NatStatement &n) { return printNat(s, n); },
			[&](const Other &o) { return printOther(s, o); },
			[&](const auto &) { return print(s.expr); },
		},
		*s.source);
}

// nft's nat_stmt_print: `snat ip prefix to 10.0.0.0/8:80-90 random,persistent`.
std::string Printer::printNat(const Stmt &s, const NatStatement &n)
{
	static constexpr const char *kNames[] = {"masquerade", "snat", "dnat", "redirect"};
	if (n.xtNetmap)
		return "xt target NETMAP"; // nft 1.0.6 has no translation for it
	std::string out = kNames[size_t(n.kind)];
	if (s.expr != kNone || s.proto != kNone) {
		if (n.family && s.natFamily)
			out += *n.family == Family::ipv4 ? " ip" : " ip6";
		if (n.flags & NF_NAT_RANGE_NETMAP)
			out += " prefix";
		out += " to";
	}
	if (s.expr != kNone) {
		const Node &addr = at(s.expr);
		const bool ip6 = addr.type == Type::ip6addr;
		if (s.proto != kNone && ip6 && addr.kind == Kind::value)
			out += " [" + print(s.expr) + "]";
		else if (s.proto != kNone && addr.kind == Kind::range && at(addr.a).type == Type::ip6addr)
			out += " [" + print(addr.a) + "]-[" + print(addr.b) + "]";
		else
			out += " " + print(s.expr);
	}
	if (s.proto != kNone)
		out += (s.expr == kNone ? " :" : ":") + print(s.proto);
	return out + natFlagsText(n.flags);
}




// An iptables match as nft lists it through libxtables' translation: a comment prints
// nothing, -m statistic as nft's own random or numgen match; what is not translated here
// is marked unknown.
std::string xtMatchText(const Match &m)
{
	const auto u32At = [&m](size_t at) {
		uint32_t v = 0;
		std::memcpy(&v, m.info.data() + at, sizeof(v));
		return v;
	};
	if (m.name == "comment")
		return {};
	// xt_statistic_info { u16 mode, flags; union { u32 probability; u32 every, packet; } }
	if (m.name == "statistic" && m.info.size() >= 16) {
		uint16_t mode = 0, flags = 0;
		std::memcpy(&mode, m.info.data(), 2);
		std::memcpy(&flags, m.info.data() + 2, 2);
		const bool invert = flags & 1;
		if (mode == 0)
			return fmt::format("meta random & 2147483647 {} {}", invert ? ">=" : "<", u32At(4));
		if (mode == 1)
			return fmt::format("numgen inc mod {} {}{}", u32At(4) + 1, invert ? "!= " : "", u32At(8));
	}
	return fmt::format("{}xt match {}]", kUnknownMarker, printable(m.name));
}

std::string Printer::printOther(const Stmt &s, const Other &o)
{
	const auto operand = [&](size_t i) { return i < s.operands.size() ? print(s.operands[i]) : std::string("[unknown: register]"); };
	return std::visit(
		Overloaded{
			[&](const Log &l) { return logText(l); },
			[&](const Limit &l) { return limitText(l); },
			[&](const Quota &q) {
				return fmt::format("quota {}{}", (q.flags & NFT_QUOTA_F_INV) ? "over " : "", rateText(q.bytes)) +
				       (q.consumed ? " used " + rateText(q.consumed) : "");
			},
			[&](const Connlimit &c) { return fmt::format("ct count {}{}", c.flags ? "over " : "", c.count); },
			[&](const Notrack &) { return std::string("notrack"); },
			[&](const FlowOffload &f) { return "flow add @" + printable(f.table); },
			[&](const Objref &r) { return objrefText(s, r); },
			[&](const Dynset &d) { return dynsetText(s, d); },
			[&](const Dup &) {
				if (s.operands.empty())
					return std::string("dup");
				return "dup to " + operand(0) + (s.operands.size() > 1 ? " device " + operand(1) : "");
			},
			[&](const Queue &q) {
				std::string out = "queue";
				if (q.flags & NFT_QUEUE_FLAG_BYPASS)
					out += " flags bypass";
				if (q.flags & NFT_QUEUE_FLAG_CPU_FANOUT)
					out += (q.flags & NFT_QUEUE_FLAG_BYPASS) ? ",fanout" : " flags fanout";
				if (!s.operands.empty())
					return out + " to " + operand(0);
				return out + " to " + (q.total > 1 ? fmt::format("{}-{}", q.number, q.number + q.total - 1)
								   : std::to_string(q.number));
			},
			[&](const Synproxy &p) {
				const std::string options = std::string((p.flags & NF_SYNPROXY_OPT_TIMESTAMP) ? " timestamp" : "") +
							    ((p.flags & NF_SYNPROXY_OPT_SACK_PERM) ? " sack-perm" : "");
				std::string out = "synproxy";
				if (p.flags & NF_SYNPROXY_OPT_MSS)
					out += fmt::format(" mss {}", p.mss);
				if (p.flags & NF_SYNPROXY_OPT_WSCALE)
					out += fmt::format(" wscale {}", p.wscale);
				return out + options;
			},
			[&](const Match &m) { return xtMatchText(m); },
			[&](const Target &t) { return fmt::format("{}xt target {}]", kUnknownMarker, printable(t.name)); },
			[&](const auto &) { return fmt::format("{}{}]", kUnknownMarker, printable(nameOf(o.expression()))); },
		},
		o.expression());
}

// nft's objref_stmt_print: `counter name "c"`, `ct helper set "ftp"`, or by a map.
std::string Printer::objrefText(const Stmt &s, const Objref &r)
{
	static constexpr const char *kTypes[] = {"unknown", "counter", "quota", "ct helper", "limit", "ct timeout",
						 "secmark", "ct expectation", "synproxy"};
	const Set *set = r.set ? table_.findSet(*r.set) : nullptr;
	std::string verb;
	switch (set ? set->objectType : r.type) {
	case NFT_OBJECT_CT_HELPER: verb = "ct helper set "; break;
	case NFT_OBJECT_CT_TIMEOUT: verb = "ct timeout set "; break;
	case NFT_OBJECT_CT_EXPECT: verb = "ct expectation set "; break;
	case NFT_OBJECT_SECMARK: verb = "meta secmark set "; break;
	default: {
		const uint32_t type = set ? set->objectType : r.type;
		verb = fmt::format("{} name ", type < std::size(kTypes) ? kTypes[type] : "unknown");
		break;
	}
	}
	if (!r.set)
		return fmt::format("{}\"{}\"", verb, printable(r.name.value_or("")));
	if (s.operands.empty())
		return fmt::format("{}{}register]", verb, kUnknownMarker);
	return fmt::format("{}{} map {}", verb, print(s.operands[0]), print(setRef(*r.set, at(s.operands[0]).bits)));
}

// nft's set_stmt_print / map_stmt_print: `add @s { ip saddr timeout 1s limit rate 10/second }`.
std::string Printer::dynsetText(const Stmt &s, const Dynset &d)
{
	static constexpr const char *kOps[] = {"add", "update", "delete"};
	const Set *set = table_.findSet(d.set);
	const bool anonymous = set && (set->flags & NFT_SET_ANONYMOUS);
	// nft's meter: an anonymous set a key and its statements are added to.
	const bool meter = anonymous && s.operands.size() == 1 && !d.statements.empty();
	if (s.operands.empty() || (anonymous && !meter))
		return fmt::format("{}dynset]", kUnknownMarker);
	std::string out = meter ? fmt::format("meter {} size {} {{ {}", printable(d.set), set->declaredSize, print(s.operands[0]))
				: fmt::format("{} @{} {{ {}", d.op < std::size(kOps) ? kOps[d.op] : "unknown",
					      printable(d.set), print(s.operands[0]));
	if (d.timeout.value_or(0) != 0)
		out += " timeout " + integerText(Type::time, *d.timeout, 64);
	for (const ExpressionBox &nested : d.statements) {
		const Expression &e = *nested.expression;
		if (std::holds_alternative<Counter>(e))
			out += " counter";
		else if (const auto *l = std::get_if<Limit>(&e))
			out += " " + limitText(*l);
		else if (const auto *q = std::get_if<Quota>(&e))
			out += fmt::format(" quota {}{}", (q->flags & NFT_QUOTA_F_INV) ? "over " : "", rateText(q->bytes));
		else if (const auto *n = std::get_if<Connlimit>(&e))
			out += fmt::format(" ct count {}{}", n->flags ? "over " : "", n->count);
		else
			out += fmt::format(" {}{}]", kUnknownMarker, printable(nameOf(e)));
	}
	if (s.operands.size() > 1)
		out += " : " + print(s.operands[1]);
	return out + " }";
}

std::string Printer::text()
{
	for (const Statement &statement : rule_.statements)
		build(statement);
	postprocess();
	// As nft's rule_print: one space between statements, also after one that prints
	// nothing (an iptables comment).
	std::string out;
	bool first = true;
	for (const Stmt &s : stmts_)
		if (!s.removed) {
			out += (first ? "" : " ") + printStatement(s);
			first = false;
		}
	if (!rule_.comment.empty())
		out += (first ? "" : " ") + fmt::format("comment \"{}\"", printable(rule_.comment));
	// A listing line is indented: what nft shows of a rule that starts or ends with an
	// empty statement has no space there.
	const size_t from = out.find_first_not_of(' '), to = out.find_last_not_of(' ');
	return from == std::string::npos ? std::string() : out.substr(from, to - from + 1);
}

} // namespace

std::string ruleText(const Table &table, const Rule &rule)
{
	return Printer(table, rule).text();
}

} // namespace ipmasq::nft
