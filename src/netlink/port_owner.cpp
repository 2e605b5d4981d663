// SPDX-License-Identifier: Apache-2.0
// Netlink port id -> socket inode (/proc/net/netlink) -> process (/proc/*/fd).
#include "ip-masq-agent/netlink/port_owner.h"

#include <cctype>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <linux/netlink.h>
#include <sstream>
#include <unistd.h>

#include <fmt/format.h>

namespace ipmasq::netlink {

namespace {

// Bounds on the scan: a node runs a few hundred processes; this stays a few milliseconds.
constexpr int kMaxProcesses = 4096;
constexpr int kMaxDescriptors = 65536;
constexpr int kMaxNetlinkLines = 65536;

std::optional<unsigned long> socketInode(uint32_t portId)
{
	std::ifstream in("/proc/net/netlink");
	std::string line;
	std::getline(in, line); // the header
	for (int lines = 0; lines < kMaxNetlinkLines && std::getline(in, line); lines++) {
		std::istringstream fields(line);
		std::string sk;
		unsigned protocol = 0, pid = 0;
		std::string groups, rmem, wmem, dump, locks, drops;
		unsigned long inode = 0;
		if (!(fields >> sk >> protocol >> pid >> groups >> rmem >> wmem >> dump >> locks >>
		      drops >> inode))
			continue;
		if (protocol == NETLINK_NETFILTER && pid == portId)
			return inode;
	}
	return std::nullopt;
}

bool isNumber(const char *name)
{
	if (*name == '\0')
		return false;
	for (; *name; name++)
		if (!std::isdigit(static_cast<unsigned char>(*name)))
			return false;
	return true;
}

std::string commandOf(pid_t pid)
{
	std::ifstream in(fmt::format("/proc/{}/comm", pid));
	std::string command;
	std::getline(in, command);
	return command;
}

// Whether process `pid` has a descriptor on `target` ("socket:[inode]"); counts the
// descriptors it looked at into `budget`.
bool holds(const std::string &pid, const std::string &target, int &budget)
{
	const std::string fdDir = "/proc/" + pid + "/fd";
	DIR *dir = opendir(fdDir.c_str());
	if (dir == nullptr)
		return false; // gone, or not ours to read
	bool found = false;
	char link[64];
	while (!found && budget > 0) {
		const dirent *entry = readdir(dir);
		if (entry == nullptr)
			break;
		if (!isNumber(entry->d_name))
			continue;
		budget--;
		const ssize_t n = readlinkat(dirfd(dir), entry->d_name, link, sizeof(link) - 1);
		found = n > 0 && std::string_view(link, static_cast<size_t>(n)) == target;
	}
	closedir(dir);
	return found;
}

} // namespace

std::optional<PortOwner> findPortOwner(uint32_t portId)
{
	const auto inode = socketInode(portId);
	if (!inode)
		return std::nullopt;
	const std::string target = fmt::format("socket:[{}]", *inode);
	DIR *proc = opendir("/proc");
	if (proc == nullptr)
		return std::nullopt;
	std::optional<PortOwner> owner;
	int budget = kMaxDescriptors;
	for (int processes = 0; !owner && processes < kMaxProcesses && budget > 0; processes++) {
		const dirent *entry = readdir(proc);
		if (entry == nullptr)
			break;
		if (!isNumber(entry->d_name) || !holds(entry->d_name, target, budget))
			continue;
		const auto pid = static_cast<pid_t>(std::strtol(entry->d_name, nullptr, 10));
		owner = PortOwner{pid, commandOf(pid)};
	}
	closedir(proc);
	return owner;
}

} // namespace ipmasq::netlink
