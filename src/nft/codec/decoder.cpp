// SPDX-License-Identifier: Apache-2.0
// Decoding a rule once: registers followed byte by byte, xtables structs read into the
// statements native expressions decode to.
#include "ip-masq-agent/nft/codec/decoder.h"

#include <array>
#include <cstring>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/register_file.h"
#include "ip-masq-agent/nft/codec/vocabulary.h"
#include "ip-masq-agent/base/overloaded.h"

namespace ipmasq::nft {

namespace {

template<typename T>
T hostAt(const Bytes &info, size_t at)
{
	T v;
	std::memcpy(&v, info.data() + at, sizeof(v));
	return v;
}

class Decoder
{
public:
	Decoder(const Table &table, Rule &rule) : table_(table), rule_(rule), regs_(rule) {}

	// False once the rule has stopped making sense.
	bool decode(const Expression &expression);
	// A statement the evaluator reads by its effect; false when a register is out of range.
	bool other(Other::Effect effect, const Expression &e, std::string reason,
		   std::initializer_list<std::pair<std::optional<uint32_t>, size_t>> reads = {});

private:
	template<typename S>
	bool emit(S statement)
	{
		rule_.statements.emplace_back(std::move(statement));
		return true;
	}
	// A value computed into `dreg` (RegisterFile::load); past the registers, the rule is broken.
	bool load(std::optional<uint32_t> dreg, ValueSource source, uint32_t len);
	// Registers out of range: nothing after it can be read.
	bool broken(const Expression &e, std::string reason);
	bool lookup(const Lookup &l);
	bool nat(NatKind kind, uint32_t family, uint32_t flags, const std::array<Reg, 4> &regs);
	bool statementOf(const Expression &e);
	bool payload(const Payload &p, const Expression &e);
	template<typename Keyed>
	bool keyed(const Keyed &k, const Expression &e, uint32_t len);
	bool bitwise(const Bitwise &b, const Expression &e);
	bool compare(const Cmp &c, const Expression &e);
	bool range(const Range &r, const Expression &e);
	bool xtMatch(const Match &m);
	bool xtTarget(const Target &t);
	bool xtNat(const Target &t, NatKind kind);

	const Table &table_;
	Rule &rule_;
	RegisterFile regs_;
};

bool Decoder::load(std::optional<uint32_t> dreg, ValueSource source, uint32_t len)
{
	return regs_.load(dreg, std::move(source), len) ||
	       broken(UnknownExpression{fmt::format("store to reg {}", dreg.value_or(0))},
		      "an expression writes past the registers");
}

Other otherOf(Other::Effect effect, const Expression &e, std::vector<ReadId> reads, std::string reason)
{
	return {effect, std::make_shared<const Other::Detail>(Other::Detail{e, std::move(reads), std::move(reason)})};
}

bool Decoder::other(Other::Effect effect, const Expression &e, std::string reason,
		    std::initializer_list<std::pair<std::optional<uint32_t>, size_t>> registers)
{
	std::vector<ReadId> reads;
	for (const auto &[reg, len] : registers) {
		if (!reg)
			continue;
		auto r = regs_.read(*reg, len);
		if (!r)
			return broken(e, "an expression reads past the registers");
		reads.push_back(*r);
	}
	// A statement that may do anything leaves nothing known in the registers.
	if (effect == Other::Effect::mayDecide)
		regs_.forget();
	return emit(otherOf(effect, e, std::move(reads), std::move(reason)));
}

bool Decoder::broken(const Expression &e, std::string reason)
{
	emit(otherOf(Other::Effect::mayDecide, e, {}, std::move(reason)));
	return false;
}

bool Decoder::lookup(const Lookup &l)
{
	const Set *set = table_.findSet(l.set);
	// A set the read did not get: guess the widths; the evaluator says "may" for it.
	auto key = regs_.read(l.sreg, set ? set->keyLen : 4);
	if (!key)
		return broken(l, "an expression reads past the registers");
	if (l.dreg && *l.dreg == NFT_REG_VERDICT)
		return emit(VerdictMap{*key, l.set});
	if (l.dreg)
		return load(l.dreg, MapData{*key, l.set}, set ? set->dataLen : NFT_REG_SIZE);
	return emit(InSet{l.set, *key, (l.flags.value_or(0) & NFT_LOOKUP_F_INV) != 0});
}

// masq, redir, snat and dnat: the registers that hold the address and port ranges (address
// min, max, port min, max).
bool Decoder::nat(NatKind kind, uint32_t family, uint32_t flags, const std::array<Reg, 4> &regs)
{
	std::optional<Family> f;
	if (family == NFPROTO_IPV4 || family == NFPROTO_IPV6)
		f = family == NFPROTO_IPV4 ? Family::ipv4 : Family::ipv6;
	NatStatement s{.kind = kind, .flags = flags, .family = f};
	// The kernel takes a missing maximum as the minimum.
	const auto pair = [&](const Reg &min, const Reg &max, size_t len, std::optional<ReadId> &lo,
			      std::optional<ReadId> &hi) {
		if (!min)
			return true;
		lo = regs_.read(*min, len);
		hi = max ? regs_.read(*max, len) : lo;
		return lo && hi;
	};
	if (!pair(regs[0], regs[1], f == Family::ipv4 ? 4 : 16, s.addressMin, s.addressMax) ||
	    !pair(regs[2], regs[3], 2, s.portMin, s.portMax))
		return broken(UnknownExpression{"nat"}, "an expression reads past the registers");
	return emit(std::move(s));
}

bool Decoder::xtMatch(const Match &m)
{
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
		const ValueId mark = regs_.define(FromMeta{NFT_META_MARK}, 4);
		Bytes maskAndXor(m.info.begin() + 4, m.info.begin() + 8);
		maskAndXor.resize(8, 0);
		const ValueId masked = regs_.define(Masked{regs_.whole(mark), BitwiseOp::boolean, 0, std::move(maskAndXor)}, 4);
		return emit(Compare{regs_.whole(masked), m.info[8] ? CmpOp::neq : CmpOp::eq,
				    Bytes(m.info.begin(), m.info.begin() + 4)});
	}
	if (m.name == "comment")
		return emit(commentMatch());
	// The text needs statistic's info; of any other match only its name.
	Match kept{m.name, m.revision, m.name == "statistic" ? m.info : Bytes{}};
	return other(Other::Effect::mayNotMatch, kept,
		     fmt::format("iptables match {} (revision {}) is not understood", m.name, m.revision));
}

// The range of an xtables NAT target: nf_nat_ipv4_multi_range_compat (IPv4, revision 0:
// rangesize, flags, min_ip, max_ip, min port, max port), else nf_nat_range(2) (flags,
// min_addr[16], max_addr[16], min port, max port).
bool Decoder::xtNat(const Target &t, NatKind kind)
{
	if (table_.family == TableFamily::inet)
		return other(Other::Effect::mayDecide, t, "an iptables target in an inet table is not understood");
	const bool v4 = table_.family == TableFamily::ip;
	const bool compat = v4 && t.revision == 0;
	const size_t flagsAt = compat ? 4 : 0, minAt = compat ? 8 : 4, maxAt = compat ? 12 : 20,
		     portAt = compat ? 16 : 36, addrLen = v4 ? 4 : 16;
	if (t.info.size() < portAt + 4)
		return other(Other::Effect::mayDecide, t,
			     fmt::format("iptables target {} (revision {}) has a short range", t.name, t.revision));
	NatStatement s{.kind = kind, .xtables = true, .xtNetmap = t.name == "NETMAP",
		       .flags = hostAt<uint32_t>(t.info, flagsAt), .family = v4 ? Family::ipv4 : Family::ipv6};
	const auto bytes = [&t](size_t at, size_t len) {
		return Bytes(t.info.begin() + static_cast<long>(at), t.info.begin() + static_cast<long>(at + len));
	};
	if (s.flags & NF_NAT_RANGE_MAP_IPS) {
		s.addressMin = regs_.constant(bytes(minAt, addrLen));
		s.addressMax = regs_.constant(bytes(maxAt, addrLen));
	}
	if (s.flags & NF_NAT_RANGE_PROTO_SPECIFIED) {
		s.portMin = regs_.constant(bytes(portAt, 2));
		s.portMax = regs_.constant(bytes(portAt + 2, 2));
	}
	// NETMAP keeps the host part of the address: the native `snat prefix`.
	if (t.name == "NETMAP")
		s.flags |= NF_NAT_RANGE_NETMAP;
	return emit(std::move(s));
}

bool Decoder::xtTarget(const Target &t)
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
		return other(Other::Effect::none, t, {});
	static constexpr std::pair<const char *, VerdictCode> kVerdicts[] = {
		{"RETURN", VerdictCode::returnToCaller}, {"ACCEPT", VerdictCode::accept}, {"DROP", VerdictCode::drop}};
	for (const auto &[name, code] : kVerdicts)
		if (t.name == name)
			return emit(SetVerdict{{code, {}}});
	return other(Other::Effect::mayDecide, t,
		     fmt::format("iptables target {} (revision {}) is not understood", t.name, t.revision));
}

uint32_t addressLength(uint32_t family, TableFamily table)
{
	return family == NFPROTO_IPV4 || (family == 0 && table == TableFamily::ip) ? 4 : 16;
}

// The expressions that are statements, not loads or matches on values.
bool Decoder::statementOf(const Expression &e)
{
	using Effect = Other::Effect;
	const auto rate = [&](const char *what) {
		return other(Effect::mayNotMatch, e, fmt::format("{} depends on earlier traffic", what));
	};
	const uint32_t tableAddress = addressLength(0, table_.family);
	return std::visit(
		Overloaded{
			[&](const Counter &c) { return emit(CounterStatement{c.packets, c.bytes}); },
			[&](const Limit &) { return rate("limit"); },
			[&](const Quota &) { return rate("quota"); },
			[&](const Connlimit &) { return rate("connlimit"); },
			[&](const Objref &o) {
				if (o.set) {
					const Set *set = table_.findSet(*o.set);
					return other(Effect::mayNotMatch, e, "a map of stateful objects may not match",
						     {{o.sreg, set ? set->keyLen : 4}});
				}
				return o.type == NFT_OBJECT_QUOTA || o.type == NFT_OBJECT_LIMIT
					       ? rate(o.type == NFT_OBJECT_QUOTA ? "quota" : "limit")
					       : other(Effect::none, e, {});
			},
			[&](const Dynset &d) {
				const Set *set = table_.findSet(d.set);
				return other(Effect::mayNotMatch, e, "an update of a set from the packet path may not match",
					     {{d.key, set ? set->keyLen : 4}, {d.data, set ? set->dataLen : 4}});
			},
			[&](const Queue &q) {
				return other(Effect::mayDecide, e, "the packet is handed to user space (queue)",
					     {{q.sreg, 4}});
			},
			[&](const Dup &d) {
				return other(Effect::none, e, {}, {{d.address, tableAddress}, {d.device, 4}});
			},
			[&](const Fwd &f) {
				return other(Effect::mayDecide, e, "fwd sends the packet elsewhere",
					     {{f.device, 4}, {f.address, addressLength(f.family.value_or(0), table_.family)}});
			},
			[&](const Tproxy &t) {
				return other(Effect::mayDecide, e, "tproxy diverts the packet",
					     {{t.address, addressLength(t.family, table_.family)}, {t.port, 2}});
			},
			[&](const Reject &) { return other(Effect::mayDecide, e, "reject drops the packet"); },
			[&](const Match &m) { return xtMatch(m); },
			[&](const Target &t) { return xtTarget(t); },
			[&](const UnknownExpression &u) {
				return other(Effect::mayDecide, e, fmt::format("expression {} is not understood", u.name));
			},
			[&](const auto &) { return other(Effect::none, e, {}); }, // log, notrack, last...
		},
		e);
}

bool Decoder::payload(const Payload &p, const Expression &e)
{
	if (p.sreg)
		return other(Other::Effect::mayDecide, e, "a payload write rewrites the packet", {{p.sreg, p.len}});
	if (p.base > NFT_PAYLOAD_INNER_HEADER)
		return other(Other::Effect::mayDecide, e, fmt::format("payload base {} is not understood", p.base));
	return load(p.dreg, FromPayload{PayloadBase(p.base), p.offset}, p.len);
}

// A meta or ct key: a load into dreg, or a statement that sets the key from sreg.
template<typename Keyed>
bool Decoder::keyed(const Keyed &k, const Expression &e, uint32_t len)
{
	if (k.dreg) {
		if constexpr (std::is_same_v<Keyed, Meta>)
			return load(k.dreg, FromMeta{k.key}, len);
		else
			return load(k.dreg, FromCt{k.key, k.direction}, len);
	}
	auto value = k.sreg ? regs_.read(*k.sreg, len) : std::nullopt;
	if (!value)
		return broken(e, "an expression reads past the registers");
	if constexpr (std::is_same_v<Keyed, Meta>)
		return emit(SetMeta{k.key, *value});
	else
		return emit(SetCt{k.key, k.direction, *value});
}

bool Decoder::bitwise(const Bitwise &b, const Expression &e)
{
	auto source = regs_.read(b.sreg, b.len);
	if (!source)
		return broken(e, "an expression reads past the registers");
	const uint32_t op = b.op.value_or(NFT_BITWISE_BOOL);
	// The mask and xor value as long as the operation (shorter ones are padded).
	Bytes maskAndXor = b.mask;
	maskAndXor.resize(b.len, 0);
	maskAndXor.insert(maskAndXor.end(), b.xorValue.begin(), b.xorValue.end());
	maskAndXor.resize(2 * size_t(b.len), 0);
	uint32_t shift = 0;
	if (b.shift.size() >= 4)
		std::memcpy(&shift, b.shift.data(), 4);
	const BitwiseOp kind = op == NFT_BITWISE_LSHIFT	  ? BitwiseOp::leftShift
			       : op == NFT_BITWISE_RSHIFT ? BitwiseOp::rightShift
							  : BitwiseOp::boolean;
	return load(b.dreg, Masked{*source, kind, shift, std::move(maskAndXor)}, b.len);
}

bool Decoder::compare(const Cmp &c, const Expression &e)
{
	static constexpr CmpOp kOps[] = {CmpOp::eq, CmpOp::neq, CmpOp::lt, CmpOp::lte, CmpOp::gt, CmpOp::gte};
	if (c.op >= std::size(kOps))
		return broken(e, fmt::format("cmp operation {} is not understood", c.op));
	auto lhs = regs_.read(c.sreg, c.data.size());
	if (!lhs)
		return broken(e, "an expression reads past the registers");
	return emit(Compare{*lhs, kOps[c.op], c.data});
}

bool Decoder::range(const Range &r, const Expression &e)
{
	if (r.from.size() != r.to.size())
		return broken(e, "a range's bounds differ in length");
	auto lhs = regs_.read(r.sreg, r.from.size());
	if (!lhs)
		return broken(e, "an expression reads past the registers");
	Bytes bounds = r.from;
	bounds.insert(bounds.end(), r.to.begin(), r.to.end());
	return emit(InRange{*lhs, r.op == NFT_RANGE_NEQ, std::move(bounds)});
}

bool Decoder::decode(const Expression &expression)
{
	const bool ipv4 = table_.family == TableFamily::ip;
	const auto otherLoad = [&](Reg dreg, uint32_t len, std::optional<ReadId> input = {}) {
		return load(dreg, OtherLoad{std::make_shared<const Expression>(expression), input}, len);
	};
	return std::visit(
		Overloaded{
			[&](const Payload &p) { return payload(p, expression); },
			[&](const Meta &m) { return keyed(m, expression, metaKey(m.key).kernelLen); },
			[&](const Ct &c) { return keyed(c, expression, ctKey(c.key, ipv4).kernelLen); },
			[&](const Fib &f) { return load(f.dreg, FromFib{f.flags, f.result}, fibLength(f.result)); },
			[&](const Exthdr &x) {
				if (x.dreg)
					return otherLoad(x.dreg, x.len);
				return other(Other::Effect::none, expression, {}, {{x.sreg, x.len}});
			},
			[&](const Numgen &n) { return otherLoad(n.dreg, 4); },
			[&](const Hash &h) {
				std::optional<ReadId> input;
				if (h.sreg && !(input = regs_.read(*h.sreg, h.len)))
					return broken(expression, "an expression reads past the registers");
				return otherLoad(h.dreg, 4, input);
			},
			[&](const Rt &r) { return otherLoad(r.dreg, rtKey(r.key).kernelLen); },
			[&](const Socket &s) { return otherLoad(s.dreg, socketKey(s.key).kernelLen); },
			[&](const Osf &o) { return otherLoad(o.dreg, 16); },
			[&](const Xfrm &x) { return otherLoad(x.dreg, xfrmKey(x.key).kernelLen); },
			[&](const Tunnel &t) { return otherLoad(t.dreg, 4); },
			[&](const Immediate &i) {
				if (i.dreg != NFT_REG_VERDICT)
					return load(i.dreg, Constant{i.data}, static_cast<uint32_t>(i.data.size()));
				const Verdict v = verdictOf(static_cast<int32_t>(i.verdict.value_or(NFT_CONTINUE)),
							    i.chain.value_or(""));
				return emit(SetVerdict{v}); // an explicit continue too: nft lists it
			},
			[&](const Bitwise &b) { return bitwise(b, expression); },
			[&](const Byteorder &b) {
				auto source = regs_.read(b.sreg, b.len);
				return source ? load(b.dreg, Swapped{*source, b.op == NFT_BYTEORDER_HTON, b.size}, b.len)
					      : broken(expression, "an expression reads past the registers");
			},
			[&](const Cmp &c) { return compare(c, expression); },
			[&](const Range &r) { return range(r, expression); },
			[&](const Lookup &l) { return lookup(l); },
			[&](const Nat &n) {
				return nat(n.type == NFT_NAT_DNAT ? NatKind::dnat : NatKind::snat, n.family,
					   n.flags.value_or(0), {n.addressMin, n.addressMax, n.portMin, n.portMax});
			},
			[&](const Masq &m) { return nat(NatKind::masquerade, 0, m.flags.value_or(0), std::array<Reg, 4>{Reg{}, Reg{}, m.portMin, m.portMax}); },
			[&](const Redir &r) { return nat(NatKind::redirect, 0, r.flags.value_or(0), std::array<Reg, 4>{Reg{}, Reg{}, r.portMin, r.portMax}); },
			[&](const auto &) { return statementOf(expression); },
		},
		expression);
}

} // namespace

Other commentMatch()
{
	// Held by every rule iptables wrote with a comment (upstream's chain: 30,000 of them),
	// so one for all: nft lists it as nothing, and nothing depends on its text.
	static const Other kComment{Other::Effect::none,
				    std::make_shared<const Other::Detail>(Other::Detail{Match{"comment", 0, {}}, {}, {}})};
	return kComment;
}

Rule decodeRule(const Table &table, uint64_t handle, std::span<const Expression> expressions, std::string comment)
{
	Rule rule;
	rule.handle = handle;
	rule.comment = std::move(comment);
	Decoder decoder(table, rule);
	size_t decoded = 0;
	for (const Expression &expression : expressions) {
		if (decoded++ == kMaxExpressionsPerRule) {
			decoder.other(Other::Effect::mayDecide, UnknownExpression{"more expressions"},
				      fmt::format("the rule has more than {} expressions", kMaxExpressionsPerRule));
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

} // namespace ipmasq::nft
