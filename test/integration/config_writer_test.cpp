// SPDX-License-Identifier: Apache-2.0
// The config held open for writing, through the running agent: a writer that never writes
// (the config goes in force after the quiet window, at start, for an edit, with --config and
// --config-dir, and with --once), and a writer that writes slowly from a truncated file
// (nothing partial goes in: the kernel's set never holds a shorter list; the whole file does
// once it stays the same). Private network namespace.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <fcntl.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/config/config_source.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;
using ipmasq::ConfigSource;
using ipmasq::UniqueFd;

namespace {

const std::string kSlowResync = "resyncInterval: 1h\n";
const std::string kReadWhileHeld = "read while another process holds it open for writing";

// How long a test waits for a file held open to be read: the quiet window plus a margin
// that only a hang misses (the wait is the window, a fixed time, not work the machine does).
constexpr std::chrono::milliseconds kWindowSeen = 12 * ConfigSource::kWriterQuietWindow;

// The file opened for writing by this process (as `exec 3>>FILE` in a shell, or an editor
// that keeps it open), never closed until the test is done with it; O_CLOEXEC, so that the
// agent does not inherit it.
UniqueFd holdOpenForWriting(const std::string &path, int flags = O_APPEND)
{
	UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC | flags));
	REQUIRE(fd.isValid());
	return fd;
}

// A writer that truncates the file, writes `head` at once, then `tail` one byte every
// 300 ms, and keeps the file open afterwards: the slow writer of the issue.
class SlowWriter
{
public:
	SlowWriter(const std::string &path, std::string head, std::string tail)
		: fd_(holdOpenForWriting(path, O_TRUNC)), tail_(std::move(tail))
	{
		REQUIRE(write(fd_.get(), head.data(), head.size()) == ssize_t(head.size()));
		thread_ = std::thread([this] {
			for (size_t i = 0; i < tail_.size() && !stop_; i++) {
				std::this_thread::sleep_for(300ms);
				if (write(fd_.get(), &tail_[i], 1) != 1)
					break;
			}
			done_ = true;
		});
	}
	~SlowWriter()
	{
		stop_ = true;
		thread_.join();
	}
	bool done() const { return done_; }

private:
	UniqueFd fd_;
	std::string tail_;
	std::atomic<bool> stop_{false}, done_{false};
	std::thread thread_;
};

// The kernel's set must never hold a shorter list than `kept` while `writer` writes: with
// no table at all (at start) or with every range of `kept` in it. Looked at every 50 ms
// (each look an `nft list`), until the writer is done; bounded by its bytes.
void requireNothingPartial(const SlowWriter &writer, const std::vector<std::string> &kept,
			   const AgentProcess &agent)
{
	int looks = 0;
	for (; !writer.done() && looks < 2000; looks++) {
		const std::string table = tableListing();
		bool whole = true;
		for (const std::string &range : kept)
			whole = whole && table.find(range) != std::string::npos;
		INFO("look " << looks << ": a shorter list is in force\nagent log:\n" << agent.log()
			     << "\ntable:\n" << table);
		REQUIRE((table.empty() || whole));
		std::this_thread::sleep_for(50ms);
	}
	REQUIRE(writer.done());
	WARN(looks << " looks at the kernel's set while the writer wrote");
}

} // namespace

TEST_CASE("a config held open for writing and never written goes in force at start (--config, --config-dir)")
{
	for (const bool directory : {false, true}) {
		deleteTable(); // a clean start, whatever an earlier test left
		TempDir dir;
		const std::string name = directory ? "ip-masq-agent" : "config";
		dir.write(name, kSlowResync + "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
		const UniqueFd holder = holdOpenForWriting(dir.file(name));
		AgentProcess agent({directory ? "--config-dir=" + dir.path() : "--config=" + dir.file(name)});
		requireWithin([] { return tableHas("198.51.100.0/24"); }, kWindowSeen, agent,
			      directory ? "--config-dir: in force" : "--config: in force");
		CHECK_THAT(agent.log(), Catch::Contains(kReadWhileHeld) && Catch::Contains(dir.file(name)));
		CHECK(agent.stop(SIGTERM) == 0);
		deleteTable();
	}
}

TEST_CASE("a running daemon's config edited through a descriptor held open goes in force")
{
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return tableHas("192.0.2.0/24"); }, kChangeSeen, agent, "first apply");
	// A sidecar's edit: truncate and write through its descriptor, and keep it open.
	const UniqueFd holder = holdOpenForWriting(dir.file("config"), O_TRUNC);
	const std::string edited = kSlowResync + "nonMasqueradeCIDRs: [203.0.113.0/24]\n";
	REQUIRE(write(holder.get(), edited.data(), edited.size()) == ssize_t(edited.size()));
	requireWithin([] { return tableHas("203.0.113.0/24") && !tableHas("192.0.2.0/24"); }, kWindowSeen,
		      agent, "the edit in force");
	CHECK(countOf(agent.log(), kReadWhileHeld) == 1);
	CHECK(agent.stop(SIGTERM) == 0);
	deleteTable();
}

TEST_CASE("a slow writer from a truncated file: nothing partial goes in, the whole file does once quiet")
{
	// After the head alone the file is a valid shorter list (192.0.2.0/24 only); the tail
	// comes a byte every 300 ms, for about 10 s: twice the window.
	const std::string head = kSlowResync + "nonMasqueradeCIDRs:\n- 192.0.2.0/24\n";
	const std::string tail = "- 198.51.100.0/24\n- 203.0.113.0/24\n";
	SECTION("at start")
	{
		deleteTable();
		TempDir dir;
		dir.write("config", "");
		SlowWriter writer(dir.file("config"), head, tail);
		AgentProcess agent({"--config=" + dir.file("config"), "-v=1"});
		// Nothing goes in while it is written: no table at all, never a shorter list.
		requireNothingPartial(writer, {"192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"}, agent);
		requireWithin([] { return tableHas("203.0.113.0/24"); }, kWindowSeen, agent, "the whole file");
		CHECK(tableHas("192.0.2.0/24"));
		CHECK(tableHas("198.51.100.0/24"));
		const std::string log = agent.log();
		CHECK(countOf(log, "info: applied table") == 1);
		CHECK(countOf(log, kReadWhileHeld) == 1);
		CHECK_THAT(log, !Catch::Contains("nonMasqueradeCIDRs=[192.0.2.0/24]"));
		CHECK(agent.stop(SIGTERM) == 0);
	}
	SECTION("an edit of a running daemon")
	{
		TempDir dir;
		dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24, 198.51.100.0/24]\n");
		AgentProcess agent({"--config=" + dir.file("config"), "-v=1"});
		requireWithin([] { return tableHas("198.51.100.0/24"); }, kChangeSeen, agent, "first apply");
		{
			SlowWriter writer(dir.file("config"), head, tail);
			// The list in force stays whole: 198.51.100.0/24 never leaves.
			requireNothingPartial(writer, {"192.0.2.0/24", "198.51.100.0/24"}, agent);
			requireWithin([] { return tableHas("203.0.113.0/24"); }, kWindowSeen, agent,
				      "the whole file");
			CHECK(tableHas("198.51.100.0/24"));
		}
		const std::string log = agent.log();
		CHECK(countOf(log, "info: applied table") == 2);
		CHECK(countOf(log, kReadWhileHeld) == 1);
		CHECK_THAT(log, !Catch::Contains("nonMasqueradeCIDRs=[192.0.2.0/24] "));
		CHECK(agent.stop(SIGTERM) == 0);
	}
	deleteTable();
}

TEST_CASE("--once reads a config held open for writing as the daemon does: bounded, never partial")
{
	SECTION("held open, never written: applied after the window")
	{
		deleteTable();
		TempDir dir;
		dir.write("config", "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
		const UniqueFd holder = holdOpenForWriting(dir.file("config"));
		AgentProcess once({"--once", "--config=" + dir.file("config")});
		CHECK(once.wait(kWindowSeen) == 0);
		CHECK(tableHas("198.51.100.0/24"));
		CHECK_THAT(once.log(), Catch::Contains(kReadWhileHeld));
	}
	SECTION("a slow writer: the whole file, never the prefix")
	{
		deleteTable();
		TempDir dir;
		dir.write("config", "");
		SlowWriter writer(dir.file("config"), "nonMasqueradeCIDRs:\n- 192.0.2.0/24\n",
				  "- 198.51.100.0/24\n- 203.0.113.0/24\n");
		AgentProcess once({"--once", "--config=" + dir.file("config")});
		CHECK(once.wait(kWindowSeen + 15s) == 0);
		CHECK(writer.done());
		INFO(once.log());
		CHECK(tableHas("203.0.113.0/24"));
		CHECK(tableHas("198.51.100.0/24"));
	}
	deleteTable();
}
