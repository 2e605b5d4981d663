// SPDX-License-Identifier: Apache-2.0
// Which tables commits changed while a reader looked, from nf_tables' change notifications:
// a read of one table that other tables' commits interrupted is still a consistent read of
// it, and the generation it holds at is known.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/socket.h"

namespace ipmasq::netlink {

// A socket of its own in NFNLGRP_NFTABLES, read without blocking whenever asked. The
// kernel sends a commit's notifications, then its NEWGEN (the commit's generation), before
// the next commit's (commits are serialized), so once the NEWGEN of a generation has come,
// every commit up to it has said which tables it touched.
class ChangeWatch
{
public:
	// Subscribed before it returns: every commit that ends from now on is seen.
	static Result<ChangeWatch> open();

	// How many times notifications were lost (or one named no table): every table may have
	// changed since a reader's count that differs.
	uint64_t blind();
	// Whether table `name` of `family` (NFPROTO_*) was named by a notification since
	// forget() of it (or the start), or the watch went blind since `blindAt`.
	bool changed(uint16_t family, const std::string &name, uint64_t blindAt);
	void forget(uint16_t family, const std::string &name);

	// Waits at most `timeout` for the NEWGEN of ruleset generation `generation`, which a
	// commit that ended after open() made: true once it (or a later one) has come, or once
	// notifications were lost (changed() then says every table did); false on timeout.
	Result<bool> reached(uint32_t generation, std::chrono::milliseconds timeout);

private:
	explicit ChangeWatch(Socket socket) : socket_(std::move(socket)) {}
	// Reads what is pending; a read that fails, or lost notifications, make it blind.
	void drain();

	Socket socket_;
	std::set<std::pair<uint16_t, std::string>> changed_;
	uint64_t blind_ = 0;
	std::optional<uint32_t> lastGeneration_; // of the last NEWGEN read
};

} // namespace ipmasq::netlink
