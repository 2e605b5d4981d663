// SPDX-License-Identifier: Apache-2.0
// The config source in a scratch directory, with time driven by the test: debounce, the
// absent grace time, a vanished directory, the write guard.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <poll.h>

#include "ip-masq-agent/config_source.h"

using namespace ipmasq;
using namespace std::chrono_literals;
using Clock = ConfigSource::Clock;

namespace {

struct ScratchDir {
	std::filesystem::path path;
	ScratchDir()
	{
		char tmpl[] = "/tmp/ipmasq-source-XXXXXX";
		REQUIRE(mkdtemp(tmpl) != nullptr);
		path = tmpl;
	}
	~ScratchDir() { std::filesystem::remove_all(path); }
};

void writeAtomically(const std::filesystem::path &file, const std::string &text)
{
	const auto tmp = file.string() + ".tmp";
	std::ofstream(tmp) << text;
	std::filesystem::rename(tmp, file);
}

// Whether the loop would wake: the source's descriptor has events to read.
bool readable(int fd)
{
	pollfd pfd{fd, POLLIN, 0};
	return poll(&pfd, 1, 0) == 1;
}

// What look() yielded: "text:<...>", "absent", "nothing" or "error:<...>".
std::string yielded(const Result<std::optional<ConfigContent>> &result)
{
	if (!result)
		return "error:" + result.error().message;
	if (!*result)
		return "nothing";
	return (*result)->text ? "text:" + *(*result)->text : "absent";
}

} // namespace

TEST_CASE("config source: start-up, a settled change, nothing while unchanged")
{
	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	ConfigSource source = ConfigSource::open(file.string());
	Clock::time_point now = Clock::now();
	CHECK(yielded(source.look(ConfigLook::reload, now)) == "text:a");
	CHECK(yielded(source.look(ConfigLook::resync, now)) == "nothing"); // same stamp
	CHECK(yielded(source.look(ConfigLook::reload, now)) == "nothing"); // same bytes

	writeAtomically(file, "b");
	source.onWatchEvents(now);
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "nothing"); // still settling
	REQUIRE(source.nextWake());
	CHECK(*source.nextWake() == now + ConfigSource::kSettle);
	now += ConfigSource::kSettle;
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:b");
	CHECK_FALSE(source.nextWake());
}

TEST_CASE("config source: absent at start-up means absent at once")
{
	ScratchDir dir;
	ConfigSource source = ConfigSource::open((dir.path / "missing").string());
	CHECK(yielded(source.look(ConfigLook::reload, Clock::now())) == "absent");
}

TEST_CASE("config source: a vanished file is absent only after the grace time")
{
	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	ConfigSource source = ConfigSource::open(file.string());
	Clock::time_point now = Clock::now();
	REQUIRE(yielded(source.look(ConfigLook::reload, now)) == "text:a");

	SECTION("it stays away: absent after the grace time")
	{
		std::filesystem::remove(file);
		source.onWatchEvents(now);
		now += ConfigSource::kSettle;
		CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "nothing");
		CHECK(yielded(source.look(ConfigLook::reload, now + 1s)) == "nothing");
		REQUIRE(source.nextWake());
		now = *source.nextWake();
		CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "absent");
	}
	SECTION("it comes back within it: straight to the new text")
	{
		std::filesystem::remove(file);
		source.onWatchEvents(now);
		now += ConfigSource::kSettle;
		CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "nothing");
		now += 1s;
		writeAtomically(file, "c");
		source.onWatchEvents(now);
		now += ConfigSource::kSettle;
		CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:c");
		now += ConfigSource::kAbsentGrace;
		CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "nothing");
	}
}

TEST_CASE("config source: a directory deleted and re-created is watched again")
{
	ScratchDir dir;
	const auto sub = dir.path / "cfg";
	std::filesystem::create_directory(sub);
	writeAtomically(sub / "config", "a");
	ConfigSource source = ConfigSource::open((sub / "config").string());
	Clock::time_point now = Clock::now();
	REQUIRE(yielded(source.look(ConfigLook::reload, now)) == "text:a");

	std::filesystem::remove_all(sub);
	source.onWatchEvents(now); // the directory is gone: the parent is watched now
	now += ConfigSource::kSettle;
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "nothing");

	std::filesystem::create_directory(sub);
	writeAtomically(sub / "config", "b");
	REQUIRE(readable(source.fd())); // the parent saw "cfg" appear
	source.onWatchEvents(now); // and the directory is watched again
	now += ConfigSource::kSettle;
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:b");

	writeAtomically(sub / "config", "c");
	source.onWatchEvents(now);
	now += ConfigSource::kSettle;
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:c");
	CHECK_FALSE(source.takeWatchWarning());
}

TEST_CASE("config source: a file open for writing is not read until it is closed")
{
	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	ConfigSource source = ConfigSource::open(file.string());
	Clock::time_point now = Clock::now();
	REQUIRE(yielded(source.look(ConfigLook::reload, now)) == "text:a");
	{
		std::ofstream writer(file, std::ios::trunc);
		writer << "half" << std::flush;
		source.onWatchEvents(now);
		// Long after inotify's own timeout: the lease still sees the writer.
		now += ConfigSource::kWriteTimeout + 1s;
		CHECK(yielded(source.look(ConfigLook::reload, now)) == "nothing");
		writer << " and whole";
	}
	source.onWatchEvents(now);
	now += ConfigSource::kSettle;
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:half and whole");
}

TEST_CASE("config source: no deadline stays in the past (the loop would spin)")
{
	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	ConfigSource source = ConfigSource::open(file.string());
	Clock::time_point now = Clock::now();
	REQUIRE(yielded(source.look(ConfigLook::reload, now)) == "text:a");

	std::filesystem::remove(file);
	source.onWatchEvents(now);
	now += ConfigSource::kSettle;
	REQUIRE(yielded(source.look(ConfigLook::ifDue, now)) == "nothing"); // grace running
	{
		// Back, but still being written when the grace time runs out.
		std::ofstream writer(file);
		writer << "b" << std::flush;
		source.onWatchEvents(now);
		now += ConfigSource::kAbsentGrace;
		CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "nothing");
		const auto wake = source.nextWake();
		CHECK((!wake || *wake > now));
	}
	source.onWatchEvents(now);
	now += ConfigSource::kSettle;
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:b");
}
