// SPDX-License-Identifier: Apache-2.0
// A rule's statements post-processed as nft's rule_parse_postprocess does (its
// netlink_delinearize.c, read, not copied), in order, with a protocol context: values
// typed by what they are compared with, host byte order swapped, strings as names or
// wildcards, masks turned into fields, prefixes and flags, `>=`/`<=` pairs merged into
// ranges, and the protocol matches that a later match implies (meta, ct, payload and
// extension headers) left out.
#include <cstring>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/nft/codec/rule_text_parts.h"

namespace ipmasq::nft::text {

namespace {

// nft's proto_unknown: a protocol match on a number nft has no header for.
const Protocol kUnknownProtocol{"unknown", Base::invalid, 0, 0, {}, {}};

// nft's binop_adjust: the constants a trimmed mask was compared with, shifted to the field.
void adjust(Tree &tree, NodeId id, int shift, uint32_t bits, int depth = 0)
{
	if (id == kNone || depth > kMaxDepth)
		return;
	Node &n = tree.at(id);
	switch (n.kind) {
	case Kind::value:
		n.value = shiftedRight(n.value, uint32_t(shift));
		n.bits = bits;
		break;
	case Kind::range:
	case Kind::mapping:
	case Kind::prefix:
		adjust(tree, n.a, shift, bits, depth + 1);
		if (n.kind == Kind::range)
			adjust(tree, tree.at(id).b, shift, bits, depth + 1);
		break;
	case Kind::setRef:
		if (n.anonymous)
			for (NodeId item : std::vector<NodeId>(n.items))
				adjust(tree, item, shift, bits, depth + 1);
		break;
	default:
		break;
	}
}

// nft's __binop_postprocess: `payload & mask` (or an extension header's) that selects a
// field becomes the field.
bool binopTrim(PostContext &cx, NodeId expr, NodeId &binopRef)
{
	const NodeId binopId = binopRef;
	const NodeId left = cx.at(binopId).a;
	int shift = 0;
	const bool payload = cx.at(left).kind == Kind::payload;
	if (payload ? !trimPayload(cx, left, cx.at(cx.at(binopId).b), shift)
		    : cx.at(left).kind != Kind::exthdr || !exthdrTrim(cx.tree, left, cx.at(cx.at(binopId).b), shift))
		return false;
	adjust(cx.tree, cx.at(expr).b, shift, cx.at(left).bits);
	binopRef = left;
	if (cx.at(expr).kind == Kind::map)
		cx.at(expr).a = left;
	if (payload)
		payloadMatch(cx, expr, left);
	else
		cx.tree.setType(cx.at(expr).b, cx.at(left).type, cx.at(left).order);
	return true;
}

// nft's expr_mask_is_prefix: the mask's ones run to its top.
bool isPrefixMask(const Node &m)
{
	const int first = lowestSet(m.value);
	return first < 0 || firstClear(m.value, first + 1) >= int(m.bits);
}

// nft's relational_binop_postprocess: masks as flags (`ct status dnat`, `tcp flags syn /
// fin,syn`), prefixes (`ip saddr 10.0.0.0/8`) or fields.
void relationalBinop(PostContext &cx, NodeId id)
{
	const NodeId binop = cx.at(id).a, right = cx.at(id).b;
	const Node b = cx.at(binop);
	const Op op = cx.at(id).op;
	if (b.op == Op::band && (op == Op::eq || op == Op::neq) && isBitmask(cx.at(right).type)) {
		const Node &r = cx.at(right);
		if (r.kind == Kind::value && r.value == 0) {
			// `x & flags != 0`: the flags, implicitly; `== 0`: none of them (`!`).
			cx.at(id).a = b.a;
			cx.at(id).b = cx.tree.flagList(b.b);
			cx.at(id).op = op == Op::neq ? Op::implicit : Op::neg;
		} else if (r.kind == Kind::value && cx.at(b.b).kind == Kind::value && r.value == cx.at(b.b).value) {
			// `x & flag == flag` stays as it is.
		} else if (r.kind == Kind::value || r.kind == Kind::binop) {
			cx.at(id) = Node{.kind = Kind::flagcmp, .op = op, .a = b.a,
					 .b = r.kind == Kind::binop ? cx.tree.flagList(right) : right, .c = cx.tree.flagList(b.b)};
		}
		return;
	}
	if (b.op == Op::band && typeInfo(cx.at(b.a).type).prefix && cx.at(right).kind == Kind::value &&
	    cx.at(b.b).kind == Kind::value && isPrefixMask(cx.at(b.b))) {
		const Node &m = cx.at(b.b);
		const int first = lowestSet(m.value);
		const uint32_t length = first < 0 ? 0 : uint32_t(firstClear(m.value, first) - first);
		cx.at(id).a = b.a;
		cx.at(id).b = cx.tree.add({.kind = Kind::prefix, .bits = cx.at(b.a).bits, .value = length, .a = right});
		return;
	}
	if (b.op == Op::band && cx.at(b.b).kind == Kind::value) {
		NodeId left = cx.at(id).a;
		if (binopTrim(cx, id, left))
			cx.at(id).a = left;
		return;
	}
	if (b.op == Op::rshift && cx.at(b.a).kind == Kind::binop && cx.at(b.a).op == Op::band &&
	    cx.at(b.b).kind == Kind::value && cx.at(cx.at(b.a).b).kind == Kind::value) {
		// `ip version @s`: the mask and the shift of a field looked up in a set.
		NodeId inner = b.a;
		if (binopTrim(cx, binop, inner))
			cx.at(binop).a = inner;
		if (cx.at(cx.at(binop).b).value == 0)
			cx.at(id).a = cx.at(binop).a;
	}
}

// nft's expr_postprocess_string: a name compared without its NUL is a wildcard (`eth*`),
// a name that ends in a star is escaped (`eth\*`).
NodeId stringValue(Tree &tree, NodeId id)
{
	Node &n = tree.at(id);
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

// nft's value post-processing: host byte order swapped, strings as names or wildcards,
// several flags as `a | b`.
NodeId processValue(Tree &tree, NodeId id)
{
	Node &n = tree.at(id);
	if (n.order == ByteOrder::host)
		n.value = swapBytes(n.value, n.bits / 8);
	if (isString(n.type))
		id = stringValue(tree, id);
	return isBitmask(tree.at(id).type) ? tree.bitmaskToBinops(id) : id;
}

// nft's ct_expr_update_type: ct saddr and daddr take their type from the network protocol.
void ctType(PostContext &cx, NodeId id)
{
	Node &n = cx.at(id);
	const Protocol *desc = cx.protocols.at(n.base);
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

// nft's meta_may_dependency_kill: an nfproto match is implied by an ICMP l4proto of its
// family, in ip and ip6 tables by any match of the table's family.
bool metaMayKill(PostContext &cx, NodeId relationalId)
{
	const Node *dep = dependency(cx, Base::network);
	if (!dep)
		return true;
	const Node &depLeft = cx.at(dep->a);
	uint8_t nfproto = 0;
	if (depLeft.kind == Kind::meta && depLeft.key == NFT_META_NFPROTO)
		nfproto = uint8_t(cx.at(dep->b).value);
	else if (depLeft.kind == Kind::meta && depLeft.key == NFT_META_PROTOCOL)
		nfproto = cx.at(dep->b).value == 0x0800 ? NFPROTO_IPV4 : cx.at(dep->b).value == 0x86dd ? NFPROTO_IPV6 : 0;
	else
		return true;
	const TableFamily family = cx.protocols.family;
	if (family != TableFamily::inet)
		return (family == TableFamily::ip ? NFPROTO_IPV4 : NFPROTO_IPV6) == nfproto;
	const Node &self = cx.at(cx.at(relationalId).a);
	if (self.key != NFT_META_L4PROTO)
		return true;
	const auto l4proto = uint8_t(cx.at(cx.at(relationalId).b).value);
	if (l4proto != IPPROTO_ICMP && l4proto != IPPROTO_ICMPV6)
		return false;
	return !((nfproto == NFPROTO_IPV4 && l4proto == IPPROTO_ICMPV6) || (nfproto == NFPROTO_IPV6 && l4proto == IPPROTO_ICMP));
}

// nft's ct_meta_common_postprocess.
void metaOrCtMatch(PostContext &cx, NodeId relationalId, Base base)
{
	const Node &r = cx.at(relationalId);
	const Kind rightKind = cx.at(r.b).kind;
	if (r.op != Op::eq || rightKind == Kind::range || rightKind == Kind::setRef)
		return;
	updateContext(cx, relationalId);
	if (base >= Base::transport)
		return;
	if (dependencyExists(cx, base) && metaMayKill(cx, relationalId))
		releaseDependency(cx, base);
	if (cx.at(cx.at(relationalId).a).protocolKey)
		storeDependency(cx, cx.current, base);
}

void processBinop(PostContext &cx, NodeId id, int depth)
{
	process(cx, cx.at(id).a, depth + 1);
	const Node &left = cx.at(cx.at(id).a);
	if (cx.at(id).op == Op::lshift || cx.at(id).op == Op::rshift)
		cx.tree.setType(cx.at(id).b, Type::integer, ByteOrder::host);
	else
		cx.tree.setType(cx.at(id).b, left.type, left.order);
	process(cx, cx.at(id).b, depth + 1);
	cx.at(id).type = cx.at(cx.at(id).a).type;
	cx.at(id).order = cx.at(cx.at(id).a).order;
}

void processRelational(PostContext &cx, NodeId id, int depth)
{
	if (cx.at(cx.at(id).a).kind == Kind::payload)
		return payloadMatch(cx, id, cx.at(id).a);
	process(cx, cx.at(id).a, depth + 1);
	const Node &left = cx.at(cx.at(id).a);
	cx.tree.setType(cx.at(id).b, left.type, left.order);
	process(cx, cx.at(id).b, depth + 1);
	switch (cx.at(cx.at(id).a).kind) {
	case Kind::ct:
	case Kind::meta:
		metaOrCtMatch(cx, id, cx.at(cx.at(id).a).base);
		break;
	case Kind::binop:
		relationalBinop(cx, id);
		break;
	default:
		break;
	}
}

// nft's expr_may_merge_range: `x >= a` then `x <= b` is `x a-b`; `x < a` then `x > b` is
// `x != a-b` (it compares only the kinds of the left sides).
void mergeRange(PostContext &cx, size_t index)
{
	const Node &cur = cx.at(cx.stmts[index].expr), &prev = cx.at(cx.stmts[*cx.deps.prev].expr);
	if (cur.kind != Kind::relational || prev.kind != Kind::relational)
		return;
	const auto leftKind = [&cx](const Node &r) {
		const Node &l = cx.at(r.a);
		return l.kind == Kind::unary ? cx.at(l.a).kind : l.kind;
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
	NodeId range = cx.tree.add({.kind = Kind::range, .a = low, .b = high});
	cx.tree.setType(range, cx.at(high).type, cx.at(high).order);
	cx.stmts[*cx.deps.prev].removed = true;
	cx.stmts[index].expr = cx.tree.relational(op, left, range);
}

void expressionStatement(PostContext &cx, size_t index)
{
	NodeId expr = cx.stmts[index].expr;
	process(cx, expr, 0);
	if (cx.current != index || cx.stmts[index].removed)
		return; // replaced (expanded into fields)
	cx.stmts[index].expr = expr;
	const auto &prev = cx.deps.prev;
	if (prev && !cx.stmts[*prev].removed && cx.stmts[*prev].type == StmtType::expression)
		mergeRange(cx, index);
}

// nft's stmt_payload_binop_postprocess: a write of part of a load is nft's
// `(x & mask) | value` (or `x | value`, `x & mask`) over the bytes around a field; the
// mask names the field, the value is shifted to it.
void payloadWriteBinop(PostContext &cx, Stmt &s)
{
	const Node v = cx.at(s.value);
	if (v.kind != Kind::binop || cx.at(v.b).kind != Kind::value)
		return;
	const Node &left = cx.at(v.a);
	if (left.kind == Kind::binop) {
		const NodeId payload = left.a, maskId = left.b;
		const Node &p = cx.at(payload), &dest = cx.at(s.expr);
		if (v.op != Op::bor || left.op != Op::band || p.kind != Kind::payload || cx.at(maskId).kind != Kind::value ||
		    p.base != dest.base || p.offset != dest.offset || p.bits != dest.bits)
			return;
		const Wide saved = cx.at(maskId).value;
		cx.at(maskId).value = mask(p.bits) ^ saved ^ cx.at(v.b).value;
		NodeId binopRef = v.a;
		if (!binopTrim(cx, s.value, binopRef) || !isKnown(cx.at(payload))) {
			cx.at(maskId).value = saved;
			return;
		}
		s.expr = payload;
		s.value = v.b;
		return;
	}
	if (left.kind != Kind::payload || (v.op != Op::band && v.op != Op::bor))
		return;
	const NodeId payload = v.a, value = v.b;
	if (v.op == Op::band)
		cx.at(value).value = mask(cx.at(payload).bits) ^ cx.at(value).value;
	int shift = 0;
	if (trimPayload(cx, payload, cx.at(value), shift)) {
		adjust(cx.tree, value, shift, cx.at(payload).bits);
		completePayload(cx, payload);
		cx.tree.setType(value, cx.at(payload).type, cx.at(payload).order);
	}
	if (!isKnown(cx.at(payload)))
		return;
	if (v.op == Op::band) // the mask cleared the field: a write of zero
		cx.at(value).value = 0;
	s.expr = payload;
	s.value = value;
}

// nft's stmt_payload_postprocess: the field written, named, and its value typed by it.
void payloadStatement(PostContext &cx, Stmt &s)
{
	completePayload(cx, s.expr);
	if (!isKnown(cx.at(s.expr)))
		payloadWriteBinop(cx, s);
	process(cx, s.expr);
	cx.tree.setType(s.value, cx.at(s.expr).type, cx.at(s.expr).order);
	process(cx, s.value);
}

// One statement, as rule_parse_postprocess's switch on its type.
void postprocessStatement(PostContext &cx, size_t i)
{
	Stmt &s = cx.stmts[i];
	switch (s.type) {
	case StmtType::expression:
		expressionStatement(cx, i);
		return;
	case StmtType::meta:
		process(cx, s.expr);
		return;
	case StmtType::ct:
		process(cx, s.expr);
		if (std::get<SetCt>(*s.source).key == NFT_CT_EVENTMASK)
			s.expr = cx.tree.flagList(s.expr);
		return;
	case StmtType::nat:
		if (s.expr != kNone)
			process(cx, s.expr);
		if (s.value != kNone) {
			cx.deps = {};
			process(cx, s.value);
		}
		return;
	case StmtType::payload:
		payloadStatement(cx, s);
		return;
	case StmtType::exthdr: // nft post-processes neither side
		return;
	default:
		for (NodeId &operand : s.operands)
			process(cx, operand);
		return;
	}
}

} // namespace

void process(PostContext &cx, NodeId &id, int depth)
{
	if (id == kNone || depth > kMaxDepth)
		return;
	Node &n = cx.at(id);
	switch (n.kind) {
	case Kind::map:
		if (cx.at(n.a).kind == Kind::binop && cx.at(n.a).op == Op::band && cx.at(cx.at(n.a).a).kind == Kind::payload &&
		    cx.at(cx.at(n.a).b).kind == Kind::value)
			binopTrim(cx, id, cx.at(id).a);
		process(cx, cx.at(id).a, depth + 1);
		break;
	case Kind::mapping:
	case Kind::range:
	case Kind::prefix:
		process(cx, cx.at(id).a, depth + 1);
		process(cx, cx.at(id).b, depth + 1);
		break;
	case Kind::concat:
		for (NodeId &item : n.items) // a deque's nodes stay where they are
			process(cx, item, depth + 1);
		break;
	case Kind::unary:
		process(cx, cx.at(id).a, depth + 1);
		cx.at(id).type = cx.at(cx.at(id).a).type;
		cx.at(id).order = ByteOrder::invalid; // nft's !byteorder
		break;
	case Kind::binop:
		processBinop(cx, id, depth);
		break;
	case Kind::relational:
		processRelational(cx, id, depth);
		break;
	case Kind::payload:
		completePayload(cx, id);
		killDependency(cx, id);
		break;
	case Kind::value:
		id = processValue(cx.tree, id);
		break;
	case Kind::ct:
		ctType(cx, id);
		break;
	case Kind::load:
		process(cx, cx.at(id).a, depth + 1); // a hash's input
		break;
	case Kind::exthdr:
		killExthdrDependency(cx, n);
		break;
	default:
		break;
	}
}

void updateContext(PostContext &cx, NodeId relationalId)
{
	const Node &left = cx.at(cx.at(relationalId).a), &right = cx.at(cx.at(relationalId).b);
	if (!left.protocolKey || right.kind != Kind::value)
		return;
	const auto value = uint32_t(right.value);
	ProtocolContext &context = cx.protocols;
	switch (left.kind) {
	case Kind::payload: {
		const Protocol *base = context.at(left.base);
		const Protocol *desc = base ? base->above(value) : nullptr;
		if (desc && desc->base == Base::link && base->base == Base::link && left.protocol &&
		    context.stackedLinks.size() < kMaxDepth)
			context.stackedLinks.push_back(base);
		if (!desc) {
			if (base == &protocols::icmp)
				context.icmpType = uint8_t(value ? value : 8); // echo-reply counts as echo
			else if (base == &protocols::icmp6)
				context.icmpType = uint8_t(value == 129 ? 128 : value);
			return;
		}
		context.at(desc->base) = desc;
		return;
	}
	case Kind::meta:
		if (left.key == NFT_META_NFPROTO) {
			const Protocol *hook = context.family == TableFamily::inet ? &protocols::inet
					       : context.family == TableFamily::ip ? &protocols::ip : &protocols::ip6;
			const Protocol *desc = hook->above(value);
			if (!desc && hook != &protocols::inet &&
			    value == (context.family == TableFamily::ip ? NFPROTO_IPV4 : NFPROTO_IPV6))
				desc = hook;
			context.at(Base::network) = desc ? desc : &kUnknownProtocol;
		} else if (left.key == NFT_META_IIFTYPE) { // the link layer of an input interface
			context.at(Base::link) = value == 1 ? &protocols::ether : &kUnknownProtocol; // ARPHRD_ETHER
		} else if (left.key == NFT_META_L4PROTO) {
			const Protocol *desc = protocols::inetService.above(value);
			context.at(Base::transport) = desc ? desc : &kUnknownProtocol;
		}
		return;
	case Kind::ct: {
		const Protocol *base = context.at(left.base);
		if (const Protocol *desc = base ? base->above(value) : nullptr)
			context.at(Base(size_t(left.base) + 1)) = desc;
		return;
	}
	default:
		return;
	}
}

void postprocess(Tree &tree, std::vector<Stmt> &stmts, TableFamily family)
{
	PostContext cx{.tree = tree, .stmts = stmts};
	cx.protocols.family = family;
	if (family == TableFamily::inet)
		cx.protocols.at(Base::link) = &protocols::inet;
	else
		cx.protocols.at(Base::network) = family == TableFamily::ip ? &protocols::ip : &protocols::ip6;
	for (size_t i = 0; i < stmts.size(); i++) {
		cx.current = i;
		postprocessStatement(cx, i);
		i = cx.current; // an expansion replaced the statement by several
		cx.deps.prev = stmts[i].removed ? std::nullopt : std::optional(i);
		if (stmts[i].type != StmtType::expression)
			cx.deps = {};
	}
}

} // namespace ipmasq::nft::text
