// SPDX-License-Identifier: Apache-2.0
// How this node reaches a client of its source NAT (a pod): the interface the route to
// the client's address leaves through (Calico's /32 via caliXXX, a bridge's subnet route),
// and for a bridge the port that has the client's MAC address (the neighbour table, then
// the bridge's forwarding table). Asked of the kernel per address with "get" requests
// (RTM_GETROUTE, RTM_GETLINK, RTM_GETNEIGH), at most five each, for the few clients a
// report shows: never a dump, so its cost does not grow with the node's routes.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/netlink/socket.h"

namespace ipmasq {

struct ClientRoute {
	bool local = false; // one of this node's own addresses: its own or hostNetwork traffic
	std::string interface; // the route's interface ("cali1a2b3c", "cni0"); "" when it has none
	// The bridge port that has the client's MAC address ("veth9f8e"); "" when the route's
	// interface is no bridge, or the neighbour or forwarding entry is not there.
	std::string bridgePort;

	// "this node", "veth9f8e (port of cni0)", "cali1a2b3c", or "" when nothing is known.
	std::string text() const;
	// The most specific interface: the bridge port, else the route's; "" for this node.
	std::string mostSpecific() const;
};

class ClientRoutes
{
public:
	// An rtnetlink socket of its own, answering within 1 s per request.
	static Result<ClientRoutes> open();

	// The route toward `client` (the output route, as `ip route get ADDRESS` shows it),
	// then for a bridge its port. An error only when the route itself cannot be asked; a
	// missing neighbour or forwarding entry leaves bridgePort empty. After a request that
	// timed out every later call fails at once: a stuck kernel costs one timeout, not one
	// per client.
	Result<ClientRoute> of(const Address &client);

private:
	struct Link {
		std::string name;
		bool bridge = false;
	};

	explicit ClientRoutes(netlink::Socket socket) : socket_(std::move(socket)) {}
	// One get request, its answers to `onReply`; notes a timeout.
	Status ask(uint16_t type, uint16_t family, const netlink::RequestBuilder &build,
		   const netlink::ReplyHandler &onReply);
	Result<Link> link(uint32_t ifindex);
	// The port of `bridge` whose forwarding entry has the client's MAC; 0 when not found.
	uint32_t bridgePortOf(const Address &client, uint32_t bridge);

	netlink::Socket socket_;
	std::unordered_map<uint32_t, Link> links_; // asked once per interface and instance
	bool timedOut_ = false;
};

} // namespace ipmasq
