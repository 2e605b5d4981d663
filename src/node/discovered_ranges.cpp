// SPDX-License-Identifier: Apache-2.0
// The discovered-range model: origins per prefix, `within`, hold-down, the bound, element diffs.
#include "ip-masq-agent/node/discovered_ranges.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/base/counted.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

DiscoveredRanges::DiscoveredRanges(Settings settings)
	: settings_(std::move(settings)), ranges_(settings_.holdDown, settings_.maxPrefixes)
{
	// One input per source for what the agent's table held for it (keep()).
	for (const DiscoverySource source : kAllDiscoverySources) {
		inputs_.push_back(DiscoveryInput{source, "the agent's table", DiscoveryInput::State::current, {}, 0});
		given_.emplace_back();
	}
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
			ranges_.renumber(key, text, last, index);
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
	const Key key = RangesInForce::keyOf(sighting.prefix);
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

void DiscoveredRanges::add(DiscoverySource source, const std::string &input, Sighting sighting)
{
	const uint16_t index = inputIndex(source, input);
	if (!admit(source, sighting))
		return;
	const Key key = RangesInForce::keyOf(sighting.prefix);
	if (given_[index].emplace(key, sighting.origin).second) {
		inputs_[index].origins = given_[index].size();
		ranges_.addOrigin(originOf(index, std::move(sighting.origin)), key);
	}
}

void DiscoveredRanges::remove(DiscoverySource source, const std::string &input, const Sighting &sighting,
			      Clock::time_point now)
{
	const uint16_t index = inputIndex(source, input);
	const Key key = RangesInForce::keyOf(sighting.prefix);
	if (given_[index].erase({key, sighting.origin}) == 0)
		return;
	inputs_[index].origins = given_[index].size();
	ranges_.removeOrigin(originOf(index, sighting.origin), key, now);
}

void DiscoveredRanges::replaceGiven(uint16_t index, std::vector<Sighting> sightings, Clock::time_point now)
{
	const DiscoverySource source = inputs_[index].source;
	std::set<std::pair<Key, std::string>> given;
	for (Sighting &sighting : sightings)
		if (admit(source, sighting))
			given.emplace(RangesInForce::keyOf(sighting.prefix), std::move(sighting.origin));
	for (const auto &[key, text] : given_[index])
		if (!given.count({key, text}))
			ranges_.removeOrigin(originOf(index, text), key, now);
	for (const auto &[key, text] : given)
		if (!given_[index].count({key, text}))
			ranges_.addOrigin(originOf(index, text), key);
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
		const Key key = RangesInForce::keyOf(prefix);
		if (!ranges_.fits(key)) {
			if (!keptFull_)
				messages_.push_back(DiscoveryMessage{
					true, fmt::format("nonMasqueradeDiscovery: the agent's table holds more "
							  "ranges than the {} the agent takes: the rest of {} "
							  "is not kept", ranges_.maxPrefixes(),
							  discoverySourceName(source))});
			keptFull_ = true;
			break;
		}
		if (!given_[index].emplace(key, origin).second)
			continue;
		ranges_.addKept(originOf(index, origin), key);
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
					given.push_back(RangesInForce::prefixOf(key));
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
		const Prefix prefix = RangesInForce::prefixOf(key);
		const bool covered = given[key.family == Family::ipv4 ? 0 : 1].contains(
			AddressRange{prefix.first(), prefix.last()});
		withdrawn += covered ? 0 : 1;
		ranges_.removeOrigin(originOf(index, text), key, now,
				     covered ? RangesInForce::Leaving::reshaped : RangesInForce::Leaving::heldDown);
	}
	messages_.push_back(DiscoveryMessage{
		false, fmt::format("nonMasqueradeDiscovery: {}: of what the agent's table held for it when the "
				   "agent started ({}), those not given now ({}) leave after the hold-down ({}); "
				   "the rest is what it gives now",
				   discoverySourceName(source), counted(inputs_[index].origins, "range"),
				   counted(withdrawn, "range"),
				   formatGoDuration(ranges_.holdDown()))});
	inputs_[index].origins = 0;
}

size_t DiscoveredRanges::kept(DiscoverySource source) const
{
	return inputs_[static_cast<size_t>(source)].origins;
}

void DiscoveredRanges::setHoldDown(Duration holdDown, Clock::time_point now)
{
	ranges_.setHoldDown(holdDown, now);
}

void DiscoveredRanges::setWithin(std::vector<Prefix> within, Clock::time_point now)
{
	settings_.within = std::move(within);
	const auto outside = [this](const Key &key) {
		const Prefix prefix = RangesInForce::prefixOf(key);
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
			ranges_.removeOrigin(originOf(index, text), key, now, RangesInForce::Leaving::atOnce);
		}
		inputs_[index].origins = given_[index].size();
	}
	// Withdrawn ones held down leave too: the operator asked.
	ranges_.releaseHeld(outside);
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
	ranges_.countInto(stats);
	for (const DiscoveryInput &input : inputs())
		stats.inputsPerSource[static_cast<size_t>(input.source)]++;
	stats.outsideWithin = outside_;
	return stats;
}

std::vector<DiscoveryMessage> DiscoveredRanges::takeMessages() { return std::exchange(messages_, {}); }

} // namespace ipmasq
