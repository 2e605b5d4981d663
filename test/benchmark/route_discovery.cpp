// SPDX-License-Identifier: Apache-2.0
// Benchmark section 14 (docs/performance.md): what following the node's routes for
// nonMasqueradeDiscovery costs next to a large routing table of other protocols: the
// reading (CPU, wall), the memory it keeps, and the CPU per notification, selected or
// ignored. In a private network namespace; figures are printed, not asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <malloc.h>
#include <fstream>
#include <poll.h>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/node/discovered_ranges.h"
#include "ip-masq-agent/node/route_source.h"
#include "ip-masq-agent/node/pod_network.h"
#include "machine.h"
#include "netns.h"

using namespace ipmasq;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kSelected = 1000;
constexpr int kChurn = 1000; // selected routes added, then removed, while following
constexpr int kIgnoredChurn = 10000; // routes of another protocol added, then removed
const char *const kScratch = "/tmp/ipmasq-bench-routes";

[[noreturn]] void die(const std::string &why)
{
	std::fprintf(stderr, "bench-route-discovery: %s\n", why.c_str());
	std::exit(1);
}

double threadCpuMs()
{
	timespec ts{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double msSince(Clock::time_point start)
{
	return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A line of /proc/self/status in KiB: VmHWM (the peak resident memory), VmRSS.
long statusKiB(const char *key)
{
	std::ifstream in("/proc/self/status");
	for (std::string line; std::getline(in, line);)
		if (line.rfind(key, 0) == 0)
			return std::atol(line.c_str() + std::strlen(key));
	return -1;
}

// The heap in use (malloc's own count): what the source keeps, exactly, where the resident
// size moves by pages that an earlier row freed.
long heapKiB()
{
	return static_cast<long>(mallinfo2().uordblks / 1024);
}

void batch(const std::string &lines)
{
	std::ofstream(kScratch) << lines;
	if (test::run(fmt::format("ip -batch {}", kScratch)) != 0)
		die("ip -batch failed");
}

// The i-th route of the other protocol: /32s from 198.18.0.0 on (the /15, then 100.64/10).
std::string otherRoute(int i)
{
	if (i < 131072)
		return fmt::format("198.{}.{}.{}/32", 18 + i / 65536, i / 256 % 256, i % 256);
	i -= 131072;
	return fmt::format("100.{}.{}.{}/32", 64 + i / 65536, i / 256 % 256, i % 256);
}

std::string selectedRoute(int i) // /29s in 10.244.0.0/16
{
	return fmt::format("10.244.{}.{}/29", i / 32, (i % 32) * 8);
}

struct Row {
	int others = 0;
	bool byInterface = false;
	double readCpuMs = 0, readWallMs = 0;
	long heapKeptKiB = 0;
	size_t kept = 0;
	double selectedUs = 0, ignoredUs = 0; // CPU per notification
	uint64_t overruns = 0, rereads = 0;
};

// Reads until `changes` changes came, or nothing more arrives for a second; the thread's CPU.
double follow(RouteSource &source, DiscoveredRanges &model, size_t changes, uint64_t &notifications)
{
	const double cpu = threadCpuMs();
	const uint64_t before = source.notifications();
	size_t seen = 0;
	for (int idle = 0; idle < 10 && (changes == 0 || seen < changes);) {
		pollfd pfd{source.fd(), POLLIN, 0};
		if (poll(&pfd, 1, 100) <= 0) {
			idle++;
			continue;
		}
		RouteSourceUpdate update = source.drain();
		if (update.update.mustReread)
			update = source.reread();
		seen += update.update.changes.size();
		model.applyRoutes(update.update, Clock::now());
		(void)model.takeChanges(Clock::now());
	}
	notifications = source.notifications() - before;
	return threadCpuMs() - cpu;
}

Row measure(int others, bool byInterface)
{
	Row row;
	row.others = others;
	row.byInterface = byInterface;
	(void)test::run("ip route flush proto bgp; ip route flush proto bird");
	std::string lines;
	for (int i = 0; i < others; i++)
		lines += fmt::format("route add {} via 192.0.2.2 proto bgp\n", otherRoute(i));
	for (int i = 0; i < kSelected; i++)
		lines += fmt::format("route add {} via 198.51.100.3 proto bird\n", selectedRoute(i));
	batch(lines);

	RouteFilter filter;
	// By protocol the kernel drops the other routes from the dump; by interface every
	// route of the main table comes, and is dropped here.
	if (byInterface)
		filter.interfaces = {InterfacePattern{"tun0", false, {}}};
	else
		filter.protocols = {RouteProtocol{12}};
	filter.within = {builtinPrefix("10.244.0.0/16")};
	const long heapBefore = heapKiB();
	auto opened = RouteSource::open(filter);
	if (!opened)
		die(opened.error().message);
	DiscoveredRanges model({filter.within, std::chrono::seconds(0), false, kMaxDiscoveredPrefixes});
	const double cpu = threadCpuMs();
	const auto start = Clock::now();
	RouteSourceUpdate first = opened->reread();
	row.readWallMs = msSince(start);
	row.readCpuMs = threadCpuMs() - cpu;
	if (first.failure)
		die(first.failure->message);
	model.applyRoutes(first.update, Clock::now());
	(void)model.takeChanges(Clock::now());
	row.kept = opened->routes().size();
	row.heapKeptKiB = heapKiB() - heapBefore;

	std::string add, del;
	for (int i = kSelected; i < kSelected + kChurn; i++) {
		add += fmt::format("route add {} via 198.51.100.3 proto bird\n", selectedRoute(i));
		del += fmt::format("route del {} via 198.51.100.3 proto bird\n", selectedRoute(i));
	}
	uint64_t n = 0;
	batch(add);
	double selectedCpu = follow(*opened, model, kChurn, n);
	batch(del);
	uint64_t m = 0;
	selectedCpu += follow(*opened, model, kChurn, m);
	row.selectedUs = selectedCpu * 1e3 / static_cast<double>(std::max<uint64_t>(n + m, 1));

	std::string ignoredAdd, ignoredDel;
	for (int i = others; i < others + kIgnoredChurn / 2; i++) {
		ignoredAdd += fmt::format("route add {} via 192.0.2.2 proto bgp\n", otherRoute(i));
		ignoredDel += fmt::format("route del {} via 192.0.2.2 proto bgp\n", otherRoute(i));
	}
	batch(ignoredAdd + ignoredDel);
	const double ignoredCpu = follow(*opened, model, 0, n);
	row.ignoredUs = ignoredCpu * 1e3 / static_cast<double>(std::max<uint64_t>(n, 1));
	row.overruns = opened->overruns();
	row.rereads = opened->rereads();
	return row;
}

// A pod network change in the daemon: the ranges in force put into the kept config (here
// 100,000 CIDRs of the operator's and kSelected discovered ones, found in the CNI's configs),
// then its desired state made, with the discovered-cni-v4 set. Also the copy of the whole
// config that a change cost before putDiscovered (the config was taken by value), for
// comparison. CPU per change, the mean of kRounds.
void measureConfigUpdate()
{
	constexpr int kCidrs = 100000, kRounds = 20;
	LoadedConfig kept;
	kept.config.files = {"bench.yaml"};
	kept.config.nonMasqueradeCIDRsGiven = true;
	kept.config.nonMasqueradeDiscovery.emplace();
	kept.config.nonMasqueradeDiscovery->within = {builtinPrefix("10.244.0.0/16")};
	kept.config.nonMasqueradeDiscovery->cniConfDir = DiscoveryPath{"/etc/cni/net.d", {}};
	for (int i = 0; i < kCidrs; i++) {
		auto prefix = parsePrefix(otherRoute(i));
		if (!prefix)
			die(prefix.error().message);
		prefix->spelling.clear();
		prefix->origin = Origin{0, static_cast<uint32_t>(i + 1)};
		kept.config.nonMasqueradeCIDRs.push_back(std::move(*prefix));
	}
	DiscoveredRanges model({{builtinPrefix("10.244.0.0/16")}, std::chrono::seconds(0), false, kMaxDiscoveredPrefixes});
	std::vector<Sighting> sightings;
	for (int i = 0; i < kSelected; i++)
		sightings.push_back({builtinPrefix(selectedRoute(i)), "bench"});
	model.replace(DiscoverySource::cni, "bench", std::move(sightings), Clock::now());
	(void)model.takeChanges(Clock::now());
	putDiscovered(kept.config, model); // the first, as at start-up

	double cpu = threadCpuMs();
	for (int i = 0; i < kRounds; i++)
		putDiscovered(kept.config, model);
	const double inPlaceMs = (threadCpuMs() - cpu) / kRounds;
	cpu = threadCpuMs();
	for (int i = 0; i < kRounds; i++) {
		LoadedConfig copy = kept;
		putDiscovered(copy.config, model);
	}
	const double copiedMs = (threadCpuMs() - cpu) / kRounds;
	cpu = threadCpuMs();
	size_t elements = 0;
	for (int i = 0; i < kRounds; i++)
		elements += desiredFromConfig(kept, ConfigLocation::file("bench.yaml"), RulesetOptions{}, NodeAddresses{})
				    .discovered.size();
	const double desiredMs = (threadCpuMs() - cpu) / kRounds;
	fmt::print("  a pod network change with a config of {} CIDRs and {} discovered ranges, CPU per change: the "
		   "ranges put into the kept config {:.2f} ms (copying the config first, as before: {:.2f} ms); the "
		   "desired state made from it {:.1f} ms ({} discovered entries)\n",
		   kCidrs, kSelected, inPlaceMs, copiedMs, desiredMs, elements / kRounds);
}

} // namespace

int main()
{
	if (const std::string why = test::enterPrivateNetns(); !why.empty()) {
		std::fprintf(stderr, "SKIP: %s\n", why.c_str());
		return 77;
	}
	if (test::run("ip link add eth0 type veth peer name eth0p && ip link set eth0 up && "
		      "ip link set eth0p up && ip addr add 192.0.2.1/24 dev eth0 && "
		      "ip link add tun0 type veth peer name tun0p && ip link set tun0 up && "
		      "ip link set tun0p up && ip addr add 198.51.100.1/24 dev tun0") != 0)
		die("cannot set the namespace up");
	std::vector<int> sizes{0, 100000, 1000000};
	if (const char *env = std::getenv("IPMASQ_BENCH_ROUTES"))
		sizes = {std::atoi(env)};
	fmt::print("Following routes for nonMasqueradeDiscovery (section 14): {}, load {}\n",
		   bench::cpuModel(), bench::loadAverage());
	fmt::print("  {} routes of proto bird through tun0 selected (by protocol, or by interface), next "
		   "to N routes of proto bgp through eth0; {} selected "
		   "added and removed, {} of proto bgp added and removed while following\n",
		   kSelected, kChurn, kIgnoredChurn);
	fmt::print("  {:>9} | {:>9} | {:>14} | {:>12} | {:>6} | {:>13} | {:>22} | {:>21} | {}\n", "N others", "selected",
		   "read, CPU ms", "read, wall ms", "kept", "heap kept KiB", "CPU per selected, µs",
		   "CPU per ignored, µs", "overruns, readings");
	for (const int others : sizes)
		for (const bool byInterface : {false, true}) {
		const Row row = measure(others, byInterface);
		fmt::print("  {:>9} | {:>9} | {:>14.1f} | {:>12.1f} | {:>6} | {:>13} | {:>22.1f} | {:>21.1f} | {}, {}\n",
			   row.others, row.byInterface ? "interface" : "protocol", row.readCpuMs, row.readWallMs, row.kept, row.heapKeptKiB, row.selectedUs,
			   row.ignoredUs, row.overruns, row.rereads);
	}
	measureConfigUpdate();
	fmt::print("  the benchmark process's peak resident memory (VmHWM, the ip -batch texts included): {} KiB\n",
		   statusKiB("VmHWM:"));
	(void)test::run(fmt::format("rm -f {}", kScratch));
	return 0;
}
