// SPDX-License-Identifier: Apache-2.0
// Test support for real traffic: pod, node and external namespaces, a source-echo server.
#include "traffic_support.h"

#include "agent_process.h"

#include <algorithm>
#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "netns.h"

using namespace std::chrono_literals;

namespace ipmasq::test {

Netns::Netns()
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

Netns Netns::current()
{
	UniqueFd fd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
	INFO("this thread's network namespace: " << std::strerror(errno));
	REQUIRE(fd.isValid());
	return Netns(std::move(fd));
}

std::string Netns::path() const
{
	return fmt::format("/proc/{}/fd/{}", getpid(), fd_.get());
}

std::string Netns::runOrFail(const std::string &command) const
{
	std::string output;
	const int status = inNetns(fd(), [&] { return run(command, &output, true); });
	INFO("in a test namespace: " << command << "\noutput: " << output);
	REQUIRE(status == 0);
	return output;
}

void writeSysctl(const std::string &name, const std::string &value)
{
	std::ofstream out("/proc/sys/" + name);
	out << value;
	out.close();
	INFO("sysctl " << name);
	REQUIRE(out.good());
}

namespace {

// Deleting a veth end deletes its peer at once, instead of whenever the kernel
// gets round to freeing the namespace the peer lives in.
void removeLinks()
{
	run("ip link del to-pod 2>/dev/null");
	run("ip link del to-ext 2>/dev/null");
}

} // namespace

Topology::Topology()
{
	removeLinks(); // an earlier case's links, if its namespaces are still being freed
	// A new node: an earlier case's agent left its table (SIGTERM keeps it), and a starting
	// agent keeps the pod network's ranges that table holds.
	deleteAgentTable();
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
		  "ip addr add 2001:db8:2::1/64 dev to-ext nodad && ip link set to-ext up && "
		  "ip route add 192.0.2.0/24 via 203.0.113.2");
	pod.runOrFail(fmt::format("ip link set lo up && ip addr add {}/24 dev eth0 && "
				  "ip addr add {}/64 dev eth0 nodad && ip link set eth0 up && "
				  "ip route add default via 198.51.100.1 && "
				  "ip -6 route add default via 2001:db8:1::1",
				  kPodV4, kPodV6));
	external.runOrFail(fmt::format("ip link set lo up && ip addr add {}/24 dev eth0 && "
				       "ip addr add {}/24 dev eth0 && "
				       "ip addr add {}/64 dev eth0 nodad && ip link set eth0 up && "
				       "ip route add 198.51.100.0/24 via 203.0.113.1 && "
				       "ip -6 route add 2001:db8:1::/64 via 2001:db8:2::1",
				       kServerV4, kOtherServerV4, kServerV6));
}

Topology::~Topology()
{
	removeLinks();
}

namespace {

// An address and a port as a socket address; `len` gets its size.
sockaddr_storage endpoint(int family, const std::string &address, uint16_t port, socklen_t *len)
{
	sockaddr_storage ss{};
	if (family == AF_INET) {
		auto *sin = reinterpret_cast<sockaddr_in *>(&ss);
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		inet_pton(AF_INET, address.c_str(), &sin->sin_addr);
		*len = sizeof(*sin);
	} else {
		auto *sin6 = reinterpret_cast<sockaddr_in6 *>(&ss);
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
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

// A listening socket on every address of `family` (IPv6 only for AF_INET6).
NewSocket listenOnAll(int family, uint16_t port)
{
	NewSocket s = newSocket(family, 0);
	if (!s.fd.isValid())
		return s;
	const int one = 1;
	setsockopt(s.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET6)
		setsockopt(s.fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	socklen_t len = 0;
	const std::string any = family == AF_INET ? "0.0.0.0" : "::";
	const sockaddr_storage ss = endpoint(family, any, port, &len);
	if (bind(s.fd.get(), reinterpret_cast<const sockaddr *>(&ss), len) != 0 ||
	    listen(s.fd.get(), 128) != 0) {
		s.error = fmt::format("listen on {} port {}: {}", any, port,
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

[[noreturn]] void serveSources(pid_t parent, int v4, int v6)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	const auto deadline = std::chrono::steady_clock::now() + 290s;
	for (int polls = 0; polls < 100000 && std::chrono::steady_clock::now() < deadline; polls++) {
		pollfd fds[] = {{v4, POLLIN, 0}, {v6, POLLIN, 0}};
		if (poll(fds, 2, 1000) <= 0)
			continue;
		for (const pollfd &p : fds) {
			if (!(p.revents & POLLIN))
				continue;
			sockaddr_storage peer{};
			socklen_t len = sizeof(peer);
			const int conn =
				accept4(p.fd, reinterpret_cast<sockaddr *>(&peer), &len, SOCK_CLOEXEC);
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

} // namespace

SourceEchoServer::SourceEchoServer(const Netns &external, uint16_t port)
{
	const int ns = external.fd();
	const NewSocket v4 = inNetns(ns, [port] { return listenOnAll(AF_INET, port); });
	const NewSocket v6 = inNetns(ns, [port] { return listenOnAll(AF_INET6, port); });
	INFO(v4.error << v6.error);
	REQUIRE(v4.fd.isValid());
	REQUIRE(v6.fd.isValid());
	const pid_t parent = getpid();
	pid_ = fork();
	REQUIRE(pid_ >= 0);
	if (pid_ == 0)
		serveSources(parent, v4.fd.get(), v6.fd.get());
}

SourceEchoServer::~SourceEchoServer()
{
	kill(pid_, SIGKILL);
	waitpid(pid_, nullptr, 0);
}

std::ostream &operator<<(std::ostream &out, const Observation &o)
{
	if (!o.ok())
		return out << "no answer: " << o.error;
	return out << "pod " << o.podEndpoint << " seen as " << o.address << " port " << o.port;
}

Observation connectFromPod(const Topology &net, int family, const std::string &address,
			   uint16_t port, std::chrono::milliseconds timeout, const std::string &source)
{
	return connectFrom(net.pod, family, address, port, timeout, source);
}

Observation connectFrom(const Netns &host, int family, const std::string &address, uint16_t port,
			std::chrono::milliseconds timeout, const std::string &source)
{
	Observation o;
	const NewSocket s =
		inNetns(host.fd(), [family] { return newSocket(family, SOCK_NONBLOCK); });
	if (!s.fd.isValid()) {
		o.error = s.error;
		return o;
	}
	const UniqueFd &fd = s.fd;
	socklen_t len = 0;
	const sockaddr_storage ss = endpoint(family, address, port, &len);
	if (!source.empty()) {
		socklen_t sourceLen = 0;
		const sockaddr_storage from = endpoint(family, source, 0, &sourceLen);
		if (bind(fd.get(), reinterpret_cast<const sockaddr *>(&from), sourceLen) != 0) {
			o.error = fmt::format("bind {}: {}", source, std::strerror(errno));
			return o;
		}
	}

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

Observation connectFromPod(const Topology &net, int family, std::chrono::milliseconds timeout)
{
	return connectFromPod(net, family, family == AF_INET ? kServerV4 : kServerV6, kServerPort,
			      timeout);
}

std::string natConflictGauge(const std::string &metrics, const std::string &certainty)
{
	const std::string series = fmt::format("\nip_masq_agent_nat_conflicts{{certainty=\"{}\"}} ", certainty);
	const size_t at = metrics.find(series);
	if (at == std::string::npos)
		return {};
	const size_t from = at + series.size();
	return metrics.substr(from, metrics.find('\n', from) - from);
}

Agent::Agent(const std::string &config, std::vector<std::string> flags)
{
	run("nft delete table inet ip-masq-agent 2>/dev/null");
	dir_.write("config", withSlowResync(config));
	std::string healthAddr = kAgentHealthAddr;
	bool given = false;
	for (const std::string &flag : flags)
		if (flag.rfind("--health-addr=", 0) == 0) {
			healthAddr = flag.substr(std::strlen("--health-addr="));
			given = true;
		}
	if (!given)
		flags.push_back("--health-addr=" + healthAddr);
	if (!healthAddr.empty())
		healthUrl_ = "http://" + healthAddr;
	flags.insert(flags.begin(), "--config=" + dir_.file("config"));
	process_ = std::make_unique<AgentProcess>(flags);
	const auto took = waitFor([] { return !tableListing().empty(); }, 5s);
	INFO("agent log:\n" << process_->log());
	REQUIRE(took);
}

void Agent::requireNoNatConflicts() const
{
	const std::string log = process_->log();
	INFO("agent log:\n" << log);
	CHECK(log.find("NAT conflict") == std::string::npos);
	if (healthUrl_.empty())
		return;
	// The check completes its first cycle shortly after the first sync; a minute is what
	// only a hang misses.
	std::string metrics;
	const auto checked = waitFor(
		[&] {
			metrics = curlGet(healthUrl_ + "/metrics");
			return !natConflictGauge(metrics, "certain").empty();
		},
		60s);
	INFO("/metrics:\n" << metrics << "\nnft list ruleset:\n" << runOrFail("nft list ruleset"));
	REQUIRE(checked);
	CHECK(natConflictGauge(metrics, "certain") == "0");
	CHECK(natConflictGauge(metrics, "may") == "0");
	CHECK(natConflictGauge(metrics, "undetermined") == "0");
	CHECK(process_->log().find("NAT conflict") == std::string::npos);
}

Agent::~Agent()
{
	// Not while a failed REQUIRE unwinds: that failure is the one to see.
	if (!natConflictsExpected_ && std::uncaught_exceptions() == 0) {
		try {
			requireNoNatConflicts();
		} catch (...) {
			// A failed REQUIRE is recorded by Catch; a destructor must not throw.
		}
	}
	process_.reset();
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}

void Agent::writeConfig(const std::string &config) const
{
	dir_.write("config", withSlowResync(config));
}

void Agent::overwriteConfig(const std::string &config) const
{
	dir_.overwrite("config", withSlowResync(config));
}

void requireSource(const Topology &net, const Agent &agent, int family, const std::string &address,
		   uint16_t port, const std::string &source)
{
	const Observation o = connectFromPod(net, family, address, port);
	INFO("to " << address << " port " << port << ": " << o << "\ntable:\n" << tableListing()
		   << "\nagent log:\n" << agent.log());
	REQUIRE(o.ok());
	CHECK(o.address == source);
	if (source == kPodV4 || source == kPodV6)
		CHECK(o.port == o.podPort);
}

void requireSource(const Topology &net, const Agent &agent, int family, const std::string &source)
{
	requireSource(net, agent, family, family == AF_INET ? kServerV4 : kServerV6, kServerPort,
		      source);
}

sockaddr_storage socketAddress(int family, const std::string &address, uint16_t port)
{
	sockaddr_storage storage{};
	if (family == AF_INET) {
		auto *in = reinterpret_cast<sockaddr_in *>(&storage);
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		REQUIRE(inet_pton(AF_INET, address.c_str(), &in->sin_addr) == 1);
	} else {
		auto *in6 = reinterpret_cast<sockaddr_in6 *>(&storage);
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		REQUIRE(inet_pton(AF_INET6, address.c_str(), &in6->sin6_addr) == 1);
	}
	return storage;
}

socklen_t lengthOf(int family)
{
	return family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

Sinks sinksOn(const Netns &external, int family, uint16_t port)
{
	const auto open = [&](int type) {
		return inNetns(external.fd(), [&] {
			int fd = socket(family, type | SOCK_CLOEXEC, 0);
			const int on = 1;
			if (family == AF_INET6)
				(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
			const sockaddr_storage any = socketAddress(family, family == AF_INET ? "0.0.0.0" : "::",
								   port);
			if (bind(fd, reinterpret_cast<const sockaddr *>(&any), lengthOf(family)) != 0 ||
			    (type == SOCK_STREAM && listen(fd, 1024) != 0)) {
				close(fd);
				fd = -1;
			}
			return fd;
		});
	};
	Sinks sinks{UniqueFd(open(SOCK_STREAM)), UniqueFd(open(SOCK_DGRAM))};
	REQUIRE(sinks.tcp.isValid());
	REQUIRE(sinks.udp.isValid());
	return sinks;
}

UniqueFd tcpFrom(const Netns &pod, int family, const std::string &address,
		 std::chrono::milliseconds timeout, const std::string &source, uint16_t port)
{
	return UniqueFd(inNetns(pod.fd(), [&] {
		int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (!source.empty()) {
			const sockaddr_storage from = socketAddress(family, source, 0);
			(void)bind(fd, reinterpret_cast<const sockaddr *>(&from), lengthOf(family));
		}
		const sockaddr_storage to = socketAddress(family, address, port);
		(void)connect(fd, reinterpret_cast<const sockaddr *>(&to), lengthOf(family));
		pollfd p{fd, POLLOUT, 0};
		int error = -1;
		socklen_t length = sizeof(error);
		if (poll(&p, 1, static_cast<int>(timeout.count())) != 1 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
			close(fd);
			return -1;
		}
		return fd;
	}));
}

UniqueFd udpFrom(const Netns &pod, int family, const std::string &address, uint16_t port)
{
	UniqueFd fd(inNetns(pod.fd(), [&] {
		int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		const sockaddr_storage to = socketAddress(family, address, port);
		if (connect(fd, reinterpret_cast<const sockaddr *>(&to), lengthOf(family)) != 0 ||
		    send(fd, "x", 1, 0) != 1) {
			close(fd);
			return -1;
		}
		return fd;
	}));
	REQUIRE(fd.isValid());
	return fd;
}

} // namespace ipmasq::test
