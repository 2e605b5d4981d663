// SPDX-License-Identifier: Apache-2.0
// A decoded rule's values as expression trees and its statements as nft's (nft's
// netlink_delinearize.c up to its post-processing, read, not copied): what each register
// holds when a statement reads it, loads with their keys' types, NAT registers as values,
// ranges or prefixes, sets by reference (an anonymous one with its elements).
#include <algorithm>

#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/overloaded.h"
#include "ip-masq-agent/nft/codec/rule_text_parts.h"

namespace ipmasq::nft::text {

namespace {

NodeId metaNode(Tree &tree, uint32_t key)
{
	const Key k = metaKey(key);
	if (!k.name)
		return tree.unknown(fmt::format("meta key {}", key));
	Node n{.kind = Kind::meta, .type = k.type, .order = k.order, .bits = k.bits, .key = key};
	// nft's meta base: the protocol matches' level (nfproto and protocol name the network
	// header, l4proto the transport's).
	n.protocolKey = key == NFT_META_IIFTYPE || key == NFT_META_NFPROTO || key == NFT_META_L4PROTO ||
			key == NFT_META_PROTOCOL;
	n.base = key == NFT_META_L4PROTO ? Base::network
		 : key == NFT_META_NFPROTO || key == NFT_META_PROTOCOL ? Base::link : Base::invalid;
	return tree.add(std::move(n));
}

NodeId ctNode(Tree &tree, uint32_t key, int direction, TableFamily family)
{
	const Key k = ctKey(key, family == TableFamily::ip);
	if (!k.name)
		return tree.unknown(fmt::format("ct key {}", key));
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
	return tree.add(std::move(n));
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

// A load only the kernel can answer (fib, numgen, hash, rt, socket, osf, xfrm): its text,
// type and width; `input` is what a hash reads.
NodeId loadNode(Tree &tree, const Expression &load, NodeId input, uint32_t len)
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
					n.a = input != kNone ? input : tree.unknown("hash input");
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
		return tree.unknown(nameOf(load));
	return tree.add(std::move(n));
}

// nft's netlink_parsers: the statement an expression of Other is.
StmtType stmtType(const Expression &expression)
{
	return std::visit(
		Overloaded{
			[](const Payload &) { return StmtType::payload; },
			[](const Exthdr &) { return StmtType::exthdr; },
			[](const Counter &) { return StmtType::counter; },
			[](const Log &) { return StmtType::log; },
			[](const Limit &) { return StmtType::limit; },
			[](const Quota &) { return StmtType::quota; },
			[](const Connlimit &) { return StmtType::connlimit; },
			[](const Notrack &) { return StmtType::notrack; },
			[](const FlowOffload &) { return StmtType::flowOffload; },
			[](const Objref &) { return StmtType::objref; },
			[](const Dynset &) { return StmtType::dynset; },
			[](const Dup &) { return StmtType::dup; },
			[](const Queue &) { return StmtType::queue; },
			[](const Synproxy &) { return StmtType::synproxy; },
			[](const Match &) { return StmtType::xtMatch; },
			[](const Target &) { return StmtType::xtTarget; },
			[](const auto &) { return StmtType::unknown; },
		},
		expression);
}

// The statements a set's elements may carry (nft's STMT_F_STATEFUL): any other a dynset
// holds prints as unknown.
bool stateful(StmtType type)
{
	return type == StmtType::counter || type == StmtType::limit || type == StmtType::quota ||
	       type == StmtType::connlimit;
}

// nft's netlink_parse_ctx: one rule's statements built from its values, each value's tree
// built once and cloned for every read of it.
class Delinearizer
{
public:
	Delinearizer(Tree &tree, const Table &table, const Rule &rule)
		: tree_(tree), table_(table), rule_(rule), valueNodes_(rule.values.size(), kNone)
	{
	}
	Stmt build(const Statement &statement);

private:
	Node &at(NodeId id) { return tree_.at(id); }
	NodeId valueNode(ValueId id, int depth);
	NodeId readNode(ReadId read, int depth);
	NodeId bitwise(const Masked &m, uint32_t len, int depth);
	NodeId compare(const Compare &c);
	void buildNat(Stmt &s, const NatStatement &n);
	void buildOther(Stmt &s, const Other &o);
	bool natMap(NodeId addr, std::optional<Family> family, bool ranges);
	NodeId setRef(const std::string &name, uint32_t keyBits);

	Tree &tree_;
	const Table &table_;
	const Rule &rule_;
	std::vector<NodeId> valueNodes_; // built once, cloned for each read
};

// A set by name, as a reference: an anonymous one with its elements.
NodeId Delinearizer::setRef(const std::string &name, uint32_t keyBits)
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
		ref.items = setElements(tree_, *set);
	else if (ref.anonymous)
		ref.items.push_back(tree_.unknown("set elements"));
	return tree_.add(std::move(ref));
}

// nft's netlink_parse_bitwise: `& mask ^ xor` as and, xor and or operations (the xor's
// bits outside the mask are an `|`), or a shift.
NodeId Delinearizer::bitwise(const Masked &m, uint32_t len, int depth)
{
	NodeId left = readNode(m.source, depth + 1);
	const uint32_t bits = at(left).bits ? at(left).bits : len * 8;
	if (m.op != BitwiseOp::boolean) {
		const uint8_t shift[4] = {uint8_t(m.shift), uint8_t(m.shift >> 8), uint8_t(m.shift >> 16), uint8_t(m.shift >> 24)};
		NodeId right = tree_.value(shift); // read big-endian as nft reads it; post-processing swaps it
		at(right).order = ByteOrder::host;
		NodeId b = tree_.binop(m.op == BitwiseOp::leftShift ? Op::lshift : Op::rshift, left, right);
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
		NodeId id = tree_.value(m.mask());
		at(id).value = v;
		return id;
	};
	if (!(bits > 0 && firstClear(mk, 0) == int(bits))) {
		expr = tree_.binop(Op::band, expr, operand(mk));
		at(expr).bits = bits;
	}
	if (x != 0) {
		expr = tree_.binop(Op::bxor, expr, operand(x));
		at(expr).bits = bits;
	}
	if (o != 0) {
		expr = tree_.binop(Op::bor, expr, operand(o));
		at(expr).bits = bits;
	}
	return expr;
}

NodeId Delinearizer::valueNode(ValueId id, int depth)
{
	if (depth > kMaxDepth)
		return tree_.unknown("nesting");
	if (valueNodes_[id] != kNone)
		return tree_.clone(valueNodes_[id]);
	const Value &v = rule_.values[id];
	NodeId node = std::visit(
		Overloaded{
			[&](const FromPayload &p) {
				return payloadRaw(tree_, static_cast<Base>(size_t(p.base) + 1), p.offset * 8, v.len * 8);
			},
			[&](const FromMeta &m) { return metaNode(tree_, m.key); },
			[&](const FromCt &c) {
				return ctNode(tree_, c.key, c.direction ? int(*c.direction) : -1, table_.family);
			},
			[&](const FromFib &f) { return loadNode(tree_, Fib{f.flags, f.result, std::nullopt}, kNone, v.len); },
			[&](const Constant &c) { return tree_.value(c.bytes); },
			[&](const Masked &m) { return bitwise(m, v.len, depth); },
			[&](const Swapped &s) {
				NodeId arg = readNode(s.source, depth + 1);
				return tree_.add(
					{.kind = Kind::unary, .bits = at(arg).bits, .op = s.toNetwork ? Op::hton : Op::ntoh, .a = arg});
			},
			[&](const MapData &m) {
				const Set *set = table_.findSet(m.set);
				NodeId key = readNode(m.key, depth + 1);
				return tree_.add({.kind = Kind::map, .a = key, .b = setRef(m.set, set ? set->keyLen * 8 : 0)});
			},
			[&](const OtherLoad &o) {
				if (const auto *x = std::get_if<Exthdr>(o.load.get()))
					return exthdrNode(tree_, *x);
				return loadNode(tree_, *o.load, o.input ? readNode(*o.input, depth + 1) : kNone, v.len);
			},
		},
		v.source);
	valueNodes_[id] = node;
	return tree_.clone(node);
}

// What a read gives, as nft's netlink_get_register gives it: the value in the register
// (whole, even when fewer bytes are read), or the concatenation of the values of the
// registers it spans.
NodeId Delinearizer::readNode(ReadId read, int depth)
{
	std::vector<NodeId> parts;
	uint32_t pad = 0; // zero bytes allowed after the last part: its register's padding
	for (const Slice &s : rule_.read(read)) {
		if (s.kind == Slice::Kind::zero && s.len <= pad) {
			pad -= s.len;
			continue;
		}
		if (s.kind != Slice::Kind::value || s.offset != 0)
			return tree_.unknown("register");
		const uint32_t len = rule_.values[s.value].len;
		if (s.len != len && rule_.read(read).size() != 1)
			return tree_.unknown("register");
		parts.push_back(valueNode(s.value, depth + 1));
		pad = (4 - len % 4) % 4;
	}
	if (parts.empty())
		return tree_.unknown("register");
	if (parts.size() == 1)
		return parts[0];
	Node concat{.kind = Kind::concat};
	concat.items = std::move(parts);
	for (NodeId p : concat.items)
		concat.bits += paddedBits(at(p).bits);
	return tree_.add(std::move(concat));
}

NodeId Delinearizer::compare(const Compare &c)
{
	NodeId left = readNode(c.lhs, 0);
	NodeId right = tree_.value(c.data);
	const uint32_t dataBits = uint32_t(c.data.size() * 8);
	Node &l = at(left);
	if (l.kind == Kind::concat) {
		// nft splits the constant over the concatenation's parts, each padded to 32 bits.
		Node parts{.kind = Kind::concat, .bits = dataBits};
		uint32_t at32 = 0;
		for (NodeId item : l.items) {
			const uint32_t bits = at(item).bits, bytes = (bits + 7) / 8;
			if (at32 + bytes > c.data.size())
				return tree_.relational(Op::eq, left, tree_.unknown("value"));
			parts.items.push_back(tree_.value(std::span(c.data).subspan(at32, bytes), bits));
			at32 += paddedBits(bits) / 8;
		}
		right = tree_.add(std::move(parts));
	} else if (l.bits > dataBits && !isString(l.type)) {
		// Fewer bytes than the value: a prefix of it.
		at(right).value = shiftedLeft(at(right).value, l.bits - dataBits);
		at(right).bits = l.bits;
		right = tree_.add({.kind = Kind::prefix, .bits = l.bits, .value = dataBits, .a = right});
	}
	static constexpr Op kOps[] = {Op::eq, Op::neq, Op::lt, Op::lte, Op::gt, Op::gte};
	return tree_.relational(kOps[size_t(c.op)], left, right);
}

Stmt Delinearizer::build(const Statement &statement)
{
	Stmt s{.source = &statement};
	std::visit(
		Overloaded{
			[&](const Compare &c) { s.expr = compare(c); },
			[&](const InRange &r) {
				NodeId left = readNode(r.lhs, 0);
				NodeId range = tree_.add({.kind = Kind::range, .a = tree_.value(r.from()), .b = tree_.value(r.to())});
				s.expr = tree_.relational(r.negated ? Op::neq : Op::eq, left, range);
			},
			[&](const InSet &in) {
				NodeId left = readNode(in.key, 0);
				s.expr = tree_.relational(in.invert ? Op::neq : Op::eq, left, setRef(in.set, at(left).bits));
			},
			[&](const VerdictMap &v) {
				NodeId left = readNode(v.key, 0);
				s.expr = tree_.add({.kind = Kind::map, .a = left, .b = setRef(v.set, at(left).bits)});
			},
			[&](const SetVerdict &) { s.type = StmtType::verdict; },
			[&](const SetMeta &m) {
				s.type = StmtType::meta;
				s.expr = readNode(m.value, 0);
				tree_.setType(s.expr, metaKey(m.key).type, metaKey(m.key).order);
			},
			[&](const SetCt &c) {
				s.type = StmtType::ct;
				s.expr = readNode(c.value, 0);
				const Key k = ctKey(c.key, table_.family == TableFamily::ip);
				tree_.setType(s.expr, k.type, k.order);
			},
			[&](const AddressTypeMatch &) { s.type = StmtType::addrtype; },
			[&](const XtMark &) { s.type = StmtType::mark; },
			[&](const NatStatement &n) { buildNat(s, n); },
			[&](const CounterStatement &) { s.type = StmtType::counter; },
			[&](const Other &o) { buildOther(s, o); },
		},
		statement);
	return s;
}

// Other's operands typed as nft types them: a payload write (netlink_parse_payload_stmt),
// an extension header's, dup's address and device, an object map's set.
void Delinearizer::buildOther(Stmt &s, const Other &o)
{
	s.expression = &o.expression();
	s.type = stmtType(*s.expression);
	for (ReadId r : o.detail->reads)
		s.operands.push_back(readNode(r, 0));
	if (const auto *p = std::get_if<Payload>(s.expression)) {
		if (s.operands.size() != 1) {
			s.type = StmtType::unknown;
			return;
		}
		s.expr = payloadRaw(tree_, Base(p->base + 1), p->offset * 8, p->len * 8);
		s.value = s.operands[0];
	} else if (const auto *x = std::get_if<Exthdr>(s.expression)) {
		// A write of the field (`tcp option maxseg size set 1360`), or the option stripped
		// (`reset tcp option sack-perm`, the header present).
		Exthdr header = *x;
		if (s.operands.empty())
			header.flags |= NFT_EXTHDR_F_PRESENT;
		s.expr = exthdrNode(tree_, header);
		s.value = s.operands.empty() ? kNone : s.operands[0];
		if (s.value != kNone)
			tree_.setType(s.value, at(s.expr).type, at(s.expr).order);
	} else if (std::holds_alternative<Dup>(*s.expression) && !s.operands.empty()) {
		tree_.setType(s.operands[0], table_.family == TableFamily::ip6 ? Type::ip6addr : Type::ipaddr, ByteOrder::big);
		if (s.operands.size() > 1)
			tree_.setType(s.operands[1], Type::ifindex, ByteOrder::host);
	} else if (const auto *r = std::get_if<Objref>(s.expression); r && r->set && !s.operands.empty()) {
		s.value = setRef(*r->set, at(s.operands[0]).bits);
	} else if (const auto *d = std::get_if<Dynset>(s.expression)) {
		for (const ExpressionBox &own : d->statements) {
			const StmtType type = stmtType(*own.expression);
			s.nested.push_back({.type = stateful(type) ? type : StmtType::unknown, .expression = own.expression.get()});
		}
	}
}

// nft's is_nat_addr_map / is_nat_proto_map: an address taken from a map whose data are
// address ranges (`snat ip to ip saddr map { ... : 198.51.100.0/24 }`) or address and port.
bool Delinearizer::natMap(NodeId addr, std::optional<Family> family, bool ranges)
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
void Delinearizer::buildNat(Stmt &s, const NatStatement &n)
{
	s.type = StmtType::nat;
	s.natFamily = table_.family == TableFamily::inet;
	const Type addressType = (n.family ? *n.family == Family::ipv4 : table_.family == TableFamily::ip) ? Type::ipaddr
														 : Type::ip6addr;
	const auto differs = [this, &n](std::optional<ReadId> lo, std::optional<ReadId> hi) {
		if (!hi || std::ranges::equal(rule_.read(*hi), rule_.read(*lo)))
			return false;
		// An iptables target always carries both ends: equal ones are one value.
		return !n.xtables || constantOf(rule_, *lo) != constantOf(rule_, *hi);
	};
	if (n.addressMin) {
		s.expr = readNode(*n.addressMin, 0);
		tree_.setType(s.expr, addressType, ByteOrder::big);
		if (natMap(s.expr, n.family, true)) {
			s.natFamily = true;
			return;
		}
		if (differs(n.addressMin, n.addressMax)) {
			const NodeId high = readNode(*n.addressMax, 0);
			tree_.setType(high, addressType, ByteOrder::big);
			s.expr = tree_.add({.kind = Kind::range, .a = s.expr, .b = high});
			// libxtables prints an iptables target's range as it is.
			if (!n.xtables && at(at(s.expr).a).kind == Kind::value && at(high).kind == Kind::value)
				s.expr = tree_.prefixOf(s.expr);
		}
	}
	if (s.expr != kNone && natMap(s.expr, n.family, false)) {
		s.natFamily = true;
		return;
	}
	if (n.portMin) {
		s.value = readNode(*n.portMin, 0);
		tree_.setType(s.value, Type::inetService, ByteOrder::big);
		if (differs(n.portMin, n.portMax)) {
			const NodeId high = readNode(*n.portMax, 0);
			tree_.setType(high, Type::inetService, ByteOrder::big);
			s.value = tree_.add({.kind = Kind::range, .a = s.value, .b = high});
		}
	}
}

} // namespace

std::vector<Stmt> delinearize(Tree &tree, const Table &table, const Rule &rule)
{
	Delinearizer delinearizer(tree, table, rule);
	std::vector<Stmt> out;
	out.reserve(rule.statements.size());
	for (const Statement &statement : rule.statements)
		out.push_back(delinearizer.build(statement));
	return out;
}

} // namespace ipmasq::nft::text
