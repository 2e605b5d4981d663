// SPDX-License-Identifier: Apache-2.0
// Who else NATs this packet: a read-only, conservative evaluation of every nat postrouting
// base chain of the node for the first packet of a connection, with the agent's own
// decision placed where its chain runs.
//
// The evaluator is pure: it reads a NatRuleset (nat_ruleset.h) and never the kernel. A
// match it cannot evaluate forks the walk into "matches" and "does not match", so the
// result lists every outcome that is possible; it is certain only when all of them do the
// same thing. Every walk is bounded (jump depth, rules evaluated, chain orders).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/nat_ruleset.h"

namespace ipmasq::nat {

// A synthetic first packet of a connection, as it reaches nat postrouting.
struct Packet {
	Address source;
	Address destination; // source.family is the packet's family; both must agree
	// False: any source of source.family (the daemon's check when masqueradeSourceCIDRs
	// is unset): every match on the source address "may".
	bool sourceKnown = true;
	// std::nullopt: not known (any comparison on it "may"); "": no such interface (a
	// locally generated packet has no input interface).
	std::optional<std::string> outputInterface;
	std::optional<std::string> inputInterface;
	std::optional<uint8_t> l4proto; // IPPROTO_*; std::nullopt: not known
	std::optional<uint16_t> sourcePort;
	std::optional<uint16_t> destinationPort;
	std::optional<uint32_t> mark = 0; // the packet mark when it reaches the hook
	std::optional<uint32_t> ctMark = 0; // the connection's mark
};

// One address of the node with its prefix length (as `ip address` lists it).
struct LocalAddress {
	Address address;
	unsigned prefixLength = 0;
};

// What fib and addrtype need: the node's own addresses. With `complete`, an address that
// is none of them (nor multicast, nor a subnet's broadcast or network address) is
// unicast; without it, only "local" is certain.
struct NodeAddresses {
	std::vector<LocalAddress> addresses;
	bool complete = false;
};

// The agent's own chain: not read from the kernel but placed by its priority, with the
// decision the agent makes for the packet.
struct AgentPlacement {
	std::string table = "ip-masq-agent"; // the agent's inet table, skipped in the ruleset
	int32_t priority = 110;
	bool masquerades = false;
};

struct Limits {
	size_t maxJumpDepth = 16; // the kernel's NFT_JUMP_STACK_SIZE; at most 64 is used
	size_t maxRuleEvaluations = 100000; // over all orders and forks
	size_t maxOrders = 24; // orders of base chains with equal priorities tried
	size_t maxExpressionsPerRule = 256; // the kernel allows 128
	size_t maxCandidates = 64; // verdicts of a verdict map followed for an unknown key
};

// What the node does with the packet at nat postrouting.
enum class NatAction { none, masquerade, snat, dnat, redirect, dropped, undetermined };

// "no NAT", "masquerade", "snat", "dnat", "redirect", "drop", "undetermined".
const char *natActionName(NatAction action);

// Who decided.
enum class Decider {
	nobody, // no chain NATed the packet
	agent, // the agent's own chain
	rule, // a rule of another table
	policy, // a base chain's policy (drop)
	evaluator, // the evaluator gave up (a bound, an unknown verdict)
};

// Where a base chain runs relative to the agent's.
enum class Placement { beforeAgent, tiedWithAgent, afterAgent };

struct ChainRef {
	TableFamily family = TableFamily::ip;
	std::string table;
	std::string chain;
	int32_t priority = 0;

	bool operator==(const ChainRef &) const = default;
};

struct RuleRef {
	TableFamily family = TableFamily::ip;
	std::string table;
	std::string chain;
	uint64_t handle = 0;
	size_t position = 0; // 0-based index in its chain

	bool operator==(const RuleRef &) const = default;
};

struct Outcome {
	NatAction action = NatAction::none;
	std::optional<Address> address; // snat/dnat to this address, when known
	Decider decider = Decider::nobody;
	std::optional<ChainRef> base; // the base chain it happened in (rule, policy)
	std::optional<RuleRef> rule; // the deciding rule (rule), or where it gave up
	Placement placement = Placement::afterAgent; // of `base`; meaningful with a base
	std::string reason; // why, for undetermined and for "may" outcomes

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
	// Base chains with equal priorities whose order changed the outcomes.
	bool orderMatters = false;
	std::vector<ChainRef> tiedChains; // every base chain that shares a priority
	size_t rulesEvaluated = 0; // steps of the walk: rules and chain ends

	// All outcomes do the same thing (same action and address) and none is undetermined.
	bool certain() const;
	// The outcome to report first: outcomes.front().
	const Outcome &decision() const;
};

// Evaluates the nat postrouting chains of `ruleset` (tables of the packet's family and
// inet; the agent's inet table is left out and `agent` placed instead) for `packet`.
NatVerdict evaluate(const NatRuleset &ruleset, const Packet &packet, const NodeAddresses &node,
		    const AgentPlacement &agent, const Limits &limits = {});

} // namespace ipmasq::nat
