// SPDX-License-Identifier: Apache-2.0
// Element-level differences between rulesets: a merge of two sorted range lists.
#include "ip-masq-agent/model/element_diff.h"

#include <tuple>

namespace ipmasq {

namespace {

std::optional<Address> lowest(const IntervalSet &set)
{
	if (set.empty())
		return std::nullopt;
	return set.ranges().front().first;
}

// Both lists are sorted and disjoint, so ordering by (first, last) walks them in step.
SetElementChanges changesOf(const AddressSet &from, const AddressSet &to)
{
	SetElementChanges out;
	out.set = to.name;
	out.family = to.family();
	out.interfaceNames = to.interfaceNames;
	out.oldLowest = lowest(from.elements);
	out.newLowest = lowest(to.elements);
	const auto &old = from.elements.ranges();
	const auto &now = to.elements.ranges();
	size_t i = 0, j = 0;
	while (i < old.size() || j < now.size()) {
		if (j == now.size()) {
			out.removed.push_back(old[i++]);
		} else if (i == old.size()) {
			out.added.push_back(now[j++]);
		} else if (old[i] == now[j]) {
			i++;
			j++;
		} else if (std::tie(old[i].first, old[i].last) < std::tie(now[j].first, now[j].last)) {
			out.removed.push_back(old[i++]);
		} else {
			out.added.push_back(now[j++]);
		}
	}
	return out;
}

} // namespace

size_t ElementDiff::changedRanges() const
{
	size_t total = 0;
	for (const SetElementChanges &set : sets)
		total += set.removed.size() + set.added.size();
	return total;
}

std::optional<ElementDiff> diffElements(const Ruleset &from, const Ruleset &to)
{
	if (from.table != to.table || from.comment != to.comment || from.chains != to.chains ||
	    from.dynamicSets != to.dynamicSets || from.sets.size() != to.sets.size())
		return std::nullopt;
	ElementDiff diff;
	for (size_t i = 0; i < from.sets.size(); i++) {
		const AddressSet &a = from.sets[i];
		const AddressSet &b = to.sets[i];
		if (a.name != b.name || a.comment != b.comment || a.family() != b.family() ||
		    a.interfaceNames != b.interfaceNames)
			return std::nullopt;
		if (a.elements != b.elements)
			diff.sets.push_back(changesOf(a, b));
	}
	return diff;
}

} // namespace ipmasq
