// SPDX-License-Identifier: Apache-2.0
// The node's addresses over rtnetlink: dumps of addresses and links, and the monitor.
#include "ip-masq-agent/node/address_monitor.h"

#include <algorithm>
#include <cerrno>
#include <unordered_map>

#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <fmt/format.h>

namespace ipmasq {

namespace {

// A dump interrupted by a concurrent change is read again this many times at most.
constexpr int kDumpAttempts = 5;
// Room for a burst of notifications while the daemon is busy: with CAP_NET_ADMIN
// (SO_RCVBUFFORCE) 2,000 IPv4 additions fit and 3,000 overran (measured, kernel 6.18).
// An overrun costs the caller a new subscription and one read of every address.
constexpr size_t kMonitorReceiveBuffer = 1024 * 1024;
// Datagrams one drain() reads at most; rtnetlink sends one notification per datagram.
constexpr size_t kMaxDatagramsPerDrain = 4096;

// One address from an RTM_NEWADDR or RTM_DELADDR message (the same layout), or nothing
// for another family (the AF_UNSPEC dump includes MCTP's, for one) or a message without an
// address.
std::optional<NodeAddress> parseAddress(const nlmsghdr *nlh)
{
	if ((nlh->nlmsg_type != RTM_NEWADDR && nlh->nlmsg_type != RTM_DELADDR) ||
	    mnl_nlmsg_get_payload_len(nlh) < sizeof(ifaddrmsg))
		return std::nullopt;
	const auto *ifa = static_cast<const ifaddrmsg *>(mnl_nlmsg_get_payload(nlh));
	if (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6)
		return std::nullopt;
	const Family family = ifa->ifa_family == AF_INET ? Family::ipv4 : Family::ipv6;
	const nlattr *attrs[IFA_MAX + 1] = {};
	netlink::collectAttributes(nlh, sizeof(ifaddrmsg), attrs, IFA_MAX);
	// IFA_ADDRESS is the peer on a point-to-point link; IFA_LOCAL, when present, is
	// always ours (the rule getifaddrs() follows too).
	const nlattr *local = attrs[IFA_LOCAL] ? attrs[IFA_LOCAL] : attrs[IFA_ADDRESS];
	if (!local || mnl_attr_get_payload_len(local) != familyBits(family) / 8)
		return std::nullopt;
	// ifa_flags has room for the first 8 flags only; IFA_FLAGS carries all 32.
	uint32_t flags = ifa->ifa_flags;
	if (attrs[IFA_FLAGS] && mnl_attr_validate(attrs[IFA_FLAGS], MNL_TYPE_U32) >= 0)
		flags = mnl_attr_get_u32(attrs[IFA_FLAGS]);

	NodeAddress address;
	address.address =
		Address::fromBytes(family, static_cast<const uint8_t *>(mnl_attr_get_payload(local)));
	const nlattr *peer = attrs[IFA_ADDRESS];
	address.peer = peer && mnl_attr_get_payload_len(peer) == familyBits(family) / 8
		? Address::fromBytes(family, static_cast<const uint8_t *>(mnl_attr_get_payload(peer)))
		: address.address;
	address.prefixLength = ifa->ifa_prefixlen;
	address.ifindex = ifa->ifa_index;
	address.secondary = flags & IFA_F_SECONDARY;
	address.tentative = flags & IFA_F_TENTATIVE;
	address.dadFailed = flags & IFA_F_DADFAILED;
	address.deprecated = flags & IFA_F_DEPRECATED;
	address.permanent = flags & IFA_F_PERMANENT;
	return address;
}

// One dump of `type` (RTM_GETADDR, RTM_GETLINK) of every family, each reply to `onReply`.
// Retried from the start when a concurrent change interrupted it.
Status dump(netlink::Socket &socket, uint16_t type, const char *what,
	    const std::function<void()> &restart, const netlink::ReplyHandler &onReply)
{
	Status s;
	for (int attempt = 0; attempt < kDumpAttempts; attempt++) {
		restart();
		s = socket.query(type, AF_UNSPEC, NLM_F_DUMP, nullptr, onReply);
		if (s || s.error().errnum != EINTR)
			break;
	}
	if (!s && s.error().errnum == EINTR)
		return fail(fmt::format("cannot read the node's {}: they changed during each of "
					"{} reads", what, kDumpAttempts), EINTR);
	if (!s)
		return fail(s.error().withContext(fmt::format("cannot read the node's {}: ", what)));
	return {};
}

Status tooMany(size_t limit, const char *what)
{
	return fail(fmt::format("this node has more than {} {}: refusing to read them all",
				limit, what),
		    E2BIG);
}

Result<std::vector<NodeAddress>> dumpAddresses(netlink::Socket &socket, size_t limit)
{
	std::vector<NodeAddress> addresses;
	Status s = dump(socket, RTM_GETADDR, "addresses", [&] { addresses.clear(); },
			[&](const nlmsghdr *nlh) -> Status {
				if (nlh->nlmsg_type != RTM_NEWADDR)
					return {};
				std::optional<NodeAddress> address = parseAddress(nlh);
				if (!address)
					return {};
				if (addresses.size() == limit)
					return tooMany(limit, "addresses");
				addresses.push_back(std::move(*address));
				return {};
			});
	if (!s)
		return fail(s.error());
	return addresses;
}

Result<std::unordered_map<uint32_t, std::string>> dumpInterfaceNames(netlink::Socket &socket,
								     size_t limit)
{
	std::unordered_map<uint32_t, std::string> names;
	Status s = dump(socket, RTM_GETLINK, "interfaces", [&] { names.clear(); },
			[&](const nlmsghdr *nlh) -> Status {
				if (nlh->nlmsg_type != RTM_NEWLINK ||
				    mnl_nlmsg_get_payload_len(nlh) < sizeof(ifinfomsg))
					return {};
				const auto *ifi = static_cast<const ifinfomsg *>(mnl_nlmsg_get_payload(nlh));
				const nlattr *attrs[IFLA_IFNAME + 1] = {};
				netlink::collectAttributes(nlh, sizeof(ifinfomsg), attrs, IFLA_IFNAME);
				if (!attrs[IFLA_IFNAME] ||
				    mnl_attr_validate(attrs[IFLA_IFNAME], MNL_TYPE_NUL_STRING) < 0)
					return {};
				if (names.size() == limit)
					return tooMany(limit, "interfaces");
				names[static_cast<uint32_t>(ifi->ifi_index)] =
					mnl_attr_get_str(attrs[IFLA_IFNAME]);
				return {};
			});
	if (!s)
		return fail(s.error());
	return names;
}

} // namespace

Result<std::vector<NodeAddress>> readNodeAddresses(size_t limit)
{
	auto socket = netlink::Socket::open(netlink::Protocol::route);
	if (!socket)
		return fail(socket.error());
	// Addresses first: an address's interface existed before the address dump began,
	// so the link dump that follows lists it, unless it was deleted in between; its
	// addresses went with it then, and are dropped here.
	auto addresses = dumpAddresses(*socket, limit);
	if (!addresses)
		return fail(addresses.error());
	auto names = dumpInterfaceNames(*socket, limit);
	if (!names)
		return fail(names.error());
	std::erase_if(*addresses, [&](NodeAddress &address) {
		const auto name = names->find(address.ifindex);
		if (name == names->end())
			return true;
		address.interface = name->second;
		return false;
	});
	return std::move(*addresses);
}

Result<std::vector<NodeAddress>> readNodeAddressesUnnamed(size_t limit)
{
	auto socket = netlink::Socket::open(netlink::Protocol::route);
	if (!socket)
		return fail(socket.error());
	return dumpAddresses(*socket, limit);
}

AddressMonitor::AddressMonitor(netlink::Socket socket) : socket_(std::move(socket)) {}

Result<AddressMonitor> AddressMonitor::open()
{
	if (auto injected = netlink::injectedMonitorFault(); !injected)
		return fail(injected.error().withContext("cannot follow the node's addresses: "));
	auto socket = netlink::Socket::open(netlink::Protocol::route);
	if (!socket)
		return fail(socket.error());
	for (const unsigned group : {RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR})
		if (auto s = socket->joinGroup(group); !s)
			return fail(s.error().withContext("cannot follow the node's addresses: "));
	// Best effort: without CAP_NET_ADMIN the sysctl net.core.rmem_max caps it, and a
	// smaller buffer only overruns sooner, which drain() reports.
	(void)socket->reserveBuffers(0, kMonitorReceiveBuffer);
	return AddressMonitor(std::move(*socket));
}

Result<AddressChanges> AddressMonitor::drain()
{
	if (auto injected = netlink::injectedMonitorFault(); !injected)
		return fail(injected.error().withContext("cannot follow the node's addresses: "));
	AddressChanges read;
	auto drained = socket_.drainNotifications(
		[&](const nlmsghdr *nlh) {
			std::optional<NodeAddress> address = parseAddress(nlh);
			if (!address)
				return;
			read.changes.push_back(AddressChange{nlh->nlmsg_type == RTM_DELADDR
								     ? AddressChange::Kind::removed
								     : AddressChange::Kind::addedOrChanged,
							     std::move(*address)});
		},
		kMaxDatagramsPerDrain);
	if (!drained)
		return fail(drained.error().withContext("cannot follow the node's addresses: "));
	if (drained->overrun) {
		overruns_++;
		read.overrun = true;
	}
	return read;
}

} // namespace ipmasq
