// SPDX-License-Identifier: Apache-2.0
// The printer's expression tree (nft's expression.c, read, not copied): nodes, their types,
// the tree's own rewrites (prefixes, flag lists) and how each kind prints.
#include <algorithm>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/rule_text.h"
#include "ip-masq-agent/nft/codec/rule_text_parts.h"

namespace ipmasq::nft::text {

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

int firstClear(Wide v, int from)
{
	for (int i = from; i < 128; i++)
		if (!((v >> i) & 1))
			return i;
	return 128;
}

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

std::string unknownText(std::string_view what)
{
	return fmt::format("{}{}]", kUnknownMarker, what);
}

namespace {

int popcount(Wide v)
{
	return __builtin_popcountll(uint64_t(v)) + __builtin_popcountll(uint64_t(v >> 64));
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

std::string valueText(const Node &n, bool numeric)
{
	if (isString(n.type)) {
		const auto nul = std::find(n.raw.begin(), n.raw.end(), 0);
		return fmt::format("\"{}\"", printable(std::string(n.raw.begin(), nul)));
	}
	if (n.bits > 128)
		return unknownText(fmt::format("0x{:02x}", fmt::join(n.raw, "")));
	return integerText(n.type, n.value, n.bits, numeric);
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

} // namespace

NodeId Tree::value(std::span<const uint8_t> bytes, uint32_t bits)
{
	Node n{.kind = Kind::value, .bits = bits ? bits : uint32_t(bytes.size() * 8)};
	n.raw.assign(bytes.begin(), bytes.end());
	n.value = integerOf(bytes, ByteOrder::big);
	return add(std::move(n));
}

NodeId Tree::binop(Op op, NodeId left, NodeId right)
{
	const Node &l = at(left);
	return add({.kind = Kind::binop, .type = l.type, .order = l.order, .bits = l.bits, .op = op, .a = left, .b = right});
}

NodeId Tree::clone(NodeId id, int depth)
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

void Tree::setType(NodeId id, Type type, ByteOrder order)
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

NodeId Tree::prefixOf(NodeId range)
{
	const Node &r = at(range);
	const Node &low = at(r.a);
	const auto length = prefixOfRange(low.value, at(r.b).value, low.bits);
	if (!length)
		return range;
	return add({.kind = Kind::prefix, .bits = low.bits, .value = *length, .a = r.a});
}

NodeId Tree::flagList(NodeId id)
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

NodeId Tree::bitmaskToBinops(NodeId id)
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

std::string Tree::print(NodeId id, bool numeric, int depth) const
{
	if (id == kNone || depth > kMaxDepth)
		return unknownText("nesting");
	const Node &n = at(id);
	const auto sub = [&](NodeId child, bool num = false) { return print(child, num || numeric, depth + 1); };
	const auto joined = [&](const char *separator) {
		std::string out;
		for (NodeId item : n.items)
			out += (out.empty() ? "" : separator) + sub(item);
		return out;
	};
	switch (n.kind) {
	case Kind::value: return valueText(n, numeric);
	case Kind::verdict: return n.text;
	case Kind::payload: return payloadText(n);
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
			return paren ? fmt::format("({})", sub(child)) : sub(child);
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
	case Kind::setRef: return n.anonymous ? fmt::format("{{ {} }}", joined(", ")) : fmt::format("@{}", printable(n.text));
	case Kind::map:
		return fmt::format("{} {} {}", sub(n.a), at(n.b).verdictMap ? "vmap" : "map", sub(n.b));
	case Kind::mapping: return fmt::format("{} : {}", sub(n.a), sub(n.b));
	case Kind::flagcmp:
		return fmt::format("{}{}{} / {}", sub(n.a), n.op == Op::neq ? " != " : " ", sub(n.b), sub(n.c));
	case Kind::catchAll: return "*";
	case Kind::exthdr: return exthdrText(n);
	case Kind::unknown: break;
	}
	return unknownText(printable(n.text));
}

} // namespace ipmasq::nft::text
