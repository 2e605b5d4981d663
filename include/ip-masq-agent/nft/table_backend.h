// SPDX-License-Identifier: Apache-2.0
// What the reconciler needs from the kernel: apply, generation, compare, read back, remove.
//
// NetlinkBackend (nft/backend.h) implements it against nf_tables; the reconciler's
// unit tests implement it with a fake, so every decision can be driven event by event.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

// How the kernel's table compares with a desired ruleset.
enum class TableCheck {
	same,      // exactly the desired table: table, sets, elements, chains, rules, comments
	different, // missing, or anything in it differs
	unsettled, // commits to the table kept interrupting the read: no consistent view was had
};

// What check() found, and when: `generation` is the ruleset generation at which the table was
// exactly the ruleset (TableCheck::same only). An element update guarded by it applies to
// that very table, whatever other tables were committed while it was read.
struct CheckedTable {
	TableCheck verdict;
	std::optional<uint32_t> generation;
};

class TableBackend
{
public:
	virtual ~TableBackend() = default;

	// Atomically replaces the table `ruleset.table` (creating it if missing) and
	// returns the ruleset generation id of that commit. On error nothing changed.
	virtual Result<uint32_t> apply(const Ruleset &ruleset) = 0;

	// Changes only the elements of table inet `table`'s sets as `diff` says (deleting
	// exactly the kernel's elements of each removed range, then adding the new ones), in
	// one transaction guarded by `generation`: the one at which the caller knows the
	// table held diff's old elements. If anyone committed since, the kernel refuses the
	// whole transaction and this fails with errnum ERESTART; on any error nothing
	// changed. Returns the generation id of the commit.
	virtual Result<uint32_t> updateElements(const std::string &table, const ElementDiff &diff,
						uint32_t generation) = 0;

	// The kernel's ruleset generation id: it changes with every commit by anyone.
	virtual Result<uint32_t> generation() = 0;

	// Compares the kernel's table with `ruleset`, in one consistent read. Other tables'
	// commits during it do not spoil it; commits to this table that keep interrupting it
	// are not an error: TableCheck::unsettled.
	virtual Result<CheckedTable> check(const Ruleset &ruleset) = 0;

	// What inet `table` holds that a ruleset cannot be rebuilt without (KernelTable): every
	// interval set of addresses or interface names, elements and comments included, and the
	// SNAT rules' targets and comments; nullopt when the table does not exist. For
	// adoption, the caller builds a candidate ruleset from it (rulesetFromKernel) and
	// confirms it with check().
	virtual Result<std::optional<KernelTable>> readTable(const std::string &table) = 0;

	// The values of the named counters (Ruleset::counters) of inet `table`; none when it
	// does not exist. A full replacement of the table carries them over (apply()), so
	// that they only ever grow; an element update keeps them.
	virtual Result<std::vector<CounterValue>> readCounters(const std::string &table) = 0;
};

} // namespace ipmasq
