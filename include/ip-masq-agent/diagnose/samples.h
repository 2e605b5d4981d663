// SPDX-License-Identifier: Apache-2.0
// Where other tables' rules can bite: the destinations and ports their own matches name,
// sampled so that the NAT conflict check evaluates packets there too, not only at the first
// address of each of the agent's ranges.
//
// A rule that matches a destination (a prefix, a range, a set's elements, `!=` any of them)
// decides the same way for every address between two of its boundaries; the agent's own
// decision is the same between two of its ranges' boundaries. A packet at each boundary of
// another table's match therefore meets what those rules do on the addresses that follow,
// whichever of the agent's ranges holds it. Pure: it reads decoded rules
// (nft/codec/model.h), never the kernel; every walk is bounded.
#pragma once

#include <cstddef>
#include <vector>

#include "ip-masq-agent/nft/codec/model.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/model/sampled_packet.h"

namespace ipmasq {

struct RuleSampleLimits {
	// Destinations taken from other tables' rules, per family: beyond, evenly spread (the
	// same bound as the config's own destinations, SampleLimits::maxDestinations).
	size_t maxDestinations = 64;
	// Boundaries collected per family before the spread: the walk stops collecting there.
	size_t maxCandidates = 1024;
	// Elements looked at in one set, evenly spread: a 200,000-element set costs 64 reads.
	size_t maxSetElements = 64;
};

struct RuleSamples {
	// The packets: each destination from each source the plan samples its family from.
	std::vector<SampledPacket> packets;
	// Per family, where the bounds cut: how many distinct destinations the rules name
	// (at least: `collected` stopped at maxCandidates, or a set was read in part) against
	// how many were sampled.
	struct Cut {
		Family family = Family::ipv4;
		size_t found = 0;
		size_t sampled = 0;
		bool atLeast = false; // a bound stopped the collection: more may exist
		bool operator==(const Cut &) const = default;
	};
	std::vector<Cut> cuts; // only the families where something was left out
};

// The packets to sample besides the plan's own: for each family the plan samples, each
// boundary of a destination match of `ruleset`'s rules that is not already one of the
// plan's destinations nor an address of this node (`node`: traffic to it is delivered
// here, never NATed at postrouting), named by plan.entries, from each of the plan's sources
// of that family. Boundaries that fall inside a stretch of one config entry come first (the
// plan's own sample can never reach them), then the others, each group evenly spread.
RuleSamples samplesFromRules(const nft::NatRuleset &ruleset, const SamplePlan &plan, const NodeAddresses &node,
			     const RuleSampleLimits &limits = {});

// The protocols and destination ports that make `rule`'s own port matches true (`th dport
// 53` gives 53/udp and 53/tcp, `tcp dport != 80` 81/tcp, `udp dport { 53, 5353 }` 53/udp),
// at most `max`: a packet with one of them decides a match that a packet of any port only
// "may" meet.
std::vector<PortProtocol> destinationPorts(const nft::Table &table, const nft::Rule &rule, size_t max = 4);

} // namespace ipmasq
