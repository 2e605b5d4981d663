// SPDX-License-Identifier: Apache-2.0
// The config's directory watch: inotify on the directory or its nearest ancestor.
#include "ip-masq-agent/config/config_watch.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sys/inotify.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

namespace {

// IN_MODIFY marks a write in progress: a file written in place is read once it is closed
// (IN_CLOSE_WRITE), or, held open, once it stays the same (kWriterQuietWindow).
constexpr uint32_t kDirEvents = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE |
				IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF |
				IN_MOVE_SELF | IN_ONLYDIR;
// While the directory is missing: the next component of its path appearing.
constexpr uint32_t kAncestorEvents = IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |
				     IN_ONLYDIR;
// No path has more components than this; a bound on the walk up to an ancestor.
constexpr int kMaxAncestors = 256;

} // namespace

ConfigWatch::ConfigWatch(std::string dir)
	: inotify_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC)), dir_(std::move(dir))
{
	const int err = errno; // inotify_init1's: moving the name makes no call
	if (!inotify_.isValid())
		warn(fmt::format("cannot watch {} for config changes: inotify_init1: {}; "
				 "changes are picked up at the next resync instead",
				 ipmasq::quoted(dir_), std::strerror(err)));
}

void ConfigWatch::warn(std::string message)
{
	if (error_.changed(message))
		warning_ = std::move(message);
}

bool ConfigWatch::arm()
{
	if (!inotify_.isValid() || dirWatch_ >= 0)
		return false;
	const int wd = inotify_add_watch(inotify_.get(), dir_.c_str(), kDirEvents);
	if (wd >= 0) {
		dirWatch_ = wd;
		dropAncestorWatch();
		error_.clear();
		return true;
	}
	const int err = errno; // before the message allocates
	if (err == ENOENT || err == ENOTDIR) {
		watchAncestor();
		return false;
	}
	warn(fmt::format("cannot watch {} for config changes: {}; changes are picked up "
			 "at the next resync instead", ipmasq::quoted(dir_), std::strerror(err)));
	return false;
}

void ConfigWatch::watchAncestor()
{
	std::filesystem::path child(dir_);
	int err = 0;
	for (int depth = 0; depth < kMaxAncestors; depth++) {
		std::filesystem::path parent = child.parent_path();
		if (parent.empty())
			parent = child.is_absolute() ? "/" : ".";
		const int wd = inotify_add_watch(inotify_.get(), parent.c_str(), kAncestorEvents);
		if (wd >= 0) {
			if (ancestorWatch_ >= 0 && ancestorWatch_ != wd)
				inotify_rm_watch(inotify_.get(), ancestorWatch_);
			ancestorWatch_ = wd;
			ancestorChild_ = child.filename().string();
			log::debug("{} is missing: watching {} for {} to appear", ipmasq::quoted(dir_),
				   ipmasq::quoted(parent.string()), ipmasq::quoted(ancestorChild_));
			return;
		}
		err = errno; // before anything allocates
		if ((err != ENOENT && err != ENOTDIR) || parent == child)
			break;
		child = parent;
	}
	warn(fmt::format("cannot watch {} nor any directory above it for config changes: "
			 "{}; changes are picked up at the next resync instead",
			 ipmasq::quoted(dir_), std::strerror(err)));
}

void ConfigWatch::dropAncestorWatch()
{
	if (ancestorWatch_ >= 0 && ancestorWatch_ != dirWatch_)
		inotify_rm_watch(inotify_.get(), ancestorWatch_);
	ancestorWatch_ = -1;
	ancestorChild_.clear();
}


bool ConfigWatch::drain(const std::function<void(const char *name, uint32_t mask)> &onEvent)
{
	alignas(inotify_event) char buf[16384];
	bool rearm = false;
	for (int reads = 0; reads < 1024; reads++) {
		const ssize_t n = inotify_.isValid() ? ::read(inotify_.get(), buf, sizeof(buf)) : -1;
		if (n <= 0)
			break; // EAGAIN: drained
		for (ssize_t off = 0; off < n;) {
			const auto *ev = reinterpret_cast<const inotify_event *>(buf + off);
			off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
			const char *name = ev->len ? ev->name : nullptr;
			const bool gone = ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED);
			if (ev->mask & IN_Q_OVERFLOW) {
				onEvent(nullptr, ev->mask); // events were lost: assume the worst
			} else if (ev->wd == dirWatch_ && gone) {
				// The directory went away (or moved, and its watch with it):
				// the file is gone too. Watch the path again from above.
				if (!(ev->mask & IN_IGNORED))
					inotify_rm_watch(inotify_.get(), dirWatch_);
				dirWatch_ = -1;
				onEvent(nullptr, ev->mask);
				rearm = true;
			} else if (ev->wd == dirWatch_) {
				if (name)
					onEvent(name, ev->mask);
			} else if (ev->wd == ancestorWatch_) {
				if (gone) {
					if (!(ev->mask & IN_IGNORED))
						inotify_rm_watch(inotify_.get(), ancestorWatch_);
					ancestorWatch_ = -1;
					rearm = true;
				} else if (name && ancestorChild_ == name) {
					rearm = true;
				}
			}
		}
	}
	return rearm || (dirWatch_ < 0 && ancestorWatch_ < 0);
}

} // namespace ipmasq
