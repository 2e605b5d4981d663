// SPDX-License-Identifier: Apache-2.0
// The selected routes: the filter, and the kernel's route semantics that notifications leave
// unsaid (a replace removes the route it replaces; a link going down removes IPv4 routes).
#include "ip-masq-agent/node/route_selection.h"

#include <algorithm>
#include <cerrno>
#include <tuple>

#include <linux/rtnetlink.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

namespace {

std::optional<RouteType> routeTypeOf(uint8_t rtnType)
{
	switch (rtnType) {
	case RTN_UNICAST: return RouteType::unicast;
	case RTN_BLACKHOLE: return RouteType::blackhole;
	case RTN_UNREACHABLE: return RouteType::unreachable;
	default: return std::nullopt;
	}
}

// The hops of a route: a blackhole or an unreachable route has none, and counts as one
// without gateway or interface.
std::vector<RouteNextHop> hopsOf(const KernelRoute &route)
{
	return route.nextHops.empty() ? std::vector<RouteNextHop>{RouteNextHop{}} : route.nextHops;
}

} // namespace

std::string SelectedRoute::origin() const
{
	std::string out = "route ";
	if (type == RouteType::blackhole)
		out += "blackhole ";
	else if (type == RouteType::unreachable)
		out += "unreachable ";
	out += destination.toString();
	if (tos != 0)
		out += fmt::format(" tos 0x{:02x}", tos);
	out += " proto " + protocol.toString();
	if (priority != 0)
		out += fmt::format(" metric {}", priority);
	if (hop.gateway)
		out += " via " + hop.gateway->toString();
	if (hop.ifindex != 0)
		out += " dev " + (interface.empty() ? fmt::format("if{}", hop.ifindex) : escaped(interface));
	return out;
}

SelectedRoutes::SelectedRoutes(RouteFilter filter, size_t maxRoutes)
	: filter_(std::move(filter)), maxRoutes_(maxRoutes)
{
}

SelectedRoutes::Key SelectedRoutes::keyOf(const SelectedRoute &route)
{
	return Key{route.destination.network.family, route.destination.network.value,
		   route.destination.length, route.tos, route.priority, route.type, route.hop};
}

bool SelectedRoutes::interfaceMatches(uint32_t ifindex) const
{
	const auto link = links_.find(ifindex);
	if (ifindex == 0 || link == links_.end())
		return false;
	return std::any_of(filter_.interfaces.begin(), filter_.interfaces.end(),
			   [&](const InterfacePattern &pattern) { return matchesInterface(pattern, link->second); });
}

// The route's hops that the filter selects, as SelectedRoutes; none if the route is of
// another table, type or family. A route selected but outside `within` goes to
// update.outside instead.
std::vector<SelectedRoute> SelectedRoutes::select(const KernelRoute &route, RouteUpdate &update) const
{
	const std::optional<RouteType> type = routeTypeOf(route.type);
	if (route.table != RT_TABLE_MAIN || route.cloned || !type ||
	    (route.destination.network.family == Family::ipv6 && !filter_.ipv6))
		return {};
	const bool byProtocol = std::find(filter_.protocols.begin(), filter_.protocols.end(),
					  route.protocol) != filter_.protocols.end();
	std::vector<SelectedRoute> selected;
	for (const RouteNextHop &hop : hopsOf(route)) {
		if (!byProtocol && !interfaceMatches(hop.ifindex))
			continue;
		const auto link = links_.find(hop.ifindex);
		selected.push_back(SelectedRoute{route.destination, route.tos, route.priority, *type,
						 route.protocol, hop,
						 link == links_.end() ? std::string() : link->second});
	}
	const bool within = std::any_of(filter_.within.begin(), filter_.within.end(),
					[&](const Prefix &outer) { return outer.contains(route.destination); });
	if (!selected.empty() && !within) {
		update.outside.push_back(std::move(selected.front()));
		return {};
	}
	return selected;
}

void SelectedRoutes::insert(SelectedRoute route, RouteUpdate &update)
{
	const Key key = keyOf(route);
	if (routes_.count(key))
		return;
	if (key.family == Family::ipv4) {
		ipv4Routes_++;
		if (key.hop.ifindex != 0)
			ipv4ByLink_.emplace(key.hop.ifindex, key);
	}
	update.changes.push_back(RouteChange{true, route});
	routes_.emplace(key, std::move(route));
}

void SelectedRoutes::erase(std::map<Key, SelectedRoute>::iterator it, RouteUpdate &update)
{
	const Key &key = it->first;
	if (key.family == Family::ipv4) {
		ipv4Routes_--;
		auto [first, last] = ipv4ByLink_.equal_range(key.hop.ifindex);
		for (auto link = first; link != last; ++link)
			if (link->second == key) {
				ipv4ByLink_.erase(link);
				break;
			}
	}
	update.changes.push_back(RouteChange{false, std::move(it->second)});
	routes_.erase(it);
}

Status SelectedRoutes::apply(const KernelRoute &route, bool deleted, bool replace, RouteUpdate &update)
{
	const std::optional<RouteType> type = routeTypeOf(route.type);
	if (route.table != RT_TABLE_MAIN || route.cloned || !type)
		return {};
	if (deleted) {
		for (const RouteNextHop &hop : hopsOf(route)) {
			const Key key{route.destination.network.family, route.destination.network.value,
				      route.destination.length, route.tos, route.priority, *type, hop};
			if (const auto it = routes_.find(key); it != routes_.end())
				erase(it, update);
		}
		return {};
	}
	std::vector<SelectedRoute> selected = select(route, update);
	size_t fresh = 0;
	for (const SelectedRoute &s : selected)
		fresh += routes_.count(keyOf(s)) ? 0 : 1;
	if (routes_.size() + fresh > maxRoutes_)
		return fail(fmt::format("more than {} route next hops selected: narrow routeProtocols, "
					"routeInterfaces or within",
					maxRoutes_),
			    E2BIG);
	if (replace) {
		// The route of this destination, tos and priority that was there is gone, whatever
		// its hops were: keep only what the new one selects.
		const Key from{route.destination.network.family, route.destination.network.value,
			       route.destination.length, route.tos, route.priority, RouteType::unicast, {}};
		for (auto it = routes_.lower_bound(from);
		     it != routes_.end() && std::tie(it->first.family, it->first.network, it->first.length,
						     it->first.tos, it->first.priority) ==
						    std::tie(from.family, from.network, from.length, from.tos,
							     from.priority);) {
			const bool kept = std::any_of(selected.begin(), selected.end(),
						      [&](const SelectedRoute &s) { return keyOf(s) == it->first; });
			if (kept)
				++it;
			else
				erase(it++, update);
		}
	}
	for (SelectedRoute &s : selected)
		insert(std::move(s), update);
	return {};
}

Status SelectedRoutes::offer(const KernelRoute &route, RouteUpdate &update)
{
	RouteUpdate local;
	Status s = apply(route, false, false, local);
	for (SelectedRoute &outside : local.outside)
		update.outside.push_back(std::move(outside));
	return s;
}

void SelectedRoutes::eraseIpv4Through(uint32_t ifindex, RouteUpdate &update)
{
	auto [first, last] = ipv4ByLink_.equal_range(ifindex);
	std::vector<Key> keys;
	for (auto it = first; it != last; ++it)
		keys.push_back(it->second);
	for (const Key &key : keys)
		if (const auto it = routes_.find(key); it != routes_.end())
			erase(it, update);
}

Status SelectedRoutes::setLink(uint32_t ifindex, const std::string &name, bool up, RouteUpdate &update)
{
	const auto known = links_.find(ifindex);
	if (known == links_.end() && links_.size() >= kMaxFollowedLinks)
		return fail(fmt::format("more than {} interfaces on this node: refusing to follow them all",
					kMaxFollowedLinks),
			    E2BIG);
	if (known != links_.end() && known->second != name && !filter_.interfaces.empty()) {
		const auto matches = [&](const std::string &n) {
			return std::any_of(filter_.interfaces.begin(), filter_.interfaces.end(),
					   [&](const InterfacePattern &p) { return matchesInterface(p, n); });
		};
		// Routes that a new name selects were never kept: read them again.
		if (matches(known->second) != matches(name))
			update.mustReread = true;
	}
	links_[ifindex] = name;
	// The kernel removes the IPv4 routes through a link that goes down, with no
	// notification (IPv6 says so for its own).
	if (!up)
		eraseIpv4Through(ifindex, update);
	return {};
}

void SelectedRoutes::removeLink(uint32_t ifindex, RouteUpdate &update)
{
	eraseIpv4Through(ifindex, update);
	links_.erase(ifindex);
}

void SelectedRoutes::ipv4AddressDeleted(RouteUpdate &update) const
{
	if (ipv4Routes_ > 0)
		update.mustReread = true;
}

void SelectedRoutes::takeRoutesOf(SelectedRoutes &fresh, RouteUpdate &update)
{
	for (auto it = routes_.begin(); it != routes_.end(); ++it)
		if (!fresh.routes_.count(it->first))
			update.changes.push_back(RouteChange{false, it->second});
	for (const auto &[key, route] : fresh.routes_)
		if (!routes_.count(key))
			update.changes.push_back(RouteChange{true, route});
	routes_ = std::move(fresh.routes_);
	ipv4ByLink_ = std::move(fresh.ipv4ByLink_);
	ipv4Routes_ = fresh.ipv4Routes_;
	links_ = std::move(fresh.links_);
	fresh = SelectedRoutes(filter_, maxRoutes_);
}

std::vector<SelectedRoute> SelectedRoutes::all() const
{
	std::vector<SelectedRoute> out;
	out.reserve(routes_.size());
	for (const auto &[key, route] : routes_)
		out.push_back(route);
	return out;
}

std::optional<std::string> SelectedRoutes::linkName(uint32_t ifindex) const
{
	const auto link = links_.find(ifindex);
	if (link == links_.end())
		return std::nullopt;
	return link->second;
}

} // namespace ipmasq
