// SPDX-License-Identifier: Apache-2.0
// The difference between two rulesets that differ only in their sets' elements.
//
// The reconciler uses it to update a large table by its changed ranges instead of
// replacing it; the backend turns it into element deletions and additions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

// One set's changes. A range that changes shape (split, merged, extended) is removed
// as it was and added as it is: element updates never edit a range in place.
struct SetElementChanges {
	std::string set;
	Family family = Family::ipv4;
	bool interfaceNames = false; // the set's keys are interface names (AddressSet)
	std::vector<AddressRange> removed; // ranges of the old set the new one lacks
	std::vector<AddressRange> added;   // ranges of the new set the old one lacks
	// The lowest address of the old and the new set (nullopt: the set is empty): how
	// nft encodes an interval set depends on whether its first range starts at 0.
	std::optional<Address> oldLowest;
	std::optional<Address> newLowest;
};

struct ElementDiff {
	std::vector<SetElementChanges> sets; // only the sets that change, in ruleset order

	bool empty() const { return sets.empty(); }
	// Removed plus added ranges over all sets: the size of the update.
	size_t changedRanges() const;
};

// nullopt when `from` and `to` differ in anything but set elements (table, comments,
// set names, families or comments, dynamic sets, chains, rules).
std::optional<ElementDiff> diffElements(const Ruleset &from, const Ruleset &to);

} // namespace ipmasq
