// SPDX-License-Identifier: Apache-2.0
// The pod network's files through the running agent, judged by real traffic (a pod namespace
// connects through the node, this test's namespace, to an external host that says the source
// it saw): the CNI's config directory (a bridge plugin's conflist with host-local ranges: its
// subnet not masqueraded, the file rewritten live, a second file that comes and goes, masqueraded
// again after the hold-down); Flannel's order, /run/flannel made after the agent started, found
// by the 10 s retry, which watches the directory from then on; and a failed read mended where no
// watch sees it, found by the same retry. (pod_network_test runs routes and subnet.env written
// in a directory that exists; route_discovery_test has the real CNI plugins read the conflist.)
#include <catch2/catch.hpp>

#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/node/pod_network.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "netns.h"
#include "traffic_support.h"

using namespace ipmasq;
using namespace ipmasq::test;
using namespace std::chrono_literals;

namespace {

// What the agent sees at once (inotify) is waited for this long; what only its retry finds
// (every PodNetwork::kRetryPeriod, 10 s), six periods. Both only catch a hang.
constexpr auto kHang = 30s;
constexpr auto kRetrySeen = 6 * PodNetwork::kRetryPeriod;
constexpr auto kHoldDown = 1s;
const std::string kHealth = "http://127.0.0.1:10263";

// The source the external host sees for a connection from the pod to `server`.
std::string seenFrom(const Topology &net, const std::string &server)
{
	return connectFromPod(net, AF_INET, server, kServerPort).address;
}

bool ready()
{
	return curlGet(kHealth + "/readyz").rfind("200", 0) == 0;
}

// A config that lists no pod range: the section's `sources` find them. Both test servers'
// networks are inside `within`.
std::string discoveryConfig(const std::string &sources)
{
	return fmt::format("nonMasqueradeCIDRs: [10.0.0.0/8]\n"
			   "nonMasqueradeDiscovery:\n"
			   "  within: [203.0.113.0/24, 192.0.2.0/24]\n"
			   "{}"
			   "  holdDown: {}s\n",
			   sources, kHoldDown.count());
}

// `content` in `path`, atomically (a temporary file beside it, renamed), as flanneld and
// careful tools write.
void writeAtomically(const std::string &path, const std::string &content)
{
	const std::string tmp = path + ".tmp";
	std::ofstream(tmp) << content;
	REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0);
}

// The network config of the bridge plugin with host-local IPAM, as a CNI installs it
// (route_discovery_test has the real plugins set a pod up from this shape).
std::string bridgeConflist(const std::string &subnet)
{
	return fmt::format(R"({{"cniVersion": "0.4.0", "name": "podnet", "plugins": [
  {{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
    "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{}"}}]], "routes": [{{"dst": "0.0.0.0/0"}}]}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
]}}
)",
			   subnet);
}

// One plugin's config (*.conf): ptp, with host-local's older single subnet.
std::string ptpConf(const std::string &subnet)
{
	return fmt::format(R"({{"cniVersion": "0.4.0", "name": "ptpnet", "type": "ptp",
  "ipam": {{"type": "host-local", "subnet": "{}"}}}}
)",
			   subnet);
}

// Whether process `pid` holds an inotify watch on the inode of `path`: the kernel lists each
// watch of an inotify descriptor in /proc/PID/fdinfo ("inotify wd:1 ino:1a2b sdev:..."). A
// change under a watched directory is seen when it is made; without the watch only at the
// next retry, which a test could tell from the watch only by the clock.
bool watches(pid_t pid, const std::string &path)
{
	struct stat st {};
	REQUIRE(stat(path.c_str(), &st) == 0);
	const std::string inode = fmt::format(" ino:{:x} ", st.st_ino);
	std::error_code error;
	size_t looked = 0;
	for (auto it = std::filesystem::directory_iterator(fmt::format("/proc/{}/fdinfo", pid), error);
	     !error && it != std::filesystem::directory_iterator() && looked++ < 4096; it.increment(error)) {
		std::ifstream in(it->path());
		std::string line;
		while (std::getline(in, line))
			if (line.starts_with("inotify ") && line.find(inode) != std::string::npos)
				return true;
	}
	return false;
}

// The test's own inotify watch on a directory, for every event that changes what is in it:
// proof that a change made elsewhere reached no watch there.
class ChangeProbe
{
public:
	explicit ChangeProbe(const std::string &dir) : fd_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
	{
		REQUIRE(fd_.isValid());
		REQUIRE(inotify_add_watch(fd_.get(), dir.c_str(),
					  IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO |
						  IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF) >= 0);
	}
	// Bytes of events read since the last call; 0 when nothing happened.
	size_t drain()
	{
		alignas(inotify_event) char buffer[4096];
		size_t total = 0;
		for (int i = 0; i < 64; i++) {
			const ssize_t n = read(fd_.get(), buffer, sizeof(buffer));
			if (n <= 0)
				break;
			total += size_t(n);
		}
		return total;
	}

private:
	UniqueFd fd_;
};

std::string flannelStale()
{
	return metricAt(kHealth, "ip_masq_agent_discovery_stale{source=\"flannelSubnetEnv\"}");
}

// Each case's node: the pod, the external host and its server, a scratch directory.
struct PodNetworkNode {
	Topology net;
	SourceEchoServer server{net.external};
	TempDir dir;

	std::string nomasqSet() const
	{
		std::string out;
		(void)run("nft -a list set inet ip-masq-agent nomasq-v4 2>&1", &out);
		return out;
	}
	std::string setHandle() const
	{
		return runOrFail("nft -a list set inet ip-masq-agent nomasq-v4 | grep -o 'handle [0-9]*'");
	}
};

} // namespace

TEST_CASE_METHOD(PodNetworkNode,
		 "cniConfDir through the agent: a bridge conflist's host-local subnet is not masqueraded; the "
		 "file rewritten live; a second file that comes and goes, masqueraded again after the hold-down")
{
	const std::string netd = dir.file("net.d");
	REQUIRE(mkdir(netd.c_str(), 0755) == 0);
	const std::string conflist = netd + "/10-podnet.conflist";
	// The pod network stands in as 192.0.2.0/24: the external host's second address is in it.
	writeAtomically(conflist, bridgeConflist("192.0.2.0/24"));
	dir.write("config", discoveryConfig("  cniConfDir: " + netd + "\n"));
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	const auto context = [&] { return agent.log() + "\n" + nomasqSet(); };
	requireWithin(ready, kHang, agent, "the agent ready", context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent,
		      "the conflist's subnet not masqueraded", context);
	CHECK(seenFrom(net, kServerV4) == kNodeV4); // no file gives 203.0.113.0/24 yet
	CHECK(metricAt(kHealth, "ip_masq_agent_discovered_ranges{source=\"cniConfDir\"}") == "1");
	CHECK_THAT(curlGet(kHealth + "/readyz?verbose"),
		   Catch::Contains("info: pod network, not masqueraded: 192.0.2.0/24: bridge ranges subnet in " +
				   conflist + ":3"));
	// The directory is watched: a change is seen when it is made, not at the next retry.
	CHECK(watches(agent.pid(), netd));
	const std::string handle = setHandle();

	// Rewritten in place (truncated, then written, as an editor does): the new subnet goes in
	// force, the old one is masqueraded again once its hold-down ends.
	dir.overwrite("net.d/10-podnet.conflist", bridgeConflist("203.0.113.0/24"));
	requireWithin([&] { return seenFrom(net, kServerV4) == kPodV4; }, kHang, agent,
		      "the rewritten subnet not masqueraded", context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the subnet the file no longer gives masqueraded again", context);

	// A second file, one plugin's .conf, gives 192.0.2.0/24 again.
	const std::string ptp = netd + "/20-ptp.conf";
	writeAtomically(ptp, ptpConf("192.0.2.0/24"));
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kHang, agent,
		      "the second file's subnet not masqueraded", context);
	CHECK(metricAt(kHealth, "ip_masq_agent_discovered_ranges{source=\"cniConfDir\"}") == "2");

	// Removed: its subnet stays for the hold-down, then is masqueraded; the other file's stays.
	const auto removed = std::chrono::steady_clock::now();
	REQUIRE(unlink(ptp.c_str()) == 0);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the removed file's subnet masqueraded again", context);
	CHECK(std::chrono::steady_clock::now() - removed >= kHoldDown); // never before its hold-down
	CHECK(seenFrom(net, kServerV4) == kPodV4);
	CHECK_THAT(agent.log(), Catch::Contains("pod network: 192.0.2.0/24 is no longer found on the node"));
	CHECK(metricAt(kHealth, "ip_masq_agent_discovered_ranges{source=\"cniConfDir\"}") == "1");
	// Element updates all along: the set keeps its handle.
	CHECK(setHandle() == handle);
	CHECK_THAT(agent.log(), Catch::Contains("(pod network change)") && Catch::Contains("by an element update"));
}

TEST_CASE_METHOD(PodNetworkNode,
		 "Flannel's order: /run/flannel made after the agent started, subnet.env in it: found by the 10 s "
		 "retry, which watches the directory from then on")
{
	const std::string runDir = dir.file("run");
	REQUIRE(mkdir(runDir.c_str(), 0755) == 0);
	const std::string flannelDir = runDir + "/flannel";
	const std::string subnetEnv = flannelDir + "/subnet.env";
	dir.write("config", discoveryConfig("  flannelSubnetEnv: " + subnetEnv + "\n"));
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	const auto context = [&] { return agent.log() + "\n" + nomasqSet(); };
	requireWithin(ready, kHang, agent, "the agent ready", context);
	CHECK(seenFrom(net, kOtherServerV4) == kNodeV4);
	CHECK_THAT(agent.log(), Catch::Contains(subnetEnv + " (flannelSubnetEnv): does not exist (yet): waiting for it"));
	CHECK(flannelStale() == "0"); // a file not there yet is waited for, not a failed read

	// flanneld starts: its directory, then its file in it.
	REQUIRE(mkdir(flannelDir.c_str(), 0755) == 0);
	writeAtomically(subnetEnv, "FLANNEL_NETWORK=192.0.2.0/24\nFLANNEL_SUBNET=192.0.2.1/26\n");
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kRetrySeen, agent,
		      "FLANNEL_NETWORK found by the retry", context);
	CHECK_THAT(agent.log(), Catch::Contains(subnetEnv + " (flannelSubnetEnv): there now, 1 range"));
	// The retry that found it also watches the new directory: what follows is seen when made.
	requireWithin([&] { return watches(agent.pid(), flannelDir); }, kHang, agent,
		      "the agent watching the directory made after its start", context);
	writeAtomically(subnetEnv, "FLANNEL_NETWORK=203.0.113.0/24\n");
	requireWithin([&] { return seenFrom(net, kServerV4) == kPodV4; }, kHang, agent,
		      "the rewritten FLANNEL_NETWORK not masqueraded", context);
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kNodeV4; }, kHang, agent,
		      "the old FLANNEL_NETWORK masqueraded again", context);
}

TEST_CASE_METHOD(PodNetworkNode,
		 "a failed read is tried again every 10 s: subnet.env unreadable, mended where no watch sees it "
		 "(the file is a link into another directory), then malformed there: stale, its range stays")
{
	// subnet.env is a link into a directory the agent does not watch, as a ConfigMap volume's
	// files are: a change there reaches no watch of the agent's, only its retry.
	const std::string flannelDir = dir.file("flannel");
	const std::string elsewhere = dir.file("elsewhere");
	const std::string target = elsewhere + "/subnet.env";
	const std::string subnetEnv = flannelDir + "/subnet.env";
	REQUIRE(mkdir(flannelDir.c_str(), 0755) == 0);
	REQUIRE(mkdir(elsewhere.c_str(), 0755) == 0);
	REQUIRE(mkdir(target.c_str(), 0755) == 0); // a directory where the file should be: unreadable
	REQUIRE(symlink(target.c_str(), subnetEnv.c_str()) == 0);
	dir.write("config", discoveryConfig("  flannelSubnetEnv: " + subnetEnv + "\n"));
	ChangeProbe probe(flannelDir);
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	const auto context = [&] {
		return agent.log() + "\n" + nomasqSet() + "\n/readyz?verbose: " + curlGet(kHealth + "/readyz?verbose");
	};
	requireWithin(ready, kHang, agent, "the agent ready", context);
	requireWithin([] { return flannelStale() == "1"; }, kHang, agent, "the unreadable file stale", context);
	CHECK_THAT(curlGet(kHealth + "/readyz?verbose"),
		   Catch::Contains("warning: pod network: " + subnetEnv + " could not be read"));
	CHECK(seenFrom(net, kOtherServerV4) == kNodeV4);

	// Mended: the directory replaced by a good file, in the directory the link points into.
	REQUIRE(rmdir(target.c_str()) == 0);
	writeAtomically(target, "FLANNEL_NETWORK=192.0.2.0/24\n");
	requireWithin([&] { return seenFrom(net, kOtherServerV4) == kPodV4; }, kRetrySeen, agent,
		      "the mended file read by the retry", context);
	requireWithin([] { return flannelStale() == "0"; }, kHang, agent, "the source no longer stale", context);

	// Malformed the same way: stale again, and what it gave stays.
	writeAtomically(target, "FLANNEL_NETWORK=not-a-cidr\n");
	requireWithin([] { return flannelStale() == "1"; }, kRetrySeen, agent, "the malformed file stale", context);
	CHECK_THAT(agent.log(), Catch::Contains(subnetEnv + ":1: FLANNEL_NETWORK"));
	CHECK(seenFrom(net, kOtherServerV4) == kPodV4);
	// None of it reached a watch of the agent's directory: the retry found each change.
	CHECK(probe.drain() == 0);
}
