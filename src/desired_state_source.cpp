// SPDX-License-Identifier: Apache-2.0
// The daemon's desired states: the watched config, loaded with the flags and mapped with
// this node's addresses, handed over as desired states only.
#include "ip-masq-agent/desired_state_source.h"

#include <utility>

#include "ip-masq-agent/log.h"

namespace ipmasq {

DesiredStateSource::DesiredStateSource(ConfigSource config, ConfigLocation location,
				       ConfigFlags flags, RulesetOptions rulesetOptions)
	: config_(std::move(config)), location_(std::move(location)), flags_(std::move(flags)),
	  rulesetOptions_(std::move(rulesetOptions))
{
}

std::unique_ptr<DesiredStateSource> DesiredStateSource::open(const AgentOptions &options)
{
	return std::unique_ptr<DesiredStateSource>(new DesiredStateSource(
		ConfigSource::open(options.config), options.config, options.configFlags,
		options.ruleset));
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
	DesiredState desired = desiredFromConfig(*loaded, location_, rulesetOptions_, node);
	resyncInterval_ = desired.resyncInterval;
	subnetAddresses_ = chooseSubnetAddresses(*loaded, node);
	watchedSubnets_ = outputSubnets(*loaded);
	if (depends)
		addressDependentConfig_ = std::move(*loaded);
	else
		addressDependentConfig_.reset();
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
	if (!addressDependentConfig_)
		return std::nullopt;
	if (!node.known())
		return std::nullopt; // still never read: the config keeps waiting
	// A node's addresses change with every pod (their veths): remake the desired state,
	// which may hold 100,000 ranges, only when a subnet gives another address, or for a
	// config that waited for the first read.
	const SubnetAddresses chosen = chooseSubnetAddresses(*addressDependentConfig_, node);
	const bool awaited = std::exchange(addressesAwaited_, false);
	if (chosen == subnetAddresses_ && !awaited)
		return std::nullopt;
	subnetAddresses_ = chosen;
	DesiredState desired = desiredFromConfig(*addressDependentConfig_, location_,
						 rulesetOptions_, node);
	if (!awaited) // a config that waited is logged as the config it is
		desired.cause = DesiredState::Cause::nodeAddresses;
	return desired;
}

} // namespace ipmasq
