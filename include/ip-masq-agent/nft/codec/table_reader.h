// SPDX-License-Identifier: Apache-2.0
// The node's NAT into codec/model.h, through one decoder: other tables read from the kernel
// (the tables of families ip, ip6 and inet that have a nat postrouting base chain, the
// chains those reach, the sets they look up), and the agent's own table linearized from
// the desired ruleset by the backend's encoder and read back from those objects, as nft
// lists its own bytecode. Read-only: the reader sends dump requests and nothing else.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/handles.h"
#include "ip-masq-agent/nft/codec/model.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq::nft {

// What one read may cost. A table beyond a bound is kept with its nat postrouting base
// chains only (no rules, no sets) and marked unreadable: the evaluator meets it where it
// runs and says "may" for every path through it. What it had read is dropped and given
// back to the budget, so the other tables are read as usual. Memory is bounded by
// maxBytes whatever the kernel holds.
struct NatReadLimits {
	size_t maxTables = 1000; // of any family, as the kernel lists them (beyond: E2BIG)
	size_t maxChains = 100000; // of the families read, in every table (beyond: E2BIG)
	size_t maxRules = 50000; // in the chains read
	size_t maxElements = 1000000; // over all sets read
	size_t maxBytes = 24u << 20; // what the decoded rules and sets hold (30,000 of upstream's rules: 17 MiB)
	// Reads of one table that another commit to it interrupted, before it is unreadable.
	int attempts = 4;
	// An inet table left unread: the agent's own, which the caller linearizes from the
	// desired ruleset (agentTable) and whose sets may hold 100,000 elements.
	std::string skipInetTable;
};

// Reads every other table's nat postrouting chains. Each table is read consistently: a
// table that a commit changed while it was read (the nf_tables notifications say which)
// is read again, so a busy writer elsewhere costs nothing and one that keeps rewriting
// this very table makes it unreadable after `attempts`, never the whole read. Needs
// CAP_NET_ADMIN (EPERM otherwise, with a hint).
Result<NatRuleset> readNatRuleset(const NatReadLimits &limits = {});
// The kernel's ruleset generation now (one short request): equal to a NatRuleset's, nothing
// was committed since it was read.
Result<uint32_t> readRulesetGeneration();

// A set's and a chain's declaration (name, type, flags, hook, comment) as the codec's model
// holds them, from the objects the kernel sent or the encoder made.
Set declaredSet(const nftnl_set *set);
Chain declaredChain(const nftnl_chain *chain);

// A rule's nft comment (its user data), for readers of a rule outside this file.
std::string ruleComment(const nftnl_rule *rule);

} // namespace ipmasq::nft
