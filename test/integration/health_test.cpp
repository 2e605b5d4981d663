// SPDX-License-Identifier: Apache-2.0
// Liveness apart from readiness, through the real binary: a bad config is not ready but
// live, an idle loop stays live, a stopped process or a stopped loop thread is not.
#include <catch2/catch.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/daemon/agent_status.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;
using ipmasq::AgentStatus;

namespace {

// A long resync, so that nothing but the loop's own heartbeat wakes an idle agent.
const std::string kSlowResync = "resyncInterval: 1h\n";
const std::string kHealthAddr = "--health-addr=127.0.0.1:10263";

struct Answer {
	int status = 0; // 0: no answer within the timeout (what the kubelet counts as a failure)
	std::string body;
};

// One request with curl, as a probe makes it: a timeout, any status.
Answer request(const std::string &path, const std::string &method = "GET",
	       std::chrono::seconds timeout = 2s)
{
	const std::string how = method == "HEAD" ? "-I" : "-X " + method;
	std::string out;
	run(fmt::format("curl -s -m {} {} -w '\\n%{{http_code}}' http://127.0.0.1:10263{}",
			timeout.count(), how, path),
	    &out);
	const size_t nl = out.rfind('\n');
	Answer answer;
	if (nl == std::string::npos)
		return answer;
	answer.status = std::atoi(out.c_str() + nl + 1);
	answer.body = out.substr(0, nl);
	return answer;
}

bool answers(const std::string &path, int status, const std::string &bodyPart = {})
{
	const Answer a = request(path);
	return a.status == status && a.body.find(bodyPart) != std::string::npos;
}

// What the endpoints answer, for a failed wait's message.
std::string endpoints()
{
	const Answer live = request("/livez"), ready = request("/readyz");
	return fmt::format("/livez: {} {}\n/readyz: {} {}", live.status, live.body, ready.status,
			   ready.body);
}

void requireCurl()
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
}

// Stops one thread of a child process with ptrace (PTRACE_SEIZE, PTRACE_INTERRUPT): unlike
// SIGSTOP, which stops every thread, the process's other threads keep running. That is
// the agent with a hung loop and a working HTTP thread. Detaches (and so resumes the
// thread) when destroyed.
class StoppedThread
{
public:
	explicit StoppedThread(pid_t tid) : tid_(tid)
	{
		if (ptrace(PTRACE_SEIZE, tid_, nullptr, nullptr) != 0)
			FAIL("ptrace(PTRACE_SEIZE) of the agent's loop thread: " << std::strerror(errno)
				<< " (this test needs to trace its own child)");
		seized_ = true;
		REQUIRE(ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) == 0);
		int status = 0;
		// Consume the stop here: the agent's AgentProcess must never see it.
		REQUIRE(waitpid(tid_, &status, __WALL) == tid_);
		REQUIRE(WIFSTOPPED(status));
	}
	~StoppedThread() { resume(); }
	StoppedThread(const StoppedThread &) = delete;
	StoppedThread &operator=(const StoppedThread &) = delete;

	void resume()
	{
		if (seized_)
			ptrace(PTRACE_DETACH, tid_, nullptr, nullptr);
		seized_ = false;
	}

private:
	pid_t tid_;
	bool seized_ = false;
};

} // namespace

TEST_CASE("a bad config: /readyz and /healthz fail with the reason, /livez stays ok, also idle")
{
	requireCurl();
	TempDir dir;
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config"), kHealthAddr});
	requireWithin([] { return answers("/readyz", 200, "ok"); }, 5s, agent, "ready", endpoints);
	CHECK(request("/livez").status == 200);
	CHECK(request("/livez").body == "ok\n");
	CHECK(request("/healthz").status == 200);
	CHECK(request("/livez", "HEAD").status == 200);
	CHECK(request("/readyz", "HEAD").status == 200);
	CHECK(request("/livez", "POST").status == 405);
	const Answer unknown = request("/live");
	CHECK(unknown.status == 404);
	CHECK_THAT(unknown.body, Catch::Contains("/livez") && Catch::Contains("/readyz"));

	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [192.0.2.1/24]\n");
	requireWithin([] { return answers("/readyz", 503, "config invalid"); }, 5s, agent,
		      "not ready on a bad config", endpoints);
	const Answer ready = request("/readyz");
	CHECK_THAT(ready.body, Catch::Contains(dir.file("config")) && Catch::Contains("host bits") &&
				       Catch::Contains("last good ruleset stays in force"));
	const Answer health = request("/healthz");
	CHECK(health.status == 503);
	CHECK(health.body == ready.body);
	CHECK(request("/livez").status == 200);
	CHECK_THAT(tableListing(), Catch::Contains("192.0.2.0/24"));

	// Nothing wakes the loop now (no config event, no nftables change, resync in an
	// hour) but its heartbeat: a probe after longer than the liveness limit must still
	// find it live, and still not ready.
	std::this_thread::sleep_for(AgentStatus::kLivenessLimit + 2s);
	const Answer live = request("/livez");
	INFO(live.body << "\nagent log:\n" << agent.log());
	CHECK(live.status == 200);
	CHECK(request("/readyz").status == 503);
	CHECK(agent.running()); // never restarted, never exited
	CHECK_THAT(tableListing(), Catch::Contains("192.0.2.0/24"));

	dir.write("config", kSlowResync + "nonMasqueradeCIDRs: [198.51.100.0/24]\n");
	requireWithin([] { return answers("/readyz", 200, "ok"); }, 5s, agent, "ready again", endpoints);
	CHECK(agent.stop(SIGTERM) == 0);
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}

TEST_CASE("a misspelled key: ready, and said in the log, /readyz?verbose and a gauge; "
	  "--strict-config refuses it; upstream's configs load")
{
	requireCurl();
	deleteAgentTable();
	TempDir dir;
	const std::string file = dir.file("config");
	dir.write("config", kSlowResync + "nonMasqueradeCIDR:\n  - 198.51.100.0/24\n");
	const std::string base = "http://127.0.0.1:10263";
	const std::string warning = file + ":2:1: ignoring unknown key \"nonMasqueradeCIDR\": did you "
					   "mean \"nonMasqueradeCIDRs\"?";
	{
		AgentProcess agent({"--config=" + file, kHealthAddr});
		requireWithin([] { return answers("/readyz", 200, "ok"); }, 5s, agent, "ready", endpoints);
		// The typo's consequence: the defaults are in force, which the agent stays ready
		// with (upstream ignores unknown keys too), and says loudly.
		CHECK(agentTableHas("10.0.0.0/8"));
		CHECK_FALSE(agentTableHas("198.51.100.0/24"));
		CHECK(request("/readyz?verbose").body == "ok\nwarning: " + warning + "\n");
		CHECK(metricAt(base, "ip_masq_agent_config_unknown_keys") == "1");
		CHECK_THAT(agent.log(), Catch::Contains(" warning: " + warning + "\n"));

		// Fixed: the warning goes with the key.
		dir.write("config", kSlowResync + "nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n");
		requireWithin([] { return agentTableHas("198.51.100.0/24"); }, kChangeSeen, agent, "fixed");
		requireWithin([&] { return metricAt(base, "ip_masq_agent_config_unknown_keys") == "0"; },
			      kChangeSeen, agent, "the gauge back to 0");
		CHECK(request("/readyz?verbose").body == "ok\n");
		CHECK(agent.stop(SIGTERM) == 0);
	}
	// --strict-config: the typo is an error, and the last good rules stay (adopted).
	dir.write("config", kSlowResync + "nonMasqueradeCIDR:\n  - 198.51.100.0/24\n");
	{
		AgentProcess agent({"--config=" + file, kHealthAddr, "--strict-config"});
		requireWithin([] { return answers("/readyz", 503, "config invalid"); }, 5s, agent,
			      "not ready with --strict-config", endpoints);
		CHECK_THAT(request("/readyz").body,
			   Catch::Contains(file + ":2:1: unknown key \"nonMasqueradeCIDR\" (--strict-config: "
						  "unknown keys are errors): did you mean \"nonMasqueradeCIDRs\"?"));
		CHECK(agentTableHas("198.51.100.0/24"));
		CHECK(agent.stop(SIGTERM) == 0);
	}
	// Without it, a config written for upstream with a key the agent does not know loads
	// as upstream loads it.
	dir.write("config", kSlowResync + "nonMasqueradeCIDRs:\n  - 203.0.113.0/24\nmasqLinkLocal: false\n"
					  "nodeName: worker-1\n");
	{
		AgentProcess agent({"--config=" + file, kHealthAddr});
		requireWithin([] { return agentTableHas("203.0.113.0/24"); }, 5s, agent, "upstream's config");
		requireWithin([] { return answers("/readyz", 200, "ok"); }, 5s, agent, "ready", endpoints);
		CHECK_THAT(request("/readyz?verbose").body, Catch::Contains("ignoring unknown key \"nodeName\""));
		CHECK(agent.stop(SIGTERM) == 0);
	}
	deleteAgentTable();
}

namespace {

// Whether every thread of process `pid` is stopped by a signal (state T in its stat line).
bool allThreadsStopped(pid_t pid)
{
	size_t threads = 0;
	for (const auto &task : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid))) {
		std::ifstream stat(task.path() / "stat");
		std::string line;
		std::getline(stat, line);
		const size_t afterName = line.rfind(')');
		if (afterName == std::string::npos || afterName + 2 >= line.size() || line[afterName + 2] != 'T')
			return false;
		threads++;
	}
	return threads > 0;
}

} // namespace

TEST_CASE("SIGSTOP: a probe gets no answer, which the kubelet counts as a failure; SIGCONT heals")
{
	requireCurl();
	TempDir dir;
	dir.write("config", kSlowResync);
	AgentProcess agent({"--config=" + dir.file("config"), kHealthAddr});
	requireWithin([] { return answers("/livez", 200, "ok"); }, 5s, agent, "live", endpoints);

	// Every thread stops, the HTTP thread too: the probe times out (as a kubelet's
	// probe with timeoutSeconds would) instead of reading a 503.
	REQUIRE(kill(agent.pid(), SIGSTOP) == 0);
	// kill() returns before every thread has stopped: a thread running on the other core
	// answered a probe with 200 on a busy machine. Wait until each one is stopped.
	requireWithin([&agent] { return allThreadsStopped(agent.pid()); }, 5s, agent, "every thread stopped");
	const Answer stopped = request("/livez", "GET", 1s);
	REQUIRE(kill(agent.pid(), SIGCONT) == 0);
	CHECK(stopped.status == 0);
	requireWithin([] { return answers("/livez", 200, "ok"); }, 5s, agent, "live after SIGCONT", endpoints);
	CHECK(agent.stop(SIGTERM) == 0);
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}

TEST_CASE("a loop that stops turning while the HTTP thread runs: /livez 503 with its age")
{
	requireCurl();
	TempDir dir;
	dir.write("config", kSlowResync);
	AgentProcess agent({"--config=" + dir.file("config"), kHealthAddr});
	requireWithin([] { return answers("/readyz", 200, "ok"); }, 5s, agent, "ready", endpoints);
	REQUIRE(answers("/livez", 200, "ok"));

	{
		// The loop runs on the main thread, whose id is the process id. It stops as if
		// it hung in a kernel call; the HTTP thread keeps serving.
		StoppedThread loop(agent.pid());
		// The last turn was at most one heartbeat period before the stop.
		requireWithin([] { return answers("/livez", 503, "the event loop has not turned for"); },
			      // the design's bound, plus 30 s that only a hang needs
			      AgentStatus::kLivenessLimit + AgentStatus::kHeartbeatPeriod + 30s, agent,
			      "not live while the loop is stopped", endpoints);
		// A generous timeout: on a busy machine curl itself may take seconds to start.
		const Answer dead = request("/livez", "GET", 20s);
		CHECK(dead.status == 503);
		CHECK_THAT(dead.body, Catch::Matches("the event loop has not turned for 1[5-9] s .*\n"));
		// Readiness is the state the loop last reported: it cannot tell a hang.
		CHECK(request("/readyz", "GET", 20s).status == 200);
		loop.resume();
		// The overdue heartbeat timer wakes the loop at once.
		requireWithin([] { return answers("/livez", 200, "ok"); }, 3s, agent,
			      "live once the loop turns again", endpoints);
	}
	CHECK(agent.stop(SIGTERM) == 0);
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}

namespace {

// What a raw client got: the bytes before the agent closed, and when it closed.
struct RawExchange {
	std::string reply;
	bool closed = false; // false: still open after 10 s, a bound only a hang misses
	std::chrono::milliseconds took{0}; // from the connect to the close
};

// Connects, sends `pieces` `gap` apart, optionally ends its sending side, then reads
// until the agent closes the connection.
RawExchange exchange(const std::vector<std::string> &pieces, std::chrono::milliseconds gap,
		     bool endOfStream = false)
{
	const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(fd >= 0);
	// Timed from before the connect: the agent's deadline starts at its accept, later, so
	// `took` is at least the deadline however slowly either side runs.
	const auto start = std::chrono::steady_clock::now();
	sockaddr_in address{};
	address.sin_family = AF_INET;
	address.sin_port = htons(10263);
	address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	REQUIRE(connect(fd, reinterpret_cast<const sockaddr *>(&address), sizeof(address)) == 0);
	for (size_t i = 0; i < pieces.size(); i++) {
		if (i > 0)
			std::this_thread::sleep_for(gap);
		(void)send(fd, pieces[i].data(), pieces[i].size(), MSG_NOSIGNAL);
	}
	if (endOfStream)
		shutdown(fd, SHUT_WR);
	const timeval hang{10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hang, sizeof(hang));
	RawExchange out;
	char buffer[4096];
	for (;;) {
		const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
		if (n > 0) {
			out.reply.append(buffer, size_t(n));
			continue;
		}
		out.closed = n == 0 || errno == ECONNRESET;
		break;
	}
	out.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
	close(fd);
	return out;
}

} // namespace

TEST_CASE("a request is read as it comes: in pieces, with its end of stream, within its deadline and limits")
{
	requireCurl();
	TempDir dir;
	dir.write("config", kSlowResync);
	AgentProcess agent({"--config=" + dir.file("config"), kHealthAddr});
	requireWithin([] { return answers("/livez", 200, "ok"); }, 5s, agent, "live", endpoints);
	const auto answered = [](const RawExchange &e, const char *status) {
		INFO("reply: " << e.reply);
		return e.closed && e.reply.rfind(std::string("HTTP/1.1 ") + status, 0) == 0;
	};

	// Three pieces 200 ms apart: parsed as they come, answered once whole.
	const RawExchange pieces = exchange({"GET /li", "vez HTTP/1.1\r\nHo", "st: x\r\n\r\n"}, 200ms);
	CHECK(answered(pieces, "200"));
	CHECK_THAT(pieces.reply, Catch::EndsWith("\r\n\r\nok\n"));
	// A request and the end of the client's stream together: still answered.
	CHECK(answered(exchange({"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"}, 0ms, true), "200"));
	// A body is read with its header, in one piece or two.
	const std::string post = "POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n";
	CHECK(answered(exchange({post + "hello"}, 0ms), "405"));
	CHECK(answered(exchange({post, "hello"}, 100ms), "405"));

	// No answer for what is not a whole, well-formed request within its limits.
	const RawExchange partial = exchange({"GET /livez HTTP/1.1\r\n"}, 0ms);
	CHECK(partial.closed);
	CHECK(partial.reply.empty());
	// Never before its 2 s: a lower bound, which load can only make later, measured from
	// before the connect (exchange()), so the agent's accept cannot start its clock first.
	CHECK(partial.took >= 1900ms);
	const RawExchange big = exchange({"GET /livez HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n"}, 0ms);
	CHECK(big.closed);
	CHECK(big.reply.empty());
	const RawExchange garbage = exchange({"NOT HTTP AT ALL\r\n\r\n"}, 0ms);
	CHECK(garbage.closed);
	CHECK(garbage.reply.empty());
	const RawExchange leaves = exchange({"GET /livez HTTP/1.1\r\n"}, 0ms, true);
	CHECK(leaves.closed);
	CHECK(leaves.reply.empty());

	CHECK(answered(exchange({"GET /livez HTTP/1.1\r\n\r\n"}, 0ms), "200"));
	CHECK(agent.stop(SIGTERM) == 0);
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}
