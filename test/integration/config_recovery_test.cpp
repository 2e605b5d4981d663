// SPDX-License-Identifier: Apache-2.0
// The config source after a passing fault, as a careless operator makes one: a read error
// that ends with the same content as before is over (readiness back within 1 s, without
// SIGHUP); content built to collide with std::hash is still new; a device or a FIFO named
// as the config is never opened.
#include <catch2/catch.hpp>

#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "../common/std_hash_collision.h"
#include "agent_process.h"
#include "connection_flood.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;
using ipmasq::UniqueFd;

namespace {

constexpr uint16_t kPort = 10263;
const std::string kHealthAddr = fmt::format("--health-addr=127.0.0.1:{}", kPort);
const std::string kConfig = "resyncInterval: 1h\nnonMasqueradeCIDRs: [192.0.2.0/24]\n";

int readyz()
{
	return probe(kPort, "/readyz").status;
}

std::string healthyMetric()
{
	const std::string text = curlGet(fmt::format("http://127.0.0.1:{}/metrics", kPort));
	const size_t at = text.find("\nip_masq_agent_healthy ");
	return at == std::string::npos ? "" : text.substr(at + 23, 1);
}

void requireWithin(const std::function<bool()> &condition, std::chrono::milliseconds timeout,
		   const AgentProcess &agent, const std::string &what)
{
	const auto took = waitFor(condition, timeout);
	INFO(what << ": not within " << timeout.count() << " ms, a bound only a hang misses\n/readyz: " << curlGet(fmt::format("http://127.0.0.1:{}/readyz", kPort))
		  << "\nagent log:\n" << agent.log());
	REQUIRE(took);
	WARN(what << ": " << took->count() << " ms");
}

// A fresh agent, its config kConfig as file `name` of a directory of its own (with
// `configDir`, that directory is --config-dir), becomes unready through `breakIt`, and `repair` brings back the content it had before: ready
// again on the read retry's own timer (at most 5 s after the repair; the resync is an hour
// away), healthy in /metrics, without a SIGHUP. Its log names the error
// (`logged`), and the table stays in force throughout.
void requireRecovery(const std::string &name, bool configDir, const AgentLaunch &launch,
		     const std::function<void(const TempDir &)> &breakIt,
		     const std::function<void(const TempDir &)> &repair, const std::string &what,
		     const std::string &logged)
{
	TempDir dir;
	dir.write(name, kConfig);
	AgentProcess agent({configDir ? "--config-dir=" + dir.path() : "--config=" + dir.file(name),
			    kHealthAddr},
			   launch);
	requireWithin([] { return readyz() == 200; }, 5s, agent, "ready");
	breakIt(dir);
	requireWithin([] { return readyz() == 503; }, 5s, agent, what + ": not ready");
	CHECK(healthyMetric() == "0");
	CHECK(agentTableHas("192.0.2.0/24"));
	repair(dir);
	// The retry's delay grows while the file stays broken, up to 5 s: 30 s only catches a hang.
	requireWithin([] { return readyz() == 200; }, 30s, agent, what + ": ready again");
	CHECK(healthyMetric() == "1");
	CHECK(agent.running());
	CHECK_THAT(agent.log(), Catch::Contains(logged));
	CHECK(agent.stop(SIGTERM) == 0);
	deleteAgentTable();
}

} // namespace

TEST_CASE("mode 000 for a moment, with only CAP_NET_ADMIN: ready again once readable")
{
	// Root without CAP_DAC_OVERRIDE: the file's mode applies to the agent too.
	const AgentLaunch onlyNetAdmin{{}, {"setpriv", "--bounding-set=-all,+net_admin",
					    "--inh-caps=-all", "--"}};
	requireRecovery(
		"config", false, onlyNetAdmin,
		[](const TempDir &dir) { REQUIRE(chmod(dir.file("config").c_str(), 0) == 0); },
		[](const TempDir &dir) { REQUIRE(chmod(dir.file("config").c_str(), 0644) == 0); },
		"mode 000", "Permission denied");
}

TEST_CASE("a FIFO renamed over the config, then the same file back: ready again")
{
	requireRecovery(
		"config", false, {},
		[](const TempDir &dir) {
			REQUIRE(mkfifo(dir.file("fifo").c_str(), 0600) == 0);
			REQUIRE(std::rename(dir.file("fifo").c_str(), dir.file("config").c_str()) == 0);
		},
		[](const TempDir &dir) { dir.write("config", kConfig); }, "a FIFO in its place", "FIFO");
}

TEST_CASE("a config grown past 16 MiB, then cut back to what it was: ready again")
{
	requireRecovery(
		"config", false, {},
		[](const TempDir &dir) {
			dir.overwrite("config", kConfig + "# " + std::string(17 << 20, 'x') + "\n");
		},
		[](const TempDir &dir) { dir.overwrite("config", kConfig); }, "a file past 16 MiB",
		"16 MiB");
}

TEST_CASE("--config-dir: 5,000 extra files for a moment, then removed: ready again")
{
	requireRecovery(
		"ip-masq-agent", true, {},
		[](const TempDir &dir) {
			runOrFail(fmt::format("cd '{}' && touch $(seq -f ip-masq-extra-%g 5000)", dir.path()));
		},
		[](const TempDir &dir) { runOrFail(fmt::format("cd '{}' && rm -f ip-masq-extra-*", dir.path())); },
		"5,000 extra files", "more than 64 files");
}

TEST_CASE("two configs of equal size and equal std::hash are both applied")
{
	// masqLinkLocal: true and false, the same length; the second's comment holds the 8
	// bytes that give it the first's std::hash (std_hash_collision.h). Printable bytes
	// only: the first's comment is varied until the second's is printable too.
	const auto printable = [](char c) { return c >= 0x20 && c < 0x7f; };
	const std::string tail = "\nresyncInterval: 1h\n";
	std::string withTrue, withFalse;
	for (int attempt = 0; attempt < 1'000'000 && withFalse.empty(); attempt++) {
		withTrue = "masqLinkLocal: true \n#  " + fmt::format("{:08}", attempt) + tail;
		const std::string variant = "masqLinkLocal: false\n#  ........" + tail;
		if (auto matched = matchStdHash(withTrue, variant, 24, printable))
			withFalse = *matched;
	}
	REQUIRE_FALSE(withFalse.empty());
	REQUIRE(withTrue.size() == withFalse.size());
	REQUIRE(std::hash<std::string>{}(withTrue) == std::hash<std::string>{}(withFalse));
	INFO("masqLinkLocal: false, with the comment that collides:\n" << withFalse);

	TempDir dir;
	dir.write("config", withTrue);
	AgentProcess agent({"--config=" + dir.file("config")});
	requireWithin([] { return agentTableHas("10.0.0.0/8"); }, 5s, agent,
		      "masqLinkLocal: true applied");
	REQUIRE_FALSE(agentTableHas("169.254.0.0/16"));

	dir.write("config", withFalse);
	requireWithin([] { return agentTableHas("169.254.0.0/16"); }, 5s,
		      agent, "masqLinkLocal: false (equal std::hash) applied");
	dir.write("config", withTrue);
	requireWithin([] { return !agentTableHas("169.254.0.0/16"); }, 5s,
		      agent, "masqLinkLocal: true again");
	CHECK(agent.stop(SIGTERM) == 0);
	deleteAgentTable();
}

namespace {

// Watches paths for IN_OPEN: whether anyone opened one of them.
class OpenWatch
{
public:
	OpenWatch() : fd_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) { REQUIRE(fd_.isValid()); }
	void add(const std::string &path)
	{
		REQUIRE(inotify_add_watch(fd_.get(), path.c_str(), IN_OPEN) >= 0);
	}
	bool opened() const
	{
		alignas(inotify_event) char buf[4096];
		return read(fd_.get(), buf, sizeof(buf)) > 0;
	}

private:
	UniqueFd fd_;
};

} // namespace

TEST_CASE("a FIFO or a device named as the config is never opened, at start, reload or retry")
{
	TempDir dir;
	REQUIRE(mkfifo(dir.file("fifo").c_str(), 0600) == 0);
	// /dev/null's numbers: opening it would be harmless, but any open shows.
	REQUIRE(mknod(dir.file("device").c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0);
	REQUIRE(mkfifo(dir.file("ip-masq-fifo").c_str(), 0600) == 0);
	OpenWatch watch;
	for (const char *name : {"fifo", "device", "ip-masq-fifo"})
		watch.add(dir.file(name));

	for (const std::string &flag : std::vector<std::string>{"--config=" + dir.file("fifo"), "--config=" + dir.file("device"),
				       "--config-dir=" + dir.path()}) {
		AgentProcess agent({flag, "--health-addr="});
		// The start (its first read done, as the log says: refused, or for the directory
		// no file of the config, so the defaults; its signals are handled by then), a
		// SIGHUP (seen in the log), and the retries after the read error (the first ones
		// come within a second, this sleep).
		requireWithin([&] {
			const std::string log = agent.log();
			return log.find("exists to adopt") != std::string::npos ||
			       log.find("applied table") != std::string::npos;
		}, kChangeSeen, agent, flag + ": the first read done");
		REQUIRE(agent.running());
		kill(agent.pid(), SIGHUP);
		requireWithin([&] { return agent.log().find("SIGHUP") != std::string::npos; }, kChangeSeen,
			      agent, flag + ": SIGHUP handled");
		std::this_thread::sleep_for(1500ms);
		INFO(flag << "\nagent log:\n" << agent.log());
		if (flag.find("--config=") == 0)
			CHECK_THAT(agent.log(), Catch::Contains("not a regular file"));
		CHECK_FALSE(watch.opened());
		CHECK(agent.stop(SIGTERM) == 0);
	}
	deleteAgentTable();
}
