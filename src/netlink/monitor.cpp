// SPDX-License-Identifier: Apache-2.0
// The nf_tables change monitor: a socket in the NFNLGRP_NFTABLES multicast group.
#include "ip-masq-agent/netlink/monitor.h"

#include <cerrno>

#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>

namespace ipmasq {

NftablesMonitor::NftablesMonitor(netlink::Socket socket) : socket_(std::move(socket)) {}

Result<NftablesMonitor> NftablesMonitor::open()
{
	auto socket = netlink::Socket::open();
	if (!socket)
		return fail(socket.error());
	if (auto s = socket->joinGroup(NFNLGRP_NFTABLES); !s)
		return fail(s.error().withContext("cannot watch nf_tables for changes: "));
	return NftablesMonitor(std::move(*socket));
}

Status NftablesMonitor::pause()
{
	return socket_.leaveGroup(NFNLGRP_NFTABLES);
}

Status NftablesMonitor::resume()
{
	return socket_.joinGroup(NFNLGRP_NFTABLES);
}

Result<bool> NftablesMonitor::drain()
{
	bool changed = false;
	const auto onMessage = [&](const nlmsghdr *nlh) {
		// Every message in this group reports a change, down to the NEWGEN that
		// closes each commit; the sender's port id is in the header.
		if (ignoredPortId_ && nlh->nlmsg_pid == *ignoredPortId_)
			return;
		changed = true;
	};
	for (;;) {
		auto got = socket_.receivePending(onMessage);
		if (!got) {
			// The kernel dropped notifications because we read too slowly:
			// we cannot tell what changed, so something did.
			if (got.error().errnum == ENOBUFS) {
				changed = true;
				continue;
			}
			return fail(got.error());
		}
		if (!*got)
			return changed;
	}
}

} // namespace ipmasq
