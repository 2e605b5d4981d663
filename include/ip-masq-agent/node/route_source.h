// SPDX-License-Identifier: Apache-2.0
// The node's routes over rtnetlink, as nonMasqueradeDiscovery selects them: read once, then
// followed notification by notification (route_selection.h keeps what is selected).
//
// How it stays exact: the source subscribes to route, link and IPv4 address notifications
// BEFORE it reads (a dump of the main table per family, filtered by the kernel to each
// protocol when no interface is named), so a change racing the read is both in the read
// and queued; each notification carries the whole of one route, and applying the queue
// after the read leaves every route as the kernel has it. The kernel says nothing when it
// removes IPv4 routes with a link going down (the selection removes them itself) or with an
// address (then, and after lost notifications, the update says mustReread: the caller
// calls reread()). A read that fails changes nothing: the last routes stay, and the caller
// says it is stale and tries again later. Memory is what is selected; CPU per notification
// is one parse and a few lookups, whatever the size of the routing table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/node/route_selection.h"

struct nlmsghdr;

namespace ipmasq {

// The route an RTM_NEWROUTE or RTM_DELROUTE message describes, or nullopt: another message
// type or family, a header or attribute that does not fit (nothing is read outside the
// message), more than kMaxRouteHops hops.
std::optional<KernelRoute> parseRouteMessage(const nlmsghdr *nlh);
// A multipath route's hops, at most (the kernel's own limit is lower).
inline constexpr size_t kMaxRouteHops = 256;

// What one drain() or reread() did, and whether reading failed.
struct RouteSourceUpdate {
	RouteUpdate update;		// the changes applied, in order, and what was outside within
	std::optional<Error> failure;	// a read that failed (the routes are as they were before it)
	bool reread = false;		// the routes were read again: `update` is the difference
};

class RouteSource
{
public:
	// Subscribes to the notifications; nothing is read yet. The first reread() is the
	// first reading (its update adds every route selected); until one succeeds nothing is
	// known, and the caller tries again later.
	static Result<RouteSource> open(RouteFilter filter, size_t maxRoutes = kMaxSelectedRoutes);

	// The notifications' descriptor, for the caller's poll().
	int fd() const { return monitor_.fd(); }
	const SelectedRoutes &routes() const { return routes_; }

	// Applies the pending notifications, in order, without blocking (a flood is read in
	// bounded portions: what is left keeps fd() readable). update.mustReread: call reread().
	RouteSourceUpdate drain();
	// Reads every route again; the update holds the difference to what was known. On
	// failure nothing changes.
	RouteSourceUpdate reread();

	// The integration tests' fault (IP_MASQ_AGENT_TEST_FAULT=route-dump-fails, modes.cpp):
	// every reading fails as a dump the kernel ends with an error does; notifications
	// still come.
	void simulateFailingDumps() { failDumps_ = true; }

	uint64_t overruns() const { return overruns_; }
	uint64_t rereads() const { return rereads_; }
	uint64_t notifications() const { return notifications_; }

private:
	RouteSource(netlink::Socket monitor, netlink::Socket dumper, SelectedRoutes routes);
	Status readInto(SelectedRoutes &fresh, RouteUpdate &update);
	void onNotification(const nlmsghdr *nlh, RouteSourceUpdate &out);

	netlink::Socket monitor_;
	netlink::Socket dumper_;
	SelectedRoutes routes_;
	uint64_t overruns_ = 0;
	uint64_t rereads_ = 0;
	uint64_t notifications_ = 0;
	bool failDumps_ = false;
};

} // namespace ipmasq
