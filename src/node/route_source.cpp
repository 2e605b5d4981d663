// SPDX-License-Identifier: Apache-2.0
// The node's routes over rtnetlink: the parse of route messages, the filtered dumps of the
// main table, and the notifications that keep the selection current.
#include "ip-masq-agent/node/route_source.h"

#include <cerrno>
#include <cstring>

#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <fmt/format.h>

namespace ipmasq {

namespace {

// Room for a burst of route changes (a BGP session flapping) while the caller is busy; an
// overrun costs one read of the selected routes, not a wrong answer.
constexpr size_t kMonitorReceiveBuffer = 4 * 1024 * 1024;
// Datagrams one drain() reads at most; rtnetlink sends one notification per datagram.
constexpr size_t kMaxDatagramsPerDrain = 4096;
#ifndef NETLINK_GET_STRICT_CHK
constexpr int NETLINK_GET_STRICT_CHK = 12; // linux/netlink.h of kernel 4.20
#endif

// Copies what `attr` holds, if it is exactly `size` bytes.
template<typename T>
std::optional<T> fixed(const nlattr *attr)
{
	if (!attr || mnl_attr_get_payload_len(attr) != sizeof(T))
		return std::nullopt;
	T value;
	std::memcpy(&value, mnl_attr_get_payload(attr), sizeof(T));
	return value;
}

std::optional<Address> addressOf(Family family, const void *bytes, size_t size)
{
	if (size != familyBits(family) / 8)
		return std::nullopt;
	return Address::fromBytes(family, static_cast<const uint8_t *>(bytes));
}

// RTA_GATEWAY (of the route's family) or RTA_VIA (an IPv4 route through an IPv6 gateway).
std::optional<Address> gatewayOf(Family family, const nlattr *gateway, const nlattr *via)
{
	if (gateway)
		return addressOf(family, mnl_attr_get_payload(gateway), mnl_attr_get_payload_len(gateway));
	if (!via || mnl_attr_get_payload_len(via) < sizeof(uint16_t))
		return std::nullopt;
	uint16_t viaFamily = 0;
	std::memcpy(&viaFamily, mnl_attr_get_payload(via), sizeof(viaFamily));
	if (viaFamily != AF_INET && viaFamily != AF_INET6)
		return std::nullopt;
	return addressOf(viaFamily == AF_INET ? Family::ipv4 : Family::ipv6,
			 static_cast<const char *>(mnl_attr_get_payload(via)) + sizeof(uint16_t),
			 mnl_attr_get_payload_len(via) - sizeof(uint16_t));
}

// RTA_MULTIPATH's hops: rtnexthop headers each followed by their own attributes.
bool parseMultipath(Family family, const nlattr *multipath, std::vector<RouteNextHop> &hops)
{
	const auto *at = static_cast<const char *>(mnl_attr_get_payload(multipath));
	size_t left = mnl_attr_get_payload_len(multipath);
	while (left >= sizeof(rtnexthop)) {
		rtnexthop header;
		std::memcpy(&header, at, sizeof(header));
		if (header.rtnh_len < sizeof(rtnexthop) || header.rtnh_len > left || hops.size() == kMaxRouteHops)
			return false;
		const nlattr *attrs[RTA_MAX + 1] = {};
		netlink::collectAttributes(at + RTNH_ALIGN(sizeof(rtnexthop)), at + header.rtnh_len, attrs, RTA_MAX);
		hops.push_back(RouteNextHop{gatewayOf(family, attrs[RTA_GATEWAY], attrs[RTA_VIA]),
					    static_cast<uint32_t>(header.rtnh_ifindex)});
		const size_t step = std::min<size_t>(RTNH_ALIGN(header.rtnh_len), left);
		at += step;
		left -= step;
	}
	return true;
}

// Socket::query() starts a route request with the one-byte rtgenmsg, which the kernel's
// strict checking of dumps refuses: this puts the whole family header in its place.
template<typename Header>
netlink::RequestBuilder withHeader(Header header)
{
	return [header](nlmsghdr *nlh) {
		nlh->nlmsg_len = MNL_NLMSG_HDRLEN;
		std::memcpy(mnl_nlmsg_put_extra_header(nlh, sizeof(Header)), &header, sizeof(Header));
	};
}

struct LinkMessage {
	uint32_t ifindex = 0;
	std::string name;
	bool up = false;
};

std::optional<LinkMessage> parseLinkMessage(const nlmsghdr *nlh)
{
	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(ifinfomsg))
		return std::nullopt;
	ifinfomsg ifi;
	std::memcpy(&ifi, mnl_nlmsg_get_payload(nlh), sizeof(ifi));
	const nlattr *attrs[IFLA_IFNAME + 1] = {};
	netlink::collectAttributes(nlh, sizeof(ifinfomsg), attrs, IFLA_IFNAME);
	if (ifi.ifi_index <= 0 || !attrs[IFLA_IFNAME] ||
	    mnl_attr_validate(attrs[IFLA_IFNAME], MNL_TYPE_NUL_STRING) < 0)
		return std::nullopt;
	return LinkMessage{static_cast<uint32_t>(ifi.ifi_index), mnl_attr_get_str(attrs[IFLA_IFNAME]),
			   (ifi.ifi_flags & IFF_UP) != 0};
}

} // namespace

std::optional<KernelRoute> parseRouteMessage(const nlmsghdr *nlh)
{
	if ((nlh->nlmsg_type != RTM_NEWROUTE && nlh->nlmsg_type != RTM_DELROUTE) ||
	    mnl_nlmsg_get_payload_len(nlh) < sizeof(rtmsg))
		return std::nullopt;
	rtmsg rtm;
	std::memcpy(&rtm, mnl_nlmsg_get_payload(nlh), sizeof(rtm));
	if (rtm.rtm_family != AF_INET && rtm.rtm_family != AF_INET6)
		return std::nullopt;
	const Family family = rtm.rtm_family == AF_INET ? Family::ipv4 : Family::ipv6;
	if (rtm.rtm_dst_len > familyBits(family))
		return std::nullopt;
	const nlattr *attrs[RTA_MAX + 1] = {};
	netlink::collectAttributes(nlh, sizeof(rtmsg), attrs, RTA_MAX);

	KernelRoute route;
	route.destination.network.family = family;
	if (attrs[RTA_DST]) {
		const auto dst = addressOf(family, mnl_attr_get_payload(attrs[RTA_DST]),
					   mnl_attr_get_payload_len(attrs[RTA_DST]));
		if (!dst)
			return std::nullopt;
		route.destination.network = *dst;
	}
	route.destination.length = rtm.rtm_dst_len;
	// The kernel sends a network without host bits; a prefix for the sets must have none.
	const unsigned hostBits = familyBits(family) - rtm.rtm_dst_len;
	if (hostBits >= 128)
		route.destination.network.value = 0; // ::/0 (a shift by 128 would be undefined)
	else if (hostBits > 0)
		route.destination.network.value &= ~((AddressValue(1) << hostBits) - 1);
	route.tos = rtm.rtm_tos;
	route.table = fixed<uint32_t>(attrs[RTA_TABLE]).value_or(rtm.rtm_table);
	route.priority = fixed<uint32_t>(attrs[RTA_PRIORITY]).value_or(0);
	route.protocol = RouteProtocol{rtm.rtm_protocol};
	route.type = rtm.rtm_type;
	route.cloned = rtm.rtm_flags & RTM_F_CLONED;
	if (attrs[RTA_MULTIPATH]) {
		if (!parseMultipath(family, attrs[RTA_MULTIPATH], route.nextHops))
			return std::nullopt;
	} else if (attrs[RTA_OIF] || attrs[RTA_GATEWAY] || attrs[RTA_VIA]) {
		route.nextHops.push_back(RouteNextHop{gatewayOf(family, attrs[RTA_GATEWAY], attrs[RTA_VIA]),
						      fixed<uint32_t>(attrs[RTA_OIF]).value_or(0)});
	}
	return route;
}

RouteSource::RouteSource(netlink::Socket monitor, netlink::Socket dumper, SelectedRoutes routes)
	: monitor_(std::move(monitor)), dumper_(std::move(dumper)), routes_(std::move(routes))
{
}

Result<RouteSource> RouteSource::open(RouteFilter filter, size_t maxRoutes)
{
	auto monitor = netlink::Socket::open(netlink::Protocol::route);
	if (!monitor)
		return fail(monitor.error().withContext("cannot follow the node's routes: "));
	std::vector<unsigned> groups{RTNLGRP_IPV4_ROUTE, RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR};
	if (filter.ipv6)
		groups.push_back(RTNLGRP_IPV6_ROUTE);
	for (const unsigned group : groups)
		if (auto s = monitor->joinGroup(group); !s)
			return fail(s.error().withContext("cannot follow the node's routes: "));
	// Best effort: a smaller buffer only overruns sooner, which drain() handles.
	(void)monitor->reserveBuffers(0, kMonitorReceiveBuffer);
	auto dumper = netlink::Socket::open(netlink::Protocol::route);
	if (!dumper)
		return fail(dumper.error().withContext("cannot read the node's routes: "));
	// A dump resumes where it was by key, so a concurrent change cannot make it skip a
	// route it did not touch; what it touched is in the queue of notifications.
	dumper->tolerateInterruptedDumps(true);
	// The kernel filters the dump to the main table (and to a protocol) only with strict
	// checking (4.20 and later); without it every route comes, and is filtered here.
	int on = 1;
	(void)setsockopt(dumper->fd(), SOL_NETLINK, NETLINK_GET_STRICT_CHK, &on, sizeof(on));
	return RouteSource(std::move(*monitor), std::move(*dumper), SelectedRoutes(std::move(filter), maxRoutes));
}

// One reading: the links (for interface names), then the main table of each family, one
// dump per protocol when no interface is named (the kernel drops the rest).
Status RouteSource::readInto(SelectedRoutes &fresh, RouteUpdate &update)
{
	if (failDumps_)
		return fail("cannot read the node's IPv4 routes: the dump failed (the injected fault "
			    "route-dump-fails)", EIO);
	const auto onLink = [&](const nlmsghdr *nlh) -> Status {
		if (nlh->nlmsg_type != RTM_NEWLINK)
			return {};
		const auto link = parseLinkMessage(nlh);
		return link ? fresh.setLink(link->ifindex, link->name, link->up, update) : Status{};
	};
	ifinfomsg ifi{};
	ifi.ifi_family = AF_UNSPEC;
	if (Status s = dumper_.query(RTM_GETLINK, AF_UNSPEC, NLM_F_DUMP, withHeader(ifi), onLink); !s)
		return fail(s.error().withContext("cannot read the node's interfaces: "));
	const auto onRoute = [&](const nlmsghdr *nlh) -> Status {
		const auto route = parseRouteMessage(nlh);
		return route ? fresh.offer(*route, update) : Status{};
	};
	const RouteFilter &filter = fresh.filter();
	std::vector<uint8_t> protocols;
	if (filter.interfaces.empty())
		for (const RouteProtocol &protocol : filter.protocols)
			protocols.push_back(protocol.number);
	else
		protocols.push_back(0); // every protocol: interfaces select too
	for (const uint8_t family : {uint8_t(AF_INET), uint8_t(AF_INET6)}) {
		if (family == AF_INET6 && !filter.ipv6)
			continue;
		for (const uint8_t protocol : protocols) {
			rtmsg rtm{};
			rtm.rtm_family = family;
			rtm.rtm_table = RT_TABLE_MAIN;
			rtm.rtm_protocol = protocol;
			if (Status s = dumper_.query(RTM_GETROUTE, family, NLM_F_DUMP, withHeader(rtm), onRoute); !s)
				return fail(s.error().withContext(fmt::format(
					"cannot read the node's {} routes: ", family == AF_INET ? "IPv4" : "IPv6")));
		}
	}
	return {};
}

RouteSourceUpdate RouteSource::reread()
{
	RouteSourceUpdate out;
	SelectedRoutes fresh(routes_.filter(), routes_.maxRoutes());
	if (Status s = readInto(fresh, out.update); !s) {
		out.failure = s.error();
		out.update = {};
		return out;
	}
	routes_.takeRoutesOf(fresh, out.update);
	out.reread = true;
	rereads_++;
	return out;
}

void RouteSource::onNotification(const nlmsghdr *nlh, RouteSourceUpdate &out)
{
	notifications_++;
	Status s;
	switch (nlh->nlmsg_type) {
	case RTM_NEWROUTE:
	case RTM_DELROUTE:
		if (const auto route = parseRouteMessage(nlh))
			s = routes_.apply(*route, nlh->nlmsg_type == RTM_DELROUTE,
					  (nlh->nlmsg_flags & NLM_F_REPLACE) != 0, out.update);
		break;
	case RTM_NEWLINK:
		if (const auto link = parseLinkMessage(nlh))
			s = routes_.setLink(link->ifindex, link->name, link->up, out.update);
		break;
	case RTM_DELLINK:
		if (const auto link = parseLinkMessage(nlh))
			routes_.removeLink(link->ifindex, out.update);
		break;
	case RTM_DELADDR:
		if (mnl_nlmsg_get_payload_len(nlh) >= sizeof(ifaddrmsg) &&
		    static_cast<const ifaddrmsg *>(mnl_nlmsg_get_payload(nlh))->ifa_family == AF_INET)
			routes_.ipv4AddressDeleted(out.update);
		break;
	default: break;
	}
	// A change that could not be applied is lost: only a new reading makes up for it.
	if (!s && !out.failure) {
		out.failure = s.error();
		out.update.mustReread = true;
	}
}

RouteSourceUpdate RouteSource::drain()
{
	RouteSourceUpdate out;
	auto drained = monitor_.drainNotifications([&](const nlmsghdr *nlh) { onNotification(nlh, out); },
						   kMaxDatagramsPerDrain);
	if (!drained) {
		out.failure = drained.error().withContext("cannot follow the node's routes: ");
		out.update.mustReread = true;
		return out;
	}
	if (drained->overrun) {
		overruns_++;
		out.update.mustReread = true;
	}
	return out;
}

} // namespace ipmasq
