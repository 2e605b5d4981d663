// SPDX-License-Identifier: Apache-2.0
// The pod network found from the node itself (the config's nonMasqueradeDiscovery): the
// sources it names, read into the discovered-range model and followed. Routes follow
// rtnetlink notifications (netlink/route_source.h); Flannel's subnet.env and the CNI's
// config directory are read again when inotify says their directory changed, and on a
// slow timer as a safety net. A directory that does not exist (yet), or that was deleted,
// is waited for by a watch on its nearest existing parent, so that its making is seen at
// once. A read that fails keeps what the input said before (the model calls it stale) and
// is tried again on the timer; at the start, that is what the agent's table held for the
// source (its discovered-* set). The daemon polls fds(), calls onReadable() and onTimer()
// at nextWake(), and hands inForce() to the desired state when takeChanges() is not empty.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/node/discovered_ranges.h"
#include "ip-masq-agent/config/discovery_config.h"
#include "ip-masq-agent/node/route_source.h"
#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq {

struct Config; // config.h: the loop's headers include no config header
struct LoadedConfig;

class PodNetwork
{
public:
	using Clock = std::chrono::steady_clock;
	// Opens the route source: RouteSource::open, or a test's fault around it.
	using RouteOpener = std::function<Result<RouteSource>(RouteFilter)>;
	static Result<RouteSource> openRoutes(RouteFilter filter) { return RouteSource::open(std::move(filter)); }

	// Reads every source once (the first read is the truth: no hold-down). `kept`: what
	// the agent's table held for each source when the agent started (the daemon,
	// --once): in force until its source reads, then what the source no longer gives is
	// held down from now; nullptr for the modes that keep nothing. Never fails:
	// an input that cannot be read is stale, and tried again.
	PodNetwork(const NonMasqueradeDiscovery &section, bool ipv6, Clock::time_point now,
		   const RangesBySource *kept = nullptr, RouteOpener openRoutes = &PodNetwork::openRoutes);

	const NonMasqueradeDiscovery &section() const { return section_; }
	bool ipv6() const { return ipv6_; }
	// An edit of the section: what did not change keeps its ranges, hold-downs and stale
	// state. A new holdDown applies from now (DiscoveredRanges::setHoldDown); `within`
	// narrowed applies at once; a source the section no longer names, or a path it
	// names no more, has its ranges withdrawn (held down); a source added, or one whose
	// routes filter changed, is read.
	void reconfigure(const NonMasqueradeDiscovery &section, Clock::time_point now);
	// The descriptors to poll, in fixed slots: the route notifications, the files'
	// directory watch; -1 for one that is not open (poll() skips it).
	using Fds = std::array<int, 2>;
	Fds fds() const;
	// Something to read on one of fds().
	void onReadable(Clock::time_point now);
	// At nextWake(): hold-downs that end, failed reads tried again, the files' safety net.
	void onTimer(Clock::time_point now);
	Clock::time_point nextWake() const;

	// The changes to the ranges in force since the last call (element diffs).
	DiscoveryChanges takeChanges(Clock::time_point now) { return model_.takeChanges(now); }
	const DiscoveredRanges &model() const { return model_; }
	// What the model has to say in the log, once each.
	std::vector<DiscoveryMessage> takeMessages() { return model_.takeMessages(); }

	// The files are read again at least this often, and a failed read is tried again.
	static constexpr std::chrono::seconds kRetryPeriod{10};

private:
	// Opens the route source if it is not open yet, and reads every route.
	void followRoutes(Clock::time_point now);
	void readRoutes(bool reread, Clock::time_point now);
	void readFiles(Clock::time_point now, const char *why);
	void readFlannel(const std::string &path, Clock::time_point now);
	void readCni(const std::string &dir, Clock::time_point now);
	// A new inotify instance watching each file source's directory, or while one does
	// not exist, its nearest existing parent. True when every directory is watched.
	bool watchDirectories();
	// Drains the watch; true when a watched directory went or a parent's entry on the
	// way to a missing one changed: the watches are set again.
	bool drainWatch(bool &changed);

	NonMasqueradeDiscovery section_;
	bool ipv6_;
	DiscoveredRanges model_;
	RouteOpener openRoutes_;
	std::optional<RouteSource> routes_;
	std::string routesError_; // why the route source could not be opened
	bool routesStale_ = false;
	// The route source was opened and not read yet: its first reading replaces what the
	// model holds of the routes (another filter's).
	bool routesFresh_ = true;

	// One watch of the inotify instance: a source's directory, or a parent of a missing
	// one, whose entry `next` leads on to it.
	struct Watch {
		int wd;
		bool parent;
		std::string next;
	};
	UniqueFd watch_; // inotify on the files' directories (invalid: none to watch)
	std::vector<Watch> watches_;
	bool allWatched_ = false;
	Clock::time_point lastRead_;
};

// The ranges `model` has in force put into the config's nonMasqueradeCIDRs (a union; they do
// not count toward cidrLimit), each with its origins for --explain, in place of the ones put
// before (a pod network change never copies the config's own lists: 100,000 CIDRs, say),
// and each source's into discoveredBySource (the table's discovered-* sets).
void putDiscovered(Config &config, const DiscoveredRanges &model);
// For the one-shot modes (--once, --dry-run, --explain): the config with its pod network
// read once, as the daemon's first read (what the sources say is logged); unchanged without
// a nonMasqueradeDiscovery section. `readKept` (--once): what the agent's table holds for
// each source, kept for a source that cannot be read; a source that reads is the truth (no
// hold-down: nothing would end it). Without it no kernel state is read, and a source that
// cannot be read is said to be missing from the output.
LoadedConfig withPodNetworkReadOnce(LoadedConfig loaded, bool ipv6,
				    const std::function<RangesBySource()> &readKept = {});

} // namespace ipmasq
