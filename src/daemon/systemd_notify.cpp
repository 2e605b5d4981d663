// SPDX-License-Identifier: Apache-2.0
// sd_notify(3): datagrams to $NOTIFY_SOCKET (a path, or an abstract socket named "@...").
#include "ip-masq-agent/daemon/systemd_notify.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace ipmasq {

SystemdNotifier SystemdNotifier::fromEnvironment()
{
	SystemdNotifier notifier;
	const char *socketPath = std::getenv("NOTIFY_SOCKET");
	if (socketPath && (socketPath[0] == '/' || socketPath[0] == '@') &&
	    std::strlen(socketPath) < sizeof(sockaddr_un::sun_path)) {
		notifier.fd_.reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
		notifier.socketPath_ = socketPath;
	}

	// The watchdog is ours only if WATCHDOG_PID is unset or names this process.
	const char *usec = std::getenv("WATCHDOG_USEC");
	const char *pid = std::getenv("WATCHDOG_PID");
	if (usec && (!pid || std::strtol(pid, nullptr, 10) == getpid())) {
		const long long value = std::strtoll(usec, nullptr, 10);
		if (value > 0)
			notifier.watchdogPeriod_ = std::chrono::microseconds(value / 2);
	}
	// Children (there are none today) must not inherit our notification duties.
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	return notifier;
}

void SystemdNotifier::notify(std::string_view state) const
{
	if (!enabled())
		return;
	sockaddr_un address{};
	address.sun_family = AF_UNIX;
	std::memcpy(address.sun_path, socketPath_.data(), socketPath_.size());
	if (address.sun_path[0] == '@')
		address.sun_path[0] = '\0'; // abstract namespace
	const socklen_t length =
		static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socketPath_.size());
	(void)sendto(fd_.get(), state.data(), state.size(), MSG_NOSIGNAL,
		     reinterpret_cast<const sockaddr *>(&address), length);
}

} // namespace ipmasq
