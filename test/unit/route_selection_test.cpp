// SPDX-License-Identifier: Apache-2.0
// The routes nonMasqueradeDiscovery selects, kept as notifications change them (the kernel's
// unsaid semantics included), and the parse of rtnetlink route messages.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include "ip-masq-agent/node/route_source.h"
#include "ip-masq-agent/node/route_selection.h"

using namespace ipmasq;

namespace {

Prefix prefix(const char *text)
{
	auto parsed = parsePrefix(text);
	REQUIRE(parsed);
	return *parsed;
}

Address address(const char *text)
{
	auto parsed = parseAddress(text);
	REQUIRE(parsed);
	return *parsed;
}

RouteFilter birdFilter()
{
	RouteFilter filter;
	filter.protocols = {RouteProtocol{12}};
	filter.within = {prefix("10.244.0.0/16"), prefix("fd00:10:244::/56")};
	return filter;
}

KernelRoute route(const char *destination, uint8_t protocol = 12, const char *via = "192.0.2.2",
		  uint32_t ifindex = 7)
{
	KernelRoute r;
	r.destination = prefix(destination);
	r.table = RT_TABLE_MAIN;
	r.protocol = RouteProtocol{protocol};
	r.type = RTN_UNICAST;
	r.nextHops = {RouteNextHop{via ? std::optional<Address>(address(via)) : std::nullopt, ifindex}};
	return r;
}

KernelRoute blackhole(const char *destination)
{
	KernelRoute r = route(destination);
	r.type = RTN_BLACKHOLE;
	r.nextHops.clear();
	return r;
}

std::vector<std::string> origins(const SelectedRoutes &routes)
{
	std::vector<std::string> out;
	for (const SelectedRoute &r : routes.all())
		out.push_back(r.origin());
	return out;
}

std::vector<std::string> changes(const RouteUpdate &update)
{
	std::vector<std::string> out;
	for (const RouteChange &c : update.changes)
		out.push_back((c.added ? "+ " : "- ") + c.route.origin());
	return out;
}

using Strings = std::vector<std::string>;

SelectedRoutes withTunl0(RouteFilter filter = birdFilter())
{
	SelectedRoutes routes(std::move(filter));
	RouteUpdate ignored;
	REQUIRE(routes.setLink(7, "tunl0", true, ignored));
	REQUIRE(routes.setLink(8, "eth0", true, ignored));
	REQUIRE(routes.setLink(9, "flannel.1", true, ignored));
	return routes;
}

} // namespace

TEST_CASE("routes: a protocol selects its unicast, blackhole and unreachable routes of the main table")
{
	SelectedRoutes routes = withTunl0();
	RouteUpdate update;
	REQUIRE(routes.apply(route("10.244.1.0/26"), false, false, update));
	REQUIRE(routes.apply(blackhole("10.244.0.0/26"), false, false, update));
	KernelRoute unreachable = blackhole("10.244.2.0/26");
	unreachable.type = RTN_UNREACHABLE;
	REQUIRE(routes.apply(unreachable, false, false, update));
	// Not taken: another protocol, another table, another type, a cached exception, IPv6
	// while it is off.
	REQUIRE(routes.apply(route("10.244.3.0/26", 4), false, false, update));
	KernelRoute local = route("10.244.4.0/26");
	local.table = RT_TABLE_LOCAL;
	REQUIRE(routes.apply(local, false, false, update));
	KernelRoute broadcast = route("10.244.5.0/26");
	broadcast.type = RTN_BROADCAST;
	REQUIRE(routes.apply(broadcast, false, false, update));
	KernelRoute cloned = route("10.244.6.0/26");
	cloned.cloned = true;
	REQUIRE(routes.apply(cloned, false, false, update));
	REQUIRE(routes.apply(route("fd00:10:244::/64", 12, "fe80::1"), false, false, update));
	CHECK(origins(routes) == Strings{"route blackhole 10.244.0.0/26 proto bird",
					 "route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0",
					 "route unreachable 10.244.2.0/26 proto bird"});
	CHECK(update.changes.size() == 3);
	CHECK(update.outside.empty());
}

TEST_CASE("routes: a route outside within is not kept, and is handed on to be said")
{
	SelectedRoutes routes = withTunl0();
	RouteUpdate update;
	REQUIRE(routes.apply(blackhole("10.96.0.0/12"), false, false, update));
	CHECK(routes.size() == 0);
	REQUIRE(update.outside.size() == 1);
	CHECK(update.outside[0].origin() == "route blackhole 10.96.0.0/12 proto bird");
}

TEST_CASE("routes: an interface selects the hops through it, whatever their protocol")
{
	RouteFilter filter = birdFilter();
	filter.protocols.clear();
	filter.interfaces = {InterfacePattern{"flannel.1", false, {}}, InterfacePattern{"cali", true, {}}};
	SelectedRoutes routes = withTunl0(filter);
	RouteUpdate update;
	REQUIRE(routes.setLink(20, "cali12345", true, update));
	REQUIRE(routes.apply(route("10.244.2.0/24", 3, "10.244.2.0", 9), false, false, update));
	REQUIRE(routes.apply(route("10.244.9.7/32", 4, nullptr, 20), false, false, update));
	REQUIRE(routes.apply(route("10.244.3.0/24", 3, "10.244.3.0", 8), false, false, update)); // eth0
	KernelRoute multipath = route("10.244.4.0/24", 12, "192.0.2.9", 8);
	multipath.nextHops.push_back(RouteNextHop{address("10.244.4.0"), 9});
	REQUIRE(routes.apply(multipath, false, false, update));
	CHECK(origins(routes) == Strings{"route 10.244.2.0/24 proto boot via 10.244.2.0 dev flannel.1",
					 "route 10.244.4.0/24 proto bird via 10.244.4.0 dev flannel.1",
					 "route 10.244.9.7/32 proto static dev cali12345"});
}

TEST_CASE("routes: a replace removes what it replaces; a delete removes; ECMP hops count apart")
{
	SelectedRoutes routes = withTunl0();
	RouteUpdate update;
	REQUIRE(routes.apply(route("10.244.1.0/26"), false, false, update));
	// Replaced by a route of another protocol: no longer selected.
	REQUIRE(routes.apply(route("10.244.1.0/26", 4), false, true, update));
	CHECK(routes.size() == 0);
	REQUIRE(routes.apply(route("10.244.1.0/26"), false, false, update));
	REQUIRE(routes.apply(route("10.244.1.0/26", 12, "192.0.2.3"), false, true, update));
	CHECK(origins(routes) == Strings{"route 10.244.1.0/26 proto bird via 192.0.2.3 dev tunl0"});
	// The same route again (a dump and its queued notification): no change.
	RouteUpdate again;
	REQUIRE(routes.apply(route("10.244.1.0/26", 12, "192.0.2.3"), false, true, again));
	REQUIRE(routes.apply(route("10.244.1.0/26", 12, "192.0.2.3"), false, false, again));
	CHECK(again.changes.empty());
	// Another metric is another route.
	KernelRoute metric = route("10.244.1.0/26", 12, "192.0.2.4");
	metric.priority = 20;
	REQUIRE(routes.apply(metric, false, false, update));
	CHECK(routes.size() == 2);
	RouteUpdate removed;
	REQUIRE(routes.apply(route("10.244.1.0/26", 12, "192.0.2.3"), true, false, removed));
	CHECK(changes(removed) == Strings{"- route 10.244.1.0/26 proto bird via 192.0.2.3 dev tunl0"});
	CHECK(origins(routes) == Strings{"route 10.244.1.0/26 proto bird metric 20 via 192.0.2.4 dev tunl0"});
	CHECK(changes(update) == Strings{"+ route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0",
					 "- route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0",
					 "+ route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0",
					 "- route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0",
					 "+ route 10.244.1.0/26 proto bird via 192.0.2.3 dev tunl0",
					 "+ route 10.244.1.0/26 proto bird metric 20 via 192.0.2.4 dev tunl0"});
}

TEST_CASE("routes: a link going down takes its IPv4 routes (the kernel says nothing), not IPv6's")
{
	RouteFilter filter = birdFilter();
	filter.ipv6 = true;
	SelectedRoutes routes = withTunl0(filter);
	RouteUpdate update;
	REQUIRE(routes.apply(route("10.244.1.0/26"), false, false, update));
	REQUIRE(routes.apply(route("10.244.2.0/26", 12, "192.0.2.5", 8), false, false, update));
	REQUIRE(routes.apply(route("fd00:10:244::/64", 12, "fe80::1"), false, false, update));
	REQUIRE(routes.apply(blackhole("10.244.0.0/26"), false, false, update));
	RouteUpdate down;
	REQUIRE(routes.setLink(7, "tunl0", false, down));
	CHECK(changes(down) == Strings{"- route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0"});
	CHECK(routes.size() == 3);
	RouteUpdate gone;
	routes.removeLink(8, gone);
	CHECK(changes(gone) == Strings{"- route 10.244.2.0/26 proto bird via 192.0.2.5 dev eth0"});
	CHECK(origins(routes) == Strings{"route blackhole 10.244.0.0/26 proto bird",
					 "route fd00:10:244::/64 proto bird via fe80::1 dev tunl0"});
	CHECK_FALSE(down.mustReread);
}

TEST_CASE("routes: an IPv4 address deleted, or a rename that changes a match, asks for a reading")
{
	SelectedRoutes routes = withTunl0();
	RouteUpdate none;
	routes.ipv4AddressDeleted(none);
	CHECK_FALSE(none.mustReread); // nothing selected: nothing to lose
	RouteUpdate update;
	REQUIRE(routes.apply(route("10.244.1.0/26"), false, false, update));
	routes.ipv4AddressDeleted(update);
	CHECK(update.mustReread);

	RouteFilter filter = birdFilter();
	filter.interfaces = {InterfacePattern{"flannel.1", false, {}}};
	SelectedRoutes byName = withTunl0(filter);
	RouteUpdate renamed;
	REQUIRE(byName.setLink(8, "eth1", true, renamed));
	CHECK_FALSE(renamed.mustReread);
	REQUIRE(byName.setLink(8, "flannel.1", true, renamed));
	CHECK(renamed.mustReread);
}

TEST_CASE("routes: past the bound nothing is kept and the error says so")
{
	SelectedRoutes routes(birdFilter(), 2);
	RouteUpdate update;
	REQUIRE(routes.apply(route("10.244.1.0/26"), false, false, update));
	REQUIRE(routes.apply(route("10.244.2.0/26"), false, false, update));
	const Status over = routes.apply(route("10.244.3.0/26"), false, false, update);
	REQUIRE_FALSE(over);
	CHECK(over.error().errnum == E2BIG);
	CHECK(over.error().message == "more than 2 route next hops selected: narrow routeProtocols, "
				      "routeInterfaces or within");
	CHECK(routes.size() == 2);
	REQUIRE(routes.apply(route("10.244.2.0/26"), false, false, update)); // known: fine
}

TEST_CASE("routes: a new reading replaces the selection, the difference as changes")
{
	SelectedRoutes routes = withTunl0();
	RouteUpdate update;
	REQUIRE(routes.apply(route("10.244.1.0/26"), false, false, update));
	REQUIRE(routes.apply(route("10.244.2.0/26"), false, false, update));
	SelectedRoutes fresh(routes.filter());
	RouteUpdate reading;
	REQUIRE(fresh.setLink(7, "tunl0", true, reading));
	REQUIRE(fresh.offer(route("10.244.2.0/26"), reading));
	REQUIRE(fresh.offer(route("10.244.3.0/26"), reading));
	REQUIRE(fresh.offer(blackhole("10.96.0.0/12"), reading));
	CHECK(reading.changes.empty());
	CHECK(reading.outside.size() == 1);
	routes.takeRoutesOf(fresh, reading);
	CHECK(changes(reading) == Strings{"- route 10.244.1.0/26 proto bird via 192.0.2.2 dev tunl0",
					  "+ route 10.244.3.0/26 proto bird via 192.0.2.2 dev tunl0"});
	CHECK(routes.size() == 2);
	CHECK(routes.linkName(7) == std::optional<std::string>("tunl0"));
	CHECK_FALSE(routes.linkName(8)); // the reading's links replace the old
}

namespace {

// An rtnetlink route message as the kernel builds it.
class Message
{
public:
	Message(uint16_t type, uint8_t family, uint8_t dstLen)
	{
		nlh_ = mnl_nlmsg_put_header(buffer_.data());
		nlh_->nlmsg_type = type;
		auto *rtm = static_cast<rtmsg *>(mnl_nlmsg_put_extra_header(nlh_, sizeof(rtmsg)));
		rtm->rtm_family = family;
		rtm->rtm_dst_len = dstLen;
		rtm->rtm_table = RT_TABLE_MAIN;
		rtm->rtm_protocol = 12;
		rtm->rtm_type = RTN_UNICAST;
	}
	rtmsg &header() { return *static_cast<rtmsg *>(mnl_nlmsg_get_payload(nlh_)); }
	void address(uint16_t type, const char *text)
	{
		const std::vector<uint8_t> bytes = ::address(text).bytes();
		mnl_attr_put(nlh_, type, bytes.size(), bytes.data());
	}
	void u32(uint16_t type, uint32_t value) { mnl_attr_put_u32(nlh_, type, value); }
	nlmsghdr *nlh() { return nlh_; }

private:
	std::vector<char> buffer_ = std::vector<char>(MNL_SOCKET_BUFFER_SIZE);
	nlmsghdr *nlh_;
};

} // namespace

TEST_CASE("route messages: attributes, multipath, RTA_TABLE; malformed ones are nothing")
{
	Message m(RTM_NEWROUTE, AF_INET, 26);
	m.address(RTA_DST, "10.244.1.0");
	m.address(RTA_GATEWAY, "192.0.2.2");
	m.u32(RTA_OIF, 7);
	m.u32(RTA_PRIORITY, 20);
	auto parsed = parseRouteMessage(m.nlh());
	REQUIRE(parsed);
	CHECK(parsed->destination.toString() == "10.244.1.0/26");
	CHECK(parsed->priority == 20);
	CHECK(parsed->table == RT_TABLE_MAIN);
	CHECK(parsed->protocol.number == 12);
	REQUIRE(parsed->nextHops.size() == 1);
	CHECK(parsed->nextHops[0].gateway == address("192.0.2.2"));
	CHECK(parsed->nextHops[0].ifindex == 7);

	// RTA_TABLE wins over the header's (tables above 255); host bits are cleared.
	Message t(RTM_DELROUTE, AF_INET6, 48);
	t.header().rtm_table = RT_TABLE_COMPAT;
	t.u32(RTA_TABLE, 1000);
	t.address(RTA_DST, "fd00:10:244:1::");
	auto table = parseRouteMessage(t.nlh());
	REQUIRE(table);
	CHECK(table->table == 1000);
	CHECK(table->destination.toString() == "fd00:10:244::/48");
	CHECK(table->nextHops.empty());

	// Multipath: rtnexthops, each with its gateway.
	Message mp(RTM_NEWROUTE, AF_INET, 24);
	mp.address(RTA_DST, "10.244.2.0");
	nlattr *nest = mnl_attr_nest_start(mp.nlh(), RTA_MULTIPATH);
	for (const auto &[gateway, ifindex] : {std::pair{"192.0.2.2", 7}, std::pair{"192.0.2.3", 8}}) {
		auto *hop = static_cast<rtnexthop *>(mnl_nlmsg_get_payload_tail(mp.nlh()));
		mp.nlh()->nlmsg_len += MNL_ALIGN(sizeof(rtnexthop));
		std::memset(hop, 0, sizeof(*hop));
		hop->rtnh_ifindex = ifindex;
		const size_t before = mp.nlh()->nlmsg_len;
		mp.address(RTA_GATEWAY, gateway);
		hop->rtnh_len = static_cast<unsigned short>(MNL_ALIGN(sizeof(rtnexthop)) + mp.nlh()->nlmsg_len - before);
	}
	mnl_attr_nest_end(mp.nlh(), nest);
	auto multipath = parseRouteMessage(mp.nlh());
	REQUIRE(multipath);
	REQUIRE(multipath->nextHops.size() == 2);
	CHECK(multipath->nextHops[1].gateway == address("192.0.2.3"));
	CHECK(multipath->nextHops[1].ifindex == 8);

	Message longer(RTM_NEWROUTE, AF_INET, 33);
	CHECK_FALSE(parseRouteMessage(longer.nlh()));
	Message family(RTM_NEWROUTE, AF_BRIDGE, 0);
	CHECK_FALSE(parseRouteMessage(family.nlh()));
	Message wrongSize(RTM_NEWROUTE, AF_INET, 24);
	wrongSize.address(RTA_DST, "fd00::");
	CHECK_FALSE(parseRouteMessage(wrongSize.nlh()));
	Message link(RTM_NEWLINK, AF_INET, 0);
	CHECK_FALSE(parseRouteMessage(link.nlh()));
	Message shortHeader(RTM_NEWROUTE, AF_INET, 0);
	shortHeader.nlh()->nlmsg_len = MNL_NLMSG_HDRLEN + 4;
	CHECK_FALSE(parseRouteMessage(shortHeader.nlh()));
}
