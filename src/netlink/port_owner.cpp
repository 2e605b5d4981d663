// SPDX-License-Identifier: Apache-2.0
// Netlink port id -> socket inode (/proc/net/netlink) -> process (/proc/*/fd).
#include "ip-masq-agent/netlink/port_owner.h"

#include <cctype>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <linux/netlink.h>
#include <sstream>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq::netlink {

namespace {

// Bounds on the scan: a node runs a few hundred processes; this stays a few milliseconds.
constexpr int kMaxProcesses = 4096;
constexpr int kMaxDescriptors = 65536;
constexpr int kMaxNetlinkLines = 65536;

// The inode of the NETLINK_NETFILTER socket of `portId`, nullopt when none is listed.
Result<std::optional<unsigned long>> socketInode(const std::string &proc, uint32_t portId)
{
	const std::string path = proc + "/net/netlink";
	errno = 0;
	std::ifstream in(path);
	std::string line;
	if (!std::getline(in, line)) { // the header
		const int err = errno != 0 ? errno : EIO; // before the message allocates
		return fail(fmt::format("cannot read {}: {}", path, std::strerror(err)), err);
	}
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

std::string commandOf(const std::string &proc, pid_t pid)
{
	std::ifstream in(fmt::format("{}/{}/comm", proc, pid));
	std::string command;
	std::getline(in, command);
	return command;
}

// Whether process `pid` (an entry of the open /proc, `procFd`) has a descriptor on
// `target` ("socket:[inode]"); counts the descriptors it looked at into `budget`. A
// process whose descriptors cannot be listed (gone, or not ours to read) holds none.
bool holds(int procFd, const char *pid, std::string_view target, int &budget)
{
	char fdDir[64];
	if (std::snprintf(fdDir, sizeof(fdDir), "%s/fd", pid) >= int(sizeof(fdDir)))
		return false;
	DirStream dir = DirStream::open(fdDir, procFd);
	if (!dir.isValid())
		return false;
	char link[64];
	while (budget > 0) {
		const dirent *entry = dir.next();
		if (entry == nullptr)
			return false;
		if (!isNumber(entry->d_name))
			continue;
		budget--;
		const ssize_t n = readlinkat(dir.fd(), entry->d_name, link, sizeof(link) - 1);
		if (n > 0 && std::string_view(link, static_cast<size_t>(n)) == target)
			return true;
	}
	return false;
}

} // namespace

Result<std::optional<PortOwner>> findPortOwner(uint32_t portId, const std::string &proc)
{
	const auto inode = socketInode(proc, portId);
	if (!inode)
		return fail(inode.error());
	if (!*inode)
		return std::nullopt;
	const std::string target = fmt::format("socket:[{}]", **inode);
	DirStream dir = DirStream::open(proc.c_str());
	if (!dir.isValid()) {
		const int err = errno; // before the message allocates
		return fail(fmt::format("cannot list {}: {}", proc, std::strerror(err)), err);
	}
	int budget = kMaxDescriptors;
	for (int processes = 0; processes < kMaxProcesses && budget > 0; processes++) {
		const dirent *entry = dir.next();
		if (entry == nullptr)
			break;
		if (!isNumber(entry->d_name) || !holds(dir.fd(), entry->d_name, target, budget))
			continue;
		const auto pid = static_cast<pid_t>(std::strtol(entry->d_name, nullptr, 10));
		return PortOwner{pid, commandOf(proc, pid)};
	}
	return std::nullopt;
}

} // namespace ipmasq::netlink
