// SPDX-License-Identifier: Apache-2.0
// The pod network found from the node itself (the config's nonMasqueradeDiscovery): the
// sources it names, read into the discovered-range model and followed. Routes follow
// rtnetlink notifications (netlink/route_source.h); Flannel's subnet.env and the CNI's
// config directory are read again when inotify says their directory changed, and on a
// slow timer as a safety net (a directory that does not exist yet cannot be watched). A
// read that fails keeps what the input said before (the model calls it stale) and is
// tried again on the timer. The daemon polls fds(), calls onReadable() and onTimer() at
// nextWake(), and hands inForce() to the desired state when takeChanges() is not empty.
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/discovered_ranges.h"
#include "ip-masq-agent/discovery_config.h"
#include "ip-masq-agent/netlink/route_source.h"
#include "ip-masq-agent/unique_fd.h"

namespace ipmasq {

struct Config; // config.h: the loop's headers include no config header
struct LoadedConfig;

class PodNetwork
{
public:
	using Clock = std::chrono::steady_clock;

	// Reads every source once (the first read is the truth: no hold-down). Never fails:
	// an input that cannot be read is stale, and tried again.
	PodNetwork(const NonMasqueradeDiscovery &section, bool ipv6, Clock::time_point now);

	const NonMasqueradeDiscovery &section() const { return section_; }
	bool ipv6() const { return ipv6_; }
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
	void followRoutes();
	void readRoutes(bool reread);
	void readFiles(Clock::time_point now);
	void readFlannel(const std::string &path, Clock::time_point now);
	void readCni(const std::string &dir, Clock::time_point now);
	void watchDirectories();

	NonMasqueradeDiscovery section_;
	bool ipv6_;
	DiscoveredRanges model_;
	std::optional<RouteSource> routes_;
	std::string routesError_; // why the route source could not be opened
	bool routesStale_ = false;
	UniqueFd watch_; // inotify on the files' directories (invalid: none to watch yet)
	size_t watched_ = 0; // directories watched
	Clock::time_point lastRead_;
};

// The ranges `model` has in force put into the config's nonMasqueradeCIDRs (a union; they do
// not count toward cidrLimit), each with its origins for --explain, in place of the ones put
// before: a pod network change never copies the config's own lists (100,000 CIDRs, say).
void putDiscovered(Config &config, const DiscoveredRanges &model);
// For the one-shot modes (--once, --dry-run, --explain): the config with its pod network
// read once, as the daemon's first read (what the sources say is logged); unchanged without
// a nonMasqueradeDiscovery section.
LoadedConfig withPodNetworkReadOnce(LoadedConfig loaded, bool ipv6);

} // namespace ipmasq
