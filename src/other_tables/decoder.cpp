// SPDX-License-Identifier: Apache-2.0
// Decoding a rule once: registers followed byte by byte, xtables structs read into the
// statements native expressions decode to.
#include "ip-masq-agent/other_tables/decoder.h"

#include <array>
#include <cstring>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>
#include <net/if.h>

#include <fmt/format.h>

#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/overloaded.h"

namespace ipmasq::nat {

namespace {

// nf_tables' register file: the verdict register's 16 bytes, then NFT_REG_1..4, which
// NFT_REG32_00..15 address in 4-byte steps (the kernel's nft_parse_register).
constexpr size_t kRegisterBytes = 16 + 4 * NFT_REG_SIZE;

std::optional<size_t> registerOffset(uint32_t reg, size_t len)
{
	size_t offset;
	if (reg >= NFT_REG_1 && reg <= NFT_REG_4)
		offset = reg * NFT_REG_SIZE;
	else if (reg >= NFT_REG32_00 && reg <= NFT_REG32_15)
		offset = NFT_REG_SIZE + (reg - NFT_REG32_00) * NFT_REG32_SIZE;
	else
		return std::nullopt;
	if (len > kRegisterBytes - offset)
		return std::nullopt;
	return offset;
}

uint32_t fibLength(uint32_t result)
{
	return result == NFT_FIB_RESULT_OIFNAME ? IFNAMSIZ : 4;
}

template<typename T>
T hostAt(const Bytes &info, size_t at)
{
	T v;
	std::memcpy(&v, info.data() + at, sizeof(v));
	return v;
}

Undecodable undecodableOf(bool mayDecide, std::string text, std::string reason)
{
	return {mayDecide, std::make_shared<const Undecodable::Words>(Undecodable::Words{std::move(text), std::move(reason)})};
}

// What each byte of the register file holds.
struct RegisterByte {
	Slice::Kind kind = Slice::Kind::unset;
	ValueId value = 0;
	uint32_t offset = 0;
};

class Decoder
{
public:
	Decoder(const Table &table, Rule &rule) : table_(table), rule_(rule) {}

	// False once the rule has stopped making sense.
	bool decode(const Expression &expression);

private:
	template<typename S>
	bool emit(S statement)
	{
		rule_.statements.emplace_back(std::move(statement));
		return true;
	}
	ValueId define(ValueSource source, uint32_t len);
	bool store(uint32_t reg, ValueId value);
	std::optional<ReadId> read(uint32_t reg, size_t len);
	ReadId constant(Bytes bytes);
	ReadId whole(ValueId value);
	// The slices from `first` on as a read.
	ReadId addRead(uint32_t first);
	// Something without a meaning: the rule goes on (a statement that may do anything
	// leaves nothing known in the registers).
	bool undecodable(bool mayDecide, std::string text, std::string reason);
	// Registers out of range: nothing after it can be read.
	bool broken(std::string text, std::string reason);
	bool lookup(const Lookup &l);
	bool nat(const Nat &n);
	bool compatMatch(const CompatMatch &m);
	bool compatTarget(const CompatTarget &t);
	bool xtNat(const CompatTarget &t, NatKind kind);

	const Table &table_;
	Rule &rule_;
	std::array<RegisterByte, kRegisterBytes> regs_{};
};

ValueId Decoder::define(ValueSource source, uint32_t len)
{
	const auto id = static_cast<ValueId>(rule_.values.size());
	rule_.values.push_back({std::move(source), len, static_cast<uint32_t>(rule_.statements.size())});
	return id;
}

bool Decoder::store(uint32_t reg, ValueId value)
{
	const uint32_t len = rule_.values[value].len;
	const size_t padded = (size_t(len) + 3) / 4 * 4;
	const auto offset = registerOffset(reg, padded);
	if (!offset)
		return broken(fmt::format("[ store to reg {} ]", reg), "an expression writes past the registers");
	for (size_t i = 0; i < padded; i++)
		regs_[*offset + i] = i < len ? RegisterByte{Slice::Kind::value, value, uint32_t(i)}
					     : RegisterByte{Slice::Kind::zero, 0, 0};
	return true;
}

std::optional<ReadId> Decoder::read(uint32_t reg, size_t len)
{
	const auto offset = registerOffset(reg, len);
	if (!offset) {
		broken(fmt::format("[ load from reg {} ]", reg), "an expression reads past the registers");
		return std::nullopt;
	}
	const auto first = static_cast<uint32_t>(rule_.slices.size());
	for (size_t i = 0; i < len; i++) {
		const RegisterByte &b = regs_[*offset + i];
		Slice *last = rule_.slices.size() > first ? &rule_.slices.back() : nullptr;
		if (last && last->kind == b.kind && last->value == b.value &&
		    (b.kind != Slice::Kind::value || last->offset + last->len == b.offset))
			last->len++;
		else
			rule_.slices.push_back({b.kind, b.value, b.offset, 1});
	}
	return addRead(first);
}

ReadId Decoder::whole(ValueId value)
{
	const auto first = static_cast<uint32_t>(rule_.slices.size());
	rule_.slices.push_back({Slice::Kind::value, value, 0, rule_.values[value].len});
	return addRead(first);
}

ReadId Decoder::addRead(uint32_t first)
{
	rule_.reads.emplace_back(first, static_cast<uint32_t>(rule_.slices.size()) - first);
	return static_cast<ReadId>(rule_.reads.size() - 1);
}

ReadId Decoder::constant(Bytes bytes)
{
	const auto len = static_cast<uint32_t>(bytes.size());
	return whole(define(Constant{std::move(bytes)}, len));
}

bool Decoder::undecodable(bool mayDecide, std::string text, std::string reason)
{
	if (mayDecide)
		regs_.fill({});
	return emit(undecodableOf(mayDecide, std::move(text), std::move(reason)));
}

bool Decoder::broken(std::string text, std::string reason)
{
	emit(undecodableOf(true, std::move(text), std::move(reason)));
	return false;
}

bool Decoder::lookup(const Lookup &l)
{
	const Set *set = table_.findSet(l.set);
	// A set the read did not get: guess the widths; the evaluator says "may" for it.
	auto key = read(l.sreg, set ? set->keyLen : 4);
	if (!key)
		return false;
	if (l.dreg && *l.dreg == NFT_REG_VERDICT)
		return emit(VerdictMap{*key, l.set});
	if (l.dreg)
		return store(*l.dreg, define(MapData{*key, l.set}, set ? set->dataLen : NFT_REG_SIZE));
	return emit(InSet{l.set, *key, l.invert});
}

bool Decoder::nat(const Nat &n)
{
	std::optional<Family> family;
	if (n.family == NFPROTO_IPV4 || n.family == NFPROTO_IPV6)
		family = n.family == NFPROTO_IPV4 ? Family::ipv4 : Family::ipv6;
	NatStatement s{.kind = n.kind, .flags = n.flags, .family = family};
	// The kernel takes a missing maximum as the minimum.
	const auto pair = [&](std::optional<uint32_t> min, std::optional<uint32_t> max, size_t len,
			      std::optional<ReadId> &lo, std::optional<ReadId> &hi) {
		if (!min)
			return true;
		lo = read(*min, len);
		hi = max ? read(*max, len) : lo;
		return lo && hi;
	};
	if (!pair(n.addrMinReg, n.addrMaxReg, family == Family::ipv4 ? 4 : 16, s.addressMin, s.addressMax) ||
	    !pair(n.protoMinReg, n.protoMaxReg, 2, s.portMin, s.portMax))
		return false;
	return emit(std::move(s));
}

bool Decoder::compatMatch(const CompatMatch &m)
{
	if (m.name == "comment")
		return emit(Note{"comment \"" +
				 escaped(std::string(m.info.begin(), std::find(m.info.begin(), m.info.end(), 0))) + "\""});
	// xt_addrtype_info { u16 source, dest; u32 invert_source, invert_dest; } and
	// xt_addrtype_info_v1 { u16 source, dest; u32 flags; }.
	if (m.name == "addrtype" && ((m.revision == 0 && m.info.size() >= 12) ||
				     (m.revision == 1 && m.info.size() >= 8))) {
		AddressTypeMatch a;
		a.source = hostAt<uint16_t>(m.info, 0);
		a.destination = hostAt<uint16_t>(m.info, 2);
		if (m.revision == 0) {
			a.invertSource = hostAt<uint32_t>(m.info, 4) != 0;
			a.invertDestination = hostAt<uint32_t>(m.info, 8) != 0;
		} else {
			const auto flags = hostAt<uint32_t>(m.info, 4);
			a.invertSource = flags & XT_ADDRTYPE_INVERT_SOURCE;
			a.invertDestination = flags & XT_ADDRTYPE_INVERT_DEST;
			a.limitInterface = flags & (XT_ADDRTYPE_LIMIT_IFACE_IN | XT_ADDRTYPE_LIMIT_IFACE_OUT);
		}
		return emit(a);
	}
	// xt_mark_mtinfo1 { u32 mark, mask; u8 invert; }: meta mark & mask ==/!= mark.
	if (m.name == "mark" && m.revision == 1 && m.info.size() >= 9) {
		const ValueId mark = define(FromMeta{NFT_META_MARK}, 4);
		const Bytes mask(m.info.begin() + 4, m.info.begin() + 8);
		Bytes maskAndXor = mask;
		maskAndXor.resize(8, 0);
		const ValueId masked = define(Masked{whole(mark), BitwiseOp::boolean, 0, std::move(maskAndXor)}, 4);
		return emit(Compare{whole(masked), m.info[8] ? CmpOp::neq : CmpOp::eq,
				    Bytes(m.info.begin(), m.info.begin() + 4)});
	}
	return undecodable(false, "xt match " + m.name,
			   fmt::format("iptables match {} (revision {}) is not understood", m.name,
				       m.revision));
}

// The range of an xtables NAT target: nf_nat_ipv4_multi_range_compat (IPv4, revision 0:
// rangesize, flags, min_ip, max_ip, min port, max port), else nf_nat_range(2) (flags,
// min_addr[16], max_addr[16], min port, max port).
bool Decoder::xtNat(const CompatTarget &t, NatKind kind)
{
	if (table_.family == TableFamily::inet)
		return undecodable(true, "xt target " + t.name,
				   "an iptables target in an inet table is not understood");
	const bool v4 = table_.family == TableFamily::ip;
	const bool compat = v4 && t.revision == 0;
	const size_t flagsAt = compat ? 4 : 0, minAt = compat ? 8 : 4, maxAt = compat ? 12 : 20,
		     portAt = compat ? 16 : 36, addrLen = v4 ? 4 : 16;
	if (t.info.size() < portAt + 4)
		return undecodable(true, "xt target " + t.name,
				   fmt::format("iptables target {} (revision {}) has a short range",
					       t.name, t.revision));
	NatStatement s{.kind = kind, .xtNetmap = t.name == "NETMAP", .flags = hostAt<uint32_t>(t.info, flagsAt),
		       .family = v4 ? Family::ipv4 : Family::ipv6};
	const auto bytes = [&t](size_t at, size_t len) {
		return Bytes(t.info.begin() + static_cast<long>(at), t.info.begin() + static_cast<long>(at + len));
	};
	if (s.flags & NF_NAT_RANGE_MAP_IPS) {
		s.addressMin = constant(bytes(minAt, addrLen));
		s.addressMax = constant(bytes(maxAt, addrLen));
	}
	if (s.flags & NF_NAT_RANGE_PROTO_SPECIFIED) {
		s.portMin = constant(bytes(portAt, 2));
		s.portMax = constant(bytes(portAt + 2, 2));
	}
	// NETMAP keeps the host part of the address: the native `snat prefix`.
	if (t.name == "NETMAP")
		s.flags |= NF_NAT_RANGE_NETMAP;
	return emit(std::move(s));
}

bool Decoder::compatTarget(const CompatTarget &t)
{
	if (t.name == "MASQUERADE")
		return xtNat(t, NatKind::masquerade);
	// At postrouting NETMAP rewrites the source.
	if (t.name == "SNAT" || t.name == "NETMAP")
		return xtNat(t, NatKind::snat);
	if (t.name == "DNAT")
		return xtNat(t, NatKind::dnat);
	if (t.name == "REDIRECT")
		return xtNat(t, NatKind::redirect);
	// xt_mark_tginfo2 { u32 mark, mask; }
	if (t.name == "MARK" && t.revision == 2 && t.info.size() >= 8)
		return emit(XtMark{hostAt<uint32_t>(t.info, 0), hostAt<uint32_t>(t.info, 4)});
	if (t.name == "LOG")
		return emit(Note{"xt target LOG"});
	static constexpr std::pair<const char *, VerdictCode> kVerdicts[] = {
		{"RETURN", VerdictCode::returnToCaller}, {"ACCEPT", VerdictCode::accept},
		{"DROP", VerdictCode::drop}};
	for (const auto &[name, code] : kVerdicts)
		if (t.name == name)
			return emit(SetVerdict{{code, {}}});
	return undecodable(true, "xt target " + t.name,
			   fmt::format("iptables target {} (revision {}) is not understood", t.name,
				       t.revision));
}

bool Decoder::decode(const Expression &expression)
{
	const auto load = [&](uint32_t dreg, ValueSource source, uint32_t len) {
		return store(dreg, define(std::move(source), len));
	};
	return std::visit(
		Overloaded{
			[&](const PayloadLoad &p) { return load(p.dreg, FromPayload{p.base, p.offset}, p.len); },
			[&](const MetaLoad &m) { return load(m.dreg, FromMeta{m.key}, metaKey(m.key).len); },
			[&](const CtLoad &c) { return load(c.dreg, FromCt{c.key, c.direction}, ctKey(c.key).len); },
			[&](const Fib &f) { return load(f.dreg, FromFib{f.flags, f.result}, fibLength(f.result)); },
			[&](const Immediate &i) {
				return load(i.dreg, Constant{i.data}, static_cast<uint32_t>(i.data.size()));
			},
			[&](const OpaqueLoad &o) {
				const auto at = registerOffset(o.dreg, 0);
				const uint32_t len = o.len ? o.len : uint32_t(at ? kRegisterBytes - *at : 4);
				return load(o.dreg, Opaque{o.name}, len);
			},
			[&](const Bitwise &b) {
				auto source = read(b.sreg, b.len);
				// The mask and xor value as long as the operation (shorter ones are padded).
				Bytes maskAndXor = b.mask;
				maskAndXor.resize(b.len, 0);
				maskAndXor.insert(maskAndXor.end(), b.xorValue.begin(), b.xorValue.end());
				maskAndXor.resize(2 * size_t(b.len), 0);
				return source && load(b.dreg, Masked{*source, b.op, b.shift, std::move(maskAndXor)}, b.len);
			},
			[&](const Byteorder &b) {
				auto source = read(b.sreg, b.len);
				return source && load(b.dreg, Swapped{*source, b.toNetwork, b.size}, b.len);
			},
			[&](const MetaSet &m) {
				auto value = read(m.sreg, metaKey(m.key).len);
				return value && emit(SetMeta{m.key, *value});
			},
			[&](const CtSet &c) {
				auto value = read(c.sreg, ctKey(c.key).len);
				return value && emit(SetCt{c.key, *value});
			},
			[&](const Cmp &c) {
				auto lhs = read(c.sreg, c.data.size());
				return lhs && emit(Compare{*lhs, c.op, c.data});
			},
			[&](const Range &r) {
				if (r.from.size() != r.to.size())
					return undecodable(false, "[ range ]", "a range's bounds differ in length");
				auto lhs = read(r.sreg, r.from.size());
				Bytes bounds = r.from;
				bounds.insert(bounds.end(), r.to.begin(), r.to.end());
				return lhs && emit(InRange{*lhs, r.negated, std::move(bounds)});
			},
			[&](const Lookup &l) { return lookup(l); },
			[&](const ImmediateVerdict &v) {
				return v.verdict.code == VerdictCode::continueRule || emit(SetVerdict{v.verdict});
			},
			[&](const Nat &n) { return nat(n); },
			[&](const Counter &c) { return emit(CounterStatement{c.packets, c.bytes}); },
			[&](const Log &l) {
				return emit(Note{"log" + (l.prefix ? " prefix \"" + escaped(*l.prefix) + "\"" : std::string()) +
						 (l.group ? fmt::format(" group {}", *l.group) : std::string())});
			},
			// nft lists an object's name quoted: counter name "masq-v4".
			[&](const Passthrough &p) {
				return emit(Note{escaped(p.name) +
						 (p.objectName.empty() ? "" : " \"" + escaped(p.objectName) + "\"")});
			},
			[&](const RateMatch &r) { return emit(RateLimited{r.name}); },
			[&](const CompatMatch &m) { return compatMatch(m); },
			[&](const CompatTarget &t) { return compatTarget(t); },
			[&](const Unknown &u) {
				return undecodable(true, "[ " + u.name + " ]",
						   fmt::format("expression {} is not understood", u.name));
			},
		},
		expression);
}

} // namespace

// Widths as the kernel's loads write them; where the evaluator needs none, a whole register
// (less known, never something wrong).
LoadKey metaKey(uint32_t key)
{
	static constexpr LoadKey kKeys[] = { // by NFT_META_*
		{"len", 4}, {"protocol", 2}, {"priority", 4}, {"mark", 4}, {"iif", 4}, {"oif", 4},
		{"iifname", IFNAMSIZ}, {"oifname", IFNAMSIZ}, {"iiftype", 2}, {"oiftype", 2},
		{"skuid", 4}, {"skgid", 4}, {"nftrace", 4}, {"rtclassid", 4}, {"secmark", 4},
		{"nfproto", 1}, {"l4proto", 1}, {"ibrname", IFNAMSIZ}, {"obrname", IFNAMSIZ},
		{"pkttype", 1}, {"cpu", 4}, {"iifgroup", 4}, {"oifgroup", 4}, {"cgroup", 4},
		{"random", 4}, {"secpath", 1}, {"iifkind", IFNAMSIZ}, {"oifkind", IFNAMSIZ},
		{"ibrpvid", 2}, {"ibrvproto", 2}, {"time", 8}, {"day", 1}, {"hour", 4}, {"sdif", 4},
		{"sdifname", IFNAMSIZ}};
	static_assert(std::size(kKeys) == NFT_META_SDIFNAME + 1);
	return key < std::size(kKeys) ? kKeys[key] : LoadKey{nullptr, NFT_REG_SIZE};
}

LoadKey ctKey(uint32_t key)
{
	constexpr uint32_t kWhole = NFT_REG_SIZE;
	static constexpr LoadKey kKeys[] = { // by NFT_CT_*
		{"state", 4}, {"direction", 1}, {"status", 4}, {"mark", 4}, {"secmark", 4},
		{"expiration", 4}, {"helper", kWhole}, {"l3proto", 1}, {"saddr", kWhole},
		{"daddr", kWhole}, {"protocol", 1}, {"proto-src", kWhole}, {"proto-dst", kWhole},
		{"label", kWhole}, {"packets", kWhole}, {"bytes", kWhole}, {"avgpkt", kWhole},
		{"zone", kWhole}, {"event", kWhole}, {"ip saddr", kWhole}, {"ip daddr", kWhole},
		{"ip6 saddr", kWhole}, {"ip6 daddr", kWhole}, {"id", kWhole}};
	static_assert(std::size(kKeys) == NFT_CT_ID + 1);
	return key < std::size(kKeys) ? kKeys[key] : LoadKey{nullptr, kWhole};
}

Rule decodeRule(const Table &table, uint64_t handle, std::span<const Expression> expressions,
		std::string comment)
{
	Rule rule;
	rule.handle = handle;
	rule.comment = std::move(comment);
	Decoder decoder(table, rule);
	size_t decoded = 0;
	for (const Expression &expression : expressions) {
		if (decoded++ == kMaxExpressionsPerRule) {
			rule.statements.emplace_back(undecodableOf(
				true, "[ more expressions ]",
				fmt::format("the rule has more than {} expressions", kMaxExpressionsPerRule)));
			break;
		}
		if (!decoder.decode(expression))
			break;
	}
	// Held by the thousand: no room to grow.
	rule.values.shrink_to_fit();
	rule.statements.shrink_to_fit();
	rule.slices.shrink_to_fit();
	rule.reads.shrink_to_fit();
	return rule;
}

} // namespace ipmasq::nat
