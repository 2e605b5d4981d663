// SPDX-License-Identifier: Apache-2.0
// Test support: a stream of new connections, a server that takes them, a counter sampler.
#include "flow_stream.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <unordered_map>

#include <fmt/format.h>

#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq::test {

namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in ipv4(const std::string &address, uint16_t port)
{
	sockaddr_in sin{};
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	inet_pton(AF_INET, address.c_str(), &sin.sin_addr);
	return sin;
}

// How long a connection may take to be established: SYN retransmits come after 1 s and 3 s,
// so only a stuck path misses this.
constexpr auto kConnectDeadline = std::chrono::seconds(10);
constexpr size_t kMaxInFlight = 64;

} // namespace

AcceptingServer::AcceptingServer(const Netns &host, uint16_t port, std::chrono::seconds limit)
{
	const int ns = host.fd();
	UniqueFd listener = inNetns(ns, [port] {
		UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
		const int one = 1;
		setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		const sockaddr_in any = ipv4("0.0.0.0", port);
		if (bind(fd.get(), reinterpret_cast<const sockaddr *>(&any), sizeof(any)) != 0 ||
		    listen(fd.get(), 4096) != 0)
			fd.reset();
		return fd;
	});
	REQUIRE(listener.isValid());
	thread_ = std::thread([this, limit, fd = std::move(listener)] {
		const auto end = Clock::now() + limit;
		while (!stop_ && Clock::now() < end) {
			pollfd p{fd.get(), POLLIN, 0};
			if (poll(&p, 1, 50) <= 0)
				continue;
			for (int i = 0; i < 1024; i++) {
				sockaddr_in peer{};
				socklen_t len = sizeof(peer);
				const int conn = accept4(fd.get(), reinterpret_cast<sockaddr *>(&peer),
							 &len, SOCK_CLOEXEC);
				if (conn < 0)
					break;
				close(conn);
				char text[INET_ADDRSTRLEN] = {};
				inet_ntop(AF_INET, &peer.sin_addr, text, sizeof(text));
				std::lock_guard lock(mutex_);
				sources_[text]++;
				accepted_++;
			}
		}
	});
}

std::map<std::string, size_t> AcceptingServer::sources() const
{
	std::lock_guard lock(mutex_);
	return sources_;
}

AcceptingServer::~AcceptingServer()
{
	stop_ = true;
	thread_.join();
}

FlowStream::FlowStream(const Topology &net, const std::string &server, uint16_t port,
		       unsigned perSecond, size_t limit, std::chrono::seconds duration)
	: thread_([=, this, ns = net.pod.fd()] { run(ns, server, port, perSecond, limit, duration); })
{
}

FlowStream::~FlowStream()
{
	(void)stop();
}

FlowStream::Totals FlowStream::stop()
{
	stop_ = true;
	if (thread_.joinable())
		thread_.join();
	return totals_;
}

void FlowStream::run(int podNs, std::string server, uint16_t port, unsigned perSecond,
		     size_t limit, std::chrono::seconds duration)
{
	if (setns(podNs, CLONE_NEWNET) != 0) {
		totals_.failed = 1;
		totals_.firstError = fmt::format("setns: {}", std::strerror(errno));
		return;
	}
	const UniqueFd epoll(epoll_create1(EPOLL_CLOEXEC));
	const sockaddr_in to = ipv4(server, port);
	std::unordered_map<int, Clock::time_point> inFlight; // fd -> when it was opened
	// Out of the epoll set before close(): a fork() elsewhere in this process (the agent,
	// curl) holds the socket for a moment, and close() alone would then leave it in the
	// set, reported again under a number the next socket() reuses.
	const auto finish = [&](int fd) {
		epoll_ctl(epoll.get(), EPOLL_CTL_DEL, fd, nullptr);
		inFlight.erase(fd);
		close(fd);
	};
	const auto fail = [&](int fd, const std::string &why) {
		totals_.failed++;
		if (totals_.firstError.empty())
			totals_.firstError = why;
		if (fd >= 0)
			finish(fd);
	};
	const auto started = Clock::now();
	const auto end = started + duration;
	size_t opened = 0;
	// Opening stops at stop(), the limit or the duration; then those in flight finish.
	const auto opening = [&] { return !stop_ && opened < limit && Clock::now() < end; };
	while (opening() || !inFlight.empty()) {
		if (!opening() && Clock::now() > end + kConnectDeadline)
			break;
		const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
		while (opening() && inFlight.size() < kMaxInFlight && opened < elapsed * perSecond) {
			const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			opened++;
			if (fd < 0) {
				fail(-1, fmt::format("socket: {}", std::strerror(errno)));
				continue;
			}
			inFlight[fd] = Clock::now();
			if (connect(fd, reinterpret_cast<const sockaddr *>(&to), sizeof(to)) != 0 &&
			    errno != EINPROGRESS) {
				fail(fd, fmt::format("connect: {}", std::strerror(errno)));
				continue;
			}
			epoll_event event{};
			event.events = EPOLLOUT;
			event.data.fd = fd;
			epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &event);
		}
		epoll_event events[64];
		const int n = epoll_wait(epoll.get(), events, 64, 1);
		for (int i = 0; i < n; i++) {
			const int fd = events[i].data.fd;
			int error = 0;
			socklen_t len = sizeof(error);
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
			if (error != 0) {
				fail(fd, fmt::format("connect: {}", std::strerror(error)));
				continue;
			}
			// Reset rather than closed: no TIME_WAIT holds the port.
			const linger reset{1, 0};
			setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
			finish(fd);
			totals_.established++;
			established_++;
		}
		for (auto it = inFlight.begin(); it != inFlight.end();) {
			const int fd = it->first;
			++it;
			if (Clock::now() - inFlight[fd] > kConnectDeadline)
				fail(fd, "not established within 10 s");
		}
	}
	while (!inFlight.empty())
		fail(inFlight.begin()->first, "still in flight at the end");
}

CounterSampler::CounterSampler()
	: thread_([this] {
		  auto backend = NetlinkBackend::open();
		  if (!backend) {
			  report_.failedReads++;
			  return;
		  }
		  // Bounded: 10 minutes of samples at most.
		  const auto end = Clock::now() + std::chrono::minutes(10);
		  while (!stop_ && Clock::now() < end) {
			  auto values = (*backend)->readCounters(kDefaultTableName);
			  report_.samples++;
			  if (!values) {
				  report_.failedReads++;
				  continue;
			  }
			  for (const CounterValue &value : *values) {
				  const auto last = report_.last.find(value.name);
				  if (last != report_.last.end() && value.packets < last->second) {
					  if (report_.decreases++ == 0)
						  report_.firstDecrease = fmt::format(
							  "{}: {} after {} (sample {})", value.name,
							  value.packets, last->second, report_.samples);
				  }
				  report_.last[value.name] = value.packets;
			  }
			  usleep(1000);
		  }
	  })
{
}

CounterSampler::~CounterSampler()
{
	(void)stop();
}

CounterSampler::Report CounterSampler::stop()
{
	stop_ = true;
	if (thread_.joinable())
		thread_.join();
	return report_;
}

} // namespace ipmasq::test
