// SPDX-License-Identifier: Apache-2.0
// The kernel's copy of a table, and a canonical text form to compare it with the desired one.
//
// The kernel does not dump exactly what it was sent: it adds handles, use counters and
// zero-valued attributes, renames anonymous sets ("__set%d" -> "__set0"), forgets set
// ids and returns interval elements in its own order. The canonical form keeps what
// defines behaviour and listing (names, hooks, key types, flags, userdata, elements,
// every expression as libnftnl prints it) and drops the rest, so that the desired
// objects and the dumped ones print identically exactly when they are the same table.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ip-masq-agent/netlink/handles.h"
#include "ip-masq-agent/nft/objects.h"

namespace ipmasq::netlink {

struct TableSnapshot {
	TablePtr table;
	std::vector<ObjPtr> objects; // the named counters
	std::vector<SetPtr> sets; // named and anonymous: the declarations
	// Each set's elements as canonical lines (appendElementLines), by set name. A
	// dump is converted message by message, so that a set's elements never all
	// exist as libnftnl objects (about 300 bytes each) at once.
	std::map<std::string, std::vector<std::string>> elements;
	std::vector<ChainPtr> chains;
	std::vector<RulePtr> rules; // in kernel order: grouped by chain, in position order
};

// Appends one canonical line per element that `holder` carries, in its order.
void appendElementLines(const nftnl_set *holder, std::vector<std::string> &lines);

// A set's declaration as the canonical form prints it (no elements): two sets are the
// same set exactly when these are equal.
std::string setDeclaration(const nftnl_set *set);
// Whether the kernel fills the set from the packet path (flags dynamic): what it holds is
// traffic, never compared (the canonical form lists none of its elements).
bool isDynamicSet(const nftnl_set *set);

// One line per table, set, element, chain and rule, in a stable order. A dynamic set's
// elements are left out on both sides: the kernel adds them as traffic flows, and traffic
// is not drift.
std::string canonicalForm(const EncodedTable &desired);
std::string canonicalForm(const TableSnapshot &snapshot);

} // namespace ipmasq::netlink
