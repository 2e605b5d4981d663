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

Status Batch::addDeletion(uint16_t type, std::string description, const std::function<void(nlmsghdr *)> &payload)
{
	nlmsghdr *nlh = startMessage(type, 0, std::move(description));
	payload(nlh);
	return finishMessage(nlh);
}

} // namespace ipmasq::netlink
