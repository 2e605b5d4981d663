// SPDX-License-Identifier: Apache-2.0
// nf_tables' expressions as the kernel holds them: one struct per expression kind, with its
// netlink attributes listed once (fields()), so that encoding a rule for the kernel and
// decoding the kernel's rules read the same list. The agent's own rules go out through
// encode() and every rule comes back through decode(); what an expression means is
// decoder.h's, how nft prints it rule_text.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <libnftnl/expr.h>

#include "ip-masq-agent/netlink/handles.h"

namespace ipmasq::nft {

using Bytes = std::vector<uint8_t>;

// A verdict as nf_tables encodes it (NF_ACCEPT ... NFT_RETURN).
enum class VerdictCode { accept, drop, queue, stolen, continueRule, breakRule, jump, goTo, returnToCaller };

struct Verdict {
	VerdictCode code = VerdictCode::continueRule;
	std::string chain = {}; // for jump and goTo
	bool operator==(const Verdict &) const = default;
};

// The kernel's code for a verdict (NF_ACCEPT, NFT_JUMP...) and back.
int32_t verdictNumber(VerdictCode code);
Verdict verdictOf(int32_t number, std::string chain);

// Each kind: its nftnl name and its attributes, each an optional member when the kernel may
// leave it out (a load has a destination register, a statement a source). A register is
// the kernel's number (NFT_REG_1, NFT_REG32_00...).
using Reg = std::optional<uint32_t>;

// fields(s, f) calls f(attribute, member) for each attribute, on a const or mutable kind.
#define IPMASQ_FIELDS(...)                       \
	template<typename Self, typename F>      \
	static void fields(Self &s, F &&f)       \
	{                                        \
		__VA_ARGS__;                     \
	}

struct ExpressionBox;

struct Payload {
	static constexpr const char *kName = "payload";
	uint32_t base = 0, offset = 0, len = 0; // NFT_PAYLOAD_*_HEADER, bytes
	Reg dreg = {}, sreg = {}; // a load, or a write of the packet (with a checksum to update)
	std::optional<uint32_t> csumType = {}, csumOffset = {}, flags = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_PAYLOAD_BASE, s.base); f(NFTNL_EXPR_PAYLOAD_OFFSET, s.offset);
		      f(NFTNL_EXPR_PAYLOAD_LEN, s.len); f(NFTNL_EXPR_PAYLOAD_DREG, s.dreg);
		      f(NFTNL_EXPR_PAYLOAD_SREG, s.sreg); f(NFTNL_EXPR_PAYLOAD_CSUM_TYPE, s.csumType);
		      f(NFTNL_EXPR_PAYLOAD_CSUM_OFFSET, s.csumOffset); f(NFTNL_EXPR_PAYLOAD_FLAGS, s.flags))
};
struct Meta {
	static constexpr const char *kName = "meta";
	uint32_t key = 0; // NFT_META_*
	Reg dreg = {}, sreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_META_KEY, s.key); f(NFTNL_EXPR_META_DREG, s.dreg); f(NFTNL_EXPR_META_SREG, s.sreg))
};
struct Ct {
	static constexpr const char *kName = "ct";
	uint32_t key = 0; // NFT_CT_*
	std::optional<uint8_t> direction = {};
	Reg dreg = {}, sreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_CT_KEY, s.key); f(NFTNL_EXPR_CT_DIR, s.direction); f(NFTNL_EXPR_CT_DREG, s.dreg);
		      f(NFTNL_EXPR_CT_SREG, s.sreg))
};
struct Fib {
	static constexpr const char *kName = "fib";
	uint32_t flags = 0, result = 0; // NFTA_FIB_F_*, NFT_FIB_RESULT_*
	Reg dreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_FIB_FLAGS, s.flags); f(NFTNL_EXPR_FIB_RESULT, s.result); f(NFTNL_EXPR_FIB_DREG, s.dreg))
};
struct Exthdr {
	static constexpr const char *kName = "exthdr";
	uint8_t type = 0;
	uint32_t offset = 0, len = 0, flags = 0, op = 0; // NFT_EXTHDR_F_*, NFT_EXTHDR_OP_*
	Reg dreg = {}, sreg = {}; // neither: the option is stripped ("reset")
	IPMASQ_FIELDS(f(NFTNL_EXPR_EXTHDR_TYPE, s.type); f(NFTNL_EXPR_EXTHDR_OFFSET, s.offset);
		      f(NFTNL_EXPR_EXTHDR_LEN, s.len); f(NFTNL_EXPR_EXTHDR_FLAGS, s.flags); f(NFTNL_EXPR_EXTHDR_OP, s.op);
		      f(NFTNL_EXPR_EXTHDR_DREG, s.dreg); f(NFTNL_EXPR_EXTHDR_SREG, s.sreg))
};
struct Numgen {
	static constexpr const char *kName = "numgen";
	uint32_t type = 0, modulus = 0, offset = 0;
	Reg dreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_NG_TYPE, s.type); f(NFTNL_EXPR_NG_MODULUS, s.modulus);
		      f(NFTNL_EXPR_NG_OFFSET, s.offset); f(NFTNL_EXPR_NG_DREG, s.dreg))
};
struct Hash {
	static constexpr const char *kName = "hash";
	uint32_t type = 0, len = 0, modulus = 0, offset = 0; // NFT_HASH_JENKINS / _SYM
	std::optional<uint32_t> seed = {};
	Reg sreg = {}, dreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_HASH_TYPE, s.type); f(NFTNL_EXPR_HASH_LEN, s.len); f(NFTNL_EXPR_HASH_MODULUS, s.modulus);
		      f(NFTNL_EXPR_HASH_OFFSET, s.offset); f(NFTNL_EXPR_HASH_SEED, s.seed); f(NFTNL_EXPR_HASH_SREG, s.sreg);
		      f(NFTNL_EXPR_HASH_DREG, s.dreg))
};
struct Rt {
	static constexpr const char *kName = "rt";
	uint32_t key = 0;
	Reg dreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_RT_KEY, s.key); f(NFTNL_EXPR_RT_DREG, s.dreg))
};
struct Socket {
	static constexpr const char *kName = "socket";
	uint32_t key = 0, level = 0;
	Reg dreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_SOCKET_KEY, s.key); f(NFTNL_EXPR_SOCKET_LEVEL, s.level); f(NFTNL_EXPR_SOCKET_DREG, s.dreg))
};
struct Osf {
	static constexpr const char *kName = "osf";
	uint8_t ttl = 0;
	uint32_t flags = 0;
	Reg dreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_OSF_TTL, s.ttl); f(NFTNL_EXPR_OSF_FLAGS, s.flags); f(NFTNL_EXPR_OSF_DREG, s.dreg))
};
struct Xfrm {
	static constexpr const char *kName = "xfrm";
	uint32_t key = 0, spnum = 0;
	uint8_t direction = 0;
	Reg dreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_XFRM_KEY, s.key); f(NFTNL_EXPR_XFRM_SPNUM, s.spnum);
		      f(NFTNL_EXPR_XFRM_DIR, s.direction); f(NFTNL_EXPR_XFRM_DREG, s.dreg))
};
struct Tunnel {
	static constexpr const char *kName = "tunnel";
	uint32_t key = 0;
	Reg dreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_TUNNEL_KEY, s.key); f(NFTNL_EXPR_TUNNEL_DREG, s.dreg))
};
struct Bitwise {
	static constexpr const char *kName = "bitwise";
	uint32_t sreg = 0, dreg = 0, len = 0;
	std::optional<uint32_t> op = {}; // NFT_BITWISE_BOOL when absent
	Bytes mask = {}, xorValue = {}, shift = {}; // dreg = (sreg & mask) ^ xor, or sreg << / >> shift
	IPMASQ_FIELDS(f(NFTNL_EXPR_BITWISE_SREG, s.sreg); f(NFTNL_EXPR_BITWISE_DREG, s.dreg); f(NFTNL_EXPR_BITWISE_LEN, s.len);
		      f(NFTNL_EXPR_BITWISE_OP, s.op); f(NFTNL_EXPR_BITWISE_MASK, s.mask); f(NFTNL_EXPR_BITWISE_XOR, s.xorValue);
		      f(NFTNL_EXPR_BITWISE_DATA, s.shift))
};
struct Byteorder {
	static constexpr const char *kName = "byteorder";
	uint32_t sreg = 0, dreg = 0, op = 0, len = 0, size = 0; // NFT_BYTEORDER_NTOH / _HTON
	IPMASQ_FIELDS(f(NFTNL_EXPR_BYTEORDER_SREG, s.sreg); f(NFTNL_EXPR_BYTEORDER_DREG, s.dreg);
		      f(NFTNL_EXPR_BYTEORDER_OP, s.op); f(NFTNL_EXPR_BYTEORDER_LEN, s.len); f(NFTNL_EXPR_BYTEORDER_SIZE, s.size))
};
struct Cmp {
	static constexpr const char *kName = "cmp";
	uint32_t sreg = 0, op = 0; // NFT_CMP_*
	Bytes data = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_CMP_SREG, s.sreg); f(NFTNL_EXPR_CMP_OP, s.op); f(NFTNL_EXPR_CMP_DATA, s.data))
};
struct Range {
	static constexpr const char *kName = "range";
	uint32_t sreg = 0, op = 0; // NFT_RANGE_EQ / _NEQ
	Bytes from = {}, to = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_RANGE_SREG, s.sreg); f(NFTNL_EXPR_RANGE_OP, s.op); f(NFTNL_EXPR_RANGE_FROM_DATA, s.from);
		      f(NFTNL_EXPR_RANGE_TO_DATA, s.to))
};
// A set membership test; with `dreg` a map (its data into dreg, NFT_REG_VERDICT: a vmap).
// `setId` ties it to a set declared in the same batch (which the kernel then names).
struct Lookup {
	static constexpr const char *kName = "lookup";
	std::string set = {};
	uint32_t sreg = 0;
	Reg dreg = {};
	std::optional<uint32_t> setId = {}, flags = {}; // NFT_LOOKUP_F_INV
	IPMASQ_FIELDS(f(NFTNL_EXPR_LOOKUP_SET, s.set); f(NFTNL_EXPR_LOOKUP_SREG, s.sreg); f(NFTNL_EXPR_LOOKUP_DREG, s.dreg);
		      f(NFTNL_EXPR_LOOKUP_SET_ID, s.setId); f(NFTNL_EXPR_LOOKUP_FLAGS, s.flags))
};
// Data into a register, or (dreg NFT_REG_VERDICT) the rule's verdict.
struct Immediate {
	static constexpr const char *kName = "immediate";
	uint32_t dreg = 0;
	Bytes data = {};
	std::optional<uint32_t> verdict = {}; // the kernel's number (int32_t)
	std::optional<std::string> chain = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_IMM_DREG, s.dreg); f(NFTNL_EXPR_IMM_DATA, s.data); f(NFTNL_EXPR_IMM_VERDICT, s.verdict);
		      f(NFTNL_EXPR_IMM_CHAIN, s.chain))
};
// snat and dnat: the registers that hold the range, NF_NAT_RANGE_* flags.
struct Nat {
	static constexpr const char *kName = "nat";
	uint32_t type = 0, family = 0; // NFT_NAT_SNAT / _DNAT, NFPROTO_IPV4 / _IPV6
	Reg addressMin = {}, addressMax = {}, portMin = {}, portMax = {};
	std::optional<uint32_t> flags = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_NAT_TYPE, s.type); f(NFTNL_EXPR_NAT_FAMILY, s.family);
		      f(NFTNL_EXPR_NAT_REG_ADDR_MIN, s.addressMin); f(NFTNL_EXPR_NAT_REG_ADDR_MAX, s.addressMax);
		      f(NFTNL_EXPR_NAT_REG_PROTO_MIN, s.portMin); f(NFTNL_EXPR_NAT_REG_PROTO_MAX, s.portMax);
		      f(NFTNL_EXPR_NAT_FLAGS, s.flags))
};
// A plain masquerade carries no attribute at all, not even flags 0.
struct Masq {
	static constexpr const char *kName = "masq";
	std::optional<uint32_t> flags = {};
	Reg portMin = {}, portMax = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_MASQ_FLAGS, s.flags); f(NFTNL_EXPR_MASQ_REG_PROTO_MIN, s.portMin);
		      f(NFTNL_EXPR_MASQ_REG_PROTO_MAX, s.portMax))
};
struct Redir {
	static constexpr const char *kName = "redir";
	std::optional<uint32_t> flags = {};
	Reg portMin = {}, portMax = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_REDIR_FLAGS, s.flags); f(NFTNL_EXPR_REDIR_REG_PROTO_MIN, s.portMin);
		      f(NFTNL_EXPR_REDIR_REG_PROTO_MAX, s.portMax))
};
struct Tproxy {
	static constexpr const char *kName = "tproxy";
	uint32_t family = 0;
	Reg address = {}, port = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_TPROXY_FAMILY, s.family); f(NFTNL_EXPR_TPROXY_REG_ADDR, s.address);
		      f(NFTNL_EXPR_TPROXY_REG_PORT, s.port))
};
struct Counter {
	static constexpr const char *kName = "counter";
	uint64_t packets = 0, bytes = 0;
	IPMASQ_FIELDS(f(NFTNL_EXPR_CTR_PACKETS, s.packets); f(NFTNL_EXPR_CTR_BYTES, s.bytes))
};
struct Log {
	static constexpr const char *kName = "log";
	std::optional<std::string> prefix = {};
	std::optional<uint16_t> group = {}, queueThreshold = {};
	std::optional<uint32_t> snaplen = {}, level = {}, flags = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_LOG_PREFIX, s.prefix); f(NFTNL_EXPR_LOG_GROUP, s.group);
		      f(NFTNL_EXPR_LOG_SNAPLEN, s.snaplen); f(NFTNL_EXPR_LOG_QTHRESHOLD, s.queueThreshold);
		      f(NFTNL_EXPR_LOG_LEVEL, s.level); f(NFTNL_EXPR_LOG_FLAGS, s.flags))
};
struct Limit {
	static constexpr const char *kName = "limit";
	uint64_t rate = 0, unit = 0;
	uint32_t burst = 0, type = 0, flags = 0; // NFT_LIMIT_PKTS / _PKT_BYTES, NFT_LIMIT_F_INV
	IPMASQ_FIELDS(f(NFTNL_EXPR_LIMIT_RATE, s.rate); f(NFTNL_EXPR_LIMIT_UNIT, s.unit); f(NFTNL_EXPR_LIMIT_BURST, s.burst);
		      f(NFTNL_EXPR_LIMIT_TYPE, s.type); f(NFTNL_EXPR_LIMIT_FLAGS, s.flags))
};
struct Quota {
	static constexpr const char *kName = "quota";
	uint64_t bytes = 0, consumed = 0;
	uint32_t flags = 0; // NFT_QUOTA_F_INV
	IPMASQ_FIELDS(f(NFTNL_EXPR_QUOTA_BYTES, s.bytes); f(NFTNL_EXPR_QUOTA_CONSUMED, s.consumed);
		      f(NFTNL_EXPR_QUOTA_FLAGS, s.flags))
};
struct Connlimit {
	static constexpr const char *kName = "connlimit";
	uint32_t count = 0, flags = 0; // NFT_CONNLIMIT_F_INV
	IPMASQ_FIELDS(f(NFTNL_EXPR_CONNLIMIT_COUNT, s.count); f(NFTNL_EXPR_CONNLIMIT_FLAGS, s.flags))
};
struct Reject {
	static constexpr const char *kName = "reject";
	uint32_t type = 0;
	uint8_t code = 0;
	IPMASQ_FIELDS(f(NFTNL_EXPR_REJECT_TYPE, s.type); f(NFTNL_EXPR_REJECT_CODE, s.code))
};
struct Queue {
	static constexpr const char *kName = "queue";
	uint16_t number = 0, total = 0, flags = 0;
	Reg sreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_QUEUE_NUM, s.number); f(NFTNL_EXPR_QUEUE_TOTAL, s.total);
		      f(NFTNL_EXPR_QUEUE_FLAGS, s.flags); f(NFTNL_EXPR_QUEUE_SREG_QNUM, s.sreg))
};
struct Dup {
	static constexpr const char *kName = "dup";
	Reg address = {}, device = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_DUP_SREG_ADDR, s.address); f(NFTNL_EXPR_DUP_SREG_DEV, s.device))
};
struct Fwd {
	static constexpr const char *kName = "fwd";
	Reg device = {}, address = {};
	std::optional<uint32_t> family = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_FWD_SREG_DEV, s.device); f(NFTNL_EXPR_FWD_SREG_ADDR, s.address);
		      f(NFTNL_EXPR_FWD_NFPROTO, s.family))
};
// A set updated from the packet path: `add @set { ip saddr }`, with statements of its own.
struct Dynset {
	static constexpr const char *kName = "dynset";
	std::string set = {};
	uint32_t key = 0, op = 0; // key: the register; NFT_DYNSET_OP_*
	Reg data = {};
	// Absent unless the statement names one (a set without the timeout flag refuses any).
	std::optional<uint64_t> timeout = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_DYNSET_SET_NAME, s.set); f(NFTNL_EXPR_DYNSET_SREG_KEY, s.key);
		      f(NFTNL_EXPR_DYNSET_OP, s.op); f(NFTNL_EXPR_DYNSET_SREG_DATA, s.data);
		      f(NFTNL_EXPR_DYNSET_TIMEOUT, s.timeout))
	std::vector<ExpressionBox> statements; // decoded apart (nested expressions); no initializer: clang would need ExpressionBox complete here
};
// A stateful object by name (counter name "x"), or by a map's data.
struct Objref {
	static constexpr const char *kName = "objref";
	uint32_t type = 0; // NFT_OBJECT_*
	std::optional<std::string> name = {}, set = {};
	Reg sreg = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_OBJREF_IMM_TYPE, s.type); f(NFTNL_EXPR_OBJREF_IMM_NAME, s.name);
		      f(NFTNL_EXPR_OBJREF_SET_NAME, s.set); f(NFTNL_EXPR_OBJREF_SET_SREG, s.sreg))
};
struct FlowOffload {
	static constexpr const char *kName = "flow_offload";
	std::string table = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_FLOW_TABLE_NAME, s.table))
};
struct Synproxy {
	static constexpr const char *kName = "synproxy";
	uint16_t mss = 0;
	uint8_t wscale = 0;
	uint32_t flags = 0;
	IPMASQ_FIELDS(f(NFTNL_EXPR_SYNPROXY_MSS, s.mss); f(NFTNL_EXPR_SYNPROXY_WSCALE, s.wscale);
		      f(NFTNL_EXPR_SYNPROXY_FLAGS, s.flags))
};
struct Last {
	static constexpr const char *kName = "last";
	uint64_t msecs = 0;
	uint32_t set = 0;
	IPMASQ_FIELDS(f(NFTNL_EXPR_LAST_MSECS, s.msecs); f(NFTNL_EXPR_LAST_SET, s.set))
};
struct Notrack {
	static constexpr const char *kName = "notrack";
	IPMASQ_FIELDS((void)s; (void)f)
};
// iptables-nft's xtables expressions: name, revision and the kernel's info struct (host order).
struct Match {
	static constexpr const char *kName = "match";
	std::string name = {};
	uint32_t revision = 0;
	Bytes info = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_MT_NAME, s.name); f(NFTNL_EXPR_MT_REV, s.revision); f(NFTNL_EXPR_MT_INFO, s.info))
};
struct Target {
	static constexpr const char *kName = "target";
	std::string name = {};
	uint32_t revision = 0;
	Bytes info = {};
	IPMASQ_FIELDS(f(NFTNL_EXPR_TG_NAME, s.name); f(NFTNL_EXPR_TG_REV, s.revision); f(NFTNL_EXPR_TG_INFO, s.info))
};
// An expression libnftnl parses but this codec does not know: only its name.
struct UnknownExpression {
	static constexpr const char *kName = "";
	std::string name = {};
	IPMASQ_FIELDS((void)s; (void)f)
};

#undef IPMASQ_FIELDS

using Expression = std::variant<Payload, Meta, Ct, Fib, Exthdr, Numgen, Hash, Rt, Socket, Osf, Xfrm, Tunnel,
				Bitwise, Byteorder, Cmp, Range, Lookup, Immediate, Nat, Masq, Redir, Tproxy,
				Counter, Log, Limit, Quota, Connlimit, Reject, Queue, Dup, Fwd, Dynset, Objref,
				FlowOffload, Synproxy, Last, Notrack, Match, Target, UnknownExpression>;

// A dynset's own statements (an Expression cannot hold its own type by value).
struct ExpressionBox {
	std::shared_ptr<const Expression> expression;
};

// The nftnl expression the kernel gets for `expression` (libnftnl copies what it needs).
netlink::ExprPtr encode(const Expression &expression);
// Appends the encoded expressions to `rule`.
void encodeInto(nftnl_rule *rule, const std::vector<Expression> &expressions);

// The kernel's expression as a struct: every attribute libnftnl parsed, by its name.
Expression decode(const nftnl_expr *expression);
// A rule's expressions, at most `limit` of them (the rest are not read).
std::vector<Expression> decodeRuleExpressions(const nftnl_rule *rule, size_t limit);

// The kind's name, as nft --debug=netlink shows it ("payload", "cmp"...).
std::string nameOf(const Expression &expression);

} // namespace ipmasq::nft
