// SPDX-License-Identifier: Apache-2.0
// The HTTP endpoint: /livez, /readyz, /healthz and /metrics, served by Boost.Beast on a
// thread of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ip-masq-agent/agent_status.h"
#include "ip-masq-agent/error.h"

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
// Requests are handled one thread away from the daemon's loop, so a slow client can
// never delay a sync, and a stuck loop cannot stop /livez from saying so.
class HealthServer
{
public:
	static Result<std::unique_ptr<HealthServer>> start(const ListenAddress &address,
							   const AgentStatus &status);
	~HealthServer(); // stops serving and joins the thread

	// The bound port (the chosen one when the address said 0).
	uint16_t port() const;

	struct Impl;

private:
	explicit HealthServer(std::unique_ptr<Impl> impl);
	std::unique_ptr<Impl> impl_;
};

} // namespace ipmasq
