// SPDX-License-Identifier: Apache-2.0
// The HTTP endpoint: /healthz and /metrics, served by Boost.Beast on a thread of its own.
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

// Serves GET/HEAD /healthz (200 "ok", or 503 with the reason) and /metrics
// (Prometheus text) from `status`. Requests are handled one thread away from the
// daemon's loop, so a slow client can never delay a sync.
class HealthServer
{
public:
	static Result<std::unique_ptr<HealthServer>> start(const ListenAddress &address,
							   const AgentStatus &status);
	~HealthServer(); // stops serving and joins the thread

	uint16_t port() const;

	struct Impl;

private:
	explicit HealthServer(std::unique_ptr<Impl> impl);
	std::unique_ptr<Impl> impl_;
};

} // namespace ipmasq
