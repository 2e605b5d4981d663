// SPDX-License-Identifier: Apache-2.0
// The daemon's desired states: the watched config, loaded with the flags and mapped with
// this node's addresses, handed over as desired states only.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/config/config_source.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/node/pod_network.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

// Everything the daemon would otherwise need config types for: the ConfigSource (its
// inotify watch, debounce and read lease), the config flags, the ruleset options, and the
// last good config while its desired state depends on this node's addresses. The daemon's
// loop polls fd(), calls onWatchEvents() when it is readable, look() on every turn and
// nodeAddressesChanged() when its view of the addresses changes; what it gets back is a
// desired state (or why there is none) for the Reconciler, never a config.
class DesiredStateSource
{
public:
	using Clock = std::chrono::steady_clock;

	// This node's addresses as the daemon knows them, read first when they are not known to
	// be current. `needed`: the config's desired state depends on them, so a failed read is
	// retried and reported (a failed read is never "no address").
	using NodeAddressReader = std::function<NodeAddresses(bool needed)>;

	// A good config whose desired state waits for a first read of this node's addresses:
	// nothing is made from addresses that could not be read, and what is in force stays.
	struct AwaitingNodeAddresses {};
	// What a look found that is new: a config that waits for the addresses, or what the
	// reconciler gets (the desired state, or why there is none: a bad or unreadable config,
	// the last good config staying in force).
	using Found = std::variant<AwaitingNodeAddresses, Result<DesiredState>>;

	// Never fails: without inotify the config is looked at by the resync only, and the
	// first look() logs why. `readKept` says what the agent's table holds for each pod
	// network source (the table's discovered-* sets): called once, when the pod network is
	// first followed, so that a source that cannot be read keeps what it had in force when
	// the agent last ran; without it nothing is kept across a restart. `openRoutes` opens
	// the pod network's route source (a test's fault wraps it).
	static std::unique_ptr<DesiredStateSource> open(const ConfigLocation &location, const ConfigFlags &flags,
							const RulesetOptions &rulesetOptions,
							KeptRangesReader readKept = {},
							PodNetwork::RouteOpener openRoutes = &PodNetwork::openRoutes);

	// The options every desired state is built with (the table's name among them), and
	// where the config is, for the reconciler's adoption and log.
	const RulesetOptions &rulesetOptions() const { return rulesetOptions_; }
	const std::string &path() const { return location_.path; }

	// The config watch's descriptor, and its pending events drained without blocking.
	int fd() const { return config_.fd(); }
	void onWatchEvents(Clock::time_point now);
	// When look(ConfigLook::ifDue) has something to do next; nullopt: nothing pending. The
	// pod network's own deadlines are podNetwork()->nextWake(), which the loop spaces.
	std::optional<Clock::time_point> nextWake() const;
	// The daemon could not take in what look() gave last (it ran out of memory): the next
	// look reads the config again, even if unchanged.
	void redeliver();

	// Looks at the config (reads it if `why` or the watch says so); nullopt when there is
	// nothing new. `readNodeAddresses` is called once for each good config.
	std::optional<Found> look(ConfigLook why, Clock::time_point now,
				  const NodeAddressReader &readNodeAddresses);
	// With this node's addresses as the daemon now knows them: the new desired state when
	// they change what an outputAddress subnet gives, or a config waited for them.
	std::optional<DesiredState> nodeAddressesChanged(const NodeAddresses &node);

	// Whether the last good config's desired state depends on this node's addresses.
	bool dependsOnNodeAddresses() const { return addressDependent_; }

	// The pod network found on the node, when the last good config has a
	// nonMasqueradeDiscovery section (pod_network.h), or had one whose ranges are still
	// held down: its descriptors for poll(), what to do when one is readable or at its
	// wake time, each giving the new desired state when the ranges in force changed.
	const PodNetwork *podNetwork() const { return podNetwork_ ? &*podNetwork_ : nullptr; }
	PodNetwork::Fds podNetworkFds() const;
	std::optional<DesiredState> podNetworkReadable(Clock::time_point now);
	std::optional<DesiredState> podNetworkTimer(Clock::time_point now);
	// The last good config's outputAddress subnets: the only addresses worth following.
	const std::vector<Prefix> &watchedSubnets() const { return watchedSubnets_; }
	// The last good config's resyncInterval (the default until one was read).
	Duration resyncInterval() const { return resyncInterval_; }

private:
	DesiredStateSource(ConfigSource config, ConfigLocation location, ConfigFlags flags,
			   RulesetOptions rulesetOptions, KeptRangesReader readKept,
			   PodNetwork::RouteOpener openRoutes);

	ConfigSource config_;
	ConfigLocation location_;
	ConfigFlags flags_;
	RulesetOptions rulesetOptions_;
	Duration resyncInterval_ = kDefaultResyncInterval;

	// Starts following the pod network for a new good config, or applies the edit of its
	// section (what did not change is kept), or, for a config without the section, lets
	// what it found go after the hold-down.
	void followPodNetwork(const LoadedConfig &loaded, Clock::time_point now);
	// What the agent's table held for each source when it started (once; after that,
	// nothing); nullopt without a reader.
	std::optional<RangesBySource> keptInKernel();
	// Stops following a pod network whose section went, once nothing it found is in force.
	void retireIfDone();
	// The kept config's desired state again, with the discovered ranges in force.
	DesiredState remake(const NodeAddresses &node);
	std::optional<DesiredState> podNetworkChanged(Clock::time_point now);

	// The last good config, kept only while its desired state depends on this node's
	// addresses or on the pod network, with its subnets and what they gave;
	// `addressesAwaited_` while it waits for a first read.
	std::optional<LoadedConfig> keptConfig_;
	bool addressDependent_ = false;
	NodeAddresses keptNode_; // the addresses keptConfig_'s desired state was made with
	std::optional<PodNetwork> podNetwork_;
	// The last good config has no nonMasqueradeDiscovery: podNetwork_ names no source and
	// goes once its ranges left.
	bool podNetworkRetiring_ = false;
	KeptRangesReader readKept_;
	bool kernelRead_ = false;
	PodNetwork::RouteOpener openRoutes_;
	std::vector<Prefix> watchedSubnets_;
	SubnetAddresses subnetAddresses_;
	bool addressesAwaited_ = false;
};

} // namespace ipmasq
