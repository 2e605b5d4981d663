// SPDX-License-Identifier: Apache-2.0
// Watches nf_tables for changes by anyone, so the daemon can heal its table at once.
//
// The daemon polls fd() alongside its other descriptors and calls drain() when it is
// readable. Only "something changed" matters: the daemon then compares its table with
// the desired one (NetlinkBackend::matches), which stays the one source of truth.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <linux/netlink.h>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/socket.h"

namespace ipmasq {

// What one nf_tables notification is about: a commit's end (NEWGEN, which names no table),
// an object of one table (its family and name), or it cannot say.
struct NotificationSubject {
	enum class Kind { generation, table, unknown };
	Kind kind = Kind::unknown;
	uint8_t family = 0; // NFPROTO_*
	std::string table = {};
};
NotificationSubject subjectOf(const nlmsghdr *nlh);

class NftablesMonitor
{
public:
	// A socket subscribed to NFNLGRP_NFTABLES.
	static Result<NftablesMonitor> open();
	// A monitor without its socket: what open() would give, once reopen() succeeds.
	// Its settings (ignoreChangesFrom(), watchOnlyTable()) are kept across reopens.
	NftablesMonitor() = default;

	// -1 while it is closed.
	int fd() const { return socket_ ? socket_->fd() : -1; }
	bool isOpen() const { return socket_.has_value(); }

	// After a read error the socket is of no more use: close() drops it (and every
	// notification queued on it), reopen() subscribes a new one. What changed in between
	// is not reported: the caller checks the table once the new subscription is in place.
	void close() { socket_.reset(); }
	Status reopen();

	// Notifications caused by this port id (the agent's own backend, see
	// NetlinkBackend::portId()) do not count as changes.
	void ignoreChangesFrom(uint32_t portId) { ignoredPortId_ = portId; }

	// Count only changes to this inet table (its sets, elements, chains and rules, or
	// the table itself, as `nft flush ruleset` deletes it): other components' churn,
	// kube-proxy's for one, then costs the agent nothing. Lost notifications still count.
	void watchOnlyTable(std::string table) { table_ = std::move(table); }

	// Leave the group while the agent commits, and join it again afterwards. While
	// anyone listens, the kernel builds one notification per set element of a commit,
	// which doubles the cost of applying a large set. Changes made by others while
	// paused are not reported: the caller compares ruleset generations instead.
	// Closed, both do nothing. A resume that fails closes the monitor (isOpen() false).
	Status pause();
	Status resume();

	// Reads the pending notifications without blocking. True if any change arrived;
	// a receive-queue overrun (ENOBUFS: notifications were lost) counts as a change.
	// A flood is read in bounded portions: what is left keeps fd() readable. An error
	// (anything but the overrun) leaves the socket unusable: close() and reopen() it.
	// Closed, nothing arrives.
	Result<bool> drain();

	// Whether drain() saw, since the last call, a change to another table of the families
	// ip, ip6 or inet (or lost notifications): what the NAT conflict check looks at.
	// Changes by ignoreChangesFrom()'s port id do not count here either.
	bool takeOtherTablesChanged() { return std::exchange(otherTablesChanged_, false); }

private:
	std::optional<netlink::Socket> socket_;

	std::optional<uint32_t> ignoredPortId_;
	std::optional<std::string> table_;
	bool otherTablesChanged_ = false;
};

} // namespace ipmasq
