// SPDX-License-Identifier: Apache-2.0
// The signals the daemon's loop reads from a signalfd instead of having them delivered:
// those that end it, SIGHUP, which reloads, and the stray ones it logs and ignores.
#pragma once

#include <bitset>
#include <csignal>
#include <optional>
#include <sys/signalfd.h>
#include <utility>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq {

class LoopSignals
{
public:
	// Blocks SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGIO and the signals that are only logged
	// (SIGUSR1, SIGUSR2, SIGALRM, real-time signals, ...), and opens the signalfd that
	// reads them: from here on a signal waits for the loop. Fails with the call's errno,
	// the signal mask as it was.
	static Result<LoopSignals> open();

	int fd() const { return fd_.get(); }

	// Reads the pending signals without blocking: SIGHUP sets `reload`; SIGIO (a lease
	// break: the config is read again once its writer is done) is dropped; a signal that
	// would have ended the process by default although nothing is wrong with it is logged
	// and ignored. SIGTERM, SIGINT or SIGQUIT: that signal, the rest left unread.
	std::optional<int> read(bool &reload);

private:
	explicit LoopSignals(UniqueFd fd) : fd_(std::move(fd)) {}

	// The first of each kind is worth a warning; a sender that repeats it is not worth a
	// line each time.
	void noteIgnored(const signalfd_siginfo &info);

	UniqueFd fd_;
	std::bitset<NSIG> ignoredSeen_;
};

} // namespace ipmasq
