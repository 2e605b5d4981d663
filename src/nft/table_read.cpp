// SPDX-License-Identifier: Apache-2.0
// The one reader of the agent's table: its dumps, their consistency, the last read kept.
#include "ip-masq-agent/nft/table_read.h"

#include <cerrno>
#include <chrono>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netlink.h>

#include <fmt/format.h>
#include <libmnl/libmnl.h>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/netlink/change_watch.h"
#include "ip-masq-agent/netlink/nftnl_parse.h"

namespace ipmasq::netlink {

namespace {

// How often a table is read again when commits to it (or lost notifications) spoiled the
// read, before the answer is "unsettled" (the caller then writes its table, or looks again
// later).
constexpr int kReadAttempts = 3;
// How long a read waits for the notifications of the commits made while it read: the kernel
// sends them as it commits, so this only ends a wait for a kernel that is stuck.
constexpr std::chrono::milliseconds kNotificationWait{1000};

// One dump of the objects of one kind (chains, sets, objects, rules, flowtables) of inet
// `table`, with the libnftnl functions of that kind, appended to `out` in the kernel's
// order. The kernel filters some dumps by the table attribute but dumps the chains of
// every table of the family, so only the table's own objects are kept.
template<typename Ptr, typename SetStr, typename Build, typename Parse, typename GetStr>
Status dumpTableObjects(Socket &socket, uint8_t message, const std::string &table,
			const char *what, Ptr (*make)(), SetStr setStr, uint16_t tableAttr,
			Build build, Parse parse, GetStr getStr, std::vector<Ptr> &out)
{
	Ptr filter = make();
	setStr(filter.get(), tableAttr, table.c_str());
	return socket.query(
		message, NFPROTO_INET, NLM_F_DUMP,
		[&](nlmsghdr *nlh) { build(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			Ptr object = make();
			if (auto p = parsed(parse(nlh, object.get()), what); !p)
				return p;
			const char *owner = getStr(object.get(), tableAttr);
			if (owner && table == owner)
				out.push_back(std::move(object));
			return {};
		});
}

Status dumpChains(Socket &socket, const std::string &table, std::vector<ChainPtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETCHAIN, table, "chain", newChain,
				nftnl_chain_set_str, NFTNL_CHAIN_TABLE, nftnl_chain_nlmsg_build_payload,
				nftnl_chain_nlmsg_parse, nftnl_chain_get_str, out);
}

Status dumpSets(Socket &socket, const std::string &table, std::vector<SetPtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETSET, table, "set", newSet, nftnl_set_set_str,
				NFTNL_SET_TABLE, nftnl_set_nlmsg_build_payload, nftnl_set_nlmsg_parse,
				nftnl_set_get_str, out);
}

Status dumpObjects(Socket &socket, const std::string &table, std::vector<ObjPtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETOBJ, table, "object", newObj, nftnl_obj_set_str,
				NFTNL_OBJ_TABLE, nftnl_obj_nlmsg_build_payload, nftnl_obj_nlmsg_parse,
				nftnl_obj_get_str, out);
}

Status dumpRules(Socket &socket, const std::string &table, std::vector<RulePtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETRULE, table, "rule", newRule, nftnl_rule_set_str,
				NFTNL_RULE_TABLE, nftnl_rule_nlmsg_build_payload, nftnl_rule_nlmsg_parse,
				nftnl_rule_get_str, out);
}

Status dumpFlowtables(Socket &socket, const std::string &table, std::vector<FlowtablePtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETFLOWTABLE, table, "flowtable", newFlowtable,
				nftnl_flowtable_set_str, NFTNL_FLOWTABLE_TABLE,
				nftnl_flowtable_nlmsg_build_payload, nftnl_flowtable_nlmsg_parse,
				nftnl_flowtable_get_str, out);
}

} // namespace

Status dumpSetReplies(Socket &socket, const std::string &table, const std::string &set,
		      const ReplyHandler &onReply)
{
	SetPtr filter = newSet();
	nftnl_set_set_str(filter.get(), NFTNL_SET_TABLE, table.c_str());
	nftnl_set_set_str(filter.get(), NFTNL_SET_NAME, set.c_str());
	return socket.query(
		NFT_MSG_GETSETELEM, NFPROTO_INET, NLM_F_DUMP,
		[&](nlmsghdr *nlh) { nftnl_set_elems_nlmsg_build_payload(nlh, filter.get()); }, onReply);
}

Status dumpSetElements(Socket &socket, const std::string &table, const std::string &set,
		       const std::function<Status(const nftnl_set *)> &onPart)
{
	return dumpSetReplies(socket, table, set, [&](const nlmsghdr *nlh) -> Status {
		SetPtr part = newSet();
		if (auto p = parsed(nftnl_set_elems_nlmsg_parse(nlh, part.get()), "set element"); !p)
			return p;
		return onPart(part.get());
	});
}

Result<size_t> countSetElements(Socket &socket, const std::string &table, const std::string &set)
{
	size_t count = 0;
	const Status read = dumpSetReplies(socket, table, set, [&count](const nlmsghdr *nlh) -> Status {
		const nlattr *attrs[NFTA_SET_ELEM_LIST_MAX + 1] = {};
		collectAttributes(nlh, sizeof(nfgenmsg), attrs, NFTA_SET_ELEM_LIST_MAX);
		const nlattr *list = attrs[NFTA_SET_ELEM_LIST_ELEMENTS];
		if (!list)
			return {};
		// The nest's own attributes, one per element: a walk bounded by the reply.
		const auto *element = static_cast<const nlattr *>(mnl_attr_get_payload(list));
		int left = static_cast<int>(mnl_attr_get_payload_len(list));
		while (mnl_attr_ok(element, left)) {
			if (mnl_attr_get_type(element) == NFTA_LIST_ELEM)
				count++;
			left -= static_cast<int>(NLA_ALIGN(element->nla_len));
			element = mnl_attr_next(element);
		}
		return {};
	});
	if (!read)
		return fail(read.error());
	return count;
}

Result<TablePtr> getTable(Socket &socket, const std::string &table)
{
	TablePtr request = tableHandle(table, false);
	TablePtr reply;
	const Status found = socket.query(
		NFT_MSG_GETTABLE, NFPROTO_INET, 0,
		[&](nlmsghdr *nlh) { nftnl_table_nlmsg_build_payload(nlh, request.get()); },
		[&](const nlmsghdr *nlh) {
			reply = newTable();
			return parsed(nftnl_table_nlmsg_parse(nlh, reply.get()), "table");
		});
	if (!found)
		return fail(found.error());
	if (!reply)
		return fail("the kernel sent no table", EPROTO);
	return reply;
}

namespace {

// One pass of dumps over inet `table`; null when it does not exist. EINTR: a dump that
// another table's commit interrupted; ENOENT: the table or a set gone between two dumps.
Result<std::shared_ptr<TableSnapshot>> readOnce(Socket &socket, const std::string &table, ReadDepth depth)
{
	const auto context = [&table](const std::string &what) {
		return fmt::format("reading the {} of table inet {}: ", what, table);
	};
	auto snapshot = std::make_shared<TableSnapshot>();
	auto found = getTable(socket, table);
	if (!found) {
		if (found.error().errnum == ENOENT)
			return std::shared_ptr<TableSnapshot>();
		return fail(found.error().withContext(context("table")));
	}
	snapshot->table = std::move(*found);
	// The kernel counts its place in a chain, object or flowtable dump among every inet
	// table's, so a commit to another table could make one skip or repeat one of ours:
	// those fail when interrupted. Sets, their elements and rules are counted among this
	// table's own, so only a change to it can spoil them, which the change watch tells.
	struct Tolerance {
		Socket &socket;
		~Tolerance() { socket.tolerateInterruptedDumps(false); }
	} strictAfterwards{socket};
	socket.tolerateInterruptedDumps(false);
	if (auto s = dumpChains(socket, table, snapshot->chains); !s)
		return fail(s.error().withContext(context("chains")));
	if (auto s = dumpObjects(socket, table, snapshot->objects); !s)
		return fail(s.error().withContext(context("objects")));
	if (auto s = dumpFlowtables(socket, table, snapshot->flowtables); !s)
		return fail(s.error().withContext(context("flowtables")));
	socket.tolerateInterruptedDumps(true);
	if (auto s = dumpSets(socket, table, snapshot->sets); !s)
		return fail(s.error().withContext(context("sets")));
	snapshot->whole = depth == ReadDepth::whole;
	if (!snapshot->whole)
		return snapshot;
	for (const SetPtr &set : snapshot->sets) {
		if (isDynamicSet(set.get()))
			continue; // traffic's: no use of the read wants it (TableSnapshot)
		const std::string name = stringOf(nftnl_set_get_str(set.get(), NFTNL_SET_NAME));
		ElementRecords &records = snapshot->elements[name];
		const Status s = dumpSetElements(socket, table, name, [&records](const nftnl_set *part) -> Status {
			records.add(part);
			return {};
		});
		if (!s)
			return fail(s.error().withContext(context("elements of set " + name)));
		records.finish();
	}
	if (auto s = dumpRules(socket, table, snapshot->rules); !s)
		return fail(s.error().withContext(context("rules")));
	return snapshot;
}

} // namespace

Result<TableRead> TableReader::read(const std::string &table, ReadDepth depth)
{
	if (last_ && last_->table == table && (last_->depth == ReadDepth::whole || depth == last_->depth)) {
		auto now = rulesetGeneration(socket_);
		if (!now)
			return fail(now.error());
		if (*now == last_->read.generation) {
			TableRead kept = last_->read;
			kept.reused = true;
			return kept;
		}
	}
	last_.reset(); // whatever happens next, it no longer holds
	auto read = readConsistently(table, depth);
	if (!read || read->unsettled)
		return read;
	const nftnl_table *held = read->snapshot ? read->snapshot->table.get() : nullptr;
	if (!held || !nftnl_table_is_set(held, NFTNL_TABLE_FLAGS) ||
	    !(nftnl_table_get_u32(held, NFTNL_TABLE_FLAGS) & NFT_TABLE_F_OWNER))
		last_ = Kept{table, depth, *read};
	return read;
}

Result<TableRead> TableReader::readConsistently(const std::string &table, ReadDepth depth)
{
	// Subscribed before the first generation is read: every commit after it is seen.
	auto watch = ChangeWatch::open();
	if (!watch)
		return fail(watch.error());
	// When the generation moved during the dumps, the notifications say whether any of
	// those commits touched the table: only then, or when they were lost, is it read again.
	for (int attempt = 0; attempt < kReadAttempts; attempt++) {
		watch->forget(NFPROTO_INET, table);
		const uint64_t blindAt = watch->blind();
		auto before = rulesetGeneration(socket_);
		if (!before)
			return fail(before.error());
		if (onEachRead_)
			onEachRead_();
		auto snapshot = readOnce(socket_, table, depth);
		const bool interrupted =
			!snapshot && (snapshot.error().errnum == EINTR || snapshot.error().errnum == ENOENT);
		if (!snapshot && !interrupted)
			return fail(snapshot.error());
		auto after = rulesetGeneration(socket_);
		if (!after)
			return fail(after.error());
		if (interrupted)
			continue;
		if (*after != *before) {
			auto seen = watch->reached(*after, kNotificationWait);
			if (!seen)
				return fail(seen.error());
			if (!*seen || watch->changed(NFPROTO_INET, table, blindAt))
				continue;
			log::debug("table inet {} read at generation {}: the commits since generation {} "
				   "were other tables'", table, *after, *before);
		}
		if (*snapshot)
			(*snapshot)->generation = *after;
		return TableRead{false, false, *after, std::move(*snapshot)};
	}
	log::debug("table inet {} could not be read consistently: commits to it interrupted "
		   "{} reads in a row", table, kReadAttempts);
	return TableRead{true, false, 0, nullptr};
}

Result<std::vector<CounterValue>> TableReader::readCounters(const std::string &table)
{
	std::vector<ObjPtr> objects;
	const Status read = dumpObjects(socket_, table, objects);
	if (!read) {
		if (read.error().errnum == ENOENT)
			return std::vector<CounterValue>();
		return fail(read.error().withContext(
			fmt::format("reading the counters of table inet {}: ", table)));
	}
	return countersOf(objects);
}

} // namespace ipmasq::netlink
