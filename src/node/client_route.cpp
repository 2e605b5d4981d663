// SPDX-License-Identifier: Apache-2.0
// How this node reaches a client: the route's interface, and a bridge's port from the
// neighbour and forwarding tables, each a "get" request over rtnetlink.
#include "ip-masq-agent/node/client_route.h"

#include <cerrno>
#include <cstring>

#include <libmnl/libmnl.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <fmt/format.h>

namespace ipmasq {

namespace {

// Each answer comes within the request's own send and receive: a second is for a kernel
// that is stuck, never for a busy one.
constexpr std::chrono::milliseconds kReplyTimeout{1000};

// The request's family header in place of the one-byte rtgenmsg Socket::query() puts
// (the kernel reads a get request's header as its own type), then its attributes.
template<typename Header>
netlink::RequestBuilder request(Header header, const std::function<void(nlmsghdr *)> &attributes)
{
	return [header, attributes](nlmsghdr *nlh) {
		nlh->nlmsg_len = MNL_NLMSG_HDRLEN;
		std::memcpy(mnl_nlmsg_put_extra_header(nlh, sizeof(Header)), &header, sizeof(Header));
		attributes(nlh);
	};
}

// The address as an attribute of `type` (RTA_DST, NDA_DST): its bytes in network order.
std::function<void(nlmsghdr *)> addressAttribute(uint16_t type, const Address &address)
{
	return [type, bytes = address.bytes()](nlmsghdr *nlh) {
		mnl_attr_put(nlh, type, bytes.size(), bytes.data());
	};
}

unsigned char familyOf(const Address &address)
{
	return address.family == Family::ipv4 ? AF_INET : AF_INET6;
}

// The u32 of `attr`, if it is one.
std::optional<uint32_t> u32Of(const nlattr *attr)
{
	if (!attr || mnl_attr_get_payload_len(attr) != sizeof(uint32_t))
		return std::nullopt;
	return mnl_attr_get_u32(attr);
}

// IFLA_LINKINFO's IFLA_INFO_KIND is "bridge".
bool isBridge(const nlattr *linkInfo)
{
	if (!linkInfo)
		return false;
	const nlattr *info[IFLA_INFO_MAX + 1] = {};
	netlink::collectAttributes(mnl_attr_get_payload(linkInfo),
				   static_cast<const char *>(mnl_attr_get_payload(linkInfo)) +
					   mnl_attr_get_payload_len(linkInfo),
				   info, IFLA_INFO_MAX);
	return info[IFLA_INFO_KIND] && mnl_attr_validate(info[IFLA_INFO_KIND], MNL_TYPE_NUL_STRING) >= 0 &&
	       std::string_view(mnl_attr_get_str(info[IFLA_INFO_KIND])) == "bridge";
}

} // namespace

std::string ClientRoute::text() const
{
	if (local)
		return "this node";
	if (!bridgePort.empty())
		return fmt::format("{} (port of {})", bridgePort, interface);
	return interface;
}

std::string ClientRoute::mostSpecific() const
{
	if (local)
		return {};
	return bridgePort.empty() ? interface : bridgePort;
}

Result<ClientRoutes> ClientRoutes::open()
{
	auto socket = netlink::Socket::open(netlink::Protocol::route);
	if (!socket)
		return fail(socket.error().withContext("cannot ask the node's routes: "));
	if (auto s = socket->setReplyTimeout(kReplyTimeout); !s)
		return fail(s.error().withContext("cannot ask the node's routes: "));
	return ClientRoutes(std::move(*socket));
}

Status ClientRoutes::ask(uint16_t type, uint16_t family, const netlink::RequestBuilder &build,
			 const netlink::ReplyHandler &onReply)
{
	if (timedOut_)
		return fail("the kernel did not answer an earlier request within 1 s", ETIMEDOUT);
	Status answered = socket_.query(type, family, 0, build, onReply);
	if (!answered && answered.error().errnum == ETIMEDOUT)
		timedOut_ = true;
	return answered;
}

Result<ClientRoute> ClientRoutes::of(const Address &client)
{
	rtmsg rtm{};
	rtm.rtm_family = familyOf(client);
	rtm.rtm_dst_len = static_cast<unsigned char>(familyBits(client.family));
	ClientRoute route;
	uint32_t oif = 0;
	const auto onRoute = [&](const nlmsghdr *nlh) -> Status {
		if (nlh->nlmsg_type != RTM_NEWROUTE || mnl_nlmsg_get_payload_len(nlh) < sizeof(rtmsg))
			return {};
		rtmsg answer;
		std::memcpy(&answer, mnl_nlmsg_get_payload(nlh), sizeof(answer));
		const nlattr *attrs[RTA_MAX + 1] = {};
		netlink::collectAttributes(nlh, sizeof(rtmsg), attrs, RTA_MAX);
		route.local = answer.rtm_type == RTN_LOCAL;
		oif = u32Of(attrs[RTA_OIF]).value_or(0);
		return {};
	};
	if (auto s = ask(RTM_GETROUTE, familyOf(client), request(rtm, addressAttribute(RTA_DST, client)),
			 onRoute);
	    !s)
		return fail(s.error().withContext(fmt::format("cannot ask the route to {}: ", client.toString())));
	if (route.local || oif == 0)
		return route;
	auto link = this->link(oif);
	if (!link)
		return route; // gone since: the route's interface is all there was
	route.interface = link->name;
	if (link->bridge)
		if (const uint32_t port = bridgePortOf(client, oif); port != 0)
			if (auto portLink = this->link(port))
				route.bridgePort = portLink->name;
	return route;
}

Result<ClientRoutes::Link> ClientRoutes::link(uint32_t ifindex)
{
	if (auto it = links_.find(ifindex); it != links_.end())
		return it->second;
	ifinfomsg ifi{};
	ifi.ifi_family = AF_UNSPEC;
	ifi.ifi_index = static_cast<int>(ifindex);
	std::optional<Link> found;
	const auto onLink = [&](const nlmsghdr *nlh) -> Status {
		if (nlh->nlmsg_type != RTM_NEWLINK || mnl_nlmsg_get_payload_len(nlh) < sizeof(ifinfomsg))
			return {};
		const nlattr *attrs[IFLA_MAX + 1] = {};
		netlink::collectAttributes(nlh, sizeof(ifinfomsg), attrs, IFLA_MAX);
		if (!attrs[IFLA_IFNAME] || mnl_attr_validate(attrs[IFLA_IFNAME], MNL_TYPE_NUL_STRING) < 0)
			return {};
		found = Link{mnl_attr_get_str(attrs[IFLA_IFNAME]), isBridge(attrs[IFLA_LINKINFO])};
		return {};
	};
	if (auto s = ask(RTM_GETLINK, AF_UNSPEC, request(ifi, [](nlmsghdr *) {}), onLink); !s)
		return fail(s.error());
	if (!found)
		return fail(fmt::format("interface {} has no name", ifindex), ENOENT);
	links_.emplace(ifindex, *found);
	return *found;
}

uint32_t ClientRoutes::bridgePortOf(const Address &client, uint32_t bridge)
{
	// The client's MAC address on the bridge (kernel 5.0 and later answer a get).
	ndmsg ndm{};
	ndm.ndm_family = familyOf(client);
	ndm.ndm_ifindex = static_cast<int>(bridge);
	std::optional<std::array<uint8_t, ETH_ALEN>> mac;
	const auto onNeighbour = [&](const nlmsghdr *nlh) -> Status {
		const nlattr *attrs[NDA_MAX + 1] = {};
		if (nlh->nlmsg_type == RTM_NEWNEIGH && mnl_nlmsg_get_payload_len(nlh) >= sizeof(ndmsg))
			netlink::collectAttributes(nlh, sizeof(ndmsg), attrs, NDA_MAX);
		if (attrs[NDA_LLADDR] && mnl_attr_get_payload_len(attrs[NDA_LLADDR]) == ETH_ALEN) {
			mac.emplace();
			std::memcpy(mac->data(), mnl_attr_get_payload(attrs[NDA_LLADDR]), ETH_ALEN);
		}
		return {};
	};
	if (!ask(RTM_GETNEIGH, ndm.ndm_family, request(ndm, addressAttribute(NDA_DST, client)), onNeighbour) ||
	    !mac)
		return 0;
	// The bridge's forwarding entry for that MAC: its port (kernel 5.1 and later).
	ndmsg fdb{};
	fdb.ndm_family = AF_BRIDGE;
	uint32_t port = 0;
	const auto onEntry = [&](const nlmsghdr *nlh) -> Status {
		if (nlh->nlmsg_type != RTM_NEWNEIGH || mnl_nlmsg_get_payload_len(nlh) < sizeof(ndmsg))
			return {};
		ndmsg answer;
		std::memcpy(&answer, mnl_nlmsg_get_payload(nlh), sizeof(answer));
		if (answer.ndm_ifindex > 0 && static_cast<uint32_t>(answer.ndm_ifindex) != bridge)
			port = static_cast<uint32_t>(answer.ndm_ifindex);
		return {};
	};
	const auto attributes = [&](nlmsghdr *nlh) {
		mnl_attr_put(nlh, NDA_LLADDR, ETH_ALEN, mac->data());
		mnl_attr_put_u32(nlh, NDA_MASTER, bridge);
	};
	if (!ask(RTM_GETNEIGH, AF_BRIDGE, request(fdb, attributes), onEntry))
		return 0;
	return port;
}

} // namespace ipmasq
