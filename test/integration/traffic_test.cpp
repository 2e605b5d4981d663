// SPDX-License-Identifier: Apache-2.0
// Real traffic through the agent's table: a pod, the node and an external host, each in a
// network namespace of its own; a TCP server on the external host reports the source it sees.
//
//   pod                    node (this process's private ns)             external
//   eth0 198.51.100.2/24 --- to-pod 198.51.100.1/24                        eth0 203.0.113.2/24
//        2001:db8:1::2/64           2001:db8:1::1/64                            2001:db8:2::2/64
//                                   to-ext 203.0.113.1/24 --------------------- (external eth0)
//                                          2001:db8:2::1/64
//
// The node forwards and runs the agent; the external host routes the pod subnets back via
// the node, so a reply to an un-NATed pod address returns too. The pod and external
// namespaces are held only by file descriptors of this process: they have no name and
// vanish with it, whatever way it ends.
#include <catch2/catch.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <memory>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/unique_fd.h"
#include "agent_process.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;
using ipmasq::UniqueFd;

namespace {

constexpr uint16_t kServerPort = 8080;
const std::string kServerV4 = "203.0.113.2";
const std::string kServerV6 = "2001:db8:2::2";
const std::string kPodV4 = "198.51.100.2";
const std::string kPodV6 = "2001:db8:1::2";
const std::string kNodeV4 = "203.0.113.1"; // the node's address towards the external host
const std::string kNodeV6 = "2001:db8:2::1";

// A long resync, so anything that happens faster was triggered by the config change.
const std::string kSlowResync = "resyncInterval: 1h\n";

// Runs `fn` on a short-lived thread that first joins the network namespace `nsFd`.
// setns() moves only the calling thread, so the test thread stays in the node, while
// sockets `fn` creates and processes it starts belong to that namespace for good.
template<typename Fn>
auto inNetns(int nsFd, Fn fn)
{
	decltype(fn()) result{};
	int error = 0;
	std::thread thread([&] {
		if (setns(nsFd, CLONE_NEWNET) != 0) {
			error = errno;
			return;
		}
		result = fn();
	});
	thread.join();
	INFO("setns: " << std::strerror(error));
	REQUIRE(error == 0);
	return result;
}

// A network namespace known only by a file descriptor: no name under /run/netns, so
// nothing to leave behind. The kernel frees it (and the veth ends in it) once the fd is
// closed, at the latest when the test process exits.
class Netns
{
public:
	Netns()
	{
		int error = 0;
		std::thread thread([&] {
			if (unshare(CLONE_NEWNET) != 0) {
				error = errno;
				return;
			}
			fd_.reset(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
			if (!fd_.isValid())
				error = errno;
		});
		thread.join();
		INFO("new network namespace: " << std::strerror(error));
		REQUIRE(fd_.isValid());
	}

	int fd() const { return fd_.get(); }
	// The namespace as a path that `ip link ... netns PATH` accepts.
	std::string path() const { return fmt::format("/proc/{}/fd/{}", getpid(), fd_.get()); }

	std::string runOrFail(const std::string &command) const
	{
		std::string output;
		const int status = inNetns(fd(), [&] { return run(command, &output, true); });
		INFO("in a test namespace: " << command << "\noutput: " << output);
		REQUIRE(status == 0);
		return output;
	}

private:
	UniqueFd fd_;
};

void writeSysctl(const std::string &name, const std::string &value)
{
	std::ofstream out("/proc/sys/" + name);
	out << value;
	out.close();
	INFO("sysctl " << name);
	REQUIRE(out.good());
}

// The three hosts, wired and addressed. DAD is off everywhere, so every address, the
// link-local ones that neighbour discovery uses included, is usable at once.
class Topology
{
public:
	Topology()
	{
		removeLinks(); // an earlier case's links, if its namespaces are still being freed
		const std::string noDad = "echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad && "
					  "echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad";
		runOrFail(noDad);
		pod.runOrFail(noDad);
		external.runOrFail(noDad);
		// The node is this process's private namespace: its sysctls are its own.
		writeSysctl("net/ipv4/ip_forward", "1");
		writeSysctl("net/ipv6/conf/all/forwarding", "1");

		runOrFail("ip link add to-pod type veth peer name eth0 netns " + pod.path());
		runOrFail("ip link add to-ext type veth peer name eth0 netns " + external.path());
		runOrFail("ip addr add 198.51.100.1/24 dev to-pod && "
			  "ip addr add 2001:db8:1::1/64 dev to-pod nodad && ip link set to-pod up && "
			  "ip addr add 203.0.113.1/24 dev to-ext && "
			  "ip addr add 2001:db8:2::1/64 dev to-ext nodad && ip link set to-ext up");
		pod.runOrFail(fmt::format("ip link set lo up && ip addr add {}/24 dev eth0 && "
					  "ip addr add {}/64 dev eth0 nodad && ip link set eth0 up && "
					  "ip route add default via 198.51.100.1 && "
					  "ip -6 route add default via 2001:db8:1::1",
					  kPodV4, kPodV6));
		external.runOrFail(fmt::format("ip link set lo up && ip addr add {}/24 dev eth0 && "
					       "ip addr add {}/64 dev eth0 nodad && ip link set eth0 up && "
					       "ip route add 198.51.100.0/24 via 203.0.113.1 && "
					       "ip -6 route add 2001:db8:1::/64 via 2001:db8:2::1",
					       kServerV4, kServerV6));
	}

	~Topology() { removeLinks(); }

	Topology(const Topology &) = delete;
	Topology &operator=(const Topology &) = delete;

	Netns pod;
	Netns external;

private:
	// Deleting a veth end deletes its peer at once, instead of whenever the kernel
	// gets round to freeing the namespace the peer lives in.
	static void removeLinks()
	{
		run("ip link del to-pod 2>/dev/null");
		run("ip link del to-ext 2>/dev/null");
	}
};

// An address and the server port as a socket address; `len` gets its size.
sockaddr_storage serverEndpoint(int family, const std::string &address, socklen_t *len)
{
	sockaddr_storage ss{};
	if (family == AF_INET) {
		auto *sin = reinterpret_cast<sockaddr_in *>(&ss);
		sin->sin_family = AF_INET;
		sin->sin_port = htons(kServerPort);
		inet_pton(AF_INET, address.c_str(), &sin->sin_addr);
		*len = sizeof(*sin);
	} else {
		auto *sin6 = reinterpret_cast<sockaddr_in6 *>(&ss);
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(kServerPort);
		inet_pton(AF_INET6, address.c_str(), &sin6->sin6_addr);
		*len = sizeof(*sin6);
	}
	return ss;
}

// A socket made on another thread (in another namespace), or why not: errno is per thread.
struct NewSocket {
	UniqueFd fd;
	std::string error;
};

NewSocket newSocket(int family, int flags)
{
	NewSocket s{UniqueFd(socket(family, SOCK_STREAM | SOCK_CLOEXEC | flags, 0)), {}};
	if (!s.fd.isValid())
		s.error = fmt::format("socket: {}", std::strerror(errno));
	return s;
}

NewSocket listenOn(int family, const std::string &address)
{
	NewSocket s = newSocket(family, 0);
	if (!s.fd.isValid())
		return s;
	const int one = 1;
	setsockopt(s.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	socklen_t len = 0;
	const sockaddr_storage ss = serverEndpoint(family, address, &len);
	if (bind(s.fd.get(), reinterpret_cast<const sockaddr *>(&ss), len) != 0 ||
	    listen(s.fd.get(), 128) != 0) {
		s.error = fmt::format("listen on {} port {}: {}", address, kServerPort,
				      std::strerror(errno));
		s.fd.reset();
	}
	return s;
}

// "198.51.100.2:40012" or "[2001:db8:1::2]:40012".
std::string formatEndpoint(const sockaddr_storage &ss)
{
	char text[INET6_ADDRSTRLEN] = {};
	if (ss.ss_family == AF_INET) {
		const auto *sin = reinterpret_cast<const sockaddr_in *>(&ss);
		inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
		return fmt::format("{}:{}", text, ntohs(sin->sin_port));
	}
	const auto *sin6 = reinterpret_cast<const sockaddr_in6 *>(&ss);
	inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
	return fmt::format("[{}]:{}", text, ntohs(sin6->sin6_port));
}

// The external host's TCP server: for every connection it writes back the source address
// and port it sees, "198.51.100.2:40012\n", and closes. A child process serving sockets
// made in the external namespace; it ends with the test (PR_SET_PDEATHSIG), on its own
// after a bounded time and number of connections, and is killed by the destructor.
class SourceEchoServer
{
public:
	explicit SourceEchoServer(const Netns &external)
	{
		const int ns = external.fd();
		const NewSocket v4 = inNetns(ns, [] { return listenOn(AF_INET, kServerV4); });
		const NewSocket v6 = inNetns(ns, [] { return listenOn(AF_INET6, kServerV6); });
		INFO(v4.error << v6.error);
		REQUIRE(v4.fd.isValid());
		REQUIRE(v6.fd.isValid());
		const pid_t parent = getpid();
		pid_ = fork();
		REQUIRE(pid_ >= 0);
		if (pid_ == 0)
			serve(parent, v4.fd.get(), v6.fd.get());
	}

	~SourceEchoServer()
	{
		kill(pid_, SIGKILL);
		waitpid(pid_, nullptr, 0);
	}

	SourceEchoServer(const SourceEchoServer &) = delete;
	SourceEchoServer &operator=(const SourceEchoServer &) = delete;

private:
	[[noreturn]] static void serve(pid_t parent, int v4, int v6)
	{
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		const auto deadline = std::chrono::steady_clock::now() + 290s;
		for (int polls = 0; polls < 100000 && std::chrono::steady_clock::now() < deadline;
		     polls++) {
			pollfd fds[] = {{v4, POLLIN, 0}, {v6, POLLIN, 0}};
			if (poll(fds, 2, 1000) <= 0)
				continue;
			for (const pollfd &p : fds) {
				if (!(p.revents & POLLIN))
					continue;
				sockaddr_storage peer{};
				socklen_t len = sizeof(peer);
				const int conn = accept4(p.fd, reinterpret_cast<sockaddr *>(&peer), &len,
							 SOCK_CLOEXEC);
				if (conn < 0)
					continue;
				const std::string line = formatEndpoint(peer) + "\n";
				if (write(conn, line.data(), line.size()) < 0)
					_exit(2);
				close(conn);
			}
		}
		_exit(0);
	}

	pid_t pid_ = -1;
};

// What the external server saw as the source of one connection from the pod.
struct Observation {
	std::string address;
	int port = -1;
	std::string error; // set when there was no answer
	std::string podEndpoint; // the pod's own end, before any NAT
	int podPort = -1;

	bool ok() const { return error.empty(); }
};

std::ostream &operator<<(std::ostream &out, const Observation &o)
{
	if (!o.ok())
		return out << "no answer: " << o.error;
	return out << "pod " << o.podEndpoint << " seen as " << o.address << " port " << o.port;
}

// One TCP connection from the pod to the external server, bounded by `timeout`.
Observation connectFromPod(const Topology &net, int family,
			   std::chrono::milliseconds timeout = 2000ms)
{
	Observation o;
	const NewSocket s =
		inNetns(net.pod.fd(), [family] { return newSocket(family, SOCK_NONBLOCK); });
	if (!s.fd.isValid()) {
		o.error = s.error;
		return o;
	}
	const UniqueFd &fd = s.fd;
	socklen_t len = 0;
	const sockaddr_storage ss =
		serverEndpoint(family, family == AF_INET ? kServerV4 : kServerV6, &len);

	const auto deadline = std::chrono::steady_clock::now() + timeout;
	auto remainingMs = [&] {
		const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
			deadline - std::chrono::steady_clock::now());
		return int(std::max<long>(0, left.count()));
	};

	if (connect(fd.get(), reinterpret_cast<const sockaddr *>(&ss), len) != 0 &&
	    errno != EINPROGRESS) {
		o.error = fmt::format("connect: {}", std::strerror(errno));
		return o;
	}
	pollfd out{fd.get(), POLLOUT, 0};
	if (poll(&out, 1, remainingMs()) != 1) {
		o.error = "connect timed out";
		return o;
	}
	int soError = 0;
	socklen_t soLen = sizeof(soError);
	getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soError, &soLen);
	if (soError != 0) {
		o.error = fmt::format("connect: {}", std::strerror(soError));
		return o;
	}
	sockaddr_storage local{};
	socklen_t localLen = sizeof(local);
	getsockname(fd.get(), reinterpret_cast<sockaddr *>(&local), &localLen);
	o.podEndpoint = formatEndpoint(local);
	o.podPort = ntohs(local.ss_family == AF_INET
				  ? reinterpret_cast<const sockaddr_in *>(&local)->sin_port
				  : reinterpret_cast<const sockaddr_in6 *>(&local)->sin6_port);

	std::string line;
	for (int reads = 0; reads < 100 && line.find('\n') == std::string::npos; reads++) {
		pollfd in{fd.get(), POLLIN, 0};
		if (poll(&in, 1, remainingMs()) != 1) {
			o.error = "no reply in time";
			return o;
		}
		char buf[128];
		const ssize_t n = read(fd.get(), buf, sizeof(buf));
		if (n <= 0)
			break;
		line.append(buf, size_t(n));
	}
	const size_t colon = line.rfind(':');
	if (line.empty() || line.back() != '\n' || colon == std::string::npos) {
		o.error = fmt::format("unexpected reply \"{}\"", line);
		return o;
	}
	o.address = line.substr(0, colon);
	if (o.address.size() > 2 && o.address.front() == '[')
		o.address = o.address.substr(1, o.address.size() - 2);
	o.port = std::stoi(line.substr(colon + 1));
	return o;
}

std::string tableListing()
{
	std::string out;
	if (run("nft list table inet ip-masq-agent 2>/dev/null", &out) != 0)
		return {};
	return out;
}

// The agent as a daemon in the node namespace (this process's own), watching a config
// file. Its table is deleted first, so the table's appearance marks its first apply.
class Agent
{
public:
	Agent(const std::string &config, std::vector<std::string> flags)
	{
		run("nft delete table inet ip-masq-agent 2>/dev/null");
		dir_.write("config", kSlowResync + config);
		flags.insert(flags.begin(), "--config=" + dir_.file("config"));
		process_ = std::make_unique<AgentProcess>(flags);
		const auto took = waitFor([] { return !tableListing().empty(); }, 5s);
		INFO("agent log:\n" << process_->log());
		REQUIRE(took);
	}

	~Agent()
	{
		process_.reset();
		run("nft delete table inet ip-masq-agent 2>/dev/null");
	}

	Agent(const Agent &) = delete;
	Agent &operator=(const Agent &) = delete;

	// Replace the config file atomically (rename), as kubelet does.
	void writeConfig(const std::string &config) const
	{
		dir_.write("config", kSlowResync + config);
	}
	// Rewrite the config file in place, as an editor or a shell redirection does.
	void overwriteConfig(const std::string &config) const
	{
		dir_.overwrite("config", kSlowResync + config);
	}

	std::string log() const { return process_->log(); }

private:
	TempDir dir_;
	std::unique_ptr<AgentProcess> process_;
};

// A connection must succeed and show `source` as its source address; un-NATed (the pod's
// own address), it keeps its source port too.
void requireSource(const Topology &net, const Agent &agent, int family, const std::string &source)
{
	const Observation o = connectFromPod(net, family);
	INFO(o << "\ntable:\n" << tableListing() << "\nagent log:\n" << agent.log());
	REQUIRE(o.ok());
	CHECK(o.address == source);
	if (source == kPodV4 || source == kPodV6)
		CHECK(o.port == o.podPort);
}

// How long after a config change a new connection first showed the new source.
struct Reaction {
	std::chrono::microseconds took{};
	int connections = 0; // tried until then, the one that showed it included
};

std::ostream &operator<<(std::ostream &out, const Reaction &r)
{
	return out << fmt::format("{:.1f} ms ({} connection{})", double(r.took.count()) / 1000,
				  r.connections, r.connections == 1 ? "" : "s");
}

// From a config change until a new connection shows `source`: the agent's reaction time.
Reaction requireReaction(const Topology &net, const Agent &agent, int family,
			 const std::string &source, std::chrono::steady_clock::time_point changed)
{
	Reaction r;
	Observation last;
	bool seen = false;
	while (!seen && r.connections < 1000 && std::chrono::steady_clock::now() - changed < 3s) {
		if (r.connections > 0)
			std::this_thread::sleep_for(2ms);
		last = connectFromPod(net, family, 500ms);
		r.connections++;
		seen = last.ok() && last.address == source;
	}
	r.took = std::chrono::duration_cast<std::chrono::microseconds>(
		std::chrono::steady_clock::now() - changed);
	INFO("waiting for source " << source << " for " << r << "; last connection: " << last
				  << "\ntable:\n" << tableListing() << "\nagent log:\n"
				  << agent.log());
	REQUIRE(seen);
	REQUIRE(r.took <= 1s);
	// The switch is atomic: from now on every connection shows the new source.
	for (int i = 0; i < 5; i++)
		requireSource(net, agent, family, source);
	return r;
}

} // namespace

TEST_CASE("IPv4: masqueraded to the node's address unless the destination is non-masquerade")
{
	Topology net;
	SourceEchoServer server(net.external);

	SECTION("default config (RFC 1918 only): the server sees the node")
	{
		Agent agent("", {});
		requireSource(net, agent, AF_INET, kNodeV4);
	}
	SECTION("the external subnet in nonMasqueradeCIDRs: the server sees the pod")
	{
		Agent agent("nonMasqueradeCIDRs: [203.0.113.0/24]\n", {});
		requireSource(net, agent, AF_INET, kPodV4);
	}
}

TEST_CASE("IPv6: masqueraded only with --enable-ipv6, unless the destination is non-masquerade")
{
	Topology net;
	SourceEchoServer server(net.external);

	SECTION("--enable-ipv6, default config: the server sees the node")
	{
		Agent agent("", {"--enable-ipv6"});
		requireSource(net, agent, AF_INET6, kNodeV6);
		requireSource(net, agent, AF_INET, kNodeV4);
	}
	SECTION("--enable-ipv6, the external subnet in nonMasqueradeCIDRs: the server sees the pod")
	{
		Agent agent("nonMasqueradeCIDRs: [\"2001:db8:2::/64\"]\n", {"--enable-ipv6"});
		requireSource(net, agent, AF_INET6, kPodV6);
		requireSource(net, agent, AF_INET, kNodeV4);
	}
	SECTION("without --enable-ipv6 IPv6 is not touched, while IPv4 is masqueraded")
	{
		Agent agent("", {});
		requireSource(net, agent, AF_INET6, kPodV6);
		requireSource(net, agent, AF_INET, kNodeV4);
	}
}

TEST_CASE("--to-ports: masqueraded source ports stay inside the ranges")
{
	Topology net;
	SourceEchoServer server(net.external);
	// Distinct ranges per section: conntrack keeps closed connections (TIME_WAIT) in the
	// node for minutes, and they still hold their NAT ports.

	SECTION("one range")
	{
		Agent agent("", {"--enable-ipv6", "--to-ports=40000-40099"});
		for (int family : {AF_INET, AF_INET6}) {
			for (int i = 0; i < 20; i++) {
				const Observation o = connectFromPod(net, family);
				INFO("connection " << i << ": " << o << "\nagent log:\n" << agent.log());
				REQUIRE(o.ok());
				CHECK(o.address == (family == AF_INET ? kNodeV4 : kNodeV6));
				CHECK(o.port >= 40000);
				CHECK(o.port <= 40099);
			}
		}
	}
	SECTION("two ranges: both are used, nothing outside them")
	{
		Agent agent("", {"--to-ports=41000-41049,42000-42049"});
		// Half the flows go to each range: all 60 in one range has probability 2^-59.
		int low = 0, high = 0;
		for (int i = 0; i < 60; i++) {
			const Observation o = connectFromPod(net, AF_INET);
			INFO("connection " << i << ": " << o << "\nagent log:\n" << agent.log());
			REQUIRE(o.ok());
			CHECK(o.address == kNodeV4);
			const bool inLow = o.port >= 41000 && o.port <= 41049;
			const bool inHigh = o.port >= 42000 && o.port <= 42049;
			CHECK((inLow || inHigh));
			low += inLow;
			high += inHigh;
		}
		INFO(low << " connections in 41000-41049, " << high << " in 42000-42049");
		CHECK(low > 0);
		CHECK(high > 0);
	}
}

TEST_CASE("a config change reaches new connections within a second")
{
	Topology net;
	SourceEchoServer server(net.external);
	Agent agent("", {"--enable-ipv6"});
	requireSource(net, agent, AF_INET, kNodeV4);
	requireSource(net, agent, AF_INET6, kNodeV6);

	auto changed = std::chrono::steady_clock::now();
	agent.writeConfig("nonMasqueradeCIDRs: [203.0.113.0/24, \"2001:db8:2::/64\"]\n");
	const auto toPod = requireReaction(net, agent, AF_INET, kPodV4, changed);
	requireSource(net, agent, AF_INET6, kPodV6);

	changed = std::chrono::steady_clock::now();
	agent.overwriteConfig("nonMasqueradeCIDRs: [203.0.113.0/24]\n");
	const auto v6ToNode = requireReaction(net, agent, AF_INET6, kNodeV6, changed);
	requireSource(net, agent, AF_INET, kPodV4);

	changed = std::chrono::steady_clock::now();
	agent.writeConfig("");
	const auto toNode = requireReaction(net, agent, AF_INET, kNodeV4, changed);

	WARN("from the config write to the first connection with the new source: "
	     << toPod << " renamed, IPv4 to the pod's source; " << v6ToNode
	     << " edited in place, IPv6 to the node's; " << toNode
	     << " renamed, IPv4 to the node's");
}
