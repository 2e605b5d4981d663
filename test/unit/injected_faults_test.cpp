// SPDX-License-Identifier: Apache-2.0
// Error paths under injected failures: an allocation failure inside the netlink callback,
// a pass of a paced thread that throws (out of memory too), an unreadable /proc for the
// owner of a table. Each time the process goes on and says what failed.
//
// This executable replaces the global operator new, so that a test can make allocations
// fail on its own thread while it is armed (FailingAllocations).
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include <linux/rtnetlink.h>

#include "ip-masq-agent/netlink/port_owner.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/base/paced_thread.h"
#include "captured_stderr.h"
#include "scratch_dir.h"

namespace {

// Armed on one thread: every allocation of that thread fails (`all`), or only the one
// `countdown` allocations from now.
thread_local bool t_failAll = false;
thread_local long t_countdown = -1;

bool allocationFails()
{
	if (t_failAll)
		return true;
	if (t_countdown < 0)
		return false;
	return t_countdown-- == 0;
}

struct FailingAllocations {
	static void all() { t_failAll = true; }
	static void nth(long n) { t_countdown = n; }
	static void stop()
	{
		t_failAll = false;
		t_countdown = -1;
	}
};

// The open descriptors of this process.
size_t openDescriptors()
{
	size_t n = 0;
	for ([[maybe_unused]] const auto &entry : std::filesystem::directory_iterator("/proc/self/fd"))
		n++;
	return n;
}

} // namespace

// Replaces operator new for the whole test executable (every file of its suite is linked
// into one, test/unit/meson.build): it only passes through to malloc unless this
// file's tests arm it, and each test runs in a process of its own.
void *operator new(size_t size)
{
	if (allocationFails())
		throw std::bad_alloc();
	if (void *p = std::malloc(size ? size : 1))
		return p;
	throw std::bad_alloc();
}

void operator delete(void *p) noexcept
{
	std::free(p);
}

void operator delete(void *p, size_t) noexcept
{
	std::free(p);
}

using namespace ipmasq;
using test::CapturedStderr;

TEST_CASE("out of memory inside the netlink callback: an error from the exchange, never an exception through libmnl")
{
	auto socket = netlink::Socket::open(netlink::Protocol::route);
	REQUIRE(socket);
	Status status;
	bool threw = false;
	try {
		// Every allocation fails from inside the handler until the exchange is over.
		status = socket->query(RTM_GETLINK, AF_UNSPEC, NLM_F_DUMP, nullptr,
				       [](const nlmsghdr *) -> Status {
					       FailingAllocations::all();
					       throw std::bad_alloc();
				       });
	} catch (...) {
		threw = true;
	}
	FailingAllocations::stop();
	REQUIRE_FALSE(threw);
	REQUIRE_FALSE(status);
	CHECK(status.error().errnum == ENOMEM);
	CHECK_THAT(status.error().message, Catch::Contains("out of memory"));

	// The socket goes on: the next dump is read whole, the first one's rest discarded.
	size_t links = 0;
	REQUIRE(socket->query(RTM_GETLINK, AF_UNSPEC, NLM_F_DUMP, nullptr, [&links](const nlmsghdr *) {
		links++;
		return Status{};
	}));
	CHECK(links >= 1); // loopback at least

	SECTION("with memory to say it, the message names the exchange")
	{
		const Status again = socket->query(RTM_GETLINK, AF_UNSPEC, NLM_F_DUMP, nullptr,
						   [](const nlmsghdr *) -> Status { throw std::bad_alloc(); });
		REQUIRE_FALSE(again);
		CHECK(again.error().message == "out of memory while handling a netlink reply");
	}
	SECTION("another exception is named by its message")
	{
		const Status again = socket->query(RTM_GETLINK, AF_UNSPEC, NLM_F_DUMP, nullptr,
						   [](const nlmsghdr *) -> Status {
							   throw std::runtime_error("a handler's bug");
						   });
		REQUIRE_FALSE(again);
		CHECK(again.error().message == "handling a netlink reply: a handler's bug");
	}
}

TEST_CASE("a paced thread whose passes throw goes on, and logs what failed")
{
	std::atomic<int> passes{0};
	CapturedStderr captured;
	{
		PacedThread thread("the test's check", {std::chrono::milliseconds(1), 1}, [&passes]() -> bool {
			switch (passes++) {
			case 0:
				throw std::runtime_error("the first pass's bug");
			case 1:
				// Out of memory, so much that the log line cannot be written either.
				FailingAllocations::all();
				throw std::bad_alloc();
			case 2:
				FailingAllocations::stop();
				throw 42; // not even an exception type
			default:
				return false;
			}
		});
		REQUIRE(thread.start());
		thread.nudge();
		// Each failed pass is due again at once: the fourth comes without a nudge.
		for (int i = 0; i < 10000 && passes < 4; i++)
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
	}
	REQUIRE(passes >= 4);
	const std::string log = captured.text();
	CHECK_THAT(log, Catch::Contains("the test's check failed: the first pass's bug; it tries again later"));
	CHECK_THAT(log, Catch::Contains("the test's check failed: an unknown exception"));
}

TEST_CASE("the owner of a netlink port: an unreadable /proc is an error that says so, and no descriptor leaks")
{
	test::ScratchDir dir;
	const std::string proc = dir.path.string() + "/proc";
	std::filesystem::create_directories(proc + "/net");
	// Processes 1 and 2 hold other sockets, 2's descriptors cannot be listed (its fd is a
	// file), process 3 holds the socket of port 77.
	for (const char *pid : {"1", "2", "3"}) {
		std::filesystem::create_directories(proc + "/" + pid);
		std::ofstream(proc + "/" + pid + "/comm") << "proc" << pid << "\n";
	}
	std::filesystem::create_directories(proc + "/1/fd");
	std::filesystem::create_symlink("socket:[1000]", proc + "/1/fd/3");
	std::ofstream(proc + "/2/fd") << "not a directory\n";
	std::filesystem::create_directories(proc + "/3/fd");
	std::filesystem::create_symlink("/dev/null", proc + "/3/fd/0");
	std::filesystem::create_symlink("socket:[4242]", proc + "/3/fd/5");

	SECTION("/proc/net/netlink cannot be read: the error names it")
	{
		std::filesystem::create_directories(proc + "/net/netlink"); // read(): EISDIR
		const auto owner = netlink::findPortOwner(77, proc);
		REQUIRE_FALSE(owner);
		CHECK_THAT(owner.error().message, Catch::StartsWith("cannot read " + proc + "/net/netlink: "));
	}
	SECTION("found past a process that cannot be read; out of memory at any step leaks no descriptor")
	{
		std::ofstream(proc + "/net/netlink")
			<< "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n"
			<< "0000000000000000 12  77         00000000 0        0        0     2        0        4242\n";
		auto owner = netlink::findPortOwner(77, proc);
		REQUIRE(owner);
		REQUIRE(*owner);
		CHECK((*owner)->pid == 3);
		CHECK((*owner)->command == "proc3");
		CHECK_FALSE(*netlink::findPortOwner(78, proc)); // no such port: nobody

		const size_t before = openDescriptors();
		size_t failed = 0;
		for (long n = 0; n < 200; n++) {
			FailingAllocations::nth(n);
			try {
				owner = netlink::findPortOwner(77, proc);
			} catch (const std::bad_alloc &) {
				failed++;
			}
			FailingAllocations::stop();
			REQUIRE(openDescriptors() == before);
		}
		CHECK(failed > 0); // each of the scan's allocations failed once, in its turn
		REQUIRE((owner && *owner)); // the last ones, past every allocation, found it
		CHECK((*owner)->pid == 3);
	}
}
