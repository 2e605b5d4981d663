// SPDX-License-Identifier: Apache-2.0
// GuardedBackend: std::bad_alloc from the backend becomes an ENOMEM error.
#include "ip-masq-agent/nft/guarded_backend.h"

#include <cerrno>
#include <new>
#include <string_view>

#include <fmt/format.h>

namespace ipmasq {

namespace {

template<typename Call>
auto guarded(const char *doing, std::string_view table, Call &&call) -> decltype(call())
{
	try {
		return call();
	} catch (const std::bad_alloc &) {
		// Formatting the message allocates too, and may fail as well.
		try {
			return fail(fmt::format("{}{}{}: out of memory (the process's memory limit is "
						"too low for this table; what is in force stays, and "
						"this is tried again)", doing,
						table.empty() ? "" : " table inet ", table),
				    ENOMEM);
		} catch (const std::bad_alloc &) {
			return fail(Error("out of memory", ENOMEM)); // short enough for no allocation
		}
	}
}

} // namespace

Result<uint32_t> GuardedBackend::apply(const Ruleset &ruleset)
{
	return guarded("applying", ruleset.table, [&] { return inner_.apply(ruleset); });
}

Result<uint32_t> GuardedBackend::updateElements(const std::string &table, const ElementDiff &diff,
						uint32_t generation)
{
	return guarded("updating the elements of", table,
		       [&] { return inner_.updateElements(table, diff, generation); });
}

Result<uint32_t> GuardedBackend::generation()
{
	return guarded("reading the ruleset generation", "", [&] { return inner_.generation(); });
}

Result<CheckedTable> GuardedBackend::check(const Ruleset &ruleset)
{
	return guarded("reading", ruleset.table, [&] { return inner_.check(ruleset); });
}

Result<std::optional<KernelTable>> GuardedBackend::readTable(const std::string &table)
{
	return guarded("reading", table, [&] { return inner_.readTable(table); });
}

Result<std::vector<CounterValue>> GuardedBackend::readCounters(const std::string &table)
{
	return guarded("reading the counters of", table, [&] { return inner_.readCounters(table); });
}

} // namespace ipmasq
