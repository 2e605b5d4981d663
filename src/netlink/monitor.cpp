// SPDX-License-Identifier: Apache-2.0
// The nf_tables change monitor: a socket in the NFNLGRP_NFTABLES multicast group.
#include "ip-masq-agent/netlink/monitor.h"

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netlink.h>

namespace ipmasq {

namespace {

constexpr size_t kReceiveBuffer = 4 * 1024 * 1024;
// Datagrams one drain() reads at most. nf_tables packs a commit's notifications into
// few datagrams, so this is more than the receive buffer holds: only a writer faster
// than we read ever meets it, and the rest then waits for the next poll().
constexpr size_t kMaxDatagramsPerDrain = 4096;

} // namespace

Result<NftablesMonitor> NftablesMonitor::open()
{
	NftablesMonitor monitor;
	if (auto opened = monitor.reopen(); !opened)
		return fail(opened.error());
	return monitor;
}

Status NftablesMonitor::reopen()
{
	socket_.reset();
	if (auto injected = netlink::injectedMonitorFault(); !injected)
		return fail(injected.error().withContext("cannot watch nf_tables for changes: "));
	auto socket = netlink::Socket::open();
	if (!socket)
		return fail(socket.error().withContext("cannot watch nf_tables for changes: "));
	if (auto s = socket->joinGroup(NFNLGRP_NFTABLES); !s)
		return fail(s.error().withContext("cannot watch nf_tables for changes: "));
	// Other components' commits queue notifications while the agent is busy (reading a
	// large table takes a while); an overrun counts as a change to our table, so a
	// roomy buffer spares needless verifications. Best effort: the default also works.
	(void)socket->reserveBuffers(0, kReceiveBuffer);
	socket_.emplace(std::move(*socket));
	return {};
}

NotificationSubject subjectOf(const nlmsghdr *nlh)
{
	if (NFNL_MSG_TYPE(nlh->nlmsg_type) == NFT_MSG_NEWGEN)
		return {NotificationSubject::Kind::generation};
	if (nlh->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg)))
		return {};
	const auto family = static_cast<const nfgenmsg *>(mnl_nlmsg_get_payload(nlh))->nfgen_family;
	// In every nf_tables object message (table, chain, rule, set, element list, object,
	// flowtable) attribute 1 is the name of the table it belongs to.
	const auto *tail = static_cast<const char *>(mnl_nlmsg_get_payload_tail(nlh));
	for (auto *attr = static_cast<const nlattr *>(mnl_nlmsg_get_payload_offset(nlh, sizeof(nfgenmsg)));
	     mnl_attr_ok(attr, static_cast<int>(tail - reinterpret_cast<const char *>(attr)));
	     attr = mnl_attr_next(attr)) {
		if (mnl_attr_get_type(attr) != 1)
			continue;
		if (mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) < 0)
			break;
		return {NotificationSubject::Kind::table, family, mnl_attr_get_str(attr)};
	}
	return {NotificationSubject::Kind::unknown, family, {}};
}

Status NftablesMonitor::pause()
{
	return socket_ ? socket_->leaveGroup(NFNLGRP_NFTABLES) : Status();
}

Status NftablesMonitor::resume()
{
	if (!socket_)
		return {};
	Status joined = netlink::injectedMonitorFault();
	if (joined)
		joined = socket_->joinGroup(NFNLGRP_NFTABLES);
	// Out of its group the socket would never hear again: it goes, and the caller, seeing
	// the monitor closed, opens it again as after a read error.
	if (!joined)
		socket_.reset();
	return joined;
}

Result<bool> NftablesMonitor::drain()
{
	if (!socket_)
		return false;
	if (auto injected = netlink::injectedMonitorFault(); !injected)
		return fail(injected.error().withContext("cannot read nf_tables' change notifications: "));
	bool changed = false;
	const auto onMessage = [&](const nlmsghdr *nlh) {
		// Every message in this group reports a change, down to the NEWGEN that
		// closes each commit; the sender's port id is in the header.
		if (ignoredPortId_ && nlh->nlmsg_pid == *ignoredPortId_)
			return;
		const NotificationSubject subject = subjectOf(nlh);
		if (subject.kind == NotificationSubject::Kind::generation)
			return; // closes every commit; its objects' messages came before it
		const bool known = subject.kind == NotificationSubject::Kind::table;
		if (!table_ || !known || (subject.family == NFPROTO_INET && subject.table == *table_))
			changed = true;
		// Only these families' nat chains see routed IP packets (other_tables/model.h).
		else if (subject.family == NFPROTO_IPV4 || subject.family == NFPROTO_IPV6 ||
			 subject.family == NFPROTO_INET)
			otherTablesChanged_ = true;
	};
	auto drained = socket_->drainNotifications(onMessage, kMaxDatagramsPerDrain);
	if (!drained)
		return fail(drained.error());
	// The kernel dropped notifications because we read too slowly: we cannot tell
	// what changed, so something did.
	if (drained->overrun)
		otherTablesChanged_ = true;
	return changed || drained->overrun;
}

} // namespace ipmasq
