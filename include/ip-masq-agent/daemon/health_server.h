// SPDX-License-Identifier: Apache-2.0
// The HTTP endpoint: /livez, /readyz, /healthz, /metrics and /snat-usage, served by
// Boost.Beast on a thread of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/base/error.h"

namespace ipmasq {

inline constexpr const char *kDefaultHealthAddr = ":10263";

struct ListenAddress {
	std::string host; // "" means every address
	uint16_t port = 0;
};

// "host:port", ":port" or "[v6]:port". Port 0 picks a free port (for tests).
Result<ListenAddress> parseListenAddress(std::string_view text);

// Serves GET/HEAD from `status`, each answer rendered from one consistent reading:
//   /livez    liveness: 200 "ok" while the daemon's loop turns, else 503 with the reason
//             (AgentStatus::liveness; reads only the heartbeat, never waits for the loop)
//   /readyz   readiness: 200 "ok" while the config is valid and its table is in force,
//             else 503 with the reason
//   /healthz  the same as /readyz (its name before /readyz existed)
//   /metrics  Prometheus text
//   /snat-usage  the SNAT usage table of the last read (snat_usage.h), as --snat-usage
//             prints it; never a read of its own
// Requests are handled one thread away from the daemon's loop, so a slow client can
// never delay a sync, and a stuck loop cannot stop /livez from saying so.
//
// On the host network every pod can reach it, so every resource a client can hold is
// bounded, and under pressure the oldest waiting clients go, never the new ones: at most
// sessionCapacity() connections at a time (derived from the descriptors left); one request
// per connection, whose header must arrive within 2 s of the accept (8 KiB at most) and
// whose answer is written within 2 s; a new connection beyond the cap (or an accept out of
// descriptors) closes the oldest session that has not yet delivered a request. A flood of
// idle or slow connections thus evicts itself, and a probe, which sends its request at
// once, is answered within milliseconds. The endpoint's own failures (out of memory,
// descriptors, a Boost error) are logged, and it goes on serving; none ends the process.
class HealthServer
{
public:
	// Fails (never throws) if the address cannot be bound or Boost cannot set up its
	// I/O (no descriptor for epoll, no thread).
	static Result<std::unique_ptr<HealthServer>> start(const ListenAddress &address,
							   const AgentStatus &status);
	~HealthServer(); // stops serving and joins the thread

	// The cap on connections, from the descriptors free once everything else is open:
	// what is left after kReservedDescriptors (the daemon's config reads and the like),
	// at least kMinSessions and at most kMaxSessions.
	static constexpr size_t kMinSessions = 4;
	static constexpr size_t kMaxSessions = 64;
	static constexpr size_t kReservedDescriptors = 8;
	static size_t sessionCapacity(size_t freeDescriptors);

	// The bound port (the chosen one when the address said 0).
	uint16_t port() const;

	struct Impl;

private:
	explicit HealthServer(std::unique_ptr<Impl> impl);
	static Result<std::unique_ptr<HealthServer>> startOrThrow(const ListenAddress &address,
								  const AgentStatus &status);
	std::unique_ptr<Impl> impl_;
};

} // namespace ipmasq
