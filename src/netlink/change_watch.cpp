// SPDX-License-Identifier: Apache-2.0
// The change watch: nf_tables notifications read for the tables they name and the
// generations they close.
#include "ip-masq-agent/netlink/change_watch.h"

#include <arpa/inet.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/netlink/monitor.h"

namespace ipmasq::netlink {

namespace {

// Room for other components' notifications while a large table is read; an overrun only
// makes the reader read again.
constexpr size_t kReceiveBuffer = 4u << 20;
// Datagrams one drain reads at most: a writer that commits faster than the watch reads
// cannot keep a reader (the daemon's loop among them) here. Past it the watch is blind, as
// after an overrun: the reader reads again, or gives up after its attempts.
constexpr size_t kMaxDatagramsPerDrain = 4096;

// The generation a NEWGEN notification closes (NFTA_GEN_ID); nullopt if it has none.
std::optional<uint32_t> generationOf(const nlmsghdr *nlh)
{
	if (nlh->nlmsg_len < NLMSG_LENGTH(sizeof(nfgenmsg)))
		return std::nullopt;
	const nlattr *attrs[NFTA_GEN_MAX + 1] = {};
	collectAttributes(nlh, sizeof(nfgenmsg), attrs, NFTA_GEN_MAX);
	if (!attrs[NFTA_GEN_ID] || mnl_attr_validate(attrs[NFTA_GEN_ID], MNL_TYPE_U32) < 0)
		return std::nullopt;
	return ntohl(mnl_attr_get_u32(attrs[NFTA_GEN_ID]));
}

// Generation ids count up and wrap around (skipping 0): `a` is `b` or later.
bool atOrAfter(uint32_t a, uint32_t b)
{
	return static_cast<int32_t>(a - b) >= 0;
}

} // namespace

Result<ChangeWatch> ChangeWatch::open()
{
	auto socket = Socket::open();
	if (!socket)
		return fail(socket.error());
	if (auto joined = socket->joinGroup(NFNLGRP_NFTABLES); !joined)
		return fail(joined.error().withContext("watching nf_tables' changes: "));
	(void)socket->reserveBuffers(0, kReceiveBuffer); // best effort: an overrun means "all"
	return ChangeWatch(std::move(*socket));
}

uint64_t ChangeWatch::blind()
{
	drain();
	return blind_;
}

bool ChangeWatch::changed(uint16_t family, const std::string &name, uint64_t blindAt)
{
	drain();
	return blind_ != blindAt || changed_.count({family, name});
}

void ChangeWatch::forget(uint16_t family, const std::string &name)
{
	changed_.erase({family, name});
}

void ChangeWatch::drain()
{
	auto drained = socket_.drainNotifications(
		[this](const nlmsghdr *nlh) {
			const NotificationSubject s = subjectOf(nlh);
			switch (s.kind) {
			case NotificationSubject::Kind::generation:
				if (const auto generation = generationOf(nlh))
					lastGeneration_ = *generation;
				break;
			case NotificationSubject::Kind::table: changed_.insert({s.family, s.table}); break;
			case NotificationSubject::Kind::unknown: blind_++; break;
			}
		},
		kMaxDatagramsPerDrain);
	if (!drained || drained->overrun || drained->bounded)
		blind_++;
}

Result<bool> ChangeWatch::reached(uint32_t generation, std::chrono::milliseconds timeout)
{
	const auto deadline = std::chrono::steady_clock::now() + timeout;
	const uint64_t blindAt = blind_;
	for (;;) {
		drain();
		if (blind_ != blindAt || (lastGeneration_ && atOrAfter(*lastGeneration_, generation)))
			return true;
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
			deadline - std::chrono::steady_clock::now());
		if (left.count() <= 0)
			return false;
		pollfd pfd{socket_.fd(), POLLIN, 0};
		const int ready = poll(&pfd, 1, static_cast<int>(left.count()) + 1);
		if (ready < 0 && errno != EINTR)
			return fail(fmt::format("waiting for nf_tables' notifications: {}", std::strerror(errno)),
				    errno);
	}
}

} // namespace ipmasq::netlink
