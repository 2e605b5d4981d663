// SPDX-License-Identifier: Apache-2.0
// The nonMasqueradeDiscovery section: its paths' rules and its one-line description.
#include "ip-masq-agent/config/discovery_config.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

const char *discoverySourceName(DiscoverySource source)
{
	switch (source) {
	case DiscoverySource::routes: return "routes";
	case DiscoverySource::flannel: return "flannelSubnetEnv";
	case DiscoverySource::cni: return "cniConfDir";
	}
	return "";
}

size_t RangesBySource::size() const
{
	size_t total = 0;
	for (const std::vector<Prefix> &list : prefixes)
		total += list.size();
	return total;
}

bool NonMasqueradeDiscovery::names(DiscoverySource source) const
{
	switch (source) {
	case DiscoverySource::routes: return followsRoutes();
	case DiscoverySource::flannel: return flannelSubnetEnv.has_value();
	case DiscoverySource::cni: return cniConfDir.has_value();
	}
	return false;
}

std::optional<std::string> discoveryPathProblem(std::string_view text)
{
	if (text.empty())
		return std::string("is empty");
	if (text.front() != '/')
		return std::string("is not an absolute path");
	if (text.size() > kMaxDiscoveryPathBytes)
		return fmt::format("is longer than {} bytes", kMaxDiscoveryPathBytes);
	const bool control = std::any_of(text.begin(), text.end(), [](char c) {
		const auto byte = static_cast<unsigned char>(c);
		return byte < 0x20 || byte == 0x7f;
	});
	if (control)
		return std::string("holds a control character");
	return std::nullopt;
}

std::string describeDiscovery(const NonMasqueradeDiscovery &discovery)
{
	std::vector<std::string> within;
	for (const Prefix &prefix : discovery.within)
		within.push_back(prefix.toString());
	std::string out = fmt::format("within=[{}]", fmt::join(within, ","));
	if (!discovery.routeProtocols.empty()) {
		std::vector<std::string> names;
		for (const RouteProtocol &protocol : discovery.routeProtocols)
			names.push_back(protocol.toString());
		out += fmt::format(" routeProtocols=[{}]", fmt::join(names, ","));
	}
	if (!discovery.routeInterfaces.empty()) {
		std::vector<std::string> names;
		for (const InterfacePattern &pattern : discovery.routeInterfaces)
			names.push_back(escaped(pattern.toString()));
		out += fmt::format(" routeInterfaces=[{}]", fmt::join(names, ","));
	}
	if (discovery.flannelSubnetEnv)
		out += fmt::format(" flannelSubnetEnv={}", escaped(discovery.flannelSubnetEnv->path));
	if (discovery.cniConfDir)
		out += fmt::format(" cniConfDir={}", escaped(discovery.cniConfDir->path));
	return out + fmt::format(" holdDown={}", formatGoDuration(discovery.holdDown));
}

} // namespace ipmasq
