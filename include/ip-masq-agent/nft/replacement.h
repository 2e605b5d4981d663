// SPDX-License-Identifier: Apache-2.0
// Replacing the agent's table without deleting its counters: what the kernel's table holds,
// and the plan that keeps every counter object it can.
//
// A counter object deleted and created again in one transaction starts from the value the
// batch carries, read before the batch was built and sent: the connections counted in
// between are lost, and `nft list` sees the count go back. Objects the batch leaves alone
// are not touched by the commit, so a replacement that flushes the rules, deletes the
// chains, sets and unwanted objects by name, and creates the rest, keeps the counters
// counting through it, exactly. The batch carries the ruleset generation it was planned at
// (NFNL_BATCH_GENID): if anyone committed since, the kernel refuses it whole (ERESTART) and
// the backend reads and plans again.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq::netlink {

// What the kernel's table holds, by name, as read at one ruleset generation.
struct TableContents {
	uint32_t generation = 0;
	std::string comment; // the table's
	uint32_t flags = 0; // NFT_TABLE_F_* (dormant, owner)
	std::vector<std::string> chains; // not those bound to a rule (they go with it)
	std::vector<std::string> sets; // named sets and maps (anonymous ones go with their rules)
	// Of those, the dynamic ones (the kernel fills them), with their declarations
	// (snapshot.h, setDeclaration).
	std::vector<std::pair<std::string, std::string>> dynamicSets;
	std::vector<std::string> flowtables;
	struct Object {
		std::string name;
		uint32_t type = 0; // NFT_OBJECT_*
		std::string comment;
		uint64_t packets = 0; // a counter's values; 0 for other types
		uint64_t bytes = 0;
	};
	std::vector<Object> objects; // in the kernel's order, which `nft list` shows

	// The counters among the objects, with their values.
	std::vector<CounterValue> counters() const;
	// Sets the counters' values to `values`, by name (read later than the rest: counters
	// count without any commit).
	void setCounterValues(const std::vector<CounterValue> &values);
};

// A replacement that deletes everything of the table but `keptCounters` and creates the
// desired ruleset around them (replaceKeepingCountersBatch in table_batch.h).
struct ReplacementPlan {
	uint32_t generation = 0; // what the kernel's table was read at
	std::vector<std::string> deleteChains;
	std::vector<std::string> deleteSets;
	std::vector<std::string> deleteFlowtables;
	std::vector<std::pair<std::string, uint32_t>> deleteObjects; // name, NFT_OBJECT_* type
	// Left alone: they go on counting through the commit.
	std::vector<std::string> keptCounters;
	// Left alone too, with what the kernel put in them (the guard's ct counts, its rate
	// buckets): dynamic sets the desired table declares exactly as the kernel holds them.
	std::vector<std::string> keptSets;
	// Created by the batch, starting at these values: the kernel's own for a counter that
	// must be created again (see planReplacement), else the last value the agent saw of that
	// name, else 0.
	std::vector<CounterValue> createdCounters;

	// Whether `counter` is one of keptCounters.
	bool keeps(const std::string &counter) const;
	// The same deletions, kept counters and created ones with the same values: the
	// batch of one serves the other, with the other's generation.
	bool sameChanges(const ReplacementPlan &other) const;
};

// How to replace the kernel's table `kernel` with `desired` keeping what counters it can,
// or nullopt when only deleting the table will do: its comment or flags differ from the
// desired table's, which a NEWTABLE of an existing table does not change.
//
// A desired counter is kept when the kernel holds a counter of that name and comment. `nft
// list` shows a table's objects in the order they were created, and kept ones keep their
// place, so only a prefix of the desired counters in the kernel's own order can be kept
// with the listing still exactly the dry-run's: a counter that a config change puts before
// a kept one (masqueradeSourceCIDRs added, say) makes the counters after it be created
// again, from the values the kernel held when the table was read. `remembered`: the values
// the agent last saw, by name, for counters the kernel does not hold.
//
// A dynamic set of `desiredDynamicSets` (name, declaration) that the kernel holds with the
// same declaration is kept, whatever its place: what it holds (open connections counted,
// rate buckets) cannot be carried over, and is worth more than `nft list` showing the sets
// in the dry run's order after a limit is added in front of it.
std::optional<ReplacementPlan> planReplacement(
	const TableContents &kernel, const Ruleset &desired, const std::vector<CounterValue> &remembered,
	const std::vector<std::pair<std::string, std::string>> &desiredDynamicSets = {});

} // namespace ipmasq::netlink
