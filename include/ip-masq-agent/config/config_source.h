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

#include "ip-masq-agent/config/config_look.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/config/config_watch.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/base/siphash.h"

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
// the debounce, the write guard and its bound (a file held open for writing), the stamp
// cache, and the policy for a file that vanishes. It never blocks: the loop polls fd(),
// calls onWatchEvents() when it is readable, calls look() on every turn, and wakes itself
// up by nextWake() at the latest. (readSettled() is the one exception, for --once.)
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
	// The write guard's bound. A file that a process holds open for writing (the read
	// lease refused; or, where no lease can be taken, inotify's writes without a close)
	// is read once its files' sizes, time stamps and contents have stayed the same from
	// one read to the next this long: a writer still writing shows a change, and the
	// window starts again from that read; the same content at both ends of the window is
	// what is read, so a prefix a writer is still extending never passes for a shorter
	// list. Why 5 s: a writer that is alive pauses for milliseconds between writes (an
	// editor, kubectl cp, a shell's redirections), at most about a second when its CPU is
	// throttled or its pages are swapped in on a loaded node; 5 s is well above that,
	// and short against what a held-open file waited before (forever: at start, no table
	// at all) and against the resync (60 s). A writer that pauses longer than this in the
	// middle of a write has its partial file read; a partial file that does not parse is
	// a bad config (the last good rules stay), one that does is applied until the writer
	// finishes and the next change is read.
	static constexpr std::chrono::seconds kWriterQuietWindow{5};
	// --once waits at most this long for a file held open for writing to stay the same
	// for a whole window; a file that keeps changing is then an error.
	static constexpr std::chrono::seconds kSettledReadLimit{60};
	// A read that failed (an unreadable file, a FIFO in its place, out of descriptors or
	// memory) is tried again after this delay, doubled after each failure up to the
	// limit: some of these causes end with no inotify event to tell (a descriptor freed,
	// memory released), and the source must not wait for the resync.
	static constexpr std::chrono::milliseconds kReadRetryInitial{100};
	static constexpr std::chrono::seconds kReadRetryLimit{5};

	// Never fails: without inotify (out of instances, say) the source still works,
	// and changes are found by the resync; takeWatchWarning() says so.
	static ConfigSource open(ConfigLocation location);

	// --once: the config read once, as the daemon's first look reads it (the write guard
	// and its quiet window included), waiting as long as that takes but at most `limit`
	// (an error then: the file kept changing). This one blocks: --once has no loop. The
	// caller must block or ignore SIGIO (see above).
	static Result<ConfigContent> readSettled(ConfigLocation location,
						 Clock::duration limit = kSettledReadLimit);

	const std::string &path() const { return location_.path; }
	int fd() const { return watch_.fd(); }

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
	std::optional<std::string> takeWatchWarning() { return watch_.takeWarning(); }

private:
	ConfigSource(ConfigWatch watch, ConfigLocation location, std::string name);

	void armWatch(Clock::time_point now);
	void noteChange(Clock::time_point now);
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
	// One file as read now: its text (nullopt: gone), and whether a writer holds it open
	// (then it was read without the lease, and the write guard's window decides).
	// Only a regular file is ever opened (stat() first): opening a device can have
	// effects of its own, and readConfigText() reports what the path is instead.
	struct GuardedText {
		Result<std::optional<std::string>> text;
		bool writerSeen = false;
	};
	GuardedText readGuarded(const std::string &path) const;
	Result<std::optional<ConfigContent>> read(Clock::time_point now);
	// The content of files one of which a writer holds open (`held`): delivered once it
	// was the same (stamps and digest) at the start of a window of kWriterQuietWindow.
	Result<std::optional<ConfigContent>> readWhileWritten(ConfigContent content,
							      std::optional<Stamps> stamps,
							      std::vector<std::string> held,
							      Clock::time_point now);
	Result<std::optional<ConfigContent>> absent(Clock::time_point now);
	// A read failed: forget what was delivered, and schedule another read.
	tl::unexpected<Error> readFailed(Error error, Clock::time_point now);

	ConfigWatch watch_;
	ConfigLocation location_;
	std::string name_; // --config's file name in the directory watched; empty with --config-dir

	// A change seen and not yet read: the first and last event of the burst.
	std::optional<Clock::time_point> changeSince_;
	Clock::time_point lastEvent_;
	// The burst ended with a complete new file (see kSettle): nothing to wait for.
	bool changeComplete_ = false;

	// inotify's view of a write in progress (IN_MODIFY or a new empty file, no close
	// yet): the only witness of a writer where no read lease can be taken.
	bool writing_ = false;

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
	// The config while a writer holds one of its files open: its stamps and digest when
	// the current quiet window started, and the files held. nullopt: no writer seen.
	struct WrittenRead {
		Stamps stamps;
		ContentDigest digest;
		Clock::time_point since;
		std::vector<std::string> held;
	};
	std::optional<WrittenRead> written_;
	std::optional<ContentDigest> delivered_;
	std::optional<Stamps> deliveredStamp_;
	// After a failed read: when to read again, and the delay after the next failure.
	std::optional<Clock::time_point> readRetryAt_;
	std::chrono::milliseconds readRetryDelay_ = kReadRetryInitial;
	// The file was found missing after being present: since when.
	std::optional<Clock::time_point> absentSince_;
};

} // namespace ipmasq
