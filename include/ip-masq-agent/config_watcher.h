// SPDX-License-Identifier: Apache-2.0
// Config watcher: inotify on the config file's directory, so edits, creates, deletes and
// Kubernetes ConfigMap updates (the "..data" symlink swap) are seen at once.
#pragma once

#include <chrono>
#include <string>

#include "ip-masq-agent/error.h"
#include "ip-masq-agent/unique_fd.h"

namespace ipmasq {

// Watches the directory, not the file: a ConfigMap volume replaces the file by
// renaming a new "..data" symlink over the old one, and an editor may replace it by
// rename too; a watch on the file itself would follow the old inode and go quiet.
class ConfigWatcher
{
public:
	static Result<ConfigWatcher> create(const std::string &configPath);

	int fd() const { return fd_.get(); }
	bool armed() const { return wd_ >= 0; }

	// Arm the directory watch if it is not (the directory may appear later).
	// Call before reading the config, so that no change can slip in between.
	Status arm();

	// Drain pending events without blocking. True if any may have changed the config
	// (a write still in progress does not count until the writer closes the file).
	bool readEvents();

	// Someone is writing the file in place and has not closed it yet (within the last
	// two seconds): reading it now could see it truncated or half-written.
	bool writeInProgress() const;

private:
	ConfigWatcher(UniqueFd fd, std::string dir, std::string name)
		: fd_(std::move(fd)), dir_(std::move(dir)), name_(std::move(name)) {}

	bool concernsConfig(const char *name) const;
	// Track writes in progress; true if the event may have changed the config.
	bool noteEvent(const char *name, uint32_t mask);

	UniqueFd fd_;
	std::string dir_;
	std::string name_;
	int wd_ = -1;
	bool writing_ = false;
	std::chrono::steady_clock::time_point lastWrite_;
};

} // namespace ipmasq
