// SPDX-License-Identifier: Apache-2.0
// Test support: a steady stream of new TCP connections from the pod through the node, and
// the server that takes them, each on a thread of its own in its namespace; and a sampler
// that reads the agent's connection counters from the kernel as fast as it can.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "traffic_support.h"

namespace ipmasq::test {

// Accepts and at once closes every connection to port `port` of every IPv4 address of
// `host`, from a thread that joins the host's namespace, until destroyed (at most `limit`).
class AcceptingServer
{
public:
	AcceptingServer(const Netns &host, uint16_t port,
			std::chrono::seconds limit = std::chrono::seconds(120));
	~AcceptingServer();
	AcceptingServer(const AcceptingServer &) = delete;
	AcceptingServer &operator=(const AcceptingServer &) = delete;

	size_t accepted() const { return accepted_; }
	// How many connections came from each source address, so far.
	std::map<std::string, size_t> sources() const;

private:
	std::atomic<bool> stop_{false};
	std::atomic<size_t> accepted_{0};
	mutable std::mutex mutex_;
	std::map<std::string, size_t> sources_; // guarded by mutex_
	std::thread thread_;
};

// New TCP connections from the pod to `server`:`port`, about `perSecond` of them, at most
// 64 in flight; each is reset (SO_LINGER 0) once established, so that no TIME_WAIT holds its
// port. Stops at stop(), after `limit` connections, or after `duration`.
class FlowStream
{
public:
	struct Totals {
		size_t established = 0; // the handshake completed: its SYN passed the node's nat hook
		size_t failed = 0; // refused, or not established within 10 s
		std::string firstError;
	};

	FlowStream(const Topology &net, const std::string &server, uint16_t port, unsigned perSecond,
		   size_t limit, std::chrono::seconds duration);
	~FlowStream();
	FlowStream(const FlowStream &) = delete;
	FlowStream &operator=(const FlowStream &) = delete;

	size_t established() const { return established_; }
	// Opens no more, waits (10 s at most) for those in flight to end, and counts them.
	Totals stop();

private:
	void run(int podNs, std::string server, uint16_t port, unsigned perSecond, size_t limit,
		 std::chrono::seconds duration);

	std::atomic<bool> stop_{false};
	std::atomic<size_t> established_{0};
	Totals totals_; // written by the thread, read after it is joined
	std::thread thread_;
};

// Reads the named counters of the agent's table every millisecond or so from a thread of
// its own (one netlink socket, in this process's namespace), and records every time one
// reads lower than before, until destroyed or stop().
class CounterSampler
{
public:
	CounterSampler();
	~CounterSampler();
	CounterSampler(const CounterSampler &) = delete;
	CounterSampler &operator=(const CounterSampler &) = delete;

	struct Report {
		size_t samples = 0;
		size_t failedReads = 0;
		size_t decreases = 0;
		std::string firstDecrease; // "masq-v4: 1234 after 1290 (sample 456)"
		std::map<std::string, uint64_t> last; // the last values read
	};
	Report stop();

private:
	std::atomic<bool> stop_{false};
	Report report_;
	std::thread thread_;
};

} // namespace ipmasq::test
