// SPDX-License-Identifier: Apache-2.0
// Reading the node's NAT: other tables with dump requests, one table at a time and each
// consistently, within a memory budget; the agent's own table from the backend's encoding.
#include "ip-masq-agent/nft/codec/table_reader.h"

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <span>

#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/netlink/change_watch.h"
#include "ip-masq-agent/netlink/nftnl_parse.h"
#include "ip-masq-agent/netlink/refusal.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/nft/codec/decoder.h"
#include "ip-masq-agent/base/overloaded.h"

namespace ipmasq::nft {

namespace {

using netlink::stringOf;

std::optional<TableFamily> familyOf(uint32_t nfproto)
{
	switch (nfproto) {
	case NFPROTO_IPV4: return TableFamily::ip;
	case NFPROTO_IPV6: return TableFamily::ip6;
	case NFPROTO_INET: return TableFamily::inet;
	default: return std::nullopt;
	}
}

uint16_t nfprotoOf(TableFamily family)
{
	return family == TableFamily::ip ? NFPROTO_IPV4 : family == TableFamily::ip6 ? NFPROTO_IPV6 : NFPROTO_INET;
}

// ---- Sets ----

// nft's typeof user data names a raw payload: an expression of type EXPR_PAYLOAD (7) whose
// protocol (NFTNL_UDATA_SET_KEY_PAYLOAD_DESC, 0) is none.
bool isRawPayload(const nftnl_udata *typeOf)
{
	constexpr uint32_t kPayloadExpression = 7;
	constexpr uint8_t kPayloadDescription = 0;
	if (!typeOf)
		return false;
	const void *data = nftnl_udata_get(typeOf);
	const uint32_t len = nftnl_udata_len(typeOf);
	if (netlink::userdataU32(data, len, NFTNL_UDATA_SET_TYPEOF_EXPR) != kPayloadExpression)
		return false;
	const nftnl_udata *payload = netlink::userdataAttribute(data, len, NFTNL_UDATA_SET_TYPEOF_DATA);
	const nftnl_udata *description = payload ? netlink::userdataAttribute(nftnl_udata_get(payload),
									   nftnl_udata_len(payload), kPayloadDescription)
						 : nullptr;
	return description && nftnl_udata_len(description) == sizeof(uint32_t) && nftnl_udata_get_u32(description) == 0;
}

} // namespace

// A set's declaration, with what nft keeps in its user data to list it; its elements
// come apart.
Set declaredSet(const nftnl_set *s)
{
	const auto get = [s](uint16_t attr) { return nftnl_set_is_set(s, attr) ? nftnl_set_get_u32(s, attr) : 0; };
	Set set;
	set.name = stringOf(nftnl_set_get_str(s, NFTNL_SET_NAME));
	set.flags = get(NFTNL_SET_FLAGS);
	set.keyType = get(NFTNL_SET_KEY_TYPE);
	set.keyLen = get(NFTNL_SET_KEY_LEN);
	set.dataType = get(NFTNL_SET_DATA_TYPE);
	set.dataLen = get(NFTNL_SET_DATA_LEN);
	set.objectType = get(NFTNL_SET_OBJ_TYPE);
	set.declaredSize = get(NFTNL_SET_DESC_SIZE);
	uint32_t len = 0;
	const void *udata = nftnl_set_get_data(s, NFTNL_SET_USERDATA, &len);
	set.keyByteorder = netlink::userdataU32(udata, len, NFTNL_UDATA_SET_KEYBYTEORDER);
	set.dataByteorder = netlink::userdataU32(udata, len, NFTNL_UDATA_SET_DATABYTEORDER);
	set.dataInterval = netlink::userdataU32(udata, len, NFTNL_UDATA_SET_DATA_INTERVAL) != 0;
	set.rawPayloadKey = isRawPayload(netlink::userdataAttribute(udata, len, NFTNL_UDATA_SET_KEY_TYPEOF));
	return set;
}

// A chain's declaration, without its rules.
Chain declaredChain(const nftnl_chain *c)
{
	Chain chain;
	chain.name = stringOf(nftnl_chain_get_str(c, NFTNL_CHAIN_NAME));
	if (nftnl_chain_is_set(c, NFTNL_CHAIN_HOOKNUM))
		chain.base = BaseHook{stringOf(nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE)),
				      nftnl_chain_get_u32(c, NFTNL_CHAIN_HOOKNUM), nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO),
				      nftnl_chain_get_u32(c, NFTNL_CHAIN_POLICY) == NF_DROP ? VerdictCode::drop
											    : VerdictCode::accept};
	return chain;
}

namespace {

Bytes elementBytes(nftnl_set_elem *elem, uint16_t attr)
{
	uint32_t len = 0;
	const auto *p = static_cast<const uint8_t *>(nftnl_set_elem_get(elem, attr, &len));
	return p && nftnl_set_elem_is_set(elem, attr) ? Bytes(p, p + len) : Bytes();
}

struct ElementSink {
	Set *set;
	size_t *budget;
	bool failed = false;
};

// A C callback (nftnl_set_elem_foreach): nothing may be thrown through it.
int collectElement(nftnl_set_elem *elem, void *arg)
{
	auto *sink = static_cast<ElementSink *>(arg);
	try {
		if (*sink->budget == 0) {
			sink->set->markUnusable(fmt::format("set {} was not read whole (the check's limit of "
							    "elements)", sink->set->name));
			return 0;
		}
		--*sink->budget;
		SetElement e;
		e.key = elementBytes(elem, NFTNL_SET_ELEM_KEY);
		e.keyEnd = elementBytes(elem, NFTNL_SET_ELEM_KEY_END);
		const uint32_t flags = nftnl_set_elem_is_set(elem, NFTNL_SET_ELEM_FLAGS)
					       ? nftnl_set_elem_get_u32(elem, NFTNL_SET_ELEM_FLAGS)
					       : 0;
		e.intervalEnd = flags & NFT_SET_ELEM_INTERVAL_END;
		e.catchAll = flags & NFT_SET_ELEM_CATCHALL;
		e.data = elementBytes(elem, NFTNL_SET_ELEM_DATA);
		if (const char *object = nftnl_set_elem_get_str(elem, NFTNL_SET_ELEM_OBJREF))
			e.data.assign(object, object + strnlen(object, NFT_OBJ_MAXNAMELEN));
		if (nftnl_set_elem_is_set(elem, NFTNL_SET_ELEM_VERDICT))
			e.verdict = verdictOf(static_cast<int32_t>(nftnl_set_elem_get_u32(elem, NFTNL_SET_ELEM_VERDICT)),
					      stringOf(nftnl_set_elem_get_str(elem, NFTNL_SET_ELEM_CHAIN)));
		sink->set->add(e);
		return 0;
	} catch (...) {
		sink->failed = true;
		return -1;
	}
}

// The bytes a string or byte string keeps on the heap, with the allocator's own 16.
size_t heapBytes(const std::string &s)
{
	return s.capacity() > 15 ? s.capacity() + 16 : 0; // the string's own room holds 15
}
size_t heapBytes(const Bytes &b)
{
	return b.capacity() ? b.capacity() + 16 : 0;
}

// What a decoded rule holds, for the memory budget: its arrays and what its values and
// statements keep on the heap.
size_t ruleBytes(const Rule &rule)
{
	size_t bytes = sizeof(Rule) + heapBytes(rule.comment) +
		       4 * 16 + rule.values.capacity() * sizeof(Value) +
		       rule.statements.capacity() * sizeof(Statement) +
		       rule.slices.capacity() * sizeof(Slice) + rule.reads.capacity() * sizeof(rule.reads[0]);
	const auto heap = Overloaded{
		[](const Constant &c) { return heapBytes(c.bytes); },
		[](const OtherLoad &) { return sizeof(Expression) + 32; },
		[](const Masked &m) { return heapBytes(m.maskAndXor); },
		[](const MapData &m) { return heapBytes(m.set); },
		[](const Compare &c) { return heapBytes(c.data); },
		[](const InRange &r) { return heapBytes(r.bounds); },
		[](const InSet &in) { return heapBytes(in.set); },
		[](const VerdictMap &v) { return heapBytes(v.set); },
		[](const SetVerdict &v) { return heapBytes(v.verdict.chain); },
		[](const Other &o) {
			if (o.detail == commentMatch().detail)
				return size_t(0); // shared by every rule
			return sizeof(Other::Detail) + 32 + 4 * o.detail->reads.capacity() + heapBytes(o.reason());
		},
		[](const auto &) { return size_t(0); },
	};
	for (const Value &v : rule.values)
		bytes += std::visit(heap, v.source);
	for (const Statement &st : rule.statements)
		bytes += std::visit(heap, st);
	return bytes;
}

// ---- One read ----

struct TableKey {
	TableFamily family;
	std::string name;
	auto operator<=>(const TableKey &) const = default;
};

bool raced(const Error &error)
{
	// A dump interrupted by a commit (EINTR), an object gone in between (ENOENT).
	return error.errnum == EINTR || error.errnum == ENOENT;
}

class Reader
{
public:
	explicit Reader(const NatReadLimits &limits) : limits_(limits) {}

	Result<NatRuleset> read();

private:
	Status reopen();
	Status dump(uint8_t message, uint16_t family, const netlink::RequestBuilder &build,
		    const netlink::ReplyHandler &onReply);
	Status listTables(std::set<TableKey> &out);
	Status listChains(const std::set<TableKey> &tables, std::map<TableKey, std::vector<Chain>> &out);
	Result<Table> readConsistently(const TableKey &key, std::vector<Chain> chains);
	Status readTable(Table &table);
	Status readSets(Table &table);
	Status readRules(Table &table, Chain &chain, std::vector<std::string> &reached,
			 std::set<std::string> &looked);
	Status readElements(Table &table, Set &set);
	// Over a limit: the table is kept as unreadable, its memory given back.
	Status overBudget(const char *what, size_t limit) const;

	const NatReadLimits &limits_;
	std::optional<netlink::Socket> socket_;
	std::optional<netlink::ChangeWatch> watch_;
	uint64_t start_ = 0; // the watch's blind count when the lists were read
	size_t rules_ = 0, elementBudget_ = 0, bytes_ = 0;
};

constexpr int kOverBudget = E2BIG;

Status Reader::reopen()
{
	// A fresh socket ends a dump left half read: the kernel stops producing it.
	auto socket = netlink::Socket::open();
	if (!socket)
		return fail(socket.error());
	socket_.emplace(std::move(*socket));
	return {};
}

Status Reader::dump(uint8_t message, uint16_t family, const netlink::RequestBuilder &build,
		    const netlink::ReplyHandler &onReply)
{
	// A dump of one table's objects (a request that names the table) is not failed by
	// other tables' commits when the notifications will tell whether its own changed; the
	// lists of every table and chain are read again when interrupted.
	socket_->tolerateInterruptedDumps(build != nullptr);
	Status s = socket_->query(message, family, NLM_F_DUMP, build, onReply);
	if (!s && s.error().errnum == kOverBudget)
		if (auto r = reopen(); !r)
			return r;
	return s;
}

Status Reader::overBudget(const char *what, size_t limit) const
{
	return fail(fmt::format("it holds more than {} {} to read (the check's limit)", limit, what), kOverBudget);
}

Status Reader::listTables(std::set<TableKey> &out)
{
	size_t seen = 0;
	return dump(NFT_MSG_GETTABLE, NFPROTO_UNSPEC, nullptr, [&](const nlmsghdr *nlh) -> Status {
		if (++seen > limits_.maxTables)
			return fail(fmt::format("the ruleset has more than {} tables to read for the NAT "
						"check (its limit)", limits_.maxTables), E2BIG);
		netlink::TablePtr t = netlink::newTable();
		if (auto p = netlink::parsed(nftnl_table_nlmsg_parse(nlh, t.get()), "table"); !p)
			return p;
		if (const auto family = familyOf(nftnl_table_get_u32(t.get(), NFTNL_TABLE_FAMILY)))
			out.insert({*family, stringOf(nftnl_table_get_str(t.get(), NFTNL_TABLE_NAME))});
		return {};
	});
}

Status Reader::listChains(const std::set<TableKey> &tables, std::map<TableKey, std::vector<Chain>> &out)
{
	size_t seen = 0;
	return dump(NFT_MSG_GETCHAIN, NFPROTO_UNSPEC, nullptr, [&](const nlmsghdr *nlh) -> Status {
		netlink::ChainPtr c = netlink::newChain();
		if (auto p = netlink::parsed(nftnl_chain_nlmsg_parse(nlh, c.get()), "chain"); !p)
			return p;
		const auto family = familyOf(nftnl_chain_get_u32(c.get(), NFTNL_CHAIN_FAMILY));
		if (!family)
			return {};
		if (++seen > limits_.maxChains)
			return fail(fmt::format("the ruleset has more than {} chains to read for the NAT "
						"check (its limit)", limits_.maxChains), E2BIG);
		const TableKey key{*family, stringOf(nftnl_chain_get_str(c.get(), NFTNL_CHAIN_TABLE))};
		if (!tables.count(key))
			return {}; // a table created after the table dump: the next read sees it
		out[key].push_back(declaredChain(c.get()));
		return {};
	});
}

Status Reader::readSets(Table &table)
{
	netlink::SetPtr filter = netlink::newSet();
	nftnl_set_set_str(filter.get(), NFTNL_SET_TABLE, table.name.c_str());
	return dump(
		NFT_MSG_GETSET, nfprotoOf(table.family),
		[&](nlmsghdr *nlh) { nftnl_set_nlmsg_build_payload(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			netlink::SetPtr s = netlink::newSet();
			if (auto p = netlink::parsed(nftnl_set_nlmsg_parse(nlh, s.get()), "set"); !p)
				return p;
			if (stringOf(nftnl_set_get_str(s.get(), NFTNL_SET_TABLE)) != table.name)
				return {};
			if ((bytes_ += sizeof(Set)) > limits_.maxBytes)
				return overBudget("bytes of sets and rules", limits_.maxBytes);
			table.sets.push_back(declaredSet(s.get()));
			return {};
		});
}

Status Reader::readElements(Table &table, Set &set)
{
	netlink::SetPtr filter = netlink::newSet();
	nftnl_set_set_str(filter.get(), NFTNL_SET_TABLE, table.name.c_str());
	nftnl_set_set_str(filter.get(), NFTNL_SET_NAME, set.name.c_str());
	ElementSink sink{&set, &elementBudget_};
	Status s = dump(
		NFT_MSG_GETSETELEM, nfprotoOf(table.family),
		[&](nlmsghdr *nlh) { nftnl_set_elems_nlmsg_build_payload(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			if (!set.unusable().empty())
				return {}; // the rest of the dump is read and dropped
			netlink::SetPtr part = netlink::newSet();
			if (auto p = netlink::parsed(nftnl_set_elems_nlmsg_parse(nlh, part.get()), "set element"); !p)
				return p;
			if (nftnl_set_elem_foreach(part.get(), collectElement, &sink) < 0 || sink.failed)
				return fail("out of memory reading set elements", ENOMEM);
			return {};
		});
	if (!s)
		return s;
	set.finish();
	if ((bytes_ += set.bytes()) > limits_.maxBytes)
		return overBudget("bytes of sets and rules", limits_.maxBytes);
	return {};
}

// The chains a rule jumps to and the sets it looks up (a map of objects and an update's
// set too, for the text).
void referencesOf(const Rule &rule, std::vector<std::string> &reached, std::vector<std::string> &sets)
{
	for (const Statement &st : rule.statements)
		std::visit(Overloaded{
				   [&](const SetVerdict &v) {
					   if (v.verdict.code == VerdictCode::jump || v.verdict.code == VerdictCode::goTo)
						   reached.push_back(v.verdict.chain);
				   },
				   [&](const VerdictMap &m) { sets.push_back(m.set); },
				   [&](const InSet &in) { sets.push_back(in.set); },
				   [&](const Other &o) {
					   if (const auto *d = std::get_if<Dynset>(&o.expression()))
						   sets.push_back(d->set);
					   else if (const auto *r = std::get_if<Objref>(&o.expression()); r && r->set)
						   sets.push_back(*r->set);
				   },
				   [&](const auto &) {},
			   },
			   st);
	for (const Value &v : rule.values)
		if (const auto *m = std::get_if<MapData>(&v.source))
			sets.push_back(m->set);
}

Status Reader::readRules(Table &table, Chain &chain, std::vector<std::string> &reached,
			 std::set<std::string> &looked)
{
	netlink::RulePtr filter = netlink::newRule();
	nftnl_rule_set_str(filter.get(), NFTNL_RULE_TABLE, table.name.c_str());
	nftnl_rule_set_str(filter.get(), NFTNL_RULE_CHAIN, chain.name.c_str());
	std::vector<std::string> sets;
	Status s = dump(
		NFT_MSG_GETRULE, nfprotoOf(table.family),
		[&](nlmsghdr *nlh) { nftnl_rule_nlmsg_build_payload(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			netlink::RulePtr r = netlink::newRule();
			if (auto p = netlink::parsed(nftnl_rule_nlmsg_parse(nlh, r.get()), "rule"); !p)
				return p;
			if (stringOf(nftnl_rule_get_str(r.get(), NFTNL_RULE_TABLE)) != table.name ||
			    stringOf(nftnl_rule_get_str(r.get(), NFTNL_RULE_CHAIN)) != chain.name)
				return {};
			if (++rules_ > limits_.maxRules)
				return overBudget("rules", limits_.maxRules);
			Rule rule = decodeRule(table, nftnl_rule_get_u64(r.get(), NFTNL_RULE_HANDLE),
					       decodeRuleExpressions(r.get(), kMaxExpressionsPerRule + 1),
					       ruleComment(r.get()));
			if ((bytes_ += ruleBytes(rule)) > limits_.maxBytes)
				return overBudget("bytes of sets and rules", limits_.maxBytes);
			referencesOf(rule, reached, sets);
			chain.rules.push_back(std::move(rule));
			return {};
		});
	if (!s)
		return s;
	// The elements of the sets it looks up, once each (not during the rules' dump: one
	// dump at a time on a socket); a verdict map's chains are reached too.
	for (const std::string &name : sets) {
		Set *set = const_cast<Set *>(table.findSet(name));
		if (!set || !looked.insert(name).second)
			continue;
		if (auto el = readElements(table, *set); !el)
			return el;
		for (const Verdict &v : set->verdicts())
			if (v.code == VerdictCode::jump || v.code == VerdictCode::goTo)
				reached.push_back(v.chain);
	}
	return {};
}
// The rules of every chain the table's nat postrouting base chains reach, the sets they
// look up with their elements; other chains and sets are dropped.
Status Reader::readTable(Table &table)
{
	if (auto s = readSets(table); !s)
		return s;
	std::deque<std::string> queue;
	std::set<std::string> queued, looked;
	for (const Chain &c : table.chains)
		if (isNatPostrouting(c) && queued.insert(c.name).second)
			queue.push_back(c.name);
	while (!queue.empty()) {
		const std::string name = queue.front();
		queue.pop_front();
		Chain *chain = const_cast<Chain *>(table.findChain(name));
		if (!chain)
			continue; // the evaluator says "chain X was not read" if a rule jumps there
		std::vector<std::string> reached;
		if (auto s = readRules(table, *chain, reached, looked); !s)
			return s;
		for (std::string &next : reached)
			if (queued.insert(next).second)
				queue.push_back(std::move(next));
	}
	std::erase_if(table.chains, [&queued](const Chain &c) { return !queued.count(c.name); });
	std::erase_if(table.sets, [&looked](const Set &s) { return !looked.count(s.name); });
	return {};
}

// One table, read again while another commit changes it, at most `attempts` times; then,
// or beyond a limit, kept as unreadable with the reason: its nat postrouting base chains
// without their rules, so that the evaluator meets them where they run and says "may",
// and nothing of what it read counts against the other tables' budget.
Result<Table> Reader::readConsistently(const TableKey &key, std::vector<Chain> chains)
{
	std::vector<Chain> baseChains;
	for (const Chain &chain : chains)
		if (isNatPostrouting(chain))
			baseChains.push_back({chain.name, chain.base, {}});
	const auto unreadable = [&](std::string why) {
		return Table{key.family, key.name, baseChains, {}, std::move(why)};
	};
	uint64_t since = start_; // when the table was listed
	for (int attempt = 0; attempt < std::max(limits_.attempts, 1); attempt++) {
		Table table{key.family, key.name, {}, {}};
		const size_t rulesBefore = rules_, bytesBefore = bytes_, elementsBefore = elementBudget_;
		Status s;
		if (attempt == 0) {
			table.chains = std::move(chains); // listed with every table's, since the start
		} else {
			watch_->forget(nfprotoOf(key.family), key.name);
			since = watch_->blind();
			std::map<TableKey, std::vector<Chain>> listed;
			s = listChains({key}, listed);
			table.chains = std::move(listed[key]);
		}
		if (s)
			s = readTable(table);
		if (!s && s.error().errnum != kOverBudget && !raced(s.error()))
			return fail(s.error());
		const bool overBudget = !s && s.error().errnum == kOverBudget;
		const bool again = !overBudget && (!s || watch_->changed(nfprotoOf(key.family), key.name, since));
		if (s && !again)
			return table;
		// What the table held is given back to the budget: it is dropped.
		rules_ = rulesBefore;
		bytes_ = bytesBefore;
		elementBudget_ = elementsBefore;
		if (overBudget)
			return unreadable(s.error().message);
	}
	return unreadable(fmt::format("it kept changing while it was read ({} attempts)", limits_.attempts));
}

Result<NatRuleset> Reader::read()
{
	if (auto s = reopen(); !s)
		return fail(s.error());
	auto generation = netlink::rulesetGeneration(*socket_);
	if (!generation)
		return fail(generation.error());
	auto watch = netlink::ChangeWatch::open();
	if (!watch)
		return fail(watch.error());
	watch_.emplace(std::move(*watch));
	start_ = watch_->blind();
	elementBudget_ = limits_.maxElements;
	std::set<TableKey> keys;
	std::map<TableKey, std::vector<Chain>> chains;
	Status s;
	// The lists are short dumps; one that a commit interrupts is read again.
	for (int attempt = 0; attempt < std::max(limits_.attempts, 1); attempt++) {
		keys.clear();
		chains.clear();
		s = listTables(keys);
		if (s)
			s = listChains(keys, chains);
		if (s || !raced(s.error()))
			break;
	}
	if (!s)
		return fail(s.error().withContext("listing the tables and chains: "));
	NatRuleset ruleset;
	ruleset.generation = *generation;
	for (auto &[key, list] : chains) {
		if (std::none_of(list.begin(), list.end(), isNatPostrouting) ||
		    (key.family == TableFamily::inet && key.name == limits_.skipInetTable))
			continue;
		auto table = readConsistently(key, std::move(list));
		if (!table)
			return fail(table.error().withContext(
				fmt::format("reading table {} {}: ", tableFamilyName(key.family), key.name)));
		if (!table->unreadable.empty())
			table->unreadable = fmt::format("table {} {} could not be read: {}",
							tableFamilyName(key.family), key.name, table->unreadable);
		ruleset.tables.push_back(std::move(*table));
	}
	return ruleset;
}

} // namespace

std::string ruleComment(const nftnl_rule *rule)
{
	uint32_t len = 0;
	const void *data = nftnl_rule_get_data(rule, NFTNL_RULE_USERDATA, &len);
	return netlink::userdataComment(data, len, NFTNL_UDATA_RULE_COMMENT);
}

Result<NatRuleset> readNatRuleset(const NatReadLimits &limits)
{
	auto ruleset = Reader(limits).read();
	if (!ruleset)
		return fail(netlink::explainRefusal(ruleset.error()));
	return ruleset;
}

Result<uint32_t> readRulesetGeneration()
{
	auto socket = netlink::Socket::open();
	if (!socket)
		return fail(netlink::explainRefusal(socket.error()));
	auto generation = netlink::rulesetGeneration(*socket);
	if (!generation)
		return fail(netlink::explainRefusal(generation.error()));
	return generation;
}

} // namespace ipmasq::nft
