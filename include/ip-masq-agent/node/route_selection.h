// SPDX-License-Identifier: Apache-2.0
// Which of the node's routes tell the pod network, and the routes so selected, kept as the
// kernel's notifications change them: the pure part of following routes (netlink/
// route_source.h reads and follows them over rtnetlink).
//
// Only what is selected is kept: a node that carries a full BGP table (a million routes of
// other protocols) costs a lookup per notification and nothing in memory.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/route_protocols.h"

namespace ipmasq {

// The most route next hops kept (a multipath route keeps one per hop): four per
// discovered prefix the agent takes. Past it the source fails (and says so) rather than grow.
inline constexpr size_t kMaxSelectedRoutes = 262144;
// The most interfaces whose names are kept (pods' veths included).
inline constexpr size_t kMaxFollowedLinks = 65536;

// The route types taken: unicast, blackhole (Calico's block of its own node, a BGP
// speaker's aggregate) and unreachable.
enum class RouteType : uint8_t { unicast, blackhole, unreachable };

struct RouteNextHop {
	std::optional<Address> gateway;
	uint32_t ifindex = 0;
	auto operator<=>(const RouteNextHop &) const = default;
};

// A route as one rtnetlink message describes it.
struct KernelRoute {
	Prefix destination;
	uint8_t tos = 0;
	uint32_t priority = 0;
	uint32_t table = 0;
	RouteProtocol protocol;
	uint8_t type = 0; // RTN_*: anything, only three are taken
	bool cloned = false; // RTM_F_CLONED: an exception cached by the kernel, not a route
	std::vector<RouteNextHop> nextHops; // RTA_OIF/RTA_GATEWAY, or RTA_MULTIPATH's hops
};

// What selects routes: the section's routeProtocols, routeInterfaces and within, and
// whether IPv6 is followed.
struct RouteFilter {
	std::vector<RouteProtocol> protocols;
	std::vector<InterfacePattern> interfaces;
	std::vector<Prefix> within;
	bool ipv6 = false;
};

// One selected route through one next hop, as it was when it was selected.
struct SelectedRoute {
	Prefix destination;
	uint8_t tos = 0;
	uint32_t priority = 0;
	RouteType type = RouteType::unicast;
	RouteProtocol protocol;
	RouteNextHop hop;
	std::string interface; // the hop's interface name when selected ("" if none)

	// "route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0", "route blackhole
	// 10.244.0.0/26 proto bird", as `ip route` words it.
	std::string origin() const;
};

// One change to the selected routes, in order.
struct RouteChange {
	bool added = true; // else removed
	SelectedRoute route;
};

// What applying notifications did.
struct RouteUpdate {
	std::vector<RouteChange> changes;
	// Routes selected but outside `within`: not kept, for the model to say once.
	std::vector<SelectedRoute> outside;
	// The kernel removed IPv4 routes without a notification (an address deleted), or
	// notifications were lost: the routes must be read again.
	bool mustReread = false;
};

class SelectedRoutes
{
public:
	explicit SelectedRoutes(RouteFilter filter, size_t maxRoutes = kMaxSelectedRoutes);

	const RouteFilter &filter() const { return filter_; }
	size_t maxRoutes() const { return maxRoutes_; }

	// A link as RTM_NEWLINK says it is now. A link that went down takes its IPv4 routes
	// with it, and the kernel says nothing of them: they are removed here. A rename that
	// changes whether routeInterfaces match it sets mustReread.
	Status setLink(uint32_t ifindex, const std::string &name, bool up, RouteUpdate &update);
	// RTM_DELLINK: its IPv4 routes went with it (silently too).
	void removeLink(uint32_t ifindex, RouteUpdate &update);
	// An IPv4 address was deleted: the kernel may have removed routes through it (or using
	// it as their source) without a word. Sets mustReread while IPv4 routes are selected.
	void ipv4AddressDeleted(RouteUpdate &update) const;

	// RTM_NEWROUTE (`replace`: NLM_F_REPLACE, which removes the route of the same
	// destination, tos and priority) or RTM_DELROUTE. Routes of other tables, cached
	// exceptions and other types are not looked at. An Error (E2BIG): more than the bound
	// would be kept; nothing was changed.
	Status apply(const KernelRoute &route, bool deleted, bool replace, RouteUpdate &update);

	// The routes read anew (after lost notifications): `fresh` holds them (built with
	// offer()), and this takes its routes, the changes recorded as the difference.
	void takeRoutesOf(SelectedRoutes &fresh, RouteUpdate &update);
	// For a reading: a route of a dump.
	Status offer(const KernelRoute &route, RouteUpdate &update);

	size_t size() const { return routes_.size(); }
	std::vector<SelectedRoute> all() const;
	std::optional<std::string> linkName(uint32_t ifindex) const;

private:
	// What tells kernel routes apart, one next hop each.
	struct Key {
		Family family = Family::ipv4;
		AddressValue network = 0;
		unsigned length = 0;
		uint8_t tos = 0;
		uint32_t priority = 0;
		RouteType type = RouteType::unicast;
		RouteNextHop hop;
		auto operator<=>(const Key &) const = default;
	};
	static Key keyOf(const SelectedRoute &route);
	std::vector<SelectedRoute> select(const KernelRoute &route, RouteUpdate &update) const;
	bool interfaceMatches(uint32_t ifindex) const;
	void insert(SelectedRoute route, RouteUpdate &update);
	void erase(std::map<Key, SelectedRoute>::iterator it, RouteUpdate &update);
	void eraseIpv4Through(uint32_t ifindex, RouteUpdate &update);

	RouteFilter filter_;
	size_t maxRoutes_;
	std::map<Key, SelectedRoute> routes_;
	// The IPv4 routes through each link: what a link going down removes.
	std::multimap<uint32_t, Key> ipv4ByLink_;
	size_t ipv4Routes_ = 0;
	std::unordered_map<uint32_t, std::string> links_;
};

} // namespace ipmasq
