// SPDX-License-Identifier: Apache-2.0
// A table of the agent's name held by another process with the flag "owner": the refusal
// names that process, and once it exits (the kernel then removes its table silently) the
// agent's own table is back within a second, not at the next resync.
#include <catch2/catch.hpp>

#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "agent_process.h"
#include "connection_flood.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;
using ipmasq::UniqueFd;

namespace {

constexpr uint16_t kPort = 10263;

bool agentTableInForce()
{
	return agentTableHas("192.0.2.0/24");
}

// owner_table_helper as a child: it holds the table until its stdin closes.
class TableOwner
{
public:
	TableOwner()
	{
		int in[2], out[2];
		REQUIRE(pipe2(in, O_CLOEXEC) == 0);
		REQUIRE(pipe2(out, O_CLOEXEC) == 0);
		pid_ = fork();
		REQUIRE(pid_ >= 0);
		if (pid_ == 0) {
			dup2(in[0], STDIN_FILENO);
			dup2(out[1], STDOUT_FILENO);
			execl(OWNER_TABLE_HELPER, OWNER_TABLE_HELPER, "ip-masq-agent", nullptr);
			_exit(127);
		}
		close(in[0]);
		close(out[1]);
		stdin_.reset(in[1]);
		stdout_.reset(out[0]);
	}
	~TableOwner() { release(); }

	// "owned <port>" once it holds the table, or what it said instead.
	std::string waitOwned()
	{
		std::string said;
		char buf[256];
		for (int reads = 0; reads < 100 && said.find('\n') == std::string::npos; reads++) {
			pollfd pfd{stdout_.get(), POLLIN, 0};
			if (poll(&pfd, 1, 100) != 1)
				continue;
			const ssize_t n = read(stdout_.get(), buf, sizeof(buf));
			if (n <= 0)
				break;
			said.append(buf, static_cast<size_t>(n));
		}
		return said;
	}
	pid_t pid() const { return pid_; }
	// Its stdin closes: it exits, and the kernel removes its table.
	void release()
	{
		stdin_.reset();
		if (pid_ > 0) {
			waitFor([this] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, 5s);
			pid_ = -1;
		}
	}

private:
	pid_t pid_ = -1;
	UniqueFd stdin_, stdout_;
};

} // namespace

TEST_CASE("a table held with the flag owner: the refusal names its process; its exit frees it")
{
	TempDir dir;
	dir.write("config", "resyncInterval: 1h\nnonMasqueradeCIDRs: [192.0.2.0/24]\n");
	AgentProcess agent({"--config=" + dir.file("config"),
			    fmt::format("--health-addr=127.0.0.1:{}", kPort)});
	REQUIRE(waitFor(agentTableInForce, 5s));

	// The helper deletes the agent's table and creates its own, owned one.
	TableOwner owner;
	const std::string said = owner.waitOwned();
	REQUIRE_THAT(said, Catch::StartsWith("owned "));
	const std::string port = said.substr(6, said.find('\n') - 6);
	const std::string expected = fmt::format("netlink port {}, pid {} \"owner_table_hel", port,
						 owner.pid());
	const auto named = waitFor([&] { return agent.log().find(expected) != std::string::npos; }, 5s);
	INFO("agent log:\n" << agent.log() << "\ntable:\n" << agentTableListing());
	REQUIRE(named);
	const std::string text = agent.log();
	CHECK_THAT(text, Catch::Contains("is held by another process with the flag \"owner\""));
	CHECK_THAT(text, !Catch::Contains("needs CAP_NET_ADMIN") &&
				 !Catch::Contains("lacks CAP_NET_ADMIN"));
	const ProbeAnswer ready = probe(kPort, "/readyz");
	CHECK(ready.status == 503);
	CHECK_FALSE(agentTableInForce());
	CHECK(agent.running());

	// The owner exits: the kernel removes its table, with no notification to anyone. The
	// resync is an hour away, so the locked-out retry (every 250 ms: reconciler_test, with
	// its clock) found it; kChangeSeen only catches a hang.
	owner.release();
	const auto back = waitFor(agentTableInForce, kChangeSeen);
	INFO("the table not back within " << kChangeSeen.count()
					  << " s (a bound only a hang misses)\nagent log:\n"
					  << agent.log() << "\ntable:\n" << agentTableListing());
	REQUIRE(back);
	WARN("the agent's table was back " << back->count() << " ms after the owner exited");
	CHECK(waitFor([] { return probe(kPort, "/readyz").status == 200; }, kChangeSeen));
	CHECK(agent.stop(SIGTERM) == 0);
	deleteAgentTable();
}
