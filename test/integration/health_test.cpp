// SPDX-License-Identifier: Apache-2.0
// Liveness apart from readiness, through the real binary: a bad config is not ready but
// live, an idle loop stays live, a stopped process or a stopped loop thread is not.
#include <catch2/catch.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <thread>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/agent_status.h"
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
		const Answer dead = request("/livez");
		CHECK_THAT(dead.body, Catch::Matches("the event loop has not turned for 1[5-9] s .*\n"));
		// Readiness is the state the loop last reported: it cannot tell a hang.
		CHECK(request("/readyz").status == 200);
		loop.resume();
		// The overdue heartbeat timer wakes the loop at once.
		requireWithin([] { return answers("/livez", 200, "ok"); }, 3s, agent,
			      "live once the loop turns again", endpoints);
	}
	CHECK(agent.stop(SIGTERM) == 0);
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}
