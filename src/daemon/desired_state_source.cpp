// SPDX-License-Identifier: Apache-2.0
// The daemon's desired states: the watched config, loaded with the flags and mapped with
// this node's addresses, handed over as desired states only.
#include "ip-masq-agent/daemon/desired_state_source.h"

#include <algorithm>
#include <utility>

#include "ip-masq-agent/base/log.h"

namespace ipmasq {

namespace {

void logMessages(std::vector<DiscoveryMessage> messages)
{
	for (const DiscoveryMessage &message : messages)
		message.warning ? log::warning("{}", message.text) : log::info("{}", message.text);
}

// A line per range that comes or goes, the first kLoggedRangeChanges of each kind; a burst
// (65,536 ranges back within the bound at once) ends with a line that counts the rest.
constexpr size_t kLoggedRangeChanges = 20;

void logRangeChanges(const DiscoveryChanges &changes)
{
	const auto logSome = [](const std::vector<Prefix> &prefixes, const char *one, const char *many) {
		for (size_t i = 0; i < std::min(prefixes.size(), kLoggedRangeChanges); i++)
			log::info("pod network: {} {}", prefixes[i].toString(), one);
		if (prefixes.size() > kLoggedRangeChanges)
			log::info("pod network: {} more ranges {} (the first {} are named above)",
				  prefixes.size() - kLoggedRangeChanges, many, kLoggedRangeChanges);
	};
	logSome(changes.added, "is not masqueraded from now on", "are not masqueraded from now on");
	logSome(changes.removed, "is no longer found on the node: masqueraded again",
		"are no longer found on the node: masqueraded again");
}

} // namespace

DesiredStateSource::DesiredStateSource(ConfigSource config, ConfigLocation location,
				       ConfigFlags flags, RulesetOptions rulesetOptions,
				       KeptRangesReader readKept, PodNetwork::RouteOpener openRoutes)
	: config_(std::move(config)), location_(std::move(location)), flags_(std::move(flags)),
	  rulesetOptions_(std::move(rulesetOptions)), readKept_(std::move(readKept)),
	  openRoutes_(std::move(openRoutes))
{
}

std::unique_ptr<DesiredStateSource> DesiredStateSource::open(const ConfigLocation &location,
							     const ConfigFlags &flags,
							     const RulesetOptions &rulesetOptions,
							     KeptRangesReader readKept,
							     PodNetwork::RouteOpener openRoutes)
{
	return std::unique_ptr<DesiredStateSource>(new DesiredStateSource(
		ConfigSource::open(location), location, flags, rulesetOptions, std::move(readKept),
		std::move(openRoutes)));
}

void DesiredStateSource::onWatchEvents(Clock::time_point now)
{
	config_.onWatchEvents(now);
}

std::optional<DesiredStateSource::Clock::time_point> DesiredStateSource::nextWake() const
{
	return config_.nextWake();
}

void DesiredStateSource::redeliver()
{
	config_.redeliver();
}

std::optional<DesiredStateSource::Found>
DesiredStateSource::look(ConfigLook why, Clock::time_point now,
			 const NodeAddressReader &readNodeAddresses)
{
	auto content = config_.look(why, now);
	if (auto warning = config_.takeWatchWarning())
		log::warning("{}", *warning);
	if (content && !*content)
		return std::nullopt; // nothing new
	// desiredFromContent in its two steps: a config whose desired state depends on the
	// node's addresses is kept, to make it again when they change.
	auto loaded = content ? loadConfigContent(**content, flags_)
			      : Result<LoadedConfig>(fail(content.error()));
	if (!loaded) // the reconciler keeps the last good ruleset, and this the last good config
		return Found(Result<DesiredState>(fail(loaded.error())));
	const bool depends = ipmasq::dependsOnNodeAddresses(*loaded);
	const NodeAddresses node = readNodeAddresses(depends);
	followPodNetwork(*loaded, now);
	if (podNetwork_)
		putDiscovered(loaded->config, podNetwork_->model());
	DesiredState desired = desiredFromConfig(*loaded, location_, rulesetOptions_, node);
	resyncInterval_ = desired.resyncInterval;
	subnetAddresses_ = chooseSubnetAddresses(*loaded, node);
	watchedSubnets_ = outputSubnets(*loaded);
	addressDependent_ = depends;
	keptNode_ = node;
	if (depends || podNetwork_)
		keptConfig_ = std::move(*loaded);
	else
		keptConfig_.reset();
	// A failed read is never "no address": a config with a subnet waits for the first
	// read, and whatever is in force stays meanwhile.
	addressesAwaited_ = depends && !node.known();
	if (addressesAwaited_)
		return Found(AwaitingNodeAddresses{});
	return Found(Result<DesiredState>(std::move(desired)));
}

std::optional<DesiredState> DesiredStateSource::nodeAddressesChanged(const NodeAddresses &node)
{
	// Only a config with a subnet cares.
	if (!addressDependent_)
		return std::nullopt;
	if (!node.known())
		return std::nullopt; // still never read: the config keeps waiting
	// A node's addresses change with every pod (their veths): remake the desired state,
	// which may hold 100,000 ranges, only when a subnet gives another address, or for a
	// config that waited for the first read.
	const SubnetAddresses chosen = chooseSubnetAddresses(*keptConfig_, node);
	const bool awaited = std::exchange(addressesAwaited_, false);
	if (chosen == subnetAddresses_ && !awaited)
		return std::nullopt;
	subnetAddresses_ = chosen;
	keptNode_ = node;
	DesiredState desired = remake(node);
	if (!awaited) // a config that waited is logged as the config it is
		desired.cause = DesiredState::Cause::nodeAddresses;
	return desired;
}

void DesiredStateSource::followPodNetwork(const LoadedConfig &loaded, Clock::time_point now)
{
	const auto &section = loaded.config.nonMasqueradeDiscovery;
	podNetworkRetiring_ = !section;
	if (!podNetwork_) {
		if (!section)
			return;
		const std::optional<RangesBySource> kept = keptInKernel();
		podNetwork_.emplace(*section, flags_.enableIpv6, now, kept ? &*kept : nullptr, openRoutes_);
		(void)podNetwork_->takeChanges(now); // the first read is in the desired state being made
		logMessages(podNetwork_->takeMessages());
		return;
	}
	// An edit keeps what did not change; a section that went names no source, and what
	// its sources found leaves after the hold-down.
	NonMasqueradeDiscovery next = section ? *section : podNetwork_->section();
	if (!section) {
		next.routeProtocols.clear();
		next.routeInterfaces.clear();
		next.flannelSubnetEnv.reset();
		next.cniConfDir.reset();
	}
	if (next == podNetwork_->section())
		return;
	podNetwork_->reconfigure(next, now);
	const DiscoveryChanges changes = podNetwork_->takeChanges(now); // in the desired state being made
	logMessages(podNetwork_->takeMessages()); // after the changes: what taking them said too
	logRangeChanges(changes);
	retireIfDone();
}

std::optional<RangesBySource> DesiredStateSource::keptInKernel()
{
	if (!readKept_)
		return std::nullopt;
	if (std::exchange(kernelRead_, true))
		return RangesBySource{}; // what the agent found itself since is in its model
	return readKept_();
}

void DesiredStateSource::retireIfDone()
{
	if (podNetworkRetiring_ && podNetwork_ && podNetwork_->model().stats().inForce == 0 &&
	    !podNetwork_->model().nextWake())
		podNetwork_.reset();
}

DesiredState DesiredStateSource::remake(const NodeAddresses &node)
{
	if (podNetwork_) // in place: the kept config's own lists are not copied
		putDiscovered(keptConfig_->config, podNetwork_->model());
	return desiredFromConfig(*keptConfig_, location_, rulesetOptions_, node);
}

PodNetwork::Fds DesiredStateSource::podNetworkFds() const
{
	return podNetwork_ ? podNetwork_->fds() : PodNetwork::Fds{-1, -1};
}

std::optional<DesiredState> DesiredStateSource::podNetworkReadable(Clock::time_point now)
{
	if (!podNetwork_)
		return std::nullopt;
	podNetwork_->onReadable(now);
	return podNetworkChanged(now);
}

std::optional<DesiredState> DesiredStateSource::podNetworkTimer(Clock::time_point now)
{
	if (!podNetwork_ || podNetwork_->nextWake() > now)
		return std::nullopt;
	podNetwork_->onTimer(now);
	return podNetworkChanged(now);
}

std::optional<DesiredState> DesiredStateSource::podNetworkChanged(Clock::time_point now)
{
	const DiscoveryChanges changes = podNetwork_->takeChanges(now);
	logMessages(podNetwork_->takeMessages()); // after the changes: what taking them said too
	// A config that waits for the node's addresses gets its desired state from them.
	if (changes.empty() || !keptConfig_ || addressesAwaited_)
		return std::nullopt;
	logRangeChanges(changes);
	DesiredState desired = remake(keptNode_);
	desired.cause = DesiredState::Cause::podNetwork;
	retireIfDone();
	return desired;
}

} // namespace ipmasq
