// SPDX-License-Identifier: Apache-2.0
// Other tables' NAT as data: the tables, chains, rules, expressions and sets that the NAT
// evaluator (nat_evaluator.h) walks and the rule renderer (nat_rule_text.h) prints.
//
// This is a model of what the kernel holds, read back by netlink/nat_reader.h or built by
// hand in tests; it is never sent to the kernel. Expressions keep nf_tables' own encoding
// (registers, keys, byte strings in the kernel's byte order), so that nothing is
// interpreted twice: the evaluator and the renderer are the only places that give them
// a meaning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace ipmasq::nat {

// The families whose nat postrouting chains see routed IP packets.
enum class TableFamily { ip, ip6, inet };

// "ip", "ip6", "inet": as nft writes a table's family.
const char *tableFamilyName(TableFamily family);

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

struct PayloadLoad {
	PayloadBase base = PayloadBase::network;
	uint32_t offset = 0;
	uint32_t len = 0;
	uint32_t dreg = 0;
};

// meta KEY => dreg; `key` is an NFT_META_* value.
struct MetaLoad {
	uint32_t key = 0;
	uint32_t dreg = 0;
};

// meta KEY set sreg (e.g. kube-proxy's "meta mark set meta mark xor 0x4000").
struct MetaSet {
	uint32_t key = 0;
	uint32_t sreg = 0;
};

// ct KEY [original|reply] => dreg; `key` is an NFT_CT_* value.
struct CtLoad {
	uint32_t key = 0;
	std::optional<uint8_t> direction;
	uint32_t dreg = 0;
};

struct CtSet {
	uint32_t key = 0;
	uint32_t sreg = 0;
};

// fib FLAGS RESULT => dreg (NFTA_FIB_F_* flags, NFT_FIB_RESULT_* result).
struct Fib {
	uint32_t flags = 0;
	uint32_t result = 0;
	uint32_t dreg = 0;
};

enum class BitwiseOp { boolean, leftShift, rightShift };

// dreg = (sreg & mask) ^ xorValue, or a shift by `shift` bits.
struct Bitwise {
	BitwiseOp op = BitwiseOp::boolean;
	uint32_t sreg = 0;
	uint32_t dreg = 0;
	uint32_t len = 0;
	Bytes mask;
	Bytes xorValue;
	uint32_t shift = 0;
};

// Converts `len` bytes between host and network order in units of `size` bytes.
struct Byteorder {
	bool toNetwork = true; // hton; otherwise ntoh
	uint32_t sreg = 0;
	uint32_t dreg = 0;
	uint32_t len = 0;
	uint32_t size = 0;
};

enum class CmpOp { eq, neq, lt, lte, gt, gte };

// Compares data.size() bytes from sreg with `data` (memcmp order).
struct Cmp {
	uint32_t sreg = 0;
	CmpOp op = CmpOp::eq;
	Bytes data;
};

struct Range {
	uint32_t sreg = 0;
	bool negated = false;
	Bytes from;
	Bytes to;
};

// A set membership test; with `dreg` a map (data into dreg) or, with dreg 0, a verdict map.
struct Lookup {
	std::string set;
	uint32_t sreg = 0;
	std::optional<uint32_t> dreg;
	bool invert = false;
};

// Data into a register.
struct Immediate {
	uint32_t dreg = 0;
	Bytes data;
};

// A verdict (immediate into the verdict register).
struct ImmediateVerdict {
	Verdict verdict;
};

// masquerade [to :ports] [flags]; flags are NF_NAT_RANGE_* bits.
struct Masquerade {
	uint32_t flags = 0;
	std::optional<uint32_t> protoMinReg;
	std::optional<uint32_t> protoMaxReg;
};

enum class NatType { snat, dnat };

// snat/dnat with addresses and ports taken from registers.
struct Nat {
	NatType type = NatType::snat;
	uint32_t family = 0; // NFPROTO_IPV4 / NFPROTO_IPV6
	std::optional<uint32_t> addrMinReg;
	std::optional<uint32_t> addrMaxReg;
	std::optional<uint32_t> protoMinReg;
	std::optional<uint32_t> protoMaxReg;
	uint32_t flags = 0;
};

struct Redirect {
	uint32_t flags = 0;
	std::optional<uint32_t> protoMinReg;
	std::optional<uint32_t> protoMaxReg;
};

struct Counter {
	uint64_t packets = 0;
	uint64_t bytes = 0;
};

struct Log {
	std::optional<std::string> prefix;
	std::optional<uint16_t> group;
};

// Statements that neither match nor change what NAT sees: notrack, "last", named
// counters. Kept by name for the renderer.
struct Passthrough {
	std::string name;           // "notrack", "counter name", ...
	std::string objectName = {}; // the named object it refers to, listed quoted
};

// limit, quota, connlimit: a match whose outcome depends on traffic the evaluator
// cannot see, so it always evaluates as "may".
struct RateMatch {
	std::string name;
};

// An expression whose value the evaluator cannot know (numgen, hash, rt, exthdr,
// socket, osf...) loaded into dreg: `len` bytes, or, when 0, everything from dreg on.
struct OpaqueLoad {
	std::string name;
	uint32_t dreg = 0;
	uint32_t len = 0;
};

// iptables-nft's compat expressions: an xtables match or target with its revision and
// the kernel's info struct (host byte order, as x_tables defines it).
struct CompatMatch {
	std::string name;
	uint32_t revision = 0;
	Bytes info;
};

struct CompatTarget {
	std::string name;
	uint32_t revision = 0;
	Bytes info;
};

// Anything else: it could match, change registers or decide a verdict.
struct Unknown {
	std::string name;
};

using Expression = std::variant<PayloadLoad, MetaLoad, MetaSet, CtLoad, CtSet, Fib, Bitwise,
				Byteorder, Cmp, Range, Lookup, Immediate, ImmediateVerdict,
				Masquerade, Nat, Redirect, Counter, Log, Passthrough, RateMatch,
				OpaqueLoad, CompatMatch, CompatTarget, Unknown>;

struct Rule {
	uint64_t handle = 0;
	std::vector<Expression> expressions;
	std::string comment; // nft's rule comment (user data), if any
};

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

// An element as nf_tables dumps it. Interval sets hold boundaries: a start element
// (intervalEnd false) opens a range that the next end element (the first address past
// it) closes.
struct SetElement {
	Bytes key;
	Bytes keyEnd; // NFTA_SET_ELEM_KEY_END (concatenated ranges), when present
	bool intervalEnd = false;
	bool catchAll = false; // the "*" element of a map
	Bytes data; // a map's value
	std::optional<Verdict> verdict; // a verdict map's value
};

struct Set {
	std::string name;
	uint32_t flags = 0; // NFT_SET_* flags
	uint32_t keyType = 0;
	uint32_t keyLen = 0;
	uint32_t dataType = 0;
	uint32_t dataLen = 0;
	std::vector<SetElement> elements;
	// False when the reader stopped short of the elements (a limit): lookups then "may".
	bool complete = true;
};

struct Table {
	TableFamily family = TableFamily::ip;
	std::string name;
	std::vector<Chain> chains;
	std::vector<Set> sets;

	const Chain *findChain(const std::string &chainName) const;
	const Set *findSet(const std::string &setName) const;
};

// The tables that take part in nat postrouting, with the chains their base chains reach
// and the sets those look up.
struct NatRuleset {
	std::vector<Table> tables;
};

} // namespace ipmasq::nat
