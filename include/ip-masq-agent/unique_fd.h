// SPDX-License-Identifier: Apache-2.0
// UniqueFd: sole owner of a file descriptor (inotify, timerfd, signalfd), closed on destruction;
// DirHandle: the same for a directory stream (opendir, fdopendir).
#pragma once

#include <dirent.h>
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

struct DirCloser {
	void operator()(DIR *dir) const { closedir(dir); }
};
using DirHandle = std::unique_ptr<DIR, DirCloser>;

} // namespace ipmasq
