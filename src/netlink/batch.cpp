// SPDX-License-Identifier: Apache-2.0
// Serializing libnftnl objects into one nf_tables batch with per-message descriptions.
#include "ip-masq-agent/netlink/batch.h"

#include <algorithm>

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netlink.h>

#include <fmt/format.h>
#include <libmnl/libmnl.h>
#include <libnftnl/common.h>

namespace ipmasq::netlink {

namespace {

// Pages of the batch buffer, as nft sizes them. A message may start anywhere in a
// page and run into the overrun area, so the overrun bounds one message's size.
constexpr uint32_t kPageSize = 128 * 1024;
constexpr uint32_t kMaxMessageSize = 64 * 1024 + 4096;

} // namespace

Batch::Batch(uint32_t firstSeq)
	: batch_(nftnl_batch_alloc(kPageSize, kMaxMessageSize)), firstSeq_(firstSeq)
{
	if (!batch_)
		throw std::bad_alloc();
}

nlmsghdr *Batch::startMessage(uint16_t type, uint16_t flags, std::string description,
			       const void *source)
{
	const uint32_t seq = nextSequence();
	messages_.push_back({std::move(description), source});
	auto *buf = static_cast<char *>(nftnl_batch_buffer(batch_.get()));
	acknowledged_++;
	return nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, flags | NLM_F_ACK, seq);
}

Status Batch::finishMessage(nlmsghdr *nlh)
{
	// Everything we encode is bounded far below this (names, comments, element
	// chunks); a message past it would already have overrun the page.
	if (nlh->nlmsg_len > kMaxMessageSize)
		return fail(fmt::format("{}: netlink message of {} bytes is too large (internal "
					"error)", describe(nlh->nlmsg_seq), nlh->nlmsg_len));
	if (nftnl_batch_update(batch_.get()) < 0)
		throw std::bad_alloc();
	return {};
}

void Batch::begin(std::optional<uint32_t> generation)
{
	messages_.push_back({"transaction start"});
	nlmsghdr *nlh = nftnl_batch_begin(static_cast<char *>(nftnl_batch_buffer(batch_.get())),
					  nextSequence() - 1);
	nlh->nlmsg_flags |= NLM_F_ECHO;
	// The attribute goes at the message's tail, and stays there: the batch's pages are
	// never moved, only added.
	if (generation) {
		guard_ = static_cast<nlattr *>(mnl_nlmsg_get_payload_tail(nlh));
		mnl_attr_put_u32(nlh, NFNL_BATCH_GENID, htonl(*generation));
	}
	if (nftnl_batch_update(batch_.get()) < 0)
		throw std::bad_alloc();
}

bool Batch::setGuard(uint32_t generation)
{
	if (guard_ == nullptr)
		return false;
	*static_cast<uint32_t *>(mnl_attr_get_payload(guard_)) = htonl(generation);
	return true;
}

void Batch::end()
{
	messages_.push_back({"transaction commit"});
	nftnl_batch_end(static_cast<char *>(nftnl_batch_buffer(batch_.get())), nextSequence() - 1);
	if (nftnl_batch_update(batch_.get()) < 0)
		throw std::bad_alloc();
	ended_ = true;
}

Status Batch::addTable(uint16_t type, uint16_t flags, const nftnl_table *table,
		       std::string description)
{
	nlmsghdr *nlh = startMessage(type, flags, std::move(description));
	nftnl_table_nlmsg_build_payload(nlh, table);
	return finishMessage(nlh);
}

Status Batch::addChain(const nftnl_chain *chain, std::string description, const void *source)
{
	nlmsghdr *nlh = startMessage(NFT_MSG_NEWCHAIN, NLM_F_CREATE, std::move(description), source);
	nftnl_chain_nlmsg_build_payload(nlh, chain);
	return finishMessage(nlh);
}

Status Batch::addSet(const nftnl_set *set, std::string description)
{
	nlmsghdr *nlh = startMessage(NFT_MSG_NEWSET, NLM_F_CREATE, std::move(description));
	// libnftnl takes a non-const set but only reads it.
	nftnl_set_nlmsg_build_payload(nlh, const_cast<nftnl_set *>(set));
	return finishMessage(nlh);
}

Status Batch::addObject(const nftnl_obj *object, std::string description)
{
	nlmsghdr *nlh = startMessage(NFT_MSG_NEWOBJ, NLM_F_CREATE, std::move(description));
	nftnl_obj_nlmsg_build_payload(nlh, object);
	return finishMessage(nlh);
}

Status Batch::addSetElements(const nftnl_set *elements, std::string description)
{
	nlmsghdr *nlh = startMessage(NFT_MSG_NEWSETELEM, NLM_F_CREATE, std::move(description));
	nftnl_set_elems_nlmsg_build_payload(nlh, const_cast<nftnl_set *>(elements));
	return finishMessage(nlh);
}

Status Batch::addRule(const nftnl_rule *rule, std::string description, const void *source)
{
	// APPEND: rules keep the order of the model.
	nlmsghdr *nlh = startMessage(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND,
				     std::move(description), source);
	nftnl_rule_nlmsg_build_payload(nlh, const_cast<nftnl_rule *>(rule));
	return finishMessage(nlh);
}

Status Batch::changeSetElements(uint16_t type, uint16_t flags, const nftnl_set *elements,
				std::string description)
{
	nlmsghdr *nlh = startMessage(type, flags, std::move(description));
	nftnl_set_elems_nlmsg_build_payload(nlh, const_cast<nftnl_set *>(elements));
	return finishMessage(nlh);
}

Status Batch::addEncodedTable(const EncodedTable &table, uint16_t tableFlags)
{
	if (auto s = addTable(NFT_MSG_NEWTABLE, tableFlags, table.table.get(), table.description); !s)
		return s;
	return addTableContents(table, {});
}

Status Batch::addTableContents(const EncodedTable &table, const std::vector<std::string> &keptObjects)
{
	const auto addSetWithElements = [this](const EncodedSet &set) -> Status {
		if (auto s = addSet(set.set.get(), set.description); !s)
			return s;
		// One chunk's libnftnl objects at a time: serialized, then freed.
		for (const ElementChunk &chunk : set.elements)
			if (auto s = addSetElements(chunk.build().get(), chunk.description); !s)
				return s;
		return {};
	};

	// Chains first, so that a jump can name a chain declared later in the model.
	for (const EncodedChain &chain : table.chains)
		if (auto s = addChain(chain.chain.get(), chain.description, &chain); !s)
			return s;
	for (const EncodedSet &set : table.sets)
		if (auto s = addSetWithElements(set); !s)
			return s;
	// Before the rules that name them.
	for (const EncodedObject &object : table.objects) {
		const char *name = nftnl_obj_get_str(object.object.get(), NFTNL_OBJ_NAME);
		if (name && std::find(keptObjects.begin(), keptObjects.end(), name) != keptObjects.end())
			continue;
		if (auto s = addObject(object.object.get(), object.description); !s)
			return s;
	}
	for (const EncodedChain &chain : table.chains) {
		for (const EncodedRule &rule : chain.rules) {
			for (const EncodedSet &set : rule.anonymousSets)
				if (auto s = addSetWithElements(set); !s)
					return s;
			if (auto s = addRule(rule.rule.get(), rule.description, &rule); !s)
				return s;
		}
	}
	return {};
}

size_t Batch::bytes() const
{
	size_t total = 0;
	for (const iovec &iov : iovecs())
		total += iov.iov_len;
	return total;
}

const Batch::Message *Batch::messageAt(uint32_t seq) const
{
	const uint32_t index = seq - firstSeq_; // wraps for numbers before the batch
	return index < messages_.size() ? &messages_[index] : nullptr;
}

std::string Batch::describe(uint32_t seq) const
{
	const Message *message = messageAt(seq);
	return message ? message->description : std::string();
}

const void *Batch::sourceOf(uint32_t seq) const
{
	const Message *message = messageAt(seq);
	return message ? message->source : nullptr;
}

std::vector<iovec> Batch::iovecs() const
{
	const int count = nftnl_batch_iovec_len(batch_.get());
	std::vector<iovec> out(count > 0 ? count : 0);
	if (!out.empty())
		nftnl_batch_iovec(batch_.get(), out.data(), out.size());
	return out;
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
	if (auto s = batch.addEncodedTable(table); !s)
		return fail(s.error());
	batch.end();
	return batch;
}

Status Batch::addDeletion(uint16_t type, std::string description, const std::function<void(nlmsghdr *)> &payload)
{
	nlmsghdr *nlh = startMessage(type, 0, std::move(description));
	payload(nlh);
	return finishMessage(nlh);
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
	if (auto s = batch.addTableContents(table, plan.keptCounters); !s)
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
	if (auto s = batch.addEncodedTable(table, NLM_F_EXCL | NLM_F_ECHO); !s)
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
