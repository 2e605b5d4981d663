// SPDX-License-Identifier: Apache-2.0
// What the whole node does with the first packet of a connection at nat postrouting: a
// read-only, conservative walk of every nat postrouting base chain in priority order, the
// agent's own table among them, walked like any other (its rules come from the desired
// ruleset through the same decoder, nft/codec/table_reader.h).
//
// Pure: it reads decoded rules (nft/codec/model.h), never the kernel. A match it cannot evaluate
// forks the walk into "matches" and "does not match", so the result lists every outcome
// that is possible; it is certain only when all of them do the same thing. Every walk is
// bounded (jump depth, steps, chain orders), and a bound reached is an undetermined
// outcome, never silence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/nft/codec/model.h"

namespace ipmasq::nat {

// A synthetic first packet of a connection, as it reaches nat postrouting.
struct Packet {
	Address source;
	Address destination; // source.family is the packet's family; both must agree
	// False: any source of source.family (every match on the source address "may").
	bool sourceKnown = true;
	// nullopt: not known (any comparison on it "may"); "": no such interface (a locally
	// generated packet has no input interface).
	std::optional<std::string> outputInterface;
	std::optional<std::string> inputInterface;
	std::optional<uint8_t> l4proto; // IPPROTO_*; nullopt: not known
	std::optional<uint16_t> sourcePort;
	std::optional<uint16_t> destinationPort;
	std::optional<uint32_t> mark = 0; // the packet mark when it reaches the hook
	std::optional<uint32_t> ctMark = 0; // the connection's mark
	// The connection the agent decides on: its first packet (ct state new, direction
	// original), and untranslated: no Service DNATed it, so the lowest byte of ct status
	// is clear (not expected, no reply seen, neither assured nor confirmed, no SNAT or DNAT
	// yet). False: ct status is not known. The rest of ct status (a helper, the kernel's
	// own bits) stays unknown.
	bool untranslated = true;
};

struct Limits {
	size_t maxJumpDepth = 16; // the kernel's NFT_JUMP_STACK_SIZE; at most 64 is used
	size_t maxSteps = 100000; // rules and chain ends walked, over all orders and forks
	size_t maxOrders = 24; // orders of base chains with equal priorities tried
	size_t maxVerdicts = 64; // verdicts of a verdict map followed for an unknown key
};

// What the node does with the packet at nat postrouting.
enum class NatAction { none, masquerade, snat, dnat, redirect, dropped, undetermined };

// Who decided.
enum class Decider {
	nobody, // no chain NATed the packet
	agent, // a rule of the agent's own table
	rule, // a rule of another table
	policy, // a base chain's policy (drop)
	evaluator, // the evaluator cannot tell (a bound, something it does not understand)
};

// Where a base chain runs relative to the agent's.
enum class Placement { beforeAgent, tiedWithAgent, afterAgent };

struct ChainRef {
	nft::TableFamily family = nft::TableFamily::ip;
	std::string table;
	std::string chain;
	int32_t priority = 0;
	bool operator==(const ChainRef &) const = default;
};

struct RuleRef {
	nft::TableFamily family = nft::TableFamily::ip;
	std::string table;
	std::string chain;
	uint64_t handle = 0;
	size_t position = 0; // 0-based index in its chain
	bool operator==(const RuleRef &) const = default;
};

struct Outcome {
	NatAction action = NatAction::none;
	// Where snat/dnat puts the address, when the evaluator can tell: one address, a range,
	// or (snat prefix, NETMAP, from an unknown source) the prefix it maps into.
	std::optional<AddressRange> addresses;
	Decider decider = Decider::nobody;
	std::optional<ChainRef> base; // the base chain it happened in (rule, policy)
	std::optional<RuleRef> rule; // the deciding rule, or where the evaluator gave up
	Placement placement = Placement::afterAgent; // of `base`; meaningful with a base
	std::string reason; // why, for undetermined outcomes
	bool operator==(const Outcome &) const = default;
};

// A rule the evaluator could not decide, and why.
struct MayPoint {
	RuleRef rule;
	std::string reason;
	bool operator==(const MayPoint &) const = default;
};

struct NatVerdict {
	// Every distinct outcome some path reaches, in the order the walk found them
	// (deterministic for a given ruleset and packet).
	std::vector<Outcome> outcomes;
	std::vector<MayPoint> mayPoints;
	size_t steps = 0; // rules and chain ends walked

	// All outcomes do the same thing (same action and addresses) and none is undetermined.
	bool certain() const;
	// The outcome to report first: outcomes.front().
	const Outcome &decision() const;
};

// Walks the nat postrouting base chains of `ruleset`'s tables (of the packet's family and
// inet) and of `agent` (the agent's own table, or nullptr) for `packet`. `node` serves fib
// and addrtype: with `complete`, an address that is none of them (nor multicast, nor a
// subnet's broadcast or network address) is unicast; without it, only "local" is certain.
NatVerdict evaluate(const nft::NatRuleset &ruleset, const nft::Table *agent, const Packet &packet,
		    const NodeAddresses &node, const Limits &limits = {});

} // namespace ipmasq::nat
