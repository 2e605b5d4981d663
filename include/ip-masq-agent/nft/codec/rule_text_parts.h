// SPDX-License-Identifier: Apache-2.0
// The parts of the rule printer (rule_text.h), shared by its files as nft shares them
// between its own (read, not copied): the expression tree (rule_text_expression.cpp, nft's
// expression.c), the rule's expressions into statements (rule_text_delinearize.cpp,
// netlink_delinearize.c), their post-processing (rule_text_postprocess.cpp), payload
// fields and protocol dependencies (rule_text_payload.cpp, payload.c), extension headers
// (rule_text_exthdr.cpp, exthdr.c), set elements (rule_text_segtree.cpp, segtree.c) and
// each statement kind's print (rule_text_statement.cpp, statement.c). Only the printer's
// files include it.
#pragma once

#include <array>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/nft/codec/model.h"
#include "ip-masq-agent/nft/codec/vocabulary.h"

namespace ipmasq::nft::text {

// Trees nest at most this deep (a deeper part prints as unknown): nothing recurses
// without bound.
inline constexpr int kMaxDepth = 16;

// ---- Values as nft's integers (at most 128 bits) ----

inline uint32_t paddedBits(uint32_t bits) { return (bits + 31) / 32 * 32; }
// Shifts by a width the kernel gave: 128 or more bits shift everything out.
inline Wide shiftedLeft(Wide v, uint32_t bits) { return bits >= 128 ? 0 : v << bits; }
inline Wide shiftedRight(Wide v, uint32_t bits) { return bits >= 128 ? 0 : v >> bits; }
inline Wide mask(uint32_t bits) { return bits >= 128 ? ~Wide(0) : (Wide(1) << bits) - 1; }
Wide swapBytes(Wide v, uint32_t bytes);
int lowestSet(Wide v); // -1 for 0
int firstClear(Wide v, int from); // mpz_scan0: 128 when none
inline bool isBitmask(Type type) { return typeInfo(type).base == Type::bitmask; }
inline bool isString(Type type) { return typeInfo(type).base == Type::string; }

// Text from the kernel as nft prints it, but on one line and never closing a quote early:
// quotes and control characters escaped (nft prints them raw; such a rule cannot be read
// back by nft either way), a backslash as it is (nft's own `eth\*`).
std::string printable(std::string_view text);
std::string verdictText(const Verdict &v);
// `[unknown: WHAT]`.
std::string unknownText(std::string_view what);

// ---- The expression tree (nft's struct expr) ----

// nft's operators (enum ops), in its order.
enum class Op : uint8_t { none, implicit, hton, ntoh, lshift, rshift, band, bxor, bor, eq, neq, lt, gt, lte, gte, neg };

enum class Kind : uint8_t {
	value, verdict, payload, exthdr, meta, ct, load, binop, unary, concat, prefix, range, setRef, map, mapping,
	list, flagcmp, relational, catchAll, unknown
};

using NodeId = int32_t;
inline constexpr NodeId kNone = -1;

// nft's struct expr, as far as listing needs it.
struct Node {
	Kind kind = Kind::unknown;
	Type type = Type::invalid;
	ByteOrder order = ByteOrder::invalid;
	uint32_t bits = 0;
	Wide value = 0; // a value: nft's integer (imported big-endian, swapped for host types)
	Bytes raw = {}; // a string value's bytes
	std::string text = {}; // a load's or verdict's text, an unknown part's description
	std::string after = {}; // a hash's text after its input
	// payload: where; protocol and field once named; exthdr's raw fields reuse them
	Base base = Base::invalid;
	uint32_t offset = 0;
	const Protocol *protocol = nullptr;
	int field = -1;
	bool protocolKey = false; // EXPR_F_PROTOCOL: the match names the next protocol
	// meta and ct
	uint32_t key = 0;
	int direction = -1;
	uint8_t nfproto = 0;
	Op op = Op::none;
	NodeId a = kNone, b = kNone, c = kNone; // operands: left, right (flagcmp: value), mask
	std::vector<NodeId> items = {}; // concat, list, an anonymous set's elements
	const Set *set = nullptr;
	bool anonymous = false, verdictMap = false, intervalEnd = false;
	// exthdr: the header (option, chunk) and field once named (field), its number and flags
	const ExthdrHeader *header = nullptr;
	uint8_t headerType = 0;
	uint32_t exthdrFlags = 0;
};

// One rule's expression trees, by id; adding a node leaves references to the others valid.
class Tree
{
public:
	NodeId add(Node node)
	{
		nodes_.push_back(std::move(node));
		return static_cast<NodeId>(nodes_.size() - 1);
	}
	Node &at(NodeId id) { return nodes_[size_t(id)]; }
	const Node &at(NodeId id) const { return nodes_[size_t(id)]; }
	NodeId unknown(std::string what) { return add({.kind = Kind::unknown, .text = std::move(what)}); }
	// A constant from big-endian bytes, `bits` wide (0: all of them).
	NodeId value(std::span<const uint8_t> bytes, uint32_t bits = 0);
	NodeId binop(Op op, NodeId left, NodeId right);
	NodeId relational(Op op, NodeId left, NodeId right)
	{
		return add({.kind = Kind::relational, .type = Type::verdict, .op = op, .a = left, .b = right});
	}
	NodeId clone(NodeId id, int depth = 0);
	// nft's expr_set_type: a value or set gets the type its left-hand side gives it.
	void setType(NodeId id, Type type, ByteOrder order);
	// The key of an element (a mapping's left side).
	NodeId keyOf(NodeId element) const { return at(element).kind == Kind::mapping ? at(element).a : element; }
	// nft's range_expr_is_prefix: a range of two values as low/len when it is one.
	NodeId prefixOf(NodeId range);
	// nft's binop_tree_to_list: `a | b | c` as the list a,b,c; anything else as it is.
	NodeId flagList(NodeId id);
	// nft's bitmask_expr_to_binops: a value of several flags as `a | b`.
	NodeId bitmaskToBinops(NodeId id);
	// nft's expr_print.
	std::string print(NodeId id, bool numeric = false, int depth = 0) const;

private:
	std::deque<Node> nodes_;
};

// ---- Statements (nft's struct stmt) ----

// nft's stmt_types, one for each print: the key of the statement table
// (rule_text_statement.cpp).
enum class StmtType : uint8_t {
	expression, verdict, counter, payload, exthdr, meta, ct, nat, addrtype, mark, log, limit, quota, connlimit,
	notrack, flowOffload, objref, dynset, dup, queue, synproxy, xtMatch, xtTarget, unknown
};

struct Stmt {
	StmtType type = StmtType::expression;
	const Statement *source = nullptr; // the decoded statement
	const Expression *expression = nullptr; // Other's expression, or a set's own statement
	NodeId expr = kNone; // a match, a vmap; nat: the address; payload, exthdr, meta, ct: the field or value
	NodeId value = kNone; // nat: the ports; payload, exthdr: the value written; objref: its map
	std::vector<NodeId> operands = {}; // Other's: its reads
	std::vector<Stmt> nested = {}; // dynset: the set's own statements
	bool removed = false;
	bool natFamily = false; // nat: `snat ip to`, in an inet table or with a map
};

// nft's output_ctx: what printing reads; `stateless` as NFT_CTX_OUTPUT_STATELESS (a set's
// own statements print without what they counted).
struct Output {
	const Tree &tree;
	const Table &table;
	bool stateless = false;
};
// nft's stmt_print: the statement table's print for its kind.
std::string printStatement(const Output &output, const Stmt &s);

// ---- Delinearize: the rule's values as trees, its statements ----
// (rule_text_delinearize.cpp)

std::vector<Stmt> delinearize(Tree &tree, const Table &table, const Rule &rule);

// ---- Post-processing (rule_text_postprocess.cpp) ----

// nft's proto_ctx: the protocol each base holds, as the rule's matches establish it.
struct ProtocolContext {
	TableFamily family = TableFamily::ip;
	std::array<const Protocol *, 5> protocol{};
	uint8_t icmpType = 0;
	std::vector<const Protocol *> stackedLinks; // link headers below the current one (ether, vlan...)

	const Protocol *&at(Base base) { return protocol[size_t(base)]; }
};

// nft's payload_dep_ctx: the statements that are protocol dependencies, by base.
struct Dependencies {
	std::array<std::optional<size_t>, 6> pdeps{};
	std::optional<size_t> prev;
	uint8_t icmpType = 0;
};

// nft's rule_pp_ctx: the statements being post-processed and what they established.
struct PostContext {
	Tree &tree;
	std::vector<Stmt> &stmts;
	size_t current = 0; // the statement being post-processed
	ProtocolContext protocols = {};
	Dependencies deps = {};

	Node &at(NodeId id) { return tree.at(id); }
};

// nft's rule_parse_postprocess: each statement in order, in `family`'s context.
void postprocess(Tree &tree, std::vector<Stmt> &stmts, TableFamily family);
// nft's expr_postprocess.
void process(PostContext &cx, NodeId &id, int depth = 0);
// nft's relational_expr_pctx_update: a match on a protocol key names the protocol above.
void updateContext(PostContext &cx, NodeId relationalId);

// ---- Payload (rule_text_payload.cpp) ----

// A raw load `bits` long at `offsetBits` of `base` (th's ports named at once).
NodeId payloadRaw(Tree &tree, Base base, uint32_t offsetBits, uint32_t bits);
inline bool isKnown(const Node &payload) { return payload.protocol && payload.field >= 0; }
// nft's payload_expr_complete: the field a raw load is, named.
void completePayload(PostContext &cx, NodeId id);
// nft's payload_match_postprocess.
void payloadMatch(PostContext &cx, NodeId relationalId, NodeId payload);
// nft's payload_expr_trim: a mask that selects one field of a load names it.
bool trimPayload(PostContext &cx, NodeId id, const Node &maskNode, int &shift);
std::string payloadText(const Node &payload);
// nft's payload_dependency_*: protocol matches a later match implies.
bool dependencyExists(PostContext &cx, Base base);
const Node *dependency(PostContext &cx, Base base);
void releaseDependency(PostContext &cx, Base base);
void storeDependency(PostContext &cx, size_t stmt, Base base);
void killDependency(PostContext &cx, NodeId payload);

// ---- Extension headers, options, chunks (rule_text_exthdr.cpp) ----

NodeId exthdrNode(Tree &tree, const Exthdr &x);
// nft's exthdr_find_template: a mask that selects one field of the load names it.
bool exthdrTrim(Tree &tree, NodeId id, const Node &maskNode, int &shift);
// nft's exthdr_dependency_kill.
void killExthdrDependency(PostContext &cx, const Node &exthdr);
std::string exthdrText(const Node &exthdr);

// ---- Set elements (rule_text_segtree.cpp) ----

// An anonymous set's elements as nft lists them: sorted, intervals decomposed, the
// catch-all last.
std::vector<NodeId> setElements(Tree &tree, const Set &set);

} // namespace ipmasq::nft::text
