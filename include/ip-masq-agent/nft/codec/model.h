// SPDX-License-Identifier: Apache-2.0
// A rule decoded once (decoder.h): the values its expressions compute and the statements
// that use them, and the chains, sets and tables that hold such rules. The NAT evaluator
// and the rule text (rule_text.h) consume only this form; nothing but the decoder
// interprets registers or xtables structs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/nft/codec/expression.h"

namespace ipmasq::nft {

// The families whose nat postrouting chains see routed IP packets.
enum class TableFamily { ip, ip6, inet };
const char *tableFamilyName(TableFamily family); // "ip", "ip6", "inet"

// Where a payload load starts (NFT_PAYLOAD_*_HEADER).
enum class PayloadBase { link, network, transport, inner };
enum class CmpOp { eq, neq, lt, lte, gt, gte };
enum class BitwiseOp { boolean, leftShift, rightShift };
enum class NatKind : uint8_t { masquerade, snat, dnat, redirect };

// A rule is held by the thousand (upstream's leftover chain has one per CIDR), so its
// parts are small: statements name reads by index, and a rule's slices are one array.

using ValueId = uint32_t;

// Bytes of the register file as a statement reads them: parts of values the rule computed
// earlier, zeros (a load pads its last 4-byte word), or bytes nothing in the rule wrote.
struct Slice {
	enum class Kind { value, zero, unset };
	Kind kind = Kind::unset;
	ValueId value = 0;
	uint32_t offset = 0, len = 0;
	bool operator==(const Slice &) const = default;
};
// A read, by its index in the rule (Rule::read).
using ReadId = uint32_t;

// ---- Where a value comes from ----

struct FromPayload { PayloadBase base; uint32_t offset; };
struct FromMeta { uint32_t key; };
struct FromCt { uint32_t key; std::optional<uint8_t> direction; };
struct FromFib { uint32_t flags, result; };
struct Constant { Bytes bytes; };
// (source & mask) ^ xor, or a shift; the mask and the xor value are stored together.
struct Masked {
	ReadId source;
	BitwiseOp op;
	uint32_t shift;
	Bytes maskAndXor;
	std::span<const uint8_t> mask() const { return std::span(maskAndXor).first(maskAndXor.size() / 2); }
	std::span<const uint8_t> xorValue() const { return std::span(maskAndXor).last(maskAndXor.size() / 2); }
};
struct Swapped { ReadId source; bool toNetwork; uint32_t size; };
// A map's data for `key`; no element breaks the rule, as in the kernel.
struct MapData { ReadId key; std::string set; };
// A load only the running kernel knows (numgen, hash, rt, socket, osf, xfrm, exthdr...):
// the expression, for the text, and what it reads (a hash's input).
struct OtherLoad {
	std::shared_ptr<const Expression> load;
	std::optional<ReadId> input;
};
using ValueSource = std::variant<FromPayload, FromMeta, FromCt, FromFib, Constant, Masked, Swapped, MapData,
				 OtherLoad>;

struct Value {
	ValueSource source;
	uint32_t len = 0;
	// The statement it is computed before: a mark read after a `meta mark set` sees the
	// new mark, one read before it the old.
	uint32_t before = 0;
};

// ---- The statements, in the rule's order ----

struct Compare { ReadId lhs; CmpOp op; Bytes data; };
// from <= lhs <= to, the two bounds stored together.
struct InRange {
	ReadId lhs;
	bool negated;
	Bytes bounds;
	std::span<const uint8_t> from() const { return std::span(bounds).first(bounds.size() / 2); }
	std::span<const uint8_t> to() const { return std::span(bounds).last(bounds.size() / 2); }
};
struct InSet { std::string set; ReadId key; bool invert; };
struct VerdictMap { ReadId key; std::string set; };
struct SetVerdict { Verdict verdict; };
// meta KEY set / ct KEY set: the evaluator follows the marks, and nothing else NAT reads.
struct SetMeta { uint32_t key; ReadId value; };
struct SetCt { uint32_t key; std::optional<uint8_t> direction; ReadId value; };
// iptables' -m addrtype (revisions 0 and 1): RTN_* type masks of the source and destination.
struct AddressTypeMatch {
	uint16_t source = 0, destination = 0;
	bool invertSource = false, invertDestination = false;
	uint32_t limitInterface = 0; // XT_ADDRTYPE_LIMIT_IFACE_IN / _OUT
};
// iptables' MARK target (revision 2): mark = (mark & ~mask) ^ value.
struct XtMark { uint32_t value, mask; };
// A NAT statement, native or an xtables target. Addresses and ports are reads: constants
// for immediates and xtables, a map's data, or anything.
struct NatStatement {
	NatKind kind = NatKind::masquerade;
	bool xtables = false; // an iptables target, which nft lists through libxtables
	bool xtNetmap = false; // iptables' NETMAP, which nft 1.0.6 lists by name
	uint32_t flags = 0; // NF_NAT_RANGE_*: NETMAP for `snat prefix` and xtables NETMAP
	std::optional<Family> family = {}; // snat/dnat ip or ip6; nullopt: every family
	std::optional<ReadId> addressMin = {}, addressMax = {}, portMin = {}, portMax = {};
};
struct CounterStatement { uint64_t packets, bytes; };
// A statement the evaluator interprets by its effect alone: a log, a notrack, a named
// counter (none); a limit, a quota, an xtables match nobody translates (it may not
// match); an expression nobody understands, registers out of range (it may also decide the
// packet's fate). Rare: its details are kept apart.
struct Other {
	enum class Effect : uint8_t { none, mayNotMatch, mayDecide };
	struct Detail {
		Expression expression;
		std::vector<ReadId> reads; // the registers it reads, in its attributes' order
		std::string reason; // why the evaluator cannot tell ("" for Effect::none)
	};
	Effect effect = Effect::none;
	std::shared_ptr<const Detail> detail;
	const Expression &expression() const { return detail->expression; }
	const std::string &reason() const { return detail->reason; }
};

using Statement = std::variant<Compare, InRange, InSet, VerdictMap, SetVerdict, SetMeta, SetCt,
			       AddressTypeMatch, XtMark, NatStatement, CounterStatement, Other>;

struct Rule {
	uint64_t handle = 0;
	std::vector<Value> values;
	std::vector<Statement> statements;
	std::vector<Slice> slices; // every read's, one after the other
	std::vector<std::pair<uint32_t, uint32_t>> reads; // each read: first slice, count
	std::string comment; // nft's rule comment (user data), if any

	std::span<const Slice> read(ReadId id) const
	{
		return std::span(slices).subspan(reads[id].first, reads[id].second);
	}
};

// The bytes a read gives when they are a constant's (an immediate, an xtables range).
std::optional<Bytes> constantOf(const Rule &rule, ReadId read);

// ---- Chains, sets, tables ----

// What makes a chain a base chain; `hook` is an NF_INET_* hook number.
struct BaseHook {
	std::string type; // "nat", "filter", "route"
	uint32_t hook = 0;
	int32_t priority = 0;
	VerdictCode policy = VerdictCode::accept;
};

struct Chain {
	std::string name;
	std::optional<BaseHook> base;
	std::vector<Rule> rules;
};

// A base chain of type nat at the postrouting hook: where the node's source NAT happens.
bool isNatPostrouting(const Chain &chain);

// An element as nf_tables dumps it. Interval sets hold boundaries: a start element opens a
// range that the next end element (the first key past it) closes; a concatenation of
// ranges holds both ends in one element.
struct SetElement {
	Bytes key;
	Bytes keyEnd = {}; // NFTA_SET_ELEM_KEY_END (concatenated ranges)
	bool intervalEnd = false;
	bool catchAll = false; // the "*" element of a map
	Bytes data = {}; // a map's value; an object map's object name
	std::optional<Verdict> verdict = {}; // a verdict map's value
};

// A set held compactly and sorted for search: a 200,000-element map takes a few MB, and a
// lookup costs what the kernel's does. Elements are added, then finish() sorts them.
class Set
{
public:
	std::string name;
	uint32_t flags = 0; // NFT_SET_* flags
	uint32_t keyType = 0, keyLen = 0, dataType = 0, dataLen = 0; // nft's datatype ids, bytes
	uint32_t objectType = 0; // an object map's NFT_OBJECT_*
	uint32_t declaredSize = 0; // the most elements it was declared for (a meter's size)
	// What nft keeps in the set's user data to list it: the byte order of integer keys
	// and data (nft's enum byteorder, 0 when not said) and whether the data are ranges.
	uint32_t keyByteorder = 0, dataByteorder = 0;
	bool dataInterval = false;
	bool rawPayloadKey = false; // declared with a raw payload's typeof (`@nh,0,8`): keys print in hex

	// Not empty: the set cannot be searched (a limit stopped the read, it changes by
	// itself, its elements have another shape, it holds concatenated ranges); every
	// lookup in it "may", and this says why.
	const std::string &unusable() const { return unusable_; }
	// Drops its elements: it can be neither searched nor listed.
	void markUnusable(std::string why);
	// Whether the elements were kept (for the text): all but concatenated ranges are,
	// while the set is usable.
	bool holdsElements() const { return holdsElements_; }

	// Adds one element; another shape than the set's makes it unusable.
	void add(const SetElement &element);
	void finish();

	size_t size() const { return intervalEnds_.size(); }
	// The index of the element the kernel listed `j`-th: nft's listing keeps that order
	// where its own sort ties (flags of a bitmask key sort by their lowest flag).
	size_t listedAt(size_t j) const { return listedAt_.empty() ? j : listedAt_[j]; }
	std::span<const uint8_t> key(size_t i) const { return {keys_.data() + i * keyLen, keyLen}; }
	// A concatenation of ranges: the element's last key (empty for other sets).
	std::span<const uint8_t> keyEnd(size_t i) const
	{
		return keyEnds_.empty() ? std::span<const uint8_t>() : std::span(keyEnds_.data() + i * keyLen, keyLen);
	}
	// A map's value of element i; empty for a set that holds none.
	std::span<const uint8_t> data(size_t i) const
	{
		return data_.empty() ? std::span<const uint8_t>() : std::span(data_.data() + i * dataLen, dataLen);
	}
	bool intervalEnd(size_t i) const { return intervalEnds_[i] != 0; }
	const Verdict *verdict(size_t i) const;
	// An object map's object name of element i (or kCatchAll).
	std::string_view objectName(size_t i) const;
	bool isVerdictMap() const;
	// The element `key` (keyLen bytes) falls in, the catch-all, or nullopt; kCatchAll for it.
	static constexpr size_t kCatchAll = SIZE_MAX;
	std::optional<size_t> find(std::span<const uint8_t> key) const;
	const Verdict *catchAllVerdict() const;
	std::span<const uint8_t> catchAllData() const { return catchAllData_; }
	bool hasCatchAll() const { return hasCatchAll_; }
	// Every verdict the map holds, each once, in the order first seen.
	const std::vector<Verdict> &verdicts() const { return verdicts_; }
	// What the set holds, roughly, for the reader's memory budget.
	size_t bytes() const;

private:
	Bytes keys_, keyEnds_, data_;
	std::vector<uint8_t> intervalEnds_;
	std::vector<uint32_t> verdictIndex_; // per element of a verdict map, into verdicts_
	std::vector<uint32_t> listedAt_; // kept for bitmask keys only
	std::vector<Verdict> verdicts_;
	std::vector<std::string> objectNames_; // an object map's: few, each once; data_ holds an index
	bool hasCatchAll_ = false;
	bool holdsElements_ = true;
	Bytes catchAllData_;
	std::optional<uint32_t> catchAllVerdict_;
	std::string unusable_;
};

struct Table {
	TableFamily family = TableFamily::ip;
	std::string name;
	std::vector<Chain> chains;
	std::vector<Set> sets;
	// Set: the table could not be read whole (a limit, or it kept changing while read);
	// only its nat postrouting base chains are kept, without rules: each "may" do
	// anything, and this says why.
	std::string unreadable = {};

	const Chain *findChain(const std::string &chainName) const;
	const Set *findSet(const std::string &setName) const;
};

// The tables that take part in nat postrouting, the chains their base chains reach and the
// sets those look up.
struct NatRuleset {
	std::vector<Table> tables;
	// The ruleset's generation before the tables were read: while the kernel's generation is
	// still this one, nothing was committed since and what was read holds.
	uint32_t generation = 0;
};

} // namespace ipmasq::nft
