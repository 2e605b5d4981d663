// SPDX-License-Identifier: Apache-2.0
// The process's safety net: standard descriptors, SIGPIPE, last words on fatal signals and
// uncaught exceptions, the open-files limit, and threads the kernel refuses.
#include "ip-masq-agent/base/process_guard.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <exception>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <optional>
#include <sstream>
#include <sys/resource.h>
#include <system_error>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/bounded_file.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq::process {

namespace {

// Signals whose default action ends the process at once, and that a bug (or a kill(1) of
// one of them) can raise at any point: their handler may only call async-signal-safe
// functions.
constexpr std::array kFatalSignals{SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};

// A fixed-width stand-in for the time: the handler writes the real time over it.
constexpr std::string_view kTimestampStandIn = "0000-00-00T00:00:00.000000Z";

// One prepared line per fatal signal, formatted as the log formats it, ready for write(2).
struct FatalLine {
	std::array<char, 512> text{};
	size_t length = 0;
	size_t timestampAt = std::string_view::npos;
};
std::array<FatalLine, NSIG> gFatalLines;

// Stack overflow reports SIGSEGV on a stack that is full: the handler runs on its own.
alignas(16) std::array<char, 64 * 1024> gAlternateStack;

void putDigits(char *at, uint64_t value, int width)
{
	for (int i = width - 1; i >= 0; i--, value /= 10)
		at[i] = static_cast<char>('0' + value % 10);
}

// The current UTC time as RFC 3339 with microseconds, as the log writes it; only
// clock_gettime() and arithmetic, both async-signal-safe (gmtime_r is not promised to be).
void writeTimestamp(char *at)
{
	timespec now{};
	clock_gettime(CLOCK_REALTIME, &now);
	const int64_t seconds = now.tv_sec;
	int64_t days = seconds / 86400;
	const int64_t inDay = seconds % 86400;
	// Howard Hinnant's civil_from_days.
	days += 719468;
	const int64_t era = days / 146097;
	const int64_t dayOfEra = days - era * 146097;
	const int64_t yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365;
	const int64_t dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100);
	const int64_t mp = (5 * dayOfYear + 2) / 153;
	const int64_t day = dayOfYear - (153 * mp + 2) / 5 + 1;
	const int64_t month = mp < 10 ? mp + 3 : mp - 9;
	const int64_t year = yearOfEra + era * 400 + (month <= 2);
	putDigits(at, static_cast<uint64_t>(year), 4);
	putDigits(at + 5, static_cast<uint64_t>(month), 2);
	putDigits(at + 8, static_cast<uint64_t>(day), 2);
	putDigits(at + 11, static_cast<uint64_t>(inDay / 3600), 2);
	putDigits(at + 14, static_cast<uint64_t>(inDay / 60 % 60), 2);
	putDigits(at + 17, static_cast<uint64_t>(inDay % 60), 2);
	putDigits(at + 20, static_cast<uint64_t>(now.tv_nsec / 1000), 6);
}

void onFatalSignal(int sig)
{
	const int savedErrno = errno;
	if (sig > 0 && sig < NSIG && gFatalLines[sig].length > 0) {
		FatalLine line = gFatalLines[sig];
		if (line.timestampAt != std::string_view::npos)
			writeTimestamp(line.text.data() + line.timestampAt);
		(void)!::write(STDERR_FILENO, line.text.data(), line.length);
	}
	errno = savedErrno;
	// SA_RESETHAND restored the default action: the signal, raised again (or the faulting
	// instruction, run again), ends the process as it would have, core dump included.
	raise(sig);
}

void prepareFatalLine(int sig)
{
	const std::string message = fmt::format(
		"fatal signal SIG{} ({}): ip-masq-agent ends here; its table stays in the kernel as it "
		"is, and the next start takes it over", sigabbrev_np(sig), strsignal(sig));
	const std::string line = log::formatLineNow(kTimestampStandIn, log::Level::error, message);
	FatalLine &fatal = gFatalLines[sig];
	fatal.length = std::min(line.size(), fatal.text.size());
	std::memcpy(fatal.text.data(), line.data(), fatal.length);
	if (fatal.length > 0 && fatal.length == fatal.text.size())
		fatal.text[fatal.length - 1] = '\n'; // cut, but still one line
	const size_t at = line.find(kTimestampStandIn);
	if (at != std::string::npos && at + kTimestampStandIn.size() <= fatal.length)
		fatal.timestampAt = at;
}

[[noreturn]] void onTerminate()
{
	// Logged here, with the exception's own words; the SIGABRT line would only say
	// "Aborted".
	try {
		std::string what = "std::terminate was called without an exception";
		if (const std::exception_ptr current = std::current_exception()) {
			what = "an exception of unknown type";
			try {
				std::rethrow_exception(current);
			} catch (const std::exception &e) {
				what = e.what();
			} catch (...) {
			}
		}
		log::error("fatal: an exception nobody caught: {}; ip-masq-agent ends here (this is "
			   "a bug: please report it with this line)", what);
		gFatalLines[SIGABRT].length = 0;
	} catch (...) {
		// Out of memory even for the line: SIGABRT's prepared line says the rest.
	}
	std::abort();
}

// The descriptors open now below `limit`: /proc/self/fd, or one fcntl() per number.
size_t countOpenDescriptors(size_t limit)
{
	size_t open = 0;
	if (DirStream dir = DirStream::open("/proc/self/fd"); dir.isValid()) {
		const int own = dir.fd();
		for (int entries = 0; entries < 1 << 20; entries++) {
			const dirent *entry = dir.next();
			if (entry == nullptr)
				break;
			char *end = nullptr;
			const unsigned long fd = std::strtoul(entry->d_name, &end, 10);
			if (end != entry->d_name && *end == '\0' && static_cast<int>(fd) != own && fd < limit)
				open++;
		}
		return open;
	}
	for (size_t fd = 0; fd < std::min<size_t>(limit, 1 << 16); fd++)
		if (fcntl(static_cast<int>(fd), F_GETFD) != -1)
			open++;
	return open;
}

} // namespace

void guardStandardDescriptors()
{
	for (int fd = 0; fd <= STDERR_FILENO; fd++) {
		if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
			continue;
		// open() returns the lowest free number: this one.
		const int opened = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
		if (opened >= 0 && opened != fd) {
			(void)dup2(opened, fd);
			close(opened);
		}
	}
}

void installFatalHandlers()
{
	(void)signal(SIGPIPE, SIG_IGN);

	stack_t alternate{};
	alternate.ss_sp = gAlternateStack.data();
	alternate.ss_size = gAlternateStack.size();
	const bool haveAlternate = sigaltstack(&alternate, nullptr) == 0;
	for (int sig : kFatalSignals) {
		prepareFatalLine(sig);
		struct sigaction action {};
		action.sa_handler = onFatalSignal;
		sigemptyset(&action.sa_mask);
		action.sa_flags = SA_RESETHAND | (haveAlternate ? SA_ONSTACK : 0);
		(void)sigaction(sig, &action, nullptr);
	}
	std::set_terminate(onTerminate);
}

DescriptorRoom descriptorRoom()
{
	rlimit limit{};
	if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
		return {};
	const size_t soft = limit.rlim_cur == RLIM_INFINITY ? size_t(1) << 20
							    : static_cast<size_t>(limit.rlim_cur);
	return DescriptorRoom{soft, countOpenDescriptors(soft)};
}

Result<DescriptorRoom> ensureDescriptorRoom(size_t needed, size_t wanted)
{
	rlimit limit{};
	if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
		const int err = errno; // before the message allocates
		return fail(fmt::format("cannot read the open-files limit (RLIMIT_NOFILE): {}",
					std::strerror(err)), err);
	}
	DescriptorRoom room = descriptorRoom();
	if (room.free() < wanted && limit.rlim_cur != limit.rlim_max) {
		// Raising the soft limit up to the hard one needs no privilege.
		const rlim_t target = room.open + wanted;
		limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? target : std::min(target, limit.rlim_max);
		if (setrlimit(RLIMIT_NOFILE, &limit) == 0)
			room = descriptorRoom();
	}
	if (room.free() >= needed)
		return room;
	return fail(fmt::format("the open-files limit (RLIMIT_NOFILE) is {} and {} descriptors are "
				"open, which leaves {}; the agent needs at least {} more to run (its "
				"sockets, timers and watch, the config it reads, and a few health "
				"probes at a time); raise the limit to at least {} (LimitNOFILE= in a "
				"systemd unit, ulimit -n in a shell, the container runtime's nofile "
				"limit)",
				room.limit, room.open, room.free(), needed, room.open + needed),
		    EMFILE);
}

Status reserveLessPerThread()
{
	constexpr size_t kThreadStack = 1 << 20;
	pthread_attr_t attr;
	if (const int error = pthread_attr_init(&attr); error != 0)
		return fail(fmt::format("pthread_attr_init: {}", std::strerror(error)), error);
	int error = pthread_attr_setstacksize(&attr, kThreadStack);
	if (error == 0)
		error = pthread_setattr_default_np(&attr);
	(void)pthread_attr_destroy(&attr);
	if (error != 0)
		return fail(fmt::format("pthread_setattr_default_np (a stack of {} bytes): {}",
					kThreadStack, std::strerror(error)), error);
	if (mallopt(M_ARENA_MAX, kArenas) != 1)
		return fail(fmt::format("mallopt(M_ARENA_MAX, {}) refused", kArenas));
	if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1)
		return fail(fmt::format("mallopt(M_MMAP_THRESHOLD, {}) refused", kMmapThreshold));
	return {};
}

namespace {

// A file of the kernel's (/proc, cgroupfs) as text; empty when it cannot be read.
std::string kernelText(const std::string &path)
{
	constexpr size_t kMaxKernelText = 4 << 20; // mountinfo on a node with many pods
	FileRead read = readBoundedFile(path, kMaxKernelText);
	return read.outcome == FileRead::Outcome::text ? std::move(read.text) : std::string();
}

// Whether the comma-separated `list` ("rw,relatime,pids") has `item`.
bool listHas(std::string_view list, std::string_view item)
{
	for (size_t at = 0; at <= list.size();) {
		const size_t end = std::min(list.find(',', at), list.size());
		if (list.substr(at, end - at) == item)
			return true;
		at = end + 1;
	}
	return false;
}

// This process's cgroup in the hierarchy that holds the pids controller, from
// /proc/self/cgroup: cgroup v1's "N:...pids...:/path", else v2's "0::/path".
std::optional<std::pair<bool, std::string>> pidsCgroupPath()
{
	std::istringstream lines(kernelText("/proc/self/cgroup"));
	std::optional<std::pair<bool, std::string>> unified;
	std::string line;
	for (int n = 0; n < 64 && std::getline(lines, line); n++) {
		const size_t first = line.find(':'), second = line.find(':', first + 1);
		if (first == std::string::npos || second == std::string::npos)
			continue;
		const std::string_view controllers = std::string_view(line).substr(first + 1, second - first - 1);
		if (listHas(controllers, "pids"))
			return std::pair{true, line.substr(second + 1)};
		if (controllers.empty() && line.compare(0, first, "0") == 0)
			unified = std::pair{false, line.substr(second + 1)};
	}
	return unified;
}

// Where that hierarchy is mounted, and the cgroup it shows at its root (a container's
// mount shows its own cgroup there), from /proc/self/mountinfo.
std::optional<std::pair<std::string, std::string>> pidsHierarchyMount(bool v1)
{
	std::istringstream lines(kernelText("/proc/self/mountinfo"));
	std::string line;
	for (int n = 0; n < 100000 && std::getline(lines, line); n++) {
		const size_t dash = line.find(" - ");
		if (dash == std::string::npos)
			continue;
		std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
		std::string id, parent, device, root, mountPoint, type, source, options;
		head >> id >> parent >> device >> root >> mountPoint;
		tail >> type >> source >> options;
		if (v1 ? type == "cgroup" && listHas(options, "pids") : type == "cgroup2")
			return std::pair{mountPoint, root};
	}
	return std::nullopt;
}

// "the pids cgroup /PATH has pids.max N, M in use" for this process's cgroup
// or the ancestor with the least room left; empty when none has a limit or none can be read.
std::string pidsLimit()
{
	const std::optional<PidsCgroup> cgroup = findPidsCgroup();
	if (!cgroup)
		return {};
	PidsCgroup at = *cgroup; // walked up, one ancestor at a time
	std::string found;
	long least = -1;
	for (int depth = 0; depth < 64 && !at.path.empty(); depth++) {
		const std::string dir = at.dir();
		const std::string max = kernelText(dir + "/pids.max"), current = kernelText(dir + "/pids.current");
		char *end = nullptr;
		const long limit = std::strtol(max.c_str(), &end, 10);
		if (end != max.c_str() && !current.empty()) {
			const long room = limit - std::strtol(current.c_str(), nullptr, 10);
			if (least < 0 || room < least) {
				least = std::max(room, 0L);
				found = fmt::format("the pids cgroup {} has pids.max {}, {} in use", at.path,
						    limit, std::strtol(current.c_str(), nullptr, 10));
			}
		}
		if (at.path == "/")
			break;
		const size_t slash = at.path.rfind('/');
		at.path = slash == 0 ? "/" : at.path.substr(0, slash);
	}
	return found;
}

// The limits on new tasks this process can see, each with its value.
std::string taskLimits()
{
	std::vector<std::string> limits;
	if (std::string pids = pidsLimit(); !pids.empty())
		limits.push_back(std::move(pids));
	rlimit nproc{};
	if (getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY)
		limits.push_back(fmt::format("RLIMIT_NPROC is {} (the user's processes and threads; "
					     "not enforced with CAP_SYS_RESOURCE)", nproc.rlim_cur));
	std::string threadsMax = kernelText("/proc/sys/kernel/threads-max");
	if (!threadsMax.empty() && threadsMax.back() == '\n')
		threadsMax.pop_back();
	if (!threadsMax.empty())
		limits.push_back(fmt::format("kernel.threads-max is {}", threadsMax));
	return fmt::format("{}", fmt::join(limits, "; "));
}

} // namespace

std::optional<PidsCgroup> findPidsCgroup()
{
	const auto cgroup = pidsCgroupPath();
	const auto mount = cgroup ? pidsHierarchyMount(cgroup->first) : std::nullopt;
	if (!mount)
		return std::nullopt;
	std::string path = cgroup->second;
	// A mount of a cgroup below the root (a container's) shows that cgroup as its "/".
	if (mount->second != "/" && path.compare(0, mount->second.size(), mount->second) == 0)
		path = path.substr(mount->second.size());
	return PidsCgroup{cgroup->first, mount->first, path.empty() ? "/" : path};
}

Result<std::thread> startThread(std::string_view what, std::function<void()> body)
{
	try {
		return std::thread(std::move(body));
	} catch (const std::system_error &e) {
		const int err = e.code().value();
		const std::string limits = taskLimits();
		return fail(fmt::format("cannot start the thread of {}: the kernel refused it ({}): the "
					"process is at a limit on tasks{}{}, or its stack (1 MiB) does not "
					"fit under the memory limits; raise the limit on tasks (the pod's "
					"or the node's pid limit, TasksMax= in a systemd unit, ulimit -u)",
					what, std::strerror(err), limits.empty() ? "" : ": ", limits),
			    err);
	}
}

} // namespace ipmasq::process
