// SPDX-License-Identifier: Apache-2.0
// Flannel's subnet.env: the pod network (FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK) that flanneld
// writes for its CNI plugin, parsed and read with bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/error.h"

namespace ipmasq {

// flanneld writes six short lines; a file larger than this is not its subnet.env.
inline constexpr size_t kMaxSubnetEnvBytes = 64 * 1024;
// A key lists at most this many networks (flanneld's multi-network form: "a,b,...").
inline constexpr size_t kMaxFlannelNetworks = 64;

// One network of the file: FLANNEL_NETWORK's (IPv4) or FLANNEL_IPV6_NETWORK's.
struct FlannelNetwork {
	Prefix prefix;
	std::string key;   // "FLANNEL_NETWORK" or "FLANNEL_IPV6_NETWORK"
	uint32_t line = 0; // 1-based
};

struct FlannelSubnetEnv {
	std::vector<FlannelNetwork> networks; // in the file's order
};

// The file is lines of KEY=VALUE (flanneld writes FLANNEL_NETWORK, FLANNEL_SUBNET,
// FLANNEL_IPV6_NETWORK, FLANNEL_IPV6_SUBNET, FLANNEL_MTU and FLANNEL_IPMASQ), with blank
// lines and # comments allowed, and a value in single or double quotes as a shell reads it.
// FLANNEL_NETWORK is one IPv4 CIDR or several separated by commas, FLANNEL_IPV6_NETWORK the
// same in IPv6; the other keys are not looked at. Refused, with `source`, the line and what
// is wrong: a line that is not KEY=VALUE, control bytes, a key given twice, a CIDR that does
// not parse or is of the other family, and a file with neither network (flanneld writes one
// at least: such a file is not finished, or not flanneld's).
Result<FlannelSubnetEnv> parseFlannelSubnetEnv(std::string_view text, const std::string &source);

// The file at `path`, parsed; nullopt if it does not exist (yet: flanneld writes it once it
// has a lease). Read with readBoundedFile(): at most kMaxSubnetEnvBytes, never a FIFO.
Result<std::optional<FlannelSubnetEnv>> readFlannelSubnetEnv(const std::string &path);

} // namespace ipmasq
