// SPDX-License-Identifier: Apache-2.0
// The config source in a scratch directory, with time driven by the test: debounce, the
// absent grace time, a vanished directory, the write guard.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sys/stat.h>

#include "ip-masq-agent/config/config_source.h"
#include "scratch_dir.h"
#include "../common/std_hash_collision.h"

using namespace ipmasq;
using ipmasq::test::ScratchDir;
using ipmasq::UniqueFd;
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

// What a --config-dir look yielded: "files:a=1,b=2" (names and texts), or as
// yieldedNoFiles says.
std::string yieldedFiles(const Result<std::optional<ConfigContent>> &result)
{
	if (auto state = yieldedNoFiles(result))
		return *state;
	std::string out = "files:";
	for (const ConfigFile &file : (*result)->files)
		// Appends, not "," + string: g++ 12's bogus -Wrestrict at -O3 (GCC bug 105329).
		out.append(out.size() > 6 ? "," : "")
			.append(std::filesystem::path(file.path).filename().string())
			.append("=")
			.append(file.text);
	return out;
}

// A config source in a scratch directory, with the test's own clock: the set-up every
// test shares. With --config it watches `file` ("config" in `dir`); with --config-dir,
// `dir` itself.
struct SourceFixture {
	enum class Watch { file, directory };

	ScratchDir dir;
	std::filesystem::path file = dir.path / "config";
	ConfigLocation location;
	ConfigSource source;
	Clock::time_point now = Clock::now();

	explicit SourceFixture(Watch watch)
		: location(watch == Watch::file ? ConfigLocation::file(file.string())
						: ConfigLocation::directory(dir.path.string())),
		  source(ConfigSource::open(location))
	{
	}
	// --config, its file written with `initial` and read at start-up.
	explicit SourceFixture(const std::string &initial) : SourceFixture(Watch::file)
	{
		writeAtomically(file, initial);
		REQUIRE(look(ConfigLook::reload) == "text:" + initial);
	}

	// What a look yields now, as yielded() or (--config-dir) yieldedFiles() says.
	std::string look(ConfigLook why)
	{
		auto result = source.look(why, now);
		return location.isDirectory() ? yieldedFiles(result) : yielded(result);
	}
	// The next look once the events seen so far have settled.
	std::string settled()
	{
		source.onWatchEvents(now);
		now += ConfigSource::kSettle;
		return look(ConfigLook::ifDue);
	}
};

} // namespace

TEST_CASE("config source: start-up, a settled change, nothing while unchanged")
{
	SourceFixture f("a");
	CHECK(f.look(ConfigLook::resync) == "nothing"); // same stamp
	CHECK(f.look(ConfigLook::reload) == "nothing"); // same bytes

	// Written in place: the events settle before the file is read.
	std::ofstream(f.file) << "b";
	f.source.onWatchEvents(f.now);
	CHECK(f.look(ConfigLook::ifDue) == "nothing"); // still settling
	REQUIRE(f.source.nextWake());
	CHECK(*f.source.nextWake() == f.now + ConfigSource::kSettle);
	f.now += ConfigSource::kSettle;
	CHECK(f.look(ConfigLook::ifDue) == "text:b");
	CHECK_FALSE(f.source.nextWake());
}

TEST_CASE("config source: a rename onto the file, or a ..data swap, is read at once")
{
	SourceFixture f("a");
	const auto cd = [&](const std::string &command) {
		REQUIRE(std::system(("cd " + f.dir.path.string() + " && " + command).c_str()) == 0);
	};

	// A new file renamed over the old one is complete: no settle time.
	writeAtomically(f.file, "b");
	f.source.onWatchEvents(f.now);
	REQUIRE(f.source.nextWake());
	CHECK(*f.source.nextWake() <= f.now);
	CHECK(f.look(ConfigLook::ifDue) == "text:b");
	CHECK_FALSE(f.source.nextWake());

	// The same for a ConfigMap's atomic swap of "..data" under a symlinked file.
	std::filesystem::remove(f.file);
	cd("mkdir ..2026_11_23_a && printf c > ..2026_11_23_a/config && ln -s ..2026_11_23_a ..data "
	   "&& ln -s ..data/config config");
	CHECK(f.settled() == "text:c");
	cd("mkdir ..2026_11_23_b && printf d > ..2026_11_23_b/config && "
	   "ln -s ..2026_11_23_b ..data_tmp && mv -T ..data_tmp ..data && rm -rf ..2026_11_23_a");
	f.now += 1s;
	f.source.onWatchEvents(f.now);
	CHECK(f.look(ConfigLook::ifDue) == "text:d");
}

TEST_CASE("config source: absent at start-up means absent at once")
{
	SourceFixture f(SourceFixture::Watch::file);
	CHECK(f.look(ConfigLook::reload) == "absent");
}

TEST_CASE("config source: a vanished file is absent only after the grace time")
{
	SourceFixture f("a");

	SECTION("it stays away: absent after the grace time")
	{
		std::filesystem::remove(f.file);
		CHECK(f.settled() == "nothing");
		CHECK(yielded(f.source.look(ConfigLook::reload, f.now + 1s)) == "nothing");
		REQUIRE(f.source.nextWake());
		f.now = *f.source.nextWake();
		CHECK(f.look(ConfigLook::ifDue) == "absent");
	}
	SECTION("it comes back within it: straight to the new text")
	{
		std::filesystem::remove(f.file);
		CHECK(f.settled() == "nothing");
		f.now += 1s;
		writeAtomically(f.file, "c");
		CHECK(f.settled() == "text:c");
		f.now += ConfigSource::kAbsentGrace;
		CHECK(f.look(ConfigLook::ifDue) == "nothing");
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

TEST_CASE("config source: a file open for writing is not read before its window, and read at its close")
{
	SourceFixture f("a");
	{
		std::ofstream writer(f.file, std::ios::trunc);
		writer << "half" << std::flush;
		f.source.onWatchEvents(f.now);
		CHECK(f.look(ConfigLook::reload) == "nothing"); // the lease sees the writer
		REQUIRE(f.source.nextWake());
		CHECK(*f.source.nextWake() == f.now + ConfigSource::kWriterQuietWindow);
		f.now += ConfigSource::kWriterQuietWindow - 1ms;
		CHECK(f.look(ConfigLook::ifDue) == "nothing");
		CHECK(f.look(ConfigLook::reload) == "nothing");
		writer << " and whole";
	}
	// The close is a change like any other: read at once, under the lease.
	CHECK(f.settled() == "text:half and whole");
	CHECK_FALSE(f.source.nextWake());
}

TEST_CASE("config source: a file held open for writing and left alone is read after the quiet window")
{
	SourceFixture f("a");
	// `exec 3>>config` in a shell: open for writing, nothing written, never closed.
	UniqueFd holder(open(f.file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
	REQUIRE(holder.isValid());
	// The held file is what is in force: nothing to wait for, no window.
	CHECK(f.look(ConfigLook::reload) == "nothing");
	CHECK_FALSE(f.source.nextWake());

	// Edited in place by someone else while it stays held: the change is seen, and read
	// once the window shows it unchanged.
	std::ofstream(f.file, std::ios::trunc) << "b";
	CHECK(f.settled() == "nothing");
	const auto windowEnd = f.source.nextWake();
	REQUIRE(windowEnd);
	CHECK(*windowEnd == f.now + ConfigSource::kWriterQuietWindow);
	f.now = *windowEnd - 1ms;
	CHECK(f.look(ConfigLook::ifDue) == "nothing");
	f.now = *windowEnd;
	CHECK(f.look(ConfigLook::ifDue) == "text:b");
	CHECK_FALSE(f.source.nextWake());
	CHECK(f.look(ConfigLook::reload) == "nothing");
}

TEST_CASE("config source: held open from the start, the file is read after the window (no wait without a bound)")
{
	ScratchDir dir;
	const auto file = dir.path / "config";
	writeAtomically(file, "a");
	UniqueFd holder(open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
	REQUIRE(holder.isValid());
	ConfigSource source = ConfigSource::open(ConfigLocation::file(file.string()));
	const Clock::time_point start = Clock::now();
	CHECK(yielded(source.look(ConfigLook::reload, start)) == "nothing");
	// A deadline the loop wakes for, not "when the writer closes it".
	REQUIRE(source.nextWake());
	CHECK(*source.nextWake() == start + ConfigSource::kWriterQuietWindow);
	CHECK(yielded(source.look(ConfigLook::ifDue, *source.nextWake())) == "text:a");
}

TEST_CASE("config source: a writer that truncates and writes slowly is never read half-way")
{
	SourceFixture f("nonMasqueradeCIDRs: [192.0.2.0/24, 198.51.100.0/24]");
	const std::string whole = "nonMasqueradeCIDRs:\n- 192.0.2.0/24\n- 198.51.100.0/24\n";
	std::ofstream writer(f.file, std::ios::trunc);
	f.source.onWatchEvents(f.now);
	// A byte per step, each step a whole window later: every read shows a change. The
	// prefixes include valid shorter lists ("- 192.0.2.0/24\n"): none may come out.
	for (size_t written = 0; written < whole.size(); written++) {
		writer << whole[written] << std::flush;
		f.source.onWatchEvents(f.now);
		const auto wake = f.source.nextWake();
		REQUIRE(wake);
		f.now = std::max(f.now, *wake);
		INFO("after " << written + 1 << " bytes");
		REQUIRE(f.look(ConfigLook::ifDue) == "nothing");
	}
	// Done writing, still held: the window started by the read of the last byte ends
	// with the file unchanged, and the whole file is read.
	REQUIRE(f.source.nextWake());
	f.now = *f.source.nextWake() - 1ms;
	CHECK(f.look(ConfigLook::ifDue) == "nothing");
	f.now += 1ms;
	CHECK(f.look(ConfigLook::ifDue) == "text:" + whole);
}

TEST_CASE("config source: no deadline stays in the past (the loop would spin)")
{
	SourceFixture f("a");
	std::filesystem::remove(f.file);
	REQUIRE(f.settled() == "nothing"); // grace running
	{
		// Back, but still being written when the grace time runs out.
		std::ofstream writer(f.file);
		writer << "b" << std::flush;
		f.source.onWatchEvents(f.now);
		f.now += ConfigSource::kAbsentGrace;
		CHECK(f.look(ConfigLook::ifDue) == "nothing");
		const auto wake = f.source.nextWake();
		CHECK((!wake || *wake > f.now));
	}
	CHECK(f.settled() == "text:b");
}

TEST_CASE("config source: after a read error, the same content is new, and the read is retried")
{
	SourceFixture f("a");

	// A FIFO renamed over the file: an error, and a retry scheduled without any event.
	const auto fifo = f.dir.path / "fifo";
	REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
	std::filesystem::rename(fifo, f.file);
	f.source.onWatchEvents(f.now);
	CHECK_THAT(f.look(ConfigLook::ifDue), Catch::StartsWith("error:") && Catch::Contains("FIFO"));
	REQUIRE(f.source.nextWake());
	CHECK(*f.source.nextWake() == f.now + ConfigSource::kReadRetryInitial);
	f.now += ConfigSource::kReadRetryInitial;
	CHECK_THAT(f.look(ConfigLook::ifDue), Catch::StartsWith("error:"));
	REQUIRE(f.source.nextWake());
	CHECK(*f.source.nextWake() == f.now + 2 * ConfigSource::kReadRetryInitial); // backing off

	// The same bytes as before the error are delivered again: the error is over.
	writeAtomically(f.file, "a");
	f.source.onWatchEvents(f.now);
	CHECK(f.look(ConfigLook::ifDue) == "text:a");
	CHECK_FALSE(f.source.nextWake());
	CHECK(f.look(ConfigLook::reload) == "nothing");
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

	SourceFixture f(a);
	writeAtomically(f.file, *b);
	CHECK(f.look(ConfigLook::reload) == "text:" + *b);
}

TEST_CASE("config source, --config-dir: adding, editing and removing one of the files")
{
	SourceFixture f(SourceFixture::Watch::directory);
	writeAtomically(f.dir.path / "ip-masq-b", "2");
	CHECK(f.look(ConfigLook::reload) == "files:ip-masq-b=2");

	writeAtomically(f.dir.path / "ip-masq-a", "1");
	CHECK(f.settled() == "files:ip-masq-a=1,ip-masq-b=2");
	std::ofstream(f.dir.path / "ip-masq-b", std::ios::trunc) << "3"; // in place
	CHECK(f.settled() == "files:ip-masq-a=1,ip-masq-b=3");
	// One of two removed: at once, with no grace time (the other still says what holds).
	std::filesystem::remove(f.dir.path / "ip-masq-a");
	CHECK(f.settled() == "files:ip-masq-b=3");
	// Other names do not matter, and wake nothing.
	writeAtomically(f.dir.path / "unrelated", "x");
	writeAtomically(f.dir.path / ".ip-masq-b.swp", "x");
	f.source.onWatchEvents(f.now);
	CHECK_FALSE(f.source.nextWake());
	// The last one removed: absent once the grace time has passed, as for --config.
	std::filesystem::remove(f.dir.path / "ip-masq-b");
	CHECK(f.settled() == "nothing");
	REQUIRE(f.source.nextWake());
	f.now = *f.source.nextWake();
	CHECK(f.look(ConfigLook::ifDue) == "absent");
}

TEST_CASE("config source, --config-dir: a ConfigMap ..data swap and a key added to it")
{
	SourceFixture f(SourceFixture::Watch::directory);
	const auto cd = [&](const std::string &command) {
		REQUIRE(std::system(("cd " + f.dir.path.string() + " && " + command).c_str()) == 0);
	};
	cd("mkdir ..2026_11_23_a && printf 1 > ..2026_11_23_a/ip-masq-a && ln -s ..2026_11_23_a ..data "
	   "&& ln -s ..data/ip-masq-a ip-masq-a");
	CHECK(f.look(ConfigLook::reload) == "files:ip-masq-a=1");

	// The atomic writer's swap: only "..data" changes in the watched directory.
	cd("mkdir ..2026_11_23_b && printf 2 > ..2026_11_23_b/ip-masq-a && "
	   "ln -s ..2026_11_23_b ..data_tmp && mv -T ..data_tmp ..data && rm -rf ..2026_11_23_a");
	CHECK(f.settled() == "files:ip-masq-a=2");

	// A second ConfigMap's key appears in the projected volume.
	cd("mkdir ..2026_11_23_c && cp ..2026_11_23_b/ip-masq-a ..2026_11_23_c/ && "
	   "printf 3 > ..2026_11_23_c/ip-masq-b && ln -s ..2026_11_23_c ..data_tmp && "
	   "mv -T ..data_tmp ..data && ln -s ..data/ip-masq-b ip-masq-b && rm -rf ..2026_11_23_b");
	CHECK(f.settled() == "files:ip-masq-a=2,ip-masq-b=3");
	// The resync finds nothing new: same files, same stamps.
	CHECK(f.look(ConfigLook::resync) == "nothing");
}

TEST_CASE("config source, --config-dir: a file open for writing holds the whole read back")
{
	SourceFixture f(SourceFixture::Watch::directory);
	writeAtomically(f.dir.path / "ip-masq-a", "1");
	writeAtomically(f.dir.path / "ip-masq-b", "2");
	REQUIRE(f.look(ConfigLook::reload) == "files:ip-masq-a=1,ip-masq-b=2");
	{
		std::ofstream writer(f.dir.path / "ip-masq-b", std::ios::trunc);
		writer << "half" << std::flush;
		f.source.onWatchEvents(f.now);
		CHECK(f.look(ConfigLook::reload) == "nothing");
		f.now += ConfigSource::kWriterQuietWindow - 1ms;
		CHECK(f.look(ConfigLook::ifDue) == "nothing");
		writer << " and whole";
	}
	CHECK(f.settled() == "files:ip-masq-a=1,ip-masq-b=half and whole");
}

TEST_CASE("config source, --config-dir: one file held open for writing, the directory is read after the window")
{
	SourceFixture f(SourceFixture::Watch::directory);
	writeAtomically(f.dir.path / "ip-masq-a", "1");
	writeAtomically(f.dir.path / "ip-masq-b", "2");
	UniqueFd holder(open((f.dir.path / "ip-masq-b").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
	REQUIRE(holder.isValid());
	CHECK(f.look(ConfigLook::reload) == "nothing");
	REQUIRE(f.source.nextWake());
	f.now = *f.source.nextWake();
	CHECK(f.look(ConfigLook::ifDue) == "files:ip-masq-a=1,ip-masq-b=2");
	// Another file changing meanwhile restarts the window: the whole directory is one read.
	writeAtomically(f.dir.path / "ip-masq-a", "3");
	CHECK(f.settled() == "nothing");
	REQUIRE(f.source.nextWake());
	const auto windowEnd = *f.source.nextWake();
	writeAtomically(f.dir.path / "ip-masq-a", "4");
	f.source.onWatchEvents(f.now);
	f.now += ConfigSource::kSettle;
	CHECK(f.look(ConfigLook::ifDue) == "nothing");
	REQUIRE(f.source.nextWake());
	CHECK(*f.source.nextWake() > windowEnd); // started again
	f.now = *f.source.nextWake();
	CHECK(f.look(ConfigLook::ifDue) == "files:ip-masq-a=4,ip-masq-b=2");
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
	source.onWatchEvents(now);
	now += ConfigSource::kSettle;
	CHECK(yieldedFiles(source.look(ConfigLook::ifDue, now)) == "files:ip-masq-x=1");
	CHECK_FALSE(source.takeWatchWarning());
}
