// SPDX-License-Identifier: Apache-2.0
// A background thread that runs bounded passes of some read of the kernel at a pace that
// caps its share of one core, at the lowest CPU priority: what the NAT conflict check and
// the SNAT usage read share. Whatever a pass costs, it costs this thread, never the
// daemon's loop.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "ip-masq-agent/base/error.h"

namespace ipmasq {

class PacedThread
{
public:
	using Clock = std::chrono::steady_clock;

	// The pace: at least `period` between the starts of two passes, and `cpuMultiple`
	// times the last pass's CPU time (the thread's own, user and system, which includes
	// what the kernel spends answering its netlink requests), so the thread uses at most
	// 1/cpuMultiple of one core however slow a pass gets.
	struct Pace {
		std::chrono::milliseconds period;
		unsigned cpuMultiple;
	};

	// One pass; true when another one is due (as soon as the pace allows) without a
	// nudge: a pass that stopped at its bound, or a periodic read.
	using Pass = std::function<bool()>;

	// `what` names the work in the log ("the NAT conflict check").
	PacedThread(std::string what, Pace pace, Pass pass);
	~PacedThread(); // stops and joins the thread
	PacedThread(const PacedThread &) = delete;
	PacedThread &operator=(const PacedThread &) = delete;

	// Starts the thread; the first pass runs when one is due. Without a thread nothing
	// runs (--once has none). A start the kernel refuses (a limit on tasks) is an Error
	// that names the limit (process::startThread); nothing runs then, start() may be
	// called again later, and nudge() only marks a pass due.
	Status start();
	bool running() const { return thread_.joinable(); }
	// A pass is due, as soon as the pace allows.
	void nudge();

	// Runs `fn` under the lock the thread takes between passes: how inputs are handed to
	// the pass (and taken by it) without a lock of their own.
	template<typename Fn>
	auto locked(Fn fn)
	{
		std::lock_guard lock(mutex_);
		return fn();
	}

	// The longest the thread may wait for a pass to be allowed: cpuMultiple times the
	// CPU time of `pass`, but never below the period.
	static Clock::duration pause(Pace pace, Clock::duration passCpu);

private:
	void run();
	// One pass; whatever it throws is caught and logged (a pass that failed is due again
	// as soon as the pace allows), so that no pass can end the thread or the process.
	bool runPass() noexcept;
	void logFailure(const char *what) const noexcept;

	const std::string what_;
	const Pace pace_;
	const Pass pass_;
	std::mutex mutex_;
	std::condition_variable wake_;
	bool stop_ = false, due_ = false;
	std::thread thread_;
};

// This thread's CPU time (user and system): what pacing weighs, since wall time grows with
// the node's load.
PacedThread::Clock::duration threadCpuTime();

} // namespace ipmasq
