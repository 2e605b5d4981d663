// SPDX-License-Identifier: Apache-2.0
// The node's own addresses over rtnetlink: read, and followed live (node_addresses.h chooses).
//
// How the daemon follows them (for `outputAddress: <CIDR>`): open an AddressMonitor
// FIRST, then readNodeAddresses() and pickAddressIn(). Whenever the monitor's fd() is
// readable and drain() returns true, read them all again and pick again. Subscribing
// before the first read is what makes this complete: a change that races the read is
// then both in the read and in the monitor's queue, which costs one needless re-read at
// worst and never misses a change. A re-read is cheap (one dump of every address and
// one of every link: 1 to 2 ms with 1,000 addresses, measured), so the monitor does
// not try to tell which changes matter: the caller compares the picked address.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ip-masq-agent/error.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/node_addresses.h"

namespace ipmasq {

// Every IPv4 and IPv6 address of every interface of this node (this network
// namespace), in the kernel's order: one RTM_GETADDR dump and one RTM_GETLINK dump for
// the interfaces' names. Needs no privileges. More than `limit` addresses or interfaces
// is an Error with E2BIG. A dump that a concurrent change interrupts (NLM_F_DUMP_INTR)
// is read again, a few times at most; then the Error carries EINTR and the caller tries
// later (its monitor, subscribed before, will be readable again anyway).
Result<std::vector<NodeAddress>> readNodeAddresses(size_t limit = kMaxNodeAddresses);

// Notifications of added, removed and changed addresses (RTNLGRP_IPV4_IFADDR and
// RTNLGRP_IPV6_IFADDR) on a non-blocking socket for the daemon's poll loop. Needs no
// privileges. See the top of this file for how to use it with readNodeAddresses().
class AddressMonitor
{
public:
	static Result<AddressMonitor> open();

	int fd() const { return socket_.fd(); }

	// Reads the pending notifications without blocking. True if an address was added,
	// removed or changed (its flags: duplicate address detection finishing, a lifetime
	// running out) since the last drain; an overrun of the receive queue (ENOBUFS:
	// notifications were lost) counts as a change. A flood is read in bounded portions:
	// what is left keeps fd() readable for the next round of the caller's poll().
	// The kernel queues a notification before the request that made the change returns,
	// except for a new IPv6 address under duplicate address detection: that one is
	// announced when the detection ends (1 to 2 s later), the moment it becomes usable.
	Result<bool> drain();

	// How many times the kernel dropped notifications since open(), for logs and tests.
	uint64_t overruns() const { return overruns_; }

private:
	explicit AddressMonitor(netlink::Socket socket);

	netlink::Socket socket_;
	uint64_t overruns_ = 0;
};

} // namespace ipmasq
