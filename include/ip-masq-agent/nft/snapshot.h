// SPDX-License-Identifier: Apache-2.0
// The kernel's copy of the agent's table as one read found it (nft/table_read.h), and what
// each use takes of it: the check's comparison with the desired table, a replacement's
// names, adoption's sets and SNAT rules.
//
// The kernel does not dump exactly what it was sent: it adds handles, use counters and
// zero-valued attributes, renames anonymous sets ("__set%d" -> "__set0"), forgets set
// ids and returns interval elements in its own order. The comparison keeps what defines
// behaviour and listing (names, hooks, key types, flags, userdata, elements, every
// expression as libnftnl prints it) and drops the rest, so that the desired objects and
// the dumped ones compare equal exactly when they are the same table.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/netlink/handles.h"
#include "ip-masq-agent/nft/objects.h"
#include "ip-masq-agent/nft/replacement.h"

namespace ipmasq::netlink {

// One set's elements as the comparison sees them: each element's key, flags and user data
// (what defines it) packed into one record, the records sorted once finish()ed (order means
// nothing in a set, and the kernel dumps an interval set in its own tree order). 200,000
// elements of 4-byte keys take 3 MB, where libnftnl objects would take 60 MB.
class ElementRecords
{
public:
	// Appends the elements `holder` carries: a dump message's, or an encoded chunk's.
	void add(const nftnl_set *holder);
	void finish();

	size_t size() const { return starts_.size(); }
	std::span<const uint8_t> key(size_t i) const;
	uint32_t flags(size_t i) const; // NFT_SET_ELEM_* (INTERVAL_END: the first key after a range)
	// Element i as one canonical line, for the rules' anonymous sets and for messages.
	std::string line(size_t i) const;
	// The same elements (both finish()ed).
	bool operator==(const ElementRecords &other) const;

	// nftnl_set_elem_foreach's callback: C, so nothing may be thrown through it.
	static int append(nftnl_set_elem *element, void *records);

private:
	std::string_view recordAt(uint32_t start) const;

	// The records back to back: key length (1 byte), key, flags (4 bytes), user data
	// length (2 bytes), user data.
	std::string bytes_;
	std::vector<uint32_t> starts_;
};

// What one read of inet `table` found, at ruleset generation `generation`.
struct TableSnapshot {
	uint32_t generation = 0;
	bool whole = false; // the elements and rules were read too (ReadDepth::whole)
	TablePtr table;
	std::vector<ObjPtr> objects; // the named counters, and anything added by hand
	std::vector<SetPtr> sets; // named and anonymous: the declarations
	std::vector<ChainPtr> chains;
	std::vector<FlowtablePtr> flowtables;
	// By set name (whole reads), but for the dynamic sets': what they hold is traffic, which
	// no use compares or rebuilds, and up to each set's size (65,536 for the guard's).
	std::map<std::string, ElementRecords> elements;
	std::vector<RulePtr> rules; // in kernel order: grouped by chain, in position order
};

// A set's declaration as the comparison prints it (no elements): two sets are the same set
// exactly when these are equal.
std::string setDeclaration(const nftnl_set *set);
// Whether the kernel fills the set from the packet path (flags dynamic): what it holds is
// traffic, never compared nor read for the comparison.
bool isDynamicSet(const nftnl_set *set);

// Whether the snapshot (a whole read) is exactly the desired table. When it is not,
// `difference` says where first ("desired: ..., kernel: ..."), for the debug log. A dynamic
// set's declaration is compared, never its elements: the kernel adds them as traffic flows,
// and traffic is not drift.
bool sameTable(const EncodedTable &desired, const TableSnapshot &kernel, std::string &difference);

// What a replacement deletes and keeps (replacement.h): the snapshot's names, its dynamic
// sets' declarations, its objects with their values as read.
TableContents contentsOf(const TableSnapshot &snapshot);

// The named counters among `objects`, with their values.
std::vector<CounterValue> countersOf(const std::vector<ObjPtr> &objects);

// What adoption rebuilds a ruleset from (a whole read): every interval set of addresses
// or interface names, elements and comments included, and the SNAT rules' targets and
// comments. EPROTO when a set's elements are not what nft writes.
Result<KernelTable> kernelTableOf(const TableSnapshot &snapshot);

} // namespace ipmasq::netlink
