// SPDX-License-Identifier: Apache-2.0
// The sets as nft 1.0.x declares them, and their elements in messages of whole ranges.
#include "ip-masq-agent/nft/set_encoding.h"

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/nft/user_data.h"

namespace ipmasq::netlink {

namespace {

// nft's own numbering, which it stores in the kernel for `nft list` to read back:
// datatype ids (nft's enum datatypes), byte orders (enum byteorder) and the expression
// kind plus meta key of a set's "typeof" (enum expr_types, NFTNL_UDATA_META_KEY).
constexpr uint32_t kTypeInetProtocol = 12;
constexpr uint32_t kTypeInetService = 13;
constexpr uint32_t kByteorderInvalid = 0;
constexpr uint32_t kByteorderHost = 1;
constexpr uint32_t kByteorderBig = 2;
constexpr uint32_t kExprKindMeta = 9;
constexpr uint32_t kExprKindConcat = 13;
constexpr uint8_t kUdataMetaKey = 0;

// An address as an element key: network byte order, no allocation (see ElementSpec).
ElementSpec addressElement(Family family, AddressValue value, bool intervalEnd, bool openInterval)
{
	ElementSpec spec;
	spec.keyLen = static_cast<uint8_t>(familyBits(family) / 8);
	for (unsigned i = spec.keyLen; i-- > 0;) {
		spec.key[i] = static_cast<uint8_t>(value & 0xff);
		value >>= 8;
	}
	spec.intervalEnd = intervalEnd;
	spec.openInterval = openInterval;
	return spec;
}

// One range's elements: its start, and its end unless it runs to the top address.
void appendRangeElements(std::vector<ElementSpec> &out, Family family, const AddressRange &range)
{
	const bool open = range.last == Address::max(family);
	out.push_back(addressElement(family, range.first.value, false, open));
	if (!open)
		out.push_back(addressElement(family, range.last.value + 1, true, false));
}

// The leading end element at 0 that a set whose first range does not start at 0 has.
bool hasLeadingEnd(const std::optional<Address> &lowest)
{
	return lowest && lowest->value != 0;
}

// A range as the kernel holds it: one interval for addresses; for interface names, one
// per name or wildcard the range is made of (nft sends each element of its own, so the
// kernel holds two adjacent wildcards as two intervals, and `nft list` prints both).
void appendKernelRanges(std::vector<ElementSpec> &out, Family family, const AddressRange &range,
			bool interfaceNames)
{
	if (!interfaceNames) {
		appendRangeElements(out, family, range);
		return;
	}
	for (const InterfacePattern &pattern : interfacePatternsOf(range))
		appendRangeElements(out, family, interfaceKeyRange(pattern));
}

// The elements nft 1.0.x sends for an interval set: a start element per range and an
// end element at last+1. Two details decide whether `nft list` prints the same text:
// a set whose first range does not start at 0 gets a leading end element at 0, and a
// range that ends at the top address has no end element (last+1 would wrap) but
// carries NFTNL_SET_ELEM_F_INTERVAL_OPEN in its userdata instead.
std::vector<ElementSpec> intervalElements(const AddressSet &set)
{
	std::vector<ElementSpec> out;
	const auto &ranges = set.elements.ranges();
	if (ranges.empty())
		return out;
	const Family family = set.family();
	out.reserve(2 * ranges.size() + 1);
	if (hasLeadingEnd(ranges.front().first))
		out.push_back(addressElement(family, 0, true, false));
	for (const AddressRange &range : ranges)
		appendKernelRanges(out, family, range, set.interfaceNames);
	return out;
}

SetElemPtr buildElement(const ElementSpec &spec)
{
	SetElemPtr elem = newSetElem();
	if (spec.intervalEnd)
		nftnl_set_elem_set_u32(elem.get(), NFTNL_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
	nftnl_set_elem_set(elem.get(), NFTNL_SET_ELEM_KEY, spec.key.data(), spec.keyLen);
	if (spec.openInterval) {
		UserData udata;
		udata.putU32(NFTNL_UDATA_SET_ELEM_FLAGS, NFTNL_SET_ELEM_F_INTERVAL_OPEN);
		nftnl_set_elem_set(elem.get(), NFTNL_SET_ELEM_USERDATA, udata.data(), udata.size());
	}
	return elem;
}

// A set object addressing an existing (or same-batch) set, to carry elements.
SetPtr elementCarrier(const std::string &table, const std::string &set, uint32_t setId)
{
	SetPtr carrier = newSet();
	nftnl_set_set_u32(carrier.get(), NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_str(carrier.get(), NFTNL_SET_TABLE, table.c_str());
	nftnl_set_set_str(carrier.get(), NFTNL_SET_NAME, set.c_str());
	nftnl_set_set_u32(carrier.get(), NFTNL_SET_ID, setId);
	return carrier;
}

// Upper bound of the bytes one range takes in a message: a start element (nest, key
// nest, key) and an end element (the same plus flags), or the open-interval userdata.
size_t rangeBytes(size_t keyLen)
{
	const size_t key = 4 + 4 + ((keyLen + 3) & ~size_t(3));
	return (4 + key) + (4 + 8 + key) + 12;
}

// Room for the message header and the table and set names (each at most 256 bytes).
constexpr size_t kElementMessageOverhead = 16 + 4 + 2 * (4 + 256) + 8 + 4 + 64;

// Splits a set's elements into messages of whole ranges (a range is never split across
// messages). `describe(first, last)` names the ranges (1-based) of one message.
template<typename Describe>
std::vector<ElementChunk> splitIntoChunks(const std::string &table, const std::string &set,
					  uint32_t setId, const std::vector<ElementSpec> &specs,
					  const Describe &describe)
{
	const size_t keyLen = specs.empty() ? 4 : specs.front().keyLen;
	const size_t rangesPerChunk =
		(kElementMessageBudget - kElementMessageOverhead) / rangeBytes(keyLen);
	std::vector<ElementChunk> out;
	size_t index = 0;
	size_t rangesDone = 0;
	while (index < specs.size()) {
		ElementChunk chunk;
		chunk.table = table;
		chunk.set = set;
		chunk.setId = setId;
		const size_t firstRange = rangesDone + 1;
		size_t ranges = 0;
		while (index < specs.size()) {
			const ElementSpec &spec = specs[index];
			// A range starts at each start element: stop before one that would
			// not fit, so that a range is never split across messages.
			if (!spec.intervalEnd) {
				if (ranges == rangesPerChunk)
					break;
				ranges++;
			}
			chunk.elements.push_back(spec);
			index++;
		}
		rangesDone += ranges;
		chunk.description = describe(firstRange, rangesDone);
		out.push_back(std::move(chunk));
	}
	return out;
}

} // namespace

Result<EncodedSet> encodeSet(const std::string &table, const AddressSet &set, uint32_t id)
{
	EncodedSet out;
	out.description = fmt::format("set {}", set.name);
	if (auto s = checkCommentLength(out.description, set.comment); !s)
		return fail(s.error());

	const uint32_t keyType = set.interfaceNames		    ? kTypeInterfaceName
				 : set.family() == Family::ipv4 ? kTypeIpv4Address
								: kTypeIpv6Address;
	const uint32_t keyLen = familyBits(set.family()) / 8;

	out.set = newSet();
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_str(out.set.get(), NFTNL_SET_TABLE, table.c_str());
	nftnl_set_set_str(out.set.get(), NFTNL_SET_NAME, set.name.c_str());
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_FLAGS, NFT_SET_INTERVAL);
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_KEY_TYPE, keyType);
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_KEY_LEN, keyLen);
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_ID, id);
	UserData udata;
	// nft keeps names in host order (a string's bytes as they are), addresses big-endian.
	udata.putU32(NFTNL_UDATA_SET_KEYBYTEORDER, set.interfaceNames ? kByteorderHost : kByteorderBig);
	if (!set.comment.empty())
		udata.putString(NFTNL_UDATA_SET_COMMENT, set.comment);
	if (!udata.ok())
		return fail(fmt::format("{}: userdata does not fit", out.description));
	nftnl_set_set_data(out.set.get(), NFTNL_SET_USERDATA, udata.data(), udata.size());

	// Elements go in chunks of whole ranges, each chunk one NEWSETELEM message.
	const size_t totalRanges = set.elements.size();
	out.elements = splitIntoChunks(table, set.name, id, intervalElements(set),
				       [&](size_t first, size_t last) {
					       return fmt::format("elements of set {} (ranges {}-{} of {})",
								  set.name, first, last, totalRanges);
				       });
	return out;
}

Result<EncodedSet> encodeSet(const std::string &table, const DynamicSet &set, uint32_t id)
{
	EncodedSet out;
	out.description = fmt::format("set {}", set.name);
	if (auto s = checkCommentLength(out.description, set.comment); !s)
		return fail(s.error());
	const bool v4 = set.family == Family::ipv4;

	out.set = newSet();
	nftnl_set *object = out.set.get();
	nftnl_set_set_u32(object, NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_str(object, NFTNL_SET_TABLE, table.c_str());
	nftnl_set_set_str(object, NFTNL_SET_NAME, set.name.c_str());
	nftnl_set_set_u32(object, NFTNL_SET_FLAGS, NFT_SET_EVAL | (set.timeoutMs ? NFT_SET_TIMEOUT : 0));
	// nft's concatenated type: each component's datatype in 6 bits, the first highest;
	// each component takes a whole number of 32-bit registers.
	const uint32_t address = v4 ? kTypeIpv4Address : kTypeIpv6Address;
	nftnl_set_set_u32(object, NFTNL_SET_KEY_TYPE,
			  address << 18 | address << 12 | kTypeInetProtocol << 6 | kTypeInetService);
	nftnl_set_set_u32(object, NFTNL_SET_KEY_LEN, v4 ? 16 : 40);
	nftnl_set_set_u32(object, NFTNL_SET_ID, id);
	nftnl_set_set_u32(object, NFTNL_SET_DESC_SIZE, set.size);
	if (set.timeoutMs)
		nftnl_set_set_u64(object, NFTNL_SET_TIMEOUT, set.timeoutMs);
	if (set.counter)
		nftnl_set_add_expr(object, newExpr("counter").release());
	// As nft records a concatenation declared with "type": no byte order, and a
	// "typeof" of a concatenation whose parts it does not name.
	UserData udata;
	udata.putU32(NFTNL_UDATA_SET_KEYBYTEORDER, kByteorderInvalid);
	nftnl_udata *typeOf = udata.nestStart(NFTNL_UDATA_SET_KEY_TYPEOF);
	udata.putU32(NFTNL_UDATA_SET_TYPEOF_EXPR, kExprKindConcat);
	udata.nestEnd(udata.nestStart(NFTNL_UDATA_SET_TYPEOF_DATA));
	udata.nestEnd(typeOf);
	if (!set.comment.empty())
		udata.putString(NFTNL_UDATA_SET_COMMENT, set.comment);
	if (!udata.ok())
		return fail(fmt::format("{}: userdata does not fit", out.description));
	nftnl_set_set_data(object, NFTNL_SET_USERDATA, udata.data(), udata.size());
	return out;
}

EncodedSet encodeProtocolSet(const std::string &table, const std::string &ruleDescription,
			      std::span<const uint8_t> protocols, uint32_t id)
{
	// The kernel turns "__set%d" into a free name (__set0, ...); until then the set is
	// known by its id within the batch.
	static constexpr const char *kAnonymousName = "__set%d";
	EncodedSet out;
	out.description = fmt::format("anonymous set of {} transport protocols of {}", protocols.size(),
				      ruleDescription);
	out.set = newSet();
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_str(out.set.get(), NFTNL_SET_TABLE, table.c_str());
	nftnl_set_set_str(out.set.get(), NFTNL_SET_NAME, kAnonymousName);
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_FLAGS, NFT_SET_ANONYMOUS | NFT_SET_CONSTANT);
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_KEY_TYPE, kTypeInetProtocol);
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_KEY_LEN, 1);
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_ID, id);
	nftnl_set_set_u32(out.set.get(), NFTNL_SET_DESC_SIZE, protocols.size());
	// nft records the key's byte order and its "typeof" (meta l4proto) for listing.
	UserData udata;
	udata.putU32(NFTNL_UDATA_SET_KEYBYTEORDER, kByteorderHost);
	nftnl_udata *typeOf = udata.nestStart(NFTNL_UDATA_SET_KEY_TYPEOF);
	udata.putU32(NFTNL_UDATA_SET_TYPEOF_EXPR, kExprKindMeta);
	nftnl_udata *typeOfData = udata.nestStart(NFTNL_UDATA_SET_TYPEOF_DATA);
	udata.putU32(kUdataMetaKey, NFT_META_L4PROTO);
	udata.nestEnd(typeOfData);
	udata.nestEnd(typeOf);
	nftnl_set_set_data(out.set.get(), NFTNL_SET_USERDATA, udata.data(), udata.size());

	ElementChunk chunk;
	chunk.table = table;
	chunk.set = kAnonymousName;
	chunk.setId = id;
	for (uint8_t protocol : protocols) {
		ElementSpec spec;
		spec.key[0] = protocol;
		spec.keyLen = 1;
		chunk.elements.push_back(spec);
	}
	chunk.description = fmt::format("elements of {}", out.description);
	out.elements.push_back(std::move(chunk));
	return out;
}

SetPtr ElementChunk::build() const
{
	SetPtr carrier = elementCarrier(table, set, setId);
	for (const ElementSpec &spec : elements)
		nftnl_set_elem_add(carrier.get(), buildElement(spec).release());
	return carrier;
}

EncodedElementChanges encodeElementChanges(const std::string &table, const ElementDiff &diff)
{
	EncodedElementChanges out;
	for (const SetElementChanges &set : diff.sets) {
		std::vector<ElementSpec> removals, additions;
		// The leading end element at 0 comes and goes with "the first range does not
		// start at 0"; the kernel holds it once, however many ranges are above it.
		const bool hadLeadingEnd = hasLeadingEnd(set.oldLowest);
		const bool needsLeadingEnd = hasLeadingEnd(set.newLowest);
		if (hadLeadingEnd && !needsLeadingEnd)
			removals.push_back(addressElement(set.family, 0, true, false));
		if (needsLeadingEnd && !hadLeadingEnd)
			additions.push_back(addressElement(set.family, 0, true, false));
		for (const AddressRange &range : set.removed)
			appendKernelRanges(removals, set.family, range, set.interfaceNames);
		for (const AddressRange &range : set.added)
			appendKernelRanges(additions, set.family, range, set.interfaceNames);
		const auto describe = [&set](const char *what, size_t total) {
			return [&set, what, total](size_t first, size_t last) {
				if (first > last) // only the leading end element
					return fmt::format("elements {} set {} (the end element at 0)",
							   what, set.set);
				return fmt::format("elements {} set {} (ranges {}-{} of {})", what,
						   set.set, first, last, total);
			};
		};
		for (ElementChunk &chunk : splitIntoChunks(table, set.set, 0, removals,
							   describe("removed from", set.removed.size())))
			out.removals.push_back(std::move(chunk));
		for (ElementChunk &chunk : splitIntoChunks(table, set.set, 0, additions,
							   describe("added to", set.added.size())))
			out.additions.push_back(std::move(chunk));
	}
	return out;
}

} // namespace ipmasq::netlink
