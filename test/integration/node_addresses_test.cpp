// SPDX-License-Identifier: Apache-2.0
// The node's addresses against the real kernel, in a private network namespace: the
// dump, its flags and names, and the monitor's notifications (each change reported, link
// down and up, duplicate address detection finishing, a flood). How fast a notification
// arrives is the benchmark's figure (section 10), not a test's.
//
// The test interface is a veth pair, d0 and its peer d0p: this kernel may have no dummy
// driver, and a dummy interface (IFF_NOARP) skips duplicate address detection, so its
// IPv6 addresses are never tentative. With d0p down, d0 has no carrier and its IPv6
// addresses stay tentative until d0p comes up.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <grp.h>
#include <chrono>
#include <cstdio>
#include <net/if.h>
#include <poll.h>
#include <tuple>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/node/address_monitor.h"
#include "ip-masq-agent/node/node_address_view.h"
#include "netns.h"
#include "traffic_support.h"

using namespace ipmasq;
using ipmasq::test::run;
using ipmasq::test::runOrFail;
using Clock = std::chrono::steady_clock;

namespace {

double msSince(Clock::time_point start)
{
	return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A fresh d0 (up) and d0p (up when `carrier`), without addresses but IPv6 link-local.
void freshInterface(bool carrier = true)
{
	(void)run("ip link del d0 2>/dev/null");
	runOrFail("ip link add d0 type veth peer name d0p");
	runOrFail(std::string("ip link set d0p ") + (carrier ? "up" : "down"));
	runOrFail("ip link set d0 up");
}

std::vector<NodeAddress> readAddresses()
{
	auto addresses = readNodeAddresses();
	INFO((addresses ? "" : addresses.error().message));
	REQUIRE(addresses);
	return std::move(*addresses);
}

// The entry of `text` on d0, if the node has it there.
std::optional<NodeAddress> onD0(const std::vector<NodeAddress> &addresses, std::string_view text)
{
	auto address = parseAddress(text);
	REQUIRE(address);
	for (const NodeAddress &entry : addresses)
		if (entry.interface == "d0" && entry.address == *address)
			return entry;
	return std::nullopt;
}

std::string listing(const std::vector<NodeAddress> &addresses)
{
	std::string out;
	for (const NodeAddress &entry : addresses)
		out += entry.toString() + "\n";
	return out;
}

AddressMonitor openMonitor()
{
	auto monitor = AddressMonitor::open();
	INFO((monitor ? "" : monitor.error().message));
	REQUIRE(monitor);
	return std::move(*monitor);
}

// drain(), which must never block: a drain that waited for the next notification would
// wait for ever in settle(), which drains an empty queue. 10 s (a full queue takes
// milliseconds) only catches such a wait; it is no speed requirement.
AddressChanges drainChanges(AddressMonitor &monitor)
{
	const auto start = Clock::now();
	auto changes = monitor.drain();
	const double took = msSince(start);
	INFO((changes ? "" : changes.error().message));
	REQUIRE(changes);
	INFO("drain() returned after " << took << " ms: it blocked (the bound only catches a hang)");
	CHECK(took < 10000);
	return std::move(*changes);
}

// Whether drain() read a change, or found that some were lost.
bool drain(AddressMonitor &monitor)
{
	const AddressChanges changes = drainChanges(monitor);
	return !changes.changes.empty() || changes.overrun;
}

// Drains until nothing is left (what setting up the interface queued), bounded.
void settle(AddressMonitor &monitor)
{
	for (int i = 0; i < 100 && drain(monitor); i++)
		;
	REQUIRE_FALSE(drain(monitor));
}

bool readableWithin(const AddressMonitor &monitor, int timeoutMs)
{
	pollfd pfd{monitor.fd(), POLLIN, 0};
	return poll(&pfd, 1, timeoutMs) == 1;
}

Prefix prefix(std::string_view text)
{
	auto parsed = parsePrefix(text);
	REQUIRE(parsed);
	return *parsed;
}

// `ip -batch -` running in the background, fed one command at a time: the time from
// writing a command to the notification leaves out starting a process.
class IpBatch
{
public:
	IpBatch() : pipe_(popen("ip -batch -", "w")) { REQUIRE(pipe_); }
	~IpBatch() { close(); }
	void send(const std::string &command)
	{
		std::fputs((command + "\n").c_str(), pipe_);
		std::fflush(pipe_);
	}
	int close()
	{
		if (!pipe_)
			return 0;
		const int status = pclose(std::exchange(pipe_, nullptr));
		return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	}

private:
	FILE *pipe_;
};

// Notifications are queued before the change's request returns, so they come within
// milliseconds; 20 s only catches one that never comes (no speed requirement).
constexpr int kNotifiedMs = 20000;

// Writes `command` to `ip` and waits (kNotifiedMs at most) for the monitor to report it:
// whether it did.
bool notified(AddressMonitor &monitor, IpBatch &ip, const std::string &command)
{
	ip.send(command);
	return readableWithin(monitor, kNotifiedMs) && drain(monitor);
}

// readNodeAddresses(limit) refuses with E2BIG, naming what there were too many of.
void checkRefused(size_t limit, const std::string &what)
{
	auto read = readNodeAddresses(limit);
	REQUIRE_FALSE(read);
	CHECK(read.error().errnum == E2BIG);
	CHECK(read.error().message == fmt::format("cannot read the node's {}: this node has more "
						  "than {} {}: refusing to read them all",
						  what, limit, what));
}

} // namespace

TEST_CASE("readNodeAddresses: every address with its interface, prefix length and flags")
{
	freshInterface();
	runOrFail("ip addr add 203.0.113.5/24 dev d0");
	runOrFail("ip addr add 203.0.113.9/24 dev d0"); // the same subnet: secondary
	runOrFail("ip addr add 198.51.100.1/32 dev d0");
	runOrFail("ip addr add 2001:db8::5/64 dev d0 nodad");
	runOrFail("ip addr add 2001:db8::6/64 dev d0"); // duplicate address detection: >= 1 s

	const std::vector<NodeAddress> addresses = readAddresses();
	INFO(listing(addresses));
	const uint32_t d0 = if_nametoindex("d0");
	REQUIRE(d0 != 0);

	const auto primary = onD0(addresses, "203.0.113.5");
	REQUIRE(primary);
	CHECK(primary->prefixLength == 24);
	CHECK(primary->ifindex == d0);
	CHECK(primary->address.family == Family::ipv4);
	CHECK_FALSE(primary->secondary);
	CHECK(primary->permanent);

	const auto secondary = onD0(addresses, "203.0.113.9");
	REQUIRE(secondary);
	CHECK(secondary->secondary);
	CHECK(secondary->toString() == "203.0.113.9/24 dev d0 secondary");

	const auto host = onD0(addresses, "198.51.100.1");
	REQUIRE(host);
	CHECK(host->prefixLength == 32);

	const auto nodad = onD0(addresses, "2001:db8::5");
	REQUIRE(nodad);
	CHECK(nodad->prefixLength == 64);
	CHECK_FALSE(nodad->tentative);
	CHECK(nodad->permanent);

	const auto tentative = onD0(addresses, "2001:db8::6");
	REQUIRE(tentative);
	CHECK(tentative->tentative);
	CHECK_FALSE(tentative->dadFailed);

	// Loopback's addresses are there too, under its name.
	const bool loopback = std::any_of(addresses.begin(), addresses.end(), [](const auto &a) {
		return a.interface == "lo" && a.address.toString() == "127.0.0.1" &&
		       a.prefixLength == 8;
	});
	CHECK(loopback);

	CHECK(pickAddressIn(prefix("203.0.113.0/24"), addresses) == primary);
	CHECK(pickAddressIn(prefix("2001:db8::/64"), addresses) == nodad);
	CHECK_FALSE(pickAddressIn(prefix("2001:db8::6/128"), addresses)); // still tentative
	CHECK_FALSE(pickAddressIn(prefix("192.0.2.0/24"), addresses));
}

TEST_CASE("readNodeAddresses: an address whose duplicate address detection failed")
{
	freshInterface();
	// d0p owns the address, so d0's neighbour solicitation for it gets an answer.
	runOrFail("ip addr add 2001:db8::7/64 dev d0p nodad");
	runOrFail("ip addr add 2001:db8::7/64 dev d0");
	std::optional<NodeAddress> failed;
	const auto start = Clock::now();
	while (msSince(start) < 30000) { // detection takes 1 to 2 s: 30 s only catches a hang
		failed = onD0(readAddresses(), "2001:db8::7");
		REQUIRE(failed);
		if (failed->dadFailed)
			break;
		usleep(50000);
	}
	CHECK(failed->dadFailed);
	CHECK(failed->tentative); // the kernel keeps both
	// The same address on d0p is usable, d0's copy is not.
	const auto picked = pickAddressIn(prefix("2001:db8::7/128"), readAddresses());
	REQUIRE(picked);
	CHECK(picked->interface == "d0p");
}

TEST_CASE("readNodeAddresses: past its limit, a clear error")
{
	freshInterface();
	runOrFail("ip addr add 203.0.113.5/24 dev d0");
	const size_t count = readAddresses().size(); // lo's, d0's and d0p's
	REQUIRE(count >= 4);
	CHECK(readNodeAddresses(count));
	checkRefused(count - 1, "addresses");

	// More interfaces than addresses (down, they have no link-local addresses either):
	// the limit holds for the interfaces too.
	for (int i = 1; i <= 3; i++)
		runOrFail(fmt::format("ip link add x{} type veth peer name x{}p", i, i));
	const size_t interfaces = std::stoul(runOrFail("ip -o link show | wc -l"));
	REQUIRE(readAddresses().size() < interfaces - 1);
	checkRefused(interfaces - 1, "interfaces");
	for (int i = 1; i <= 3; i++)
		runOrFail(fmt::format("ip link del x{}", i));
}

TEST_CASE("readNodeAddresses and the monitor need no privileges")
{
	freshInterface();
	runOrFail("ip addr add 203.0.113.5/24 dev d0");
	const pid_t child = fork();
	REQUIRE(child >= 0);
	if (child == 0) {
		// No Catch2 in here: plain exit codes say what went wrong.
		if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
		    setresuid(65534, 65534, 65534) != 0)
			_exit(10);
		auto addresses = readNodeAddresses();
		if (!addresses)
			_exit(11);
		const auto picked = pickAddressIn(prefix("203.0.113.0/24"), *addresses);
		if (!picked || picked->interface != "d0")
			_exit(12);
		auto monitor = AddressMonitor::open();
		if (!monitor)
			_exit(13);
		auto changed = monitor->drain();
		_exit(changed ? 0 : 14);
	}
	int status = 0;
	REQUIRE(waitpid(child, &status, 0) == child);
	REQUIRE(WIFEXITED(status));
	CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("the monitor: an added and a removed address are reported at once")
{
	freshInterface();
	AddressMonitor monitor = openMonitor();
	settle(monitor);
	CHECK_FALSE(readableWithin(monitor, 0));

	// The kernel queues the notification before the change's request returns, so the
	// notification is there as soon as `ip` is done.
	runOrFail("ip addr add 203.0.113.20/24 dev d0");
	CHECK(readableWithin(monitor, 0));
	CHECK(drain(monitor));
	CHECK_FALSE(drain(monitor));
	CHECK(onD0(readAddresses(), "203.0.113.20"));

	runOrFail("ip addr del 203.0.113.20/24 dev d0");
	CHECK(readableWithin(monitor, 0));
	CHECK(drain(monitor));
	CHECK_FALSE(drain(monitor));
	CHECK_FALSE(onD0(readAddresses(), "203.0.113.20"));

	// Through a running `ip`, both families, added and removed: each change is reported
	// (the benchmark's section 10 times it).
	IpBatch ip;
	const std::vector<std::pair<std::string, std::string>> changes = {
		{"address add 203.0.113.21/24 dev d0", "203.0.113.21"},
		{"address add 2001:db8::21/64 dev d0 nodad", "2001:db8::21"},
		{"address del 203.0.113.21/24 dev d0", "203.0.113.21"},
		{"address del 2001:db8::21/64 dev d0", "2001:db8::21"},
	};
	for (const auto &[command, address] : changes) {
		INFO(command << ": no notification within " << kNotifiedMs
			     << " ms (a bound only a lost notification misses)");
		REQUIRE(notified(monitor, ip, command));
		const bool present = onD0(readAddresses(), address).has_value();
		CHECK(present == command.starts_with("address add"));
	}
	CHECK(ip.close() == 0);
}

TEST_CASE("the monitor: the interface going down and up")
{
	freshInterface();
	runOrFail("ip addr add 203.0.113.5/24 dev d0");
	runOrFail("ip addr add 2001:db8::5/64 dev d0 nodad");
	AddressMonitor monitor = openMonitor();
	settle(monitor);

	// Down: the kernel removes the IPv6 addresses (keep_addr_on_down is off) and says so;
	// the IPv4 address stays, and stays local.
	runOrFail("ip link set d0 down");
	CHECK(readableWithin(monitor, kNotifiedMs));
	CHECK(drain(monitor));
	std::vector<NodeAddress> addresses = readAddresses();
	INFO(listing(addresses));
	CHECK(onD0(addresses, "203.0.113.5"));
	CHECK_FALSE(onD0(addresses, "2001:db8::5"));
	CHECK_FALSE(pickAddressIn(prefix("2001:db8::/64"), addresses));
	CHECK(pickAddressIn(prefix("203.0.113.0/24"), addresses));
	settle(monitor);

	// Up: a new link-local address. The kernel announces an IPv6 address once its
	// duplicate address detection is over (1 to 2 s): a tentative one is not usable.
	runOrFail("ip link set d0 up");
	CHECK(readableWithin(monitor, 30000)); // detection: 1 to 2 s; 30 s only catches a hang
	CHECK(drain(monitor));
	addresses = readAddresses();
	const bool linkLocal = std::any_of(addresses.begin(), addresses.end(), [](const auto &a) {
		return a.interface == "d0" && a.address.family == Family::ipv6 &&
		       prefix("fe80::/10").first() <= a.address && a.address <= prefix("fe80::/10").last();
	});
	CHECK(linkLocal);
}

TEST_CASE("the monitor: duplicate address detection finishing is a change")
{
	freshInterface(/*carrier=*/false);
	runOrFail("ip addr add 2001:db8::6/64 dev d0");
	AddressMonitor monitor = openMonitor();
	settle(monitor);
	auto before = onD0(readAddresses(), "2001:db8::6");
	REQUIRE(before);
	CHECK(before->tentative); // no carrier: detection waits
	CHECK_FALSE(pickAddressIn(prefix("2001:db8::/64"), readAddresses()));

	runOrFail("ip link set d0p up"); // carrier: detection runs, 1 to 2 s
	bool usable = false;
	const auto start = Clock::now();
	while (!usable && msSince(start) < 30000) { // 1 to 2 s; 30 s only catches a hang
		if (!readableWithin(monitor, 500) || !drain(monitor))
			continue;
		const auto picked = pickAddressIn(prefix("2001:db8::/64"), readAddresses());
		usable = picked && picked->address.toString() == "2001:db8::6";
	}
	CHECK(usable);
}

TEST_CASE("the monitor: a flood of address changes neither blocks nor fails drain()")
{
	freshInterface();
	constexpr int kAddresses = 1000; // added, then removed: 2,000 changes
	std::string batch;
	for (int i = 0; i < kAddresses; i++)
		batch += fmt::format("address add 198.18.{}.{}/32 dev d0\n", i / 250, i % 250 + 1);
	for (int i = 0; i < kAddresses; i++)
		batch += fmt::format("address del 198.18.{}.{}/32 dev d0\n", i / 250, i % 250 + 1);
	const std::string file = fmt::format("/tmp/node-addresses-flood-{}.batch", getpid());
	{
		FILE *out = std::fopen(file.c_str(), "w");
		REQUIRE(out);
		std::fputs(batch.c_str(), out);
		std::fclose(out);
	}

	SECTION("while the flood runs, drain() and readNodeAddresses() keep answering")
	{
		AddressMonitor monitor = openMonitor();
		settle(monitor);
		FILE *ip = popen(("ip -batch " + file).c_str(), "r");
		REQUIRE(ip);
		int changes = 0;
		int interrupted = 0;
		double slowestRead = 0;
		// Each round is bounded, and the rounds end when `ip` has exited (its output, none,
		// ends) and nothing is queued any more, or after 120 s (only a hang).
		const auto start = Clock::now();
		bool ipDone = false;
		for (int rounds = 0; rounds < 100000 && msSince(start) < 120000; rounds++) {
			if (drain(monitor))
				changes++;
			const auto readStart = Clock::now();
			auto addresses = readNodeAddresses();
			slowestRead = std::max(slowestRead, msSince(readStart));
			if (!addresses) {
				CHECK(addresses.error().errnum == EINTR); // it kept changing
				interrupted++;
			}
			pollfd fds[2] = {{monitor.fd(), POLLIN, 0}, {fileno(ip), POLLIN, 0}};
			if (poll(fds, ipDone ? 1 : 2, 200) < 0)
				break;
			ipDone = ipDone || (fds[1].revents & (POLLIN | POLLHUP)) != 0;
			if (ipDone && !(fds[0].revents & POLLIN) && !readableWithin(monitor, 0))
				break; // `ip` is done and every notification it caused was read
		}
		pclose(ip);
		CHECK(changes > 0);
		settle(monitor);
		WARN("flood: " << changes << " drains with changes, " << interrupted
			       << " reads interrupted more than 5 times, " << monitor.overruns()
			       << " overruns; the slowest read (up to 1,000 addresses): "
			       << slowestRead << " ms");
	}

	SECTION("read only afterwards, with a small receive buffer: the overrun is a change")
	{
		AddressMonitor monitor = openMonitor();
		settle(monitor);
		const int small = 4096; // the kernel doubles it and keeps a minimum
		REQUIRE(setsockopt(monitor.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) == 0);
		runOrFail("ip -batch " + file);
		CHECK(drain(monitor));
		CHECK(monitor.overruns() == 1);
		// What is queued after the overrun is read in bounded rounds, then nothing.
		for (int i = 0; i < 10 && drain(monitor); i++)
			;
		CHECK_FALSE(drain(monitor));
	}

	std::remove(file.c_str());
	const std::vector<NodeAddress> after = readAddresses();
	CHECK_FALSE(std::any_of(after.begin(), after.end(), [](const NodeAddress &a) {
		return a.interface == "d0" && a.address.family == Family::ipv4;
	}));
	(void)run("ip link del d0");
}

namespace {

// A read without names, sorted, as the view holds it.
std::vector<NodeAddress> sortedUnnamed()
{
	auto read = readNodeAddressesUnnamed();
	for (int i = 0; i < 20 && !read && read.error().errnum == EINTR; i++)
		read = readNodeAddressesUnnamed(); // a change interrupted it: the test waits it out
	INFO((read ? "" : read.error().message));
	REQUIRE(read);
	std::sort(read->begin(), read->end(), [](const NodeAddress &a, const NodeAddress &b) {
		return std::tie(a.ifindex, a.address, a.prefixLength, a.peer) <
		       std::tie(b.ifindex, b.address, b.prefixLength, b.peer);
	});
	return std::move(*read);
}

std::vector<NodeAddress> sortedView(const NodeAddressView &view)
{
	NodeAddresses addresses = view.addresses();
	REQUIRE(addresses.complete);
	std::sort(addresses.addresses.begin(), addresses.addresses.end(),
		  [](const NodeAddress &a, const NodeAddress &b) {
			  return std::tie(a.ifindex, a.address, a.prefixLength, a.peer) <
				 std::tie(b.ifindex, b.address, b.prefixLength, b.peer);
		  });
	return std::move(addresses.addresses);
}

} // namespace

TEST_CASE("the monitor's changes applied to one read give exactly what a new read gives, also "
	  "when they race the read")
{
	freshInterface();
	ipmasq::test::writeSysctl("net/ipv4/conf/d0/promote_secondaries", "1");
	AddressMonitor monitor = openMonitor();
	settle(monitor);
	// Changes of every kind: additions and removals in both families, secondaries promoted
	// when their primary goes, IPv6 addresses under duplicate address detection (d0p is
	// up, so it runs and ends 1 to 2 s later), a link with addresses deleted, routes.
	std::string batch;
	for (int i = 1; i <= 200; i++) {
		batch += fmt::format("address add 198.18.{}.{}/24 dev d0\n", i % 4, i);
		batch += fmt::format("address add 2001:db8:{:x}::{:x}/64 dev d0\n", i % 4, i);
		batch += fmt::format("route add 198.19.0.{}/32 dev d0\n", i);
		if (i % 3 == 0)
			batch += fmt::format("address del 198.18.{}.{}/24 dev d0\n", i % 4, i);
		if (i % 5 == 0)
			batch += fmt::format("address del 2001:db8:{:x}::{:x}/64 dev d0\n", i % 4, i);
		if (i % 50 == 0)
			batch += fmt::format("link add x{} type veth peer name x{}p\naddress add "
					     "203.0.113.{}/24 dev x{}\nlink set x{} up\nlink del x{}\n",
					     i, i, i, i, i, i);
	}
	const std::string file = fmt::format("/tmp/node-addresses-race-{}.batch", getpid());
	{
		FILE *out = std::fopen(file.c_str(), "w");
		REQUIRE(out);
		std::fputs(batch.c_str(), out);
		std::fclose(out);
	}
	FILE *ip = popen(("ip -batch " + file + " 2>&1").c_str(), "r");
	REQUIRE(ip);
	// The read races the changes: subscribed before it, as the daemon does.
	NodeAddressView view;
	view.replace(sortedUnnamed());
	size_t applied = 0;
	const auto start = Clock::now();
	// Until the batch is done, detection has ended (it takes 1 to 2 s), and the monitor is
	// quiet; bounded in time.
	while (msSince(start) < 30000) {
		const AddressChanges changes = drainChanges(monitor);
		REQUIRE_FALSE(changes.overrun); // the test's changes fit the monitor's queue
		for (const AddressChange &change : changes.changes)
			view.apply(change, {});
		applied += changes.changes.size();
		if (msSince(start) > 4000 && !readableWithin(monitor, 500))
			break;
		readableWithin(monitor, 50);
	}
	CHECK(pclose(ip) == 0);
	std::remove(file.c_str());
	const std::vector<NodeAddress> reread = sortedUnnamed();
	const std::vector<NodeAddress> followed = sortedView(view);
	INFO(applied << " changes applied; read again:\n" << listing(reread) << "followed:\n"
		     << listing(followed));
	CHECK(applied > 400);
	CHECK(followed == reread);
	// Some IPv6 addresses were seen tentative and then usable: the view has them usable.
	const bool anyTentative = std::any_of(followed.begin(), followed.end(),
					      [](const NodeAddress &a) { return a.tentative; });
	CHECK_FALSE(anyTentative);
	(void)run("ip link del d0");
}
