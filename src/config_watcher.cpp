// SPDX-License-Identifier: Apache-2.0
// Config watcher: inotify on the config's directory, filtered to the events that matter.
#include "ip-masq-agent/config_watcher.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sys/inotify.h>
#include <sys/stat.h>

#include <fmt/format.h>

namespace ipmasq {

namespace {

// IN_MODIFY only marks a write in progress: a file written in place is read once it is
// closed (IN_CLOSE_WRITE), never half-written or truncated, which would briefly mean
// "empty file = defaults" or a list cut short.
constexpr uint32_t kEvents = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_MOVED_FROM |
			     IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

// A writer that stays silent this long has crashed or wedged: read the file anyway.
constexpr auto kWriteTimeout = std::chrono::seconds(2);

// Kubernetes' atomic writer renames a new "..data" symlink into place on every update.
constexpr const char *kConfigMapDataLink = "..data";

} // namespace

Result<ConfigWatcher> ConfigWatcher::create(const std::string &configPath)
{
	const std::filesystem::path path(configPath);
	std::string dir = path.has_parent_path() ? path.parent_path().string() : ".";
	std::string name = path.filename().string();

	UniqueFd fd(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
	if (!fd.isValid())
		return fail(fmt::format("cannot watch {} for changes: inotify_init1: {}", dir,
					std::strerror(errno)), errno);
	return ConfigWatcher(std::move(fd), std::move(dir), std::move(name));
}

Status ConfigWatcher::arm()
{
	if (wd_ >= 0)
		return {};
	wd_ = inotify_add_watch(fd_.get(), dir_.c_str(), kEvents);
	if (wd_ < 0)
		return fail(fmt::format("cannot watch {} for config changes: {}; changes are picked "
					"up at the next resync instead", dir_, std::strerror(errno)),
			    errno);
	return {};
}

bool ConfigWatcher::concernsConfig(const char *name) const
{
	// Another file in a shared directory such as /etc does not matter.
	if (name == nullptr || *name == '\0')
		return false;
	return name_ == name || std::strcmp(name, kConfigMapDataLink) == 0;
}

bool ConfigWatcher::noteEvent(const char *name, uint32_t mask)
{
	if (mask & IN_MODIFY) {
		writing_ = true;
		lastWrite_ = std::chrono::steady_clock::now();
		return false;
	}
	if (mask & IN_CREATE) {
		// A new regular file is still empty: its writer's IN_CLOSE_WRITE follows. A
		// new symlink (or hard link) is complete at once.
		struct stat st {};
		const std::string path = fmt::format("{}/{}", dir_, name);
		if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
		    st.st_size == 0) {
			writing_ = true;
			lastWrite_ = std::chrono::steady_clock::now();
			return false;
		}
	}
	// Closed, renamed, deleted, re-linked: whatever was being written is settled.
	writing_ = false;
	return true;
}

bool ConfigWatcher::writeInProgress() const
{
	return writing_ && std::chrono::steady_clock::now() - lastWrite_ < kWriteTimeout;
}

bool ConfigWatcher::readEvents()
{
	bool changed = false;
	alignas(inotify_event) char buf[16384];
	for (;;) {
		const ssize_t n = read(fd_.get(), buf, sizeof(buf));
		if (n <= 0)
			break; // EAGAIN: drained
		for (ssize_t off = 0; off < n;) {
			const auto *ev = reinterpret_cast<const inotify_event *>(buf + off);
			off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
			if (ev->mask & IN_Q_OVERFLOW) {
				changed = true; // events were lost: assume the worst
			} else if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
				// The directory itself went away: the file is gone too. Re-arm later.
				if (wd_ >= 0 && !(ev->mask & IN_IGNORED))
					inotify_rm_watch(fd_.get(), wd_);
				wd_ = -1;
				changed = true;
			} else if (concernsConfig(ev->len ? ev->name : nullptr)) {
				changed |= noteEvent(ev->name, ev->mask);
			}
		}
	}
	return changed;
}

} // namespace ipmasq
