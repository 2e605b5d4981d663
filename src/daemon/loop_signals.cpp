// SPDX-License-Identifier: Apache-2.0
// The daemon loop's signals: blocked, read from a signalfd, and what each one means.
#include "ip-masq-agent/daemon/loop_signals.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/log.h"

namespace ipmasq {

namespace {

// SIGIO: a writer opening the config during the read lease (ConfigSource); ignored.
constexpr std::array kLoopSignals{SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGIO};
// Signals whose default action would end the process although nothing is wrong with it
// (a stray kill, a CPU-time or file-size limit's warning): read from the signalfd too,
// logged and ignored. Real-time signals join them in loopSignalMask().
constexpr std::array kIgnoredSignals{SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF,
				     SIGPWR,  SIGSTKFLT, SIGXCPU, SIGXFSZ};

sigset_t loopSignalMask()
{
	sigset_t mask;
	sigemptyset(&mask);
	for (int sig : kLoopSignals)
		sigaddset(&mask, sig);
	for (int sig : kIgnoredSignals)
		sigaddset(&mask, sig);
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
		sigaddset(&mask, sig);
	return mask;
}

bool endsTheLoop(int sig)
{
	return sig == SIGTERM || sig == SIGINT || sig == SIGQUIT;
}

// "SIGUSR1", or "SIGRTMIN+3" (sigabbrev_np() has no names for real-time signals).
std::string signalName(int sig)
{
	if (sig >= SIGRTMIN && sig <= SIGRTMAX)
		return fmt::format("SIGRTMIN+{}", sig - SIGRTMIN);
	const char *name = sigabbrev_np(sig);
	return name ? fmt::format("SIG{}", name) : fmt::format("signal {}", sig);
}

} // namespace

Result<LoopSignals> LoopSignals::open()
{
	const sigset_t mask = loopSignalMask();
	sigset_t previous;
	if (sigprocmask(SIG_BLOCK, &mask, &previous) != 0) {
		const int err = errno; // before the message allocates
		return fail(fmt::format("cannot block signals for the event loop: {}",
					std::strerror(err)), err);
	}
	UniqueFd fd(signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
	if (!fd.isValid()) {
		const int err = errno;
		sigprocmask(SIG_SETMASK, &previous, nullptr);
		return fail(fmt::format("cannot create the event loop's signalfd: {}", std::strerror(err)), err);
	}
	return LoopSignals(std::move(fd));
}

std::optional<int> LoopSignals::read(bool &reload)
{
	signalfd_siginfo info{};
	while (::read(fd_.get(), &info, sizeof(info)) == sizeof(info)) {
		const int sig = static_cast<int>(info.ssi_signo);
		if (sig == SIGIO)
			continue;
		if (sig == SIGHUP) {
			log::info("SIGHUP: reloading");
			reload = true;
			continue;
		}
		if (endsTheLoop(sig))
			return sig;
		noteIgnored(info);
	}
	return std::nullopt;
}

void LoopSignals::noteIgnored(const signalfd_siginfo &info)
{
	const auto sig = static_cast<size_t>(info.ssi_signo);
	const bool first = sig < ignoredSeen_.size() && !ignoredSeen_[sig];
	if (sig < ignoredSeen_.size())
		ignoredSeen_[sig] = true;
	const std::string text = fmt::format(
		"{} (from pid {}) ignored: the agent goes on; it stops on SIGTERM, SIGINT or SIGQUIT "
		"and reloads on SIGHUP", signalName(static_cast<int>(sig)), info.ssi_pid);
	if (first)
		log::warning("{}", text);
	else
		log::debug("{}", text);
}

} // namespace ipmasq
