// SPDX-License-Identifier: Apache-2.0
// Which process holds a netlink socket, from its port id: for messages that name the
// process the kernel answers for (the owner of a table with the flag "owner").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <sys/types.h>

#include "ip-masq-agent/base/error.h"

namespace ipmasq::netlink {

struct PortOwner {
	pid_t pid = 0;
	std::string command; // /proc/PID/comm
};

// The process with the NETLINK_NETFILTER socket of port `portId` in this network
// namespace: its inode from /proc/net/netlink, then a bounded scan of /proc/*/fd (at most
// a few thousand processes and a few tens of thousands of descriptors; a process whose
// descriptors cannot be listed is passed over). nullopt when it is not visible from here
// (another PID namespace) or the scan gave up; an error, naming the file, when /proc
// cannot be read. `proc` is /proc unless a test points elsewhere.
Result<std::optional<PortOwner>> findPortOwner(uint32_t portId, const std::string &proc = "/proc");

} // namespace ipmasq::netlink
