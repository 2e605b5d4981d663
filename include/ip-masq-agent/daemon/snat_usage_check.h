// SPDX-License-Identifier: Apache-2.0
// The daemon's SNAT usage read (snat_usage.h) on a thread of its own: a conntrack dump
// paced to at most 1/60 of one core, aggregated into a bounded map, reported to the status
// (/metrics, /snat-usage). Nothing it reads can delay the loop.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/base/paced_thread.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/conntrack/snat_usage.h"
#include "ip-masq-agent/nft/backend.h"

namespace ipmasq {

// Fills in how the node reaches each client the usage shows (node/client_route.h): at most
// kTopDestinations x kTopClients addresses, a few "get" requests each, whatever conntrack
// holds. Best effort: a lookup that fails leaves the client's route unknown ("-"); the
// first failure is the Error returned (the caller logs it at debug).
Status describeClientRoutes(SnatUsage &usage);

class SnatUsageCheck
{
public:
	explicit SnatUsageCheck(AgentStatus &status);
	SnatUsageCheck(const SnatUsageCheck &) = delete;
	SnatUsageCheck &operator=(const SnatUsageCheck &) = delete;

	// The desired ruleset changed: its SNAT addresses and port ranges (the read after
	// the next counts by them).
	void setDesired(const Ruleset &ruleset);
	// The loop's snapshot of this node's addresses (what masquerade translates to), shared
	// with the conflict check: the next read counts by it. Until one comes (or while none is
	// known), any translated address counts as the node's.
	void setNodeAddresses(std::shared_ptr<const NodeAddresses> addresses);
	// Starts the thread (after the first sync); a read is due at once, then every period.
	// A refused start (a limit on tasks) is an Error naming the limit; it may be retried.
	Status start();
	bool running() const { return thread_.running(); }

	// A read every 10 s at least, and 60 times its CPU time: at most 1/60 of one core
	// (1.7%), whatever conntrack holds. At 200,000 source-NATed entries a read costs about
	// 0.5 to 0.65 s of CPU, most of it the kernel's dump (the benchmark, section 12): one read
	// every 35 s or so; a few thousand entries: every 10 s.
	static constexpr PacedThread::Pace kPace{std::chrono::seconds(10), 60};

	// The most keys over the guard's limits that /metrics gets a series of.
	static constexpr size_t kTopGuardOverSeries = 10;

private:
	bool pass();
	// The guard's sets, read after the usage with the same pace: /snat-usage's part about
	// them and their series.
	void readGuard();

	AgentStatus &status_;
	// Under thread_.locked().
	std::optional<SnatPlan> next_;
	std::optional<Ruleset> nextGuard_; // the desired ruleset's guard (guardOf)
	std::shared_ptr<const NodeAddresses> addresses_ = std::make_shared<const NodeAddresses>();
	// The thread's own.
	SnatPlan plan_;
	Ruleset guard_; // its table, dynamic sets and GuardLimit rules only
	std::unique_ptr<NetlinkBackend> backend_; // opened at the first read of a guard
	LogOnce guardError_; // the guard's sets could not be read
	LogOnce readError_; // conntrack's entries could not be read
	PacedThread thread_; // last: stopped before the members its passes use go
};

} // namespace ipmasq
