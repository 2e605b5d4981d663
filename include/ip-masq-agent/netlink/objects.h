// SPDX-License-Identifier: Apache-2.0
// The desired ruleset as libnftnl objects, each with a description of the model object.
//
// This is the one place that decides the bytecode. The batch serializes these objects
// and the backend's matches() compares them with what the kernel dumps, so what we
// send and what we expect to find can never drift apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ip-masq-agent/error.h"
#include "ip-masq-agent/netlink/handles.h"
#include "ip-masq-agent/ruleset.h"

namespace ipmasq::netlink {

// nft refuses longer comments (and userdata lengths are one byte).
inline constexpr size_t kMaxCommentLength = 128;

// Each NEWSETELEM message stays below this size. The element list is one netlink nest,
// whose length field is 16 bits: nft fills messages up to that limit, we keep well
// under it so that no estimate can ever overflow it.
inline constexpr size_t kElementMessageBudget = 16 * 1024;

// Some of one set's elements: what one NEWSETELEM message carries.
struct ElementChunk {
	SetPtr elements; // table, set name and set id, plus the elements
	std::string description; // "elements of set nomasq-v4 (ranges 1-315 of 1200)"
};

struct EncodedSet {
	SetPtr set; // the declaration: NEWSET
	std::string description; // "set nomasq-v4"
	std::vector<ElementChunk> elements;
};

struct EncodedRule {
	// Anonymous sets the rule looks up ("{ tcp, udp, sctp }"): nft declares each one
	// right before the rule that binds it.
	std::vector<EncodedSet> anonymousSets;
	RulePtr rule;
	std::string description; // "rule in chain IP-MASQ-AGENT: ip daddr @nomasq-v4 return"
};

struct EncodedChain {
	ChainPtr chain;
	std::string description; // "chain postrouting"
	std::vector<EncodedRule> rules;
};

struct EncodedTable {
	TablePtr table; // with its comment
	std::string description; // "table ip-masq-agent"
	std::vector<EncodedSet> sets;
	std::vector<EncodedChain> chains;
};

// A table handle carrying only family inet and the name (DELTABLE, GETTABLE), or
// also flags 0 as nft sends for "add table" (NEWTABLE that creates it if missing).
TablePtr tableHandle(const std::string &name, bool withFlags);

// Encode the whole model. Fails only on what the kernel or nft would refuse anyway
// and the model does not check: over-long comments.
Result<EncodedTable> encodeRuleset(const Ruleset &ruleset);

} // namespace ipmasq::netlink
