// SPDX-License-Identifier: Apache-2.0
// The discovered-range model's set in force: origins per prefix, hold-down, the bound,
// element diffs.
#include "ip-masq-agent/node/ranges_in_force.h"

#include <algorithm>

#include <fmt/format.h>

namespace ipmasq {

RangesInForce::Key RangesInForce::keyOf(const Prefix &prefix)
{
	return Key{prefix.network.family, prefix.network.value, prefix.length};
}

Prefix RangesInForce::prefixOf(const Key &key)
{
	Prefix prefix;
	prefix.network = Address{key.family, key.network};
	prefix.length = key.length;
	return prefix;
}

void RangesInForce::touch(const Key &key) { dirty_.insert(key); }

void RangesInForce::unschedule(const Key &key, Entry &entry)
{
	if (!entry.leavesAt)
		return;
	auto [first, last] = leaving_.equal_range(*entry.leavesAt);
	for (auto it = first; it != last; ++it)
		if (it->second == key) {
			leaving_.erase(it);
			break;
		}
	entry.leavesAt.reset();
}

void RangesInForce::cancelLeaving(const Key &key, Entry &entry)
{
	entry.heldFor.reset();
	unschedule(key, entry);
}

void RangesInForce::holdUntil(const Key &key, Entry &entry, Clock::time_point at)
{
	unschedule(key, entry);
	entry.leavesAt = at;
	leaving_.emplace(at, key);
}

void RangesInForce::addOrigin(OriginRef origin, const Key &key)
{
	Entry &entry = entries_[key];
	if (std::find(entry.origins.begin(), entry.origins.end(), origin) != entry.origins.end())
		return;
	const DiscoverySource source = origin.source;
	const bool firstOfSource = std::none_of(entry.origins.begin(), entry.origins.end(),
						[&](const OriginRef &o) { return o.source == source; });
	if (firstOfSource)
		perSource_[static_cast<size_t>(source)]++;
	entry.origins.push_back(std::move(origin));
	entry.reshaped = false;
	cancelLeaving(key, entry); // back within the hold-down: it never left
	touch(key);
}

void RangesInForce::removeOrigin(const OriginRef &origin, const Key &key, Clock::time_point now,
				 Leaving leaving)
{
	const auto at = entries_.find(key);
	if (at == entries_.end())
		return;
	Entry &entry = at->second;
	const auto found = std::find(entry.origins.begin(), entry.origins.end(), origin);
	if (found == entry.origins.end())
		return;
	entry.origins.erase(found);
	const DiscoverySource source = origin.source;
	if (std::none_of(entry.origins.begin(), entry.origins.end(),
			 [&](const OriginRef &o) { return o.source == source; }))
		perSource_[static_cast<size_t>(source)]--;
	touch(key);
	if (!entry.origins.empty() || !entry.inForce)
		return; // still given, or never in force: takeChanges() drops it at once
	if (leaving != Leaving::heldDown) {
		entry.reshaped = leaving == Leaving::reshaped;
		return;
	}
	// Withdrawn while in force: it stays for the hold-down, so that a flap does not flip
	// traffic to masquerade and back.
	holdUntil(key, entry, now + holdDown_);
	entry.heldFor = source;
}

bool RangesInForce::effective(const Entry &entry, Clock::time_point now)
{
	return !entry.origins.empty() || (entry.inForce && entry.leavesAt && *entry.leavesAt > now);
}

DiscoveryChanges RangesInForce::takeChanges(Clock::time_point now, std::vector<DiscoveryMessage> &messages)
{
	// Hold-downs that ended: those prefixes are decided again below.
	while (!leaving_.empty() && leaving_.begin()->first <= now) {
		touch(leaving_.begin()->second);
		leaving_.erase(leaving_.begin());
	}
	DiscoveryChanges changes;
	for (const Key &key : dirty_) {
		const auto found = entries_.find(key);
		if (found == entries_.end())
			continue;
		const Entry &entry = found->second;
		const bool wanted = effective(entry, now);
		if (wanted && !entry.inForce)
			changes.added.push_back(prefixOf(key));
		else if (!wanted && entry.inForce)
			(entry.reshaped ? changes.reshaped : changes.removed).push_back(prefixOf(key));
	}
	const size_t after =
		inForce_ + changes.added.size() - changes.removed.size() - changes.reshaped.size();
	if (after > maxPrefixes_) {
		// The last set within the bound stays; these changes wait until it fits again.
		if (!overBound_)
			messages.push_back(DiscoveryMessage{
				true, fmt::format("nonMasqueradeDiscovery: {} prefixes discovered, more than "
						  "the {} the agent takes: the {} in force stay, and no "
						  "discovered change is applied until the sources give at most "
						  "{}; narrow the sources or within",
						  after, maxPrefixes_, inForce_, maxPrefixes_)});
		overBound_ = true;
		return {};
	}
	if (overBound_)
		messages.push_back(DiscoveryMessage{
			false, fmt::format("nonMasqueradeDiscovery: {} prefixes discovered, within the bound "
					   "of {} again: changes are applied", after, maxPrefixes_)});
	overBound_ = false;
	for (const Key &key : dirty_) {
		const auto found = entries_.find(key);
		if (found == entries_.end())
			continue;
		Entry &entry = found->second;
		entry.inForce = effective(entry, now);
		if (entry.origins.empty() && !entry.inForce)
			entries_.erase(found);
	}
	dirty_.clear();
	inForce_ = after;
	changes_ += changes.added.size() + changes.removed.size();
	return changes;
}

std::vector<Prefix> RangesInForce::inForceOf(DiscoverySource source) const
{
	std::vector<Prefix> out;
	for (const auto &[key, entry] : entries_) {
		if (!entry.inForce)
			continue;
		const bool gives = entry.origins.empty()
			? entry.heldFor == source
			: std::any_of(entry.origins.begin(), entry.origins.end(),
				      [&](const OriginRef &o) { return o.source == source; });
		if (gives)
			out.push_back(prefixOf(key));
	}
	return out;
}

std::optional<RangesInForce::Clock::time_point> RangesInForce::nextWake() const
{
	if (leaving_.empty())
		return std::nullopt;
	return leaving_.begin()->first;
}

std::vector<Prefix> RangesInForce::inForce() const
{
	std::vector<Prefix> out;
	out.reserve(inForce_);
	for (const auto &[key, entry] : entries_)
		if (entry.inForce)
			out.push_back(prefixOf(key));
	return out;
}

DiscoveredRange RangesInForce::rangeOf(const Key &key, const Entry &entry)
{
	DiscoveredRange range{prefixOf(key), {}, entry.origins.empty() ? entry.leavesAt : std::nullopt};
	for (const OriginRef &origin : entry.origins)
		range.origins.push_back(DiscoveredRange::Origin{origin.source, origin.text});
	return range;
}

std::vector<DiscoveredRange> RangesInForce::ranges() const
{
	std::vector<DiscoveredRange> out;
	for (const auto &[key, entry] : entries_)
		if (entry.inForce)
			out.push_back(rangeOf(key, entry));
	return out;
}

std::vector<DiscoveredRange> RangesInForce::covering(const Address &address) const
{
	std::vector<DiscoveredRange> out;
	for (const auto &[key, entry] : entries_) {
		const Prefix prefix = prefixOf(key);
		if (entry.inForce && prefix.network.family == address.family && prefix.first() <= address &&
		    address <= prefix.last())
			out.push_back(rangeOf(key, entry));
	}
	return out;
}

void RangesInForce::addKept(OriginRef origin, const Key &key)
{
	addOrigin(std::move(origin), key);
	// In force already (the kernel holds it): a release withdraws it into its
	// hold-down instead of dropping it as never applied.
	Entry &entry = entries_[key];
	if (!entry.inForce)
		inForce_++;
	entry.inForce = true;
}

void RangesInForce::renumber(const Key &key, const std::string &text, uint16_t from, uint16_t to)
{
	for (OriginRef &origin : entries_[key].origins)
		if (origin.input == from && origin.text == text)
			origin.input = to;
}

void RangesInForce::setHoldDown(Duration holdDown, Clock::time_point now)
{
	holdDown_ = holdDown;
	std::vector<std::pair<Key, Clock::time_point>> later;
	for (const auto &[at, key] : leaving_)
		if (at > now && at < now + holdDown)
			later.emplace_back(key, now + holdDown);
	for (const auto &[key, at] : later)
		holdUntil(key, entries_[key], at);
}

void RangesInForce::releaseHeld(const std::function<bool(const Key &)> &leaves)
{
	for (auto &[key, entry] : entries_)
		if (entry.origins.empty() && entry.leavesAt && leaves(key)) {
			cancelLeaving(key, entry);
			touch(key);
		}
}

void RangesInForce::countInto(DiscoveryStats &stats) const
{
	stats.prefixesPerSource = perSource_;
	stats.inForce = inForce_;
	for (const auto &[key, entry] : entries_)
		stats.heldDown += entry.inForce && entry.origins.empty() ? 1 : 0;
	stats.changes = changes_;
	stats.overBound = overBound_;
}

} // namespace ipmasq
