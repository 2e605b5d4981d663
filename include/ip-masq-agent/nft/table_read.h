// SPDX-License-Identifier: Apache-2.0
// The one reader of the agent's own table: one consistent read per ruleset generation,
// which every use projects (snapshot.h): the check, a replacement, adoption.
//
// The table is read with several dumps; a commit between two of them could make a mix of
// two versions. A socket of the read's own listens to nf_tables' notifications meanwhile
// (netlink/change_watch.h), so a read that only other tables' commits interrupted holds for
// this table at the generation read after it. The last read is kept: while the kernel's
// generation is still the one it was made at, nothing was committed since, and a second
// use (a restore after the check that found the drift, adoption's check after its read)
// reads nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/nft/snapshot.h"

namespace ipmasq::netlink {

// How much of the table a use needs.
enum class ReadDepth {
	declarations, // the table, its chains, sets, objects and flowtables: a replacement
	whole, // and every set's elements (but dynamic sets') and the rules: the check, adoption
};

// What one read found: the table at `generation`, or (snapshot null) that there was no such
// table then; or that commits to the table itself (or lost notifications) spoiled every
// attempt: unsettled.
struct TableRead {
	bool unsettled = false;
	bool reused = false; // the last read, made before: its counters' values are as old
	uint32_t generation = 0;
	std::shared_ptr<const TableSnapshot> snapshot;
};

class TableReader
{
public:
	// Reads with `socket` (the backend's), which outlives the reader.
	explicit TableReader(Socket &socket) : socket_(socket) {}

	// At least `depth` of inet `table`: the last read if the kernel's generation is still
	// its own (one GETGEN), else a new one. A table with the flag "owner" is never kept:
	// the kernel deletes it when its owner exits, without a new generation.
	Result<TableRead> read(const std::string &table, ReadDepth depth);

	// Drops the last read when nothing will use it again (a commit of the caller's own made
	// a new generation; a check found the table intact): at 100,000 ranges it holds a few MB.
	void forget() { last_.reset(); }

	// The named counters of inet `table` and their values now (none when it does not
	// exist): counters count without any commit, so this is one dump of the objects every
	// time, never the last read.
	Result<std::vector<CounterValue>> readCounters(const std::string &table);

	// For tests: called in every attempt of a read, between the generation it starts at and
	// its dumps, where another component's commit lands on a busy node: a test commits there,
	// or counts the reads made.
	void onEachRead(std::function<void()> hook) { onEachRead_ = std::move(hook); }

private:
	Result<TableRead> readConsistently(const std::string &table, ReadDepth depth);

	Socket &socket_;
	struct Kept {
		std::string table;
		ReadDepth depth;
		TableRead read;
	};
	std::optional<Kept> last_;
	std::function<void()> onEachRead_;
};

// GETTABLE of one inet table: the kernel's answer, parsed (ENOENT when there is none).
Result<TablePtr> getTable(Socket &socket, const std::string &table);

// The replies of one dump of the elements of set `set` of inet `table`, each to `onReply`
// as it arrives, unparsed (ENOENT when there is no such set).
Status dumpSetReplies(Socket &socket, const std::string &table, const std::string &set,
		      const ReplyHandler &onReply);

// Dumps the elements of set `set` of inet `table`, handing each reply's to `onPart` as it
// arrives (ENOENT when there is no such set): the read's records, the guard's over keys and
// their counters (guard_reader.cpp). The libnftnl objects of a whole 100,000-range set would take
// 60 MB.
Status dumpSetElements(Socket &socket, const std::string &table, const std::string &set,
		       const std::function<Status(const nftnl_set *)> &onPart);

// How many elements set `set` of inet `table` holds, counted in the replies of one dump as
// they arrive, without a libnftnl object per element (ENOENT when there is no such set):
// the guard's fullness, whose 65,536-key sets are read after every SNAT usage read.
Result<size_t> countSetElements(Socket &socket, const std::string &table, const std::string &set);

} // namespace ipmasq::netlink
