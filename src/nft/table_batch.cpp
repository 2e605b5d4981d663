// SPDX-License-Identifier: Apache-2.0
// The transactions on the agent's table: its objects serialized into one batch.
#include "ip-masq-agent/nft/table_batch.h"

#include <algorithm>

#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netlink.h>

#include <fmt/format.h>
#include <libmnl/libmnl.h>
#include <libnftnl/object.h>
#include <libnftnl/table.h>

namespace ipmasq::netlink {

Status addEncodedTable(Batch &batch, const EncodedTable &table, uint16_t tableFlags)
{
	if (auto s = batch.addTable(NFT_MSG_NEWTABLE, tableFlags, table.table.get(), table.description); !s)
		return s;
	return addTableContents(batch, table, {});
}

Status addTableContents(Batch &batch, const EncodedTable &table, const std::vector<std::string> &keptObjects,
			const std::vector<std::string> &keptSets)
{
	const auto addSetWithElements = [&batch](const EncodedSet &set) -> Status {
		if (auto s = batch.addSet(set.set.get(), set.description); !s)
			return s;
		// One chunk's libnftnl objects at a time: serialized, then freed.
		for (const ElementChunk &chunk : set.elements)
			if (auto s = batch.addSetElements(chunk.build().get(), chunk.description); !s)
				return s;
		return {};
	};

	// Chains first, so that a jump can name a chain declared later in the model.
	for (const EncodedChain &chain : table.chains)
		if (auto s = batch.addChain(chain.chain.get(), chain.description, &chain); !s)
			return s;
	const auto kept = [](const std::vector<std::string> &names, const char *name) {
		return name && std::find(names.begin(), names.end(), name) != names.end();
	};
	for (const EncodedSet &set : table.sets) {
		if (kept(keptSets, nftnl_set_get_str(set.set.get(), NFTNL_SET_NAME)))
			continue;
		if (auto s = addSetWithElements(set); !s)
			return s;
	}
	// Before the rules that name them.
	for (const EncodedObject &object : table.objects) {
		if (kept(keptObjects, nftnl_obj_get_str(object.object.get(), NFTNL_OBJ_NAME)))
			continue;
		if (auto s = batch.addObject(object.object.get(), object.description); !s)
			return s;
	}
	for (const EncodedChain &chain : table.chains) {
		for (const EncodedRule &rule : chain.rules) {
			for (const EncodedSet &set : rule.anonymousSets)
				if (auto s = addSetWithElements(set); !s)
					return s;
			if (auto s = batch.addRule(rule.rule.get(), rule.description, &rule); !s)
				return s;
		}
	}
	return {};
}

Result<Batch> replaceTableBatch(const EncodedTable &table, uint32_t firstSeq)
{
	Batch batch(firstSeq);
	batch.begin();
	const std::string name = nftnl_table_get_str(table.table.get(), NFTNL_TABLE_NAME);
	// "table inet NAME" then "delete table inet NAME": the delete cannot fail, and the
	// whole replacement is one transaction, so no packet sees a missing table.
	TablePtr handle = tableHandle(name, true);
	// The kernel takes the echo request for the commit's NEWGEN from the first message
	// after BATCH_BEGIN (nfnetlink hands the commit the batch past its BEGIN), so the
	// flag goes here too; without it the agent never learns its commit's generation.
	if (auto s = batch.addTable(NFT_MSG_NEWTABLE, NLM_F_ECHO, handle.get(),
				    fmt::format("{} (created if missing)", table.description));
	    !s)
		return fail(s.error());
	handle = tableHandle(name, false);
	const std::string deleting = fmt::format("{} (deleting the previous one)", table.description);
	if (auto s = batch.addTable(NFT_MSG_DELTABLE, 0, handle.get(), deleting); !s)
		return fail(s.error());
	if (auto s = addEncodedTable(batch, table); !s)
		return fail(s.error());
	batch.end();
	return batch;
}

namespace {

// Every object of table `name` that the plan does not keep, deleted by name: the rules
// first (a DELRULE that names only the table deletes every rule of every chain, "flush
// table": what referred to the chains, sets and objects below lets go of them).
Status addDeletions(Batch &batch, const std::string &name, const ReplacementPlan &plan)
{
	RulePtr rules = newRule();
	nftnl_rule_set_u32(rules.get(), NFTNL_RULE_FAMILY, NFPROTO_INET);
	nftnl_rule_set_str(rules.get(), NFTNL_RULE_TABLE, name.c_str());
	const auto deletion = [&](uint16_t type, std::string what, const auto &payload) -> Status {
		return batch.addDeletion(type, std::move(what), payload);
	};
	if (auto s = deletion(NFT_MSG_DELRULE, fmt::format("the rules of table {} (flushing them)", name),
			      [&](nlmsghdr *nlh) { nftnl_rule_nlmsg_build_payload(nlh, rules.get()); });
	    !s)
		return s;
	for (const std::string &chain : plan.deleteChains) {
		ChainPtr object = newChain();
		nftnl_chain_set_str(object.get(), NFTNL_CHAIN_TABLE, name.c_str());
		nftnl_chain_set_str(object.get(), NFTNL_CHAIN_NAME, chain.c_str());
		if (auto s = deletion(NFT_MSG_DELCHAIN, fmt::format("chain {} (deleting the previous one)", chain),
				      [&](nlmsghdr *nlh) { nftnl_chain_nlmsg_build_payload(nlh, object.get()); });
		    !s)
			return s;
	}
	for (const std::string &set : plan.deleteSets) {
		SetPtr object = newSet();
		nftnl_set_set_str(object.get(), NFTNL_SET_TABLE, name.c_str());
		nftnl_set_set_str(object.get(), NFTNL_SET_NAME, set.c_str());
		if (auto s = deletion(NFT_MSG_DELSET, fmt::format("set {} (deleting the previous one)", set),
				      [&](nlmsghdr *nlh) { nftnl_set_nlmsg_build_payload(nlh, object.get()); });
		    !s)
			return s;
	}
	for (const auto &[object, type] : plan.deleteObjects) {
		ObjPtr handleOf = newObj();
		nftnl_obj_set_str(handleOf.get(), NFTNL_OBJ_TABLE, name.c_str());
		nftnl_obj_set_str(handleOf.get(), NFTNL_OBJ_NAME, object.c_str());
		nftnl_obj_set_u32(handleOf.get(), NFTNL_OBJ_TYPE, type);
		if (auto s = deletion(NFT_MSG_DELOBJ, fmt::format("object {} (deleting the previous one)", object),
				      [&](nlmsghdr *nlh) { nftnl_obj_nlmsg_build_payload(nlh, handleOf.get()); });
		    !s)
			return s;
	}
	for (const std::string &flowtable : plan.deleteFlowtables) {
		FlowtablePtr object = newFlowtable();
		nftnl_flowtable_set_str(object.get(), NFTNL_FLOWTABLE_TABLE, name.c_str());
		nftnl_flowtable_set_str(object.get(), NFTNL_FLOWTABLE_NAME, flowtable.c_str());
		if (auto s = deletion(NFT_MSG_DELFLOWTABLE,
				      fmt::format("flowtable {} (deleting it)", flowtable),
				      [&](nlmsghdr *nlh) { nftnl_flowtable_nlmsg_build_payload(nlh, object.get()); });
		    !s)
			return s;
	}
	return {};
}

} // namespace

Result<Batch> replaceKeepingCountersBatch(const EncodedTable &table, const ReplacementPlan &plan,
					  uint32_t firstSeq)
{
	Batch batch(firstSeq);
	batch.begin(plan.generation);
	const std::string name = nftnl_table_get_str(table.table.get(), NFTNL_TABLE_NAME);
	// The table exists (the plan was read from it, and the generation guard holds): a
	// NEWTABLE without flags changes nothing, and carries the echo request for the
	// commit's generation (see replaceTableBatch()).
	TablePtr handle = tableHandle(name, false);
	if (auto s = batch.addTable(NFT_MSG_NEWTABLE, NLM_F_ECHO, handle.get(),
				    fmt::format("{} (kept, with its counters)", table.description));
	    !s)
		return fail(s.error());
	if (auto s = addDeletions(batch, name, plan); !s)
		return fail(s.error());
	if (auto s = addTableContents(batch, table, plan.keptCounters, plan.keptSets); !s)
		return fail(s.error());
	batch.end();
	return batch;
}

Result<Batch> createTableBatch(const EncodedTable &table, uint32_t firstSeq)
{
	Batch batch(firstSeq);
	batch.begin();
	// NLM_F_ECHO on the first message for the commit's generation, as in
	// replaceTableBatch(); NLM_F_EXCL so that a table created meanwhile is an error.
	if (auto s = addEncodedTable(batch, table, NLM_F_EXCL | NLM_F_ECHO); !s)
		return fail(s.error());
	batch.end();
	return batch;
}

Result<Batch> deleteTableBatch(const std::string &table, uint32_t firstSeq)
{
	Batch batch(firstSeq);
	batch.begin();
	TablePtr handle = tableHandle(table, false);
	if (auto s = batch.addTable(NFT_MSG_DELTABLE, 0, handle.get(),
				    fmt::format("table {} (deleting it)", table));
	    !s)
		return fail(s.error());
	batch.end();
	return batch;
}

Result<Batch> updateElementsBatch(const std::string &table, const EncodedElementChanges &changes,
				  uint32_t generation, uint32_t firstSeq)
{
	Batch batch(firstSeq);
	batch.begin(generation);
	// Without flags, NEWTABLE of an existing table changes nothing; it is here because
	// the kernel takes the echo request for the commit's NEWGEN from the first message
	// (see replaceTableBatch). An element message would echo every element instead.
	TablePtr handle = tableHandle(table, false);
	if (auto s = batch.addTable(NFT_MSG_NEWTABLE, NLM_F_ECHO, handle.get(),
				    fmt::format("table {} (unchanged)", table));
	    !s)
		return fail(s.error());
	// Deletions first: a range that changes shape deletes elements it then adds again.
	for (const ElementChunk &chunk : changes.removals)
		if (auto s = batch.changeSetElements(NFT_MSG_DELSETELEM, 0, chunk.build().get(),
						     chunk.description);
		    !s)
			return fail(s.error());
	for (const ElementChunk &chunk : changes.additions)
		if (auto s = batch.changeSetElements(NFT_MSG_NEWSETELEM, NLM_F_CREATE,
						     chunk.build().get(), chunk.description);
		    !s)
			return fail(s.error());
	batch.end();
	return batch;
}

} // namespace ipmasq::netlink
