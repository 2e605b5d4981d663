// SPDX-License-Identifier: Apache-2.0
// This node's addresses as the agent knows them: one read, then every change the kernel
// announces, applied in order (netlink/address_monitor.h says why that is exact).
//
// Pure: the daemon feeds it what the monitor and the read return, tests feed it by hand.
// A busy node (pods' veths coming and going, thousands of addresses elsewhere) costs a map
// update per notification, never a dump of every address, and only a change to an address
// inside a watched subnet (an outputAddress) may change what the agent does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/model/node_addresses.h"

namespace ipmasq {

class NodeAddressView
{
public:
	enum class State {
		unknown, // never read: nothing can be said about them
		current, // read, and every change announced since applied
		stale, // read, but changes were lost since (or the addresses are too many):
		       // the last known, kept until a read succeeds
	};

	explicit NodeAddressView(size_t limit = kMaxNodeAddresses) : limit_(limit) {}

	State state() const { return state_; }
	size_t size() const { return addresses_.size(); }
	// The addresses, in a fixed order: complete while current, stale after lost changes,
	// not known while unknown.
	NodeAddresses addresses() const;

	// A complete read, made after the monitor whose changes follow subscribed: the view
	// becomes it, current.
	void replace(const std::vector<NodeAddress> &addresses);
	// One change, in the order the kernel announced it: an address added or changed takes
	// the announced state whole (flags, prefix), a removed one goes. True when the address
	// lies in one of `watched` (same family): only those can change a choice. Ignored
	// while unknown (the first read comes after and holds it).
	bool apply(const AddressChange &change, const std::vector<Prefix> &watched);
	// Changes were lost (the monitor overran): stale until the next replace().
	void lose();

	// Whether `address` lies in one of `prefixes` of its family.
	static bool inAny(const Address &address, const std::vector<Prefix> &prefixes);

private:
	// What the kernel tells addresses apart by: IPv4 by address, prefix length and peer on
	// an interface (the same address may be there twice with other masks), IPv6 by address
	// on an interface (a second one is EEXIST; a new prefix length changes the first).
	using Key = std::tuple<Family, uint32_t, AddressValue, unsigned, AddressValue>;
	static Key keyOf(const NodeAddress &address);

	size_t limit_;
	State state_ = State::unknown;
	std::map<Key, NodeAddress> addresses_;
};

} // namespace ipmasq
