// SPDX-License-Identifier: Apache-2.0
// The discovered-range model: what the sources (routes, Flannel's subnet.env, the CNI's
// configs) say, filtered by `within`, held down when withdrawn, bounded, with the origin of
// every range. Pure logic over an injected clock: it reads nothing and logs nothing itself.
#pragma once

#include <array>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/discovery_config.h"
#include "ip-masq-agent/route_selection.h"

namespace ipmasq {

// Where a range was found. Closed: metrics, logs and --explain handle each kind.
enum class DiscoverySource : uint8_t { routes, flannel, cni };
inline constexpr size_t kDiscoverySources = 3;
// "routes", "flannelSubnetEnv", "cniConfDir": the config key that turns the source on,
// which metrics use as their label.
const char *discoverySourceName(DiscoverySource source);

// Prefixes outside `within` that are remembered, so that each is logged and counted once;
// past this, further ones are counted each time they are seen and no longer logged.
inline constexpr size_t kMaxRememberedOutside = 4096;

// One origin of a prefix, as a source found it: "route 10.244.1.0/26 proto bird via
// 192.0.2.2 dev tunl0", "FLANNEL_NETWORK in /run/flannel/subnet.env:1".
struct Sighting {
	Prefix prefix;
	std::string origin;
};

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
	bool empty() const { return added.empty() && removed.empty(); }
};

// A message for the log, made once: a prefix outside `within`, the bound reached or left,
// an input gone stale or fresh again.
struct DiscoveryMessage {
	bool warning = false; // else info
	std::string text;
};

// Where one input (the route source, one file) stands.
struct DiscoveryInput {
	DiscoverySource source = DiscoverySource::routes;
	std::string name; // "routes", or the file's path
	enum class State {
		pending, // not read yet
		current, // read: what it says is in the model
		absent,	 // a file that does not exist (yet): it says nothing
		stale,	 // its last read failed: what it said before stays
	};
	State state = State::pending;
	std::string reason; // stale: why
	size_t origins = 0; // ranges inside `within` it gives (a prefix through two next hops: two)
};

struct DiscoveryStats {
	// Prefixes that each source gives now (a withdrawn prefix held in force counts in
	// heldDown instead).
	std::array<size_t, kDiscoverySources> prefixesPerSource{};
	size_t inForce = 0;
	size_t heldDown = 0;
	uint64_t changes = 0;	    // set elements added or removed, since the start
	uint64_t outsideWithin = 0; // prefixes seen outside `within` (each once, while remembered)
	bool overBound = false;	    // more than the bound: the set in force is the last one within it
};

class DiscoveredRanges
{
public:
	using Clock = std::chrono::steady_clock;

	struct Settings {
		std::vector<Prefix> within;
		Duration holdDown = kDefaultHoldDown;
		bool ipv6 = false; // IPv6 prefixes count only when true (--enable-ipv6)
		size_t maxPrefixes = kMaxDiscoveredPrefixes;
	};
	explicit DiscoveredRanges(Settings settings);

	// Names an input the caller will read, so that it is `pending` until it has.
	void expect(DiscoverySource source, const std::string &input);

	// One origin of a prefix appears or goes (the route source, notification by
	// notification). A prefix outside `within` is noted (logged once, counted) and not
	// kept. Adding an origin twice, or removing one that is not there, changes nothing.
	void add(DiscoverySource source, const std::string &input, Sighting sighting);
	void remove(DiscoverySource source, const std::string &input, const Sighting &sighting,
		    Clock::time_point now);
	// All that `input` says now (a file read, a route dump): what it said before and does
	// not say now goes; the input is current again.
	void replace(DiscoverySource source, const std::string &input, std::vector<Sighting> sightings,
		     Clock::time_point now);
	// A file that does not exist: it says nothing (its earlier prefixes go), and is waited for.
	void markAbsent(DiscoverySource source, const std::string &input, Clock::time_point now);
	// An input that follows changes (the route source) read everything successfully.
	void markCurrent(DiscoverySource source, const std::string &input);
	// A read of `input` failed: what it said before stays in force; the input is stale.
	void markStale(DiscoverySource source, const std::string &input, const std::string &why);
	// A prefix outside `within` that a source dropped before the model: noted as add() does.
	void noteOutside(DiscoverySource source, const Sighting &sighting);
	// What the route source applied (route_selection.h), change by change, as the input
	// kRoutesInput: each selected route's origin comes and goes with it.
	void applyRoutes(const RouteUpdate &update, Clock::time_point now);
	static constexpr const char *kRoutesInput = "routes";

	// The changes to the set in force since the last call, as element diffs: prefixes that
	// came, and prefixes that left (at once if they were never in force, else once
	// withdrawn for the hold-down). Past the bound nothing changes, and the model says so.
	DiscoveryChanges takeChanges(Clock::time_point now);
	// When a withdrawn prefix leaves next; nullopt if none is held.
	std::optional<Clock::time_point> nextWake() const;

	// The set in force, sorted: what the compiler adds to nonMasqueradeCIDRs.
	std::vector<Prefix> inForce() const;
	// The same with origins (held prefixes too), for --dry-run and /readyz?verbose.
	std::vector<DiscoveredRange> ranges() const;
	// The ranges in force that hold `address`, each with every origin: --explain.
	std::vector<DiscoveredRange> covering(const Address &address) const;
	const std::vector<DiscoveryInput> &inputs() const { return inputs_; }
	// Whether every expected input has been read at least once (current, absent or stale).
	bool started() const;
	DiscoveryStats stats() const;
	std::vector<DiscoveryMessage> takeMessages();

private:
	struct Key {
		Family family = Family::ipv4;
		AddressValue network = 0;
		unsigned length = 0;
		auto operator<=>(const Key &) const = default;
	};
	struct OriginRef {
		uint16_t input = 0;
		std::string text;
		bool operator==(const OriginRef &) const = default;
	};
	struct Entry {
		std::vector<OriginRef> origins;
		bool inForce = false;
		std::optional<Clock::time_point> leavesAt;
	};

	static Key keyOf(const Prefix &prefix);
	static Prefix prefixOf(const Key &key);
	uint16_t inputIndex(DiscoverySource source, const std::string &input);
	bool admit(DiscoverySource source, const Sighting &sighting);
	void addOrigin(uint16_t input, const Key &key, std::string text);
	void replaceGiven(uint16_t input, std::vector<Sighting> sightings, Clock::time_point now);
	void removeOrigin(uint16_t input, const Key &key, const std::string &text, Clock::time_point now);
	void cancelLeaving(const Key &key, Entry &entry);
	void touch(const Key &key);
	void setState(uint16_t input, DiscoveryInput::State state, const std::string &reason = {});
	static bool effective(const Entry &entry, Clock::time_point now);
	DiscoveredRange rangeOf(const Key &key, const Entry &entry) const;

	Settings settings_;
	std::map<Key, Entry> entries_;
	std::vector<DiscoveryInput> inputs_;
	// Per input, the origins it gave, so that replace() finds what it no longer says.
	std::vector<std::set<std::pair<Key, std::string>>> given_;
	std::set<Key> dirty_; // changed since the last takeChanges()
	std::multimap<Clock::time_point, Key> leaving_;
	std::set<Key> outsideSeen_;
	std::vector<DiscoveryMessage> messages_;
	std::array<size_t, kDiscoverySources> perSource_{};
	size_t inForce_ = 0;
	uint64_t changes_ = 0;
	uint64_t outside_ = 0;
	bool overBound_ = false;
	bool outsideFull_ = false;
};

} // namespace ipmasq
