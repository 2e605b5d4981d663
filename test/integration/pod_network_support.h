// SPDX-License-Identifier: Apache-2.0
// Test support for the pod network through the running agent (pod_network_test,
// pod_network_memory_test): the node with its pod and external host, the config that lists
// no pod range, the agent's sets, its readiness and its discovery metrics.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <string>

#include <fmt/format.h>

#include "agent_process.h"
#include "traffic_support.h"

namespace ipmasq::test {

// Deadlines only a hang misses.
inline constexpr std::chrono::seconds kHang{30};

// The source the external host sees for a connection from the pod to `server`.
inline std::string seenFrom(const Topology &net, const std::string &server)
{
	return connectFromPod(net, AF_INET, server, kServerPort).address;
}

// A set of the agent's table as nft lists it ("" when there is none).
inline std::string nomasqSet(const std::string &set = "nomasq-v4")
{
	std::string out;
	(void)run(fmt::format("nft list set inet ip-masq-agent {} 2>&1", set), &out);
	return out;
}

inline const std::string kHealth = "http://127.0.0.1:10263";

inline bool ready()
{
	return curlGet(kHealth + "/readyz").rfind("200", 0) == 0;
}

// ip_masq_agent_discovery_stale of a source ("flannelSubnetEnv", "routes", "cniConfDir").
inline std::string staleGauge(const std::string &source)
{
	return metricAt(kHealth, fmt::format("ip_masq_agent_discovery_stale{{source=\"{}\"}}", source));
}

// A config that lists no pod range: `sources` (the section's lines) find them in `within`.
inline std::string discoveryConfig(const std::string &within, const std::string &sources,
				   const std::string &holdDown = "1s")
{
	return fmt::format("nonMasqueradeCIDRs: [10.0.0.0/8]\n"
			   "nonMasqueradeDiscovery:\n"
			   "  within: [{}]\n"
			   "{}"
			   "  holdDown: {}\n",
			   within, sources, holdDown);
}

// Each traffic case's node: the pod, the external host and its server, a directory for the
// config and subnet.env.
struct PodNetworkNode {
	Topology net;
	SourceEchoServer server{net.external};
	TempDir dir;
	std::string subnetEnv = dir.file("subnet.env");
};

} // namespace ipmasq::test
