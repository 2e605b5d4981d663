// SPDX-License-Identifier: Apache-2.0
// UniqueFd: sole owner of a file descriptor (inotify, timerfd, signalfd), closed on destruction;
// DirStream: the one owner of every directory stream the agent reads.
#pragma once

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <unistd.h>
#include <utility>

namespace ipmasq {

class UniqueFd
{
public:
	UniqueFd() = default;
	explicit UniqueFd(int fd) : fd_(fd) {}
	~UniqueFd() { reset(); }

	UniqueFd(const UniqueFd &) = delete;
	UniqueFd &operator=(const UniqueFd &) = delete;
	UniqueFd(UniqueFd &&other) noexcept : fd_(other.release()) {}
	UniqueFd &operator=(UniqueFd &&other) noexcept
	{
		reset(other.release());
		return *this;
	}

	int get() const { return fd_; }
	bool isValid() const { return fd_ >= 0; }

	int release() { return std::exchange(fd_, -1); }
	void reset(int fd = -1)
	{
		if (fd_ >= 0)
			::close(fd_);
		fd_ = fd;
	}

private:
	int fd_ = -1;
};

// A directory stream and the descriptor under it, closed together on destruction. Every
// directory the agent lists goes through it, so no path can leak a stream or close its
// descriptor twice (fdopendir() takes the descriptor over; closedir() closes both).
class DirStream
{
public:
	// `path` (relative to the directory `atFd` unless AT_FDCWD) opened as a directory;
	// an invalid stream when it cannot be, errno saying why (ENOENT, ENOTDIR, EMFILE, ...).
	static DirStream open(const char *path, int atFd = AT_FDCWD)
	{
		UniqueFd fd(::openat(atFd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
		if (!fd.isValid())
			return {};
		DirStream stream;
		stream.dir_.reset(::fdopendir(fd.get()));
		if (!stream.dir_) {
			const int err = errno; // close() must not change the caller's reason
			fd.reset();
			errno = err;
			return stream;
		}
		(void)fd.release(); // the stream owns it now
		return stream;
	}

	bool isValid() const { return dir_ != nullptr; }
	// The stream's own descriptor: for *at() calls on its entries, and to leave it out
	// of a count of open descriptors.
	int fd() const { return ::dirfd(dir_.get()); }
	// The next entry; nullptr at the end (errno 0) or after an error (errno says which).
	const dirent *next()
	{
		errno = 0;
		return ::readdir(dir_.get());
	}

private:
	struct Closer {
		void operator()(DIR *dir) const { ::closedir(dir); }
	};
	std::unique_ptr<DIR, Closer> dir_;
};

} // namespace ipmasq
