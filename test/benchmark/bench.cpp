// SPDX-License-Identifier: Apache-2.0
// Performance benchmark: apply time, no-op resync CPU, config-swap latency and the daemon's
// peak RSS for 10 to 100,000 non-masquerade CIDRs, all inside a private network namespace;
// and the config loader's time and peak RSS up to the largest file it accepts.
//
// Run it with `meson test -C <builddir> --benchmark --verbose`, or run the executable
// (`--quick`: only the two smallest sizes). It needs root (CAP_SYS_ADMIN for the
// namespace, CAP_NET_ADMIN inside it) and exits 77 ("skipped") without.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <poll.h>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/config/config_source.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/daemon/conflict_check.h"
#include "ip-masq-agent/node/address_monitor.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/netlink/monitor.h"
#include "ip-masq-agent/nft/objects.h"
#include "ip-masq-agent/cli/options.h"
#include "ip-masq-agent/diagnose/conflicts.h"
#include "ip-masq-agent/diagnose/samples.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/agent_table.h"
#include "ip-masq-agent/config/policy.h"
#include "ip-masq-agent/daemon/reconciler.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "address_following.h"
#include "agent_process.h"
#include "machine.h"
#include "netns.h"
#include "responsiveness.h"

#ifndef BENCH_BUILD_TYPE
#define BENCH_BUILD_TYPE "unknown"
#endif

using namespace ipmasq;
using ipmasq::bench::cpuModel;
using ipmasq::bench::loadAverage;

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::duration<double, std::milli>;

// The whole run is bounded: a watchdog ends it (and the agent) after this long.
constexpr unsigned kWatchdogSeconds = 600;
// Bounds for waiting on the agent: start-up or one swap.
constexpr auto kLiveTimeout = std::chrono::seconds(60);

// --- Cleanup on every exit path -------------------------------------------------------
//
// The agent child is killed by: its destructor, exit() (atexit), a terminating signal
// (handler), and, if this process dies any other way, the kernel (PR_SET_PDEATHSIG).

volatile pid_t g_agentPid = -1;
std::string g_tmpDir;
// The scratch directory and every file the benchmark puts in it, as C strings made
// before any signal can arrive: the signal handler may only unlink() and rmdir().
constexpr const char *kScratchFiles[] = {"config", ".config.new", "agent.log", "upstream.rules"};
char g_scratchPaths[std::size(kScratchFiles) + 1][256];

void killAgentNow()
{
	const pid_t pid = g_agentPid;
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, nullptr, 0);
		g_agentPid = -1;
	}
}

void cleanupAtExit()
{
	killAgentNow();
	if (!g_tmpDir.empty()) {
		std::error_code ec;
		std::filesystem::remove_all(g_tmpDir, ec);
	}
}

extern "C" void onTerminatingSignal(int sig)
{
	// Async-signal-safe only: kill the child and leave. The namespace (and with it any
	// table we made) disappears with the last process in it.
	const pid_t pid = g_agentPid;
	if (pid > 0)
		kill(pid, SIGKILL);
	for (size_t i = 0; i < std::size(kScratchFiles); i++)
		if (g_scratchPaths[i][0] != '\0')
			unlink(g_scratchPaths[i]);
	if (g_scratchPaths[std::size(kScratchFiles)][0] != '\0')
		rmdir(g_scratchPaths[std::size(kScratchFiles)]);
	_exit(128 + sig);
}

void installSignalHandlers()
{
	struct sigaction sa {};
	sa.sa_handler = onTerminatingSignal;
	sigemptyset(&sa.sa_mask);
	for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGPIPE})
		sigaction(sig, &sa, nullptr);
	alarm(kWatchdogSeconds);
}

[[noreturn]] void die(const std::string &message)
{
	std::fflush(stdout);
	std::fprintf(stderr, "bench: %s\n", message.c_str());
	std::exit(EXIT_FAILURE); // atexit: the agent is killed, the scratch dir removed
}

template<typename T>
T require(Result<T> result, const std::string &what)
{
	if (!result)
		die(what + ": " + result.error().message);
	return std::move(*result);
}

void require(const Status &status, const std::string &what)
{
	if (!status)
		die(what + ": " + status.error().message);
}

// --- Measuring ------------------------------------------------------------------------

double processCpuMs()
{
	timespec ts {};
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Samples {
	std::vector<double> ms;

	bool empty() const { return ms.empty(); }
	double median() const
	{
		if (ms.empty())
			return 0;
		std::vector<double> v = ms;
		std::sort(v.begin(), v.end());
		const size_t n = v.size();
		return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	}
	double min() const { return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end()); }
	double max() const { return ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()); }
};

// Runs `once` (which returns the milliseconds to record) at least `minRuns` and at most
// `maxRuns` times, stopping early once `budget` has passed: bounded in count and time.
Samples repeat(size_t minRuns, size_t maxRuns, std::chrono::milliseconds budget,
	       const std::function<double()> &once)
{
	Samples out;
	const auto start = Clock::now();
	for (size_t i = 0; i < maxRuns; i++) {
		out.ms.push_back(once());
		if (i + 1 >= minRuns && Clock::now() - start > budget)
			break;
	}
	return out;
}

template<typename F>
double wallMs(F &&f)
{
	const auto start = Clock::now();
	f();
	return Millis(Clock::now() - start).count();
}

// --- The workload ---------------------------------------------------------------------

struct Case {
	size_t cidrs;
	bool mixed; // half IPv4 /24s, half IPv6 /64s, with --enable-ipv6
};

std::string thousands(size_t n)
{
	std::string digits = std::to_string(n), out;
	for (size_t i = 0; i < digits.size(); i++) {
		if (i > 0 && (digits.size() - i) % 3 == 0)
			out += ',';
		out += digits[i];
	}
	return out;
}

std::string caseLabel(const Case &c)
{
	return thousands(c.cidrs) + (c.mixed ? " v4+v6" : "");
}

// Non-mergeable CIDRs: every other /24 (IPv4, from 20.0.0.0) or /64 (IPv6, in
// 2001:db8::/32), so that each one stays an interval of its own. `phase` 1 takes the
// slots in between: a list of the same size with no CIDR in common.
std::vector<std::string> cidrList(const Case &c, unsigned phase)
{
	const size_t v4 = c.mixed ? c.cidrs / 2 : c.cidrs;
	std::vector<std::string> out;
	out.reserve(c.cidrs);
	for (size_t i = 0; i < v4; i++) {
		const uint32_t net = 0x14000000u + ((static_cast<uint32_t>(2 * i) + phase) << 8);
		out.push_back(fmt::format("{}.{}.{}.0/24", net >> 24, (net >> 16) & 0xff,
					  (net >> 8) & 0xff));
	}
	for (size_t i = 0; i < c.cidrs - v4; i++) {
		const uint32_t slot = static_cast<uint32_t>(2 * i) + phase;
		out.push_back(fmt::format("2001:db8:{:x}:{:x}::/64", slot >> 16, slot & 0xffff));
	}
	return out;
}

// The config as an operator writes it: YAML, one CIDR per line, cidrLimit raised.
std::string configText(const std::vector<std::string> &cidrs)
{
	std::string out = "nonMasqueradeCIDRs:\n";
	out.reserve(cidrs.size() * 24 + 64);
	for (const std::string &cidr : cidrs)
		out += "  - " + cidr + "\n";
	out += fmt::format("cidrLimit: {}\nresyncInterval: 60s\n", cidrs.size());
	return out;
}

// How many repetitions, scaled down for large tables so that the whole run stays short.
struct Runs {
	size_t parse, apply, noopResync, movedResync, swaps;
};

Runs runsFor(size_t cidrs)
{
	if (cidrs <= 1000)
		return {21, 21, 2000, 200, 15};
	if (cidrs <= 10000)
		return {9, 11, 500, 30, 11};
	return {3, 7, 100, 5, 5};
}

// Lets the previous commit's aftermath finish before the next timed one, as between real
// config edits: the kernel frees a replaced table in a worker after the commit, and the
// agent reads its own commit's notifications. Back to back, they would compete for the
// CPU with the commit being timed.
void settle(const Case &c)
{
	std::this_thread::sleep_for(std::chrono::milliseconds(c.cidrs >= 100000 ? 100 : 20));
}

// --- Files and the agent process ------------------------------------------------------

void writeFile(const std::string &path, const std::string &content)
{
	std::ofstream out(path, std::ios::trunc | std::ios::binary);
	out << content;
	out.close();
	if (!out)
		die("cannot write " + path);
}

// The new file is complete on disk before the timed rename(), as kubelet and careful
// tools do it.
void stageFile(const std::string &dir, const std::string &content)
{
	writeFile(dir + "/.config.new", content);
}

void swapInStaged(const std::string &dir)
{
	if (std::rename((dir + "/.config.new").c_str(), (dir + "/config").c_str()) != 0)
		die(fmt::format("rename into {}/config: {}", dir, std::strerror(errno)));
}

std::string readFile(const std::string &path)
{
	std::ifstream in(path);
	std::ostringstream out;
	out << in.rdbuf();
	return out.str();
}

std::string tail(const std::string &text, size_t lines)
{
	size_t pos = text.size();
	for (size_t n = 0; n <= lines && pos > 0; n++)
		pos = text.rfind('\n', pos - 1);
	std::string out = pos == std::string::npos ? text : text.substr(pos + 1);
	// A config line lists every CIDR: keep the excerpt readable.
	std::string clipped;
	std::istringstream in(out);
	for (std::string line; std::getline(in, line);)
		clipped += (line.size() > 300 ? line.substr(0, 300) + "..." : line) + "\n";
	return clipped;
}

class AgentChild
{
public:
	AgentChild(const std::vector<std::string> &args, std::string logPath)
		: logPath_(std::move(logPath))
	{
		std::vector<std::string> argv{AGENT_BINARY};
		argv.insert(argv.end(), args.begin(), args.end());
		const int log = open(logPath_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (log < 0)
			die(fmt::format("{}: {}", logPath_, std::strerror(errno)));
		// Dies with the benchmark, whatever kills it (spawnChild).
		const pid_t pid = ipmasq::test::spawnChild(argv, {"/dev/null", log, log});
		close(log);
		if (pid < 0)
			die(fmt::format("fork: {}", std::strerror(errno)));
		g_agentPid = pid;
	}

	~AgentChild() { stop(); }
	AgentChild(const AgentChild &) = delete;
	AgentChild &operator=(const AgentChild &) = delete;

	pid_t pid() const { return g_agentPid; }

	bool running()
	{
		if (g_agentPid <= 0)
			return false;
		int status = 0;
		const pid_t r = waitpid(g_agentPid, &status, WNOHANG);
		if (r == g_agentPid) {
			g_agentPid = -1;
			return false;
		}
		return r == 0;
	}

	// SIGTERM (the agent leaves its table in place, which the namespace then drops),
	// bounded wait, then SIGKILL.
	void stop()
	{
		if (!running())
			return;
		kill(g_agentPid, SIGTERM);
		for (int i = 0; i < 500 && running(); i++)
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
		killAgentNow();
	}

	std::string logTail() const { return tail(readFile(logPath_), 15); }

private:
	std::string logPath_;
};

// A "Vm..." or "Rss..." line of /proc/<pid>/status (VmHWM: the peak resident set), in KiB.
long procStatusKiB(pid_t pid, const std::string &key)
{
	std::istringstream in(readFile(fmt::format("/proc/{}/status", pid)));
	for (std::string line; std::getline(in, line);)
		if (line.rfind(key + ":", 0) == 0)
			return std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
	return -1;
}

// The process's private memory (USS: Private_Clean + Private_Dirty of
// /proc/<pid>/smaps_rollup), in KiB: what it alone holds, shared library pages excluded.
long privateKiB(pid_t pid)
{
	std::istringstream in(readFile(fmt::format("/proc/{}/smaps_rollup", pid)));
	long total = 0;
	bool seen = false;
	for (std::string line; std::getline(in, line);)
		for (const char *key : {"Private_Clean:", "Private_Dirty:"})
			if (line.rfind(key, 0) == 0) {
				total += std::strtol(line.c_str() + std::strlen(key), nullptr, 10);
				seen = true;
			}
	return seen ? total : -1;
}

// Waits until the kernel holds `expected`. Returns when the committing change was first
// seen (the notification's arrival), after NetlinkBackend::matches() confirmed it; a
// notification that did not bring the table to `expected` does not count. Bounded.
std::optional<Clock::time_point> waitUntilLive(NftablesMonitor &monitor, NetlinkBackend &backend,
					       const Ruleset &expected, AgentChild &agent,
					       std::chrono::milliseconds timeout)
{
	const auto deadline = Clock::now() + timeout;
	auto lastCheck = Clock::now();
	for (int i = 0; i < 1000000 && Clock::now() < deadline; i++) {
		pollfd pfd{monitor.fd(), POLLIN, 0};
		const int ready = poll(&pfd, 1, 100);
		const auto seen = Clock::now();
		bool check = false;
		if (ready > 0) {
			check = require(monitor.drain(), "reading nftables notifications");
		} else {
			if (!agent.running())
				die("the agent exited; its log ends with:\n" + agent.logTail());
			// Notifications cannot be lost unnoticed (an overrun counts as a
			// change), but look anyway now and then.
			check = seen - lastCheck > std::chrono::seconds(2);
		}
		if (!check)
			continue;
		lastCheck = Clock::now();
		if (require(backend.matches(expected), "comparing the kernel's table"))
			return seen;
	}
	return std::nullopt;
}

// --- One row of figures ---------------------------------------------------------------

struct Row {
	Case c;
	size_t intervals = 0;
	Samples parse, build, encode, apply, applyCpu, applyListened, matches;
	Samples diff, update; // one CIDR changed: the diff, and the element update it sends
	Samples noopCpu, movedCpu;
	size_t noopRuns = 0, movedRuns = 0;
	Samples countersCpu; // one read of the connection counters, as the loop does every 2 s
	Samples scrapeCpu;   // one /metrics body, as the HTTP thread renders it per scrape
	Samples startLive, swapLive;
	long rssStartKiB = -1, rssAfterKiB = -1, rssFileKiB = -1;
	long ussStartKiB = -1, ussAfterKiB = -1;
};

AgentOptions agentOptions(const Case &c, const std::string &configPath, bool randomFully)
{
	AgentOptions options;
	options.config = ConfigLocation::file(configPath);
	options.configFlags.enableIpv6 = c.mixed;
	options.ruleset.enableIpv6 = c.mixed;
	options.ruleset.randomFully = randomFully;
	return options;
}

// 1b. One CIDR changed: the element-level update the reconciler sends instead of a
// replacement (guarded by the generation it read), back and forth between two rulesets.
void measureUpdate(Row &row, NetlinkBackend &backend, const Ruleset &inKernel,
		   std::chrono::milliseconds budget)
{
	Ruleset changed = inKernel;
	{
		// The first IPv4 /24 moves 16M addresses down: a free slot, adjacent to nothing.
		AddressSet &set = changed.sets.front();
		std::vector<AddressRange> ranges = set.elements.ranges();
		ranges.front().first.value -= AddressValue(1) << 24;
		ranges.front().last.value -= AddressValue(1) << 24;
		set.elements = IntervalSet::fromRanges(set.family(), std::move(ranges));
	}
	const Ruleset *from = &inKernel;
	const Ruleset *to = &changed;
	row.update = repeat(3, runsFor(row.c.cidrs).apply, budget, [&] {
		settle(row.c);
		const uint32_t generation = require(backend.generation(), "reading the generation");
		std::optional<ElementDiff> diff;
		row.diff.ms.push_back(wallMs([&] { diff = diffElements(*from, *to); }));
		if (!diff || diff->changedRanges() != 2)
			die("one CIDR changed should be one range removed and one added");
		const double ms = wallMs([&] {
			require(backend.updateElements(to->table, *diff, generation),
				"updating the elements");
		});
		std::swap(from, to);
		return ms;
	});
	if (!require(backend.matches(*from), "comparing the kernel's table"))
		die("after the element updates, the kernel's table differs from the ruleset");
}

// 1. Config parsing, ruleset building, encoding and apply, in this process.
void measureApply(Row &row, NetlinkBackend &backend, const std::string &text,
		  const AgentOptions &options)
{
	const Runs runs = runsFor(row.c.cidrs);
	const auto budget = std::chrono::seconds(4);
	std::optional<LoadedConfig> loaded;
	row.parse = repeat(1, runs.parse, budget, [&] {
		return wallMs([&] {
			loaded = require(parseConfig(text, options.config.path, options.configFlags),
					 "parsing the config");
		});
	});
	if (loaded->config.nonMasqueradeCIDRs.size() != row.c.cidrs)
		die("the config parsed to the wrong number of CIDRs");

	Ruleset ruleset;
	row.build = repeat(1, runs.parse, budget, [&] {
		return wallMs([&] { ruleset = buildRuleset(loaded->config, options.ruleset); });
	});
	for (const AddressSet &set : ruleset.sets)
		row.intervals += set.elements.size();

	row.encode = repeat(1, runs.apply, budget, [&] {
		return wallMs([&] { require(netlink::encodeRuleset(ruleset), "encoding"); });
	});

	// The first apply creates the table; the timed ones replace it, as a config change
	// does (the old table, elements and all, is deleted in the same transaction).
	require(backend.apply(ruleset), "applying the ruleset");
	row.apply = repeat(3, runs.apply, budget, [&] {
		settle(row.c);
		const double cpuStart = processCpuMs();
		const double ms =
			wallMs([&] { require(backend.apply(ruleset), "applying the ruleset"); });
		// The kernel does the work inside our sendmsg(): CPU time counts it too,
		// and unlike wall time it does not grow while other processes hold the CPU.
		row.applyCpu.ms.push_back(processCpuMs() - cpuStart);
		return ms;
	});
	{
		// With a socket in NFNLGRP_NFTABLES (as the daemon's own monitor is), the kernel
		// builds a notification per element at commit. It is never read here: the
		// kernel drops what does not fit, the cost of building stays.
		NftablesMonitor listener = require(NftablesMonitor::open(), "opening a listener");
		row.applyListened = repeat(3, runs.apply, budget, [&] {
			settle(row.c);
			return wallMs(
				[&] { require(backend.apply(ruleset), "applying the ruleset"); });
		});
	}
	row.matches = repeat(1, 3, budget, [&] {
		bool same = false;
		const double ms = wallMs([&] {
			same = require(backend.matches(ruleset), "comparing the kernel's table");
		});
		if (!same)
			die("after apply, the kernel's table differs from the ruleset");
		return ms;
	});
	measureUpdate(row, backend, ruleset, budget);
	require(backend.remove(ruleset.table), "removing the table");
}

// 2. CPU per resync (ConfigSource::look + Reconciler::reconcile) when nothing changed, and when another table changed.
void measureResync(Row &row, NetlinkBackend &backend, NetlinkBackend &otherProgram,
		   const std::string &dir, const std::string &text, const AgentOptions &options)
{
	const Runs runs = runsFor(row.c.cidrs);
	writeFile(dir + "/config", text);

	// Another program's NAT table, re-applied to move the ruleset generation.
	RulesetOptions otherOptions;
	otherOptions.table = "bench-other-nat";
	otherOptions.randomFully = options.ruleset.randomFully;
	const Ruleset other = buildRuleset(defaultConfig({}), otherOptions);

	sigset_t mask;
	sigprocmask(SIG_SETMASK, nullptr, &mask);
	// The daemon logs each apply at info; keep that off the figures' output.
	std::fflush(stderr);
	const int savedStderr = dup(STDERR_FILENO);
	const int devNull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	dup2(devNull, STDERR_FILENO);
	close(devNull);

	std::string failure;
	{
		// What the daemon's loop does on a resync: look at the config (a stat when
		// it did not change), then reconcile.
		AgentStatus status;
		ConfigSource source = ConfigSource::open(options.config);
		Reconciler reconciler(backend,
				      Reconciler::Settings{options.ruleset, false, options.config.path},
				      status);
		const auto sync = [&](SyncTrigger trigger) {
			if (!failure.empty())
				return;
			auto content = source.look(trigger == SyncTrigger::startup ? ConfigLook::reload
										     : ConfigLook::resync,
						   std::chrono::steady_clock::now());
			if (!content) {
				failure = "ConfigSource::look: " + content.error().message;
				return;
			}
			if (*content) { // a bad config shows in reconcile() below
				auto desired = desiredFromContent(**content, options.config,
								  options.configFlags, options.ruleset,
								  NodeAddresses{});
				if (desired)
					reconciler.setDesired(std::move(*desired));
				else
					reconciler.setConfigError(desired.error());
			}
			if (Status s = reconciler.reconcile(trigger); !s)
				failure = "Reconciler::reconcile: " + s.error().message;
		};
		const auto generation = [&] {
			auto g = backend.generation();
			return g ? *g : 0u;
		};
		sync(SyncTrigger::startup);

		const uint32_t before = generation();
		row.noopCpu = repeat(20, runs.noopResync, std::chrono::seconds(3), [&] {
			const double start = processCpuMs();
			sync(SyncTrigger::resync);
			return processCpuMs() - start;
		});
		row.noopRuns = row.noopCpu.ms.size();
		if (failure.empty() && generation() != before)
			failure = "a no-op resync committed something";

		row.movedCpu = repeat(3, runs.movedResync, std::chrono::seconds(5), [&] {
			if (auto applied = otherProgram.apply(other); !applied && failure.empty())
				failure = "applying the other table: " + applied.error().message;
			const uint32_t moved = generation();
			const double start = processCpuMs();
			sync(SyncTrigger::resync);
			const double ms = processCpuMs() - start;
			// The daemon must have found its table intact, not re-applied it.
			if (failure.empty() && generation() != moved)
				failure = "a resync after another table changed re-applied the table";
			return ms;
		});
		row.movedRuns = row.movedCpu.ms.size();

		// The loop's counter read (every 2 s): a dump of the table's objects, which does
		// not grow with the sets.
		row.countersCpu = repeat(20, runs.noopResync, std::chrono::seconds(3), [&] {
			const double start = processCpuMs();
			auto read = backend.readCounters(options.ruleset.table);
			if ((!read || read->empty()) && failure.empty())
				failure = "reading the connection counters found none";
			else if (read)
				status.countersRead(*read);
			return processCpuMs() - start;
		});
		// A scrape: the last snapshot rendered, no netlink (the counters were read above).
		size_t scraped = 0;
		row.scrapeCpu = repeat(20, runs.noopResync, std::chrono::seconds(3), [&] {
			const double start = processCpuMs();
			scraped += status.prometheusText().size();
			return processCpuMs() - start;
		});
		if (scraped == 0 && failure.empty())
			failure = "an empty /metrics body";
	}
	std::fflush(stderr);
	dup2(savedStderr, STDERR_FILENO);
	close(savedStderr);
	sigprocmask(SIG_SETMASK, &mask, nullptr);

	if (!failure.empty())
		die(failure);
	require(otherProgram.remove(other.table), "removing the other table");
	require(backend.remove(options.ruleset.table), "removing the table");
}

// 3 and 4. The agent as a child process: start-up, config swaps, peak RSS.
void measureDaemon(Row &row, NetlinkBackend &backend, const std::string &dir,
		   const std::string &textA, const std::string &textB, const AgentOptions &options)
{
	const Runs runs = runsFor(row.c.cidrs);
	// Only now: a listener makes every commit in the namespace slower (see 1.).
	NftablesMonitor monitor = require(NftablesMonitor::open(), "opening the nftables monitor");
	const auto expectedFor = [&](const std::string &text) {
		auto loaded = require(parseConfig(text, options.config.path, options.configFlags),
				      "parsing the config");
		return buildRuleset(loaded.config, options.ruleset);
	};
	const Ruleset expectedA = expectedFor(textA);
	const Ruleset expectedB = expectedFor(textB);

	stageFile(dir, textA);
	swapInStaged(dir);
	(void)monitor.drain();

	std::vector<std::string> args{"--config=" + options.config.path};
	if (row.c.mixed)
		args.push_back("--enable-ipv6");
	const auto spawned = Clock::now();
	AgentChild agent(args, dir + "/agent.log");
	auto live = waitUntilLive(monitor, backend, expectedA, agent, kLiveTimeout);
	if (!live)
		die("the agent did not apply its table in time; its log ends with:\n" +
		    agent.logTail());
	row.startLive.ms.push_back(Millis(*live - spawned).count());
	row.rssStartKiB = procStatusKiB(agent.pid(), "VmHWM");
	row.rssFileKiB = procStatusKiB(agent.pid(), "RssFile");
	// The loop gives memory back right after its commit; it is idle well within this.
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	row.ussStartKiB = privateKiB(agent.pid());

	bool useB = true;
	row.swapLive = repeat(3, runs.swaps, std::chrono::seconds(12), [&] {
		const Ruleset &expected = useB ? expectedB : expectedA;
		stageFile(dir, useB ? textB : textA);
		settle(row.c);
		(void)require(monitor.drain(), "reading nftables notifications");
		const auto start = Clock::now();
		swapInStaged(dir);
		auto committed = waitUntilLive(monitor, backend, expected, agent, kLiveTimeout);
		if (!committed)
			die("a config swap did not reach the kernel in time; the agent's log "
			    "ends with:\n" + agent.logTail());
		useB = !useB;
		return Millis(*committed - start).count();
	});
	row.rssAfterKiB = procStatusKiB(agent.pid(), "VmHWM");
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	row.ussAfterKiB = privateKiB(agent.pid());
	if (!agent.running())
		die("the agent exited; its log ends with:\n" + agent.logTail());
	agent.stop();
	require(backend.remove(options.ruleset.table), "removing the table");
}

// 6. Whole processes, as a node runs them at boot: the agent's --once, and upstream's
// iptables-restore of its payload for the same list. Wall time from fork() to exit,
// each run on an empty ruleset (the flush is not timed).
struct WholeProcessRow {
	std::string label;
	Samples ms;
	std::string skipped; // why it was not measured, if it was not
};

// Runs `argv` with stdout and stderr to /dev/null and stdin from `stdinPath` (or
// /dev/null); returns its wall time in ms, or dies when it fails.
double timedRun(const std::vector<std::string> &argv, const std::string &stdinPath = "/dev/null")
{
	const auto start = Clock::now();
	const pid_t pid = ipmasq::test::spawnChild(argv, {stdinPath});
	if (pid < 0)
		die(fmt::format("fork: {}", std::strerror(errno)));
	int status = 0;
	// Bounded by the watchdog (kWatchdogSeconds), which kills the whole run.
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
	}
	const double took = Millis(Clock::now() - start).count();
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die(fmt::format("{} failed (wait status {:#x}); run it by hand to see why", argv[0],
				status));
	return took;
}

void flushRuleset()
{
	if (ipmasq::test::run("nft flush ruleset") != 0)
		die("nft flush ruleset failed (nft is needed for section 6)");
}

// Upstream's payload (kubernetes-sigs/ip-masq-agent, syncMasqRules): one RETURN rule
// per CIDR in its chain IP-MASQ-AGENT, MASQUERADE last, and the POSTROUTING jump, which
// upstream ensures with a separate iptables call (here in the same restore, in its favour).
std::string upstreamPayload(const std::vector<std::string> &cidrs)
{
	std::string out = "*nat\n:IP-MASQ-AGENT - [0:0]\n";
	out += "-A POSTROUTING -m comment --comment \"ip-masq-agent: ensure nat POSTROUTING "
	       "directs all non-LOCAL destination traffic to our custom IP-MASQ-AGENT chain\" "
	       "-m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT\n";
	std::vector<std::string> nonMasquerade = cidrs;
	nonMasquerade.push_back("169.254.0.0/16"); // link-local, as upstream adds it by default
	for (const std::string &cidr : nonMasquerade)
		out += "-A IP-MASQ-AGENT -d " + cidr + " -m comment --comment \"ip-masq-agent: local "
		       "traffic is not subject to MASQUERADE\" -j RETURN\n";
	out += "-A IP-MASQ-AGENT -m comment --comment \"ip-masq-agent: outbound traffic is "
	       "subject to MASQUERADE (must be last in chain)\" -j MASQUERADE --random-fully\n";
	out += "COMMIT\n";
	return out;
}

// An iptables-restore that writes nf_tables (iptables-nft), or empty.
std::string findIptablesNftRestore()
{
	for (const char *candidate : {"/usr/sbin/iptables-nft-restore", "/sbin/iptables-nft-restore"})
		if (access(candidate, X_OK) == 0)
			return candidate;
	return {};
}

std::vector<WholeProcessRow> measureWholeProcesses(const std::string &dir, bool quick)
{
	const std::string configPath = dir + "/config";
	std::vector<WholeProcessRow> rows;
	const auto once = [&](const std::string &label, const std::optional<std::string> &text,
			      size_t runs) {
		WholeProcessRow row{label, {}, {}};
		if (text)
			writeFile(configPath, *text);
		else
			std::filesystem::remove(configPath);
		for (size_t i = 0; i < runs; i++) {
			flushRuleset();
			row.ms.ms.push_back(timedRun({AGENT_BINARY, "--once", "--config=" + configPath}));
		}
		rows.push_back(std::move(row));
	};
	once("--once, built-in defaults", std::nullopt, 9);
	const std::vector<std::string> cidrs10k = cidrList(Case{10000, false}, 0);
	once("--once, 10,000 CIDRs", configText(cidrs10k), 9);
	if (!quick)
		once("--once, 100,000 CIDRs", configText(cidrList(Case{100000, false}, 0)), 5);

	WholeProcessRow upstream{"iptables-restore, 10,000 (upstream)", {}, {}};
	const std::string restore = findIptablesNftRestore();
	if (restore.empty()) {
		upstream.skipped = "iptables-nft-restore not installed (Debian: apt-get install iptables)";
	} else {
		const std::string payloadPath = dir + "/upstream.rules";
		writeFile(payloadPath, upstreamPayload(cidrs10k));
		for (size_t i = 0; i < 9; i++) {
			flushRuleset();
			upstream.ms.ms.push_back(timedRun({restore, "--noflush"}, payloadPath));
		}
		std::filesystem::remove(payloadPath);
	}
	rows.push_back(std::move(upstream));
	flushRuleset();
	return rows;
}

// 5. Loading the config file (loadConfig: read and parse), each in a fresh process
// (this executable with --measure-load), so that its peak RSS is the load's own and not
// this process's heap: VmHWM minus VmRSS just before, next to what the model itself takes.
struct LoadRow {
	std::string label;
	size_t fileBytes = 0;
	size_t cidrs = 0;
	double ms = 0;
	long baseKiB = -1, peakKiB = -1;

	double modelKiB() const { return static_cast<double>(cidrs * sizeof(Prefix)) / 1024; }
	double ratio() const
	{
		return cidrs == 0 || peakKiB < 0 ? 0 : static_cast<double>(peakKiB - baseKiB) / modelKiB();
	}
};

// The child's side: load, print "ms baseKiB peakKiB cidrs" or "error <message>".
int measureLoadChild(const std::string &path)
{
	// VmHWM := VmRSS now, so the peak is measured from here (Linux >= 4.0).
	std::ofstream clear("/proc/self/clear_refs");
	clear << "5";
	clear.close();
	const long base = clear ? procStatusKiB(getpid(), "VmRSS") : -1;
	std::optional<LoadedConfig> loaded;
	std::string error;
	const double ms = wallMs([&] {
		auto result = loadConfig(ConfigLocation::file(path), {});
		if (result)
			loaded = std::move(*result);
		else
			error = result.error().message;
	});
	const long peak = procStatusKiB(getpid(), "VmHWM");
	if (!loaded) {
		fmt::print("error {}\n", error);
		return EXIT_FAILURE;
	}
	fmt::print("{} {} {} {}\n", ms, base, peak, loaded->config.nonMasqueradeCIDRs.size());
	return EXIT_SUCCESS;
}

LoadRow measureLoad(const std::string &label, const std::string &path, const std::string &text)
{
	writeFile(path, text);
	LoadRow row;
	row.label = label;
	row.fileBytes = text.size();
	int out[2];
	if (pipe2(out, O_CLOEXEC) != 0)
		die(fmt::format("pipe2: {}", std::strerror(errno)));
	// The benchmark itself, in a process of its own: its peak memory is the load's.
	const pid_t pid = ipmasq::test::spawnChild({"/proc/self/exe", "--measure-load", path},
						  {"/dev/null", out[1], STDERR_FILENO});
	close(out[1]);
	if (pid < 0)
		die(fmt::format("fork: {}", std::strerror(errno)));
	std::string reply;
	char buf[4096];
	for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) != 0;) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		reply.append(buf, static_cast<size_t>(n));
	}
	close(out[0]);
	int status = 0;
	waitpid(pid, &status, 0);
	std::istringstream in(reply);
	if (!(in >> row.ms >> row.baseKiB >> row.peakKiB >> row.cidrs) || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		die(fmt::format("loading {} failed: {}", label, reply));
	std::remove(path.c_str());
	return row;
}

// The largest file the agent accepts: the 16 MiB cap full of CIDRs as operators write
// them (block YAML, one per line), with cidrLimit after the list.
std::string largestAcceptedText()
{
	const std::string tail = fmt::format("cidrLimit: {}\n", kMaxNonMasqueradeCIDRs);
	std::string out = "nonMasqueradeCIDRs:\n";
	out.reserve(kMaxConfigFileBytes);
	for (size_t i = 0; i < kMaxNonMasqueradeCIDRs; i++) {
		const uint32_t net = 0x14000000u + (static_cast<uint32_t>(2 * i) << 8);
		const std::string line = fmt::format("  - {}.{}.{}.0/24\n", net >> 24, (net >> 16) & 0xff,
						     (net >> 8) & 0xff);
		if (out.size() + line.size() + tail.size() > kMaxConfigFileBytes)
			break;
		out += line;
	}
	return out + tail;
}

// 7. Resolving destinations with masqueradeCIDRs (policy.h), in this process, at the
// largest list a config may hold: kMaxNonMasqueradeCIDRs non-masquerade /24s (every
// other one) with an exception (a /26) in every other of them, unsorted as a file gives
// them; beside it the same list without exceptions, and the plain normalization that
// built the set before exceptions existed.
struct ResolveRow {
	std::string label;
	size_t entries = 0;
	size_t intervals = 0;
	Samples ms;
};

std::vector<ResolveRow> measureResolution()
{
	Config config;
	for (size_t i = 0; i < kMaxNonMasqueradeCIDRs; i++) {
		Prefix prefix;
		prefix.network = Address{Family::ipv4, 0x14000000u + (static_cast<uint32_t>(2 * i) << 8)};
		prefix.length = 24;
		config.nonMasqueradeCIDRs.push_back(prefix);
		if (i % 2 == 0) {
			prefix.network.value += 64;
			prefix.length = 26;
			config.masqueradeCIDRs.push_back(prefix);
		}
	}
	// A fixed shuffle: the file's order, not the address order.
	for (size_t i = config.nonMasqueradeCIDRs.size() - 1; i > 0; i--)
		std::swap(config.nonMasqueradeCIDRs[i], config.nonMasqueradeCIDRs[(i * 7919) % (i + 1)]);
	Config plain = config;
	plain.masqueradeCIDRs.clear();

	std::vector<ResolveRow> rows;
	const auto measure = [&rows](std::string label, size_t entries, const std::function<size_t()> &f) {
		ResolveRow row{std::move(label), entries, 0, {}};
		row.ms = repeat(3, 5, std::chrono::seconds(10), [&] { return wallMs([&] { row.intervals = f(); }); });
		rows.push_back(std::move(row));
	};
	const size_t all = config.nonMasqueradeCIDRs.size() + config.masqueradeCIDRs.size();
	measure("resolve, with exceptions", all,
		[&] { return resolveNonMasquerade(config, Family::ipv4).size(); });
	measure("checkConfigPolicy", all, [&] {
		LoadedConfig loaded;
		loaded.config = config;
		loaded.fromFile = true;
		return checkConfigPolicy(loaded) ? loaded.warnings.size() : SIZE_MAX;
	});
	measure("resolve, no exceptions", plain.nonMasqueradeCIDRs.size(),
		[&] { return resolveNonMasquerade(plain, Family::ipv4).size(); });
	measure("fromPrefixes (before)", plain.nonMasqueradeCIDRs.size(), [&] {
		std::vector<Prefix> prefixes = plain.nonMasqueradeCIDRs;
		prefixes.push_back(linkLocalPrefix(Family::ipv4));
		return IntervalSet::fromPrefixes(Family::ipv4, prefixes).size();
	});
	return rows;
}

// 8. One cycle of the daemon's NAT conflict check (other_tables/conflicts.h, run by
// conflict_check.h) with a config of 10,000 CIDRs, as the daemon makes it: the agent's own
// table linearized from the desired ruleset (once per desired state), every other table's
// nat chains read (the agent's own, applied by --once, is skipped), then the whole sample
// evaluated in passes of ConflictCheck::kStepsPerPass steps, at most one per 3 s, with the
// packets other tables' rules add (samplesFromRules) and the port samples. Beside
// the agent: nothing, kubelet's one rule, or upstream's leftover chain of 10,000 RETURN
// rules, which every sampled packet walks.
struct ConflictRow {
	std::string label;
	size_t samples = 0; // the config's
	size_t fromRules = 0; // where other tables' rules match (samplesFromRules)
	size_t conflicts = 0;
	size_t steps = 0;
	size_t passes = 0;
	Samples linearize; // agentTable(desired ruleset)
	Samples read; // readNatRuleset
	Samples sample; // samplesFromRules
	Samples evaluate; // the cycle's passes together
	Samples longestPass; // the longest of them: what the check's thread spends at once
	Samples cpu; // all of it, CLOCK_PROCESS_CPUTIME_ID
};

ConflictRow measureConflictPass(const std::string &label, const DesiredState &desired)
{
	ConflictRow row;
	row.label = label;
	const auto addresses = require(readNodeAddresses(), "reading the node's addresses");
	const NodeAddresses node{addresses, true};
	nft::NatReadLimits limits;
	limits.skipInetTable = desired.ruleset.table;
	CheckLimits budget;
	budget.maxSteps = ConflictCheck::kStepsPerPass;
	const auto deadline = Clock::now() + std::chrono::seconds(20);
	for (size_t run = 0; run < 9 && (run < 3 || Clock::now() < deadline); run++) {
		const double cpuStart = processCpuMs();
		std::optional<nft::Table> agent;
		row.linearize.ms.push_back(wallMs([&] {
			agent = require(nft::agentTable(desired.ruleset), "linearizing the agent's table");
		}));
		std::optional<nft::NatRuleset> ruleset;
		row.read.ms.push_back(wallMs([&] {
			ruleset = require(nft::readNatRuleset(limits), "reading other tables' NAT");
		}));
		ConflictCycle cycle;
		RuleSamples more;
		row.sample.ms.push_back(wallMs([&] { more = samplesFromRules(*ruleset, desired.samples, node); }));
		std::vector<SampledPacket> samples = desired.samples.packets;
		samples.insert(samples.end(), more.packets.begin(), more.packets.end());
		row.fromRules = more.packets.size();
		cycle.restart(std::move(samples));
		std::optional<std::vector<NatConflict>> found;
		double longest = 0, total = 0;
		row.steps = row.passes = 0;
		for (size_t pass = 0; pass < 1000 && !found; pass++) {
			ConflictPass done;
			const double ms = wallMs([&] { done = findConflicts(*ruleset, &*agent, cycle.rest(), node, budget); });
			longest = std::max(longest, ms);
			total += ms;
			row.steps += done.steps;
			row.passes++;
			found = cycle.add(done);
		}
		if (!found)
			die("the conflict cycle did not end in 1,000 passes");
		row.evaluate.ms.push_back(total);
		row.longestPass.ms.push_back(longest);
		row.cpu.ms.push_back(processCpuMs() - cpuStart);
		row.samples = desired.samples.packets.size();
		row.conflicts = found->size();
	}
	return row;
}

std::vector<ConflictRow> measureConflictPasses(const std::string &dir)
{
	const std::string configPath = dir + "/config";
	const std::vector<std::string> cidrs = cidrList(Case{10000, false}, 0);
	writeFile(configPath, configText(cidrs));
	const auto addresses = require(readNodeAddresses(), "reading the node's addresses");
	const DesiredState desired = require(desiredFromLocation(ConfigLocation::file(configPath), {}, {}, addresses),
					     "making the 10,000-CIDR config's desired state");
	std::vector<ConflictRow> rows;
	flushRuleset();
	(void)timedRun({AGENT_BINARY, "--once", "--config=" + configPath}); // dies if it fails
	rows.push_back(measureConflictPass("agent's table alone", desired));
	if (ipmasq::test::run("iptables-nft -w -t nat -A POSTROUTING ! -d 20.0.0.0/8 -m addrtype "
			      "! --dst-type LOCAL -j MASQUERADE") != 0)
		die("iptables-nft failed (iptables is needed for section 8)");
	rows.push_back(measureConflictPass("+ kubelet's rule", desired));
	const std::string payloadPath = dir + "/upstream.rules";
	writeFile(payloadPath, upstreamPayload(cidrs));
	const std::string restore = findIptablesNftRestore();
	if (!restore.empty()) {
		(void)timedRun({restore, "--noflush"}, payloadPath);
		rows.push_back(measureConflictPass("+ upstream's chain, 10,001 rules", desired));
	}
	std::filesystem::remove(payloadPath);
	flushRuleset();
	return rows;
}

// --- Reporting ------------------------------------------------------------------------

std::string compiler()
{
#if defined(__clang__)
	return "clang " __clang_version__;
#elif defined(__GNUC__)
	return "g++ " __VERSION__;
#else
	return "unknown";
#endif
}

std::string verdict(bool ok) { return ok ? "ok" : "MISSED"; }

std::string ms(double v)
{
	if (v < 0.1)
		return fmt::format("{:.3f}", v);
	if (v < 10)
		return fmt::format("{:.2f}", v);
	return fmt::format("{:.1f}", v);
}

struct Target {
	std::string what;
	std::string figure;
	std::string limit;
	bool ok;
};

} // namespace

int main(int argc, char *argv[])
{
	// The child of measureLoad(), before anything else: a fresh process that only loads.
	if (argc == 3 && std::strcmp(argv[1], "--measure-load") == 0)
		return measureLoadChild(argv[2]);

	bool quick = false;
	for (int i = 1; i < argc; i++) {
		if (std::strcmp(argv[i], "--quick") == 0) {
			quick = true;
		} else {
			std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
			return 2;
		}
	}

	// Safety first: nothing below may run in the host's network namespace.
	if (const std::string why = ipmasq::test::enterPrivateNetns(); !why.empty()) {
		std::fprintf(stderr, "SKIP: %s\n", why.c_str());
		return 77;
	}
	std::atexit(cleanupAtExit);
	installSignalHandlers();

	char tmpl[] = "/tmp/ipmasq-bench-XXXXXX";
	if (!mkdtemp(tmpl))
		die(fmt::format("mkdtemp: {}", std::strerror(errno)));
	g_tmpDir = tmpl;
	const std::string configPath = g_tmpDir + "/config";
	{
		sigset_t all, old;
		sigfillset(&all);
		sigprocmask(SIG_BLOCK, &all, &old);
		for (size_t i = 0; i < std::size(kScratchFiles); i++)
			std::snprintf(g_scratchPaths[i], sizeof(g_scratchPaths[i]), "%s/%s", tmpl,
				      kScratchFiles[i]);
		std::snprintf(g_scratchPaths[std::size(kScratchFiles)],
			      sizeof(g_scratchPaths[0]), "%s", tmpl);
		sigprocmask(SIG_SETMASK, &old, nullptr);
	}

	utsname uts {};
	uname(&uts);
	fmt::print("ip-masq-agent benchmark (in a private network namespace)\n");
	fmt::print("machine:  {}, {} cores, Linux {}\n", cpuModel(), sysconf(_SC_NPROCESSORS_ONLN),
		   uts.release);
	fmt::print("build:    {}, buildtype {}{}\n", compiler(), BENCH_BUILD_TYPE,
#ifdef NDEBUG
		   ", NDEBUG"
#else
		   ", assertions on"
#endif
	);
	fmt::print("load:     {} (loadavg at start; other processes' CPU inflates wall times)\n",
		   loadAverage());
	fmt::print("workload: non-mergeable CIDRs (every other IPv4 /24; v4+v6: half IPv6 /64s "
		   "with --enable-ipv6), link-local added by the agent\n\n");
	std::fflush(stdout);

	auto backend = require(NetlinkBackend::open(), "opening the netlink backend");
	auto otherProgram = require(NetlinkBackend::open(), "opening a second netlink socket");
	// As the agent does: fully-random asked for; apply() leaves it out where the kernel
	// refuses it (backend_features.cpp).

	std::vector<Case> cases{{10, false}, {1000, false}};
	if (!quick) {
		cases.push_back({10000, false});
		cases.push_back({100000, false});
		cases.push_back({100000, true});
	}

	std::vector<Row> rows;
	const auto started = Clock::now();
	for (const Case &c : cases) {
		Row row;
		row.c = c;
		const std::string textA = configText(cidrList(c, 0));
		const std::string textB = configText(cidrList(c, 1));
		const AgentOptions options = agentOptions(c, configPath, true);

		const auto caseStart = Clock::now();
		measureApply(row, *backend, textA, options);
		measureResync(row, *backend, *otherProgram, g_tmpDir, textA, options);
		measureDaemon(row, *backend, g_tmpDir, textA, textB, options);
		fmt::print("measured {:>14} CIDRs ({} set intervals) in {:.1f} s\n", caseLabel(c),
			   thousands(row.intervals),
			   std::chrono::duration<double>(Clock::now() - caseStart).count());
		std::fflush(stdout);
		rows.push_back(std::move(row));
	}
	std::vector<LoadRow> loads;
	for (const size_t n : quick ? std::vector<size_t>{10000} : std::vector<size_t>{10000, 100000}) {
		const Case c{n, false};
		loads.push_back(measureLoad(caseLabel(c), configPath, configText(cidrList(c, 0))));
	}
	if (!quick)
		loads.push_back(measureLoad("largest (16 MiB)", configPath, largestAcceptedText()));
	const std::vector<WholeProcessRow> wholes = measureWholeProcesses(g_tmpDir, quick);
	const std::vector<ResolveRow> resolutions = measureResolution();
	const std::vector<ConflictRow> conflictPasses = measureConflictPasses(g_tmpDir);
	const std::vector<ipmasq::bench::ResponsivenessFigure> reactions =
		ipmasq::bench::measureResponsiveness(g_tmpDir);
	const bench::AddressFollowingFigures addressFollowing = bench::measureAddressFollowing(g_tmpDir);
	const double totalSeconds = std::chrono::duration<double>(Clock::now() - started).count();

	std::vector<Target> targets;
	const auto applyTarget = [](const Row &r) -> std::optional<double> {
		if (r.c.cidrs == 10000)
			return 30;
		if (r.c.cidrs == 100000)
			return 300;
		return std::nullopt;
	};
	constexpr double kResyncTargetMs = 0.1;
	constexpr double kUpdateTargetMs = 5;
	constexpr double kSwapTargetMs = 50;
	// The figures: peak RSS in MB (10^6 bytes), private memory in MiB.
	constexpr double kRssTargetKiB = 9e6 / 1024;
	constexpr double kUssTargetKiB = 3 * 1024;

	fmt::print("\n1. In this process, wall time in ms (median of the runs). apply replaces the "
		   "whole table in one transaction;\n   cpu: its CPU time (user + kernel); "
		   "+listener: apply while a socket listens to nftables notifications;\n"
		   "   diff, update: one CIDR changed, its element diff and the guarded element "
		   "update (netlink + kernel)\n");
	fmt::print("{:>15} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5} {:>13} {:>10} {:>9} {:>8} {:>8} {:>11}\n",
		   "CIDRs", "parse", "build", "encode", "apply", "cpu", "runs", "apply target",
		   "+listener", "matches", "diff", "update", "target");
	for (const Row &r : rows) {
		std::string target = "-";
		if (auto limit = applyTarget(r)) {
			const bool ok = r.apply.median() < *limit;
			target = fmt::format("<{:g} {}", *limit, verdict(ok));
			targets.push_back({fmt::format("apply, {} CIDRs", caseLabel(r.c)),
					   ms(r.apply.median()) + " ms", fmt::format("< {:g} ms", *limit), ok});
		}
		std::string updateTarget = "-";
		if (r.c.cidrs == 100000) {
			const bool ok = r.update.median() < kUpdateTargetMs;
			updateTarget = fmt::format("<{:g} {}", kUpdateTargetMs, verdict(ok));
			targets.push_back({fmt::format("1-CIDR update, {} CIDRs", caseLabel(r.c)),
					   ms(r.update.median()) + " ms",
					   fmt::format("< {:g} ms", kUpdateTargetMs), ok});
		}
		fmt::print("{:>15} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5} {:>13} {:>10} {:>9} {:>8} {:>8} {:>11}\n",
			   caseLabel(r.c), ms(r.parse.median()), ms(r.build.median()),
			   ms(r.encode.median()), ms(r.apply.median()), ms(r.applyCpu.median()),
			   r.apply.ms.size(), target, ms(r.applyListened.median()),
			   ms(r.matches.median()), ms(r.diff.median()), ms(r.update.median()),
			   updateTarget);
	}

	fmt::print("\n2. CPU per resync (config look + reconcile), CLOCK_PROCESS_CPUTIME_ID in ms (median; "
		   "user + system)\n");
	fmt::print("{:>15} {:>11} {:>6} {:>12} {:>22} {:>6} {:>14} {:>8}\n", "CIDRs", "no-op", "runs",
		   "target", "other table changed", "runs", "counters read", "scrape");
	for (const Row &r : rows) {
		const bool ok = r.noopCpu.median() < kResyncTargetMs;
		targets.push_back({fmt::format("no-op resync CPU, {} CIDRs", caseLabel(r.c)),
				   ms(r.noopCpu.median()) + " ms", "< 0.1 ms", ok});
		fmt::print("{:>15} {:>11} {:>6} {:>12} {:>22} {:>6} {:>14} {:>8}\n", caseLabel(r.c),
			   ms(r.noopCpu.median()), r.noopRuns,
			   fmt::format("<0.1 {}", verdict(ok)), ms(r.movedCpu.median()),
			   r.movedRuns, ms(r.countersCpu.median()), ms(r.scrapeCpu.median()));
	}

	fmt::print("\n3./4. The agent as a process: start and config swap (rename) to table "
		   "committed, in ms;\n   peak RSS (VmHWM) in MB (10^6 bytes) after start and after the swaps; "
		   "file: the part of RSS that is mapped files (code of the binary and libraries);\n"
		   "   USS: private memory (Private_Clean + Private_Dirty, smaps_rollup) in MiB, "
		   "200 ms after start and after the swaps\n");
	fmt::print("{:>15} {:>8} {:>8} {:>17} {:>5} {:>11} {:>10} {:>6} {:>11} {:>10} {:>10} {:>11} {:>10}\n",
		   "CIDRs", "start", "swap", "(min-max)", "runs", "target", "RSS start", "file",
		   "target", "RSS after", "USS start", "target", "USS after");
	for (const Row &r : rows) {
		const bool swapOk = r.swapLive.median() < kSwapTargetMs;
		targets.push_back({fmt::format("config swap live, {} CIDRs", caseLabel(r.c)),
				   ms(r.swapLive.median()) + " ms", "< 50 ms", swapOk});
		std::string rssTarget = "-", ussTarget = "-";
		if (r.c.cidrs == 10000 && !r.c.mixed) {
			const bool ok = r.rssStartKiB >= 0 && r.rssStartKiB <= kRssTargetKiB;
			rssTarget = fmt::format("<=9 {}", verdict(ok));
			targets.push_back({"daemon peak RSS, 10,000 CIDRs",
					   fmt::format("{:.2f} MB", r.rssStartKiB * 1024 / 1e6), "<= 9 MB",
					   ok});
			const bool ussOk = r.ussStartKiB >= 0 && r.ussStartKiB <= kUssTargetKiB;
			ussTarget = fmt::format("<=3 {}", verdict(ussOk));
			targets.push_back({"daemon USS after loading 10,000 CIDRs",
					   fmt::format("{:.2f} MiB", r.ussStartKiB / 1024.0), "<= 3 MiB",
					   ussOk});
		}
		fmt::print("{:>15} {:>8} {:>8} {:>17} {:>5} {:>11} {:>10.2f} {:>6.2f} {:>11} {:>10.2f} {:>10.2f} {:>11} {:>10.2f}\n",
			   caseLabel(r.c), ms(r.startLive.median()), ms(r.swapLive.median()),
			   fmt::format("({}-{})", ms(r.swapLive.min()), ms(r.swapLive.max())),
			   r.swapLive.ms.size(), fmt::format("<50 {}", verdict(swapOk)),
			   r.rssStartKiB * 1024 / 1e6, r.rssFileKiB * 1024 / 1e6, rssTarget,
			   r.rssAfterKiB * 1024 / 1e6, r.ussStartKiB / 1024.0, ussTarget,
			   r.ussAfterKiB / 1024.0);
	}

	fmt::print("\n5. Loading the config file (read + parse, block YAML, cidrLimit after the list), "
		   "in a fresh process;\n   peak: VmHWM minus VmRSS before the load, in MiB; model: "
		   "CIDRs x sizeof(Prefix) ({} bytes)\n", sizeof(Prefix));
	fmt::print("{:>17} {:>9} {:>10} {:>10} {:>8} {:>8} {:>7} {:>12}\n", "file", "MiB", "CIDRs",
		   "load ms", "peak", "model", "ratio", "target");
	constexpr double kLoadRatioTarget = 3;
	constexpr double kLargestLoadTargetMs = 10000;
	for (const LoadRow &r : loads) {
		std::string target = "-";
		if (r.cidrs == 100000) {
			const bool ok = r.peakKiB >= 0 && r.ratio() <= kLoadRatioTarget;
			target = fmt::format("<=3x {}", verdict(ok));
			targets.push_back({"load peak RSS / model, 100,000 CIDRs",
					   fmt::format("{:.2f}x", r.ratio()), "<= 3x", ok});
		} else if (r.label.rfind("largest", 0) == 0) {
			const bool ok = r.ms < kLargestLoadTargetMs;
			target = fmt::format("<10 s {}", verdict(ok));
			targets.push_back({fmt::format("load largest file, {} CIDRs", thousands(r.cidrs)),
					   fmt::format("{:.2f} s", r.ms / 1000), "< 10 s", ok});
		}
		fmt::print("{:>17} {:>9.2f} {:>10} {:>10} {:>8.2f} {:>8.2f} {:>7.2f} {:>12}\n", r.label,
			   static_cast<double>(r.fileBytes) / (1024 * 1024), thousands(r.cidrs), ms(r.ms),
			   r.peakKiB < 0 ? -1.0 : (r.peakKiB - r.baseKiB) / 1024.0, r.modelKiB() / 1024,
			   r.ratio(), target);
	}

	fmt::print("\n6. Whole processes from fork() to exit on an empty ruleset, in ms (median, "
		   "min-max): the agent's --once,\n   and iptables-restore --noflush (iptables-nft) of "
		   "upstream's payload for the same 10,000 CIDRs\n");
	fmt::print("{:>38} {:>9} {:>17} {:>5} {:>12}\n", "", "median", "(min-max)", "runs", "target");
	std::optional<double> agent10k, upstream10k;
	for (const WholeProcessRow &r : wholes) {
		if (!r.skipped.empty()) {
			fmt::print("{:>38} skipped: {}\n", r.label, r.skipped);
			continue;
		}
		std::optional<double> limit;
		if (r.label.find("defaults") != std::string::npos)
			limit = 10;
		else if (r.label.find("--once, 10,000") != std::string::npos)
			limit = 60, agent10k = r.ms.median();
		else if (r.label.find("100,000") != std::string::npos)
			limit = 450;
		else
			upstream10k = r.ms.median();
		std::string target = "-";
		if (limit) {
			const bool ok = r.ms.median() <= *limit;
			target = fmt::format("<={:g} {}", *limit, verdict(ok));
			targets.push_back({r.label + ", whole process", ms(r.ms.median()) + " ms",
					   fmt::format("<= {:g} ms", *limit), ok});
		}
		fmt::print("{:>38} {:>9} {:>17} {:>5} {:>12}\n", r.label, ms(r.ms.median()),
			   fmt::format("({}-{})", ms(r.ms.min()), ms(r.ms.max())), r.ms.ms.size(),
			   target);
	}
	if (agent10k && upstream10k) {
		const double speedup = *upstream10k / *agent10k;
		fmt::print("{:>38} {:.2f}x\n", "iptables-restore / --once at 10,000", speedup);
		targets.push_back({"--once vs iptables-restore, 10,000", fmt::format("{:.2f}x", speedup),
				   ">= 3x", speedup >= 3});
	}

	fmt::print("\n7. Resolving destinations by longest prefix (masqueradeCIDRs), in this "
		   "process, {} non-masquerade /24s\n   and an exception /26 in every other one; "
		   "ms (median, min-max); the last column: intervals (warnings for the check)\n",
		   thousands(kMaxNonMasqueradeCIDRs));
	for (const ResolveRow &r : resolutions)
		fmt::print("{:>44} {:>9} {:>17} {:>5} {:>12}\n", fmt::format("{}, {} entries", r.label,
									thousands(r.entries)),
			   ms(r.ms.median()), fmt::format("({}-{})", ms(r.ms.min()), ms(r.ms.max())),
			   r.ms.ms.size(), thousands(r.intervals));

	fmt::print("\n8. One cycle of the NAT conflict check (linearize the agent's table, read other "
		   "tables, evaluate the sample\n   in passes of {} steps), config of 10,000 CIDRs, in "
		   "this process; ms (median, min-max); the daemon\n   runs at most one pass per {} s\n",
		   thousands(ConflictCheck::kStepsPerPass), ConflictCheck::kPeriod.count());
	fmt::print("{:>34} {:>9} {:>9} {:>9} {:>6} {:>9} {:>6} {:>6} {:>17} {:>8} {:>7} {:>4}\n", "other tables",
		   "samples", "conflicts", "steps", "passes", "linearize", "read", "sample", "evaluate",
		   "longest", "CPU", "runs");
	for (const ConflictRow &r : conflictPasses) {
		fmt::print("{:>34} {:>9} {:>9} {:>9} {:>6} {:>9} {:>6} {:>6} {:>17} {:>8} {:>7} {:>4}\n", r.label,
			   fmt::format("{}+{}", r.samples, r.fromRules), r.conflicts, thousands(r.steps), r.passes,
			   ms(r.linearize.median()), ms(r.read.median()), ms(r.sample.median()),
			   fmt::format("{} ({}-{})", ms(r.evaluate.median()), ms(r.evaluate.min()),
				       ms(r.evaluate.max())),
			   ms(r.longestPass.median()), ms(r.cpu.median()), r.cpu.ms.size());
	}

	fmt::print("\n10. Reactions the tests only check happen (their former wall-clock bounds are "
		   "the targets):\n   an address notification, the SNAT rule following the node's "
		   "address, probes and healing under\n   health_flood's floods, daemon_faults' "
		   "fighting writer\n");
	for (const auto &r : reactions) {
		fmt::print("{:>58} {:>10}  {:<28} {:>8} {}\n", r.what, r.figure, r.detail, r.target,
			   verdict(r.ok));
		targets.push_back({r.what, r.figure, r.target, r.ok});
	}
	bench::printAddressFollowing(addressFollowing);

	fmt::print("\nTargets\n");
	size_t missed = 0;
	for (const Target &t : targets) {
		fmt::print("  {:<44} {:>12}  {:<10} {}\n", t.what, t.figure, t.limit, verdict(t.ok));
		missed += t.ok ? 0 : 1;
	}
	fmt::print("\n{} of {} targets met; measured in {:.1f} s; loadavg now {}\n",
		   targets.size() - missed, targets.size(), totalSeconds, loadAverage());
	// A benchmark reports; a missed target is a finding, not a failed run.
	return EXIT_SUCCESS;
}
