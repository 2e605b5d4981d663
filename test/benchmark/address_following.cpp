// SPDX-License-Identifier: Apache-2.0
// Benchmark section 11: following the node's addresses under churn.
#include "address_following.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/node/address_monitor.h"
#include "ip-masq-agent/node/node_address_view.h"
#include "agent_process.h"
#include "netns.h"

namespace ipmasq::bench {

namespace {

using Clock = std::chrono::steady_clock;

double threadCpuMs()
{
	timespec ts{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double median(std::vector<double> v)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void writeFile(const std::string &path, const std::string &content)
{
	std::ofstream(path) << content;
}

// `changes` notifications beside the subnet: additions, then as many removals.
std::string burst(size_t changes)
{
	std::string batch;
	for (size_t i = 0; i < changes / 2; i++)
		batch += fmt::format("address add 198.18.{}.{}/32 dev flap0\n", 4 + i / 250, i % 250 + 1);
	for (size_t i = 0; i < changes / 2; i++)
		batch += fmt::format("address del 198.18.{}.{}/32 dev flap0\n", 4 + i / 250, i % 250 + 1);
	return batch;
}

std::string flapping(size_t flaps)
{
	std::string batch;
	for (size_t i = 0; i < flaps; i++)
		batch += fmt::format("address add 198.18.0.{0}/24 dev flap0\n"
				     "address del 198.18.0.{0}/24 dev flap0\n",
				     i % 250 + 1);
	return batch;
}

std::string podChurn(int pods)
{
	std::string batch;
	for (int k = 0; k < pods; k++)
		batch += fmt::format("link add vp{0} type veth peer name vp{0}p\n"
				     "address add 198.18.2.{1}/24 dev vp{0}\nlink set vp{0} up\n"
				     "link set vp{0}p up\naddress add 2001:db8:97::{2:x}/64 dev vp{0}\n"
				     "route add 198.18.3.{1}/32 dev vp{0}\nroute del 198.18.3.{1}/32 dev vp{0}\n"
				     "link del vp{0}\n",
				     k, k % 250 + 1, k + 1);
	return batch;
}

// Drains and applies until the monitor has been quiet for 20 ms (bounded): the
// notifications read, and whether any were lost.
std::pair<size_t, bool> follow(AddressMonitor &monitor, NodeAddressView &view,
			       const std::vector<Prefix> &watched)
{
	size_t read = 0;
	bool overrun = false;
	for (int rounds = 0; rounds < 10000; rounds++) {
		auto changes = monitor.drain();
		if (!changes)
			break;
		overrun = overrun || changes->overrun;
		for (const AddressChange &change : changes->changes)
			(void)view.apply(change, watched);
		read += changes->changes.size();
		pollfd pfd{monitor.fd(), POLLIN, 0};
		if (changes->changes.empty() && poll(&pfd, 1, 20) != 1)
			break;
	}
	return {read, overrun};
}

// ip_masq_agent_syncs_total of the agent on port 10269, or -1.
long commitsOf()
{
	std::string out;
	test::run("curl -s -m 2 http://127.0.0.1:10269/metrics | sed -n 's/^ip_masq_agent_syncs_total //p'",
		  &out);
	try {
		return std::stol(out);
	} catch (...) {
		return -1;
	}
}

double agentCpuMs(pid_t pid)
{
	const double seconds = test::cpuSeconds(pid);
	return seconds < 0 ? -1 : seconds * 1000;
}

void measureAgent(const std::string &scratch, AddressFollowingFigures &out)
{
	if (test::run("command -v curl >/dev/null") != 0) {
		out.skipped = "curl is missing";
		return;
	}
	writeFile(scratch + "/follow.yaml", "resyncInterval: 1h\noutputAddress: 198.18.1.0/24\n");
	writeFile(scratch + "/pods.batch", podChurn(200));
	writeFile(scratch + "/flap.batch", flapping(10000));
	// A child that dies with the benchmark, whatever ends it (spawnChild), and is killed
	// below otherwise.
	const pid_t agentPid = test::spawnChild({test::agentBinary(), "--config=" + scratch + "/follow.yaml",
						 "--health-addr=127.0.0.1:10269"},
						test::ChildStreams{});
	if (agentPid < 0) {
		out.skipped = "the agent could not be started";
		return;
	}
	struct Killed {
		pid_t pid;
		~Killed()
		{
			kill(pid, SIGKILL);
			waitpid(pid, nullptr, 0);
		}
	} killed{agentPid};
	long commits = -1;
	for (int i = 0; i < 100 && commits <= 0; i++) {
		usleep(50000);
		commits = commitsOf();
	}
	if (commits <= 0) {
		out.skipped = "the agent did not come up";
		return;
	}
	// Counted as the agent sees them: a monitor of our own beside it, with room for the
	// whole churn should this process fall behind (it is root: SO_RCVBUFFORCE).
	auto monitor = AddressMonitor::open();
	if (!monitor) {
		out.skipped = monitor.error().message;
		return;
	}
	const int room = 64 << 20;
	(void)setsockopt(monitor->fd(), SOL_SOCKET, SO_RCVBUFFORCE, &room, sizeof(room));
	const double before = agentCpuMs(agentPid);
	const test::ChildStreams quiet{"/dev/null", test::ChildStreams::kDevNull,
				       test::ChildStreams::kDevNull};
	const pid_t pods = test::spawnChild({"ip", "-batch", scratch + "/pods.batch"}, quiet);
	const pid_t flaps = test::spawnChild({"ip", "-batch", scratch + "/flap.batch"}, quiet);
	NodeAddressView view;
	view.replace({});
	size_t notifications = 0;
	bool podsRunning = pods > 0, flapsRunning = flaps > 0;
	const auto end = Clock::now() + std::chrono::seconds(120);
	while ((podsRunning || flapsRunning) && Clock::now() < end) {
		notifications += follow(*monitor, view, {}).first;
		if (podsRunning && waitpid(pods, nullptr, WNOHANG) == pods)
			podsRunning = false;
		if (flapsRunning && waitpid(flaps, nullptr, WNOHANG) == flaps)
			flapsRunning = false;
	}
	for (const auto &[pid, running] : {std::pair{pods, podsRunning}, std::pair{flaps, flapsRunning}})
		if (running) {
			kill(pid, SIGKILL);
			waitpid(pid, nullptr, 0);
		}
	notifications += follow(*monitor, view, {}).first;
	if (monitor->overruns() > 0)
		out.skipped = "this process's own monitor lost notifications: no count to divide by";
	usleep(200000); // the agent's last drains
	const double cpu = agentCpuMs(agentPid) - before;
	out.agentCommits = commitsOf() - commits;
	if (notifications > 0 && before >= 0 && out.skipped.empty())
		out.agentCpuMsPer1000 = cpu * 1000 / static_cast<double>(notifications);
	std::remove((scratch + "/follow.yaml").c_str());
	std::remove((scratch + "/pods.batch").c_str());
	std::remove((scratch + "/flap.batch").c_str());
}

} // namespace

AddressFollowingFigures measureAddressFollowing(const std::string &scratch)
{
	AddressFollowingFigures out;
	std::string bulk;
	for (int i = 0; i < 5000; i++)
		bulk += fmt::format("address add 198.19.{}.{}/32 dev bulk0\n", i / 250, i % 250 + 1);
	writeFile(scratch + "/bulk.batch", bulk);
	test::run("ip link add bulk0 type veth peer name bulk0p && ip link set bulk0 up && "
		  "ip link add flap0 type veth peer name flap0p && ip link set flap0 up && "
		  "ip addr add 198.18.1.5/24 dev flap0 && ip -batch " + scratch + "/bulk.batch");
	std::remove((scratch + "/bulk.batch").c_str());
	const std::vector<Prefix> watched{parsePrefix("198.18.1.0/24").value_or(Prefix{})};

	auto monitor = AddressMonitor::open();
	auto first = readNodeAddressesUnnamed();
	if (!monitor || !first)
		return out;
	out.addresses = first->size();
	NodeAddressView view;
	view.replace(*first);

	std::vector<double> unnamed, named;
	for (int i = 0; i < 15; i++) {
		auto start = Clock::now();
		(void)readNodeAddressesUnnamed();
		unnamed.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
		start = Clock::now();
		(void)readNodeAddresses();
		named.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
	}
	out.readUnnamedMs = median(unnamed);
	out.readNamedMs = median(named);

	for (const size_t changes : {2, 10, 100, 1000}) {
		AddressBurstRow row;
		row.changes = changes;
		writeFile(scratch + "/burst.batch", burst(changes));
		std::vector<double> wall, cpu, reread, choose;
		for (int run = 0; run < 7; run++) {
			(void)follow(*monitor, view, watched); // nothing left from before
			test::run("ip -batch " + scratch + "/burst.batch");
			// The kernel queued every notification before `ip` returned.
			const auto start = Clock::now();
			const double cpuStart = threadCpuMs();
			size_t read = 0;
			bool overrun = false;
			while (read < changes) {
				auto drained = monitor->drain();
				if (!drained || drained->changes.empty())
					break;
				overrun = overrun || drained->overrun;
				for (const AddressChange &change : drained->changes)
					(void)view.apply(change, watched);
				read += drained->changes.size();
			}
			cpu.push_back(threadCpuMs() - cpuStart);
			wall.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
			// Choosing again, which only a change inside a subnet asks for.
			const auto chooseStart = Clock::now();
			if (const NodeAddresses addresses = view.addresses(); addresses.known())
				(void)pickAddressIn(watched.front(), addresses.addresses);
			choose.push_back(
				std::chrono::duration<double, std::milli>(Clock::now() - chooseStart).count());
			row.overruns += overrun || read < changes ? 1 : 0;
			const auto rereadStart = Clock::now();
			(void)readNodeAddresses();
			reread.push_back(
				std::chrono::duration<double, std::milli>(Clock::now() - rereadStart).count());
		}
		row.followMs = median(wall);
		row.followCpuMs = median(cpu);
		row.rereadMs = median(reread);
		out.chooseMs = median(choose);
		out.bursts.push_back(row);
	}
	std::remove((scratch + "/burst.batch").c_str());

	// Reads of every address while addresses flap, as the agent used to read at every
	// notification; and the same notifications followed instead.
	writeFile(scratch + "/flap.batch", flapping(10000));
	(void)follow(*monitor, view, watched);
	const pid_t flap = test::spawnChild({"ip", "-batch", scratch + "/flap.batch"},
					    test::ChildStreams{"/dev/null", test::ChildStreams::kDevNull,
							       test::ChildStreams::kDevNull});
	double followCpu = 0;
	const auto drainOnce = [&] {
		const double cpuStart = threadCpuMs();
		if (auto drained = monitor->drain()) {
			for (const AddressChange &change : drained->changes)
				(void)view.apply(change, watched);
			out.notificationsUnderFlapping += drained->changes.size();
		}
		followCpu += threadCpuMs() - cpuStart;
	};
	for (int i = 0; i < 500 && waitpid(flap, nullptr, WNOHANG) == 0; i++) {
		out.readsUnderFlapping++;
		if (!readNodeAddresses())
			out.readsFailedUnderFlapping++;
		drainOnce();
	}
	if (waitpid(flap, nullptr, WNOHANG) == 0) {
		kill(flap, SIGKILL);
		waitpid(flap, nullptr, 0);
	}
	for (int i = 0; i < 100; i++) // what is left, bounded
		drainOnce();
	out.followCpuUnderFlappingMs = followCpu;
	std::remove((scratch + "/flap.batch").c_str());

	measureAgent(scratch, out);
	test::run("ip link del bulk0; ip link del flap0");
	return out;
}

void printAddressFollowing(const AddressFollowingFigures &f)
{
	fmt::print("\n11. Following the node's addresses ({} on the node, 5,000 of them on another "
		   "interface), in this process:\n   one read of every address: {:.2f} ms; with the "
		   "link dump for names (what the agent did at every notification before): {:.2f} ms\n",
		   f.addresses, f.readUnnamedMs, f.readNamedMs);
	fmt::print("   per burst of N notifications beside the subnet: drain + apply, wall and CPU in "
		   "ms (median of 7), against one read of\n   every address and link; choosing the "
		   "subnet's address again (a change inside it): {:.3f} ms\n", f.chooseMs);
	fmt::print("{:>16} {:>10} {:>10} {:>10} {:>10}\n", "notifications", "follow", "CPU",
		   "re-read", "overruns");
	for (const AddressBurstRow &r : f.bursts)
		fmt::print("{:>16} {:>10.3f} {:>10.3f} {:>10.2f} {:>10}\n", r.changes, r.followMs,
			   r.followCpuMs, r.rereadMs, r.overruns);
	fmt::print("   while addresses flap as fast as ip changes them: {} notifications followed "
		   "in {:.1f} ms of CPU ({:.2f} us each);\n   reads of every address meanwhile that "
		   "gave up (interrupted 5 times in a row): {} of {}\n",
		   f.notificationsUnderFlapping, f.followCpuUnderFlappingMs,
		   f.notificationsUnderFlapping
			   ? f.followCpuUnderFlappingMs * 1000 / static_cast<double>(f.notificationsUnderFlapping)
			   : 0.0,
		   f.readsFailedUnderFlapping, f.readsUnderFlapping);
	if (f.agentCpuMsPer1000 < 0)
		fmt::print("   the agent under churn: skipped ({})\n", f.skipped);
	else
		fmt::print("   the agent with an outputAddress subnet through 200 pods' veths and 20,000 "
			   "address changes beside it: {:.3f} ms of CPU per 1,000 notifications, {} "
			   "tables re-made\n",
			   f.agentCpuMsPer1000, f.agentCommits);
}

} // namespace ipmasq::bench
