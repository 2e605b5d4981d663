// SPDX-License-Identifier: Apache-2.0
// The config section snatGuard: per source address and destination (address, protocol,
// port), a bound on new connections per second and on open connections, observed or
// enforced, with exempt sources, as a value and its checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/config/discovery_config.h"
#include "ip-masq-agent/model/cidr.h"

namespace ipmasq {

// observe: count the connections over a limit, never drop them; enforce: drop them (their
// first packet: a TCP client retries the SYN) and count them.
enum class SnatGuardMode : uint8_t { observe, enforce };

// "observe", "enforce".
const char *snatGuardModeName(SnatGuardMode mode);
// The mode `text` names, or the error that lists both.
Result<SnatGuardMode> parseSnatGuardMode(std::string_view text);

// The largest newConnectionsPerSecond and openConnections taken: far above what one pod
// needs toward one destination (65,535 source ports), far below the kernel's u32.
inline constexpr uint32_t kMaxSnatGuardLimit = 1000000;
// exempt holds at most this many CIDRs: the cluster's own agents and proxies, not a list
// of pods.
inline constexpr size_t kMaxSnatGuardExempt = 1024;

struct SnatGuard {
	// Required: a section without it is refused (nullopt: not given).
	std::optional<SnatGuardMode> mode;
	// New connections per second per source toward one destination (burst: the same).
	std::optional<uint32_t> newConnectionsPerSecond;
	// Open connections per source toward one destination, as ct count counts them
	// (TIME_WAIT and CLOSE are not counted).
	std::optional<uint32_t> openConnections;
	// Sources never limited.
	std::vector<Prefix> exempt;
	SectionOrigin written;

	bool enforces() const { return mode == SnatGuardMode::enforce; }
	bool operator==(const SnatGuard &) const = default;
};

// Why `value` cannot be newConnectionsPerSecond or openConnections (`key`), or nullopt:
// a whole number from 1 to kMaxSnatGuardLimit. `here` starts the message ("file:3: ").
std::optional<std::string> snatGuardLimitProblem(std::string_view here, std::string_view key,
						 int64_t value);

// The checks of the whole section: a mode, at least one limit, each within its bounds, at
// most kMaxSnatGuardExempt exempt CIDRs. `here` names where the section was written
// ("/etc/config/ip-masq-agent:12: snatGuard: "); each error names the key and the fix.
Status validateSnatGuard(const SnatGuard &guard, std::string_view here);

// One line for logs: "mode=observe newConnectionsPerSecond=20 openConnections=- exempt=[...]".
std::string describeSnatGuard(const SnatGuard &guard);

} // namespace ipmasq
