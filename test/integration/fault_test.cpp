// SPDX-License-Identifier: Apache-2.0
// Faults: kill -9 in the middle of an apply leaves exactly the old table or exactly the
// new one; a netlink request the kernel never answers times out, and the socket recovers;
// memory that runs out at any allocation of a commit is an error, never an abort.
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <new>
#include <random>
#include <regex>
#include <thread>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include "../common/ruleset_cases.h"
#include "agent_process.h"
#include "backend_support.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/netlink/monitor.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/nft/guarded_backend.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq;
using namespace ipmasq::test;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kCidrs = 100000;
constexpr int kKills = 50;

// 100,000 /32s, two apart, so that none of them merge: version 0 on the even
// addresses of 10.0.0.0/14, version 1 on the odd ones. No element is in both.
std::string configText(int version)
{
	std::string text = "cidrLimit: 100000\nnonMasqueradeCIDRs:\n";
	text.reserve(static_cast<size_t>(kCidrs) * 22);
	for (int i = 0; i < kCidrs; i++)
		text += fmt::format("- 10.{}.{}.{}/32\n", i >> 15, (i >> 7) & 255, (i & 127) * 2 + version);
	return text;
}

double secondsSince(Clock::time_point start)
{
	return std::chrono::duration<double>(Clock::now() - start).count();
}

// The seed: IPMASQ_FAULT_SEED to replay a run, else a fresh one.
uint64_t faultSeed()
{
	if (const char *given = std::getenv("IPMASQ_FAULT_SEED"))
		return std::strtoull(given, nullptr, 10);
	return std::random_device{}();
}

} // namespace

TEST_CASE("kill -9 during --once leaves exactly the old table or exactly the new one")
{
	run("nft delete table inet ip-masq-agent 2>/dev/null");
	TempDir dir;
	const std::string configs[2] = {dir.file("v0.yaml"), dir.file("v1.yaml")};
	std::vector<Ruleset> versions;
	for (int v = 0; v < 2; v++) {
		const std::string text = configText(v);
		dir.write(v == 0 ? "v0.yaml" : "v1.yaml", text);
		// What the agent builds from that file with its default flags.
		auto ruleset = buildCase(RulesetCase{fmt::format("v{}", v), text, {}});
		INFO((ruleset ? "" : ruleset.error().message));
		REQUIRE(ruleset);
		REQUIRE(ruleset->findSet(Family::ipv4)->elements.size() == kCidrs + 1); // + link-local
		versions.push_back(std::move(*ruleset));
	}
	auto backend = NetlinkBackend::open();
	INFO((backend ? "" : backend.error().message));
	REQUIRE(backend);
	// Whether the kernel holds exactly version `v`: table, chains, rules, every element.
	const auto holds = [&](int v) {
		auto same = (*backend)->matches(versions[static_cast<size_t>(v)]);
		INFO((same ? "" : same.error().message));
		REQUIRE(same);
		return *same;
	};
	// Which version the kernel holds: 0 or 1, or -1 for anything else (no table, a
	// mix, a partial set). `likely` is looked at first.
	const auto held = [&](int likely) -> int {
		if (holds(likely))
			return likely;
		return holds(1 - likely) ? 1 - likely : -1;
	};
	const auto generation = [&] {
		auto id = (*backend)->generation();
		INFO((id ? "" : id.error().message));
		REQUIRE(id);
		return *id;
	};

	// The old table, then one complete apply of the new one over it, timed.
	{
		AgentProcess once({"--once", "--config=" + configs[0]});
		INFO(once.log());
		REQUIRE(once.wait(60s) == 0);
	}
	REQUIRE(held(0) == 0);
	const auto started = Clock::now();
	double applyMs = 0;
	double commitSeconds = 0; // when the generation moved: the commit, seen from here
	{
		const uint32_t before = generation();
		AgentProcess once({"--once", "--config=" + configs[1]});
		REQUIRE(waitFor([&] {
			if (commitSeconds == 0 && generation() != before)
				commitSeconds = secondsSince(started);
			return !once.running();
		}, 60s));
		REQUIRE(once.wait(0s) == 0);
		REQUIRE(commitSeconds > 0);
		std::smatch m;
		const std::string log = once.log();
		if (std::regex_search(log, m, std::regex(R"(applied table .* in ([0-9.]+) ms)")))
			applyMs = std::stod(m[1]);
	}
	const double runSeconds = secondsSince(started);
	const auto checkStart = Clock::now();
	REQUIRE(held(1) == 1);
	const double checkSeconds = secondsSince(checkStart);
	int current = 1;

	// Kill at a random moment of a run: half of the kills anywhere within the time one
	// run took, half around its commit (most of a run is spent parsing the config).
	const uint64_t seed = faultSeed();
	std::printf("fault loop: seed %llu (IPMASQ_FAULT_SEED=%llu replays it); one run of --once "
		    "takes %.3f s, commits after %.3f s, its apply takes %.1f ms; reading the "
		    "table back takes %.3f s\n",
		    static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
		    runSeconds, commitSeconds, applyMs, checkSeconds);
	std::mt19937_64 random(seed);
	const double applySeconds = std::max(applyMs / 1000, 0.02);
	std::uniform_real_distribution<double> anywhere(0, runSeconds);
	std::uniform_real_distribution<double> aroundCommit(
		std::max(0.0, commitSeconds - 2 * applySeconds), commitSeconds + applySeconds);

	int keptOld = 0, tookNew = 0, finished = 0, commits = 0;
	const auto loopStart = Clock::now();
	for (int round = 0; round < kKills; round++) {
		const int next = 1 - current;
		const double delay = round % 2 == 0 ? anywhere(random) : aroundCommit(random);
		const uint32_t generationBefore = generation();
		AgentProcess once({"--once", "--config=" + configs[next]});
		// Sleep (in steps of a few ms), unless the run ends first.
		waitFor([&] { return !once.running(); },
			std::chrono::duration_cast<std::chrono::milliseconds>(
				std::chrono::duration<double>(delay)));
		const int status = once.stop(SIGKILL, 30s);
		REQUIRE(status >= 0);
		// Nobody committed since the kernel was seen to hold `current` exactly: it
		// still does. Otherwise read the whole table.
		const bool committed = generation() != generationBefore;
		commits += committed;
		const int now = committed ? held(next) : current;
		INFO(fmt::format("kill {} of {} after {:.3f} s (seed {}): the kernel held version {} "
				 "before, --once applied version {}, exit status {}; agent log:\n{}",
				 round + 1, kKills, delay, seed, current, next, status, once.log()));
		REQUIRE(now != -1); // neither version: a partial or mixed table, or none
		if (status == 0)
			finished++;
		else if (now == current)
			keptOld++;
		else
			tookNew++;
		// A run that exited 0 applied its version; one that was killed applied it or not.
		if (status == 0)
			REQUIRE(now == next);
		current = now;
	}
	std::printf("fault loop: %d kills in %.1f s: %d left the old table, %d the new one, %d "
		    "runs had finished; %d runs had committed\n",
		    kKills, secondsSince(loopStart), keptOld, tookNew, finished, commits);
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}

namespace {

constexpr uint16_t kGetGen = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN;

// The ruleset generation, read on `socket`.
Status readGeneration(netlink::Socket &socket, int *replies)
{
	return socket.query(kGetGen, AF_UNSPEC, 0, nullptr, [replies](const nlmsghdr *nlh) -> Status {
		if (nlh->nlmsg_type != ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN))
			return fail(fmt::format("unexpected reply type {:#x}", nlh->nlmsg_type));
		(*replies)++;
		return {};
	});
}

} // namespace

TEST_CASE("a netlink request the kernel never answers times out, and the socket stays usable")
{
	auto socket = netlink::Socket::open();
	REQUIRE(socket);
	REQUIRE(socket->setReplyTimeout(200ms));
	// nfnetlink silently drops a datagram shorter than a netlink header: the kernel
	// never answers it, as a stuck kernel would not.
	const auto started = Clock::now();
	Status unanswered = socket->query(kGetGen, AF_UNSPEC, 0,
					  [](nlmsghdr *nlh) { nlh->nlmsg_len = NLMSG_HDRLEN - 1; },
					  [](const nlmsghdr *) -> Status { return {}; });
	const double waited = secondsSince(started);
	REQUIRE_FALSE(unanswered);
	CHECK(unanswered.error().errnum == ETIMEDOUT);
	CHECK(unanswered.error().message == "nf_tables did not answer within 0.2 s");
	CHECK(waited >= 0.15);
	CHECK(waited < 5);

	// The same socket answers the next request.
	int replies = 0;
	Status next = readGeneration(*socket, &replies);
	INFO((next ? "" : next.error().message));
	CHECK(next);
	CHECK(replies == 1);

	// A late answer to an abandoned exchange, queued ahead of the next request's: the
	// request sent from inside the builder goes out after discardPending() and before
	// the query's own, with a sequence number the query does not use.
	replies = 0;
	next = socket->query(
		kGetGen, AF_UNSPEC, 0,
		[&](nlmsghdr *) {
			struct {
				nlmsghdr header;
				nfgenmsg body;
			} stale{};
			stale.header.nlmsg_len = sizeof(stale);
			stale.header.nlmsg_type = kGetGen;
			stale.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
			stale.header.nlmsg_seq = socket->sequence() + 1000;
			stale.body.nfgen_family = AF_UNSPEC;
			stale.body.version = NFNETLINK_V0;
			sockaddr_nl kernel{};
			kernel.nl_family = AF_NETLINK;
			REQUIRE(sendto(socket->fd(), &stale, sizeof(stale), 0,
				       reinterpret_cast<sockaddr *>(&kernel), sizeof(kernel)) ==
				sizeof(stale));
		},
		[&](const nlmsghdr *) -> Status {
			replies++;
			return {};
		});
	INFO((next ? "" : next.error().message));
	CHECK(next);
	CHECK(replies == 1);
}

namespace {

// From the armed count on, every operator new of this process fails until disarmed (-1), as
// once a process reaches its memory limit. Only the children of the test below arm it.
std::atomic<long> gAllocationsLeft{-1};

} // namespace

// Replaces operator new for the whole test executable (every file of its suite is linked
// into one, test/integration/meson.build): it only passes through to malloc unless this
// file's tests arm it, and each test runs in a process of its own.
void *operator new(std::size_t size)
{
	const long left = gAllocationsLeft.load(std::memory_order_relaxed);
	if (left == 0)
		throw std::bad_alloc();
	if (left > 0)
		gAllocationsLeft.store(left - 1, std::memory_order_relaxed);
	if (void *memory = std::malloc(size ? size : 1))
		return memory;
	throw std::bad_alloc();
}

void operator delete(void *memory) noexcept
{
	std::free(memory);
}

void operator delete(void *memory, std::size_t) noexcept
{
	std::free(memory);
}

namespace {

// How a child's element update ended (its exit status).
enum UpdateOutcome { updated = 0, outOfMemory = 1, setupFailed = 2, monitorDeaf = 3, otherError = 4 };

// In a child: `diff` sent as the daemon sends it (through GuardedBackend, the change monitor
// out of its group during the commit) with every allocation from the `allocations`-th on
// failing, while joining the group again fails (the monitors' fault hook: `fault` exists).
// Afterwards the monitor must be closed (the daemon then opens it again) or still hear
// commits: one left out of its group would never report a change again.
UpdateOutcome updateRunningOutOfMemory(long allocations, const ElementDiff &diff, const std::string &fault)
{
	auto backend = NetlinkBackend::open();
	auto monitor = NftablesMonitor::open();
	if (!backend || !monitor)
		return setupFailed;
	auto generation = (*backend)->generation();
	if (!generation)
		return setupFailed;
	(*backend)->quietDuringCommits(&*monitor);
	netlink::failMonitorsWhileFileExists(fault);
	GuardedBackend guarded(**backend);
	gAllocationsLeft = allocations;
	auto result = guarded.updateElements(kDefaultTableName, diff, *generation);
	gAllocationsLeft = -1;
	netlink::failMonitorsWhileFileExists("");
	if (monitor->isOpen()) {
		if (std::system("nft add table ip oom-probe && nft delete table ip oom-probe") != 0)
			return setupFailed;
		pollfd ready{monitor->fd(), POLLIN, 0};
		auto heard = ::poll(&ready, 1, 10000) == 1 ? monitor->drain() : Result<bool>(false);
		if (!heard || !*heard)
			return monitorDeaf;
	}
	if (result)
		return updated;
	return result.error().errnum == ENOMEM ? outOfMemory : otherError;
}

} // namespace

TEST_CASE("memory that runs out at any allocation of an element update: an error, never an abort, "
	  "and the change monitor closed or hearing")
{
	auto backend = freshBackend();
	Config config;
	config.nonMasqueradeCIDRs = {parsePrefix("198.51.100.0/24").value()};
	const Ruleset before = buildRuleset(config, {});
	config.nonMasqueradeCIDRs.push_back(parsePrefix("203.0.113.0/24").value());
	const auto diff = diffElements(before, buildRuleset(config, {}));
	REQUIRE(diff);
	TempDir dir;
	dir.write("monitors-fail", "");
	// Allocation by allocation, each in a child of its own (an abort must not end the test)
	// from the same table, until one update needs no more allocations than it was given.
	constexpr long kMostAllocations = 5000;
	long allocations = 0;
	for (; allocations < kMostAllocations; allocations++) {
		REQUIRE(backend->apply(before));
		const pid_t child = fork();
		REQUIRE(child >= 0);
		if (child == 0)
			_exit(updateRunningOutOfMemory(allocations, *diff, dir.file("monitors-fail")));
		int status = 0;
		REQUIRE(waitpid(child, &status, 0) == child);
		INFO("out of memory from allocation " << allocations << " on; wait status " << status);
		REQUIRE(WIFEXITED(status));
		const int outcome = WEXITSTATUS(status);
		REQUIRE(outcome != setupFailed);
		CHECK(outcome != monitorDeaf);
		CHECK(outcome != otherError);
		if (outcome == updated)
			break;
	}
	CHECK(allocations < kMostAllocations); // the update went through once memory sufficed
	CHECK(allocations > 0);
	WARN("an element update took " << allocations << " allocations");
}
