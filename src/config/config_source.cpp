// SPDX-License-Identifier: Apache-2.0
// The config source: the config's directory watch (config_watch.h) turned into changes,
// debounce, write guard, and the absent-file grace time.
#include "ip-masq-agent/config/config_source.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_dir.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/base/log.h"

namespace ipmasq {

namespace {

using Clock = ConfigSource::Clock;

// Kubernetes' atomic writer renames a new "..data" symlink into place on every update.
constexpr const char *kConfigMapDataLink = "..data";

// A read lease on the file: the kernel grants it only while nobody has the file open
// for writing, and while we hold it a writer's open() waits until we let go. So a file
// read under a lease was not being written; one whose lease is refused is read by the
// write guard's window.
enum class Lease { held, fileOpenForWriting, unavailable };

Lease takeReadLease(const UniqueFd &fd)
{
	if (!fd.isValid())
		return Lease::unavailable;
	if (fcntl(fd.get(), F_SETLEASE, F_RDLCK) == 0)
		return Lease::held;
	// EAGAIN: open for writing. Anything else (not the file's owner without
	// CAP_LEASE, a file system without leases, not a regular file): cannot tell.
	return errno == EAGAIN ? Lease::fileOpenForWriting : Lease::unavailable;
}

template<typename T>
void keepEarliest(std::optional<T> &earliest, T candidate)
{
	if (!earliest || candidate < *earliest)
		earliest = candidate;
}

} // namespace

std::optional<FileStamp> FileStamp::of(const std::string &path)
{
	struct stat st {};
	if (stat(path.c_str(), &st) != 0)
		return errno == ENOENT || errno == ENOTDIR ? std::optional(FileStamp{}) : std::nullopt;
	return FileStamp{true,
			 st.st_dev,
			 st.st_ino,
			 st.st_size,
			 {st.st_mtim.tv_sec, st.st_mtim.tv_nsec},
			 {st.st_ctim.tv_sec, st.st_ctim.tv_nsec}};
}

ConfigSource::ConfigSource(ConfigWatch watch, ConfigLocation location, std::string name)
	: watch_(std::move(watch)), location_(std::move(location)), name_(std::move(name))
{
}

ConfigSource ConfigSource::open(ConfigLocation location)
{
	std::string dir = location.path;
	std::string name;
	if (!location.isDirectory()) {
		const std::filesystem::path path(location.path);
		dir = path.has_parent_path() ? path.parent_path().string() : ".";
		name = path.filename().string();
	}
	return ConfigSource(ConfigWatch(std::move(dir)), std::move(location), std::move(name));
}

Result<ConfigContent> ConfigSource::readSettled(ConfigLocation location, Clock::duration limit)
{
	// Each turn waits for the source's next deadline or an inotify event (a writer's close
	// comes as one), whichever is first: bounded in time by `limit`, and in count by the
	// turns a writer's events can make in that time.
	constexpr int kMaxTurns = 100000;
	const std::string path = location.path;
	ConfigSource source = open(std::move(location));
	const Clock::time_point deadline = Clock::now() + limit;
	auto found = source.look(ConfigLook::reload, Clock::now());
	for (int turn = 0; found && !*found && turn < kMaxTurns; turn++) {
		const std::optional<Clock::time_point> wake = source.nextWake();
		const Clock::time_point now = Clock::now();
		if (!wake || now >= deadline)
			break;
		const auto wait = std::chrono::ceil<std::chrono::milliseconds>(std::min(*wake, deadline) - now);
		pollfd watch{source.fd(), POLLIN, 0};
		if (poll(&watch, source.fd() >= 0 ? 1 : 0, static_cast<int>(std::max<int64_t>(wait.count(), 0))) > 0)
			source.onWatchEvents(Clock::now());
		found = source.look(ConfigLook::ifDue, Clock::now());
	}
	if (!found)
		return fail(found.error());
	if (*found)
		return std::move(**found);
	return fail(fmt::format("{}: still being written after {} s (a process holds it open for "
				"writing, and it changed within every {} s): nothing is read",
				ipmasq::quoted(path),
				std::chrono::duration_cast<std::chrono::seconds>(limit).count(),
				kWriterQuietWindow.count()),
		    EAGAIN);
}

void ConfigSource::armWatch(Clock::time_point now)
{
	// The directory is (back) in place, maybe with the file already in it: look at it,
	// as for any change. Not at start-up, which reads anyway.
	if (watch_.arm() && delivered_)
		noteChange(now);
}

void ConfigSource::noteChange(Clock::time_point now)
{
	if (!changeSince_)
		changeSince_ = now;
	lastEvent_ = now;
}

bool ConfigSource::concernsConfig(const char *name) const
{
	// Another file in a shared directory such as /etc does not matter.
	if (name == nullptr || *name == '\0')
		return false;
	if (std::strcmp(name, kConfigMapDataLink) == 0)
		return true;
	return location_.isDirectory() ? isConfigDirName(name) : name_ == name;
}

void ConfigSource::noteFileEvent(const char *name, uint32_t mask, Clock::time_point now)
{
	if (mask & IN_MODIFY) {
		writing_ = true;
		// A write is looked at like any change once it settles, closed or not: a writer
		// that keeps the file open is then timed from its first write. While a quiet
		// window runs, writes wait for its end (one read per window, however fast the
		// writer): the read then shows the change, and the window starts again.
		if (!written_)
			noteChange(now);
		return;
	}
	if (mask & IN_CREATE) {
		// A new regular file is still empty: its writer's IN_CLOSE_WRITE follows. A
		// new symlink (or hard link) is complete at once.
		struct stat st {};
		const std::string path = fmt::format("{}/{}", watch_.dir(), name);
		if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
		    st.st_size == 0) {
			writing_ = true;
			return;
		}
	}
	// Closed, renamed, deleted, re-linked: whatever was being written is settled.
	writing_ = false;
	noteChange(now);
	if ((mask & IN_MOVED_TO) && !location_.isDirectory())
		changeComplete_ = true; // onto the file's name, or "..data": complete as it lands
}

void ConfigSource::onWatchEvents(Clock::time_point now)
{
	const bool rearm = watch_.drain([&](const char *name, uint32_t mask) {
		if (name == nullptr)
			noteChange(now);
		else if (concernsConfig(name))
			noteFileEvent(name, mask, now);
	});
	if (rearm)
		armWatch(now);
}

bool ConfigSource::changeDue(Clock::time_point now) const
{
	if (changeSince_ && (changeComplete_ || now >= lastEvent_ + kSettle ||
			     now >= *changeSince_ + kSettleLimit))
		return true;
	if (absentSince_ && now >= *absentSince_ + kAbsentGrace)
		return true;
	if (readRetryAt_ && now >= *readRetryAt_)
		return true;
	return written_ && now >= written_->since + kWriterQuietWindow;
}

std::optional<Clock::time_point> ConfigSource::nextWake() const
{
	std::optional<Clock::time_point> wake;
	if (changeSince_)
		keepEarliest(wake, changeComplete_ ? lastEvent_
						   : std::min(lastEvent_ + kSettle, *changeSince_ + kSettleLimit));
	if (absentSince_)
		keepEarliest(wake, *absentSince_ + kAbsentGrace);
	if (written_)
		keepEarliest(wake, written_->since + kWriterQuietWindow);
	if (readRetryAt_)
		keepEarliest(wake, *readRetryAt_);
	return wake;
}

Result<std::optional<ConfigContent>> ConfigSource::look(ConfigLook why, Clock::time_point now)
{
	// Arm the watch before reading, so that a change made while we read is not missed.
	armWatch(now);

	bool due = why == ConfigLook::reload || changeDue(now);
	if (!due && why == ConfigLook::resync) {
		// The resync is only the safety net behind inotify: the same files with the
		// same sizes and timestamps are not read again (100,000 CIDRs are 2 MB).
		due = !delivered_ || stampsNow() != deliveredStamp_;
	}
	if (!due)
		return std::optional<ConfigContent>();
	changeSince_.reset();
	changeComplete_ = false;
	return read(now);
}

std::optional<ConfigSource::Stamps> ConfigSource::stampsNow() const
{
	auto files = filesToRead();
	if (!files)
		return std::nullopt;
	return stampsOf(*files);
}

std::optional<ConfigSource::Stamps> ConfigSource::stampsOf(const std::vector<std::string> &files)
{
	Stamps stamps;
	stamps.reserve(files.size());
	for (const std::string &path : files) {
		const std::optional<FileStamp> stamp = FileStamp::of(path);
		if (!stamp)
			return std::nullopt;
		stamps.emplace_back(path, *stamp);
	}
	return stamps;
}

Result<std::vector<std::string>> ConfigSource::filesToRead() const
{
	if (!location_.isDirectory())
		return std::vector<std::string>{location_.path};
	auto listing = listConfigDir(location_.path);
	if (!listing)
		return fail(listing.error());
	return *listing ? std::move(**listing) : std::vector<std::string>();
}

ConfigSource::GuardedText ConfigSource::readGuarded(const std::string &path) const
{
	// Look before opening, even for the lease: opening a device can have effects of its
	// own (a tape rewinds, a watchdog arms). readConfigText() says what the path is, and
	// never opens anything but a regular file either.
	struct stat before {};
	if (stat(path.c_str(), &before) != 0 || !S_ISREG(before.st_mode))
		return {readConfigText(path)};
	// The lease (held until this function returns) keeps a new writer out while we read.
	UniqueFd leaseFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
	struct stat opened {};
	if (leaseFd.isValid() && (fstat(leaseFd.get(), &opened) != 0 || opened.st_dev != before.st_dev ||
				  opened.st_ino != before.st_ino))
		leaseFd.reset(); // swapped since the stat: no lease, and readConfigText() looks again
	const Lease lease = takeReadLease(leaseFd);
	// Without a lease to tell, inotify's writes not closed yet are the only witness.
	const bool writerSeen = lease == Lease::fileOpenForWriting ||
				(lease == Lease::unavailable && writing_);
	return {readConfigText(path), writerSeen};
}

void ConfigSource::redeliver()
{
	// Something was there, of unknown content: nothing compares equal to it. Before the
	// first delivery, "nothing delivered" (start-up) stays as it is.
	if (delivered_)
		delivered_ = ContentDigest{true, false, {}};
	deliveredStamp_.reset();
}

tl::unexpected<Error> ConfigSource::readFailed(Error error, Clock::time_point now)
{
	// Neither is the config known to be absent, nor is a writer's window running.
	absentSince_.reset();
	written_.reset();
	// The same content back after the error is news: the caller still holds the error.
	redeliver();
	readRetryAt_ = now + readRetryDelay_;
	readRetryDelay_ = std::min<std::chrono::milliseconds>(2 * readRetryDelay_, kReadRetryLimit);
	return fail(std::move(error));
}

Result<std::optional<ConfigContent>> ConfigSource::read(Clock::time_point now)
{
	using Nothing = std::optional<ConfigContent>;
	readRetryAt_.reset();
	auto files = filesToRead();
	if (!files)
		return readFailed(files.error(), now);
	// Stat before reading, so that a change racing the read is seen next time.
	std::optional<Stamps> stamps = stampsOf(*files);

	ConfigContent content;
	std::vector<std::string> held; // the files a writer holds open
	size_t total = 0;
	for (std::string &path : *files) {
		GuardedText read = readGuarded(path);
		if (!read.text)
			return readFailed(read.text.error(), now); // the last content stays
		if (!*read.text)
			continue; // gone since the listing (or --config's file is absent)
		if (read.writerSeen)
			held.push_back(path);
		total += (*read.text)->size();
		if (location_.isDirectory())
			if (auto fits = checkConfigDirBytes(location_.path, total); !fits)
				return readFailed(fits.error(), now);
		content.files.push_back({std::move(path), std::move(**read.text)});
	}
	if (!held.empty())
		return readWhileWritten(std::move(content), std::move(stamps), std::move(held), now);
	written_.reset();
	deliveredStamp_ = std::move(stamps);
	readRetryDelay_ = kReadRetryInitial;
	if (content.files.empty())
		return absent(now);

	absentSince_.reset();
	const ContentDigest digest = digestOf(content);
	if (delivered_ == digest)
		return Nothing();
	delivered_ = digest;
	return std::optional(std::move(content));
}

Result<std::optional<ConfigContent>> ConfigSource::readWhileWritten(ConfigContent content,
								    std::optional<Stamps> stamps,
								    std::vector<std::string> held,
								    Clock::time_point now)
{
	using Nothing = std::optional<ConfigContent>;
	// It is there, so not absent; and it was read, so no read is to be retried.
	absentSince_.reset();
	readRetryDelay_ = kReadRetryInitial;
	std::vector<std::string> names;
	for (const std::string &path : held)
		names.push_back(ipmasq::quoted(path));
	const ContentDigest digest = digestOf(content);
	if (delivered_ == digest) {
		// What is in force is this content already: nothing to wait for.
		written_.reset();
		deliveredStamp_ = std::move(stamps);
		return Nothing();
	}
	if (!written_ || !stamps || written_->stamps != *stamps || !(written_->digest == digest)) {
		// A writer still writing (or the first sight of one): the window starts now.
		// No stamps (a stat failed) can never show the same files, so no window ends.
		log::debug("{} {} being written (open for writing by another process): read once "
			   "{} the same for {} s{}", fmt::join(names, ", "), held.size() == 1 ? "is" : "are",
			   held.size() == 1 ? "it stays" : "they stay", kWriterQuietWindow.count(),
			   written_ ? " from now (it changed)" : "");
		written_ = WrittenRead{stamps.value_or(Stamps{}), digest, now, std::move(held)};
		return Nothing();
	}
	if (now < written_->since + kWriterQuietWindow)
		return Nothing();
	log::warning("{}: read while another process holds {} open for writing, after {} size, time "
		     "stamps and content stayed the same for {} s", fmt::join(names, ", "),
		     held.size() == 1 ? "it" : "them", held.size() == 1 ? "its" : "their",
		     kWriterQuietWindow.count());
	written_.reset();
	deliveredStamp_ = std::move(stamps);
	delivered_ = digest;
	return std::optional(std::move(content));
}

Result<std::optional<ConfigContent>> ConfigSource::absent(Clock::time_point now)
{
	using Nothing = std::optional<ConfigContent>;
	// At start-up, or when it was absent already, that is settled.
	if (!delivered_ || !delivered_->present) {
		if (delivered_)
			return Nothing();
		delivered_ = ContentDigest{};
		return std::optional(ConfigContent::absent());
	}
	// It was there: a save in progress, a ConfigMap or directory being replaced. Only
	// once it stays away does "absent" (the defaults) replace the last content.
	if (!absentSince_) {
		absentSince_ = now;
		if (location_.isDirectory())
			log::info("{} has no file whose name starts with {}; the current rules stay, "
				  "and the built-in defaults apply if it still has none in {} s",
				  ipmasq::quoted(location_.path), ipmasq::quoted(kConfigDirPrefix),
				  kAbsentGrace.count());
		else
			log::info("{} is missing; the current rules stay, and the built-in defaults "
				  "apply if it is still missing in {} s", ipmasq::quoted(location_.path),
				  kAbsentGrace.count());
	}
	if (now < *absentSince_ + kAbsentGrace)
		return Nothing();
	absentSince_.reset();
	delivered_ = ContentDigest{};
	return std::optional(ConfigContent::absent());
}

ConfigSource::ContentDigest ConfigSource::digestOf(const ConfigContent &content)
{
	if (content.files.empty())
		return ContentDigest{};
	// Names and bytes, each length-prefixed: a file renamed, or bytes moved from one
	// file to another, is new.
	SipHash128 hash(SipHash128::processKey());
	for (const ConfigFile &file : content.files) {
		hash.updateField(file.path);
		hash.updateField(file.text);
	}
	return ContentDigest{true, true, hash.finish()};
}

} // namespace ipmasq
