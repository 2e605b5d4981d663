// SPDX-License-Identifier: Apache-2.0
// One nf_tables transaction: netlink messages between BATCH_BEGIN and BATCH_END, each
// sequence number tied to the encoded object it carries and a description of it.
//
// The kernel applies a batch all or nothing and reports errors by sequence number;
// describe() turns such a number back into "set nomasq-v4", so that an error reads as
// "set nomasq-v4: File exists" rather than a bare EEXIST, and sourceOf() into the object
// itself, for decisions (two objects may share a description, never an address).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <sys/uio.h>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/handles.h"

struct nlattr;
struct nlmsghdr;

namespace ipmasq::netlink {

class Batch
{
public:
	// Messages are numbered consecutively from `firstSeq`.
	explicit Batch(uint32_t firstSeq);

	Batch(Batch &&) = default;
	Batch &operator=(Batch &&) = default;

	// BATCH_BEGIN, asking the kernel to unicast the commit's NEWGEN message back to us,
	// which carries the new ruleset generation id. With `generation`, the one the batch
	// was computed against (NFNL_BATCH_GENID, as nft sends it): if anyone committed since,
	// the kernel refuses the whole batch with ERESTART, answering this message only.
	void begin(std::optional<uint32_t> generation = std::nullopt);
	// Changes the generation a guarded batch carries, so that the batch can be sent again
	// as it is once the caller knows nothing it depends on changed. False (and nothing
	// changed) for a batch that is not guarded.
	bool setGuard(uint32_t generation);
	// BATCH_END: without it the kernel checks every message and then aborts, which is
	// how `nft -c` validates a ruleset without changing anything.
	void end();

	// Each of these appends one message that asks for an acknowledgement. `source` is
	// the encoded object (EncodedChain, EncodedRule, ...) the message was built from, if
	// any: sourceOf() returns it for the message's sequence number.
	Status addTable(uint16_t type, uint16_t flags, const nftnl_table *table,
			std::string description);
	Status addChain(const nftnl_chain *chain, std::string description,
			const void *source = nullptr);
	Status addSet(const nftnl_set *set, std::string description);
	Status addObject(const nftnl_obj *object, std::string description);
	Status addSetElements(const nftnl_set *elements, std::string description);
	Status addRule(const nftnl_rule *rule, std::string description,
		       const void *source = nullptr);
	// NEWSETELEM or DELSETELEM of elements of an existing set, with extra `flags`.
	Status changeSetElements(uint16_t type, uint16_t flags, const nftnl_set *elements,
				 std::string description);

	// A DELRULE, DELCHAIN, DELSET, DELOBJ or DELFLOWTABLE whose payload `payload` writes.
	Status addDeletion(uint16_t type, std::string description,
			   const std::function<void(nlmsghdr *)> &payload);

	uint32_t firstSequence() const { return firstSeq_; }
	uint32_t nextSequence() const
	{
		return firstSeq_ + static_cast<uint32_t>(messages_.size());
	}
	// How many messages ask for an acknowledgement (all but BEGIN and END).
	size_t acknowledgedMessages() const { return acknowledged_; }
	size_t bytes() const;
	bool commits() const { return ended_; }

	// The model object a message carries, or an empty string for a foreign number.
	std::string describe(uint32_t seq) const;
	// The encoded object a message was built from, or null (none given, or a foreign
	// number).
	const void *sourceOf(uint32_t seq) const;

	// The batch's pages, ready for sendmsg(): the kernel must get it in one datagram.
	std::vector<iovec> iovecs() const;

private:
	struct Message {
		std::string description;
		const void *source = nullptr;
	};
	const Message *messageAt(uint32_t seq) const;
	nlmsghdr *startMessage(uint16_t type, uint16_t flags, std::string description,
			       const void *source = nullptr);
	Status finishMessage(nlmsghdr *nlh);

	BatchPtr batch_;
	nlattr *guard_ = nullptr; // NFNL_BATCH_GENID of a guarded batch, in its first page
	uint32_t firstSeq_;
	std::vector<Message> messages_; // by sequence number, from firstSeq_
	size_t acknowledged_ = 0;
	bool ended_ = false;
};

} // namespace ipmasq::netlink
