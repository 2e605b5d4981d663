// SPDX-License-Identifier: Apache-2.0
// A TableBackend in front of another that turns an allocation failure into an error: out of
// memory, a sync fails and is retried, and the process goes on.
#pragma once

#include "ip-masq-agent/nft/table_backend.h"

namespace ipmasq {

// Encoding a table of 100,000 ranges, its batch and the reads and records that check()
// compares take tens of MB for a moment; under a tight memory limit (RLIMIT_AS, a cgroup)
// one of those allocations can fail. Every call is passed on to `inner`; a std::bad_alloc
// (from operator new, or from a libnftnl allocation that returned NULL) comes back as an
// Error with errnum ENOMEM, which the Reconciler handles as any failed sync: logged, the
// table in force kept, tried again with back-off. The inner backend's own state stays
// consistent: whatever it allocates is owned by RAII handles.
class GuardedBackend final : public TableBackend
{
public:
	explicit GuardedBackend(TableBackend &inner) : inner_(inner) {}

	Result<uint32_t> apply(const Ruleset &ruleset) override;
	Result<uint32_t> updateElements(const std::string &table, const ElementDiff &diff,
					uint32_t generation) override;
	Result<uint32_t> generation() override;
	Result<CheckedTable> check(const Ruleset &ruleset) override;
	Result<std::optional<KernelTable>> readTable(const std::string &table) override;
	Result<std::vector<CounterValue>> readCounters(const std::string &table) override;

private:
	TableBackend &inner_;
};

} // namespace ipmasq
