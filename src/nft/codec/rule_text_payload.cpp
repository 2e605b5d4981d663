// SPDX-License-Identifier: Apache-2.0
// Payload loads named as nft names them (nft's payload.c and the payload half of
// netlink_delinearize.c, read, not copied): a raw load as the field of the protocol its
// base holds, merged loads split into fields (each a possible protocol dependency), masks
// that select a field, and the protocol matches a later match implies left out.
#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/rule_text_parts.h"

namespace ipmasq::nft::text {

namespace {

// `bits` bits (at most 128) of big-endian `bytes` from bit `from`, the first bit the most
// significant.
Wide bitsAt(const Bytes &bytes, uint32_t from, uint32_t bits)
{
	Wide out = 0;
	for (uint32_t i = from; i < from + bits && i / 8 < bytes.size(); i++)
		out = (out << 1) | ((bytes[i / 8] >> (7 - i % 8)) & 1);
	return out;
}

// nft's get_stacked_desc: a link-layer load past the first header reads a stacked one
// (`ether type 8021q vlan id 10`); `skip` is the bits of the headers before it.
const Protocol *headerOf(PostContext &cx, const Node &p, uint32_t &skip)
{
	skip = 0;
	const Protocol *top = cx.protocols.at(p.base);
	if (!top || p.base != Base::link || p.offset < top->length)
		return top;
	uint32_t offset = p.offset;
	for (const Protocol *stacked : cx.protocols.stackedLinks) {
		if (offset < stacked->length)
			return stacked;
		offset -= stacked->length;
		skip += stacked->length;
	}
	return top;
}

// A field that needs another ICMP type than the one the rule matched is not this one.
bool icmpMismatch(const PostContext &cx, const Field &f)
{
	return f.icmpDependency && cx.protocols.icmpType && cx.protocols.icmpType != icmpTypeOf(f.icmpDependency);
}

NodeId fieldNode(Tree &tree, const Protocol &desc, size_t i)
{
	const Field &f = desc.fields[i];
	return tree.add({.kind = Kind::payload, .type = f.type, .order = ByteOrder::big, .bits = f.bits, .base = desc.base,
			 .offset = f.offset, .protocol = &desc, .field = int(i), .protocolKey = desc.isProtocolKey(i)});
}

// nft's payload_expr_expand: a load merged from adjacent fields split into them.
std::vector<NodeId> expandPayload(PostContext &cx, NodeId id)
{
	Node p = cx.at(id);
	std::vector<NodeId> out;
	uint32_t skip = 0;
	const Protocol *desc = headerOf(cx, p, skip);
	uint32_t offset = p.offset - skip;
	for (size_t i = 1; desc && desc != &protocols::inet && i < desc->fields.size(); i++) {
		const Field &f = desc->fields[i];
		if (f.bits == 0)
			break;
		if (f.offset != offset || icmpMismatch(cx, f))
			continue;
		out.push_back(fieldNode(cx.tree, *desc, i));
		if (f.bits > p.bits) {
			cx.at(out.back()).bits = p.bits;
			return out;
		}
		p.bits -= f.bits;
		offset += f.bits;
		if (p.bits == 0)
			return out;
	}
	out.push_back(payloadRaw(cx.tree, p.base, offset + skip, p.bits));
	return out;
}

// nft's payload_icmp_check: a set of ICMP types names the ICMP field it is looked up with.
void icmpCheck(PostContext &cx, NodeId payload, const Node &value)
{
	Node &p = cx.at(payload);
	const Protocol *desc = cx.protocols.at(Base::transport);
	if (p.base != Base::transport || p.bits != 8 || value.bits != 8 || cx.protocols.icmpType ||
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
		cx.protocols.icmpType = uint8_t(value.value);
		return;
	}
}

// nft's payload_is_stacked: a protocol match whose next protocol is at the same base (vlan).
bool stackedOn(PostContext &cx, const Node &left, NodeId value)
{
	const Protocol *desc = cx.protocols.at(left.base);
	if (!left.protocolKey || !desc)
		return false;
	const Protocol *next = desc->above(uint32_t(cx.at(value).value));
	return next && next->base == desc->base;
}

// nft's payload_match_expand: a match on merged fields becomes one match per field, each
// a possible protocol dependency of what follows.
void payloadFields(PostContext &cx, NodeId relationalId, NodeId payload)
{
	const Op op = cx.at(relationalId).op;
	const Node right = cx.at(cx.at(relationalId).b);
	uint32_t remaining = right.bits;
	for (NodeId left : expandPayload(cx, payload)) {
		const Node l = cx.at(left);
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
		NodeId value = cx.tree.add(std::move(part));
		if (l.protocol && l.field >= 0 && l.bits < l.protocol->fields[size_t(l.field)].bits) {
			const uint32_t full = l.protocol->fields[size_t(l.field)].bits;
			cx.at(value).value = shiftedLeft(cx.at(value).value, full - l.bits);
			cx.at(value).bits = full;
			value = cx.tree.add({.kind = Kind::prefix, .bits = full, .value = l.bits, .a = value});
		}
		NodeId rel = cx.tree.relational(op, left, value);
		if (op == Op::eq)
			updateContext(cx, rel);
		cx.stmts.insert(cx.stmts.begin() + long(cx.current), Stmt{.type = StmtType::expression, .expr = rel});
		const size_t index = cx.current++;
		Base base = l.base;
		if (stackedOn(cx, l, value))
			base = Base(size_t(base) - 1);
		killDependency(cx, left);
		if (op == Op::eq && l.protocolKey)
			storeDependency(cx, index, base);
	}
	cx.stmts[cx.current].removed = true; // the merged match, replaced
}

// Where the dependency a match at `base` may release is kept: its base's, or for a
// transport match the inner one's.
std::optional<size_t> &slotOf(Dependencies &deps, Base base)
{
	const bool own = deps.pdeps[size_t(base)] || base != Base::transport;
	return deps.pdeps[size_t(own ? base : Base::inner)];
}

bool mayKillDependency(PostContext &cx, const Node &p)
{
	const Node *dep = dependency(cx, p.base);
	if (!dep)
		return false;
	const Node &depLeft = cx.at(dep->a);
	const bool depPayload = depLeft.kind == Kind::payload;
	// In an inet table `ip protocol` / `ip6 nexthdr` also says which family: kept.
	if (cx.protocols.family == TableFamily::inet && depPayload) {
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
		const uint8_t needed = p.protocol->fields[size_t(p.field)].icmpDependency;
		return needed != 0 && depLeft.protocol == p.protocol && cx.deps.icmpType == icmpTypeOf(needed);
	}
	return true;
}

} // namespace

NodeId payloadRaw(Tree &tree, Base base, uint32_t offsetBits, uint32_t bits)
{
	Node n{.kind = Kind::payload, .type = Type::xinteger, .order = ByteOrder::big, .bits = bits,
	       .base = base, .offset = offsetBits};
	// nft names a transport header's first two 16-bit fields right away (th sport/dport).
	if (base == Base::transport && bits == 16 && (offsetBits == 0 || offsetBits == 16)) {
		n.protocol = &protocols::th;
		n.field = offsetBits == 0 ? 1 : 2;
		n.type = Type::inetService;
	}
	return tree.add(std::move(n));
}

void completePayload(PostContext &cx, NodeId id)
{
	Node &p = cx.at(id);
	uint32_t skip = 0;
	const Protocol *desc = headerOf(cx, p, skip);
	if (!desc || desc == &protocols::inet)
		return;
	for (size_t i = 1; i < desc->fields.size(); i++) {
		const Field &f = desc->fields[i];
		if (f.offset != p.offset - skip || f.bits != p.bits || icmpMismatch(cx, f))
			continue;
		p.type = f.type;
		p.protocol = desc;
		p.field = int(i);
		return;
	}
}

void payloadMatch(PostContext &cx, NodeId relationalId, NodeId payload)
{
	const Node &r = cx.at(relationalId);
	if ((r.op == Op::eq || r.op == Op::neq) && r.kind == Kind::relational) {
		if (cx.at(r.b).kind == Kind::value)
			return payloadFields(cx, relationalId, payload);
		if (cx.at(r.b).kind == Kind::setRef && cx.at(r.b).anonymous && !cx.at(r.b).items.empty() &&
		    cx.at(cx.at(r.b).items[0]).kind == Kind::value)
			icmpCheck(cx, payload, cx.at(cx.at(r.b).items[0]));
	}
	completePayload(cx, payload);
	cx.tree.setType(cx.at(relationalId).b, cx.at(payload).type, cx.at(payload).order);
	killDependency(cx, payload);
}

bool trimPayload(PostContext &cx, NodeId id, const Node &maskNode, int &shift)
{
	Node &p = cx.at(id);
	uint32_t skip = 0;
	const Protocol *desc = headerOf(cx, p, skip);
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

std::string payloadText(const Node &n)
{
	if (isKnown(n))
		return fmt::format("{} {}", n.protocol->name, n.protocol->fields[size_t(n.field)].name);
	static constexpr const char *kBases[] = {"invalid", "ll", "nh", "th", "ih"};
	return fmt::format("@{},{},{}", kBases[size_t(n.base)], n.offset, n.bits);
}

// ---- Protocol dependencies (payload_dependency_*) ----

bool dependencyExists(PostContext &cx, Base base)
{
	return slotOf(cx.deps, base).has_value();
}

const Node *dependency(PostContext &cx, Base base)
{
	const auto &slot = slotOf(cx.deps, base);
	return slot ? &cx.at(cx.stmts[*slot].expr) : nullptr;
}

void releaseDependency(PostContext &cx, Base base)
{
	auto &slot = slotOf(cx.deps, base);
	if (!slot)
		return;
	cx.stmts[*slot].removed = true;
	if (cx.deps.prev == slot)
		cx.deps.prev.reset();
	slot.reset();
}

// nft's payload_dependency_store: `icmp type echo-request` is kept (an id or sequence
// field needs the echo type, which nft adds as a set the listing keeps).
void storeDependency(PostContext &cx, size_t stmt, Base base)
{
	const Node &dep = cx.at(cx.stmts[stmt].expr);
	const Node &left = cx.at(dep.a), &right = cx.at(dep.b);
	if (left.kind == Kind::payload && right.kind == Kind::value && right.bits == 8 &&
	    (left.protocol == &protocols::icmp || left.protocol == &protocols::icmp6)) {
		uint8_t type = uint8_t(right.value);
		if (left.protocol == &protocols::icmp && type == 0)
			type = 8;
		cx.deps.icmpType = type;
		if (left.protocol == &protocols::icmp ? type == 8 : (type == 128 || type == 129))
			return;
	}
	cx.deps.pdeps[size_t(base) + 1] = stmt;
}

void killDependency(PostContext &cx, NodeId id)
{
	const Node &p = cx.at(id);
	if (p.protocol && dependencyExists(cx, p.base) && mayKillDependency(cx, p))
		releaseDependency(cx, p.base);
}

} // namespace ipmasq::nft::text
