// SPDX-License-Identifier: Apache-2.0
// The transactions on the agent's table, each one batch (netlink/batch.h) of the encoded
// objects (objects.h): a replacement, one that keeps the counters (replacement.h), a
// creation, a deletion and an element update.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/batch.h"
#include "ip-masq-agent/nft/objects.h"
#include "ip-masq-agent/nft/replacement.h"
#include "ip-masq-agent/nft/set_encoding.h"

namespace ipmasq::netlink {

// Everything in `table`: NEWTABLE, then chains, sets with their elements, named
// counters, and rules with the anonymous sets they bind, in the order nft sends them.
// `tableFlags`: netlink flags of the NEWTABLE message (createTableBatch()).
Status addEncodedTable(Batch &batch, const EncodedTable &table, uint16_t tableFlags = 0);
// The same without the NEWTABLE, for a table that exists, and without the objects
// named in `keptObjects` and the sets named in `keptSets` (they are in the kernel already).
Status addTableContents(Batch &batch, const EncodedTable &table, const std::vector<std::string> &keptObjects,
			const std::vector<std::string> &keptSets = {});

// The transaction that replaces the table atomically, as the dry-run script does:
// NEWTABLE (creates it if missing, no NLM_F_EXCL), DELTABLE, NEWTABLE with everything.
Result<Batch> replaceTableBatch(const EncodedTable &table, uint32_t firstSeq);

// The transaction that replaces the table as `plan` says (replacement.h), in one commit
// guarded by the plan's generation: BATCH_BEGIN with NFNL_BATCH_GENID, a NEWTABLE that
// changes nothing, a DELRULE of the whole table, DELCHAIN, DELSET, DELOBJ and DELFLOWTABLE
// of what the plan deletes, then the table's contents but the kept counters. A commit by
// anyone since the plan was read makes the kernel refuse it with ERESTART.
Result<Batch> replaceKeepingCountersBatch(const EncodedTable &table, const ReplacementPlan &plan,
					  uint32_t firstSeq);

// The transaction that creates the table where it is absent: no DELTABLE, so the kernel
// has nothing to destroy (a deletion makes the committing socket's close() wait for an
// RCU grace period, ~20 ms, which is most of a --once with a small config). EEXIST when
// the table exists.
Result<Batch> createTableBatch(const EncodedTable &table, uint32_t firstSeq);

// The transaction that deletes one table (ENOENT when it is absent).
Result<Batch> deleteTableBatch(const std::string &table, uint32_t firstSeq);

// The guarded element update: BATCH_BEGIN with `generation`, a no-op NEWTABLE (the
// table exists: no flags, nothing changes) that carries the echo request for the
// commit's generation, then the deletions, then the additions.
Result<Batch> updateElementsBatch(const std::string &table, const EncodedElementChanges &changes,
				  uint32_t generation, uint32_t firstSeq);

} // namespace ipmasq::netlink
