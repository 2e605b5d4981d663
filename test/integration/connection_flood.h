// SPDX-License-Identifier: Apache-2.0
// Test support: hostile HTTP clients on loopback (idle connections, slowloris), re-opened
// when the server closes them, and a probe that measures how long an answer takes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <sys/types.h>
#include <thread>

namespace ipmasq::test {

// Keeps `connections` TCP connections to 127.0.0.1:port open from its own thread, for at
// most `limit` (and at most kMaxOpens connections in all), re-opening each one the server
// closes, as an attacker would:
//   idle       connect and send nothing
//   slowloris  send a request line, then one byte of a header that never ends every 100 ms
// The connections come from 64 source addresses (127.1.0.x): a re-opening storm through one
// address would run out of ephemeral ports (the server's TIME_WAITs keep them) and measure
// the kernel, not the server.
class ConnectionFlood
{
public:
	enum class Kind { idle, slowloris };
	static constexpr size_t kMaxOpens = 2'000'000;

	ConnectionFlood(uint16_t port, Kind kind, size_t connections,
			std::chrono::seconds limit = std::chrono::seconds(30));
	~ConnectionFlood(); // stops, closes everything and joins
	ConnectionFlood(const ConnectionFlood &) = delete;
	ConnectionFlood &operator=(const ConnectionFlood &) = delete;

	size_t opens() const { return opens_; }   // connections opened so far
	size_t closes() const { return closes_; } // closed by the server so far

private:
	void run(uint16_t port, Kind kind, size_t connections, std::chrono::seconds limit);

	std::atomic<bool> stop_{false};
	std::atomic<size_t> opens_{0};
	std::atomic<size_t> closes_{0};
	std::thread thread_;
};

// One GET as a probe makes it, from 127.0.0.2 (apart from the flood's addresses): connect,
// send, read the answer, within `deadline`.
struct ProbeAnswer {
	int status = 0; // 0: no answer within the deadline, or the connection was closed
	std::chrono::milliseconds took{0};
	std::string error; // why there is no status
};
ProbeAnswer probe(uint16_t port, const std::string &path,
		  std::chrono::milliseconds deadline = std::chrono::milliseconds(1000));

// What a process holds: open descriptors (/proc/PID/fd) and resident memory (VmRSS, KiB).
size_t openDescriptors(pid_t pid);
size_t residentKiB(pid_t pid);

} // namespace ipmasq::test
