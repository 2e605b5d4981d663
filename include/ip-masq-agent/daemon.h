// SPDX-License-Identifier: Apache-2.0
// The daemon: a single-threaded event loop that keeps the kernel holding the desired ruleset.
#pragma once

#include <chrono>
#include <optional>
#include <sys/types.h>
#include <utility>
#include <string>

#include "ip-masq-agent/agent_status.h"
#include "ip-masq-agent/config_watcher.h"
#include "ip-masq-agent/error.h"
#include "ip-masq-agent/options.h"
#include "ip-masq-agent/ruleset.h"
#include "ip-masq-agent/systemd_notify.h"
#include "ip-masq-agent/unique_fd.h"

namespace ipmasq {

class NetlinkBackend;
class NftablesMonitor;

// What identifies a file's content without reading it: which file (a ConfigMap swap
// changes the inode behind the symlink), its size and its timestamps.
struct FileStamp {
	bool exists = false;
	dev_t device = 0;
	ino_t inode = 0;
	off_t size = 0;
	std::pair<time_t, long> modified{};
	std::pair<time_t, long> changed{};

	// The stamp of `path` (following symlinks); an absent file has a stamp too.
	// nullopt when it cannot be stat()ed for another reason.
	static std::optional<FileStamp> of(const std::string &path);
	bool operator==(const FileStamp &) const = default;
};

// Why a sync runs; named in logs.
enum class SyncTrigger { startup, configChange, resync, nftablesChange, reload };
const char *syncTriggerName(SyncTrigger trigger);

class Daemon
{
public:
	// `monitor` may be null (then drift is found at the next resync only).
	// Blocks SIGTERM, SIGINT and SIGHUP: from here on they are read in run().
	// `notifier` tells systemd READY=1 after the first good sync, STATUS= on changes,
	// and sends WATCHDOG=1 from the loop.
	Daemon(AgentOptions options, NetlinkBackend &backend, NftablesMonitor *monitor,
	       SystemdNotifier notifier = {});
	~Daemon();

	// Read the config and make the kernel hold its ruleset, doing nothing when nothing
	// changed. On a bad config the last good ruleset stays in force (and is healed).
	// Fails if the config is bad and there is no good ruleset yet, or if the kernel
	// rejected the batch.
	Status sync(SyncTrigger trigger);

	// Run until SIGTERM or SIGINT (exit status 0; the rules stay in place). SIGHUP
	// reloads at once. Config changes and changes to nftables trigger a sync within
	// milliseconds; the resync timer (resyncInterval) is the safety net.
	int run();

	// Health and counters, for the HTTP endpoint (which reads them from its thread).
	const AgentStatus &status() const { return status_; }

private:
	Status loadConfig(SyncTrigger trigger);
	Status unchangedConfig() const;
	// `recheck`: after a commit, look again if someone else committed meanwhile.
	Status ensureApplied(SyncTrigger trigger, bool recheck = true);
	void armResyncTimer();
	void armWatchdogTimer();
	static void armOneShot(const UniqueFd &timer, std::chrono::nanoseconds after);
	void reportToSystemd();

	AgentOptions options_;
	NetlinkBackend &backend_;
	NftablesMonitor *monitor_;
	std::optional<ConfigWatcher> watcher_;
	UniqueFd signalFd_;
	UniqueFd timerFd_;
	UniqueFd watchdogFd_;
	UniqueFd debounceFd_; // config events settle before the file is read
	std::optional<std::chrono::steady_clock::time_point> configPendingSince_;
	std::chrono::nanoseconds armedInterval_{0};

	// The config as last read: its bytes (nullopt: file absent) and what they meant.
	std::optional<std::optional<std::string>> lastText_;
	std::optional<FileStamp> lastStamp_;
	std::string lastConfigError_;
	std::chrono::nanoseconds resyncInterval_ = kDefaultResyncInterval;

	// The last good desired ruleset, and what we know the kernel holds: the version of
	// the desired ruleset last committed, and the generation of that commit.
	std::optional<Ruleset> desired_;
	uint64_t desiredVersion_ = 0;
	uint64_t appliedVersion_ = 0;
	std::optional<uint32_t> appliedGeneration_;
	std::string lastApplyError_;
	bool watchWarned_ = false;
	bool drifted_ = false; // the table was found changed; cleared by a successful apply

	AgentStatus status_;
	SystemdNotifier notifier_;
	bool readySent_ = false;
	std::string lastStatusLine_;
};

} // namespace ipmasq
