// SPDX-License-Identifier: Apache-2.0
// Other tables' rules in nft's listing syntax: a small delinearizer that follows what each
// register holds, as nft's netlink_delinearize.c does, for the expressions the NAT
// evaluator understands.
#include "ip-masq-agent/nat_rule_text.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <fmt/format.h>

#include "ip-masq-agent/overloaded.h"

#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/ruleset.h"

namespace ipmasq::nat {

namespace {

// How a value of a register prints.
enum class Kind { ipv4, ipv6, ifname, l4proto, nfproto, ethertype, mark, ctState, ctDirection,
		  fibType, port, decimal, hex };

// What a register holds, symbolically: "ip daddr" (4 bytes of an IPv4 address), or
// a constant from an immediate.
struct Operand {
	std::string text;
	Kind kind = Kind::hex;
	uint32_t len = 0;
	uint32_t fieldLen = 0; // > len: a prefix of the field (iptables-nft's "-d 10.0.0.0/8")
	std::string binop; // " & 0x00004000", for the listing's explicit "=="
	Bytes mask; // the bitwise mask applied, for prefixes
	std::optional<Bytes> constant;
};

// 32-bit register index (NFT_REG_1 is NFT_REG32_00..03).
std::optional<uint32_t> reg32(uint32_t reg)
{
	if (reg >= NFT_REG_1 && reg <= NFT_REG_4)
		return (reg - NFT_REG_1) * 4;
	if (reg >= NFT_REG32_00 && reg <= NFT_REG32_15)
		return reg - NFT_REG32_00;
	return std::nullopt;
}

std::string hexOf(const Bytes &bytes)
{
	std::string out = "0x";
	for (uint8_t b : bytes)
		out += fmt::format("{:02x}", b);
	return out;
}

uint32_t hostU32(const Bytes &bytes)
{
	uint32_t v = 0;
	if (!bytes.empty()) // an empty vector's data() may be null
		std::memcpy(&v, bytes.data(), std::min<size_t>(4, bytes.size()));
	return v;
}

std::string addressText(const Bytes &bytes, Family family)
{
	AddressValue v = 0;
	for (uint8_t b : bytes)
		v = (v << 8) | b;
	return Address{family, v}.toString();
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
std::string valueText(const Bytes &v, Kind kind)
{
	switch (kind) {
	case Kind::ipv4:
		return v.size() == 4 ? addressText(v, Family::ipv4) : hexOf(v);
	case Kind::ipv6:
		return v.size() == 16 ? addressText(v, Family::ipv6) : hexOf(v);
	case Kind::ifname: {
		const auto nul = std::find(v.begin(), v.end(), 0);
		const std::string name(v.begin(), nul);
		// No NUL among the compared bytes: a prefix match ("eth+" in iptables).
		return "\"" + escaped(name) + (nul == v.end() ? "*" : "") + "\"";
	}
	case Kind::l4proto:
		if (v.size() == 1 && l4protoName(v[0]))
			return l4protoName(v[0]);
		return v.size() == 1 ? std::to_string(v[0]) : hexOf(v);
	case Kind::nfproto:
		if (v.size() == 1 && (v[0] == NFPROTO_IPV4 || v[0] == NFPROTO_IPV6))
			return v[0] == NFPROTO_IPV4 ? "ipv4" : "ipv6";
		return hexOf(v);
	case Kind::ethertype:
		if (v == Bytes{0x08, 0x00})
			return "ip";
		return v == Bytes{0x86, 0xdd} ? "ip6" : hexOf(v);
	case Kind::mark:
		return v.size() == 4 ? fmt::format("{:#010x}", hostU32(v)) : hexOf(v);
	case Kind::ctState:
		return v.size() == 4 ? ctStateText(hostU32(v)) : hexOf(v);
	case Kind::ctDirection:
		return v == Bytes{0} ? "original" : (v == Bytes{1} ? "reply" : hexOf(v));
	case Kind::fibType:
		if (v.size() == 4 && fibTypeName(hostU32(v)))
			return fibTypeName(hostU32(v));
		return hexOf(v);
	case Kind::port:
		return v.size() == 2 ? std::to_string(v[0] << 8 | v[1]) : hexOf(v);
	case Kind::decimal:
		return v.size() == 4 ? std::to_string(hostU32(v)) : hexOf(v);
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
			if (set)
				bits++;
			else
				ended = true;
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
	if (isAddress(lhs.kind) && !lhs.mask.empty()) {
		const int prefix = prefixOfMask(lhs.mask);
		if (prefix >= 0)
			return fmt::format("{}/{}", valueText(data, lhs.kind), prefix);
	}
	return valueText(data, lhs.kind);
}

const char *opText(CmpOp op)
{
	switch (op) {
	case CmpOp::eq: return "==";
	case CmpOp::neq: return "!=";
	case CmpOp::lt: return "<";
	case CmpOp::lte: return "<=";
	case CmpOp::gt: return ">";
	case CmpOp::gte: return ">=";
	}
	return "?";
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

const char *metaName(uint32_t key)
{
	static constexpr const char *kNames[] = {
		"len", "protocol", "priority", "mark", "iif", "oif", "iifname", "oifname",
		"iiftype", "oiftype", "skuid", "skgid", "nftrace", "rtclassid", "secmark",
		"nfproto", "l4proto", "ibrname", "obrname", "pkttype", "cpu", "iifgroup",
		"oifgroup", "cgroup", "random", "secpath", "iifkind", "oifkind", "ibrpvid",
		"ibrvproto", "time", "day", "hour", "sdif", "sdifname"};
	return key < std::size(kNames) ? kNames[key] : nullptr;
}

Operand metaOperand(uint32_t key)
{
	const char *name = metaName(key);
	Operand o;
	o.text = name ? fmt::format("meta {}", name) : fmt::format("meta {}", key);
	o.len = 4;
	switch (key) {
	case NFT_META_IIFNAME:
	case NFT_META_OIFNAME:
		o.text = name; // nft drops "meta" for these
		o.kind = Kind::ifname;
		o.len = IFNAMSIZ;
		break;
	case NFT_META_IIF:
	case NFT_META_OIF:
		o.text = name; // nft resolves the index to a name; we print the index
		o.kind = Kind::decimal;
		break;
	case NFT_META_MARK:
		o.kind = Kind::mark;
		break;
	case NFT_META_L4PROTO:
		o.kind = Kind::l4proto;
		o.len = 1;
		break;
	case NFT_META_NFPROTO:
		o.kind = Kind::nfproto;
		o.len = 1;
		break;
	case NFT_META_PROTOCOL:
		o.kind = Kind::ethertype;
		o.len = 2;
		break;
	default:
		break;
	}
	return o;
}

Operand ctOperand(const CtLoad &c)
{
	static constexpr const char *kNames[] = {
		"state", "direction", "status", "mark", "secmark", "expiration", "helper",
		"l3proto", "saddr", "daddr", "protocol", "proto-src", "proto-dst", "label",
		"packets", "bytes", "avgpkt", "zone", "event", "ip saddr", "ip daddr",
		"ip6 saddr", "ip6 daddr", "id"};
	Operand o;
	const std::string dir = c.direction ? (*c.direction == 0 ? "original " : "reply ") : "";
	o.text = c.key < std::size(kNames) ? fmt::format("ct {}{}", dir, kNames[c.key])
					   : fmt::format("ct {}{}", dir, c.key);
	o.len = 4;
	switch (c.key) {
	case NFT_CT_STATE: o.kind = Kind::ctState; break;
	case NFT_CT_DIRECTION: o.kind = Kind::ctDirection; o.len = 1; break;
	case NFT_CT_MARK: o.kind = Kind::mark; break;
	case NFT_CT_L3PROTOCOL: o.kind = Kind::nfproto; o.len = 1; break;
	case NFT_CT_PROTOCOL: o.kind = Kind::l4proto; o.len = 1; break;
	default: break;
	}
	return o;
}

Operand fibOperand(const Fib &f)
{
	std::string text = "fib ";
	text += (f.flags & NFTA_FIB_F_SADDR) ? "saddr" : "daddr";
	if (f.flags & NFTA_FIB_F_MARK)
		text += " . mark";
	if (f.flags & NFTA_FIB_F_IIF)
		text += " . iif";
	if (f.flags & NFTA_FIB_F_OIF)
		text += " . oif";
	Operand o;
	o.len = 4;
	switch (f.result) {
	case NFT_FIB_RESULT_OIF: text += " oif"; o.kind = Kind::decimal; break;
	case NFT_FIB_RESULT_OIFNAME: text += " oifname"; o.kind = Kind::ifname; o.len = IFNAMSIZ; break;
	case NFT_FIB_RESULT_ADDRTYPE: text += " type"; o.kind = Kind::fibType; break;
	default: text += fmt::format(" result {}", f.result); break;
	}
	o.text = text;
	return o;
}

const char *payloadBaseName(PayloadBase base)
{
	switch (base) {
	case PayloadBase::link: return "ll";
	case PayloadBase::network: return "nh";
	case PayloadBase::transport: return "th";
	case PayloadBase::inner: return "ih";
	}
	return "?";
}

std::string natFlagsText(uint32_t flags)
{
	std::string out;
	const auto add = [&out](const char *name) { out += (out.empty() ? " " : ",") + std::string(name); };
	if (flags & NF_NAT_RANGE_PROTO_RANDOM)
		add("random");
	if (flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY)
		add("fully-random");
	if (flags & NF_NAT_RANGE_PERSISTENT)
		add("persistent");
	return out;
}

// Walks a rule's expressions, keeping what each register holds, and collects statements.
class Delinearizer
{
public:
	explicit Delinearizer(const Table &table) : table_(table) {}

	std::string text(const Rule &rule);

private:
	void add(std::string statement) { out_.push_back(std::move(statement)); }
	void raw(const std::string &what) { add("[ " + escaped(what) + " ]"); }
	void setReg(uint32_t reg, Operand o);
	const Operand *reg(uint32_t reg) const;
	std::string assigned(uint32_t sreg) const;
	std::optional<Family> networkFamily() const;
	void payload(const PayloadLoad &p);
	void cmp(const Cmp &c, const Expression *next);
	void lookup(const Lookup &l);
	std::string concat(uint32_t sreg, uint32_t keyLen, std::vector<const Operand *> &parts) const;
	std::string elementsText(const Set &set, const std::vector<const Operand *> &parts) const;
	std::string keyText(const Bytes &key, const std::vector<const Operand *> &parts) const;
	std::string portsText(std::optional<uint32_t> minReg, std::optional<uint32_t> maxReg) const;
	void nat(const Nat &n);
	void compatMatch(const CompatMatch &m);
	void compatTarget(const CompatTarget &t);

	const Table &table_;
	std::vector<std::string> out_;
	std::map<uint32_t, Operand> regs_;
	// The last statement, when it is a protocol dependency nft leaves out of the
	// listing if the next expression implies it ("meta l4proto tcp" before "tcp dport").
	std::optional<size_t> l4Dependency_;
	std::optional<uint8_t> l4proto_;
	std::optional<size_t> nfprotoDependency_;
	std::optional<uint8_t> nfproto_;
	bool skipNext_ = false;
};

// The value a `meta ... set` or `ct ... set` statement assigns: a constant (a mark), or
// an expression such as "meta mark ^ 0x00004000".
std::string Delinearizer::assigned(uint32_t sreg) const
{
	const Operand *v = reg(sreg);
	if (!v)
		return "[ value ]";
	return v->constant ? valueText(*v->constant, Kind::mark) : v->text + v->binop;
}

void Delinearizer::setReg(uint32_t reg, Operand o)
{
	if (const auto r = reg32(reg))
		regs_[*r] = std::move(o);
}

const Operand *Delinearizer::reg(uint32_t reg) const
{
	const auto r = reg32(reg);
	if (!r)
		return nullptr;
	const auto it = regs_.find(*r);
	return it == regs_.end() ? nullptr : &it->second;
}

std::optional<Family> Delinearizer::networkFamily() const
{
	switch (table_.family) {
	case TableFamily::ip:
		return Family::ipv4;
	case TableFamily::ip6:
		return Family::ipv6;
	case TableFamily::inet:
		break;
	}
	if (nfproto_ == NFPROTO_IPV4)
		return Family::ipv4;
	if (nfproto_ == NFPROTO_IPV6)
		return Family::ipv6;
	return std::nullopt;
}

void Delinearizer::payload(const PayloadLoad &p)
{
	Operand o;
	o.len = p.len;
	o.text = fmt::format("@{},{},{}", payloadBaseName(p.base), p.offset * 8, p.len * 8);
	const auto family = networkFamily();
	if (p.base == PayloadBase::network && family) {
		const bool v4 = *family == Family::ipv4;
		const std::string name = v4 ? "ip" : "ip6";
		const uint32_t addrLen = v4 ? 4 : 16;
		const uint32_t saddr = v4 ? 12 : 8, daddr = v4 ? 16 : 24, proto = v4 ? 9 : 6;
		if ((p.offset == saddr || p.offset == daddr) && p.len >= 1 && p.len <= addrLen) {
			o.text = name + (p.offset == saddr ? " saddr" : " daddr");
			o.kind = v4 ? Kind::ipv4 : Kind::ipv6;
			o.fieldLen = addrLen;
		} else if (p.offset == proto && p.len == 1) {
			o.text = name + (v4 ? " protocol" : " nexthdr");
			o.kind = Kind::l4proto;
		}
		if (nfprotoDependency_)
			out_.erase(out_.begin() + static_cast<long>(*nfprotoDependency_));
	} else if (p.base == PayloadBase::transport && (p.offset == 0 || p.offset == 2) && p.len == 2) {
		const char *proto = l4proto_ ? l4protoName(*l4proto_) : nullptr;
		o.text = fmt::format("{} {}", proto ? proto : "th", p.offset == 0 ? "sport" : "dport");
		o.kind = Kind::port;
		if (proto && l4Dependency_)
			out_.erase(out_.begin() + static_cast<long>(*l4Dependency_));
	}
	setReg(p.dreg, std::move(o));
}

void Delinearizer::cmp(const Cmp &c, const Expression *next)
{
	const Operand *lhs = reg(c.sreg);
	if (!lhs || lhs->constant) {
		raw(fmt::format("cmp {} reg {} {}", opText(c.op), c.sreg, hexOf(c.data)));
		return;
	}
	// A bitmask type tested with "& bits != 0": nft lists the flags.
	if (lhs->kind == Kind::ctState && !lhs->mask.empty() && c.op == CmpOp::neq &&
	    std::all_of(c.data.begin(), c.data.end(), [](uint8_t b) { return b == 0; })) {
		add(fmt::format("{} {}", lhs->text, valueText(lhs->mask, Kind::ctState)));
		return;
	}
	// gte then lte on the same register: a range.
	if (c.op == CmpOp::gte && next) {
		if (const auto *upper = std::get_if<Cmp>(next);
		    upper && upper->op == CmpOp::lte && upper->sreg == c.sreg) {
			add(fmt::format("{} {}-{}", lhs->text, valueText(c.data, lhs->kind),
					valueText(upper->data, lhs->kind)));
			skipNext_ = true;
			return;
		}
	}
	// An address under a prefix mask prints as a prefix ("ip daddr 172.16.0.0/12").
	const bool prefixMask = isAddress(lhs->kind) && !lhs->mask.empty() &&
				prefixOfMask(lhs->mask) >= 0;
	const std::string left = prefixMask ? lhs->text : lhs->text + lhs->binop;
	std::string op = opText(c.op);
	if (c.op == CmpOp::eq)
		op = left == lhs->text ? "" : "=="; // nft writes "==" only after a binary operation
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

std::string Delinearizer::keyText(const Bytes &key, const std::vector<const Operand *> &parts) const
{
	std::string out;
	size_t at = 0;
	for (const Operand *part : parts) {
		const size_t len = std::min<size_t>(part->len, key.size() - std::min(at, key.size()));
		const Bytes field(key.begin() + static_cast<long>(at), key.begin() + static_cast<long>(at + len));
		out += (out.empty() ? "" : " . ") + valueText(field, part->kind);
		at += (part->len + 3) / 4 * 4;
	}
	return out;
}

// A concatenation's operands from sreg on, covering keyLen bytes (each padded to 4).
std::string Delinearizer::concat(uint32_t sreg, uint32_t keyLen,
				 std::vector<const Operand *> &parts) const
{
	auto r = reg32(sreg);
	std::string out;
	uint32_t covered = 0;
	while (r && covered < keyLen) {
		const auto it = regs_.find(*r);
		if (it == regs_.end() || it->second.len == 0)
			return {};
		parts.push_back(&it->second);
		out += (out.empty() ? "" : " . ") + it->second.text;
		const uint32_t padded = (it->second.len + 3) / 4 * 4;
		covered += padded;
		*r += padded / 4;
	}
	return covered == keyLen || parts.size() == 1 ? out : std::string();
}

std::string Delinearizer::elementsText(const Set &set, const std::vector<const Operand *> &parts) const
{
	std::vector<std::string> items;
	const bool interval = set.flags & NFT_SET_INTERVAL;
	std::vector<const SetElement *> sorted;
	for (const SetElement &e : set.elements)
		sorted.push_back(&e);
	std::stable_sort(sorted.begin(), sorted.end(), [](const SetElement *a, const SetElement *b) {
		// Byte by byte, not a->key < b->key: g++ 12 at -O3 inlines std::vector<uint8_t>'s
		// <=> into a memcmp and reports -Wstringop-overread for its length, which it
		// cannot bound (a GCC 12 false positive; the same order, without the memcmp).
		return std::lexicographical_compare(a->key.begin(), a->key.end(), b->key.begin(),
						    b->key.end(), std::less<uint8_t>());
	});
	const auto dataText = [&](const SetElement &e) -> std::string {
		if (e.verdict)
			return " : " + verdictText(*e.verdict);
		return e.data.empty() ? "" : " : " + hexOf(e.data);
	};
	for (size_t i = 0; i < sorted.size(); i++) {
		const SetElement &e = *sorted[i];
		if (e.intervalEnd)
			continue;
		std::string key = keyText(e.key, parts);
		if (interval && parts.size() == 1) {
			// The range ends before the next boundary.
			AddressValue first = 0, end = 0;
			for (uint8_t b : e.key)
				first = (first << 8) | b;
			const bool closed = i + 1 < sorted.size() && sorted[i + 1]->intervalEnd;
			if (closed) {
				for (uint8_t b : sorted[i + 1]->key)
					end = (end << 8) | b;
			} else {
				end = AddressValue(1) << (8 * std::min<size_t>(e.key.size(), 15));
			}
			const AddressValue size = end - first;
			const bool power = size != 0 && (size & (size - 1)) == 0 && (first & (size - 1)) == 0;
			if (isAddress(parts[0]->kind) && power && closed) {
				int bits = 0;
				for (AddressValue s = size; s > 1; s >>= 1)
					bits++;
				if (bits > 0)
					key += fmt::format("/{}", e.key.size() * 8 - bits);
			} else if (closed && size > 1) {
				Bytes last(e.key.size());
				AddressValue v = end - 1;
				for (size_t k = last.size(); k-- > 0; v >>= 8)
					last[k] = static_cast<uint8_t>(v & 0xff);
				key += "-" + valueText(last, parts[0]->kind);
			}
		}
		items.push_back(key + dataText(e));
	}
	std::string out = "{ ";
	for (size_t i = 0; i < items.size(); i++)
		out += (i ? ", " : "") + items[i];
	return out + " }";
}

void Delinearizer::lookup(const Lookup &l)
{
	const Set *set = table_.findSet(l.set);
	std::vector<const Operand *> parts;
	const std::string lhs = set ? concat(l.sreg, set->keyLen, parts) : std::string();
	if (!set || lhs.empty()) {
		raw(fmt::format("lookup reg {} set {}", l.sreg, l.set)); // raw() escapes
		return;
	}
	const bool anonymous = (set->flags & NFT_SET_ANONYMOUS) || l.set.rfind("__", 0) == 0;
	const std::string target = anonymous ? elementsText(*set, parts) : "@" + escaped(l.set);
	if (l.dreg && *l.dreg == NFT_REG_VERDICT) {
		add(fmt::format("{} vmap {}", lhs, target));
	} else if (l.dreg) {
		Operand o;
		o.text = fmt::format("{} map {}", lhs, target);
		o.len = set->dataLen;
		setReg(*l.dreg, std::move(o));
	} else {
		add(fmt::format("{} {}{}", lhs, l.invert ? "!= " : "", target));
	}
}

std::string Delinearizer::portsText(std::optional<uint32_t> minReg, std::optional<uint32_t> maxReg) const
{
	if (!minReg)
		return {};
	const Operand *lo = reg(*minReg);
	const Operand *hi = maxReg ? reg(*maxReg) : nullptr;
	const auto port = [](const Operand *o) {
		return o && o->constant ? valueText(Bytes(o->constant->begin(), o->constant->begin() + std::min<size_t>(2, o->constant->size())), Kind::port)
					: std::string("[ port ]");
	};
	std::string out = ":" + port(lo);
	if (hi && hi != lo && !(lo && hi->constant == lo->constant))
		out += "-" + port(hi);
	return out;
}

void Delinearizer::nat(const Nat &n)
{
	const bool v4 = n.family == NFPROTO_IPV4;
	std::string out = n.type == NatType::snat ? "snat" : "dnat";
	if (table_.family == TableFamily::inet)
		out += v4 ? " ip" : " ip6";
	const auto address = [&](std::optional<uint32_t> r) -> std::string {
		const Operand *o = r ? reg(*r) : nullptr;
		if (!o)
			return "[ address ]";
		if (!o->constant)
			return o->text;
		return valueText(*o->constant, v4 ? Kind::ipv4 : Kind::ipv6);
	};
	if (n.addrMinReg) {
		std::string addr = address(n.addrMinReg);
		if (n.addrMaxReg && n.addrMaxReg != n.addrMinReg)
			addr += "-" + address(n.addrMaxReg);
		const std::string ports = portsText(n.protoMinReg, n.protoMaxReg);
		out += " to " + (!v4 && !ports.empty() ? "[" + addr + "]" : addr) + ports;
	} else if (n.protoMinReg) {
		out += " to " + portsText(n.protoMinReg, n.protoMaxReg);
	}
	add(out + natFlagsText(n.flags));
}

// iptables' addrtype match the way nft (with xtables) translates it.
std::string addrtypeText(const char *which, uint16_t mask, bool invert, uint32_t flags)
{
	std::vector<std::string> names;
	for (uint32_t t = 0; t < 12; t++)
		if (mask & (1u << t))
			names.push_back(fibTypeName(t));
	std::string types = names.size() == 1 ? names[0] : "{ ";
	if (names.size() != 1) {
		for (size_t i = 0; i < names.size(); i++)
			types += (i ? ", " : "") + names[i];
		types += " }";
	}
	std::string iface;
	if (flags & XT_ADDRTYPE_LIMIT_IFACE_IN)
		iface = " . iif";
	if (flags & XT_ADDRTYPE_LIMIT_IFACE_OUT)
		iface = " . oif";
	return fmt::format("fib {}{} type {}{}", which, iface, invert ? "!= " : "", types);
}

void Delinearizer::compatMatch(const CompatMatch &m)
{
	if (m.name == "addrtype" && m.revision == 1 && m.info.size() >= 8) {
		uint16_t source, dest;
		uint32_t flags;
		std::memcpy(&source, m.info.data(), 2);
		std::memcpy(&dest, m.info.data() + 2, 2);
		std::memcpy(&flags, m.info.data() + 4, 4);
		// Like nft's translation: one of the two (the source when both are given).
		if (source)
			add(addrtypeText("saddr", source, flags & XT_ADDRTYPE_INVERT_SOURCE, flags));
		else if (dest)
			add(addrtypeText("daddr", dest, flags & XT_ADDRTYPE_INVERT_DEST, flags));
		return;
	}
	if (m.name == "comment" && !m.info.empty()) {
		const auto nul = std::find(m.info.begin(), m.info.end(), 0);
		// nft 1.0.6 prints nothing for it; the text is worth showing.
		add("comment \"" + escaped(std::string(m.info.begin(), nul)) + "\"");
		return;
	}
	if (m.name == "mark" && m.revision == 1 && m.info.size() >= 9) {
		uint32_t mark, mask;
		std::memcpy(&mark, m.info.data(), 4);
		std::memcpy(&mask, m.info.data() + 4, 4);
		add(fmt::format("meta mark & {:#010x} {} {:#010x}", mask, m.info[8] ? "!=" : "==", mark));
		return;
	}
	add("xt match " + escaped(m.name));
}

// iptables' MARK target (xt_mark_tginfo2: mark = (mark & ~mask) ^ value) as nft, through
// libxtables, translates its --set/--and/--or/--xor-mark forms.
std::string markTargetText(const Bytes &info)
{
	uint32_t value, mask;
	std::memcpy(&value, info.data(), 4);
	std::memcpy(&mask, info.data() + 4, 4);
	if (mask == 0xffffffff)
		return fmt::format("meta mark set {:#x}", value);
	if (value == 0)
		return fmt::format("meta mark set mark and {:#x}", ~mask);
	if (value == mask)
		return fmt::format("meta mark set mark or {:#x}", value);
	if (mask == 0)
		return fmt::format("meta mark set mark xor {:#x}", value);
	return fmt::format("meta mark set mark and {:#x} xor {:#x}", ~mask, value);
}

void Delinearizer::compatTarget(const CompatTarget &t)
{
	// The range of MASQUERADE/SNAT/DNAT/REDIRECT: ports and addresses as iptables sets them.
	uint32_t flags = 0;
	Bytes minAddr, maxAddr;
	uint16_t minPort = 0, maxPort = 0;
	const bool v4 = table_.family != TableFamily::ip6;
	const bool compatRange = v4 && t.revision == 0;
	if (compatRange && t.info.size() >= 24) {
		std::memcpy(&flags, t.info.data() + 4, 4);
		minAddr.assign(t.info.begin() + 8, t.info.begin() + 12);
		maxAddr.assign(t.info.begin() + 12, t.info.begin() + 16);
		minPort = static_cast<uint16_t>(t.info[16] << 8 | t.info[17]);
		maxPort = static_cast<uint16_t>(t.info[20] << 8 | t.info[21]);
	} else if (!compatRange && t.info.size() >= 40) {
		const size_t len = v4 ? 4 : 16;
		std::memcpy(&flags, t.info.data(), 4);
		minAddr.assign(t.info.begin() + 4, t.info.begin() + 4 + static_cast<long>(len));
		maxAddr.assign(t.info.begin() + 20, t.info.begin() + 20 + static_cast<long>(len));
		minPort = static_cast<uint16_t>(t.info[36] << 8 | t.info[37]);
		maxPort = static_cast<uint16_t>(t.info[38] << 8 | t.info[39]);
	}
	std::string ports;
	if (flags & NF_NAT_RANGE_PROTO_SPECIFIED)
		ports = minPort == maxPort ? fmt::format(":{}", minPort)
					   : fmt::format(":{}-{}", minPort, maxPort);
	std::string addr;
	if (flags & NF_NAT_RANGE_MAP_IPS) {
		const Kind kind = v4 ? Kind::ipv4 : Kind::ipv6;
		addr = valueText(minAddr, kind);
		if (maxAddr != minAddr)
			addr += "-" + valueText(maxAddr, kind);
		if (!v4 && !ports.empty())
			addr = "[" + addr + "]";
	}
	const std::string to = addr.empty() && ports.empty() ? "" : " to " + addr + ports;
	if (t.name == "MASQUERADE")
		add("masquerade" + to + natFlagsText(flags));
	else if (t.name == "SNAT")
		add("snat" + to + natFlagsText(flags));
	else if (t.name == "DNAT")
		add("dnat" + to + natFlagsText(flags));
	else if (t.name == "REDIRECT")
		add("redirect" + to + natFlagsText(flags));
	else if (t.name == "MARK" && t.revision == 2 && t.info.size() >= 8)
		add(markTargetText(t.info));
	else
		add("xt target " + escaped(t.name));
}

std::string Delinearizer::text(const Rule &rule)
{
	for (size_t i = 0; i < rule.expressions.size(); i++) {
		if (skipNext_) {
			skipNext_ = false;
			continue;
		}
		const Expression &e = rule.expressions[i];
		const Expression *next = i + 1 < rule.expressions.size() ? &rule.expressions[i + 1] : nullptr;
		// A dependency is left out only when the very next expression implies it.
		const auto l4Before = l4Dependency_;
		const auto nfBefore = nfprotoDependency_;
		std::visit(
			Overloaded{
				[&](const PayloadLoad &p) { payload(p); },
				[&](const MetaLoad &m) { setReg(m.dreg, metaOperand(m.key)); },
				[&](const MetaSet &m) {
					add(fmt::format("{} set {}", metaOperand(m.key).text, assigned(m.sreg)));
				},
				[&](const CtLoad &c) { setReg(c.dreg, ctOperand(c)); },
				[&](const CtSet &c) {
					add(fmt::format("{} set {}", ctOperand({c.key, {}, 0}).text,
							assigned(c.sreg)));
				},
				[&](const Fib &f) { setReg(f.dreg, fibOperand(f)); },
				[&](const Bitwise &b) {
					const Operand *src = reg(b.sreg);
					if (!src || b.op != BitwiseOp::boolean) {
						raw(fmt::format("bitwise reg {} = reg {}", b.dreg, b.sreg));
						return;
					}
					Operand o = *src;
					const bool xorZero = std::all_of(b.xorValue.begin(), b.xorValue.end(),
									 [](uint8_t x) { return x == 0; });
					const bool maskFull = std::all_of(b.mask.begin(), b.mask.end(),
									  [](uint8_t x) { return x == 0xff; });
					const Kind valueKind = o.kind == Kind::ctState ? Kind::ctState : o.kind;
					if (!maskFull) {
						o.mask = b.mask;
						o.binop += " & " + valueText(b.mask, valueKind);
					}
					if (!xorZero)
						o.binop += " ^ " + valueText(b.xorValue, valueKind);
					setReg(b.dreg, std::move(o));
				},
				[&](const Byteorder &b) {
					if (const Operand *src = reg(b.sreg))
						setReg(b.dreg, *src); // nft's listing hides conversions
				},
				[&](const Cmp &c) { cmp(c, next); },
				[&](const Range &r) {
					const Operand *lhs = reg(r.sreg);
					if (!lhs) {
						raw(fmt::format("range reg {}", r.sreg));
						return;
					}
					add(fmt::format("{} {}{}-{}", lhs->text, r.negated ? "!= " : "",
							valueText(r.from, lhs->kind), valueText(r.to, lhs->kind)));
				},
				[&](const Lookup &l) { lookup(l); },
				[&](const Immediate &im) {
					Operand o;
					o.constant = im.data;
					o.len = static_cast<uint32_t>(im.data.size());
					o.text = hexOf(im.data);
					setReg(im.dreg, std::move(o));
				},
				[&](const ImmediateVerdict &v) { add(verdictText(v.verdict)); },
				[&](const Masquerade &m) {
					const std::string ports = portsText(m.protoMinReg, m.protoMaxReg);
					add("masquerade" + (ports.empty() ? "" : " to " + ports) +
					    natFlagsText(m.flags));
				},
				[&](const Nat &n) { nat(n); },
				[&](const Redirect &r) {
					const std::string ports = portsText(r.protoMinReg, r.protoMaxReg);
					add("redirect" + (ports.empty() ? "" : " to " + ports) +
					    natFlagsText(r.flags));
				},
				[&](const Counter &c) {
					add(fmt::format("counter packets {} bytes {}", c.packets, c.bytes));
				},
				[&](const Log &l) {
					std::string out = "log";
					if (l.prefix)
						out += " prefix \"" + escaped(*l.prefix) + "\"";
					if (l.group)
						out += fmt::format(" group {}", *l.group);
					add(out);
				},
				[&](const Passthrough &p) {
					// nft lists an object's name quoted: counter name "masq-v4".
					add(escaped(p.name) + (p.objectName.empty()
								       ? ""
								       : " \"" + escaped(p.objectName) + "\""));
				},
				[&](const RateMatch &r) { raw(r.name); },
				[&](const OpaqueLoad &o) {
					Operand op;
					op.text = fmt::format("[ {} ]", escaped(o.name));
					op.len = o.len;
					setReg(o.dreg, std::move(op));
				},
				[&](const CompatMatch &m) { compatMatch(m); },
				[&](const CompatTarget &t) { compatTarget(t); },
				[&](const Unknown &u) { raw(u.name); },
			},
			e);
		if (l4Dependency_ == l4Before)
			l4Dependency_.reset();
		if (nfprotoDependency_ == nfBefore)
			nfprotoDependency_.reset();
	}
	std::string out;
	for (const std::string &s : out_)
		out += (out.empty() ? "" : " ") + s;
	return out;
}

} // namespace

std::string ruleText(const Table &table, const Rule &rule)
{
	std::string text = Delinearizer(table).text(rule);
	if (!rule.comment.empty())
		text += (text.empty() ? "" : " ") + std::string("comment \"") + escaped(rule.comment) + "\"";
	return text;
}

const Rule *findRule(const NatRuleset &ruleset, const RuleRef &ref)
{
	for (const Table &table : ruleset.tables) {
		if (table.family != ref.family || table.name != ref.table)
			continue;
		const Chain *chain = table.findChain(ref.chain);
		if (!chain)
			return nullptr;
		for (const Rule &rule : chain->rules)
			if (rule.handle == ref.handle)
				return &rule;
		return ref.position < chain->rules.size() ? &chain->rules[ref.position] : nullptr;
	}
	return nullptr;
}

namespace {

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
	const std::string to = o.address ? " to " + o.address->toString() : "";
	const auto verb = [certain](const char *does, const char *may) {
		return std::string(certain ? does : may);
	};
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
	std::string out = o.base ? fmt::format("table {} {} chain {} (priority {}, {})",
					       tableFamilyName(o.base->family), escaped(o.base->table),
					       escaped(o.base->chain), formatChainPriority(o.base->priority),
					       placementText(o.placement))
				 : std::string("a chain");
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
