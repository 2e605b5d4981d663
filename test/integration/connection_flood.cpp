// SPDX-License-Identifier: Apache-2.0
// Test support: idle and slowloris connection floods, and a timed probe.
#include "connection_flood.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq::test {

namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in loopback(const char *address, uint16_t port)
{
	sockaddr_in addr{};
	addr.sin_family = AF_INET;
	addr.sin_port = htons(port);
	inet_pton(AF_INET, address, &addr.sin_addr);
	return addr;
}

// A non-blocking connect from `source` (port chosen at connect, by the 4-tuple).
int connectFrom(const std::string &source, uint16_t port)
{
	const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int on = 1;
	setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on));
	const sockaddr_in from = loopback(source.c_str(), 0);
	const sockaddr_in to = loopback("127.0.0.1", port);
	if (bind(fd, reinterpret_cast<const sockaddr *>(&from), sizeof(from)) != 0 ||
	    (connect(fd, reinterpret_cast<const sockaddr *>(&to), sizeof(to)) != 0 &&
	     errno != EINPROGRESS)) {
		close(fd);
		return -1;
	}
	return fd;
}

constexpr std::string_view kSlowStart = "GET /livez HTTP/1.1\r\nHost: node\r\nX-Slow: ";

} // namespace

ConnectionFlood::ConnectionFlood(uint16_t port, Kind kind, size_t connections,
				 std::chrono::seconds limit)
	: thread_([=, this] { run(port, kind, connections, limit); })
{
}

ConnectionFlood::~ConnectionFlood()
{
	stop_ = true;
	thread_.join();
}

void ConnectionFlood::run(uint16_t port, Kind kind, size_t connections, std::chrono::seconds limit)
{
	// Below the test's own threads: what the test measures is the agent, not how long
	// it waited behind the flood for its own turn on the CPU.
	(void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
	const UniqueFd epoll(epoll_create1(EPOLL_CLOEXEC));
	if (!epoll.isValid())
		return;
	struct Slot {
		int fd = -1;
		size_t sent = 0; // slowloris: bytes of the request sent
	};
	std::vector<Slot> slots(connections);
	size_t nextSource = 0;
	const auto open = [&](size_t i) {
		if (opens_ >= kMaxOpens)
			return;
		const std::string source = fmt::format("127.1.0.{}", 1 + nextSource++ % 64);
		slots[i] = Slot{connectFrom(source, port), 0};
		if (slots[i].fd < 0)
			return;
		opens_++;
		epoll_event ev{};
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.u64 = i;
		epoll_ctl(epoll.get(), EPOLL_CTL_ADD, slots[i].fd, &ev);
	};
	const auto closeSlot = [&](size_t i) {
		if (slots[i].fd >= 0)
			close(slots[i].fd);
		slots[i].fd = -1;
	};
	for (size_t i = 0; i < connections; i++)
		open(i);

	const auto end = Clock::now() + limit;
	auto nextDribble = Clock::now();
	std::vector<epoll_event> events(256);
	char sink[4096];
	while (!stop_ && Clock::now() < end) {
		const int n = epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()), 10);
		for (int e = 0; e < n; e++) {
			const size_t i = events[e].data.u64;
			// Whatever the server sends (nothing, or an error page) ends with a close.
			const ssize_t got = slots[i].fd >= 0
				? recv(slots[i].fd, sink, sizeof(sink), MSG_DONTWAIT) : 0;
			const bool ended = events[e].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
			if (!ended && (got > 0 || (got < 0 && errno == EAGAIN)))
				continue;
			closes_++;
			closeSlot(i);
			open(i);
		}
		for (size_t i = 0; i < connections; i++)
			if (slots[i].fd < 0)
				open(i); // a connect that failed (out of ports for a moment): again
		if (kind == Kind::slowloris && Clock::now() >= nextDribble) {
			nextDribble = Clock::now() + std::chrono::milliseconds(100);
			for (Slot &slot : slots) {
				if (slot.fd < 0)
					continue;
				const char byte = slot.sent < kSlowStart.size() ? kSlowStart[slot.sent] : 'a';
				if (send(slot.fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
					slot.sent++;
			}
		}
	}
	for (size_t i = 0; i < connections; i++)
		closeSlot(i);
}

ProbeAnswer probe(uint16_t port, const std::string &path, std::chrono::milliseconds deadline)
{
	const auto start = Clock::now();
	ProbeAnswer answer;
	const auto finish = [&](std::string error) {
		answer.took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
		answer.error = std::move(error);
		return answer;
	};
	const auto left = [&] {
		const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
			start + deadline - Clock::now()).count();
		return static_cast<int>(std::max<long>(ms, 0));
	};
	const UniqueFd fd(connectFrom("127.0.0.2", port));
	if (!fd.isValid())
		return finish(fmt::format("connect: {}", std::strerror(errno)));
	pollfd pfd{fd.get(), POLLOUT, 0};
	if (poll(&pfd, 1, left()) != 1)
		return finish("connect: no connection within the deadline");
	const std::string request = fmt::format("GET {} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n", path);
	if (send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
		return finish(fmt::format("send: {}", std::strerror(errno)));
	std::string reply;
	char buf[4096];
	for (int reads = 0; reads < 1024; reads++) {
		pfd = {fd.get(), POLLIN, 0};
		if (poll(&pfd, 1, left()) != 1)
			return finish("no answer within the deadline; got " + std::to_string(reply.size()) + " bytes");
		const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
		if (n < 0)
			return finish(fmt::format("recv: {}", std::strerror(errno)));
		if (n == 0)
			break;
		reply.append(buf, static_cast<size_t>(n));
	}
	if (reply.rfind("HTTP/1.1 ", 0) != 0 || reply.size() < 12)
		return finish("closed without an answer");
	answer.status = std::atoi(reply.c_str() + 9);
	return finish("");
}

size_t openDescriptors(pid_t pid)
{
	DIR *dir = opendir(fmt::format("/proc/{}/fd", pid).c_str());
	if (dir == nullptr)
		return 0;
	size_t count = 0;
	for (int entries = 0; entries < 1 << 20 && readdir(dir) != nullptr; entries++)
		count++;
	closedir(dir);
	return count >= 2 ? count - 2 : 0; // "." and ".."
}

size_t residentKiB(pid_t pid)
{
	std::ifstream in(fmt::format("/proc/{}/status", pid));
	std::string line;
	for (int lines = 0; lines < 256 && std::getline(in, line); lines++)
		if (line.rfind("VmRSS:", 0) == 0)
			return std::stoul(line.substr(6));
	return 0;
}

} // namespace ipmasq::test
