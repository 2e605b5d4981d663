// SPDX-License-Identifier: Apache-2.0
// The config source in a scratch directory, with time driven by the test: debounce, the
// absent grace time, a vanished directory, the write guard.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sys/stat.h>

#include "ip-masq-agent/config_source.h"
#include "scratch_dir.h"
#include "../common/std_hash_collision.h"

using namespace ipmasq;
using ipmasq::test::ScratchDir;
using namespace std::chrono_literals;
using Clock = ConfigSource::Clock;

namespace {

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

// What look() yielded unless it is files: "error:<...>", "nothing" or "absent".
std::optional<std::string> yieldedNoFiles(const Result<std::optional<ConfigContent>> &result)
{
	if (!result)
		return "error:" + result.error().message;
	if (!*result)
		return "nothing";
	if ((*result)->files.empty())
		return "absent";
	return std::nullopt;
}

// What look() yielded with --config: "text:<...>", or as yieldedNoFiles says.
std::string yielded(const Result<std::optional<ConfigContent>> &result)
{
	if (auto state = yieldedNoFiles(result))
		return *state;
	REQUIRE((*result)->files.size() == 1);
	return "text:" + (*result)->files.front().text;
}

} // namespace

TEST_CASE("config source: start-up, a settled change, nothing while unchanged")
{
	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	ConfigSource source = ConfigSource::open(ConfigLocation::file(file.string()));
	Clock::time_point now = Clock::now();
	CHECK(yielded(source.look(ConfigLook::reload, now)) == "text:a");
	CHECK(yielded(source.look(ConfigLook::resync, now)) == "nothing"); // same stamp
	CHECK(yielded(source.look(ConfigLook::reload, now)) == "nothing"); // same bytes

	// Written in place: the events settle before the file is read.
	std::ofstream(file) << "b";
	source.onWatchEvents(now);
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "nothing"); // still settling
	REQUIRE(source.nextWake());
	CHECK(*source.nextWake() == now + ConfigSource::kSettle);
	now += ConfigSource::kSettle;
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:b");
	CHECK_FALSE(source.nextWake());
}

TEST_CASE("config source: a rename onto the file, or a ..data swap, is read at once")
{
	ScratchDir dir;
	const auto cd = [&](const std::string &command) {
		REQUIRE(std::system(("cd " + dir.path.string() + " && " + command).c_str()) == 0);
	};
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	ConfigSource source = ConfigSource::open(ConfigLocation::file(file.string()));
	const Clock::time_point now = Clock::now();
	CHECK(yielded(source.look(ConfigLook::reload, now)) == "text:a");

	// A new file renamed over the old one is complete: no settle time.
	writeAtomically(file, "b");
	source.onWatchEvents(now);
	REQUIRE(source.nextWake());
	CHECK(*source.nextWake() <= now);
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:b");
	CHECK_FALSE(source.nextWake());

	// The same for a ConfigMap's atomic swap of "..data" under a symlinked file.
	std::filesystem::remove(file);
	cd("mkdir ..2026_11_23_a && printf c > ..2026_11_23_a/config && ln -s ..2026_11_23_a ..data "
	   "&& ln -s ..data/config config");
	source.onWatchEvents(now);
	CHECK(yielded(source.look(ConfigLook::ifDue, now + ConfigSource::kSettle)) == "text:c");
	cd("mkdir ..2026_11_23_b && printf d > ..2026_11_23_b/config && "
	   "ln -s ..2026_11_23_b ..data_tmp && mv -T ..data_tmp ..data && rm -rf ..2026_11_23_a");
	const Clock::time_point later = now + 1s;
	source.onWatchEvents(later);
	CHECK(yielded(source.look(ConfigLook::ifDue, later)) == "text:d");
}

TEST_CASE("config source: absent at start-up means absent at once")
{
	ScratchDir dir;
	ConfigSource source = ConfigSource::open(ConfigLocation::file((dir.path / "missing").string()));
	CHECK(yielded(source.look(ConfigLook::reload, Clock::now())) == "absent");
}

TEST_CASE("config source: a vanished file is absent only after the grace time")
{
	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	ConfigSource source = ConfigSource::open(ConfigLocation::file(file.string()));
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
	ConfigSource source = ConfigSource::open(ConfigLocation::file((sub / "config").string()));
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
	ConfigSource source = ConfigSource::open(ConfigLocation::file(file.string()));
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
	ConfigSource source = ConfigSource::open(ConfigLocation::file(file.string()));
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

TEST_CASE("config source: after a read error, the same content is new, and the read is retried")
{
	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	ConfigSource source = ConfigSource::open(ConfigLocation::file(file.string()));
	Clock::time_point now = Clock::now();
	REQUIRE(yielded(source.look(ConfigLook::reload, now)) == "text:a");

	// A FIFO renamed over the file: an error, and a retry scheduled without any event.
	const auto fifo = dir.path / "fifo";
	REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
	std::filesystem::rename(fifo, file);
	source.onWatchEvents(now);
	CHECK_THAT(yielded(source.look(ConfigLook::ifDue, now)), Catch::StartsWith("error:") &&
								  Catch::Contains("FIFO"));
	REQUIRE(source.nextWake());
	CHECK(*source.nextWake() == now + ConfigSource::kReadRetryInitial);
	now += ConfigSource::kReadRetryInitial;
	CHECK_THAT(yielded(source.look(ConfigLook::ifDue, now)), Catch::StartsWith("error:"));
	REQUIRE(source.nextWake());
	CHECK(*source.nextWake() == now + 2 * ConfigSource::kReadRetryInitial); // backing off

	// The same bytes as before the error are delivered again: the error is over.
	writeAtomically(file, "a");
	source.onWatchEvents(now);
	CHECK(yielded(source.look(ConfigLook::ifDue, now)) == "text:a");
	CHECK_FALSE(source.nextWake());
	CHECK(yielded(source.look(ConfigLook::reload, now)) == "nothing");
}

TEST_CASE("config source: two texts of equal size and std::hash are both delivered")
{
	// They differ in the first block; the second block of b is chosen so that libstdc++'s
	// std::hash ends in the same state (std_hash_collision.h).
	const std::string a = "1234567A" "anything" "the same tail";
	const auto b = ipmasq::test::matchStdHash(a, "1234567B" "........" "the same tail", 8,
						  [](char) { return true; });
	REQUIRE(b);
	REQUIRE(a.size() == b->size());
	REQUIRE(std::hash<std::string>{}(a) == std::hash<std::string>{}(*b));

	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, a);
	ConfigSource source = ConfigSource::open(ConfigLocation::file(file.string()));
	const Clock::time_point now = Clock::now();
	REQUIRE(yielded(source.look(ConfigLook::reload, now)) == "text:" + a);
	writeAtomically(file, *b);
	CHECK(yielded(source.look(ConfigLook::reload, now)) == "text:" + *b);
}

namespace {

// What a --config-dir look yielded: "files:a=1,b=2" (names and texts), or as
// yieldedNoFiles says.
std::string yieldedFiles(const Result<std::optional<ConfigContent>> &result)
{
	if (auto state = yieldedNoFiles(result))
		return *state;
	std::string out = "files:";
	for (const ConfigFile &file : (*result)->files)
		out += (out.size() > 6 ? "," : "") +
			std::filesystem::path(file.path).filename().string() + "=" + file.text;
	return out;
}

// The next look once the events have settled.
std::string settled(ConfigSource &source, Clock::time_point &now)
{
	source.onWatchEvents(now);
	now += ConfigSource::kSettle;
	return yieldedFiles(source.look(ConfigLook::ifDue, now));
}

} // namespace

TEST_CASE("config source, --config-dir: adding, editing and removing one of the files")
{
	ScratchDir dir;
	writeAtomically(dir.path / "ip-masq-b", "2");
	ConfigSource source = ConfigSource::open(ConfigLocation::directory(dir.path.string()));
	Clock::time_point now = Clock::now();
	CHECK(yieldedFiles(source.look(ConfigLook::reload, now)) == "files:ip-masq-b=2");

	writeAtomically(dir.path / "ip-masq-a", "1");
	CHECK(settled(source, now) == "files:ip-masq-a=1,ip-masq-b=2");
	std::ofstream(dir.path / "ip-masq-b", std::ios::trunc) << "3"; // in place
	CHECK(settled(source, now) == "files:ip-masq-a=1,ip-masq-b=3");
	// One of two removed: at once, with no grace time (the other still says what holds).
	std::filesystem::remove(dir.path / "ip-masq-a");
	CHECK(settled(source, now) == "files:ip-masq-b=3");
	// Other names do not matter, and wake nothing.
	writeAtomically(dir.path / "unrelated", "x");
	writeAtomically(dir.path / ".ip-masq-b.swp", "x");
	source.onWatchEvents(now);
	CHECK_FALSE(source.nextWake());
	// The last one removed: absent once the grace time has passed, as for --config.
	std::filesystem::remove(dir.path / "ip-masq-b");
	CHECK(settled(source, now) == "nothing");
	REQUIRE(source.nextWake());
	now = *source.nextWake();
	CHECK(yieldedFiles(source.look(ConfigLook::ifDue, now)) == "absent");
}

TEST_CASE("config source, --config-dir: a ConfigMap ..data swap and a key added to it")
{
	ScratchDir dir;
	const auto cd = [&](const std::string &command) {
		REQUIRE(std::system(("cd " + dir.path.string() + " && " + command).c_str()) == 0);
	};
	cd("mkdir ..2026_11_23_a && printf 1 > ..2026_11_23_a/ip-masq-a && ln -s ..2026_11_23_a ..data "
	   "&& ln -s ..data/ip-masq-a ip-masq-a");
	ConfigSource source = ConfigSource::open(ConfigLocation::directory(dir.path.string()));
	Clock::time_point now = Clock::now();
	CHECK(yieldedFiles(source.look(ConfigLook::reload, now)) == "files:ip-masq-a=1");

	// The atomic writer's swap: only "..data" changes in the watched directory.
	cd("mkdir ..2026_11_23_b && printf 2 > ..2026_11_23_b/ip-masq-a && "
	   "ln -s ..2026_11_23_b ..data_tmp && mv -T ..data_tmp ..data && rm -rf ..2026_11_23_a");
	CHECK(settled(source, now) == "files:ip-masq-a=2");

	// A second ConfigMap's key appears in the projected volume.
	cd("mkdir ..2026_11_23_c && cp ..2026_11_23_b/ip-masq-a ..2026_11_23_c/ && "
	   "printf 3 > ..2026_11_23_c/ip-masq-b && ln -s ..2026_11_23_c ..data_tmp && "
	   "mv -T ..data_tmp ..data && ln -s ..data/ip-masq-b ip-masq-b && rm -rf ..2026_11_23_b");
	CHECK(settled(source, now) == "files:ip-masq-a=2,ip-masq-b=3");
	// The resync finds nothing new: same files, same stamps.
	CHECK(yieldedFiles(source.look(ConfigLook::resync, now)) == "nothing");
}

TEST_CASE("config source, --config-dir: a file open for writing holds the whole read back")
{
	ScratchDir dir;
	writeAtomically(dir.path / "ip-masq-a", "1");
	writeAtomically(dir.path / "ip-masq-b", "2");
	ConfigSource source = ConfigSource::open(ConfigLocation::directory(dir.path.string()));
	Clock::time_point now = Clock::now();
	REQUIRE(yieldedFiles(source.look(ConfigLook::reload, now)) == "files:ip-masq-a=1,ip-masq-b=2");
	{
		std::ofstream writer(dir.path / "ip-masq-b", std::ios::trunc);
		writer << "half" << std::flush;
		source.onWatchEvents(now);
		now += ConfigSource::kWriteTimeout + 1s;
		CHECK(yieldedFiles(source.look(ConfigLook::reload, now)) == "nothing");
		writer << " and whole";
	}
	CHECK(settled(source, now) == "files:ip-masq-a=1,ip-masq-b=half and whole");
}

TEST_CASE("config source, --config-dir: a missing directory is absent, and watched for")
{
	ScratchDir dir;
	const auto sub = dir.path / "conf.d";
	ConfigSource source = ConfigSource::open(ConfigLocation::directory(sub.string()));
	Clock::time_point now = Clock::now();
	CHECK(yieldedFiles(source.look(ConfigLook::reload, now)) == "absent");
	std::filesystem::create_directory(sub);
	writeAtomically(sub / "ip-masq-x", "1");
	REQUIRE(readable(source.fd()));
	source.onWatchEvents(now); // the directory appeared: now it is watched itself
	CHECK(settled(source, now) == "files:ip-masq-x=1");
	CHECK_FALSE(source.takeWatchWarning());
}
