// SPDX-License-Identifier: Apache-2.0
// sd_notify(3) for Type=notify services: READY=1, STATUS=, STOPPING=1 and WATCHDOG=1.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq {

// The notify protocol is one datagram per message to $NOTIFY_SOCKET; it is small and
// stable enough that the agent speaks it itself instead of linking libsystemd.
class SystemdNotifier
{
public:
	// Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID. Outside systemd: disabled.
	static SystemdNotifier fromEnvironment();

	bool enabled() const { return fd_.isValid(); }
	// How often to send WATCHDOG=1: half of WatchdogSec, as systemd recommends.
	std::optional<std::chrono::microseconds> watchdogPeriod() const { return watchdogPeriod_; }

	// Sends "READY=1", "STATUS=...", ... Failures are ignored: notification is best effort.
	void notify(std::string_view state) const;

private:
	UniqueFd fd_;
	std::string socketPath_;
	std::optional<std::chrono::microseconds> watchdogPeriod_;
};

} // namespace ipmasq
