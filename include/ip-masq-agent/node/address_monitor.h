// SPDX-License-Identifier: Apache-2.0
// The node's own addresses over rtnetlink: read, and followed live (node_addresses.h chooses).
//
// How the daemon follows them (for `outputAddress: <CIDR>`, node_address_view.h): open an
// AddressMonitor FIRST, then read them once (readNodeAddresses(), or the cheaper
// readNodeAddressesUnnamed()), then apply every change drain() returns, in order. Subscribing
// before the read is what makes this complete and exact: each notification carries the
// whole state of one address, so a change that races the read is both in the read and in
// the monitor's queue, and applying it again after the read leaves that address as the
// kernel has it now; an address no notification names is as the read found it. No read is
// needed after the first, however busy the node: a pod's veth coming and going costs a few
// parsed messages, not a dump of every address.
//
// When the kernel drops notifications (drain() says `overrun`), that no longer holds: the
// caller opens a new monitor (a fresh subscription, whose queue holds nothing older) and
// reads again. The same after a read error (drain() fails): the socket is of no more use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/model/node_addresses.h"

namespace ipmasq {

// Every IPv4 and IPv6 address of every interface of this node (this network
// namespace), in the kernel's order: one RTM_GETADDR dump and one RTM_GETLINK dump for
// the interfaces' names. Needs no privileges. More than `limit` addresses or interfaces
// is an Error with E2BIG. A dump that a concurrent change interrupts (NLM_F_DUMP_INTR)
// is read again, a few times at most; then the Error carries EINTR and the caller tries
// later.
Result<std::vector<NodeAddress>> readNodeAddresses(size_t limit = kMaxNodeAddresses);

// The same addresses from the RTM_GETADDR dump alone, without their interfaces' names
// (NodeAddress::interface stays empty): what following them needs, with half the reads a
// busy node's changes can interrupt.
Result<std::vector<NodeAddress>> readNodeAddressesUnnamed(size_t limit = kMaxNodeAddresses);

// What one drain() read.
struct AddressChanges {
	std::vector<AddressChange> changes; // in the kernel's order
	bool overrun = false; // the kernel dropped notifications (ENOBUFS): some are missing
};

// Notifications of added, removed and changed addresses (RTNLGRP_IPV4_IFADDR and
// RTNLGRP_IPV6_IFADDR) on a non-blocking socket for the daemon's poll loop. Needs no
// privileges. See the top of this file for how to use it with a read.
class AddressMonitor
{
public:
	static Result<AddressMonitor> open();

	int fd() const { return socket_.fd(); }

	// Reads the pending notifications without blocking: each address added, removed or
	// changed (its flags: duplicate address detection finishing, a lifetime running out)
	// since the last drain, in order, and whether the kernel dropped some (ENOBUFS). A
	// flood is read in bounded portions: what is left keeps fd() readable for the next
	// round of the caller's poll(). The kernel queues a notification before the request
	// that made the change returns, except for a new IPv6 address under duplicate address
	// detection: that one is announced (RTM_NEWADDR, no longer tentative) when the
	// detection ends, 1 to 2 s later, the moment it becomes usable.
	Result<AddressChanges> drain();

	// How many times the kernel dropped notifications since open(), for logs and tests.
	uint64_t overruns() const { return overruns_; }

private:
	explicit AddressMonitor(netlink::Socket socket);

	netlink::Socket socket_;
	uint64_t overruns_ = 0;
};

} // namespace ipmasq
