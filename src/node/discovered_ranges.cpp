// SPDX-License-Identifier: Apache-2.0
// The discovered-range model: origins per prefix, `within`, hold-down, the bound, element diffs.
#include "ip-masq-agent/node/discovered_ranges.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/base/counted.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

DiscoveredRanges::DiscoveredRanges(Settings settings) : settings_(std::move(settings))
{
	// One input per source for what the agent's table held for it (keep()).
	for (const DiscoverySource source : kAllDiscoverySources) {
		inputs_.push_back(DiscoveryInput{source, "the agent's table", DiscoveryInput::State::current, {}, 0});
		given_.emplace_back();
	}
}

DiscoveredRanges::Key DiscoveredRanges::keyOf(const Prefix &prefix)
{
	return Key{prefix.network.family, prefix.network.value, prefix.length};
}

Prefix DiscoveredRanges::prefixOf(const Key &key)
{
	Prefix prefix;
	prefix.network = Address{key.family, key.network};
	prefix.length = key.length;
	return prefix;
}

std::optional<uint16_t> DiscoveredRanges::findInput(DiscoverySource source, const std::string &input) const
{
	for (size_t i = kDiscoverySources; i < inputs_.size(); i++)
		if (inputs_[i].source == source && inputs_[i].name == input)
			return static_cast<uint16_t>(i);
	return std::nullopt;
}

uint16_t DiscoveredRanges::inputIndex(DiscoverySource source, const std::string &input)
{
	if (const auto found = findInput(source, input))
		return *found;
	// A handful in practice: the route source, one subnet.env, the CNI files (at most
	// kMaxCniConfFiles at a time, each its own input, forgotten when gone), so the index
	// never nears its 16 bits.
	inputs_.push_back(DiscoveryInput{source, input, DiscoveryInput::State::pending, {}, 0});
	given_.emplace_back();
	return static_cast<uint16_t>(inputs_.size() - 1);
}

void DiscoveredRanges::forget(DiscoverySource source, const std::string &input, Clock::time_point now)
{
	if (const auto index = findInput(source, input))
		forgetIndex(*index, now);
}

void DiscoveredRanges::forgetInputs(DiscoverySource source, Clock::time_point now)
{
	for (size_t i = inputs_.size(); i-- > kDiscoverySources;)
		if (inputs_[i].source == source)
			forgetIndex(static_cast<uint16_t>(i), now);
}

// What the input gave is withdrawn; its slot goes to the last input (whose origins are
// renumbered), so that the inputs stay dense and as many as exist now.
void DiscoveredRanges::forgetIndex(uint16_t index, Clock::time_point now)
{
	const DiscoveryInput &input = inputs_[index];
	if (input.origins > 0)
		messages_.push_back(DiscoveryMessage{
			false, fmt::format("nonMasqueradeDiscovery: {} ({}): gone; the {} ranges it gave are "
					   "withdrawn", escaped(input.name), discoverySourceName(input.source),
					   input.origins)});
	replaceGiven(index, {}, now);
	const auto last = static_cast<uint16_t>(inputs_.size() - 1);
	if (index != last) {
		inputs_[index] = std::move(inputs_[last]);
		given_[index] = std::move(given_[last]);
		for (const auto &[key, text] : given_[index])
			for (OriginRef &origin : entries_[key].origins)
				if (origin.input == last && origin.text == text)
					origin.input = index;
	}
	inputs_.pop_back();
	given_.pop_back();
}

void DiscoveredRanges::expect(DiscoverySource source, const std::string &input)
{
	(void)inputIndex(source, input);
}

// Whether a sighting counts: its family enabled, and inside `within` (else noted).
bool DiscoveredRanges::admit(DiscoverySource source, const Sighting &sighting)
{
	if (sighting.prefix.network.family == Family::ipv6 && !settings_.ipv6)
		return false;
	const bool within = std::any_of(settings_.within.begin(), settings_.within.end(),
					[&](const Prefix &outer) { return outer.contains(sighting.prefix); });
	if (!within)
		noteOutside(source, sighting);
	return within;
}

void DiscoveredRanges::noteOutside(DiscoverySource source, const Sighting &sighting)
{
	if (sighting.prefix.network.family == Family::ipv6 && !settings_.ipv6)
		return;
	const Key key = keyOf(sighting.prefix);
	if (outsideSeen_.count(key))
		return;
	outside_++;
	if (outsideSeen_.size() < kMaxRememberedOutside) {
		outsideSeen_.insert(key);
		std::vector<std::string> within;
		for (const Prefix &prefix : settings_.within)
			within.push_back(prefix.toString());
		messages_.push_back(DiscoveryMessage{
			true, fmt::format("nonMasqueradeDiscovery: {} ({}, from {}) is not inside within [{}]: "
					  "ignored (said once per prefix)",
					  sighting.prefix.toString(), escaped(sighting.origin),
					  discoverySourceName(source), fmt::join(within, ","))});
	} else if (!outsideFull_) {
		outsideFull_ = true;
		messages_.push_back(DiscoveryMessage{
			true, fmt::format("nonMasqueradeDiscovery: more than {} prefixes outside within: no "
					  "longer said one by one, only counted",
					  kMaxRememberedOutside)});
	}
}

void DiscoveredRanges::touch(const Key &key) { dirty_.insert(key); }

void DiscoveredRanges::unschedule(const Key &key, Entry &entry)
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

void DiscoveredRanges::cancelLeaving(const Key &key, Entry &entry)
{
	entry.heldFor.reset();
	unschedule(key, entry);
}

void DiscoveredRanges::holdUntil(const Key &key, Entry &entry, Clock::time_point at)
{
	unschedule(key, entry);
	entry.leavesAt = at;
	leaving_.emplace(at, key);
}

void DiscoveredRanges::addOrigin(uint16_t input, const Key &key, std::string text)
{
	Entry &entry = entries_[key];
	OriginRef origin{input, std::move(text)};
	if (std::find(entry.origins.begin(), entry.origins.end(), origin) != entry.origins.end())
		return;
	const DiscoverySource source = inputs_[input].source;
	const bool firstOfSource = std::none_of(entry.origins.begin(), entry.origins.end(),
						[&](const OriginRef &o) { return inputs_[o.input].source == source; });
	if (firstOfSource)
		perSource_[static_cast<size_t>(source)]++;
	entry.origins.push_back(std::move(origin));
	entry.reshaped = false;
	cancelLeaving(key, entry); // back within the hold-down: it never left
	touch(key);
}

void DiscoveredRanges::removeOrigin(uint16_t input, const Key &key, const std::string &text,
				    Clock::time_point now, Leaving leaving)
{
	const auto found = entries_.find(key);
	if (found == entries_.end())
		return;
	Entry &entry = found->second;
	const auto origin = std::find(entry.origins.begin(), entry.origins.end(), OriginRef{input, text});
	if (origin == entry.origins.end())
		return;
	entry.origins.erase(origin);
	const DiscoverySource source = inputs_[input].source;
	if (std::none_of(entry.origins.begin(), entry.origins.end(),
			 [&](const OriginRef &o) { return inputs_[o.input].source == source; }))
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
	holdUntil(key, entry, now + settings_.holdDown);
	entry.heldFor = source;
}

void DiscoveredRanges::add(DiscoverySource source, const std::string &input, Sighting sighting)
{
	const uint16_t index = inputIndex(source, input);
	if (!admit(source, sighting))
		return;
	const Key key = keyOf(sighting.prefix);
	if (given_[index].emplace(key, sighting.origin).second) {
		inputs_[index].origins = given_[index].size();
		addOrigin(index, key, std::move(sighting.origin));
	}
}

void DiscoveredRanges::remove(DiscoverySource source, const std::string &input, const Sighting &sighting,
			      Clock::time_point now)
{
	const uint16_t index = inputIndex(source, input);
	const Key key = keyOf(sighting.prefix);
	if (given_[index].erase({key, sighting.origin}) == 0)
		return;
	inputs_[index].origins = given_[index].size();
	removeOrigin(index, key, sighting.origin, now);
}

void DiscoveredRanges::replaceGiven(uint16_t index, std::vector<Sighting> sightings, Clock::time_point now)
{
	const DiscoverySource source = inputs_[index].source;
	std::set<std::pair<Key, std::string>> given;
	for (Sighting &sighting : sightings)
		if (admit(source, sighting))
			given.emplace(keyOf(sighting.prefix), std::move(sighting.origin));
	for (const auto &[key, text] : given_[index])
		if (!given.count({key, text}))
			removeOrigin(index, key, text, now);
	for (const auto &[key, text] : given)
		if (!given_[index].count({key, text}))
			addOrigin(index, key, text);
	given_[index] = std::move(given);
	inputs_[index].origins = given_[index].size();
}

void DiscoveredRanges::replace(DiscoverySource source, const std::string &input,
			       std::vector<Sighting> sightings, Clock::time_point now)
{
	const uint16_t index = inputIndex(source, input);
	replaceGiven(index, std::move(sightings), now);
	setState(index, DiscoveryInput::State::current);
}

void DiscoveredRanges::markAbsent(DiscoverySource source, const std::string &input, Clock::time_point now)
{
	const uint16_t index = inputIndex(source, input);
	replaceGiven(index, {}, now);
	setState(index, DiscoveryInput::State::absent);
}

void DiscoveredRanges::markCurrent(DiscoverySource source, const std::string &input)
{
	setState(inputIndex(source, input), DiscoveryInput::State::current);
}

void DiscoveredRanges::markStale(DiscoverySource source, const std::string &input, const std::string &why)
{
	setState(inputIndex(source, input), DiscoveryInput::State::stale, why);
}

// Says each change of an input's state once: a file that is waited for, a read that failed
// (and each new reason), a read that works again.
void DiscoveredRanges::setState(uint16_t index, DiscoveryInput::State state, const std::string &reason)
{
	DiscoveryInput &input = inputs_[index];
	const DiscoveryInput::State before = input.state;
	const bool news = before != state || input.reason != reason;
	input.state = state;
	input.reason = reason;
	if (!news)
		return;
	const std::string what =
		fmt::format("nonMasqueradeDiscovery: {} ({})", escaped(input.name), discoverySourceName(input.source));
	if (state == DiscoveryInput::State::stale)
		messages_.push_back(DiscoveryMessage{true, fmt::format("{}: {}; {}", what, reason, whatStays(input))});
	else if (state == DiscoveryInput::State::absent)
		messages_.push_back(DiscoveryMessage{
			false, fmt::format("{}: does not exist (yet): waiting for it", what)});
	else if (before == DiscoveryInput::State::stale || before == DiscoveryInput::State::absent)
		messages_.push_back(DiscoveryMessage{
			false, fmt::format("{}: {}, {}", what,
					   before == DiscoveryInput::State::stale ? "read again" : "there now",
					   counted(input.origins, "range"))});
}

std::string DiscoveredRanges::whatStays(const DiscoveryInput &input) const
{
	if (input.origins > 0)
		return fmt::format("what it gave before ({}) stays in force until it reads again",
				   counted(input.origins, "range"));
	if (const size_t held = kept(input.source); held > 0)
		return fmt::format("what the agent's table held for {} when the agent started ({}) stays in "
				   "force until it reads", discoverySourceName(input.source), counted(held, "range"));
	if (!settings_.readsKernel)
		return "its ranges are missing here: only the running agent and --once keep what the agent's "
		       "table held for a source";
	return "nothing of it is in force: the agent's table held none of its ranges, and no earlier "
	       "reading of it is known";
}

void DiscoveredRanges::keep(DiscoverySource source, const std::vector<Prefix> &prefixes, const std::string &origin)
{
	const auto index = static_cast<uint16_t>(source);
	for (const Prefix &prefix : prefixes) {
		const Sighting sighting{prefix, origin};
		if (!admit(source, sighting))
			continue;
		const Key key = keyOf(prefix);
		const bool known = entries_.count(key) > 0;
		if (!known && inForce_ >= settings_.maxPrefixes) {
			if (!keptFull_)
				messages_.push_back(DiscoveryMessage{
					true, fmt::format("nonMasqueradeDiscovery: the agent's table holds more "
							  "ranges than the {} the agent takes: the rest of {} "
							  "is not kept", settings_.maxPrefixes,
							  discoverySourceName(source))});
			keptFull_ = true;
			break;
		}
		if (!given_[index].emplace(key, origin).second)
			continue;
		addOrigin(index, key, origin);
		// In force already (the kernel holds it): a release withdraws it into its
		// hold-down instead of dropping it as never applied.
		Entry &entry = entries_[key];
		if (!entry.inForce)
			inForce_++;
		entry.inForce = true;
	}
	inputs_[index].origins = given_[index].size();
}

IntervalSet DiscoveredRanges::givenBy(DiscoverySource source, Family family) const
{
	std::vector<Prefix> given;
	for (size_t i = kDiscoverySources; i < inputs_.size(); i++)
		if (inputs_[i].source == source)
			for (const auto &[key, text] : given_[i])
				if (key.family == family)
					given.push_back(prefixOf(key));
	return IntervalSet::fromPrefixes(family, given);
}

void DiscoveredRanges::releaseKept(DiscoverySource source, Clock::time_point now)
{
	const auto index = static_cast<uint16_t>(source);
	if (given_[index].empty())
		return;
	// The table's set merged adjacent prefixes (two /26 read back as one /25): what the
	// source gives now covers those without a change for traffic.
	const IntervalSet given[] = {givenBy(source, Family::ipv4), givenBy(source, Family::ipv6)};
	size_t withdrawn = 0;
	for (const auto &[key, text] : std::exchange(given_[index], {})) {
		const Prefix prefix = prefixOf(key);
		const bool covered = given[key.family == Family::ipv4 ? 0 : 1].contains(
			AddressRange{prefix.first(), prefix.last()});
		withdrawn += covered ? 0 : 1;
		removeOrigin(index, key, text, now, covered ? Leaving::reshaped : Leaving::heldDown);
	}
	messages_.push_back(DiscoveryMessage{
		false, fmt::format("nonMasqueradeDiscovery: {}: of what the agent's table held for it when the "
				   "agent started ({}), those not given now ({}) leave after the hold-down ({}); "
				   "the rest is what it gives now",
				   discoverySourceName(source), counted(inputs_[index].origins, "range"),
				   counted(withdrawn, "range"),
				   formatGoDuration(settings_.holdDown))});
	inputs_[index].origins = 0;
}

size_t DiscoveredRanges::kept(DiscoverySource source) const
{
	return inputs_[static_cast<size_t>(source)].origins;
}

void DiscoveredRanges::setHoldDown(Duration holdDown, Clock::time_point now)
{
	settings_.holdDown = holdDown;
	std::vector<std::pair<Key, Clock::time_point>> later;
	for (const auto &[at, key] : leaving_)
		if (at > now && at < now + holdDown)
			later.emplace_back(key, now + holdDown);
	for (const auto &[key, at] : later)
		holdUntil(key, entries_[key], at);
}

void DiscoveredRanges::setWithin(std::vector<Prefix> within, Clock::time_point now)
{
	settings_.within = std::move(within);
	const auto outside = [this](const Key &key) {
		const Prefix prefix = prefixOf(key);
		return std::none_of(settings_.within.begin(), settings_.within.end(),
				    [&](const Prefix &outer) { return outer.contains(prefix); });
	};
	for (uint16_t index = 0; index < inputs_.size(); index++) {
		std::vector<std::pair<Key, std::string>> leaving;
		for (const auto &given : given_[index])
			if (outside(given.first))
				leaving.push_back(given);
		for (const auto &[key, text] : leaving) {
			given_[index].erase({key, text});
			removeOrigin(index, key, text, now, Leaving::atOnce);
		}
		inputs_[index].origins = given_[index].size();
	}
	// Withdrawn ones held down leave too: the operator asked.
	for (auto &[key, entry] : entries_)
		if (entry.origins.empty() && entry.leavesAt && outside(key)) {
			cancelLeaving(key, entry);
			touch(key);
		}
}

void DiscoveredRanges::applyRoutes(const RouteUpdate &update, Clock::time_point now)
{
	for (const RouteChange &change : update.changes) {
		Sighting sighting{change.route.destination, change.route.origin()};
		if (change.added)
			add(DiscoverySource::routes, kRoutesInput, std::move(sighting));
		else
			remove(DiscoverySource::routes, kRoutesInput, sighting, now);
	}
	for (const SelectedRoute &route : update.outside)
		noteOutside(DiscoverySource::routes, Sighting{route.destination, route.origin()});
}

bool DiscoveredRanges::effective(const Entry &entry, Clock::time_point now)
{
	return !entry.origins.empty() || (entry.inForce && entry.leavesAt && *entry.leavesAt > now);
}

DiscoveryChanges DiscoveredRanges::takeChanges(Clock::time_point now)
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
	if (after > settings_.maxPrefixes) {
		// The last set within the bound stays; these changes wait until it fits again.
		if (!overBound_)
			messages_.push_back(DiscoveryMessage{
				true, fmt::format("nonMasqueradeDiscovery: {} prefixes discovered, more than "
						  "the {} the agent takes: the {} in force stay, and no "
						  "discovered change is applied until the sources give at most "
						  "{}; narrow the sources or within",
						  after, settings_.maxPrefixes, inForce_, settings_.maxPrefixes)});
		overBound_ = true;
		return {};
	}
	if (overBound_)
		messages_.push_back(DiscoveryMessage{
			false, fmt::format("nonMasqueradeDiscovery: {} prefixes discovered, within the bound "
					   "of {} again: changes are applied", after, settings_.maxPrefixes)});
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

std::vector<Prefix> DiscoveredRanges::inForceOf(DiscoverySource source) const
{
	std::vector<Prefix> out;
	for (const auto &[key, entry] : entries_) {
		if (!entry.inForce)
			continue;
		const bool gives = entry.origins.empty()
			? entry.heldFor == source
			: std::any_of(entry.origins.begin(), entry.origins.end(),
				      [&](const OriginRef &o) { return inputs_[o.input].source == source; });
		if (gives)
			out.push_back(prefixOf(key));
	}
	return out;
}

std::optional<DiscoveredRanges::Clock::time_point> DiscoveredRanges::nextWake() const
{
	if (leaving_.empty())
		return std::nullopt;
	return leaving_.begin()->first;
}

std::vector<Prefix> DiscoveredRanges::inForce() const
{
	std::vector<Prefix> out;
	out.reserve(inForce_);
	for (const auto &[key, entry] : entries_)
		if (entry.inForce)
			out.push_back(prefixOf(key));
	return out;
}

DiscoveredRange DiscoveredRanges::rangeOf(const Key &key, const Entry &entry) const
{
	DiscoveredRange range{prefixOf(key), {}, entry.origins.empty() ? entry.leavesAt : std::nullopt};
	for (const OriginRef &origin : entry.origins)
		range.origins.push_back(DiscoveredRange::Origin{inputs_[origin.input].source, origin.text});
	return range;
}

std::vector<DiscoveredRange> DiscoveredRanges::ranges() const
{
	std::vector<DiscoveredRange> out;
	for (const auto &[key, entry] : entries_)
		if (entry.inForce)
			out.push_back(rangeOf(key, entry));
	return out;
}

std::vector<DiscoveredRange> DiscoveredRanges::covering(const Address &address) const
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

bool DiscoveredRanges::started() const
{
	const auto read = inputs();
	return std::none_of(read.begin(), read.end(), [](const DiscoveryInput &input) {
		return input.state == DiscoveryInput::State::pending;
	});
}

DiscoveryStats DiscoveredRanges::stats() const
{
	DiscoveryStats stats;
	stats.prefixesPerSource = perSource_;
	for (const DiscoveryInput &input : inputs())
		stats.inputsPerSource[static_cast<size_t>(input.source)]++;
	stats.inForce = inForce_;
	for (const auto &[key, entry] : entries_)
		stats.heldDown += entry.inForce && entry.origins.empty() ? 1 : 0;
	stats.changes = changes_;
	stats.outsideWithin = outside_;
	stats.overBound = overBound_;
	return stats;
}

std::vector<DiscoveryMessage> DiscoveredRanges::takeMessages() { return std::exchange(messages_, {}); }

} // namespace ipmasq
