// SPDX-License-Identifier: Apache-2.0
// The paced background thread: wait until a pass is due and the pace allows it, run it at
// nice 19, measure its CPU time.
#include "ip-masq-agent/base/paced_thread.h"

#include <ctime>
#include <sys/resource.h>
#include <unistd.h>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/base/process_guard.h"

namespace ipmasq {

PacedThread::Clock::duration threadCpuTime()
{
	timespec now{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
	return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

PacedThread::PacedThread(std::string what, Pace pace, Pass pass)
	: what_(std::move(what)), pace_(pace), pass_(std::move(pass))
{
}

PacedThread::~PacedThread()
{
	{
		std::lock_guard lock(mutex_);
		stop_ = true;
	}
	wake_.notify_all();
	if (thread_.joinable())
		thread_.join();
}

Status PacedThread::start()
{
	if (thread_.joinable())
		return {};
	auto started = process::startThread(what_, [this] { run(); });
	if (!started)
		return fail(started.error());
	thread_ = std::move(*started);
	return {};
}

void PacedThread::nudge()
{
	{
		std::lock_guard lock(mutex_);
		due_ = true;
	}
	wake_.notify_all();
}

PacedThread::Clock::duration PacedThread::pause(Pace pace, Clock::duration passCpu)
{
	return std::max<Clock::duration>(pace.period, pace.cpuMultiple * passCpu);
}

bool PacedThread::runPass() noexcept
{
	try {
		return pass_();
	} catch (const std::bad_alloc &) {
		logFailure("out of memory");
	} catch (const std::exception &e) {
		logFailure(e.what());
	} catch (...) {
		logFailure("an unknown exception");
	}
	return true; // tried again later
}

void PacedThread::logFailure(const char *what) const noexcept
{
	// The line allocates: out of memory it may fail too, and is then left out. Nothing
	// thrown here may end the thread, and the process with it.
	try {
		log::error("{} failed: {}; it tries again later", what_, what);
	} catch (...) {
	}
}

void PacedThread::run()
{
	// Below the loop (nice 0) and the health endpoint (10): on a busy node this waits.
	(void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
	Clock::time_point next{};
	for (;;) {
		{
			std::unique_lock lock(mutex_);
			while (!stop_ && !(due_ && Clock::now() >= next)) {
				if (due_)
					wake_.wait_until(lock, next);
				else
					wake_.wait(lock);
			}
			if (stop_)
				return;
			due_ = false;
		}
		const Clock::duration cpu = threadCpuTime();
		// What a pass read is given back as it is freed, in this thread's own arena
		// (process_guard.h): no malloc_trim(), which would lock the loop's arena too.
		const bool again = runPass();
		next = Clock::now() + pause(pace_, threadCpuTime() - cpu);
		if (again) {
			std::lock_guard lock(mutex_);
			due_ = true;
		}
	}
}

} // namespace ipmasq
