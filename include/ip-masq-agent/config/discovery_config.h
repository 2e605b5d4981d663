// SPDX-License-Identifier: Apache-2.0
// The config section nonMasqueradeDiscovery: where the agent finds the pod network on the
// node itself (routes, Flannel's subnet.env, the CNI's host-local ranges), as a value.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/duration.h"
#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/model/route_protocols.h"

namespace ipmasq {

// A withdrawn range leaves only after this, so that a flap does not flip traffic to
// masquerade (holdDown's default).
inline constexpr Duration kDefaultHoldDown = std::chrono::seconds(30);
// The longest holdDown taken: a range withdrawn for good must leave some day.
inline constexpr Duration kMaxHoldDown = std::chrono::hours(1);
// `within` holds at most this many CIDRs: a few pod networks, not a routing table.
inline constexpr size_t kMaxWithinCIDRs = 1024;
// routeProtocols holds at most this many entries (there are 256 protocols).
inline constexpr size_t kMaxRouteProtocols = 256;
// The most distinct discovered prefixes the agent keeps in force (they do not count
// toward cidrLimit): past it, the last set within the bound stays and the agent says so.
// 65,536 holds a /26 block for each of 5,000 nodes (Calico) twelve times over.
inline constexpr size_t kMaxDiscoveredPrefixes = 65536;
// A path (flannelSubnetEnv, cniConfDir) is at most this long: PATH_MAX.
inline constexpr size_t kMaxDiscoveryPathBytes = 4096;

// Where a range was found: the section's sources. Closed: metrics, logs, the table's
// discovered-* sets and --explain handle each kind.
enum class DiscoverySource : uint8_t { routes, flannel, cni };
inline constexpr size_t kDiscoverySources = 3;
inline constexpr std::array<DiscoverySource, kDiscoverySources> kAllDiscoverySources{
	DiscoverySource::routes, DiscoverySource::flannel, DiscoverySource::cni};
// "routes", "flannelSubnetEnv", "cniConfDir": the config key that turns the source on,
// which metrics use as their label.
const char *discoverySourceName(DiscoverySource source);

// Prefixes per source: what each source has in force (Config::discoveredBySource, from
// which the table's discovered-* sets are made), or what the agent's table held for each
// when it started (read back by discoveredInKernel, ruleset_mapping.h).
struct RangesBySource {
	std::array<std::vector<Prefix>, kDiscoverySources> prefixes;

	std::vector<Prefix> &of(DiscoverySource source) { return prefixes[static_cast<size_t>(source)]; }
	const std::vector<Prefix> &of(DiscoverySource source) const
	{
		return prefixes[static_cast<size_t>(source)];
	}
	size_t size() const;
	bool operator==(const RangesBySource &) const = default;
};

// A path as the section gives it: absolute, and where it was written (not compared).
struct DiscoveryPath {
	std::string path;
	Origin origin;

	bool operator==(const DiscoveryPath &other) const { return path == other.path; }
};

// Where the section was written; never part of what it means.
struct SectionOrigin {
	Origin origin;
	bool operator==(const SectionOrigin &) const { return true; }
};

// nonMasqueradeDiscovery, validated. Every source is optional; `within` is required (a
// section without it is refused), so a BGP peer's service or load-balancer prefixes, or
// a blackhole for the service range, never become non-masquerade ranges.
struct NonMasqueradeDiscovery {
	// Only discovered prefixes wholly inside one of these count; the others are ignored
	// (and logged once with their origin).
	std::vector<Prefix> within;
	// Routes of the main table installed by these protocols (unicast, blackhole and
	// unreachable) are taken ...
	std::vector<RouteProtocol> routeProtocols;
	// ... and so are routes with a next hop through one of these interfaces.
	std::vector<InterfacePattern> routeInterfaces;
	// FLANNEL_NETWORK and FLANNEL_IPV6_NETWORK in Flannel's subnet.env.
	std::optional<DiscoveryPath> flannelSubnetEnv;
	// host-local's "ranges" subnets in the directory's *.conflist and *.conf files.
	std::optional<DiscoveryPath> cniConfDir;
	Duration holdDown = kDefaultHoldDown;
	SectionOrigin written;

	bool followsRoutes() const { return !routeProtocols.empty() || !routeInterfaces.empty(); }
	// Whether the section names `source` (routes: a protocol or an interface).
	bool names(DiscoverySource source) const;
	bool operator==(const NonMasqueradeDiscovery &) const = default;
};

// Why `text` cannot be flannelSubnetEnv or cniConfDir ("is not an absolute path", ...), or
// nullopt if it can: an absolute path of at most kMaxDiscoveryPathBytes, without control
// bytes.
std::optional<std::string> discoveryPathProblem(std::string_view text);

// One line for logs: "within=[...] routeProtocols=[bird] ... holdDown=30s".
std::string describeDiscovery(const NonMasqueradeDiscovery &discovery);

} // namespace ipmasq
