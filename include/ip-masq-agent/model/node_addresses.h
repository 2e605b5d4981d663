// SPDX-License-Identifier: Apache-2.0
// The node's own addresses as values, and the one chosen in an outputAddress subnet.
//
// netlink/address_monitor.h reads them over rtnetlink and follows their changes; this is
// the pure part, which the desired state and its tests use without a socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/error.h"

namespace ipmasq {

// One address of one interface of this node, with the kernel's flags (IFA_F_*) that
// decide whether it may be used.
struct NodeAddress {
	Address address; // the local address (IFA_LOCAL, else IFA_ADDRESS)
	unsigned prefixLength = 0;
	// "eth0"; empty for an address learned from a change notification, which names only
	// the interface's index (nothing the agent decides depends on the name).
	std::string interface = {};
	uint32_t ifindex = 0;

	bool secondary = false; // IPv4: not the first address of its subnet on the interface
	bool tentative = false; // IPv6: duplicate address detection has not finished
	bool dadFailed = false; // IPv6: duplicate address detection found another owner
	bool deprecated = false; // its preferred lifetime is over
	bool permanent = false; // configured by hand, not autoconfigured with a lifetime
	// IFA_ADDRESS: the other end of a point-to-point link, else the address itself. With
	// the address, the prefix length and the interface, it is what the kernel tells IPv4
	// addresses apart by.
	Address peer{};

	// "203.0.113.7/24 dev eth0 secondary", as `ip address` words it.
	std::string toString() const;

	bool operator==(const NodeAddress &) const = default;
};

// One change the kernel announced (RTM_NEWADDR, RTM_DELADDR): an address added or changed
// (its flags: duplicate address detection ending, a lifetime running out), or removed.
struct AddressChange {
	enum class Kind { addedOrChanged, removed };
	Kind kind = Kind::addedOrChanged;
	NodeAddress address;
	bool operator==(const AddressChange &) const = default;
};

// readNodeAddresses() (netlink/address_monitor.h) refuses more addresses (or more interfaces) than this: a node
// with that many is misconfigured or under attack, and a dump must end.
inline constexpr size_t kMaxNodeAddresses = 100000;

// This node's addresses as the agent knows them, one type for every reader: the choice in
// an outputAddress subnet, the NAT evaluator's fib and addrtype matches, what masquerade
// translates to. The daemon's loop keeps them (node_address_view.h) and hands the checks
// its snapshot; the modes that run once read them once (fromRead).
struct NodeAddresses {
	std::vector<NodeAddress> addresses;
	// Every address of the node is listed, as read and followed since: an address that is
	// none of them is not this node's.
	bool complete = false;
	// The last known ones, kept after lost notifications or a failed read: they still say
	// what is local, and what an outputAddress subnet gives until a read succeeds.
	bool stale = false;

	// Neither: never read, and the list is empty. A failed read is never "this node has
	// no address".
	bool known() const { return complete || stale; }
	// A read that succeeded (complete), or nothing known when it failed.
	static NodeAddresses fromRead(const Result<std::vector<NodeAddress>> &read);
	// Whether the kernel routes `address` here (fib type local): one of the addresses, or
	// loopback (127.0.0.0/8, ::1).
	bool isLocal(const Address &address) const;
	bool operator==(const NodeAddresses &) const = default;
};


// The address `outputAddress: <subnet>` SNATs to on this node, or none (then the agent
// masquerades as usual). Of the node's addresses inside `subnet` (same family), the
// usable ones compete:
//  - IPv4: every one, secondary and deprecated included: a cloud's per-node address is
//    often a secondary address of the primary interface;
//  - IPv6: those neither tentative (duplicate address detection still running, also
//    optimistic ones), nor dadfailed, nor deprecated: the kernel itself avoids them as
//    source addresses.
// The numerically lowest address wins. An address configured on several interfaces is
// one address: its entry with the lowest ifindex is returned. The interface's state
// (up or down) does not matter: an IPv4 address of a down interface stays local, and
// the kernel removes IPv6 addresses from a down interface itself (unless
// keep_addr_on_down). Pure: the same list always gives the same answer.
std::optional<NodeAddress> pickAddressIn(const Prefix &subnet,
					 const std::vector<NodeAddress> &addresses);

} // namespace ipmasq
