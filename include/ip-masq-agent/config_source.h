// SPDX-License-Identifier: Apache-2.0
// The config source: watches the config file (or the config directory's files), lets
// changes settle, and yields new config content, "the config is absent", or nothing. It
// holds the watch, not the policy of the rules.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "ip-masq-agent/config_look.h"
#include "ip-masq-agent/config_location.h"
#include "ip-masq-agent/error.h"
#include "ip-masq-agent/siphash.h"
#include "ip-masq-agent/unique_fd.h"

namespace ipmasq {

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

// inotify on the config's directory, or with --config-dir on that directory (and, while
// the directory is missing, on its nearest existing ancestor, as systemd path units do),
// the debounce, the write guard, the stamp cache, and the policy for a file that
// vanishes. It never blocks:
// the loop polls fd(), calls onWatchEvents() when it is readable, calls look() on every
// turn, and wakes itself up by nextWake() at the latest.
//
// The process must block or ignore SIGIO: a read lease (the write guard) signals it when
// a writer opens the file during the few milliseconds it is being read.
class ConfigSource
{
public:
	using Clock = std::chrono::steady_clock;

	// Events settle this long before the file is read (an editor renames the old file
	// away, then writes the new one); a burst that goes on is cut short after the limit.
	// With --config, a rename onto the file's name or a ConfigMap "..data" swap is read at
	// once: the new content is complete the moment it appears. (With --config-dir the
	// settle stays: after a swap, the kubelet still links a new key's file, and files
	// renamed one by one are one change.)
	static constexpr std::chrono::milliseconds kSettle{30};
	static constexpr std::chrono::milliseconds kSettleLimit{300};
	// A file (or its directory) that vanishes means "absent" only once it has stayed
	// away this long (with --config-dir: the last of the files); back within it, the new
	// file is applied with no pass through
	// the defaults. At start-up an absent file means absent at once.
	static constexpr std::chrono::seconds kAbsentGrace{2};
	// Where read leases are unavailable, a writer that stays silent this long after its
	// last write is presumed dead, and the file is read as it is.
	static constexpr std::chrono::seconds kWriteTimeout{2};
	// A read that failed (an unreadable file, a FIFO in its place, out of descriptors or
	// memory) is tried again after this delay, doubled after each failure up to the
	// limit: some of these causes end with no inotify event to tell (a descriptor freed,
	// memory released), and the source must not wait for the resync.
	static constexpr std::chrono::milliseconds kReadRetryInitial{100};
	static constexpr std::chrono::seconds kReadRetryLimit{5};

	// Never fails: without inotify (out of instances, say) the source still works,
	// and changes are found by the resync; takeWatchWarning() says so.
	static ConfigSource open(ConfigLocation location);

	const std::string &path() const { return location_.path; }
	int fd() const { return inotify_.get(); }

	// Drain the pending inotify events without blocking.
	void onWatchEvents(Clock::time_point now);

	// New content if there is any: nullopt when nothing new (or not yet: a change
	// still settling, a file being written, a vanished file within its grace time).
	// An error (unreadable file) leaves the last content in force, and the source
	// forgets what it delivered: the next good read delivers its content even if it is
	// the same as before the error, so that the caller sees the error end. The read is
	// retried by nextWake() (kReadRetryInitial, growing to kReadRetryLimit).
	Result<std::optional<ConfigContent>> look(ConfigLook why, Clock::time_point now);

	// The caller could not take in what look() delivered last (it ran out of memory
	// parsing it): the next look delivers the content again, even if unchanged.
	void redeliver();

	// When look(ConfigLook::ifDue) has something to do next; nullopt: nothing pending.
	std::optional<Clock::time_point> nextWake() const;

	// Why the config is not being watched, once per distinct reason (then nullopt).
	std::optional<std::string> takeWatchWarning();

private:
	ConfigSource(UniqueFd inotify, ConfigLocation location, std::string dir, std::string name);

	void armWatch(Clock::time_point now);
	void watchAncestor();
	void dropAncestorWatch();
	void noteChange(Clock::time_point now);
	void warnWatch(std::string message);
	bool concernsConfig(const char *name) const;
	void noteFileEvent(const char *name, uint32_t mask, Clock::time_point now);
	bool changeDue(Clock::time_point now) const;
	// What identifies the config's files without reading them: each file's path and stamp
	// (with --config, one, which may say "absent"). nullopt: cannot be told now.
	using Stamps = std::vector<std::pair<std::string, FileStamp>>;
	std::optional<Stamps> stampsNow() const;
	static std::optional<Stamps> stampsOf(const std::vector<std::string> &files);
	// The files to read: --config's, or the directory's listing (none if it is missing).
	Result<std::vector<std::string>> filesToRead() const;
	// Read one file, unless a writer has it open: then nullopt, and the read waits.
	// Only a regular file is ever opened (stat() first): opening a device can have
	// effects of its own, and readConfigText() reports what the path is instead.
	std::optional<Result<std::optional<std::string>>> readUnlessWritten(const std::string &path,
									 Clock::time_point now);
	Result<std::optional<ConfigContent>> read(Clock::time_point now);
	Result<std::optional<ConfigContent>> absent(Clock::time_point now);
	// A read failed: forget what was delivered, and schedule another read.
	tl::unexpected<Error> readFailed(Error error, Clock::time_point now);

	UniqueFd inotify_;
	ConfigLocation location_;
	std::string dir_;  // the directory watched
	std::string name_; // --config's file name in it; empty with --config-dir
	int dirWatch_ = -1;
	int ancestorWatch_ = -1;
	std::string ancestorChild_; // the name in the watched ancestor that leads to dir_
	std::optional<std::string> watchWarning_;
	std::string lastWatchError_;

	// A change seen and not yet read: the first and last event of the burst.
	std::optional<Clock::time_point> changeSince_;
	Clock::time_point lastEvent_;
	// The burst ended with a complete new file (see kSettle): nothing to wait for.
	bool changeComplete_ = false;

	// inotify's view of a write in progress (IN_MODIFY or a new empty file, no close yet),
	// and whether a read waits for it without a lease to tell (then kWriteTimeout holds).
	bool writing_ = false;
	Clock::time_point lastWrite_;
	bool waitingForWriterBlindly_ = false;

	// What was last delivered, as a digest, and the stamps of the files it came from.
	// The text itself goes to the caller and is not kept (a config of 100,000 CIDRs is
	// 2 MB that would stay resident). The digest is keyed with a random key of this
	// process (SipHash128), so no config can be written to have another one's digest
	// and pass for "nothing new".
	struct ContentDigest {
		bool present = false;
		// false after a read error: something was there, its content is not known, and
		// no content compares equal to it.
		bool known = true;
		SipHash128::Digest digest{};
		bool operator==(const ContentDigest &other) const
		{
			return present == other.present && known && other.known &&
			       digest == other.digest;
		}
	};
	static ContentDigest digestOf(const ConfigContent &content);
	std::optional<ContentDigest> delivered_;
	std::optional<Stamps> deliveredStamp_;
	// After a failed read: when to read again, and the delay after the next failure.
	std::optional<Clock::time_point> readRetryAt_;
	std::chrono::milliseconds readRetryDelay_ = kReadRetryInitial;
	// The file was found missing after being present: since when.
	std::optional<Clock::time_point> absentSince_;
};

} // namespace ipmasq
