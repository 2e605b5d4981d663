// SPDX-License-Identifier: Apache-2.0
// The set in force of the discovered-range model: each prefix with its origins, which are
// in force, which are withdrawn and held down until when, the bound, and the element diffs
// since the last look. It knows an input by its index only; the model names them.
#pragma once

#include <array>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/config/discovery_config.h"

namespace ipmasq {

// A prefix in force, as --explain, --dry-run and /readyz?verbose list it.
struct DiscoveredRange {
	Prefix prefix;
	struct Origin {
		DiscoverySource source;
		std::string text;
	};
	std::vector<Origin> origins; // empty: withdrawn, held until `leavesAt`
	std::optional<std::chrono::steady_clock::time_point> leavesAt;
};

// What changed in the set in force since the last takeChanges(): element diffs.
struct DiscoveryChanges {
	std::vector<Prefix> added;
	std::vector<Prefix> removed;
	// Ranges the agent's table held from before the start that their source now gives
	// otherwise shaped (a /25 kept, two /26 read): they leave with no hold-down and no
	// change for traffic, the source's ranges covering every address of them.
	std::vector<Prefix> reshaped;
	bool empty() const { return added.empty() && removed.empty() && reshaped.empty(); }
};

// A message for the log, made once: a prefix outside `within`, the bound reached or left,
// an input gone stale or fresh again.
struct DiscoveryMessage {
	bool warning = false; // else info
	std::string text;
};

struct DiscoveryStats {
	// Prefixes that each source gives now (a withdrawn prefix held in force counts in
	// heldDown instead).
	std::array<size_t, kDiscoverySources> prefixesPerSource{};
	// Inputs followed per source: the route source, subnet.env, each CNI file present (and
	// the CNI directory while it cannot be listed). A name that is gone is forgotten.
	std::array<size_t, kDiscoverySources> inputsPerSource{};
	size_t inForce = 0;
	size_t heldDown = 0;
	uint64_t changes = 0;	    // set elements added or removed, since the start
	uint64_t outsideWithin = 0; // prefixes seen outside `within` (each once, while remembered)
	bool overBound = false;	    // more than the bound: the set in force is the last one within it
};

class RangesInForce
{
public:
	using Clock = std::chrono::steady_clock;
	// A prefix as the set orders it.
	struct Key {
		Family family = Family::ipv4;
		AddressValue network = 0;
		unsigned length = 0;
		auto operator<=>(const Key &) const = default;
	};
	// An origin: the input (its index in the model) and its source, which never changes.
	struct OriginRef {
		uint16_t input = 0;
		DiscoverySource source = DiscoverySource::routes;
		std::string text;
		bool operator==(const OriginRef &) const = default;
	};
	static Key keyOf(const Prefix &prefix);
	static Prefix prefixOf(const Key &key);

	RangesInForce(Duration holdDown, size_t maxPrefixes)
		: holdDown_(holdDown), maxPrefixes_(maxPrefixes)
	{
	}

	void addOrigin(OriginRef origin, const Key &key);
	// How a prefix in force that loses its last origin leaves: after the hold-down, at
	// once (`within` narrowed), or at once as reshaped (a kept prefix its source covers).
	enum class Leaving { heldDown, atOnce, reshaped };
	void removeOrigin(const OriginRef &origin, const Key &key, Clock::time_point now,
			  Leaving leaving = Leaving::heldDown);
	// Whether the set in force has room for `key` (one in it already has).
	bool fits(const Key &key) const { return entries_.count(key) > 0 || inForce_ < maxPrefixes_; }
	// An origin of a prefix that the agent's table holds already (DiscoveredRanges::keep()).
	void addKept(OriginRef origin, const Key &key);
	// The input at index `from` is now at `to` (the model keeps its inputs dense).
	void renumber(const Key &key, const std::string &text, uint16_t from, uint16_t to);
	// DiscoveredRanges::setHoldDown(), and the withdrawn prefixes held down that leave at
	// once (`within` narrowed).
	void setHoldDown(Duration holdDown, Clock::time_point now);
	Duration holdDown() const { return holdDown_; }
	size_t maxPrefixes() const { return maxPrefixes_; }
	void releaseHeld(const std::function<bool(const Key &)> &leaves);

	// DiscoveredRanges::takeChanges(), nextWake(), inForce(), inForceOf(), ranges(),
	// covering() and its part of stats().
	DiscoveryChanges takeChanges(Clock::time_point now, std::vector<DiscoveryMessage> &messages);
	std::optional<Clock::time_point> nextWake() const;
	std::vector<Prefix> inForce() const;
	std::vector<Prefix> inForceOf(DiscoverySource source) const;
	std::vector<DiscoveredRange> ranges() const;
	std::vector<DiscoveredRange> covering(const Address &address) const;
	void countInto(DiscoveryStats &stats) const;

private:
	struct Entry {
		std::vector<OriginRef> origins;
		bool inForce = false;
		std::optional<Clock::time_point> leavesAt;
		// Withdrawn and held: the source whose origin went last (its discovered-* set
		// keeps it until it leaves).
		std::optional<DiscoverySource> heldFor;
		// A kept prefix released while its source covers it (DiscoveryChanges::reshaped).
		bool reshaped = false;
	};
	// Its hold-down ends at `at` (unschedule: it has none).
	void holdUntil(const Key &key, Entry &entry, Clock::time_point at);
	void unschedule(const Key &key, Entry &entry);
	void cancelLeaving(const Key &key, Entry &entry);
	void touch(const Key &key);
	static bool effective(const Entry &entry, Clock::time_point now);
	static DiscoveredRange rangeOf(const Key &key, const Entry &entry);

	Duration holdDown_;
	size_t maxPrefixes_;
	std::map<Key, Entry> entries_;
	std::set<Key> dirty_; // changed since the last takeChanges()
	std::multimap<Clock::time_point, Key> leaving_;
	std::array<size_t, kDiscoverySources> perSource_{};
	size_t inForce_ = 0;
	uint64_t changes_ = 0;
	bool overBound_ = false;
};

} // namespace ipmasq
