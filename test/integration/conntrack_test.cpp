// SPDX-License-Identifier: Apache-2.0
// Conntrack's statistics as the agent reads them over ctnetlink, against what Debian's
// conntrack-tools say in the same namespace (`conntrack -S` summed over CPUs, `conntrack
// -C`): at rest, after a statistic is provoked (invalid, by TCP segments for no known
// connection while the namespace's own nf_conntrack_tcp_loose is 0), and as connections
// fill the table; without CAP_NET_ADMIN, and refused although the agent holds it (a user
// namespace of its own, a seccomp filter); and through the daemon's /metrics.
//
// Each reading test works in a network namespace of its own (the kernel keeps these
// statistics per namespace), so it starts from zero and nothing else moves them.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <functional>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <map>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <regex>
#include <set>
#include <sstream>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "agent_process.h"
#include "ip-masq-agent/conntrack/conntrack_dump.h"
#include "ip-masq-agent/conntrack/conntrack_stats.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "netns.h"
#include "traffic_support.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;
using ipmasq::Result;
using ipmasq::UniqueFd;
using ipmasq::netlink::ConntrackStats;
using ipmasq::netlink::kConntrackCounters;

namespace {

// What conntrack-tools report: `conntrack -S` summed over its cpu= lines, `conntrack -C`.
struct ToolReading {
	std::map<std::string, uint64_t> sums;
	unsigned cpus = 0;
	uint64_t entries = 0;
};

std::ostream &operator<<(std::ostream &out, const ToolReading &t)
{
	out << "conntrack -S (" << t.cpus << " CPUs):";
	for (const auto &[key, sum] : t.sums)
		out << " " << key << "=" << sum;
	return out << "; conntrack -C: " << t.entries;
}

std::string describe(const ConntrackStats &s)
{
	std::string out = fmt::format("agent ({} CPUs):", s.cpus);
	for (const auto &counter : kConntrackCounters) {
		const auto &value = s.*counter.value;
		out += fmt::format(" {}={}", counter.kernelName,
				   value ? std::to_string(*value) : std::string("absent"));
	}
	return out + fmt::format("; entries {}, limit {}",
				 s.entries ? std::to_string(*s.entries) : "absent",
				 s.entriesLimit ? std::to_string(*s.entriesLimit) : "absent");
}

// "cpu=0   \tfound=0 invalid=0 ..." per line.
ToolReading parseConntrackS(const std::string &text)
{
	ToolReading reading;
	std::istringstream lines(text);
	std::string line;
	for (int n = 0; n < 100000 && std::getline(lines, line); n++) {
		std::istringstream words(line);
		std::string word;
		while (words >> word) {
			const size_t eq = word.find('=');
			INFO("conntrack -S line: " << line);
			REQUIRE(eq != std::string::npos);
			const std::string key = word.substr(0, eq);
			const uint64_t value = std::stoull(word.substr(eq + 1));
			if (key == "cpu")
				reading.cpus++;
			else
				reading.sums[key] += value;
		}
	}
	return reading;
}

ToolReading toolReading(const Netns &ns)
{
	ToolReading reading = parseConntrackS(ns.runOrFail("conntrack -S"));
	reading.entries = std::stoull(ns.runOrFail("conntrack -C"));
	return reading;
}

ConntrackStats agentReading(const Netns &ns)
{
	const Result<ConntrackStats> stats =
		inNetns(ns.fd(), [] { return ipmasq::netlink::readConntrackStats(); });
	INFO("readConntrackStats: " << (stats ? std::string("ok") : stats.error().message));
	REQUIRE(stats);
	return *stats;
}

// Whether the agent's reading says what the tool's does: the same CPUs, every statistic
// the tool names with the same sum (and none it does not name), the same entry count.
std::vector<std::string> disagreements(const ConntrackStats &ours, const ToolReading &tool)
{
	std::vector<std::string> out;
	if (ours.cpus != tool.cpus)
		out.push_back(fmt::format("CPUs: agent {}, conntrack -S {}", ours.cpus, tool.cpus));
	std::set<std::string> known;
	for (const auto &counter : kConntrackCounters) {
		const std::string name(counter.kernelName);
		known.insert(name);
		const auto &value = ours.*counter.value;
		const auto it = tool.sums.find(name);
		if (it == tool.sums.end() ? value.has_value() : value != it->second)
			out.push_back(fmt::format("{}: agent {}, conntrack -S {}", name,
						  value ? std::to_string(*value) : "absent",
						  it == tool.sums.end() ? "absent" : std::to_string(it->second)));
	}
	for (const auto &[key, sum] : tool.sums)
		if (!known.count(key))
			out.push_back("conntrack -S reports " + key + ", which the agent does not read");
	if (ours.entries != tool.entries)
		out.push_back(fmt::format("entries: agent {}, conntrack -C {}",
					  ours.entries ? std::to_string(*ours.entries) : "absent",
					  tool.entries));
	return out;
}

// The agent's reading, once it agrees with conntrack-tools read in between two of its
// own that are equal (nothing moved meanwhile). A few tries, for a timer-driven change
// (an entry timing out) between the readings.
ConntrackStats requireAgreement(const Netns &ns)
{
	std::string last;
	for (int attempt = 0; attempt < 5; attempt++) {
		const ConntrackStats before = agentReading(ns);
		const ToolReading tool = toolReading(ns);
		const ConntrackStats after = agentReading(ns);
		std::ostringstream report;
		report << describe(after) << "\n" << tool;
		last = report.str();
		if (before != after)
			continue;
		const auto problems = disagreements(after, tool);
		if (problems.empty()) {
			std::printf("%s\n", last.c_str()); // the numbers, for the test log
			return after;
		}
		// One format, not "\n" + string: GCC bug 105329's bogus -Wrestrict at -O3.
		last += fmt::format("\n{}", fmt::join(problems, "\n"));
	}
	FAIL("the agent's reading and conntrack-tools' do not agree:\n" << last);
	return {};
}

uint64_t sysctlIn(const Netns &ns, const std::string &name)
{
	return std::stoull(ns.runOrFail("cat /proc/sys/" + name));
}

// A table whose chains use conntrack, so that the namespace tracks connections (the
// agent's NAT table does the same on a node); it drops what conntrack finds invalid
// before it reaches a socket, so that no answer (a RST) is tracked too, and counts it.
void trackConnections(const Netns &ns)
{
	ns.runOrFail("ip link set lo up && nft '"
		     "add table inet ct_probe; "
		     "add chain inet ct_probe out { type filter hook output priority 0; }; "
		     "add rule inet ct_probe out ct state invalid counter drop; "
		     "add chain inet ct_probe in { type filter hook prerouting priority 0; }; "
		     "add rule inet ct_probe in ct state invalid counter drop'");
}

// Packets the probe table dropped as invalid on their way out.
uint64_t invalidDroppedOut(const Netns &ns)
{
	const std::string listing = ns.runOrFail("nft list chain inet ct_probe out");
	std::smatch m;
	INFO(listing);
	REQUIRE(std::regex_search(listing, m, std::regex("counter packets ([0-9]+)")));
	return std::stoull(m[1]);
}

// `count` TCP segments with only ACK set, 127.0.0.1:40000 -> 127.0.0.1:9, from a raw
// socket in `ns`: a connection conntrack never saw. Returns how many went out, dropped
// by trackConnections()'s output chain included (the drop makes sendto() fail with EPERM).
int sendStrayAcks(const Netns &ns, int count)
{
	return inNetns(ns.fd(), [count] {
		UniqueFd fd(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_TCP));
		if (!fd.isValid())
			return -1;
		tcphdr segment{};
		segment.source = htons(40000);
		segment.dest = htons(9);
		segment.seq = htonl(1);
		segment.ack_seq = htonl(1);
		segment.doff = sizeof(segment) / 4;
		segment.ack = 1;
		segment.window = htons(1024);
		sockaddr_in to{};
		to.sin_family = AF_INET;
		to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		int sent = 0;
		for (int i = 0; i < count; i++) {
			const ssize_t n = sendto(fd.get(), &segment, sizeof(segment), 0,
						 reinterpret_cast<const sockaddr *>(&to), sizeof(to));
			sent += n == sizeof(segment) || (n < 0 && errno == EPERM);
		}
		return sent;
	});
}

// `count` TCP connections over the loopback of `ns`, established and held open: both
// ends' descriptors, the listener's last.
std::vector<UniqueFd> openConnections(const Netns &ns, int count)
{
	const std::vector<int> raw = inNetns(ns.fd(), [count] {
		std::vector<int> fds;
		const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		sockaddr_in address{};
		address.sin_family = AF_INET;
		address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		address.sin_port = htons(8080);
		const auto *sa = reinterpret_cast<const sockaddr *>(&address);
		if (listener < 0 || bind(listener, sa, sizeof(address)) != 0 ||
		    listen(listener, count) != 0)
			return fds;
		for (int i = 0; i < count; i++) {
			const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (client < 0 || connect(client, sa, sizeof(address)) != 0)
				break;
			fds.push_back(client);
			fds.push_back(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
		}
		fds.push_back(listener);
		return fds;
	});
	std::vector<UniqueFd> owned;
	for (int fd : raw)
		owned.emplace_back(fd);
	return owned;
}

} // namespace

TEST_CASE("a namespace whose conntrack has seen nothing reads zeros, as conntrack -S and -C do")
{
	Netns ns;
	const ConntrackStats stats = requireAgreement(ns);
	CHECK(stats.cpus >= 1);
	for (const auto &counter : kConntrackCounters) {
		INFO(counter.kernelName);
		CHECK(stats.*counter.value == uint64_t{0});
	}
	CHECK(stats.entries == uint64_t{0});
	// Global, read-only outside the initial namespace: the same value everywhere.
	CHECK(stats.entriesLimit == sysctlIn(ns, "net/netfilter/nf_conntrack_max"));
}

TEST_CASE("invalid moves by exactly the TCP segments sent for no known connection")
{
	Netns ns;
	Netns bystander; // conntrack's statistics are per namespace: this one must not move
	trackConnections(ns);
	// Per namespace: conntrack does not pick up connections mid-stream here, anywhere else
	// it still does.
	ns.runOrFail("echo 0 > /proc/sys/net/netfilter/nf_conntrack_tcp_loose");
	REQUIRE(sysctlIn(ns, "net/netfilter/nf_conntrack_tcp_loose") == 0);
	REQUIRE(sysctlIn(bystander, "net/netfilter/nf_conntrack_tcp_loose") == 1);

	const ConntrackStats before = requireAgreement(ns);
	constexpr int kSegments = 5;
	REQUIRE(sendStrayAcks(ns, kSegments) == kSegments);
	const ConntrackStats after = requireAgreement(ns);

	CHECK(invalidDroppedOut(ns) == kSegments);
	REQUIRE(before.invalid);
	REQUIRE(after.invalid);
	CHECK(*after.invalid - *before.invalid == kSegments);
	CHECK(after.insert == before.insert); // no entry was made for them
	CHECK(agentReading(bystander).invalid == uint64_t{0});
}

TEST_CASE("the entry count follows the connections made; insert counts entries added over ctnetlink")
{
	Netns ns;
	trackConnections(ns);
	const ConntrackStats before = requireAgreement(ns);
	constexpr int kConnections = 8;
	const std::vector<UniqueFd> fds = openConnections(ns, kConnections);
	REQUIRE(fds.size() == 2 * kConnections + 1);
	const ConntrackStats connected = requireAgreement(ns);
	REQUIRE(before.entries);
	REQUIRE(connected.entries);
	CHECK(*connected.entries - *before.entries == kConnections);
	CHECK(std::stoull(ns.runOrFail("conntrack -L -p tcp --dport 8080 2>/dev/null | wc -l")) ==
	      kConnections);

	// Recent kernels count only entries made from userspace as inserts, older ones every
	// connection too: the connections moved it by none or all of them.
	constexpr int kAdded = 2;
	for (int port = 1; port <= kAdded; port++)
		ns.runOrFail(fmt::format("conntrack -I -p udp -s 192.0.2.1 -d 192.0.2.2 "
					 "--sport {} --dport 53 -t 60", port));
	const ConntrackStats added = requireAgreement(ns);
	REQUIRE(added.entries);
	CHECK(*added.entries - *connected.entries == kAdded);
	REQUIRE(before.insert);
	REQUIRE(connected.insert);
	REQUIRE(added.insert);
	CHECK(*added.insert - *connected.insert == kAdded);
	const uint64_t byConnections = *connected.insert - *before.insert;
	CHECK((byConnections == 0 || byConnections == kConnections));
}

namespace {

// What a netlink reader says in a child process that `restrict` has first deprived of
// something (false: it could not, and the test fails): its errno and its message. The
// readers: conntrack's statistics (the loop's), its entries (the SNAT usage's), and the
// other tables' NAT (the conflict check's); each must explain a refusal the same way.
struct RefusedRead {
	int errnum = -1;
	std::string message;
};

using Reader = std::function<ipmasq::Status()>;

ipmasq::Status statsReader()
{
	auto stats = ipmasq::netlink::readConntrackStats();
	return stats ? ipmasq::Status{} : ipmasq::Status(ipmasq::fail(stats.error()));
}

ipmasq::Status entriesReader()
{
	auto dump = ipmasq::netlink::dumpSourceNatEntries([](const ipmasq::ConntrackEntry &) {});
	return dump ? ipmasq::Status{} : ipmasq::Status(ipmasq::fail(dump.error()));
}

ipmasq::Status natReader()
{
	auto ruleset = ipmasq::nft::readNatRuleset();
	return ruleset ? ipmasq::Status{} : ipmasq::Status(ipmasq::fail(ruleset.error()));
}

const std::vector<std::pair<const char *, Reader>> kReaders = {
	{"conntrack statistics", statsReader}, {"conntrack entries", entriesReader}, {"other tables' NAT", natReader}};

RefusedRead readRefused(const std::function<bool()> &restrict, const Reader &reader = statsReader)
{
	int pipeFds[2];
	REQUIRE(pipe2(pipeFds, O_CLOEXEC) == 0);
	UniqueFd readEnd(pipeFds[0]), writeEnd(pipeFds[1]);
	const pid_t child = fork();
	REQUIRE(child >= 0);
	if (child == 0) {
		// No Catch2 in here: plain exit codes say what went wrong.
		if (!restrict())
			_exit(100);
		const ipmasq::Status read = reader();
		const std::string message = read ? "read without privileges" : read.error().message;
		(void)!write(writeEnd.get(), message.data(), message.size());
		_exit(read ? 101 : read.error().errnum);
	}
	writeEnd.reset();
	int status = -1;
	const auto exited = waitFor([&] { return waitpid(child, &status, WNOHANG) == child; }, 5s);
	if (!exited) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	REQUIRE(exited);
	RefusedRead read;
	read.message.resize(4096);
	const ssize_t n = ::read(readEnd.get(), read.message.data(), read.message.size());
	read.message.resize(n > 0 ? static_cast<size_t>(n) : 0);
	REQUIRE(WIFEXITED(status));
	read.errnum = WEXITSTATUS(status);
	return read;
}

// A seccomp filter that makes sendto() fail with EPERM, as a container runtime's profile
// or a hardening policy may: every other call is allowed.
bool refuseSendto()
{
#if defined(__x86_64__)
	constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
	constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
	return false;
#endif
	sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sendto, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

} // namespace

TEST_CASE("without CAP_NET_ADMIN the read fails at once with EPERM and says what it needs")
{
	// Leaving uid 0 clears every capability.
	const RefusedRead read = readRefused([] {
		return setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0;
	});
	INFO("the unprivileged read: " << read.message);
	CHECK(read.errnum == EPERM);
	CHECK_THAT(read.message, Catch::Contains("CAP_NET_ADMIN"));
	CHECK_THAT(read.message, Catch::Contains("the kernel answered EPERM: the agent lacks "
						 "CAP_NET_ADMIN"));
}

TEST_CASE("every netlink reader explains a refusal in the same words")
{
	// Each way to be refused, against each reader: the one explanation (refusal.h), never
	// a reader's own guess ("nfnetlink requires CAP_NET_ADMIN" beside "the agent has it").
	const std::vector<std::pair<const char *, std::function<bool()>>> refusals = {
		{"no capability", [] { return setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0; }},
		{"a user namespace of its own", [] { return unshare(CLONE_NEWUSER) == 0; }},
		{"a seccomp filter", refuseSendto},
	};
	for (const auto &[how, restrict] : refusals) {
		std::set<std::string> explanations;
		for (const auto &[what, reader] : kReaders) {
			const RefusedRead read = readRefused(restrict, reader);
			INFO(how << ", " << what << ": " << read.message);
			CHECK(read.errnum == EPERM);
			const size_t at = read.message.find("the kernel answered EPERM: ");
			REQUIRE(at != std::string::npos);
			explanations.insert(read.message.substr(at));
		}
		INFO(how);
		CHECK(explanations.size() == 1);
	}
}

TEST_CASE("refused with CAP_NET_ADMIN held: the message says what the kernel answered, not that "
	  "the capability is missing")
{
	SECTION("the capability only in a user namespace of its own")
	{
		// A new user namespace gives every capability, in it only: this network namespace
		// still belongs to the test's, and nfnetlink answers EPERM.
		const RefusedRead read = readRefused([] { return unshare(CLONE_NEWUSER) == 0; });
		INFO("the read: " << read.message);
		CHECK(read.errnum == EPERM);
		CHECK_THAT(read.message, Catch::StartsWith("cannot read conntrack statistics: "));
		CHECK_THAT(read.message, Catch::Contains("the kernel answered EPERM: the agent has "
							 "CAP_NET_ADMIN, but only in a user namespace "
							 "of its own"));
		CHECK_THAT(read.message, !Catch::Contains("lacks") && !Catch::Contains("requires CAP"));
	}
	SECTION("a seccomp filter")
	{
		const RefusedRead read = readRefused(refuseSendto);
		INFO("the read: " << read.message);
		CHECK(read.errnum == EPERM);
		CHECK_THAT(read.message, Catch::Contains("the kernel answered EPERM: the agent has "
							 "CAP_NET_ADMIN where nfnetlink requires it, so "
							 "something other than capabilities refused"));
		CHECK_THAT(read.message, !Catch::Contains("lacks"));
	}
}

TEST_CASE("the daemon's /metrics: conntrack's families as conntrack -S says, read by the loop only")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	// The test process's own namespace, where the agent runs.
	const Netns self = Netns::current();
	trackConnections(self);
	writeSysctl("net/netfilter/nf_conntrack_tcp_loose", "0");

	TempDir dir;
	dir.write("config", kSlowResync);
	AgentProcess agent({"--config=" + dir.file("config"), "--health-addr=127.0.0.1:10263"});
	const auto metric = [](const std::string &series) -> std::optional<uint64_t> {
		std::string text;
		run("curl -s -m 2 http://127.0.0.1:10263/metrics", &text);
		std::smatch m;
		if (!std::regex_search(text, m, std::regex("\n" + series + " ([0-9.e+]+)\n")))
			return std::nullopt;
		return static_cast<uint64_t>(std::stod(m[1]));
	};
	requireWithin([&] { return metric("ip_masq_agent_conntrack_entries").has_value(); }, 10s,
		      agent, "the conntrack metrics appear");

	// Scrapes do not read: however many come, the reading's time changes at the loop's
	// pace (every 10 s), so at most once more than the burst has 10-s spans (once in this
	// burst of about two seconds on an idle machine; a busy one makes it longer, never
	// adds readings).
	std::set<uint64_t> readTimes;
	const auto burstStart = std::chrono::steady_clock::now();
	for (int i = 0; i < 100; i++)
		if (auto t = metric("ip_masq_agent_conntrack_last_read_timestamp_seconds"))
			readTimes.insert(*t);
	const auto burst = std::chrono::steady_clock::now() - burstStart;
	INFO("100 scrapes in " << std::chrono::duration<double>(burst).count() << " s");
	CHECK(readTimes.size() >= 1);
	CHECK(readTimes.size() <= 2 + static_cast<size_t>(burst / std::chrono::seconds(10)));

	constexpr int kSegments = 3;
	REQUIRE(sendStrayAcks(self, kSegments) == kSegments);
	// The next read (within 10 s, on the agent's timer) shows them, as conntrack -S does;
	// 60 s only catches a hang.
	const auto toolInvalid = [&] {
		return parseConntrackS(self.runOrFail("conntrack -S")).sums["invalid"];
	};
	requireWithin([&] {
		const uint64_t invalid = toolInvalid();
		return invalid >= kSegments &&
		       metric("ip_masq_agent_conntrack_invalid_total") == invalid;
	}, 60s, agent, "ip_masq_agent_conntrack_invalid_total reaches conntrack -S's invalid");
	for (const auto &counter : kConntrackCounters)
		CHECK(metric(fmt::format("ip_masq_agent_conntrack_{}_total", counter.name)).has_value());
	CHECK(metric("ip_masq_agent_conntrack_entries_limit") ==
	      sysctlIn(self, "net/netfilter/nf_conntrack_max"));
	CHECK(metric("ip_masq_agent_conntrack_read_failures_total") == uint64_t{0});
	CHECK(countOf(agent.log(), "conntrack") == 0);
	agent.stop(SIGTERM);
	deleteTable();
	run("nft delete table inet ct_probe");
	writeSysctl("net/netfilter/nf_conntrack_tcp_loose", "1");
}
