// SPDX-License-Identifier: Apache-2.0
// The process's own safety net, set up by main() before the agent's work starts: standard
// descriptors that are never reused by accident, no signal or abort that ends it without a
// line in the log, enough descriptors to run at all, and threads whose refusal is an error.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "ip-masq-agent/base/error.h"

namespace ipmasq::process {

// Opens /dev/null on whichever of descriptors 0, 1 and 2 is closed. Otherwise the first
// socket the agent opens would become "stderr", and every log line would be written
// into it.
void guardStandardDescriptors();

// SIGPIPE is ignored: a write to a closed pipe or socket (stderr's reader gone, a client
// that hung up) fails with EPIPE, which the writer handles, instead of ending the
// process. SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP and SIGSYS write one line to
// stderr (in the log's format, with write(2) only: they may come from anywhere) before
// their default action (a core dump); an exception nobody caught is logged with its
// message before std::terminate aborts. Call after the log format is set.
void installFatalHandlers();

// Each thread the daemon starts (the health endpoint's, the paced checks') reserves less
// address space: a 1 MiB stack instead of the 8 MiB of RLIMIT_STACK (their work is bounded
// and never recurses on input; main()'s own stack, where YAML is parsed, keeps the limit).
// And each allocates in a malloc arena of its own (kArenas: the loop's and one per thread,
// not glibc's 8 per core, each of which reserves 64 MiB): a check's pass then never waits
// for the loop's allocator lock nor makes it wait, and gives its memory back as it frees
// it, without a malloc_trim() (which locks every arena in turn): blocks from
// kMmapThreshold on are mapped apart and unmapped when freed (a fixed threshold: glibc's
// default one grows to 32 MiB as large blocks are freed, and keeps them), and a heap's
// free top beyond glibc's trim threshold (128 KiB) is given back by free() itself. Under
// an address-space limit (RLIMIT_AS) too tight for an arena, glibc shares one instead.
// Call before any thread starts. Fails, naming the call, only where glibc refuses.
inline constexpr int kArenas = 4;
inline constexpr int kMmapThreshold = 128 * 1024;
Status reserveLessPerThread();

// How many descriptors the process may still open: the open-files limit (the soft
// RLIMIT_NOFILE) less those open now below it.
struct DescriptorRoom {
	size_t limit = 0; // the soft limit, after ensureDescriptorRoom raised it
	size_t open = 0;  // open now, below the limit
	size_t free() const { return limit > open ? limit - open : 0; }
};
DescriptorRoom descriptorRoom();

// Makes room for `needed` more descriptors, and up to `wanted` if the hard limit allows:
// raises the soft RLIMIT_NOFILE as far as the hard limit when it is lower. Fails, naming
// the limit and the fix, when even the hard limit leaves fewer than `needed`.
Result<DescriptorRoom> ensureDescriptorRoom(size_t needed, size_t wanted);

// Where this process's cgroup is in the hierarchy that holds the pids controller (cgroup
// v1's pids hierarchy, else v2's unified one), from /proc/self/cgroup and
// /proc/self/mountinfo: the hierarchy's mount point and the cgroup's path below it
// ("/" for its root). nullopt when neither is mounted here.
struct PidsCgroup {
	bool v1 = false;
	std::string mount;
	std::string path;
	// The cgroup's directory (mount + path).
	std::string dir() const { return path == "/" ? mount : mount + path; }
};
std::optional<PidsCgroup> findPidsCgroup();

// Starts `body` on a new thread: the one way the agent starts one (the health endpoint's,
// the paced checks'). A start the kernel refuses (pthread_create's EAGAIN: a pids cgroup's
// pids.max reached, RLIMIT_NPROC, kernel.threads-max, or no room for the thread's stack)
// is an Error whose message names `what` (the thread's work) and those limits with the
// values this process sees, never the std::system_error that std::thread throws and
// nobody above would catch. Out of memory for the thread's state stays std::bad_alloc.
Result<std::thread> startThread(std::string_view what, std::function<void()> body);

} // namespace ipmasq::process
