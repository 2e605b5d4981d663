// SPDX-License-Identifier: Apache-2.0
// The config's directory watch: inotify on the directory (and, while it is missing, on its
// nearest existing ancestor, as systemd path units do), armed again when it comes back.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq {

class ConfigWatch
{
public:
	// Never fails: without inotify (out of instances, say) nothing is watched, and
	// takeWarning() says so.
	explicit ConfigWatch(std::string dir);

	const std::string &dir() const { return dir_; }
	int fd() const { return inotify_.get(); }
	// Arms the directory's watch (or, while it is missing, its ancestor's): true when the
	// directory's watch is armed by this call.
	bool arm();
	// Drains the pending events without blocking: `onEvent` gets each named event in the
	// directory (name and inotify mask), and a null name for a change no file's event
	// tells (events lost, the directory gone). True when the watch must be armed again.
	bool drain(const std::function<void(const char *name, uint32_t mask)> &onEvent);
	// Why the config is not being watched, once per distinct reason (then nullopt).
	std::optional<std::string> takeWarning() { return std::exchange(warning_, std::nullopt); }

private:
	void watchAncestor();
	void dropAncestorWatch();
	void warn(std::string message);

	UniqueFd inotify_;
	std::string dir_; // the directory watched
	int dirWatch_ = -1;
	int ancestorWatch_ = -1;
	std::string ancestorChild_; // the name in the watched ancestor that leads to dir_
	std::optional<std::string> warning_;
	LogOnce error_;
};

} // namespace ipmasq
