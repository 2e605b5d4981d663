// SPDX-License-Identifier: Apache-2.0
// From the config's content to the desired state: load, merge and check, then map.
#include "ip-masq-agent/compile/desired_state.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/node/pod_network.h"
#include "ip-masq-agent/config/policy.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

namespace ipmasq {

namespace {

bool ownsAddress(const std::vector<NodeAddress> &addresses, const Address &address)
{
	return std::any_of(addresses.begin(), addresses.end(),
			   [&](const NodeAddress &own) { return own.address == address; });
}

// An outputAddress (or range) that is not this node's works only if something routes the
// replies back here (a load balancer, a route on the router): worth a warning, not an
// error.
std::optional<std::string> notOwnedWarning(const Config &config, Family family,
					    const std::vector<NodeAddress> &addresses)
{
	const std::optional<OutputAddress> &output = config.outputAddressOf(family);
	if (!output || output->form == OutputAddress::Form::subnet)
		return std::nullopt;
	// A range is this node's if its first address is: the rest is the operator's plan.
	if (ownsAddress(addresses, output->range.first))
		return std::nullopt;
	return fmt::format("{}: {}: {} is not an address of this node: replies to it reach the "
			   "node only if the network routes them here (a load balancer, a route "
			   "on the router); the agent SNATs to it as configured",
			   describeOrigin(config, output->origin), outputAddressKey(family), output->toString());
}

} // namespace

bool dependsOnNodeAddresses(const LoadedConfig &loaded)
{
	for (const Family family : {Family::ipv4, Family::ipv6})
		if (const auto &output = loaded.config.outputAddressOf(family);
		    output && output->form == OutputAddress::Form::subnet)
			return true;
	return false;
}

std::vector<Prefix> outputSubnets(const LoadedConfig &loaded)
{
	std::vector<Prefix> subnets;
	for (const Family family : {Family::ipv4, Family::ipv6})
		if (const std::optional<OutputAddress> &output = loaded.config.outputAddressOf(family);
		    output && output->form == OutputAddress::Form::subnet)
			subnets.push_back(Prefix{output->range.first, output->prefixLength, {}, {}});
	return subnets;
}

SubnetAddresses chooseSubnetAddresses(const LoadedConfig &loaded, const NodeAddresses &node)
{
	SubnetAddresses chosen;
	for (const Prefix &subnet : outputSubnets(loaded))
		if (auto picked = pickAddressIn(subnet, node.addresses))
			(subnet.network.family == Family::ipv4 ? chosen.ipv4 : chosen.ipv6) =
				picked->address;
	return chosen;
}

DesiredState desiredFromConfig(const LoadedConfig &loaded, const ConfigLocation &location,
			       const RulesetOptions &options, const NodeAddresses &node)
{
	const Config &config = loaded.config;
	std::vector<std::string> warnings = loaded.warnings;
	const SubnetAddresses chosen = chooseSubnetAddresses(loaded, node);
	std::vector<SubnetChoice> subnets;
	for (const Family family : {Family::ipv4, Family::ipv6}) {
		const std::optional<OutputAddress> &output = config.outputAddressOf(family);
		if (!output)
			continue;
		if (output->form != OutputAddress::Form::subnet) {
			if (node.known())
				if (auto warning = notOwnedWarning(config, family, node.addresses))
					warnings.push_back(std::move(*warning));
			continue;
		}
		subnets.push_back(SubnetChoice{family,
					       fmt::format("{} ({}, {})", output->toString(), outputAddressKey(family),
							   describeOrigin(config, output->origin)),
					       chosen.of(family)});
	}
	std::vector<std::string> discovered;
	for (const Prefix &prefix : config.nonMasqueradeCIDRs)
		if (prefix.origin.discovered())
			discovered.push_back(fmt::format("{}: {}", prefix.toString(), describeOrigin(config, prefix.origin)));
	return DesiredState{buildRuleset(config, options, chosen),
			    DesiredState::Cause::config,
			    config.resyncInterval,
			    describeConfigOrigin(location, loaded),
			    describeConfig(config),
			    std::move(warnings),
			    loaded.unknownKeys,
			    std::move(subnets),
			    SamplePlan{samplePackets(config, options.enableIpv6), decidingEntries(config)},
			    std::move(discovered)};
}

Result<DesiredState> desiredFromContent(const ConfigContent &content,
					const ConfigLocation &location, const ConfigFlags &flags,
					const RulesetOptions &options, const NodeAddresses &node)
{
	auto loaded = loadConfigContent(content, flags);
	if (!loaded)
		return fail(loaded.error());
	return desiredFromConfig(*loaded, location, options, node);
}

Result<NodeAddresses> addressesForConfig(const LoadedConfig &loaded,
					 const Result<std::vector<NodeAddress>> &read)
{
	if (read || !dependsOnNodeAddresses(loaded))
		return NodeAddresses::fromRead(read);
	std::string subnets;
	for (const Prefix &subnet : outputSubnets(loaded))
		subnets += (subnets.empty() ? "" : ", ") + subnet.toString();
	return fail(fmt::format("{}: the outputAddress subnet ({}) cannot be chosen without them "
				"(a read that failed is not \"no address\"); nothing is applied, try "
				"again", read.error().message, subnets),
		    read.error().errnum);
}

Result<DesiredState> desiredFromLocation(const ConfigLocation &location, const ConfigFlags &flags,
					 const RulesetOptions &options,
					 const Result<std::vector<NodeAddress>> &read, const KeptRangesReader &readKept)
{
	auto content = readConfigContent(location);
	if (!content)
		return fail(content.error());
	return desiredFromReadContent(*content, location, flags, options, read, readKept);
}

Result<DesiredState> desiredFromReadContent(const ConfigContent &content, const ConfigLocation &location,
					    const ConfigFlags &flags, const RulesetOptions &options,
					    const Result<std::vector<NodeAddress>> &read,
					    const KeptRangesReader &readKept)
{
	auto loaded = loadConfigContent(content, flags);
	if (!loaded)
		return fail(loaded.error());
	auto node = addressesForConfig(*loaded, read);
	if (!node)
		return fail(node.error());
	return desiredFromConfig(withPodNetworkReadOnce(std::move(*loaded), flags.enableIpv6, readKept), location,
				 options, *node);
}

} // namespace ipmasq
