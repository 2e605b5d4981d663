// SPDX-License-Identifier: Apache-2.0
// The discovered-range model: what the sources (routes, Flannel's subnet.env, the CNI's
// configs) say, filtered by `within`, held down when withdrawn, bounded, with the origin of
// every range; what the agent's table held for each source when it started, kept until the
// source reads; the section's edits applied to what is in force. Pure logic over an
// injected clock: it reads nothing and logs nothing itself.
#pragma once

#include <span>

// Its vocabulary (the set in force, the changes, the messages, the stats) and what it
// includes.
#include "ip-masq-agent/node/ranges_in_force.h"
#include "ip-masq-agent/node/route_selection.h"

namespace ipmasq {

// Prefixes outside `within` that are remembered, so that each is logged and counted once;
// past this, further ones are counted each time they are seen and no longer logged.
inline constexpr size_t kMaxRememberedOutside = 4096;

// One origin of a prefix, as a source found it: "route 10.244.1.0/26 proto bird via
// 192.0.2.2 dev tunl0", "FLANNEL_NETWORK in /run/flannel/subnet.env:1".
struct Sighting {
	Prefix prefix;
	std::string origin;
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
// A file that does not exist yet is stale rather than waited for while the agent's table
// holds ranges of its source from before the start: this is its reason.
inline constexpr const char *kNotThereYet = "does not exist (yet)";

class DiscoveredRanges
{
public:
	using Clock = std::chrono::steady_clock;

	struct Settings {
		std::vector<Prefix> within;
		Duration holdDown = kDefaultHoldDown;
		bool ipv6 = false; // IPv6 prefixes count only when true (--enable-ipv6)
		size_t maxPrefixes = kMaxDiscoveredPrefixes;
		// Whether the caller reads the agent's table for what it held (keep()): the daemon
		// and --once. False for the modes that keep nothing (--dry-run, --explain,
		// --snat-usage): a source that cannot be read is said to be missing from their
		// output.
		bool readsKernel = true;
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
	// An input that is gone for good (a CNI file deleted, a path the section no longer
	// names): what it gave is withdrawn (held down), and its name is forgotten, so that the
	// model's size follows what exists now, never what existed once.
	void forget(DiscoverySource source, const std::string &input, Clock::time_point now);
	// Every input of `source` forgotten (its directory changed); what the agent's table
	// held for it from before the start stays until releaseKept().
	void forgetInputs(DiscoverySource source, Clock::time_point now);
	// A read of `input` failed: what it said before stays in force; the input is stale.
	void markStale(DiscoverySource source, const std::string &input, const std::string &why);
	// A prefix outside `within` that a source dropped before the model: noted as add() does.
	void noteOutside(DiscoverySource source, const Sighting &sighting);
	// What the route source applied (route_selection.h), change by change, as the input
	// kRoutesInput: each selected route's origin comes and goes with it.
	void applyRoutes(const RouteUpdate &update, Clock::time_point now);
	static constexpr const char *kRoutesInput = "routes";

	// The memory across restarts. At the start, before any read: what the agent's table
	// held for `source` (its discovered-* sets), in force at once as the source's last
	// reading, each prefix with `origin`. Prefixes outside `within` (narrowed while the
	// agent was down) are not kept; past the bound the rest is not kept, and said.
	void keep(DiscoverySource source, const std::vector<Prefix> &prefixes, const std::string &origin);
	// `source` read successfully (every input of it): the kept prefixes it no longer gives
	// are withdrawn, so they leave after the hold-down (from now: a restart restarts the
	// hold-down); those whose every address it still gives leave at once (reshaped).
	// Also how a source removed from the section lets what the table held for it go.
	void releaseKept(DiscoverySource source, Clock::time_point now);
	// How many prefixes of `source` are kept from the table and not yet released.
	size_t kept(DiscoverySource source) const;
	// What stays in force of a stale input, in words: "what it gave before stays", the
	// table's ranges kept for its source, or that nothing does.
	std::string whatStays(const DiscoveryInput &input) const;

	// The section's edits. A new holdDown applies from `now` on: a prefix already held
	// down leaves at the later of its deadline and now + `holdDown`.
	void setHoldDown(Duration holdDown, Clock::time_point now);
	// A new `within`: a prefix no longer inside it leaves at once, held down or not (the
	// operator asked); one inside a wider `within` comes when its source is read again.
	void setWithin(std::vector<Prefix> within, Clock::time_point now);

	// The changes to the set in force since the last call, as element diffs: prefixes that
	// came, and prefixes that left (at once if they were never in force, else once
	// withdrawn for the hold-down). Past the bound nothing changes, and the model says so.
	DiscoveryChanges takeChanges(Clock::time_point now) { return ranges_.takeChanges(now, messages_); }
	// When a withdrawn prefix leaves next; nullopt if none is held.
	std::optional<Clock::time_point> nextWake() const { return ranges_.nextWake(); }

	// The set in force, sorted: what the compiler adds to nonMasqueradeCIDRs.
	std::vector<Prefix> inForce() const { return ranges_.inForce(); }
	// The prefixes in force that `source` gives, or gave last if withdrawn and held down:
	// each source's discovered-* set, so that a restart knows what each had in force.
	std::vector<Prefix> inForceOf(DiscoverySource source) const { return ranges_.inForceOf(source); }
	// The same with origins (held prefixes too), for --dry-run and /readyz?verbose.
	std::vector<DiscoveredRange> ranges() const { return ranges_.ranges(); }
	// The ranges in force that hold `address`, each with every origin: --explain.
	std::vector<DiscoveredRange> covering(const Address &address) const { return ranges_.covering(address); }
	// The inputs read (the route source, the files), in the order first named.
	std::span<const DiscoveryInput> inputs() const
	{
		return std::span<const DiscoveryInput>(inputs_).subspan(kDiscoverySources);
	}
	// Whether every expected input has been read at least once (current, absent or stale).
	bool started() const;
	DiscoveryStats stats() const;
	std::vector<DiscoveryMessage> takeMessages();

private:
	using Key = RangesInForce::Key;
	uint16_t inputIndex(DiscoverySource source, const std::string &input);
	std::optional<uint16_t> findInput(DiscoverySource source, const std::string &input) const;
	void forgetIndex(uint16_t index, Clock::time_point now);
	bool admit(DiscoverySource source, const Sighting &sighting);
	RangesInForce::OriginRef originOf(uint16_t input, std::string text) const
	{
		return RangesInForce::OriginRef{input, inputs_[input].source, std::move(text)};
	}
	void replaceGiven(uint16_t input, std::vector<Sighting> sightings, Clock::time_point now);
	// What `source`'s inputs give now, in `family`, merged.
	IntervalSet givenBy(DiscoverySource source, Family family) const;
	void setState(uint16_t input, DiscoveryInput::State state, const std::string &reason = {});

	// Its holdDown and maxPrefixes only start ranges_, which holds them from then on.
	Settings settings_;
	RangesInForce ranges_;
	// The inputs: first one per source for what the agent's table held for it (keep()),
	// then the inputs read, as named. Bounded by what exists now (forget()): the route
	// source, a subnet.env, at most kMaxCniConfFiles CNI files and their directory.
	std::vector<DiscoveryInput> inputs_;
	// Per input, the origins it gave, so that replace() finds what it no longer says.
	std::vector<std::set<std::pair<Key, std::string>>> given_;
	std::set<Key> outsideSeen_;
	std::vector<DiscoveryMessage> messages_;
	uint64_t outside_ = 0;
	bool outsideFull_ = false;
	bool keptFull_ = false;
};

} // namespace ipmasq
