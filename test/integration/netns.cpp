// SPDX-License-Identifier: Apache-2.0
// Test support: a private network namespace and a small command runner.
#include "netns.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

namespace ipmasq::test {

namespace {

ino_t netnsInode()
{
	struct stat st {};
	if (stat("/proc/self/ns/net", &st) != 0)
		return 0;
	return st.st_ino;
}

} // namespace

std::string enterPrivateNetns()
{
	const ino_t before = netnsInode();
	if (unshare(CLONE_NEWNET) != 0)
		return fmt::format("cannot create a network namespace (unshare(CLONE_NEWNET): {}); "
				   "these tests need root or CAP_SYS_ADMIN", std::strerror(errno));
	const ino_t after = netnsInode();
	// Never touch the host's ruleset: refuse unless we are provably somewhere else.
	if (before == 0 || after == 0 || before == after)
		return "still in the original network namespace after unshare; refusing to run";
	if (run("ip link set lo up") != 0)
		return "cannot bring up loopback in the private namespace (is iproute2 installed?)";
	return {};
}

int run(const std::string &command, std::string *output, bool withStderr)
{
	const std::string full = withStderr ? "(" + command + ") 2>&1" : command;
	FILE *pipe = popen(full.c_str(), "r");
	if (!pipe)
		return -1;
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0)
		if (output)
			output->append(buf, n);
	const int status = pclose(pipe);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string runOrFail(const std::string &command)
{
	std::string out;
	const int status = run(command, &out, true);
	INFO("command: " << command << "\noutput: " << out);
	REQUIRE(status == 0);
	return out;
}

} // namespace ipmasq::test
