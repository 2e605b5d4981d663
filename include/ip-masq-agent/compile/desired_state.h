// SPDX-License-Identifier: Apache-2.0
// The desired state: what the reconciler makes the kernel hold, and the few settings the loop
// needs, made from the config by one pure function that every mode shares.
//
// The daemon, --once, --dry-run and --explain all turn the config into a DesiredState
// here; the reconciler receives only this value, never file bytes or config types.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/model/sampled_packet.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

// The config's types, for the functions that make a DesiredState; whoever only consumes
// one (the reconciler) needs none of their headers.
struct ConfigContent;
struct ConfigFlags;
struct ConfigLocation;
struct LoadedConfig;
struct RangesBySource;

// What the config asks of this node's addresses: an outputAddress subnet of a family,
// and this node's address in it, if it has one (without, the family is masqueraded and
// the agent is not ready: the config cannot be honoured here).
struct SubnetChoice {
	Family family;
	std::string subnet; // "203.0.113.0/24 (outputAddress, FILE:LINE)", for messages
	std::optional<Address> address;
	bool operator==(const SubnetChoice &) const = default;
};

struct DesiredState {
	// What made it: a config read (its lines are logged), or a change of this node's
	// addresses with the same config (only what changed is).
	enum class Cause { config, nodeAddresses, podNetwork };

	Ruleset ruleset;
	Cause cause = Cause::config;
	// How often the loop looks at the config and the kernel without being told to.
	Duration resyncInterval{};
	// Where it came from, for the log: the file, the directory and its files, or the
	// built-in defaults and why.
	std::string origin;
	// The config in one line, for the log: "nonMasqueradeCIDRs=[...] cidrLimit=64 ...".
	std::string summary;
	// Findings to log that did not make it invalid (unknown keys, a raised interval, an
	// outputAddress that is not this node's).
	std::vector<std::string> warnings;
	// Of those, the unknown keys' (LoadedConfig::unknownKeys): /readyz?verbose shows them
	// and a gauge counts them while the config is in force.
	std::vector<std::string> unknownKeys;
	// The outputAddress subnets in use, one per family, and what this node has in each.
	std::vector<SubnetChoice> subnets;
	// The packets the NAT conflict check evaluates against this ruleset and other tables,
	// and what names the entries of those it samples where other tables' rules match.
	SamplePlan samples;
	// The pod network found on the node, in force: "10.244.0.0/16: FLANNEL_NETWORK in
	// /run/flannel/subnet.env:1" (--dry-run prints them as comments).
	std::vector<std::string> discovered;
};

// Whether the config's desired state depends on this node's addresses (an outputAddress
// subnet): then it is made again when the address chosen in a subnet changes.
bool dependsOnNodeAddresses(const LoadedConfig &loaded);

// The config's outputAddress subnets (none, one or two: a family each): the only
// addresses whose changes can change its desired state.
std::vector<Prefix> outputSubnets(const LoadedConfig &loaded);

// This node's address in each outputAddress subnet of the config (pickAddressIn), or none:
// cheap, so that a change of the node's addresses remakes the desired state only when
// it changes what the subnets give. Addresses not known (never read) give a subnet no
// address, and no address is warned about; the daemon gives a config with a subnet no
// desired state until they are known.
SubnetAddresses chooseSubnetAddresses(const LoadedConfig &loaded, const NodeAddresses &node);

// A validated config (and the flags) as the desired state, on a node with these addresses.
DesiredState desiredFromConfig(const LoadedConfig &loaded, const ConfigLocation &location,
			       const RulesetOptions &options, const NodeAddresses &node);

// The config's content as the desired state: parsed, merged and checked
// (loadConfigContent), then mapped. An error says what is wrong, and where.
Result<DesiredState> desiredFromContent(const ConfigContent &content,
					const ConfigLocation &location, const ConfigFlags &flags,
					const RulesetOptions &options, const NodeAddresses &node);

// For a mode that reads this node's addresses once (--once, --dry-run): the addresses the
// config gets from that read, or, when the config has an outputAddress subnet and the read
// failed, an Error that says so (a failed read is never "no address": --once then applies
// nothing). A config without a subnet goes on without them (no address is warned about).
Result<NodeAddresses> addressesForConfig(const LoadedConfig &loaded,
					 const Result<std::vector<NodeAddress>> &read);

// What the agent's table holds for each pod network source (discoveredInKernel), read
// only when the config has a nonMasqueradeDiscovery section.
using KeptRangesReader = std::function<RangesBySource()>;

// The location read once (readConfigContent), loaded, given its addresses from `read`
// (addressesForConfig), its pod network read once (withPodNetworkReadOnce, with what
// `readKept` says the agent's table holds: --once), and mapped: --dry-run and --snat-usage.
Result<DesiredState> desiredFromLocation(const ConfigLocation &location, const ConfigFlags &flags,
					 const RulesetOptions &options,
					 const Result<std::vector<NodeAddress>> &read,
					 const KeptRangesReader &readKept = {});
// The same from content already read: --once, which reads it with the daemon's write
// guard (ConfigSource::readSettled).
Result<DesiredState> desiredFromReadContent(const ConfigContent &content, const ConfigLocation &location,
					    const ConfigFlags &flags, const RulesetOptions &options,
					    const Result<std::vector<NodeAddress>> &read,
					    const KeptRangesReader &readKept = {});

} // namespace ipmasq
