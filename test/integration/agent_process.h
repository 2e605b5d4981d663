// SPDX-License-Identifier: Apache-2.0
// Test support: the agent binary as a child process, its log, and bounded waiting.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ipmasq::test {

// A scratch directory removed (recursively) on destruction.
class TempDir
{
public:
	TempDir();
	~TempDir();
	TempDir(const TempDir &) = delete;
	TempDir &operator=(const TempDir &) = delete;

	const std::string &path() const { return path_; }
	std::string file(const std::string &name) const { return path_ + "/" + name; }
	// Write atomically (temp file + rename), as careful tools and kubelet do.
	void write(const std::string &name, const std::string &content) const;
	// Write in place (truncate + write), as a plain editor or shell redirection does.
	void overwrite(const std::string &name, const std::string &content) const;

private:
	std::string path_;
};

// Where a child's standard streams go: stdin from a file, stdout and stderr into
// descriptors of the caller, /dev/null (kDevNull), or nowhere: closed (kClosed).
struct ChildStreams {
	static constexpr int kDevNull = -1;
	static constexpr int kClosed = -2;
	std::string stdinPath = "/dev/null";
	int out = kDevNull;
	int err = kDevNull;
};

// The one way the tests and the benchmark start a program (the agent, Prometheus, a
// whole --once run): a child that dies with its parent (PR_SET_PDEATHSIG, also when the
// parent died before it could ask), with no signal blocked, `streams` connected, and
// `env` entries ("NAME=value") added. argv[0] is a path or a name looked up in PATH. A
// child that cannot start its program exits with 127 (126 when its streams cannot be
// opened). Returns the child's pid, or -1 with errno when fork() fails.
pid_t spawnChild(const std::vector<std::string> &argv, const ChildStreams &streams,
		 const std::vector<std::string> &env = {});

// Another program on the node, as a test's neighbour: `command` (sh -c) in the background
// until stop() or the destructor, at most `seconds` (timeout(1), which passes the stop on
// to its whole process group, so a pipeline ends too).
class Neighbour
{
public:
	Neighbour(const std::string &command, int seconds);
	~Neighbour() { stop(); }
	Neighbour(const Neighbour &) = delete;
	Neighbour &operator=(const Neighbour &) = delete;
	void stop();

private:
	pid_t pid_;
};

// How the agent is started, beyond its arguments.
struct AgentLaunch {
	std::vector<std::string> env; // "NAME=value" entries added to its environment
	// A command the agent runs under, found in PATH: {"prlimit", "--nofile=8", "--"}.
	std::vector<std::string> wrapper;
	// Its stderr (and stdout): the log file (kLogFile), closed (kClosed), or this
	// descriptor of the test (a pipe's write end).
	static constexpr int kLogFile = -2;
	static constexpr int kClosed = -1;
	int stderrFd = kLogFile;
};

// Runs the agent with `args`; stderr goes to a log file the test can read.
// The destructor kills it (SIGKILL) if it is still running, so no test leaves one behind.
class AgentProcess
{
public:
	// `env` entries ("NAME=value") are added to the child's environment.
	explicit AgentProcess(const std::vector<std::string> &args,
			      const std::vector<std::string> &env = {});
	AgentProcess(const std::vector<std::string> &args, const AgentLaunch &launch);
	~AgentProcess();
	AgentProcess(const AgentProcess &) = delete;
	AgentProcess &operator=(const AgentProcess &) = delete;

	pid_t pid() const { return pid_; }
	std::string log() const;
	// Send `sig` and wait (bounded) for exit; returns the exit status, or -1.
	int stop(int sig, std::chrono::milliseconds timeout = std::chrono::seconds(10));
	// Wait (bounded) for the process to exit by itself; returns the exit status, or -1.
	int wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));
	bool running();

private:
	pid_t pid_ = -1;
	std::string logPath_;
	int status_ = -1;
};

// `nft list table inet TABLE`, or empty when there is no such table.
std::string tableListing(const std::string &table = "ip-masq-agent");
// Whether the agent's table lists `needle`.
bool tableHas(const std::string &needle);
// Deletes table inet TABLE if it exists: a test's clean start or end.
void deleteTable(const std::string &table = "ip-masq-agent");

// How long a test waits for the agent to react to a change it sees at once (inotify, a
// netlink notification): milliseconds on an idle machine. The bound only catches a hang
// (tests assert no speed; the benchmark reports the latencies), and stays
// well below the default resync (60 s), so a reaction within it came from the change.
inline constexpr std::chrono::seconds kChangeSeen{20};

// The one wait of the daemon tests: until `condition` holds, at most `timeout`, which only
// catches a hang (at least ten times what the wait takes on an idle machine; the message
// says so). On timeout the test fails, showing `what`, the agent's log, the agent's table
// and whatever `context` adds (the health endpoint's answers, say); otherwise it reports
// how long it took.
void requireWithin(const std::function<bool()> &condition, std::chrono::milliseconds timeout,
		   const AgentProcess &agent, const char *what,
		   const std::function<std::string()> &context = {});

// Polls `condition` every few milliseconds until it holds or `timeout` passes.
// Returns how long it took, or nothing on timeout. Bounded in time and count.
std::optional<std::chrono::milliseconds> waitFor(const std::function<bool()> &condition,
						 std::chrono::milliseconds timeout);

// The agent binary under test (set by meson).
std::string agentBinary();

// The agent's table as `nft list table inet ip-masq-agent` prints it; "" when it is
// missing. agentTableHas(): whether the listing holds `needle`.
std::string agentTableListing();
bool agentTableHas(const std::string &needle);
// Deletes the agent's table if there is one: a test leaves nothing behind.
void deleteAgentTable();

// Count occurrences of `needle` in `haystack`.
size_t countOf(const std::string &haystack, const std::string &needle);

// The number the environment variable `name` gives (a generator's seed, a count), or
// `fallback` when it is unset or empty; anything but a number fails the test.
size_t envNumber(const char *name, size_t fallback);

// CPU time (user + system) a process has used so far, from /proc/PID/stat; -1 if unknown.
double cpuSeconds(pid_t pid);

// A real HTTP client (curl) against the agent: "<status> <body>".
std::string curlGet(const std::string &url);

// One series' value in the /metrics of the agent at `base` ("http://127.0.0.1:10263"),
// e.g. metricAt(base, "ip_masq_agent_syncs_total"); "" when absent.
std::string metricAt(const std::string &base, const std::string &series);

} // namespace ipmasq::test
