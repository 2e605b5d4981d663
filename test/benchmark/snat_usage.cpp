// SPDX-License-Identifier: Apache-2.0
// Benchmark section 12 (docs/performance.md): what one SNAT usage read costs at 200,000
// conntrack entries, and the share of one core the daemon's pace gives it. Entries are
// inserted with `conntrack -R` (ctnetlink's create, as `conntrack -I`) in a private
// network namespace; nf_conntrack_max is global and never changed: the benchmark reads
// it and scales the count down when it is lower. First, the same pass's read of the SNAT
// guard's sets (NetlinkBackend::readGuard) with its sets empty and full.
// `bench-snat-usage guard` runs only the guard's rows.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/resource.h>
#include <vector>

#include <linux/netlink.h>

#include <fmt/format.h>

#include "ip-masq-agent/conntrack/conntrack_dump.h"
#include "ip-masq-agent/base/paced_thread.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/nft/table_read.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/conntrack/snat_usage.h"
#include "ip-masq-agent/daemon/snat_usage_check.h"
#include "ip-masq-agent/diagnose/guard_over.h"
#include "netns.h"

using namespace ipmasq;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kWanted = 200000;
constexpr double kTargetShare = 0.02; // of one core

[[noreturn]] void die(const std::string &why)
{
	std::fprintf(stderr, "bench-snat-usage: %s\n", why.c_str());
	std::exit(1);
}

uint64_t readNumber(const char *path)
{
	std::ifstream in(path);
	uint64_t value = 0;
	if (!(in >> value))
		die(fmt::format("cannot read {}", path));
	return value;
}

long maxRssKiB()
{
	rusage usage{};
	getrusage(RUSAGE_SELF, &usage);
	return usage.ru_maxrss;
}

// N entries toward `destinations` destinations (500 addresses of 192.0.2.0/24 and
// 198.51.100.0/24, port 443 and up), each connection source-NATed (or not) to 203.0.113.1
// with a port of its own toward its destination. Clients: with `clients` 0, 62,500
// addresses of 198.18.0.0/16 in turn (every entry a client and destination pair of its
// own); else that many, each with the same share of every destination's connections (as
// a node's pods that all call the same services).
void insertEntries(size_t n, size_t destinations, size_t clients, bool nat)
{
	const std::string path = "/tmp/ipmasq-bench-snat-entries";
	{
		std::ofstream out(path);
		for (size_t i = 0; i < n; i++) {
			// 500 addresses, then another port for each 500 destinations.
			const size_t d = i % destinations;
			const std::string destination =
				fmt::format("{}.{}", d % 2 ? "198.51.100" : "192.0.2", 1 + (d % 500) / 2);
			const unsigned port = 443 + d / 500;
			const size_t c = clients ? (i / destinations) % clients : i;
			const std::string client = fmt::format("198.18.{}.{}", (c / 250) % 250, 1 + c % 250);
			// Unique per client and destination in both schemes: their entries are
			// `destinations` x `clients` apart (or 62,500), never 64,000.
			const unsigned clientPort = clients ? 1024 + i % 64000
							    : 1024 + (i / 62500) * 16000 + (i % 16000);
			// The reply tuple un-NATed: --src-nat makes the kernel translate it
			// (nf_nat_setup_info, as for a packet), which sets IPS_SRC_NAT.
			out << fmt::format("-I -s {} -d {} -p tcp --sport {} --dport {} --state ESTABLISHED "
					   "-t 3600 -r {} -q {} --reply-port-src {} --reply-port-dst {}{}\n",
					   client, destination, clientPort, port, destination, client, port,
					   clientPort, nat ? " --src-nat 203.0.113.1" : "");
		}
	}
	const auto started = Clock::now();
	if (ipmasq::test::run("conntrack -F 2>/dev/null; conntrack -R " + path + " >/dev/null 2>&1") != 0)
		die("conntrack -R failed (apt-get install conntrack)");
	std::remove(path.c_str());
	fmt::print("  inserted {} entries ({}; {} clients) in {:.1f} s with conntrack -R; the table holds {}\n",
		   n, nat ? "source-NATed" : "not NATed", clients ? fmt::format("{}", clients) : "62,500",
		   std::chrono::duration<double>(Clock::now() - started).count(),
		   readNumber("/proc/sys/net/netfilter/nf_conntrack_count"));
}

double threadMs(bool system)
{
	rusage usage{};
	getrusage(RUSAGE_THREAD, &usage);
	const timeval &t = system ? usage.ru_stime : usage.ru_utime;
	return t.tv_sec * 1e3 + t.tv_usec / 1e3;
}

struct Read {
	double cpuMs = 0, wallMs = 0, userMs = 0, systemMs = 0;
	SnatUsage usage;
};

// One read as the daemon's pass makes it: the dump into a counter, then finish().
Read readOnce(const SnatUsageCounter::Limits &limits)
{
	SnatPlan plan;
	plan.ipv4 = SnatFamilyPlan{};
	const auto cpu = threadCpuTime();
	const auto wall = Clock::now();
	const double user = threadMs(false), system = threadMs(true);
	SnatUsageCounter counter(plan, std::vector<Address>{parseAddress("203.0.113.1").value()}, limits);
	auto dump = countSourceNatEntries(counter);
	if (!dump)
		die(dump.error().message);
	Read read;
	read.usage = counter.finish();
	read.cpuMs = std::chrono::duration<double, std::milli>(threadCpuTime() - cpu).count();
	read.wallMs = std::chrono::duration<double, std::milli>(Clock::now() - wall).count();
	read.userMs = threadMs(false) - user;
	read.systemMs = threadMs(true) - system;
	return read;
}

// The daemon's limits; `clients` false: no client and destination pairs (the read before
// it said who holds the ports), to price them.
SnatUsageCounter::Limits limitsWith(bool clients)
{
	SnatUsageCounter::Limits limits;
	if (!clients)
		limits.maxClientPairs = 0;
	return limits;
}

void measure(const char *what, size_t runs, bool clients = true)
{
	std::vector<Read> reads;
	const long rssBefore = maxRssKiB();
	for (size_t i = 0; i < runs; i++)
		reads.push_back(readOnce(limitsWith(clients)));
	std::sort(reads.begin(), reads.end(), [](const Read &a, const Read &b) { return a.cpuMs < b.cpuMs; });
	const Read &median = reads[reads.size() / 2];
	const auto pause = PacedThread::pause(SnatUsageCheck::kPace,
					      std::chrono::duration_cast<Clock::duration>(
						      std::chrono::duration<double, std::milli>(median.cpuMs)));
	const double share = median.cpuMs / std::chrono::duration<double, std::milli>(pause).count();
	uint64_t pairs = 0;
	for (const SnatDestinationTotal &t : median.usage.totals)
		pairs += t.holders.clients;
	fmt::print("  {}{}: {} entries read ({}), {} destinations kept, {} connections not attributed\n"
		   "    who holds the ports: {} connections' clients not kept; the top {} destinations have "
		   "{} clients\n"
		   "    CPU per read {:.1f} ms (median of {}; min {:.1f}, max {:.1f}; user {:.0f}, "
		   "system {:.0f}: the kernel's dump), wall {:.1f} ms\n"
		   "    pace: a read every {:.1f} s -> {:.2f}% of one core (target at most {:.0f}%): {}\n"
		   "    peak RSS grew by {} KiB over the reads, to {} KiB\n",
		   what, clients ? "" : " (no clients counted)", median.usage.entriesRead,
		   median.usage.kernelFiltered ? "the kernel filtered" : "filtered here",
		   median.usage.destinations, median.usage.leftOut, median.usage.unattributedClients,
		   median.usage.totals.size(), pairs, median.cpuMs, runs,
		   reads.front().cpuMs, reads.back().cpuMs, median.userMs, median.systemMs, median.wallMs,
		   std::chrono::duration<double>(pause).count(), share * 100, kTargetShare * 100,
		   share <= kTargetShare + 1e-9 ? "met" : "MISSED", maxRssKiB() - rssBefore, maxRssKiB());
}


// The SNAT guard's read, as SnatUsageCheck::readGuard() makes it after each conntrack read:
// NetlinkBackend::readGuard, keeping the keys its text lists.

// Both limits in observe mode, IPv4 and IPv6: the eight dynamic sets of 65,536 keys each.
Ruleset guardRuleset()
{
	Config config = defaultConfig({});
	SnatGuard guard;
	guard.mode = SnatGuardMode::observe;
	guard.newConnectionsPerSecond = 1000;
	guard.openConnections = 1000;
	config.snatGuard = guard;
	RulesetOptions options;
	options.enableIpv6 = true;
	return buildRuleset(config, options);
}

// The i-th of 65,536 sources: 198.18.0.0/16, or 2001:db8:7::/112.
std::string guardSource(Family family, size_t i)
{
	return family == Family::ipv4 ? fmt::format("198.18.{}.{}", i >> 8 & 255, i & 255)
				      : fmt::format("2001:db8:7::{:x}", i & 0xffff);
}

// Fills set `set` of the guard's table with `count` keys of as many sources toward one
// destination, in one `nft -f` transaction; a timeout of an hour where the set's own would
// empty it during the rows (the rate set's 2 s).
void fillGuardSet(const Ruleset &ruleset, const DynamicSet &set, size_t count)
{
	const std::string path = "/tmp/ipmasq-bench-guard-keys";
	{
		const bool ipv4 = set.family == Family::ipv4;
		std::ofstream out(path);
		out << fmt::format("add element inet {} {} {{\n", ruleset.table, set.name);
		for (size_t i = 0; i < count; i++)
			out << fmt::format("{} . {} . tcp . 443{},\n", guardSource(set.family, i),
					   ipv4 ? "192.0.2.1" : "2001:db8:1::1", set.timeoutMs ? " timeout 1h" : "");
		out << "}\n";
	}
	if (ipmasq::test::run("nft -f " + path) != 0)
		die(fmt::format("nft -f could not add {} keys to set {}", count, set.name));
	std::remove(path.c_str());
}

// What one dump of `set` brings over netlink: the sum of its replies' lengths.
uint64_t dumpBytes(netlink::Socket &socket, const std::string &table, const std::string &set)
{
	uint64_t bytes = 0;
	const Status dumped = netlink::dumpSetReplies(socket, table, set, [&bytes](const nlmsghdr *nlh) -> Status {
		bytes += nlh->nlmsg_len;
		return {};
	});
	if (!dumped)
		die(dumped.error().message);
	return bytes;
}

long statusKiB(const char *field)
{
	std::ifstream in("/proc/self/status");
	std::string line;
	while (std::getline(in, line))
		if (line.rfind(field, 0) == 0)
			return std::stol(line.substr(std::string(field).size()));
	die(fmt::format("no {} in /proc/self/status", field));
}

struct GuardRead {
	double cpuMs = 0, wallMs = 0, userMs = 0, systemMs = 0;
	size_t overKeys = 0, counted = 0;
	long peakKiB = 0; // above the resident size before the read
};

GuardRead readGuardOnce(NetlinkBackend &backend, const Ruleset &ruleset)
{
	// Peak RSS back to the resident size ("5" to clear_refs), so VmHWM is this read's.
	{
		std::ofstream("/proc/self/clear_refs") << "5";
	}
	const long rssBefore = statusKiB("VmRSS:");
	const auto cpu = threadCpuTime();
	const auto wall = Clock::now();
	const double user = threadMs(false), system = threadMs(true);
	auto reading = backend.readGuard(ruleset.table, ruleset.dynamicSets, kTopGuardOver);
	GuardRead read;
	read.cpuMs = std::chrono::duration<double, std::milli>(threadCpuTime() - cpu).count();
	read.wallMs = std::chrono::duration<double, std::milli>(Clock::now() - wall).count();
	read.userMs = threadMs(false) - user;
	read.systemMs = threadMs(true) - system;
	read.peakKiB = statusKiB("VmHWM:") - rssBefore;
	if (!reading)
		die(reading.error().message);
	read.overKeys = reading->over.size();
	for (const DynamicSetFill &set : reading->fill)
		read.counted += set.elements;
	return read;
}

void measureGuard(NetlinkBackend &backend, const Ruleset &ruleset, const char *what, size_t runs)
{
	auto socket = netlink::Socket::open();
	if (!socket)
		die(socket.error().message);
	uint64_t bytes = 0;
	for (const DynamicSet &set : ruleset.dynamicSets)
		bytes += dumpBytes(*socket, ruleset.table, set.name);
	std::vector<GuardRead> reads;
	for (size_t i = 0; i < runs; i++)
		reads.push_back(readGuardOnce(backend, ruleset));
	std::sort(reads.begin(), reads.end(), [](const GuardRead &a, const GuardRead &b) { return a.cpuMs < b.cpuMs; });
	const GuardRead &median = reads[reads.size() / 2];
	fmt::print("  guard: {}: {} keys counted, {} over keys kept\n"
		   "    CPU per read {:.1f} ms (median of {}; min {:.1f}, max {:.1f}; user {:.0f}, system {:.0f}), "
		   "wall {:.1f} ms\n"
		   "    netlink: the dumps of the {} sets bring {:.1f} MB; peak RSS {} KiB above the resident size\n",
		   what, median.counted, median.overKeys, median.cpuMs, runs, reads.front().cpuMs,
		   reads.back().cpuMs, median.userMs, median.systemMs, median.wallMs,
		   ruleset.dynamicSets.size(), bytes / 1e6, median.peakKiB);
}

// The guard's read with its sets empty, with the v4 rate and open sets full, and with all
// eight full (the over sets too: a node whose every pod went over).
void measureGuardRows()
{
	auto backend = NetlinkBackend::open();
	if (!backend)
		die(backend.error().message);
	const Ruleset ruleset = guardRuleset();
	if (auto applied = (*backend)->apply(ruleset); !applied)
		die(applied.error().message);
	fmt::print("SNAT guard read (section 12): {} dynamic sets of {} keys\n", ruleset.dynamicSets.size(),
		   ruleset.dynamicSets.front().size);
	measureGuard(**backend, ruleset, "every set empty", 7);
	const auto fill = [&](const std::string &name, size_t keys) {
		for (const DynamicSet &set : ruleset.dynamicSets)
			if (set.name == name)
				fillGuardSet(ruleset, set, std::min<size_t>(keys, set.size));
	};
	const std::string rate = guardTrackSetName(GuardLimitKind::newConnections, Family::ipv4);
	const std::string open = guardTrackSetName(GuardLimitKind::openConnections, Family::ipv4);
	// A quarter first: the kernel's dump of a set walks it from the start for each reply
	// (about 32 KiB), so a set 4 times as full costs about 16 times as much.
	fill(rate, 16384);
	fill(open, 16384);
	measureGuard(**backend, ruleset, "guard-rate-v4 and guard-open-v4 at 16,384 keys", 7);
	fill(rate, 65536); // `add element` of a key the set holds changes nothing
	fill(open, 65536);
	measureGuard(**backend, ruleset, "guard-rate-v4 and guard-open-v4 full", 7);
	for (const DynamicSet &set : ruleset.dynamicSets)
		if (set.name != rate && set.name != open)
			fillGuardSet(ruleset, set, set.size);
	measureGuard(**backend, ruleset, "all eight sets full, the over sets too", 5);
	(void)ipmasq::test::run("nft delete table inet " + ruleset.table);
}

} // namespace

int main(int argc, char **argv)
{
	if (const std::string why = ipmasq::test::enterPrivateNetns(); !why.empty()) {
		std::fprintf(stderr, "SKIP: %s\n", why.c_str());
		return 77;
	}
	measureGuardRows();
	if (argc > 1 && std::string(argv[1]) == "guard")
		return 0;
	if (ipmasq::test::run("command -v conntrack >/dev/null") != 0) {
		std::fprintf(stderr, "SKIP: conntrack not found (apt-get install conntrack)\n");
		return 77;
	}
	// nf_conntrack_max is global (read-only here, and never written): a namespace's
	// entries count against it. Stay at 90% of it.
	const uint64_t limit = readNumber("/proc/sys/net/netfilter/nf_conntrack_max");
	const size_t n = limit == 0 ? kWanted : std::min<size_t>(kWanted, limit * 9 / 10);
	fmt::print("SNAT usage read (section 12): nf_conntrack_max {}, {} entries{}\n", limit, n,
		   n < kWanted ? " (scaled down to 90% of the limit)" : "");
	// ctnetlink's NAT setup needs nf_nat: a nat chain in this namespace loads it.
	if (ipmasq::test::run("nft add table ip bench && nft add chain ip bench post "
			      "'{ type nat hook postrouting priority 100; }'") != 0)
		die("nft failed (nft is needed to load nf_nat)");

	// Without the clients first: peak RSS only grows, so the second figure is what the
	// client and destination pairs add.
	insertEntries(n, 2000, 25, true);
	measure("all source-NATed, 2,000 destinations x 25 clients (50,000 pairs)", 7, false);
	measure("all source-NATed, 2,000 destinations x 25 clients (50,000 pairs)", 7);
	insertEntries(n, 2000, 0, true);
	measure("all source-NATed, 2,000 destinations, a client per entry (past the 65,536 pairs)", 7);
	insertEntries(n, n, 0, true);
	measure("all source-NATed, each its own destination (past the 65,536 bound)", 5);
	insertEntries(n, 2000, 0, false);
	measure("none NATed (the kernel's filter leaves them out)", 7);
	(void)ipmasq::test::run("conntrack -F 2>/dev/null; nft delete table ip bench");
	return 0;
}
