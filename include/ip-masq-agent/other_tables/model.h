// SPDX-License-Identifier: Apache-2.0
// The node's NAT as data, in two forms: a rule's expressions as nf_tables encodes them
// (registers, byte strings, xtables info structs), and the same rule decoded once by
// decoder.h into what it reads and does. The evaluator and the rule text consume only the
// decoded form; nothing but the decoder interprets registers or xtables structs.
//
// Other tables are read into it by reader.h, the agent's own table is linearized into it
// from the desired ruleset through the same decoder; it is never sent to the kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "ip-masq-agent/cidr.h"

namespace ipmasq::nat {

// The families whose nat postrouting chains see routed IP packets.
enum class TableFamily { ip, ip6, inet };
const char *tableFamilyName(TableFamily family); // "ip", "ip6", "inet"

using Bytes = std::vector<uint8_t>;

// A verdict as nf_tables encodes it (NF_ACCEPT ... NFT_RETURN).
enum class VerdictCode { accept, drop, queue, stolen, continueRule, breakRule, jump, goTo, returnToCaller };

struct Verdict {
	VerdictCode code = VerdictCode::continueRule;
	std::string chain; // for jump and goTo
	bool operator==(const Verdict &) const = default;
};

// Where a payload load starts (NFT_PAYLOAD_*_HEADER).
enum class PayloadBase { link, network, transport, inner };
enum class CmpOp { eq, neq, lt, lte, gt, gte };
enum class BitwiseOp { boolean, leftShift, rightShift };

// ---- The kernel's encoding: one struct per nf_tables expression (decoder.h's input) ----

struct PayloadLoad { PayloadBase base = PayloadBase::network; uint32_t offset = 0, len = 0, dreg = 0; };
struct MetaLoad { uint32_t key = 0, dreg = 0; }; // NFT_META_* => dreg
struct MetaSet { uint32_t key = 0, sreg = 0; };
struct CtLoad { uint32_t key = 0; std::optional<uint8_t> direction; uint32_t dreg = 0; };
struct CtSet { uint32_t key = 0, sreg = 0; };
struct Fib { uint32_t flags = 0, result = 0, dreg = 0; }; // NFTA_FIB_F_*, NFT_FIB_RESULT_*
// dreg = (sreg & mask) ^ xorValue, or a shift by `shift` bits.
struct Bitwise {
	BitwiseOp op = BitwiseOp::boolean;
	uint32_t sreg = 0, dreg = 0, len = 0;
	Bytes mask, xorValue;
	uint32_t shift = 0;
};
struct Byteorder { bool toNetwork = true; uint32_t sreg = 0, dreg = 0, len = 0, size = 0; };
struct Cmp { uint32_t sreg = 0; CmpOp op = CmpOp::eq; Bytes data; };
struct Range { uint32_t sreg = 0; bool negated = false; Bytes from, to; };
// A set membership test; with `dreg` a map (data into dreg), with NFT_REG_VERDICT a vmap.
struct Lookup { std::string set; uint32_t sreg = 0; std::optional<uint32_t> dreg; bool invert = false; };
struct Immediate { uint32_t dreg = 0; Bytes data; };
struct ImmediateVerdict { Verdict verdict; };
enum class NatKind : uint8_t { masquerade, snat, dnat, redirect };
// nat (snat, dnat), masq and redir: the registers that hold the range, NF_NAT_RANGE_* flags.
struct Nat {
	NatKind kind = NatKind::snat;
	uint32_t family = 0; // NFPROTO_IPV4 / NFPROTO_IPV6 (snat, dnat)
	std::optional<uint32_t> addrMinReg = {}, addrMaxReg = {}, protoMinReg = {}, protoMaxReg = {};
	uint32_t flags = 0;
};
struct Counter { uint64_t packets = 0, bytes = 0; };
struct Log { std::optional<std::string> prefix; std::optional<uint16_t> group; };
// notrack, last, "counter name": nothing NAT depends on; kept for the text.
struct Passthrough { std::string name; std::string objectName = {}; };
// limit, quota, connlimit: a match on traffic the evaluator cannot see.
struct RateMatch { std::string name; };
// numgen, hash, rt, exthdr, socket...: `len` bytes (0: to the end) the evaluator cannot know.
struct OpaqueLoad { std::string name; uint32_t dreg = 0, len = 0; };
// iptables-nft's xtables expressions: name, revision and the kernel's info struct in host order.
struct CompatMatch { std::string name; uint32_t revision = 0; Bytes info; };
struct CompatTarget { std::string name; uint32_t revision = 0; Bytes info; };
// Anything else: it could match, change registers or decide a verdict.
struct Unknown { std::string name; };

using Expression = std::variant<PayloadLoad, MetaLoad, MetaSet, CtLoad, CtSet, Fib, Bitwise,
				Byteorder, Cmp, Range, Lookup, Immediate, ImmediateVerdict, Nat,
				Counter, Log, Passthrough, RateMatch,
				OpaqueLoad, CompatMatch, CompatTarget, Unknown>;

// ---- A rule decoded: the values it computes and the statements that use them ----
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
using Read = std::vector<Slice>;
// A read, by its index in the rule (Rule::read).
using ReadId = uint32_t;

// Where a value comes from.
struct FromPayload { PayloadBase base; uint32_t offset; };
struct FromMeta { uint32_t key; };
struct FromCt { uint32_t key; std::optional<uint8_t> direction; };
struct FromFib { uint32_t flags, result; };
struct Constant { Bytes bytes; };
struct Opaque { std::string name; };
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
using ValueSource = std::variant<FromPayload, FromMeta, FromCt, FromFib, Constant, Opaque,
				 Masked, Swapped, MapData>;

struct Value {
	ValueSource source;
	uint32_t len = 0;
	// The statement it is computed before: a mark read after a `meta mark set` sees the
	// new mark, one read before it the old.
	uint32_t before = 0;
};

// The statements, in the rule's order.
struct Compare { ReadId lhs; CmpOp op; Bytes data; };
// from <= lhs <= to, the two bounds stored together.
struct InRange {
	ReadId lhs;
	bool negated;
	Bytes bounds;
	Bytes from() const { return Bytes(bounds.begin(), bounds.begin() + long(bounds.size() / 2)); }
	Bytes to() const { return Bytes(bounds.begin() + long(bounds.size() / 2), bounds.end()); }
};
struct InSet { std::string set; ReadId key; bool invert; };
struct VerdictMap { ReadId key; std::string set; };
struct SetVerdict { Verdict verdict; };
// meta KEY set / ct KEY set: the evaluator follows the marks, and nothing else NAT reads.
struct SetMeta { uint32_t key; ReadId value; };
struct SetCt { uint32_t key; ReadId value; };
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
	bool xtNetmap = false; // iptables' NETMAP, which nft lists by name
	uint32_t flags = 0; // NF_NAT_RANGE_*: NETMAP for `snat prefix` and xtables NETMAP
	std::optional<Family> family = {}; // snat/dnat ip or ip6; nullopt: every family
	std::optional<ReadId> addressMin = {}, addressMax = {}, portMin = {}, portMax = {};
};
struct CounterStatement { uint64_t packets, bytes; };
// Statements NAT does not depend on, as the listing shows them: `log prefix "x"`,
// `notrack`, `counter name "x"`, an xtables `comment "..."`.
struct Note { std::string text; };
struct RateLimited { std::string name; };
// What the decoder cannot give a meaning: an xtables match or target it does not know, an
// unknown expression, registers out of range. A match may match or not; a statement may
// also change anything and decide the packet's fate. Rare: its words are kept apart.
struct Undecodable {
	struct Words {
		std::string text; // for the rule's listing
		std::string reason; // why, for "may"
	};
	bool mayDecide = true;
	std::shared_ptr<const Words> words;
	const std::string &text() const { return words->text; }
	const std::string &reason() const { return words->reason; }
};

using Statement = std::variant<Compare, InRange, InSet, VerdictMap, SetVerdict, SetMeta, SetCt,
			       AddressTypeMatch, XtMark, NatStatement, CounterStatement, Note,
			       RateLimited, Undecodable>;

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
// range that the next end element (the first key past it) closes.
struct SetElement {
	Bytes key;
	Bytes keyEnd = {}; // NFTA_SET_ELEM_KEY_END (concatenated ranges)
	bool intervalEnd = false;
	bool catchAll = false; // the "*" element of a map
	Bytes data = {}; // a map's value
	std::optional<Verdict> verdict = {}; // a verdict map's value
};

// A set held compactly and sorted for search: a 200,000-element map takes a few MB, and a
// lookup costs what the kernel's does. Elements are added, then finish() sorts them.
class Set
{
public:
	std::string name;
	uint32_t flags = 0; // NFT_SET_* flags
	uint32_t keyType = 0, keyLen = 0, dataType = 0, dataLen = 0;

	// False: the set cannot be searched (a limit stopped the read, it changes by itself,
	// its elements have another shape); every lookup in it "may", and this says why.
	const std::string &unusable() const { return unusable_; }
	void markUnusable(std::string why);

	// Adds one element; another shape than the set's makes it unusable.
	void add(const SetElement &element);
	void finish();

	size_t size() const { return intervalEnds_.size(); }
	std::span<const uint8_t> key(size_t i) const { return {keys_.data() + i * keyLen, keyLen}; }
	// A map's value of element i; empty for a set that holds none (declared with a data
	// length but not as a map: nothing was kept of its elements' data).
	std::span<const uint8_t> data(size_t i) const
	{
		return data_.empty() ? std::span<const uint8_t>() : std::span(data_.data() + i * dataLen, dataLen);
	}
	bool intervalEnd(size_t i) const { return intervalEnds_[i] != 0; }
	const Verdict *verdict(size_t i) const;
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
	bool isVerdictMap() const;

	Bytes keys_, data_;
	std::vector<uint8_t> intervalEnds_;
	std::vector<uint32_t> verdictIndex_; // per element of a verdict map, into verdicts_
	std::vector<Verdict> verdicts_;
	bool hasCatchAll_ = false;
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
};

} // namespace ipmasq::nat
