// SPDX-License-Identifier: Apache-2.0
// Bounded, non-blocking reads of regular files and listings of directories.
#include "ip-masq-agent/base/bounded_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq {

namespace {

FileRead failedRead(int errnum)
{
	FileRead read;
	read.outcome = errnum == ENOENT ? FileRead::Outcome::absent : FileRead::Outcome::failed;
	read.errnum = errnum;
	return read;
}

// Whether a stat()ed path may be read; if not, the FileRead that says so.
bool regularOrSay(const struct stat &st, FileRead &read)
{
	if (S_ISREG(st.st_mode))
		return true;
	read.outcome = FileRead::Outcome::notRegular;
	read.mode = st.st_mode;
	return false;
}

DirListing failedListing(DirListing::Outcome outcome, int errnum = 0, std::string name = {})
{
	DirListing listing;
	listing.outcome = outcome;
	listing.errnum = errnum;
	listing.name = std::move(name);
	return listing;
}

} // namespace

Error fileReadError(const std::string &path, const FileRead &read, size_t maxBytes)
{
	switch (read.outcome) {
	case FileRead::Outcome::text: break;
	case FileRead::Outcome::absent:
		return Error(fmt::format("{}: does not exist", escaped(path)), ENOENT);
	case FileRead::Outcome::notRegular:
		return Error(fmt::format("{}: is {}, not a regular file (symlinks followed)", escaped(path),
					 fileKindName(read.mode)),
			     S_ISDIR(read.mode) ? EISDIR : EINVAL);
	case FileRead::Outcome::tooLarge:
		return Error(fmt::format("{}: is {}, more than the {} bytes it may have", escaped(path),
					 read.size < 0 ? std::string("growing while it is read")
						       : fmt::format("{} bytes", read.size),
					 maxBytes),
			     EFBIG);
	case FileRead::Outcome::failed: break;
	}
	return Error(fmt::format("{}: cannot read it: {}", escaped(path), std::strerror(read.errnum)),
		     read.errnum);
}

const char *fileKindName(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO (named pipe)";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISSOCK(mode))
		return "a socket";
	return "not a regular file";
}

FileRead readBoundedFile(const std::string &path, size_t maxBytes)
{
	FileRead read;
	struct stat st {};
	if (stat(path.c_str(), &st) != 0)
		return failedRead(errno);
	if (!regularOrSay(st, read))
		return read;
	UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
	if (!fd.isValid())
		return failedRead(errno);
	if (fstat(fd.get(), &st) != 0)
		return failedRead(errno);
	if (!regularOrSay(st, read))
		return read;
	if (st.st_size > static_cast<off_t>(maxBytes)) {
		read.outcome = FileRead::Outcome::tooLarge;
		read.size = st.st_size;
		return read;
	}
	read.text.reserve(static_cast<size_t>(st.st_size) + 1);
	char buf[65536];
	while (read.text.size() <= maxBytes) {
		const size_t want = std::min(sizeof(buf), maxBytes + 1 - read.text.size());
		const ssize_t n = ::read(fd.get(), buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return failedRead(errno);
		if (n == 0) {
			read.outcome = FileRead::Outcome::text;
			return read;
		}
		read.text.append(buf, static_cast<size_t>(n));
	}
	read.outcome = FileRead::Outcome::tooLarge;
	read.size = -1;
	read.text.clear();
	return read;
}

DirListing listRegularFiles(const std::string &dir, const std::function<bool(std::string_view)> &wanted,
			    size_t maxFiles, size_t maxEntries)
{
	DirStream stream = DirStream::open(dir.c_str());
	if (!stream.isValid())
		return failedListing(errno == ENOENT	? DirListing::Outcome::absent
				     : errno == ENOTDIR ? DirListing::Outcome::notDirectory
							: DirListing::Outcome::failed,
				     errno);
	const int dirFd = stream.fd();

	DirListing listing;
	for (size_t seen = 0;; seen++) {
		if (seen > maxEntries)
			return failedListing(DirListing::Outcome::tooManyEntries);
		const dirent *entry = stream.next();
		if (entry == nullptr) {
			if (errno != 0)
				return failedListing(DirListing::Outcome::failed, errno);
			break;
		}
		if (!wanted(entry->d_name))
			continue;
		// A dangling symlink or a symlink loop is not a file: during an update a link
		// may point at something that is going away.
		struct stat st {};
		if (fstatat(dirFd, entry->d_name, &st, 0) != 0) {
			if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR)
				continue;
			return failedListing(DirListing::Outcome::failed, errno, entry->d_name);
		}
		if (!S_ISREG(st.st_mode))
			continue;
		if (listing.names.size() == maxFiles)
			return failedListing(DirListing::Outcome::tooManyFiles);
		listing.names.emplace_back(entry->d_name);
	}
	std::sort(listing.names.begin(), listing.names.end()); // bytes, compared unsigned
	listing.outcome = DirListing::Outcome::names;
	return listing;
}

} // namespace ipmasq
