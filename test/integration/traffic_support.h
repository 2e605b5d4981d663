// SPDX-License-Identifier: Apache-2.0
// Test support for real traffic: a pod, the node and an external host, each in a network
// namespace of its own; a TCP server on the external host reports the source it sees.
//
//   pod                    node (this process's private ns)             external
//   eth0 198.51.100.2/24 --- to-pod 198.51.100.1/24                        eth0 203.0.113.2/24
//        2001:db8:1::2/64           2001:db8:1::1/64                            192.0.2.2/24
//                                   to-ext 203.0.113.1/24 --------------------- 2001:db8:2::2/64
//                                          2001:db8:2::1/64
//
// The node forwards and runs the agent; it routes 192.0.2.0/24 (a second external
// destination, for tests that need one destination masqueraded and another not) via the
// external host. The external host routes the pod subnets back via the node, so a reply to
// an un-NATed pod address returns too. The pod and external namespaces are held only by
// file descriptors of this process: they have no name and vanish with it, whatever way it
// ends.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <sched.h>
#include <string>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/types.h>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "ip-masq-agent/base/unique_fd.h"
#include "agent_process.h"

namespace ipmasq::test {

inline constexpr uint16_t kServerPort = 8080;
inline const std::string kServerV4 = "203.0.113.2";
inline const std::string kServerV6 = "2001:db8:2::2";
// The external host's second IPv4 address, in another subnet than the node's link to it.
inline const std::string kOtherServerV4 = "192.0.2.2";
inline const std::string kPodV4 = "198.51.100.2";
inline const std::string kPodV6 = "2001:db8:1::2";
inline const std::string kNodeV4 = "203.0.113.1"; // the node's address towards the external host
inline const std::string kNodeV6 = "2001:db8:2::1";

// A long resync, so anything that happens faster was triggered by a change.
inline const std::string kSlowResync = "resyncInterval: 1h\n";
// `config` after kSlowResync, unless it sets resyncInterval itself.
inline std::string withSlowResync(const std::string &config)
{
	return config.find("resyncInterval:") == std::string::npos ? kSlowResync + config : config;
}

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
	Netns();
	// The calling thread's own namespace, held by a descriptor like a new one.
	static Netns current();

	int fd() const { return fd_.get(); }
	// The namespace as a path that `ip link ... netns PATH` accepts.
	std::string path() const;
	// Runs `command` with /bin/sh inside the namespace; fails the test if it fails.
	std::string runOrFail(const std::string &command) const;

private:
	explicit Netns(UniqueFd fd) : fd_(std::move(fd)) {}

	UniqueFd fd_;
};

// Writes /proc/sys/`name` of this process's namespace; fails the test if it cannot.
void writeSysctl(const std::string &name, const std::string &value);

// The three hosts, wired and addressed. DAD is off everywhere, so every address, the
// link-local ones that neighbour discovery uses included, is usable at once.
class Topology
{
public:
	Topology();
	~Topology();
	Topology(const Topology &) = delete;
	Topology &operator=(const Topology &) = delete;

	Netns pod;
	Netns external;
};

// The external host's TCP server on `port` (kServerPort unless said) of all its addresses: for every
// connection it writes back the source address and port it sees, "198.51.100.2:40012\n",
// and closes. A child process serving sockets made in the external namespace; it ends
// with the test (PR_SET_PDEATHSIG), on its own after a bounded time and number of
// connections, and is killed by the destructor.
class SourceEchoServer
{
public:
	explicit SourceEchoServer(const Netns &external, uint16_t port = kServerPort);
	~SourceEchoServer();
	SourceEchoServer(const SourceEchoServer &) = delete;
	SourceEchoServer &operator=(const SourceEchoServer &) = delete;

private:
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

std::ostream &operator<<(std::ostream &out, const Observation &o);

// One TCP connection from the pod to `address` port `port`, bounded by `timeout`, from
// the pod's address `source` when given (else the kernel's choice).
Observation connectFromPod(const Topology &net, int family, const std::string &address,
			   uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(2),
			   const std::string &source = {});

// The same from another of the topology's hosts (the external one, as a client from off
// the cluster).
Observation connectFrom(const Netns &host, int family, const std::string &address, uint16_t port,
			std::chrono::milliseconds timeout = std::chrono::seconds(2), const std::string &source = {});

// One TCP connection from the pod to the external server (kServerV4 or kServerV6).
Observation connectFromPod(const Topology &net, int family,
			   std::chrono::milliseconds timeout = std::chrono::seconds(2));


// Sockets toward the external host's sinks (below), from any host, at kSinkPort unless said.
inline constexpr uint16_t kSinkPort = 9443;
sockaddr_storage socketAddress(int family, const std::string &address, uint16_t port);
socklen_t lengthOf(int family);

// The external host keeps what comes: a TCP listener that never accepts (the kernel
// completes each handshake into its backlog, so the connections stay established) and a
// UDP socket that never reads (no port unreachable ends a flow), on every address.
struct Sinks {
	UniqueFd tcp, udp;
};
Sinks sinksOn(const Netns &external, int family, uint16_t port = kSinkPort);

// A TCP connection from a pod (from `source` when given), established within `timeout`,
// or an invalid descriptor: the kernel dropped its SYN (and every retransmission).
UniqueFd tcpFrom(const Netns &pod, int family, const std::string &address, std::chrono::milliseconds timeout,
		 const std::string &source = {}, uint16_t port = kSinkPort);

// A UDP flow from a pod: one datagram; conntrack keeps it (unreplied) for the node's
// nf_conntrack_udp_timeout, which the tests raise in their own namespace.
UniqueFd udpFrom(const Netns &pod, int family, const std::string &address, uint16_t port = kSinkPort);

// The NAT conflict gauge's value for `certainty` ("certain", "may", "undetermined") in a
// /metrics text, or "" while it is not exported (no complete check yet, or a failed read).
std::string natConflictGauge(const std::string &metrics, const std::string &certainty);

// The agent as a daemon in the node namespace (this process's own), watching a config
// file. Its table is deleted first, so the table's appearance marks its first apply. It
// serves /metrics (on kAgentHealthAddr unless `flags` give a --health-addr).
class Agent
{
public:
	Agent(const std::string &config, std::vector<std::string> flags);
	~Agent();
	Agent(const Agent &) = delete;
	Agent &operator=(const Agent &) = delete;

	// Replace the config file atomically (rename), as kubelet does.
	void writeConfig(const std::string &config) const;
	// Rewrite the config file in place, as an editor or a shell redirection does.
	void overwriteConfig(const std::string &config) const;

	std::string log() const { return process_->log(); }
	pid_t pid() const { return process_->pid(); }
	// The test puts rules that undo the agent's decisions next to it. Otherwise the
	// destructor waits for the agent's NAT conflict check to complete a cycle (it runs on
	// its own thread, paced) and checks that it reported none, certain, may or
	// undetermined: no false positives next to its own table, kube-proxy's, or a clean
	// node.
	void expectNatConflicts() { natConflictsExpected_ = true; }
	const AgentProcess &process() const { return *process_; }
	// "http://127.0.0.1:PORT", or "" when the test turned the endpoint off.
	const std::string &healthUrl() const { return healthUrl_; }

private:
	void requireNoNatConflicts() const;

	TempDir dir_;
	std::unique_ptr<AgentProcess> process_;
	std::string healthUrl_;
	bool natConflictsExpected_ = false;
};

// Where an Agent serves /metrics when its test gives no --health-addr: a port no test uses.
inline const std::string kAgentHealthAddr = "127.0.0.1:10289";

// A connection from the pod to `address` must succeed and show `source` as its source
// address; un-NATed (the pod's own address), it keeps its source port too.
void requireSource(const Topology &net, const Agent &agent, int family, const std::string &address,
		   uint16_t port, const std::string &source);

// The same, to the external server (kServerV4 or kServerV6).
void requireSource(const Topology &net, const Agent &agent, int family, const std::string &source);

} // namespace ipmasq::test
