// SPDX-License-Identifier: Apache-2.0
// Reads other tables' NAT (nat postrouting base chains, what they reach, the sets they
// look up) into the NAT evaluator's model, with dump requests only.
#include "ip-masq-agent/netlink/nat_reader.h"

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sys/stat.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/netlink/handles.h"

namespace ipmasq::netlink {

// The model's names; ipmasq has a Chain, Rule and Masquerade of its own (ruleset.h).
using nat::BaseHook;
using nat::Bitwise;
using nat::BitwiseOp;
using nat::Byteorder;
using nat::Bytes;
using nat::Chain;
using nat::Cmp;
using nat::CmpOp;
using nat::CompatMatch;
using nat::CompatTarget;
using nat::Counter;
using nat::CtLoad;
using nat::CtSet;
using nat::Expression;
using nat::Fib;
using nat::Immediate;
using nat::ImmediateVerdict;
using nat::Log;
using nat::Lookup;
using nat::Masquerade;
using nat::MetaLoad;
using nat::MetaSet;
using nat::Nat;
using nat::NatRuleset;
using nat::NatType;
using nat::OpaqueLoad;
using nat::Passthrough;
using nat::PayloadBase;
using nat::PayloadLoad;
using nat::Range;
using nat::RateMatch;
using nat::Redirect;
using nat::Rule;
using nat::Set;
using nat::SetElement;
using nat::Table;
using nat::TableFamily;
using nat::Unknown;
using nat::Verdict;
using nat::VerdictCode;

namespace {

constexpr uint16_t messageType(uint8_t message)
{
	return (NFNL_SUBSYS_NFTABLES << 8) | message;
}

std::optional<TableFamily> familyOf(uint32_t nfproto)
{
	switch (nfproto) {
	case NFPROTO_IPV4:
		return TableFamily::ip;
	case NFPROTO_IPV6:
		return TableFamily::ip6;
	case NFPROTO_INET:
		return TableFamily::inet;
	default:
		return std::nullopt;
	}
}

uint16_t nfprotoOf(TableFamily family)
{
	switch (family) {
	case TableFamily::ip:
		return NFPROTO_IPV4;
	case TableFamily::ip6:
		return NFPROTO_IPV6;
	case TableFamily::inet:
		break;
	}
	return NFPROTO_INET;
}

Status parsedOk(int ret, const char *what)
{
	if (ret < 0)
		return fail(fmt::format("cannot parse the kernel's {} message", what), EPROTO);
	return {};
}

Error tooMany(const char *what, size_t limit)
{
	return Error(fmt::format("the ruleset has more than {} {} to read for the NAT check "
				 "(its limit)", limit, what), E2BIG);
}

std::string str(const char *s)
{
	return s ? s : "";
}

// ---- Expressions ----

uint32_t u32(const nftnl_expr *e, uint16_t attr)
{
	return nftnl_expr_is_set(e, attr) ? nftnl_expr_get_u32(e, attr) : 0;
}

std::optional<uint32_t> optU32(const nftnl_expr *e, uint16_t attr)
{
	if (!nftnl_expr_is_set(e, attr))
		return std::nullopt;
	return nftnl_expr_get_u32(e, attr);
}

Bytes data(const nftnl_expr *e, uint16_t attr)
{
	uint32_t len = 0;
	const auto *p = static_cast<const uint8_t *>(nftnl_expr_get(e, attr, &len));
	return p ? Bytes(p, p + len) : Bytes();
}

Verdict verdictOf(int32_t code, const char *chain)
{
	switch (code) {
	case NF_ACCEPT:
		return {VerdictCode::accept, {}};
	case NF_DROP:
		return {VerdictCode::drop, {}};
	case NF_STOLEN:
		return {VerdictCode::stolen, {}};
	case NFT_CONTINUE:
		return {VerdictCode::continueRule, {}};
	case NFT_BREAK:
		return {VerdictCode::breakRule, {}};
	case NFT_JUMP:
		return {VerdictCode::jump, str(chain)};
	case NFT_GOTO:
		return {VerdictCode::goTo, str(chain)};
	case NFT_RETURN:
		return {VerdictCode::returnToCaller, {}};
	default:
		// NF_QUEUE carries the queue number in its upper bits.
		return {VerdictCode::queue, {}};
	}
}

Expression payload(const nftnl_expr *e)
{
	if (nftnl_expr_is_set(e, NFTNL_EXPR_PAYLOAD_SREG))
		return Unknown{"payload set"}; // rewrites the packet
	static constexpr PayloadBase kBases[] = {PayloadBase::link, PayloadBase::network,
						 PayloadBase::transport, PayloadBase::inner};
	const uint32_t base = u32(e, NFTNL_EXPR_PAYLOAD_BASE);
	if (base >= std::size(kBases))
		return Unknown{fmt::format("payload base {}", base)};
	return PayloadLoad{kBases[base], u32(e, NFTNL_EXPR_PAYLOAD_OFFSET),
			   u32(e, NFTNL_EXPR_PAYLOAD_LEN), u32(e, NFTNL_EXPR_PAYLOAD_DREG)};
}

Expression meta(const nftnl_expr *e)
{
	const uint32_t key = u32(e, NFTNL_EXPR_META_KEY);
	if (nftnl_expr_is_set(e, NFTNL_EXPR_META_DREG))
		return MetaLoad{key, u32(e, NFTNL_EXPR_META_DREG)};
	return MetaSet{key, u32(e, NFTNL_EXPR_META_SREG)};
}

Expression ct(const nftnl_expr *e)
{
	const uint32_t key = u32(e, NFTNL_EXPR_CT_KEY);
	if (!nftnl_expr_is_set(e, NFTNL_EXPR_CT_DREG))
		return CtSet{key, u32(e, NFTNL_EXPR_CT_SREG)};
	std::optional<uint8_t> dir;
	if (nftnl_expr_is_set(e, NFTNL_EXPR_CT_DIR))
		dir = nftnl_expr_get_u8(e, NFTNL_EXPR_CT_DIR);
	return CtLoad{key, dir, u32(e, NFTNL_EXPR_CT_DREG)};
}

Expression bitwise(const nftnl_expr *e)
{
	Bitwise b;
	const uint32_t op = u32(e, NFTNL_EXPR_BITWISE_OP);
	b.op = op == NFT_BITWISE_LSHIFT ? BitwiseOp::leftShift
		: op == NFT_BITWISE_RSHIFT ? BitwiseOp::rightShift
					    : BitwiseOp::boolean;
	b.sreg = u32(e, NFTNL_EXPR_BITWISE_SREG);
	b.dreg = u32(e, NFTNL_EXPR_BITWISE_DREG);
	b.len = u32(e, NFTNL_EXPR_BITWISE_LEN);
	b.mask = data(e, NFTNL_EXPR_BITWISE_MASK);
	b.xorValue = data(e, NFTNL_EXPR_BITWISE_XOR);
	const Bytes shift = data(e, NFTNL_EXPR_BITWISE_DATA);
	if (shift.size() >= 4)
		std::memcpy(&b.shift, shift.data(), 4);
	return b;
}

Expression cmp(const nftnl_expr *e)
{
	static constexpr CmpOp kOps[] = {CmpOp::eq, CmpOp::neq, CmpOp::lt, CmpOp::lte, CmpOp::gt,
					 CmpOp::gte};
	const uint32_t op = u32(e, NFTNL_EXPR_CMP_OP);
	if (op >= std::size(kOps))
		return Unknown{fmt::format("cmp op {}", op)};
	return Cmp{u32(e, NFTNL_EXPR_CMP_SREG), kOps[op], data(e, NFTNL_EXPR_CMP_DATA)};
}

Expression lookup(const nftnl_expr *e)
{
	return Lookup{str(nftnl_expr_get_str(e, NFTNL_EXPR_LOOKUP_SET)),
		      u32(e, NFTNL_EXPR_LOOKUP_SREG), optU32(e, NFTNL_EXPR_LOOKUP_DREG),
		      (u32(e, NFTNL_EXPR_LOOKUP_FLAGS) & NFT_LOOKUP_F_INV) != 0};
}

Expression immediate(const nftnl_expr *e)
{
	const uint32_t dreg = u32(e, NFTNL_EXPR_IMM_DREG);
	if (dreg != NFT_REG_VERDICT)
		return Immediate{dreg, data(e, NFTNL_EXPR_IMM_DATA)};
	const auto code = static_cast<int32_t>(u32(e, NFTNL_EXPR_IMM_VERDICT));
	return ImmediateVerdict{verdictOf(code, nftnl_expr_get_str(e, NFTNL_EXPR_IMM_CHAIN))};
}

Expression natExpr(const nftnl_expr *e)
{
	Nat n;
	n.type = u32(e, NFTNL_EXPR_NAT_TYPE) == NFT_NAT_DNAT ? NatType::dnat : NatType::snat;
	n.family = u32(e, NFTNL_EXPR_NAT_FAMILY);
	n.addrMinReg = optU32(e, NFTNL_EXPR_NAT_REG_ADDR_MIN);
	n.addrMaxReg = optU32(e, NFTNL_EXPR_NAT_REG_ADDR_MAX);
	n.protoMinReg = optU32(e, NFTNL_EXPR_NAT_REG_PROTO_MIN);
	n.protoMaxReg = optU32(e, NFTNL_EXPR_NAT_REG_PROTO_MAX);
	n.flags = u32(e, NFTNL_EXPR_NAT_FLAGS);
	return n;
}

Expression logExpr(const nftnl_expr *e)
{
	Log l;
	if (nftnl_expr_is_set(e, NFTNL_EXPR_LOG_PREFIX))
		l.prefix = str(nftnl_expr_get_str(e, NFTNL_EXPR_LOG_PREFIX));
	if (nftnl_expr_is_set(e, NFTNL_EXPR_LOG_GROUP))
		l.group = nftnl_expr_get_u16(e, NFTNL_EXPR_LOG_GROUP);
	return l;
}

Expression objref(const nftnl_expr *e)
{
	if (nftnl_expr_is_set(e, NFTNL_EXPR_OBJREF_SET_NAME))
		return Unknown{"objref map"};
	switch (u32(e, NFTNL_EXPR_OBJREF_IMM_TYPE)) {
	case NFT_OBJECT_COUNTER:
		return Passthrough{"counter name", str(nftnl_expr_get_str(e, NFTNL_EXPR_OBJREF_IMM_NAME))};
	case NFT_OBJECT_QUOTA:
		return RateMatch{"quota"};
	case NFT_OBJECT_LIMIT:
		return RateMatch{"limit"};
	default:
		return Unknown{"objref"};
	}
}

// Loads whose value only the running kernel knows: the register and its width.
std::optional<Expression> opaqueLoad(const std::string &name, const nftnl_expr *e)
{
	static const std::map<std::string, std::pair<uint16_t, uint32_t>> kLoads = {
		{"numgen", {NFTNL_EXPR_NG_DREG, 4}},   {"hash", {NFTNL_EXPR_HASH_DREG, 4}},
		{"rt", {NFTNL_EXPR_RT_DREG, 16}},      {"socket", {NFTNL_EXPR_SOCKET_DREG, 4}},
		{"osf", {NFTNL_EXPR_OSF_DREG, 16}},    {"xfrm", {NFTNL_EXPR_XFRM_DREG, 16}},
		{"tunnel", {NFTNL_EXPR_TUNNEL_DREG, 4}}, {"exthdr", {NFTNL_EXPR_EXTHDR_DREG, 0}},
	};
	const auto it = kLoads.find(name);
	if (it == kLoads.end() || !nftnl_expr_is_set(e, it->second.first))
		return std::nullopt; // not a load (exthdr and others can also write)
	uint32_t len = it->second.second;
	if (name == "exthdr")
		len = u32(e, NFTNL_EXPR_EXTHDR_LEN);
	return OpaqueLoad{name, nftnl_expr_get_u32(e, it->second.first), len};
}

Expression convert(const nftnl_expr *e)
{
	const std::string name = str(nftnl_expr_get_str(e, NFTNL_EXPR_NAME));
	if (name == "payload") return payload(e);
	if (name == "meta") return meta(e);
	if (name == "ct") return ct(e);
	if (name == "fib")
		return Fib{u32(e, NFTNL_EXPR_FIB_FLAGS), u32(e, NFTNL_EXPR_FIB_RESULT),
			   u32(e, NFTNL_EXPR_FIB_DREG)};
	if (name == "bitwise") return bitwise(e);
	if (name == "byteorder")
		return Byteorder{u32(e, NFTNL_EXPR_BYTEORDER_OP) == NFT_BYTEORDER_HTON,
				 u32(e, NFTNL_EXPR_BYTEORDER_SREG), u32(e, NFTNL_EXPR_BYTEORDER_DREG),
				 u32(e, NFTNL_EXPR_BYTEORDER_LEN), u32(e, NFTNL_EXPR_BYTEORDER_SIZE)};
	if (name == "cmp") return cmp(e);
	if (name == "range")
		return Range{u32(e, NFTNL_EXPR_RANGE_SREG), u32(e, NFTNL_EXPR_RANGE_OP) == NFT_RANGE_NEQ,
			     data(e, NFTNL_EXPR_RANGE_FROM_DATA), data(e, NFTNL_EXPR_RANGE_TO_DATA)};
	if (name == "lookup") return lookup(e);
	if (name == "immediate") return immediate(e);
	if (name == "masq")
		return Masquerade{u32(e, NFTNL_EXPR_MASQ_FLAGS), optU32(e, NFTNL_EXPR_MASQ_REG_PROTO_MIN),
				  optU32(e, NFTNL_EXPR_MASQ_REG_PROTO_MAX)};
	if (name == "nat") return natExpr(e);
	if (name == "redir")
		return Redirect{u32(e, NFTNL_EXPR_REDIR_FLAGS), optU32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN),
				optU32(e, NFTNL_EXPR_REDIR_REG_PROTO_MAX)};
	if (name == "counter")
		return Counter{nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_PACKETS),
			       nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_BYTES)};
	if (name == "log") return logExpr(e);
	if (name == "notrack" || name == "last") return Passthrough{name};
	if (name == "limit" || name == "quota" || name == "connlimit") return RateMatch{name};
	if (name == "objref") return objref(e);
	if (name == "match")
		return CompatMatch{str(nftnl_expr_get_str(e, NFTNL_EXPR_MT_NAME)),
				   u32(e, NFTNL_EXPR_MT_REV), data(e, NFTNL_EXPR_MT_INFO)};
	if (name == "target")
		return CompatTarget{str(nftnl_expr_get_str(e, NFTNL_EXPR_TG_NAME)),
				    u32(e, NFTNL_EXPR_TG_REV), data(e, NFTNL_EXPR_TG_INFO)};
	if (auto load = opaqueLoad(name, e))
		return *load;
	return Unknown{name};
}

// A rule's comment, as nft stores it in the rule's user data.
std::string ruleComment(const nftnl_rule *rule)
{
	uint32_t len = 0;
	const void *udata = nftnl_rule_get_data(rule, NFTNL_RULE_USERDATA, &len);
	if (!udata || len == 0)
		return {};
	const nftnl_udata *comment = nullptr;
	const auto find = [](const nftnl_udata *attr, void *out) -> int {
		if (nftnl_udata_type(attr) == NFTNL_UDATA_RULE_COMMENT)
			*static_cast<const nftnl_udata **>(out) = attr;
		return 0;
	};
	if (nftnl_udata_parse(udata, len, find, &comment) < 0 || !comment)
		return {};
	const auto *text = static_cast<const char *>(nftnl_udata_get(comment));
	return std::string(text, strnlen(text, nftnl_udata_len(comment)));
}

// ---- Set elements ----

struct ElementSink {
	Set *set;
	size_t *budget;
	bool overflow = false;
	bool failed = false;
};

Bytes elemData(nftnl_set_elem *elem, uint16_t attr)
{
	uint32_t len = 0;
	const auto *p = static_cast<const uint8_t *>(nftnl_set_elem_get(elem, attr, &len));
	return p && nftnl_set_elem_is_set(elem, attr) ? Bytes(p, p + len) : Bytes();
}

// A C callback (nftnl_set_elem_foreach): nothing may be thrown through it.
int collectElement(nftnl_set_elem *elem, void *arg)
{
	auto *sink = static_cast<ElementSink *>(arg);
	try {
		if (*sink->budget == 0) {
			sink->overflow = true;
			return 0;
		}
		--*sink->budget;
		SetElement e;
		e.key = elemData(elem, NFTNL_SET_ELEM_KEY);
		e.keyEnd = elemData(elem, NFTNL_SET_ELEM_KEY_END);
		const uint32_t flags = nftnl_set_elem_is_set(elem, NFTNL_SET_ELEM_FLAGS)
			? nftnl_set_elem_get_u32(elem, NFTNL_SET_ELEM_FLAGS)
			: 0;
		e.intervalEnd = flags & NFT_SET_ELEM_INTERVAL_END;
		e.catchAll = flags & NFT_SET_ELEM_CATCHALL;
		e.data = elemData(elem, NFTNL_SET_ELEM_DATA);
		if (nftnl_set_elem_is_set(elem, NFTNL_SET_ELEM_VERDICT)) {
			const char *chain = nftnl_set_elem_is_set(elem, NFTNL_SET_ELEM_CHAIN)
				? nftnl_set_elem_get_str(elem, NFTNL_SET_ELEM_CHAIN)
				: nullptr;
			e.verdict = verdictOf(
				static_cast<int32_t>(nftnl_set_elem_get_u32(elem, NFTNL_SET_ELEM_VERDICT)),
				chain);
		}
		sink->set->elements.push_back(std::move(e));
		return 0;
	} catch (...) {
		sink->failed = true;
		return -1;
	}
}

// ---- One read ----

struct TableKey {
	TableFamily family;
	std::string name;
	auto operator<=>(const TableKey &) const = default;
};

class Reader
{
public:
	Reader(Socket &socket, const NatReadLimits &limits) : socket_(socket), limits_(limits) {}

	Result<NatRuleset> read();

private:
	Status dump(uint8_t message, uint16_t family, const RequestBuilder &build,
		    const ReplyHandler &onReply);
	Status readTables(std::set<TableKey> &tables);
	Status readChains(const std::set<TableKey> &tables, std::map<TableKey, Table> &out);
	Status readSets(Table &table);
	Status readRules(Table &table, const std::string &chain, std::vector<std::string> &reached);
	Status readElements(Table &table, Set &set);
	Status readTable(Table &table);

	Socket &socket_;
	const NatReadLimits &limits_;
	size_t rules_ = 0;
	size_t elementBudget_ = 0;
	std::set<std::string> setsRequested_; // in the table being read
};

Status Reader::dump(uint8_t message, uint16_t family, const RequestBuilder &build,
		    const ReplyHandler &onReply)
{
	return socket_.query(messageType(message), family, NLM_F_DUMP, build, onReply);
}

Status Reader::readTables(std::set<TableKey> &tables)
{
	size_t seen = 0;
	return dump(NFT_MSG_GETTABLE, NFPROTO_UNSPEC, nullptr, [&](const nlmsghdr *nlh) -> Status {
		if (++seen > limits_.maxTables)
			return fail(tooMany("tables", limits_.maxTables));
		TablePtr t = newTable();
		if (auto p = parsedOk(nftnl_table_nlmsg_parse(nlh, t.get()), "table"); !p)
			return p;
		if (const auto family = familyOf(nftnl_table_get_u32(t.get(), NFTNL_TABLE_FAMILY)))
			tables.insert({*family, str(nftnl_table_get_str(t.get(), NFTNL_TABLE_NAME))});
		return {};
	});
}

VerdictCode policyOf(uint32_t policy)
{
	return policy == NF_DROP ? VerdictCode::drop : VerdictCode::accept;
}

Status Reader::readChains(const std::set<TableKey> &tables, std::map<TableKey, Table> &out)
{
	size_t seen = 0;
	return dump(NFT_MSG_GETCHAIN, NFPROTO_UNSPEC, nullptr, [&](const nlmsghdr *nlh) -> Status {
		ChainPtr c = newChain();
		if (auto p = parsedOk(nftnl_chain_nlmsg_parse(nlh, c.get()), "chain"); !p)
			return p;
		const auto family = familyOf(nftnl_chain_get_u32(c.get(), NFTNL_CHAIN_FAMILY));
		if (!family)
			return {};
		if (++seen > limits_.maxChains)
			return fail(tooMany("chains", limits_.maxChains));
		const TableKey key{*family, str(nftnl_chain_get_str(c.get(), NFTNL_CHAIN_TABLE))};
		if (!tables.count(key))
			return {}; // a table created after the table dump: the next read sees it
		Table &table = out[key];
		table.family = key.family;
		table.name = key.name;
		Chain chain;
		chain.name = str(nftnl_chain_get_str(c.get(), NFTNL_CHAIN_NAME));
		if (nftnl_chain_is_set(c.get(), NFTNL_CHAIN_HOOKNUM))
			chain.base = BaseHook{str(nftnl_chain_get_str(c.get(), NFTNL_CHAIN_TYPE)),
					      nftnl_chain_get_u32(c.get(), NFTNL_CHAIN_HOOKNUM),
					      nftnl_chain_get_s32(c.get(), NFTNL_CHAIN_PRIO),
					      policyOf(nftnl_chain_get_u32(c.get(), NFTNL_CHAIN_POLICY))};
		table.chains.push_back(std::move(chain));
		return {};
	});
}

Status Reader::readSets(Table &table)
{
	SetPtr filter = newSet();
	nftnl_set_set_str(filter.get(), NFTNL_SET_TABLE, table.name.c_str());
	return dump(
		NFT_MSG_GETSET, nfprotoOf(table.family),
		[&](nlmsghdr *nlh) { nftnl_set_nlmsg_build_payload(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			SetPtr s = newSet();
			if (auto p = parsedOk(nftnl_set_nlmsg_parse(nlh, s.get()), "set"); !p)
				return p;
			if (str(nftnl_set_get_str(s.get(), NFTNL_SET_TABLE)) != table.name)
				return {};
			if (table.sets.size() >= limits_.maxSets)
				return fail(tooMany("sets", limits_.maxSets));
			const auto get = [&s](uint16_t attr) {
				return nftnl_set_is_set(s.get(), attr) ? nftnl_set_get_u32(s.get(), attr) : 0;
			};
			Set set;
			set.name = str(nftnl_set_get_str(s.get(), NFTNL_SET_NAME));
			set.flags = get(NFTNL_SET_FLAGS);
			set.keyType = get(NFTNL_SET_KEY_TYPE);
			set.keyLen = get(NFTNL_SET_KEY_LEN);
			set.dataType = get(NFTNL_SET_DATA_TYPE);
			set.dataLen = get(NFTNL_SET_DATA_LEN);
			set.complete = false; // until its elements are read
			table.sets.push_back(std::move(set));
			return {};
		});
}

Status Reader::readElements(Table &table, Set &set)
{
	SetPtr filter = newSet();
	nftnl_set_set_str(filter.get(), NFTNL_SET_TABLE, table.name.c_str());
	nftnl_set_set_str(filter.get(), NFTNL_SET_NAME, set.name.c_str());
	ElementSink sink{&set, &elementBudget_};
	Status s = dump(
		NFT_MSG_GETSETELEM, nfprotoOf(table.family),
		[&](nlmsghdr *nlh) { nftnl_set_elems_nlmsg_build_payload(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			if (sink.overflow)
				return {}; // the rest of the dump is read and dropped
			SetPtr part = newSet();
			if (auto p = parsedOk(nftnl_set_elems_nlmsg_parse(nlh, part.get()), "set element"); !p)
				return p;
			if (nftnl_set_elem_foreach(part.get(), collectElement, &sink) < 0 || sink.failed)
				return fail("out of memory reading set elements", ENOMEM);
			return {};
		});
	if (!s)
		return s;
	set.complete = !sink.overflow;
	if (sink.overflow)
		set.elements.clear(); // a partial set could only mislead
	return {};
}

// Chains and sets a rule refers to: jump/goto targets and looked-up sets.
void references(const Rule &rule, std::vector<std::string> &chains, std::vector<std::string> &sets)
{
	for (const Expression &e : rule.expressions) {
		if (const auto *v = std::get_if<ImmediateVerdict>(&e)) {
			if (v->verdict.code == VerdictCode::jump || v->verdict.code == VerdictCode::goTo)
				chains.push_back(v->verdict.chain);
		} else if (const auto *l = std::get_if<Lookup>(&e)) {
			sets.push_back(l->set);
		}
	}
}

Status Reader::readRules(Table &table, const std::string &chainName, std::vector<std::string> &reached)
{
	Chain *chain = nullptr;
	for (Chain &c : table.chains)
		if (c.name == chainName)
			chain = &c;
	if (!chain)
		return {}; // the evaluator says "chain X was not read" if a rule jumps there
	RulePtr filter = newRule();
	nftnl_rule_set_str(filter.get(), NFTNL_RULE_TABLE, table.name.c_str());
	nftnl_rule_set_str(filter.get(), NFTNL_RULE_CHAIN, chainName.c_str());
	std::vector<std::string> sets;
	Status s = dump(
		NFT_MSG_GETRULE, nfprotoOf(table.family),
		[&](nlmsghdr *nlh) { nftnl_rule_nlmsg_build_payload(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			RulePtr r = newRule();
			if (auto p = parsedOk(nftnl_rule_nlmsg_parse(nlh, r.get()), "rule"); !p)
				return p;
			if (str(nftnl_rule_get_str(r.get(), NFTNL_RULE_TABLE)) != table.name ||
			    str(nftnl_rule_get_str(r.get(), NFTNL_RULE_CHAIN)) != chainName)
				return {};
			if (++rules_ > limits_.maxRules)
				return fail(tooMany("rules", limits_.maxRules));
			Rule rule;
			rule.handle = nftnl_rule_get_u64(r.get(), NFTNL_RULE_HANDLE);
			rule.comment = ruleComment(r.get());
			ExprIterPtr iter(nftnl_expr_iter_create(r.get()));
			if (!iter)
				throw std::bad_alloc();
			while (const nftnl_expr *e = nftnl_expr_iter_next(iter.get())) {
				if (rule.expressions.size() >= limits_.maxExpressionsPerRule) {
					rule.expressions.push_back(Unknown{"more expressions"});
					break;
				}
				rule.expressions.push_back(convert(e));
			}
			references(rule, reached, sets);
			chain->rules.push_back(std::move(rule));
			return {};
		});
	if (!s)
		return s;
	for (const std::string &name : sets)
		for (Set &set : table.sets)
			if (set.name == name && setsRequested_.insert(name).second) {
				if (auto e = readElements(table, set); !e)
					return e;
				// A verdict map's chains are reached too.
				for (const SetElement &el : set.elements)
					if (el.verdict && (el.verdict->code == VerdictCode::jump ||
							   el.verdict->code == VerdictCode::goTo))
						reached.push_back(el.verdict->chain);
			}
	return {};
}

// The rules of every chain the table's nat postrouting base chains reach.
Status Reader::readTable(Table &table)
{
	setsRequested_.clear();
	if (auto s = readSets(table); !s)
		return s;
	std::deque<std::string> queue;
	std::set<std::string> queued;
	for (const Chain &c : table.chains)
		if (c.base && c.base->type == "nat" && c.base->hook == NF_INET_POST_ROUTING)
			if (queued.insert(c.name).second)
				queue.push_back(c.name);
	while (!queue.empty()) {
		const std::string name = queue.front();
		queue.pop_front();
		std::vector<std::string> reached;
		if (auto s = readRules(table, name, reached); !s)
			return s;
		for (std::string &next : reached)
			if (queued.insert(next).second)
				queue.push_back(std::move(next));
	}
	// Keep what the evaluator walks: the chains read (others stay as names only).
	std::erase_if(table.chains, [&queued](const Chain &c) { return !queued.count(c.name); });
	std::erase_if(table.sets, [this](const Set &s) { return !setsRequested_.count(s.name); });
	return {};
}

bool hasNatPostrouting(const Table &table)
{
	for (const Chain &c : table.chains)
		if (c.base && c.base->type == "nat" && c.base->hook == NF_INET_POST_ROUTING)
			return true;
	return false;
}

Result<NatRuleset> Reader::read()
{
	rules_ = 0;
	elementBudget_ = limits_.maxElements;
	std::set<TableKey> keys;
	if (auto s = readTables(keys); !s)
		return fail(s.error().withContext("reading the tables: "));
	std::map<TableKey, Table> tables;
	if (auto s = readChains(keys, tables); !s)
		return fail(s.error().withContext("reading the chains: "));
	NatRuleset ruleset;
	for (auto &[key, table] : tables) {
		if (!hasNatPostrouting(table) ||
		    (key.family == TableFamily::inet && key.name == limits_.skipInetTable))
			continue;
		if (auto s = readTable(table); !s)
			return fail(s.error().withContext(fmt::format(
				"reading table {} {}: ", tableFamilyName(key.family), key.name)));
		ruleset.tables.push_back(std::move(table));
	}
	return ruleset;
}

Result<uint32_t> generationOf(Socket &socket)
{
	std::optional<uint32_t> id;
	Status s = socket.query(messageType(NFT_MSG_GETGEN), NFPROTO_UNSPEC, 0, nullptr,
				[&id](const nlmsghdr *nlh) -> Status {
					GenPtr gen = newGen();
					if (nftnl_gen_nlmsg_parse(nlh, gen.get()) < 0)
						return fail("cannot parse the generation", EPROTO);
					id = nftnl_gen_get_u32(gen.get(), NFTNL_GEN_ID);
					return {};
				});
	if (!s)
		return fail(s.error());
	if (!id)
		return fail("the kernel sent no ruleset generation", EPROTO);
	return *id;
}

Error withHint(Error error)
{
	if (error.errnum == EPERM)
		error.message += " (reading other tables' NAT needs CAP_NET_ADMIN)";
	return error;
}

} // namespace

Result<NatRuleset> readNatRuleset(Socket &socket, const NatReadLimits &limits)
{
	for (int attempt = 0; attempt < std::max(limits.attempts, 1); attempt++) {
		auto before = generationOf(socket);
		if (!before)
			return fail(withHint(before.error().withContext("reading the ruleset generation: ")));
		Reader reader(socket, limits);
		auto ruleset = reader.read();
		// A dump interrupted by a commit (EINTR), or an object gone in between
		// (ENOENT): read again.
		const bool raced = !ruleset && (ruleset.error().errnum == EINTR ||
						ruleset.error().errnum == ENOENT);
		if (!ruleset && !raced)
			return fail(withHint(ruleset.error()));
		auto after = generationOf(socket);
		if (!after)
			return fail(withHint(after.error().withContext("reading the ruleset generation: ")));
		if (!raced && *after == *before)
			return ruleset;
	}
	return fail(fmt::format("other tables kept changing while they were read ({} attempts)",
				limits.attempts),
		    EAGAIN);
}

Result<LegacyNat> legacyNatTables(const std::string &procNet)
{
	LegacyNat legacy;
	const auto lists = [&procNet](const char *file) -> Result<bool> {
		const std::string path = procNet + "/" + file;
		struct stat st;
		if (stat(path.c_str(), &st) != 0) {
			if (errno == ENOENT)
				return false; // the module is not loaded
			return fail(fmt::format("cannot read {}: {}", path, std::strerror(errno)), errno);
		}
		std::ifstream in(path);
		if (!in)
			return fail(fmt::format("cannot read {}", path), EIO);
		std::string line;
		for (int lines = 0; lines < 1000 && std::getline(in, line); lines++)
			if (line == "nat")
				return true;
		return false;
	};
	auto v4 = lists("ip_tables_names");
	if (!v4)
		return fail(v4.error());
	auto v6 = lists("ip6_tables_names");
	if (!v6)
		return fail(v6.error());
	legacy.ipv4 = *v4;
	legacy.ipv6 = *v6;
	return legacy;
}

} // namespace ipmasq::netlink
