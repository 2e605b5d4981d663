// SPDX-License-Identifier: Apache-2.0
// Test support: the agent binary as a child process, its log, and bounded waiting.
#include "agent_process.h"

#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <sstream>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "netns.h"

namespace ipmasq::test {

TempDir::TempDir()
{
	char tmpl[] = "/tmp/ipmasq-test-XXXXXX";
	REQUIRE(mkdtemp(tmpl) != nullptr);
	path_ = tmpl;
}

TempDir::~TempDir()
{
	run("rm -rf '" + path_ + "'");
}

void TempDir::write(const std::string &name, const std::string &content) const
{
	const std::string tmp = file(name) + ".tmp"; // same directory: rename is atomic
	std::ofstream(tmp) << content;
	REQUIRE(std::rename(tmp.c_str(), file(name).c_str()) == 0);
}

void TempDir::overwrite(const std::string &name, const std::string &content) const
{
	std::ofstream out(file(name), std::ios::trunc);
	out << content;
}

pid_t spawnChild(const std::vector<std::string> &argv, const ChildStreams &streams,
		 const std::vector<std::string> &env)
{
	// Everything the child needs is prepared before fork(): after it, only
	// async-signal-safe calls.
	std::vector<std::string> words = argv;
	std::vector<char *> cargv;
	for (std::string &word : words)
		cargv.push_back(word.data());
	cargv.push_back(nullptr);
	std::vector<std::string> entries = env;
	const pid_t parent = getpid();
	const pid_t pid = fork();
	if (pid != 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent) // the parent died before the request took effect
		_exit(126);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, nullptr);
	const int in = open(streams.stdinPath.c_str(), O_RDONLY);
	const int devNull = open("/dev/null", O_WRONLY);
	if (in < 0 || devNull < 0)
		_exit(126);
	dup2(in, STDIN_FILENO);
	for (const auto &[from, to] : {std::pair{streams.out, STDOUT_FILENO},
				      std::pair{streams.err, STDERR_FILENO}}) {
		if (from == ChildStreams::kClosed)
			close(to);
		else
			dup2(from == ChildStreams::kDevNull ? devNull : from, to);
	}
	for (std::string &entry : entries)
		putenv(entry.data());
	execvp(cargv[0], cargv.data());
	_exit(127);
}

AgentProcess::AgentProcess(const std::vector<std::string> &args, const std::vector<std::string> &env)
	: AgentProcess(args, AgentLaunch{env, {}, AgentLaunch::kLogFile})
{
}

AgentProcess::AgentProcess(const std::vector<std::string> &args, const AgentLaunch &launch)
{
	char tmpl[] = "/tmp/ipmasq-agent-log-XXXXXX";
	const int logFd = mkstemp(tmpl);
	REQUIRE(logFd >= 0);
	logPath_ = tmpl;

	std::vector<std::string> argv = launch.wrapper;
	argv.push_back(agentBinary());
	argv.insert(argv.end(), args.begin(), args.end());
	// If the test dies outright, the agent must not outlive it (spawnChild).
	const int out = launch.stderrFd == AgentLaunch::kLogFile ? logFd
			: launch.stderrFd == AgentLaunch::kClosed ? ChildStreams::kClosed
								 : launch.stderrFd;
	pid_ = spawnChild(argv, ChildStreams{"/dev/null", out, out}, launch.env);
	close(logFd);
	REQUIRE(pid_ >= 0);
}

AgentProcess::~AgentProcess()
{
	if (pid_ > 0 && running()) {
		kill(pid_, SIGKILL);
		waitpid(pid_, nullptr, 0);
	}
	std::remove(logPath_.c_str());
}

std::string AgentProcess::log() const
{
	std::ifstream in(logPath_);
	std::ostringstream out;
	out << in.rdbuf();
	return out.str();
}

bool AgentProcess::running()
{
	if (status_ != -1)
		return false;
	int status = 0;
	const pid_t r = waitpid(pid_, &status, WNOHANG);
	if (r == pid_) {
		status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		return false;
	}
	return r == 0;
}

int AgentProcess::wait(std::chrono::milliseconds timeout)
{
	waitFor([this] { return !running(); }, timeout);
	return running() ? -1 : status_;
}

int AgentProcess::stop(int sig, std::chrono::milliseconds timeout)
{
	if (running())
		kill(pid_, sig);
	return wait(timeout);
}

std::optional<std::chrono::milliseconds> waitFor(const std::function<bool()> &condition,
						 std::chrono::milliseconds timeout)
{
	const auto start = std::chrono::steady_clock::now();
	const auto step = std::chrono::milliseconds(5);
	for (auto n = timeout / step + 1; n > 0; n--) {
		if (condition())
			return std::chrono::duration_cast<std::chrono::milliseconds>(
				std::chrono::steady_clock::now() - start);
		if (std::chrono::steady_clock::now() - start > timeout)
			break;
		std::this_thread::sleep_for(step);
	}
	return std::nullopt;
}

std::string tableListing(const std::string &table)
{
	std::string out;
	if (run("nft list table inet " + table + " 2>/dev/null", &out) != 0)
		return {};
	return out;
}

bool tableHas(const std::string &needle)
{
	return tableListing().find(needle) != std::string::npos;
}

void deleteTable(const std::string &table)
{
	run("nft delete table inet " + table + " 2>/dev/null");
}

void requireWithin(const std::function<bool()> &condition, std::chrono::milliseconds timeout,
		   const AgentProcess &agent, const char *what,
		   const std::function<std::string()> &context)
{
	const auto took = waitFor(condition, timeout);
	INFO(what << ": not within " << timeout.count()
		  << " ms, a bound that only a hang misses (it is not a speed requirement)\n"
		  << (context ? context() + "\n" : "") << "agent log:\n" << agent.log()
		  << "\ntable:\n" << tableListing());
	REQUIRE(took);
	WARN(what << ": " << took->count() << " ms");
}

std::string agentBinary()
{
	// Another build of the agent, by hand (docs/development.md): e.g. main's, to show that a
	// new test fails without the change it covers.
	if (const char *other = std::getenv("IPMASQ_TEST_AGENT"); other && *other)
		return other;
	return AGENT_BINARY;
}

std::string agentTableListing()
{
	std::string out;
	if (run("nft list table inet ip-masq-agent 2>/dev/null", &out) != 0)
		return {};
	return out;
}

bool agentTableHas(const std::string &needle)
{
	return agentTableListing().find(needle) != std::string::npos;
}

void deleteAgentTable()
{
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}

size_t envNumber(const char *name, size_t fallback)
{
	const char *value = std::getenv(name);
	if (!value || !*value)
		return fallback;
	char *end = nullptr;
	const unsigned long long n = std::strtoull(value, &end, 10);
	INFO(name << "=" << value);
	REQUIRE((end && *end == '\0'));
	return size_t(n);
}

size_t countOf(const std::string &haystack, const std::string &needle)
{
	size_t n = 0;
	for (size_t pos = haystack.find(needle); pos != std::string::npos;
	     pos = haystack.find(needle, pos + needle.size()))
		n++;
	return n;
}

double cpuSeconds(pid_t pid)
{
	std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
	std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	// The command name (field 2) may hold spaces: count fields after its ')'.
	const size_t end = stat.rfind(')');
	if (end == std::string::npos)
		return -1;
	std::istringstream fields(stat.substr(end + 2));
	std::string field;
	unsigned long long utime = 0, stime = 0;
	for (int i = 3; i <= 15 && fields >> field; i++) {
		if (i == 14)
			utime = std::stoull(field);
		if (i == 15)
			stime = std::stoull(field);
	}
	return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string curlGet(const std::string &url)
{
	std::string out;
	run("curl -s -m 5 -w '\\n%{http_code}' '" + url + "'", &out);
	const size_t nl = out.rfind('\n');
	if (nl == std::string::npos)
		return "curl failed: " + out;
	return out.substr(nl + 1) + " " + out.substr(0, nl);
}

std::string metricAt(const std::string &base, const std::string &series)
{
	const std::string text = curlGet(base + "/metrics");
	const size_t at = text.find("\n" + series + " ");
	if (at == std::string::npos)
		return {};
	const size_t from = at + series.size() + 2;
	return text.substr(from, text.find('\n', from) - from);
}

Neighbour::Neighbour(const std::string &command, int seconds)
	: pid_(spawnChild({"timeout", std::to_string(seconds), "sh", "-c", command}, ChildStreams{}))
{
	REQUIRE(pid_ > 0);
}

void Neighbour::stop()
{
	if (pid_ <= 0)
		return;
	kill(pid_, SIGTERM);
	waitpid(pid_, nullptr, 0);
	pid_ = -1;
}

} // namespace ipmasq::test
