// SPDX-License-Identifier: Apache-2.0
// The health endpoint under a hostile neighbour: idle connections, slowloris clients and a
// few connections re-opened as fast as they are closed. Every fresh probe must still be
// answered (a 200, never a closed connection), with descriptors and memory bounded, and a
// deleted table still healed. How fast (the kubelet gives a probe 1 s) is the benchmark's
// figure, section 10: a test that timed it would fail on a busy machine.
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <thread>

#include <fmt/format.h>

#include "agent_process.h"
#include "connection_flood.h"
#include "ip-masq-agent/daemon/health_server.h"
#include "ip-masq-agent/nft/backend.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;
using ipmasq::HealthServer;
using ipmasq::NetlinkBackend;

namespace {

constexpr uint16_t kPort = 10263;
const std::string kTable = "ip-masq-agent";

// What the agent holds while nobody else talks to it, and the most it held during a flood.
struct Usage {
	size_t descriptors = 0;
	size_t residentKiB = 0;
};

Usage usageOf(pid_t pid)
{
	return Usage{openDescriptors(pid), residentKiB(pid)};
}

// Samples the agent's usage every 20 ms from a thread of its own, keeping the maximum.
class UsageSampler
{
public:
	explicit UsageSampler(pid_t pid)
		: thread_([this, pid] {
			  for (int samples = 0; !stop_ && samples < 5000; samples++) {
				  const Usage now = usageOf(pid);
				  peak_.descriptors = std::max(peak_.descriptors, now.descriptors);
				  peak_.residentKiB = std::max(peak_.residentKiB, now.residentKiB);
				  std::this_thread::sleep_for(20ms);
			  }
		  })
	{
	}
	Usage stop()
	{
		stop_ = true;
		if (thread_.joinable())
			thread_.join();
		return peak_;
	}
	~UsageSampler() { stop(); }

private:
	std::atomic<bool> stop_{false};
	Usage peak_;
	std::thread thread_;
};

bool tableExists(NetlinkBackend &nl)
{
	auto read = nl.readTable(kTable);
	return read && *read;
}

// A probe's answer takes milliseconds under every flood here (the benchmark's figure); a
// probe left waiting behind the flood would never be answered, as the flood re-opens every
// connection the agent closes. 10 s only catches that.
constexpr auto kProbeAnswered = 10s;

// 32 fresh probes, /livez and /readyz in turn, 50 ms apart: each must answer 200.
void requireProbesAnswer(const AgentProcess &agent, const char *flood)
{
	std::chrono::milliseconds slowest{0};
	int answered = 0;
	std::string failures;
	for (int i = 0; i < 32; i++) {
		const ProbeAnswer a = probe(kPort, i % 2 ? "/readyz" : "/livez", kProbeAnswered);
		if (a.status == 200)
			answered++;
		else
			failures += fmt::format("\n  probe {}: status {} after {} ms: {}", i, a.status,
						a.took.count(), a.error);
		slowest = std::max(slowest, a.took);
		std::this_thread::sleep_for(50ms);
	}
	INFO(flood << ": " << answered << " of 32 probes answered 200 (each waited at most "
		   << kProbeAnswered.count() << " s, a bound only an unanswered probe misses)"
		   << failures << "\nagent log:\n" << agent.log());
	CHECK(answered == 32);
	WARN(flood << ": the slowest of 32 probes took " << slowest.count() << " ms");
}

// The table, deleted by someone else during the flood, is back: the loop is not starved by
// the endpoint's thread (the resync is an hour away, so the change notification did it;
// the benchmark times it, kChangeSeen only catches a hang).
void requireHealing(NetlinkBackend &nl, const AgentProcess &agent, const char *flood)
{
	REQUIRE(nl.remove(kTable));
	const auto took = waitFor([&] { return tableExists(nl); }, kChangeSeen);
	INFO(flood << ": the table not back within " << kChangeSeen.count()
		   << " s (a bound only a hang misses); agent log:\n" << agent.log());
	REQUIRE(took);
	WARN(flood << ": the table was back after " << took->count() << " ms");
}

// Runs `flood` against a fresh agent: probes, healing, and the agent's usage bounded.
void underFlood(ConnectionFlood::Kind kind, size_t connections, const char *name)
{
	TempDir dir;
	dir.write("config", "resyncInterval: 1h\n");
	AgentProcess agent({"--config=" + dir.file("config"),
			    fmt::format("--health-addr=127.0.0.1:{}", kPort)});
	auto nl = NetlinkBackend::open();
	REQUIRE(nl);
	REQUIRE(waitFor([] { return probe(kPort, "/readyz").status == 200; }, 5s));
	const Usage before = usageOf(agent.pid());

	UsageSampler sampler(agent.pid());
	{
		ConnectionFlood flood(kPort, kind, connections);
		// The flood in full swing: every connection opened and, past the agent's cap on
		// sessions, some already evicted (counted, not waited for).
		REQUIRE(waitFor([&] {
			return flood.opens() >= connections &&
			       (connections <= HealthServer::kMaxSessions || flood.closes() > 0);
		}, kChangeSeen));
		requireProbesAnswer(agent, name);
		requireHealing(**nl, agent, name);
		CHECK(agent.running());
		WARN(name << ": " << flood.opens() << " connections opened, " << flood.closes()
			  << " closed by the agent");
	}
	const Usage peak = sampler.stop();
	WARN(name << ": descriptors " << before.descriptors << " before, at most "
		  << peak.descriptors << " during the flood; resident memory " << before.residentKiB
		  << " KiB before, at most " << peak.residentKiB << " KiB");
	// Every session holds one descriptor, and there are at most kMaxSessions of them
	// (one more for a moment, accepted before the oldest is closed). Besides, the agent's
	// other threads open a few for a moment (the NAT check's and the SNAT usage's netlink
	// sockets, the config's reads): at most its reserve for them, which the sessions never
	// take (seen once: 85 against a bound of 84 that left them no room).
	CHECK(peak.descriptors <=
	      before.descriptors + HealthServer::kMaxSessions + 1 + HealthServer::kReservedDescriptors);
	// A session holds a few KiB at most (its header is cut at 8 KiB): measured, the
	// floods cost the agent 50 to 350 KiB.
	CHECK(peak.residentKiB <= before.residentKiB + 4 * 1024);

	// Once the flood is over, the agent is as it was.
	REQUIRE(waitFor([&] { return openDescriptors(agent.pid()) <= before.descriptors + 1; }, 5s));
	CHECK(probe(kPort, "/livez").status == 200);
	CHECK(agent.stop(SIGTERM) == 0);
	(void)(*nl)->remove(kTable);
}

} // namespace

TEST_CASE("16 idle connections, re-opened as soon as they are closed: every probe answers")
{
	underFlood(ConnectionFlood::Kind::idle, 16, "16 re-opened idle connections");
}

TEST_CASE("2,000 idle connections, re-opened when closed: every probe answers")
{
	underFlood(ConnectionFlood::Kind::idle, 2000, "2,000 idle connections");
}

TEST_CASE("200 slowloris clients: every probe answers")
{
	underFlood(ConnectionFlood::Kind::slowloris, 200, "200 slowloris clients");
}
