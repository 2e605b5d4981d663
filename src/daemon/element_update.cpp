// SPDX-License-Identifier: Apache-2.0
// The element update: planned against what the kernel is known to hold, sent under the
// generation guard, read and sent again when others commit in between.
#include "ip-masq-agent/daemon/element_update.h"

#include <cerrno>

#include <fmt/format.h>

#include "ip-masq-agent/base/log.h"

namespace ipmasq {

namespace {

size_t rangeCount(const Ruleset &ruleset)
{
	size_t total = 0;
	for (const AddressSet &set : ruleset.sets)
		total += set.elements.size();
	return total;
}

} // namespace

UpdatePlan planElementUpdate(const Ruleset *applied, const std::string &unknownBecause, const Ruleset &desired)
{
	if (!applied)
		return {std::nullopt, unknownBecause};
	auto diff = diffElements(*applied, desired);
	if (!diff)
		return {std::nullopt, "the change is not only in set elements"};
	if (diff->empty())
		return {std::nullopt, "its sets already hold these elements"};
	// Past this, the update sends more elements than the whole new table: replacing
	// it costs no more, and leaves nothing to chance.
	if (diff->changedRanges() > rangeCount(desired))
		return {std::nullopt, "the update would send more elements than the table holds"};
	return {std::move(diff), {}};
}

Result<UpdateOutcome> sendElementUpdate(TableBackend &backend, const std::string &table, const Ruleset &applied,
					const ElementDiff &diff, uint32_t &guard)
{
	// races: refusals of a generation that a read had just confirmed.
	for (int races = 0;; races++) {
		auto committed = backend.updateElements(table, diff, guard);
		if (committed)
			return UpdateOutcome{.generation = *committed};
		if (committed.error().errnum != ERESTART) {
			log::warning("element update of table inet {} failed: {}; replacing the table",
				     table, committed.error().message);
			return UpdateOutcome{.replaceBecause = fmt::format("the kernel refused the element update ({})",
									       committed.error().message)};
		}
		if (races == kUpdateRaces)
			return UpdateOutcome{
				.replaceBecause = fmt::format("someone else committed {} times during the update", races)};
		// Someone committed since `guard`: most often another table (kube-proxy's). One
		// read says whether ours is still what the agent wrote, and at which generation.
		auto checked = backend.check(applied);
		if (!checked)
			return fail(checked.error().withContext(fmt::format("reading table inet {}: ", table)));
		switch (checked->verdict) {
		case TableCheck::same:
			log::debug("element update of table inet {} refused at generation {} (someone "
				   "committed since); the table is as the agent wrote it at generation "
				   "{}: sending it against that", table, guard, checked->generation.value_or(guard));
			guard = checked->generation.value_or(guard);
			continue;
		case TableCheck::different:
			return UpdateOutcome{.replaceBecause = "its table was changed outside the agent", .drift = true};
		case TableCheck::unsettled:
			return UpdateOutcome{.replaceBecause = "other commits kept its table from being read consistently"};
		}
	}
}

} // namespace ipmasq
