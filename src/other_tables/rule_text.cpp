// SPDX-License-Identifier: Apache-2.0
// Decoded rules in nft's listing syntax, and outcomes in words.
#include "ip-masq-agent/other_tables/rule_text.h"

#include <algorithm>
#include <cstring>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>
#include <linux/rtnetlink.h>

#include <fmt/format.h>

#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/other_tables/decoder.h"
#include "ip-masq-agent/overloaded.h"
#include "ip-masq-agent/ruleset.h"

namespace ipmasq::nat {

namespace {

// How a value prints.
enum class Kind { ipv4, ipv6, ifname, l4proto, nfproto, ethertype, mark, ctState, ctDirection,
		  fibType, port, decimal, hex };

// A value as the listing names it: "ip daddr" (a prefix of it, masked), or a constant.
struct Operand {
	std::string text;
	Kind kind = Kind::hex;
	uint32_t len = 0; // the value's
	uint32_t fieldLen = 0; // > len: a prefix of the field (iptables-nft's "-d 10.0.0.0/8")
	std::string binop = {}; // " & 0x00004000", for the listing's explicit "=="
	Bytes mask = {}; // the bitwise mask applied, for prefixes
	std::optional<Bytes> constant = {};
	bool mapOfPairs = false; // a map's data: two addresses (snat ip to ... map { k : a-b })
};

std::string hexOf(std::span<const uint8_t> bytes)
{
	return fmt::format("0x{:02x}", fmt::join(bytes, ""));
}

uint32_t hostU32(std::span<const uint8_t> bytes)
{
	uint32_t v = 0;
	std::memcpy(&v, bytes.data(), std::min<size_t>(4, bytes.size()));
	return v;
}

Address addressOf(std::span<const uint8_t> bytes)
{
	AddressValue v = 0;
	for (uint8_t b : bytes)
		v = (v << 8) | b;
	return Address{bytes.size() == 4 ? Family::ipv4 : Family::ipv6, v};
}

const char *l4protoName(uint8_t p)
{
	switch (p) {
	case 1: return "icmp";
	case 2: return "igmp";
	case 6: return "tcp";
	case 17: return "udp";
	case 33: return "dccp";
	case 47: return "gre";
	case 50: return "esp";
	case 51: return "ah";
	case 58: return "ipv6-icmp";
	case 132: return "sctp";
	case 136: return "udplite";
	default: return nullptr;
	}
}

const char *fibTypeName(uint32_t t)
{
	static constexpr const char *kNames[] = {"unspec", "unicast", "local", "broadcast",
						 "anycast", "multicast", "blackhole", "unreachable",
						 "prohibit", "throw", "nat", "xresolve"};
	return t < std::size(kNames) ? kNames[t] : nullptr;
}

std::string ctStateText(uint32_t bits)
{
	static constexpr std::pair<uint32_t, const char *> kBits[] = {
		{1, "invalid"}, {2, "established"}, {4, "related"}, {8, "new"}, {64, "untracked"}};
	std::string out;
	for (const auto &[bit, name] : kBits)
		if (bits & bit)
			out += (out.empty() ? "" : ",") + std::string(name);
	return out.empty() ? fmt::format("{:#010x}", bits) : out;
}

// A constant as nft prints a value of this kind.
std::string valueText(std::span<const uint8_t> v, Kind kind)
{
	switch (kind) {
	case Kind::ipv4:
	case Kind::ipv6:
		return v.size() == (kind == Kind::ipv4 ? 4u : 16u) ? addressOf(v).toString() : hexOf(v);
	case Kind::ifname: {
		const auto nul = std::find(v.begin(), v.end(), 0);
		// No NUL among the compared bytes: a prefix match ("eth+" in iptables).
		return "\"" + escaped(std::string(v.begin(), nul)) + (nul == v.end() ? "*" : "") + "\"";
	}
	case Kind::l4proto:
		if (v.size() == 1)
			return l4protoName(v[0]) ? l4protoName(v[0]) : std::to_string(v[0]);
		break;
	case Kind::nfproto:
		if (v.size() == 1 && (v[0] == NFPROTO_IPV4 || v[0] == NFPROTO_IPV6))
			return v[0] == NFPROTO_IPV4 ? "ipv4" : "ipv6";
		break;
	case Kind::ethertype:
		if (v.size() == 2 && v[0] == 0x08 && v[1] == 0x00)
			return "ip";
		if (v.size() == 2 && v[0] == 0x86 && v[1] == 0xdd)
			return "ip6";
		break;
	case Kind::mark:
		if (v.size() == 4)
			return fmt::format("{:#010x}", hostU32(v));
		break;
	case Kind::ctState:
		if (v.size() == 4)
			return ctStateText(hostU32(v));
		break;
	case Kind::ctDirection:
		if (v.size() == 1 && v[0] <= 1)
			return v[0] == 0 ? "original" : "reply";
		break;
	case Kind::fibType:
		if (v.size() == 4 && fibTypeName(hostU32(v)))
			return fibTypeName(hostU32(v));
		break;
	case Kind::port:
		if (v.size() == 2)
			return std::to_string(v[0] << 8 | v[1]);
		break;
	case Kind::decimal:
		if (v.size() == 4)
			return std::to_string(hostU32(v));
		break;
	case Kind::hex:
		break;
	}
	return hexOf(v);
}

// The length of a contiguous prefix mask, or -1.
int prefixOfMask(const Bytes &mask)
{
	int bits = 0;
	bool ended = false;
	for (uint8_t b : mask)
		for (int i = 7; i >= 0; i--) {
			const bool set = b & (1 << i);
			if (set && ended)
				return -1;
			bits += set;
			ended = ended || !set;
		}
	return bits;
}

bool isAddress(Kind kind)
{
	return kind == Kind::ipv4 || kind == Kind::ipv6;
}

// A value compared with an operand: prefixes for partial or masked addresses.
std::string comparedValue(const Operand &lhs, const Bytes &data)
{
	if (isAddress(lhs.kind) && lhs.fieldLen > lhs.len && data.size() == lhs.len) {
		Bytes full = data;
		full.resize(lhs.fieldLen, 0);
		return fmt::format("{}/{}", valueText(full, lhs.kind), lhs.len * 8);
	}
	if (isAddress(lhs.kind) && !lhs.mask.empty() && prefixOfMask(lhs.mask) >= 0)
		return fmt::format("{}/{}", valueText(data, lhs.kind), prefixOfMask(lhs.mask));
	return valueText(data, lhs.kind);
}

const char *opText(CmpOp op)
{
	static constexpr const char *kOps[] = {"==", "!=", "<", "<=", ">", ">="};
	return kOps[static_cast<size_t>(op)];
}

std::string verdictText(const Verdict &v)
{
	switch (v.code) {
	case VerdictCode::accept: return "accept";
	case VerdictCode::drop: return "drop";
	case VerdictCode::queue: return "queue";
	case VerdictCode::stolen: return "[ verdict stolen ]";
	case VerdictCode::continueRule: return "continue";
	case VerdictCode::breakRule: return "[ verdict break ]";
	case VerdictCode::jump: return "jump " + escaped(v.chain);
	case VerdictCode::goTo: return "goto " + escaped(v.chain);
	case VerdictCode::returnToCaller: return "return";
	}
	return "?";
}

Operand metaOperand(uint32_t key)
{
	Operand o;
	const char *name = metaKey(key).name;
	o.text = name ? fmt::format("meta {}", name) : fmt::format("meta {}", key);
	switch (key) {
	case NFT_META_IIFNAME:
	case NFT_META_OIFNAME:
		o.text = name; // nft drops "meta" for these
		o.kind = Kind::ifname;
		break;
	case NFT_META_IIF:
	case NFT_META_OIF:
		o.text = name; // nft resolves the index to a name; we print the index
		o.kind = Kind::decimal;
		break;
	case NFT_META_MARK: o.kind = Kind::mark; break;
	case NFT_META_L4PROTO: o.kind = Kind::l4proto; break;
	case NFT_META_NFPROTO: o.kind = Kind::nfproto; break;
	case NFT_META_PROTOCOL: o.kind = Kind::ethertype; break;
	default: break;
	}
	return o;
}

Operand ctOperand(uint32_t key, std::optional<uint8_t> direction)
{
	Operand o;
	const std::string dir = direction ? (*direction == 0 ? "original " : "reply ") : "";
	const char *name = ctKey(key).name;
	o.text = name ? fmt::format("ct {}{}", dir, name) : fmt::format("ct {}{}", dir, key);
	switch (key) {
	case NFT_CT_STATE: o.kind = Kind::ctState; break;
	case NFT_CT_DIRECTION: o.kind = Kind::ctDirection; break;
	case NFT_CT_MARK: o.kind = Kind::mark; break;
	case NFT_CT_L3PROTOCOL: o.kind = Kind::nfproto; break;
	case NFT_CT_PROTOCOL: o.kind = Kind::l4proto; break;
	default: break;
	}
	return o;
}

Operand fibOperand(const FromFib &f)
{
	Operand o;
	o.text = std::string("fib ") + ((f.flags & NFTA_FIB_F_SADDR) ? "saddr" : "daddr");
	for (const auto &[flag, name] : {std::pair{NFTA_FIB_F_MARK, " . mark"},
					 std::pair{NFTA_FIB_F_IIF, " . iif"}, std::pair{NFTA_FIB_F_OIF, " . oif"}})
		if (f.flags & flag)
			o.text += name;
	switch (f.result) {
	case NFT_FIB_RESULT_OIF: o.text += " oif"; o.kind = Kind::decimal; break;
	case NFT_FIB_RESULT_OIFNAME: o.text += " oifname"; o.kind = Kind::ifname; break;
	case NFT_FIB_RESULT_ADDRTYPE: o.text += " type"; o.kind = Kind::fibType; break;
	default: o.text += fmt::format(" result {}", f.result); break;
	}
	return o;
}

std::string natFlagsText(uint32_t flags)
{
	std::string out;
	for (const auto &[flag, name] : {std::pair{NF_NAT_RANGE_PROTO_RANDOM, "random"},
					 std::pair{NF_NAT_RANGE_PROTO_RANDOM_FULLY, "fully-random"},
					 std::pair{NF_NAT_RANGE_PERSISTENT, "persistent"}})
		if (flags & flag)
			out += (out.empty() ? " " : ",") + std::string(name);
	return out;
}

// iptables' addrtype match as nft (with xtables) translates it: one of the two types (the
// source when both are given).
std::string addrtypeText(const AddressTypeMatch &m)
{
	const bool source = m.source != 0;
	const uint16_t mask = source ? m.source : m.destination;
	std::vector<std::string> names;
	for (uint32_t t = 0; t < 12; t++)
		if (mask & (1u << t))
			names.push_back(fibTypeName(t));
	const std::string types = names.size() == 1 ? names[0] : "{ " + fmt::format("{}", fmt::join(names, ", ")) + " }";
	const char *iface = (m.limitInterface & XT_ADDRTYPE_LIMIT_IFACE_OUT) ? " . oif"
			    : (m.limitInterface & XT_ADDRTYPE_LIMIT_IFACE_IN) ? " . iif" : "";
	return fmt::format("fib {}{} type {}{}", source ? "saddr" : "daddr", iface,
			   (source ? m.invertSource : m.invertDestination) ? "!= " : "", types);
}

// iptables' MARK target as nft, through libxtables, translates --set/--and/--or/--xor-mark.
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

// nft's datatype ids (its enum datatypes) a set's data is printed by.
constexpr uint32_t kTypeIpv4 = 7, kTypeIpv6 = 8;

// The length of one address of a map's data type (ipv4_addr, ipv6_addr), or 0.
size_t addressLength(uint32_t dataType)
{
	return dataType == kTypeIpv4 ? 4 : dataType == kTypeIpv6 ? 16 : 0;
}

// A map whose values are address ranges (`{ k : 198.51.100.0/24 }`, `{ k : a-b }`): nft
// declares it with the address type and data twice its length (the interval flag lives in
// the set's user data).
bool mapsToRanges(const Set &set)
{
	const size_t len = addressLength(set.dataType);
	return len != 0 && set.dataLen == 2 * len;
}

class Renderer
{
public:
	Renderer(const Table &table, const Rule &rule)
		: table_(table), rule_(rule), operands_(rule.values.size())
	{
	}

	std::string text();

private:
	void add(std::string statement) { out_.push_back(std::move(statement)); }
	void define(ValueId id);
	// The operand a read is: one value, whole (or a prefix of a field).
	const Operand *operandOf(ReadId read) const;
	// The same, or the first bytes of an interface name: nft and iptables compare a name
	// with its NUL ("docker0") or without, as a prefix ("eth*"), never all 16 bytes.
	const Operand *comparedOperandOf(ReadId read) const;
	// A look-up: its key, the values it concatenates ("ip saddr . tcp dport"), then
	// `between` and the set; "[ WORD set ]" for a key the listing cannot name.
	std::string lookupText(ReadId key, const std::string &set, const char *word, const char *between) const;
	std::string setText(const std::string &name, const std::vector<const Operand *> &parts) const;
	std::string elementsText(const Set &set, const std::vector<const Operand *> &parts) const;
	std::string assigned(ReadId value) const;
	std::string portsText(const NatStatement &n) const;
	void compare(const Compare &c, const Statement *next);
	void nat(const NatStatement &n);
	void statement(const Statement &s, const Statement *next);

	const Table &table_;
	const Rule &rule_;
	std::vector<std::optional<Operand>> operands_;
	std::vector<std::string> out_;
	// The last statement, when it is a protocol dependency nft leaves out of the listing
	// if the next one implies it ("meta l4proto tcp" before "tcp dport").
	std::optional<size_t> l4Dependency_, nfprotoDependency_;
	std::optional<uint8_t> l4proto_, nfproto_;
	bool skipNext_ = false;
};

void Renderer::define(ValueId id)
{
	const Value &value = rule_.values[id];
	Operand o;
	std::visit(
		Overloaded{
			[&](const FromPayload &p) {
				static constexpr const char *kBases[] = {"ll", "nh", "th", "ih"};
				o.text = fmt::format("@{},{},{}", kBases[size_t(p.base)], p.offset * 8, value.len * 8);
				std::optional<Family> family;
				if (table_.family != TableFamily::inet)
					family = table_.family == TableFamily::ip ? Family::ipv4 : Family::ipv6;
				else if (nfproto_ == NFPROTO_IPV4 || nfproto_ == NFPROTO_IPV6)
					family = nfproto_ == NFPROTO_IPV4 ? Family::ipv4 : Family::ipv6;
				if (p.base == PayloadBase::network && family) {
					const bool v4 = *family == Family::ipv4;
					const uint32_t addrLen = v4 ? 4 : 16, saddr = v4 ? 12 : 8, daddr = v4 ? 16 : 24;
					if ((p.offset == saddr || p.offset == daddr) && value.len >= 1 && value.len <= addrLen) {
						o.text = std::string(v4 ? "ip" : "ip6") + (p.offset == saddr ? " saddr" : " daddr");
						o.kind = v4 ? Kind::ipv4 : Kind::ipv6;
						o.fieldLen = addrLen;
					} else if (p.offset == (v4 ? 9u : 6u) && value.len == 1) {
						o.text = v4 ? "ip protocol" : "ip6 nexthdr";
						o.kind = Kind::l4proto;
					}
					if (nfprotoDependency_)
						out_.erase(out_.begin() + static_cast<long>(*std::exchange(nfprotoDependency_, std::nullopt)));
				} else if (p.base == PayloadBase::transport && (p.offset == 0 || p.offset == 2) &&
					   value.len == 2) {
					const char *proto = l4proto_ ? l4protoName(*l4proto_) : nullptr;
					o.text = fmt::format("{} {}", proto ? proto : "th", p.offset == 0 ? "sport" : "dport");
					o.kind = Kind::port;
					if (proto && l4Dependency_)
						out_.erase(out_.begin() + static_cast<long>(*std::exchange(l4Dependency_, std::nullopt)));
				}
			},
			[&](const FromMeta &m) { o = metaOperand(m.key); },
			[&](const FromCt &c) { o = ctOperand(c.key, c.direction); },
			[&](const FromFib &f) { o = fibOperand(f); },
			[&](const Constant &c) {
				o.constant = c.bytes;
				o.text = hexOf(c.bytes);
			},
			[&](const Opaque &op) { o.text = "[ " + escaped(op.name) + " ]"; },
			[&](const Masked &m) {
				const Operand *source = operandOf(m.source);
				if (!source || m.op != BitwiseOp::boolean) {
					o.text = "[ bitwise ]";
					return;
				}
				o = *source;
				// As nft's delinearize reads (x & mask) ^ xor: the xor's bits outside
				// the mask are an "or" (`meta mark | 0x4000` is & ~0x4000 ^ 0x4000),
				// those inside it an "xor", and the mask grows by the "or" bits.
				const auto mask = m.mask(), xorValue = m.xorValue();
				const size_t len = std::min(mask.size(), xorValue.size());
				Bytes andMask(len), xorBits(len), orBits(len);
				for (size_t i = 0; i < len; i++) {
					orBits[i] = xorValue[i] & ~mask[i];
					xorBits[i] = xorValue[i] & mask[i];
					andMask[i] = mask[i] | orBits[i];
				}
				const auto all = [](const Bytes &b, uint8_t v) {
					return std::all_of(b.begin(), b.end(), [v](uint8_t x) { return x == v; });
				};
				if (!all(andMask, 0xff)) {
					o.mask = andMask;
					o.binop += " & " + valueText(andMask, o.kind);
				}
				if (!all(xorBits, 0))
					o.binop += " ^ " + valueText(xorBits, o.kind);
				if (!all(orBits, 0))
					o.binop += " | " + valueText(orBits, o.kind);
			},
			[&](const Swapped &s) {
				// nft's listing hides conversions.
				const Operand *source = operandOf(s.source);
				o = source ? *source : Operand{"[ byteorder ]"};
			},
			[&](const MapData &m) {
				o.text = lookupText(m.key, m.set, "map", "map ");
				const Set *set = table_.findSet(m.set);
				o.mapOfPairs = set && mapsToRanges(*set);
			},
		},
		value.source);
	o.len = value.len;
	operands_[id] = std::move(o);
}

const Operand *Renderer::operandOf(ReadId id) const
{
	const std::span<const Slice> read = rule_.read(id);
	if (read.size() != 1 || read[0].kind != Slice::Kind::value || read[0].offset != 0 ||
	    !operands_[read[0].value] || read[0].len != rule_.values[read[0].value].len)
		return nullptr;
	return &*operands_[read[0].value];
}

const Operand *Renderer::comparedOperandOf(ReadId id) const
{
	if (const Operand *whole = operandOf(id))
		return whole;
	const std::span<const Slice> read = rule_.read(id);
	if (read.size() != 1 || read[0].kind != Slice::Kind::value || read[0].offset != 0 ||
	    !operands_[read[0].value])
		return nullptr;
	const Operand &o = *operands_[read[0].value];
	return o.kind == Kind::ifname && read[0].len <= o.len ? &o : nullptr;
}

std::string Renderer::lookupText(ReadId key, const std::string &set, const char *word,
				 const char *between) const
{
	const std::string unnamed = fmt::format("[ {} {} ]", word, escaped(set));
	std::vector<const Operand *> parts;
	std::string out;
	for (const Slice &s : rule_.read(key)) {
		if (s.kind == Slice::Kind::zero)
			continue; // the padding of a 4-byte register word
		if (s.kind != Slice::Kind::value || s.offset != 0 || !operands_[s.value])
			return unnamed;
		parts.push_back(&*operands_[s.value]);
		out += (out.empty() ? "" : " . ") + parts.back()->text;
	}
	return parts.empty() ? unnamed : fmt::format("{} {}{}", out, between, setText(set, parts));
}

std::string Renderer::setText(const std::string &name, const std::vector<const Operand *> &parts) const
{
	const Set *set = table_.findSet(name);
	const bool anonymous = (set && (set->flags & NFT_SET_ANONYMOUS)) || name.rfind("__", 0) == 0;
	if (!anonymous)
		return "@" + escaped(name);
	if (!set || !set->unusable().empty())
		return "{ [ " + escaped(name) + " ] }"; // its elements were not read
	return elementsText(*set, parts);
}

std::string Renderer::elementsText(const Set &set, const std::vector<const Operand *> &parts) const
{
	const auto keyOf = [&](std::span<const uint8_t> key) {
		std::string out;
		size_t at = 0;
		for (const Operand *part : parts) {
			const size_t len = std::min<size_t>(part->len, key.size() - std::min(at, key.size()));
			out += (out.empty() ? "" : " . ") + valueText(key.subspan(at, len), part->kind);
			at += (part->len + 3) / 4 * 4;
		}
		return out;
	};
	const auto dataText = [&](size_t i) -> std::string {
		if (const Verdict *v = set.verdict(i))
			return " : " + verdictText(*v);
		const auto data = set.data(i);
		if (data.empty())
			return "";
		const size_t len = addressLength(set.dataType);
		if (len != 0 && data.size() == len)
			return " : " + addressOf(data).toString();
		if (len != 0 && data.size() == 2 * len)
			return " : " + AddressRange{addressOf(data.first(len)), addressOf(data.last(len))}.toString();
		return " : " + hexOf(data);
	};
	std::vector<std::string> items;
	const bool interval = set.flags & NFT_SET_INTERVAL;
	for (size_t i = 0; i < set.size(); i++) {
		if (set.intervalEnd(i))
			continue;
		std::string key = keyOf(set.key(i));
		if (interval && parts.size() == 1 && set.keyLen <= 16) {
			// The range runs to the next boundary: an end element, or the start of an
			// adjacent range (nft writes no end between two), or to the top.
			const Address first = addressOf(set.key(i));
			const AddressValue top = set.keyLen >= 16 ? ~AddressValue(0)
								   : (AddressValue(1) << (8 * set.keyLen)) - 1;
			const AddressValue last = i + 1 < set.size() ? addressOf(set.key(i + 1)).value - 1 : top;
			const AddressRange range{first, Address{first.family, last}};
			const int length = range.prefixLength();
			if (last <= first.value || last > top) {
				// One key (or boundaries out of order): the key alone.
			} else if (isAddress(parts[0]->kind) && length >= 0) {
				key = fmt::format("{}/{}", key, length);
			} else {
				Bytes bytes(set.keyLen);
				AddressValue v = last;
				for (size_t k = bytes.size(); k-- > 0; v >>= 8)
					bytes[k] = static_cast<uint8_t>(v & 0xff);
				key += "-" + valueText(bytes, parts[0]->kind);
			}
		}
		items.push_back(key + dataText(i));
	}
	if (set.hasCatchAll())
		items.push_back("*" + (set.catchAllVerdict() ? " : " + verdictText(*set.catchAllVerdict()) : ""));
	return "{ " + fmt::format("{}", fmt::join(items, ", ")) + " }";
}

// The value a `meta ... set` or `ct ... set` statement assigns: a constant (a mark), or an
// expression such as "meta mark ^ 0x00004000".
std::string Renderer::assigned(ReadId value) const
{
	const Operand *v = operandOf(value);
	if (!v)
		return "[ value ]";
	return v->constant ? valueText(*v->constant, Kind::mark) : v->text + v->binop;
}

void Renderer::compare(const Compare &c, const Statement *next)
{
	const Operand *lhs = comparedOperandOf(c.lhs);
	if (!lhs || lhs->constant) {
		add(fmt::format("[ cmp {} {} ]", opText(c.op), hexOf(c.data)));
		return;
	}
	// A bitmask type tested with "& bits != 0": nft lists the flags.
	if (lhs->kind == Kind::ctState && !lhs->mask.empty() && c.op == CmpOp::neq &&
	    std::all_of(c.data.begin(), c.data.end(), [](uint8_t b) { return b == 0; })) {
		add(fmt::format("{} {}", lhs->text, valueText(lhs->mask, Kind::ctState)));
		return;
	}
	// gte then lte on the same value: a range.
	if (const auto *upper = next ? std::get_if<Compare>(next) : nullptr;
	    c.op == CmpOp::gte && upper && upper->op == CmpOp::lte &&
	    std::ranges::equal(rule_.read(upper->lhs), rule_.read(c.lhs))) {
		add(fmt::format("{} {}-{}", lhs->text, valueText(c.data, lhs->kind),
				valueText(upper->data, lhs->kind)));
		skipNext_ = true;
		return;
	}
	// An address under a prefix mask prints as a prefix ("ip daddr 172.16.0.0/12").
	const bool prefixMask = isAddress(lhs->kind) && !lhs->mask.empty() && prefixOfMask(lhs->mask) >= 0;
	const std::string left = prefixMask ? lhs->text : lhs->text + lhs->binop;
	// nft writes "==" only after a binary operation.
	const std::string op = c.op != CmpOp::eq ? opText(c.op) : left == lhs->text ? "" : "==";
	const std::string value = comparedValue(*lhs, c.data);
	add(op.empty() ? fmt::format("{} {}", left, value) : fmt::format("{} {} {}", left, op, value));
	// Dependencies: "meta l4proto tcp" / "meta nfproto ipv4" may be implied by what follows.
	if (c.op == CmpOp::eq && c.data.size() == 1) {
		if (lhs->text == "meta l4proto") {
			l4proto_ = c.data[0];
			l4Dependency_ = out_.size() - 1;
		} else if (lhs->text == "meta nfproto" && table_.family == TableFamily::inet) {
			nfproto_ = c.data[0];
			nfprotoDependency_ = out_.size() - 1;
		}
	}
}

std::string Renderer::portsText(const NatStatement &n) const
{
	if (!n.portMin)
		return {};
	const auto port = [this](ReadId read) {
		const Operand *o = operandOf(read);
		return o && o->constant && o->constant->size() >= 2
			       ? valueText(std::span(*o->constant).first(2), Kind::port)
			       : std::string("[ port ]");
	};
	const std::string lo = port(*n.portMin), hi = port(*n.portMax);
	return ":" + lo + (hi != lo ? "-" + hi : "");
}

void Renderer::nat(const NatStatement &n)
{
	static constexpr const char *kNames[] = {"masquerade", "snat", "dnat", "redirect"};
	// nft 1.0.6 does not translate NETMAP: it lists the target by name.
	if (n.xtNetmap) {
		add("xt target NETMAP");
		return;
	}
	std::string out = kNames[static_cast<size_t>(n.kind)];
	const std::string ports = portsText(n);
	if (!n.addressMin) {
		add(out + (ports.empty() ? "" : " to " + ports) + natFlagsText(n.flags));
		return;
	}
	const bool v4 = n.family != Family::ipv6;
	const auto text = [v4](const Operand *o) {
		if (!o)
			return std::string("[ address ]");
		return o->constant ? valueText(*o->constant, v4 ? Kind::ipv4 : Kind::ipv6) : o->text;
	};
	// A map of address pairs (`snat ip to ip saddr map { k : a-b }`): the minimum is the
	// first half of the map's data, the maximum the second.
	const std::span<const Slice> minimum = rule_.read(*n.addressMin);
	const Operand *data = !minimum.empty() && minimum[0].kind == Slice::Kind::value &&
				      minimum[0].offset == 0 && operands_[minimum[0].value]
				      ? &*operands_[minimum[0].value]
				      : nullptr;
	const bool pairMap = data && data->mapOfPairs;
	if ((table_.family == TableFamily::inet || pairMap) && n.family)
		out += v4 ? " ip" : " ip6";
	if (n.flags & NF_NAT_RANGE_NETMAP)
		out += " prefix";
	const Operand *lo = operandOf(*n.addressMin), *hi = operandOf(*n.addressMax);
	// Before a port, each IPv6 address is bracketed: [2001:db8::7]-[2001:db8::9]:1000.
	const bool bracket = !v4 && !ports.empty();
	const auto address = [&](const Operand *o) {
		const std::string t = text(o);
		return bracket && o && o->constant ? "[" + t + "]" : t;
	};
	std::string addr = pairMap ? data->text : address(lo);
	if (lo && hi && lo->constant && hi->constant && *lo->constant != *hi->constant) {
		const std::string prefix = AddressRange{addressOf(*lo->constant), addressOf(*hi->constant)}.toString();
		addr = !(n.flags & NF_NAT_RANGE_NETMAP) ? addr + "-" + address(hi)
			: bracket			 ? "[" + prefix + "]"
							 : prefix;
	} else if (!pairMap && !std::ranges::equal(rule_.read(*n.addressMax), minimum) &&
		   !(lo && hi && lo->constant && hi->constant)) {
		addr += "-" + address(hi);
	}
	add(out + " to " + addr + ports + natFlagsText(n.flags));
}

void Renderer::statement(const Statement &s, const Statement *next)
{
	std::visit(
		Overloaded{
			[&](const Compare &c) { compare(c, next); },
			[&](const InRange &r) {
				const Operand *lhs = operandOf(r.lhs);
				add(lhs ? fmt::format("{} {}{}-{}", lhs->text, r.negated ? "!= " : "",
						      valueText(r.from(), lhs->kind), valueText(r.to(), lhs->kind))
					: std::string("[ range ]"));
			},
			[&](const InSet &in) { add(lookupText(in.key, in.set, "lookup", in.invert ? "!= " : "")); },
			[&](const VerdictMap &v) { add(lookupText(v.key, v.set, "vmap", "vmap ")); },
			[&](const SetVerdict &v) { add(verdictText(v.verdict)); },
			[&](const SetMeta &m) { add(fmt::format("{} set {}", metaOperand(m.key).text, assigned(m.value))); },
			[&](const SetCt &c) { add(fmt::format("{} set {}", ctOperand(c.key, {}).text, assigned(c.value))); },
			[&](const AddressTypeMatch &a) { add(addrtypeText(a)); },
			[&](const XtMark &m) { add(markTargetText(m)); },
			[&](const NatStatement &n) { nat(n); },
			[&](const CounterStatement &c) { add(fmt::format("counter packets {} bytes {}", c.packets, c.bytes)); },
			[&](const Note &n) { add(n.text); }, // escaped by the decoder
			[&](const RateLimited &r) { add("[ " + escaped(r.name) + " ]"); },
			[&](const Undecodable &u) { add(escaped(u.text())); },
		},
		s);
}

std::string Renderer::text()
{
	const auto &statements = rule_.statements;
	size_t defined = 0;
	for (size_t i = 0; i < statements.size(); i++) {
		// The values loaded before this statement: a load names what it reads.
		while (defined < rule_.values.size() && rule_.values[defined].before <= i)
			define(static_cast<ValueId>(defined++));
		if (std::exchange(skipNext_, false))
			continue;
		// A dependency is left out only when the very next statement's load implies it.
		const auto l4Before = l4Dependency_, nfBefore = nfprotoDependency_;
		statement(statements[i], i + 1 < statements.size() ? &statements[i + 1] : nullptr);
		if (l4Dependency_ == l4Before)
			l4Dependency_.reset();
		if (nfprotoDependency_ == nfBefore)
			nfprotoDependency_.reset();
	}
	std::string out;
	for (const std::string &s : out_)
		out += (out.empty() ? "" : " ") + s;
	if (!rule_.comment.empty())
		out += (out.empty() ? "" : " ") + std::string("comment \"") + escaped(rule_.comment) + "\"";
	return out;
}

const char *placementText(Placement placement)
{
	switch (placement) {
	case Placement::beforeAgent: return "before the agent";
	case Placement::tiedWithAgent: return "at the agent's priority: the order is not defined";
	case Placement::afterAgent: return "after the agent";
	}
	return "?";
}

std::string actionText(const Outcome &o, bool certain)
{
	const std::string to = o.addresses ? " to " + o.addresses->toString() : "";
	const auto verb = [certain](const char *does, const char *may) { return std::string(certain ? does : may); };
	switch (o.action) {
	case NatAction::none: return verb("does not NAT it", "may not NAT it");
	case NatAction::masquerade: return verb("masquerades it", "may masquerade it");
	case NatAction::snat: return verb("rewrites its source", "may rewrite its source") + to;
	case NatAction::dnat: return verb("rewrites its destination", "may rewrite its destination") + to;
	case NatAction::redirect: return verb("redirects it", "may redirect it");
	case NatAction::dropped: return verb("drops it", "may drop it");
	case NatAction::undetermined: return "may do anything with it";
	}
	return "?";
}

} // namespace

std::string ruleText(const Table &table, const Rule &rule)
{
	return Renderer(table, rule).text();
}

const Table *findTable(const NatRuleset &ruleset, const Table *agent, TableFamily family,
		       const std::string &name)
{
	if (agent && agent->family == family && agent->name == name)
		return agent;
	for (const Table &table : ruleset.tables)
		if (table.family == family && table.name == name)
			return &table;
	return nullptr;
}

const Rule *findRule(const Table &table, const RuleRef &ref)
{
	const Chain *chain = table.findChain(ref.chain);
	if (!chain)
		return nullptr;
	for (const Rule &rule : chain->rules)
		if (rule.handle == ref.handle)
			return &rule;
	return ref.position < chain->rules.size() ? &chain->rules[ref.position] : nullptr;
}

std::string describeOutcome(const Outcome &o, bool certain)
{
	switch (o.decider) {
	case Decider::nobody:
		return "no chain NATs it";
	case Decider::agent:
		return "the agent " + actionText(o, certain);
	case Decider::evaluator:
		if (!o.base)
			return "the evaluator cannot tell: " + o.reason;
		break;
	case Decider::rule:
	case Decider::policy:
		break;
	}
	std::string out = fmt::format("table {} {} chain {} (priority {}, {})", tableFamilyName(o.base->family),
				      escaped(o.base->table), escaped(o.base->chain),
				      formatChainPriority(o.base->priority), placementText(o.placement));
	if (o.decider == Decider::policy)
		return out + " drops it by its policy";
	if (o.decider == Decider::evaluator) {
		out += " cannot be evaluated: " + o.reason;
		return o.rule ? out + fmt::format(" (rule handle {})", o.rule->handle) : out;
	}
	out += " " + actionText(o, certain);
	if (o.rule) {
		out += fmt::format(": rule handle {}", o.rule->handle);
		if (o.rule->chain != o.base->chain)
			out += fmt::format(" in chain {}", escaped(o.rule->chain));
	}
	return out;
}

} // namespace ipmasq::nat
