// SPDX-License-Identifier: Apache-2.0
// The sets as nft 1.0.x declares them (NEWSET), and their elements in messages of whole
// ranges (NEWSETELEM, DELSETELEM): of a whole table, or of an element-level update.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/nft/objects.h"

namespace ipmasq::netlink {

// A named set, `id` within the batch (nft numbers the sets of a batch 1, 2, ... in the
// order it declares them): an interval set with its elements, or the SNAT guard's dynamic
// set of source . destination . l4proto . destination port. Fails only on an over-long
// comment or userdata, which the kernel or nft would refuse anyway.
Result<EncodedSet> encodeSet(const std::string &table, const AddressSet &set, uint32_t id);
Result<EncodedSet> encodeSet(const std::string &table, const DynamicSet &set, uint32_t id);
// The anonymous constant set of `protocols` a rule looks up ("meta l4proto { tcp, udp }").
EncodedSet encodeProtocolSet(const std::string &table, const std::string &ruleDescription,
			     std::span<const uint8_t> protocols, uint32_t id);

// An element-level update as nft elements: deletions of exactly the elements the kernel
// holds for each removed range, and additions, split into messages as encodeRuleset()
// splits a set's elements. The sets are named (they exist already).
struct EncodedElementChanges {
	std::vector<ElementChunk> removals; // DELSETELEM, sent first
	std::vector<ElementChunk> additions; // NEWSETELEM
};

EncodedElementChanges encodeElementChanges(const std::string &table, const ElementDiff &diff);

} // namespace ipmasq::netlink
