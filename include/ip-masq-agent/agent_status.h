// SPDX-License-Identifier: Apache-2.0
// What the agent reports about itself: health (for /healthz) and counters (for /metrics).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "ip-masq-agent/ruleset.h"

namespace ipmasq {

// Written by the daemon's loop, read by the HTTP server's thread: every access locks.
class AgentStatus
{
public:
	struct Health {
		bool ok;
		std::string reason; // why not ok; empty when ok
	};

	// Upper bounds (seconds) of the sync duration histogram's buckets.
	static constexpr std::array<double, 12> kDurationBuckets{
		0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

	void configLoaded();
	void configFailed(const std::string &error);
	void syncSucceeded(const Ruleset &applied, std::chrono::duration<double> took);
	void syncFailed(const std::string &error);
	// Nothing to write: the kernel holds the desired table (clears a sync error).
	void noopResync();
	void tableDrifted(); // missing or edited: not ok until the next successful sync
	void driftRepaired();

	// The loop's heartbeat, for liveness (/livez): the loop calls loopTurned() on every
	// turn and wakes at least every kHeartbeatPeriod to do so, so a heartbeat older than
	// a few periods means the loop is stuck (a hung kernel call, a deadlock), not idle.
	static constexpr std::chrono::seconds kHeartbeatPeriod{5};
	void loopTurned();
	// When the loop last turned; nullopt before its first turn.
	std::optional<std::chrono::steady_clock::time_point> lastLoopTurn() const;

	Health health() const;
	std::string prometheusText() const;
	// One line for systemd's STATUS=.
	std::string summary() const;

private:
	mutable std::mutex mutex_;
	// Lock-free: the loop beats on every turn, and must never wait for a scrape.
	std::atomic<std::chrono::steady_clock::rep> lastLoopTurn_{0};
	bool started_ = false; // a sync has completed
	std::string configError_;
	std::string syncError_;
	bool tableDrifted_ = false;

	uint64_t syncs_ = 0;
	uint64_t syncFailures_ = 0;
	uint64_t noopResyncs_ = 0;
	uint64_t driftRepairs_ = 0;
	uint64_t configErrors_ = 0;
	double lastSuccessUnixSeconds_ = 0;
	std::array<uint64_t, kDurationBuckets.size()> durationBucketCounts_{};
	uint64_t durationCount_ = 0;
	double durationSum_ = 0;
	size_t intervalsV4_ = 0;
	size_t intervalsV6_ = 0;
	std::string table_;
};

} // namespace ipmasq
