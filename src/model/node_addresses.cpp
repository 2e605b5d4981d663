// SPDX-License-Identifier: Apache-2.0
// The node's addresses as values: how one is printed, and the choice in a subnet.
#include "ip-masq-agent/model/node_addresses.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace ipmasq {

namespace {

bool usable(const NodeAddress &candidate)
{
	if (candidate.address.family == Family::ipv4)
		return true;
	return !candidate.tentative && !candidate.dadFailed && !candidate.deprecated;
}

} // namespace

std::string NodeAddress::toString() const
{
	std::string text = fmt::format("{}/{} dev {}", address.toString(), prefixLength, interface);
	const std::pair<bool, const char *> flags[] = {
		{secondary, "secondary"},
		{tentative, "tentative"},
		{dadFailed, "dadfailed"},
		{deprecated, "deprecated"},
	};
	for (const auto &[set, word] : flags)
		if (set)
			text += fmt::format(" {}", word);
	return text;
}

NodeAddresses NodeAddresses::fromRead(const Result<std::vector<NodeAddress>> &read)
{
	return read ? NodeAddresses{*read, true} : NodeAddresses{};
}

bool NodeAddresses::isLocal(const Address &address) const
{
	const bool loopback = address.family == Family::ipv4 ? (address.value >> 24) == 127 : address.value == 1;
	return loopback || std::any_of(addresses.begin(), addresses.end(),
				       [&address](const NodeAddress &a) { return a.address == address; });
}

std::optional<NodeAddress> pickAddressIn(const Prefix &subnet,
					 const std::vector<NodeAddress> &addresses)
{
	const NodeAddress *best = nullptr;
	for (const NodeAddress &candidate : addresses) {
		const Address &a = candidate.address;
		if (!subnet.contains(a) || !usable(candidate))
			continue;
		if (!best || a.value < best->address.value ||
		    (a.value == best->address.value && candidate.ifindex < best->ifindex))
			best = &candidate;
	}
	if (!best)
		return std::nullopt;
	return *best;
}

} // namespace ipmasq
