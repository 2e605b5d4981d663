// SPDX-License-Identifier: Apache-2.0
// Which of the kernel's counters a replacement keeps, and what it deletes and creates.
#include "ip-masq-agent/nft/replacement.h"

#include <algorithm>

#include <linux/netfilter/nf_tables.h>

namespace ipmasq::netlink {

namespace {

// The kernel's counter of that name, if it is one.
const TableContents::Object *kernelCounter(const TableContents &kernel, const std::string &name)
{
	const auto it = std::find_if(kernel.objects.begin(), kernel.objects.end(),
				     [&](const TableContents::Object &object) {
					     return object.name == name &&
						    object.type == NFT_OBJECT_COUNTER;
				     });
	return it == kernel.objects.end() ? nullptr : &*it;
}

// How many of the desired counters, from the first, the kernel holds with the same
// comment and in the same order: those keep their place in `nft list`.
size_t keptPrefix(const TableContents &kernel, const std::vector<NamedCounter> &desired)
{
	size_t kept = 0;
	const TableContents::Object *previous = nullptr;
	for (const NamedCounter &counter : desired) {
		const TableContents::Object *held = kernelCounter(kernel, counter.name);
		if (!held || held->comment != counter.comment || (previous && held < previous))
			break;
		previous = held;
		kept++;
	}
	return kept;
}

CounterValue startValue(const TableContents &kernel, const std::vector<CounterValue> &remembered,
			const std::string &name)
{
	if (const TableContents::Object *held = kernelCounter(kernel, name))
		return CounterValue{name, held->packets, held->bytes};
	const auto seen = std::find_if(remembered.begin(), remembered.end(),
				       [&](const CounterValue &value) { return value.name == name; });
	return seen == remembered.end() ? CounterValue{name, 0, 0} : *seen;
}

} // namespace

std::vector<CounterValue> TableContents::counters() const
{
	std::vector<CounterValue> values;
	for (const Object &object : objects)
		if (object.type == NFT_OBJECT_COUNTER)
			values.push_back(CounterValue{object.name, object.packets, object.bytes});
	return values;
}

void TableContents::setCounterValues(const std::vector<CounterValue> &values)
{
	for (const CounterValue &value : values)
		for (Object &object : objects)
			if (object.type == NFT_OBJECT_COUNTER && object.name == value.name) {
				object.packets = value.packets;
				object.bytes = value.bytes;
			}
}

bool ReplacementPlan::keeps(const std::string &counter) const
{
	return std::find(keptCounters.begin(), keptCounters.end(), counter) != keptCounters.end();
}

bool ReplacementPlan::sameChanges(const ReplacementPlan &other) const
{
	return deleteChains == other.deleteChains && deleteSets == other.deleteSets &&
	       keptSets == other.keptSets &&
	       deleteFlowtables == other.deleteFlowtables && deleteObjects == other.deleteObjects &&
	       keptCounters == other.keptCounters && createdCounters == other.createdCounters;
}

std::optional<ReplacementPlan> planReplacement(
	const TableContents &kernel, const Ruleset &desired, const std::vector<CounterValue> &remembered,
	const std::vector<std::pair<std::string, std::string>> &desiredDynamicSets)
{
	// The agent's table has no flags; a dormant one, or one someone else owns, is deleted
	// (or refused, for the owner's) as before.
	if (kernel.flags != 0 || kernel.comment != desired.comment)
		return std::nullopt;
	ReplacementPlan plan;
	plan.generation = kernel.generation;
	plan.deleteChains = kernel.chains;
	for (const auto &held : kernel.dynamicSets)
		if (std::find(desiredDynamicSets.begin(), desiredDynamicSets.end(), held) !=
		    desiredDynamicSets.end())
			plan.keptSets.push_back(held.first);
	for (const std::string &set : kernel.sets)
		if (std::find(plan.keptSets.begin(), plan.keptSets.end(), set) == plan.keptSets.end())
			plan.deleteSets.push_back(set);
	plan.deleteFlowtables = kernel.flowtables;
	const size_t kept = keptPrefix(kernel, desired.counters);
	for (size_t i = 0; i < desired.counters.size(); i++) {
		const std::string &name = desired.counters[i].name;
		if (i < kept)
			plan.keptCounters.push_back(name);
		else
			plan.createdCounters.push_back(startValue(kernel, remembered, name));
	}
	for (const TableContents::Object &object : kernel.objects)
		if (object.type != NFT_OBJECT_COUNTER || !plan.keeps(object.name))
			plan.deleteObjects.emplace_back(object.name, object.type);
	return plan;
}

} // namespace ipmasq::netlink
