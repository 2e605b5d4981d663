// SPDX-License-Identifier: Apache-2.0
// An anonymous set's elements as nft lists them (nft's netlink.c element parsing, its
// mergesort.c and segtree.c, read, not copied): keys and data typed per part, hash sets in
// nft's sort order, interval sets decomposed into values, prefixes, wildcards and ranges,
// concatenated ranges part by part.
#include <algorithm>
#include <cstring>

#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/nft/codec/rule_text_parts.h"

namespace ipmasq::nft::text {

namespace {

// The subtypes of a concatenation's type id, first part first.
std::vector<Type> subtypes(uint32_t typeId)
{
	std::vector<Type> out;
	for (; typeId; typeId >>= kTypeBits)
		out.insert(out.begin(), typeOfId(typeId & ((1u << kTypeBits) - 1)).value_or(Type::invalid));
	return out;
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

NodeId elementKey(Tree &tree, std::span<const uint8_t> key, const Set &set, bool interval)
{
	const std::vector<Type> parts = subtypes(set.keyType);
	if (parts.size() <= 1) {
		NodeId v = tree.value(key);
		Node &n = tree.at(v);
		n.type = parts.empty() ? Type::invalid : set.rawPayloadKey ? Type::xinteger : parts[0];
		n.order = static_cast<ByteOrder>(set.keyByteorder);
		if (!interval && n.order == ByteOrder::host)
			n.value = swapBytes(n.value, n.bits / 8);
		return isBitmask(n.type) ? tree.bitmaskToBinops(v) : v;
	}
	// Each part as wide as its type, padded to 32 bits; its own byte order.
	Node concat{.kind = Kind::concat, .bits = uint32_t(key.size() * 8)};
	size_t at8 = 0;
	for (Type t : parts) {
		const uint32_t bits = (typeInfo(t).bits + 7) / 8 * 8;
		if (bits == 0 || at8 + bits / 8 > key.size())
			return tree.unknown("set elements");
		NodeId v = tree.value(key.subspan(at8, bits / 8), typeInfo(t).bits);
		Node &n = tree.at(v);
		n.type = t;
		n.order = typeInfo(t).order;
		if (isString(t) || (!interval && n.order == ByteOrder::host))
			n.value = swapBytes(n.value, bits / 8);
		concat.items.push_back(isBitmask(t) ? tree.bitmaskToBinops(v) : v);
		at8 += paddedBits(bits) / 8;
	}
	return tree.add(std::move(concat));
}

// A map's range of addresses as nft lists it: one address, a prefix of them, or the range.
NodeId reduceRange(Tree &tree, NodeId range)
{
	const Node &r = tree.at(range);
	if (tree.at(r.a).value == tree.at(r.b).value)
		return r.a;
	const Type t = tree.at(r.a).type;
	return t == Type::ipaddr || t == Type::ip6addr ? tree.prefixOf(range) : range;
}

NodeId elementData(Tree &tree, const Set &set, size_t i)
{
	if (const Verdict *v = i == Set::kCatchAll ? set.catchAllVerdict() : set.verdict(i))
		return tree.add({.kind = Kind::verdict, .text = verdictText(*v)});
	if (set.flags & NFT_SET_OBJECT) {
		const std::string_view object = set.objectName(i);
		Node name{.kind = Kind::value, .type = Type::string, .bits = uint32_t(object.size() * 8)};
		name.raw.assign(object.begin(), object.end());
		return tree.add(std::move(name));
	}
	const auto data = i == Set::kCatchAll ? set.catchAllData() : set.data(i);
	const std::vector<Type> parts = subtypes(set.dataType);
	if (data.empty() || parts.empty())
		return tree.unknown("map data");
	const auto typed = [&](std::span<const uint8_t> bytes, Type t, ByteOrder order) {
		NodeId v = tree.value(bytes, typeInfo(t).bits ? typeInfo(t).bits : uint32_t(bytes.size() * 8));
		tree.at(v).type = t;
		tree.at(v).order = order;
		if (order == ByteOrder::host)
			tree.at(v).value = swapBytes(tree.at(v).value, uint32_t(bytes.size()));
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
				return tree.unknown("map data");
			(half ? highs : lows).push_back(typed(data.subspan(at8, bytes), t, typeInfo(t).order));
			at8 += parts.size() == 1 ? bytes : paddedBits(uint32_t(bytes * 8)) / 8;
		}
	Node out{.kind = Kind::concat};
	for (size_t p = 0; p < lows.size(); p++)
		out.items.push_back(highs.empty() ? lows[p]
						  : reduceRange(tree, tree.add({.kind = Kind::range, .a = lows[p], .b = highs[p]})));
	return out.items.size() == 1 ? out.items[0] : tree.add(std::move(out));
}

// ---- Orders and ranges of elements ----

// The number nft sorts a hash set's element by (mergesort.c), most significant byte first
// without leading zeros: a concatenation's bytes read as one little-endian number, anything
// else its key's value; the catch-all last.
Bytes sortNumber(const Tree &tree, NodeId id)
{
	const Node *n = &tree.at(id);
	for (int depth = 0; (n->kind == Kind::mapping || n->kind == Kind::binop) && depth < kMaxDepth; depth++)
		n = &tree.at(n->a);
	Bytes number;
	if (n->kind == Kind::catchAll) {
		number.assign(64, 0xff);
	} else if (n->kind == Kind::concat) {
		// The parts' bytes one after the other, read as one little-endian number.
		for (NodeId part : n->items) {
			const Bytes b = exported(tree.at(part));
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

std::vector<NodeId> sorted(const Tree &tree, const std::vector<NodeId> &elements)
{
	std::vector<SortKeyed> keyed;
	for (NodeId e : elements)
		keyed.emplace_back(sortNumber(tree, e), e);
	nftSort(keyed);
	std::vector<NodeId> out;
	for (const auto &[key, e] : keyed)
		out.push_back(e);
	return out;
}

// One interval of an interval set, from its start `low` to `high` (inclusive) as nft lists
// it: the value alone, a prefix, a wildcard name, or a range.
NodeId interval(Tree &tree, NodeId low, Wide high)
{
	const NodeId key = tree.keyOf(low);
	Node lowKey = tree.at(key);
	const Wide range = high - lowKey.value;
	NodeId element;
	if (range == 0) {
		element = key;
	} else if ((range & (range + 1)) == 0 && (lowKey.value & range) == 0 &&
		   (typeInfo(lowKey.type).prefix || isString(lowKey.type))) {
		const uint32_t length = lowKey.bits - uint32_t(firstClear(range, 0));
		const size_t nameLen = strnlen(reinterpret_cast<const char *>(lowKey.raw.data()), lowKey.raw.size());
		if (!isString(lowKey.type) || length % 8 || nameLen == 0 || nameLen >= lowKey.raw.size()) {
			element = tree.add({.kind = Kind::prefix, .bits = lowKey.bits, .value = length, .a = key});
		} else {
			lowKey.raw.resize(nameLen);
			lowKey.raw.push_back('*');
			element = tree.add(std::move(lowKey));
		}
	} else {
		Node top = lowKey;
		top.value = high;
		element = tree.add({.kind = Kind::range, .a = key, .b = tree.add(std::move(top))});
	}
	if (tree.at(low).kind == Kind::mapping)
		return tree.add({.kind = Kind::mapping, .a = element, .b = tree.at(low).b});
	return element;
}

// nft's interval_map_decompose: the boundaries sorted, adjacent ranges split where a start
// follows a start, then each start with its end as one interval.
std::vector<NodeId> decompose(Tree &tree, std::vector<NodeId> elements)
{
	const auto value = [&tree](NodeId e) { return tree.at(tree.keyOf(e)).value; };
	const auto isEnd = [&tree](NodeId e) { return tree.at(tree.keyOf(e)).intervalEnd; };
	std::sort(elements.begin(), elements.end(), [&](NodeId x, NodeId y) {
		if (value(x) != value(y))
			return value(x) < value(y);
		return isEnd(x) && !isEnd(y);
	});
	std::vector<NodeId> out;
	std::optional<NodeId> low;
	for (NodeId e : elements) {
		const bool end = isEnd(e);
		if (low && !end) { // a start right after a start: the first ends where this begins
			out.push_back(interval(tree, *low, value(e) - 1));
			low.reset();
		}
		if (low) {
			out.push_back(interval(tree, *low, value(e) - 1));
			low.reset();
		} else if (!end) {
			low = e;
		}
	}
	if (low) // open to the top
		out.push_back(interval(tree, *low, mask(tree.at(tree.keyOf(*low)).bits)));
	return out;
}

// nft's concat_range_aggregate: each part of a start and its end as one value, a prefix,
// a wildcard name or a range.
std::vector<NodeId> concatRanges(Tree &tree, const std::vector<NodeId> &elements)
{
	std::vector<NodeId> out;
	for (size_t i = 0; i + 1 < elements.size(); i += 2) {
		Node &start = tree.at(tree.keyOf(elements[i]));
		const NodeId endId = tree.keyOf(elements[i + 1]);
		if (start.kind != Kind::concat || tree.at(endId).kind != Kind::concat ||
		    start.items.size() != tree.at(endId).items.size())
			return {tree.unknown("set elements")};
		for (size_t p = 0; p < start.items.size(); p++) {
			const Node r1 = tree.at(start.items[p]);
			NodeId &r2id = tree.at(endId).items[p];
			const Node r2 = tree.at(r2id);
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
				r2id = tree.add(std::move(wildcard));
			} else if (length < 0 || !typeInfo(r1.type).prefix) {
				r2id = tree.add({.kind = Kind::range, .a = start.items[p], .b = r2id});
			} else {
				r2id = tree.add({.kind = Kind::prefix, .bits = r1.bits, .value = uint32_t(length), .a = start.items[p]});
			}
		}
		out.push_back(elements[i + 1]);
	}
	return out;
}

} // namespace

std::vector<NodeId> setElements(Tree &tree, const Set &set)
{
	const bool interval = set.flags & NFT_SET_INTERVAL;
	const bool map = (set.flags & (NFT_SET_MAP | NFT_SET_OBJECT)) != 0;
	std::vector<NodeId> elements;
	for (size_t listed = 0; listed < set.size(); listed++) {
		const size_t i = set.listedAt(listed);
		NodeId key = elementKey(tree, set.key(i), set, interval);
		tree.at(key).intervalEnd = set.intervalEnd(i);
		if (!set.keyEnd(i).empty()) { // a concatenation of ranges: its last key follows
			elements.push_back(key);
			key = elementKey(tree, set.keyEnd(i), set, interval);
			tree.at(key).intervalEnd = true;
		}
		if (map && !set.intervalEnd(i))
			key = tree.add({.kind = Kind::mapping, .a = key, .b = elementData(tree, set, i)});
		elements.push_back(key);
	}
	std::vector<NodeId> out = interval && (set.flags & NFT_SET_CONCAT) ? concatRanges(tree, elements)
				  : interval                             ? decompose(tree, std::move(elements))
									 : sorted(tree, elements);
	if (set.hasCatchAll()) {
		NodeId all = tree.add({.kind = Kind::catchAll});
		out.push_back(map ? tree.add({.kind = Kind::mapping, .a = all, .b = elementData(tree, set, Set::kCatchAll)}) : all);
	}
	return out;
}

} // namespace ipmasq::nft::text
