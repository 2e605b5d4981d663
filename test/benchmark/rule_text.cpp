// SPDX-License-Identifier: Apache-2.0
// Benchmark section 13 (docs/performance.md): the text of a 100,000-rule neighbour. A table
// `ip neighbour` whose nat postrouting chain jumps to a chain of 100,000 rules of the shapes
// real components write (kube-proxy's, Docker's, Calico's, iptables-nft's) is loaded with
// `nft -f` in a private network namespace. Measured, each in a fresh child process (its
// peak RSS its own): `nft -a list table` (libnftables: what linking it would cost), the
// agent's reader under the check's own bounds (50,000 rules: the table is unreadable), and
// the reader with the bounds raised plus the agent's rule text of every rule.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/rule_text.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "netns.h"

using namespace ipmasq;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kRules = 100000;

[[noreturn]] void die(const std::string &why)
{
	std::fprintf(stderr, "bench-rule-text: %s\n", why.c_str());
	std::exit(1);
}

// Rule i of the neighbour: one of ten shapes, each with values of its own.
std::string neighbourRule(size_t i)
{
	const auto a = (i >> 8) & 0xff, b = i & 0xff, port = 1024 + i % 60000;
	switch (i % 10) {
	case 0: return fmt::format("ip saddr 198.18.{}.{} tcp dport {} counter masquerade", a, b, port);
	case 1: return fmt::format("meta mark & 0x00004000 != 0x00004000 ip daddr 198.19.{}.{} return", a, b);
	case 2: return fmt::format("iifname \"cali{:x}\" ip daddr != 198.18.0.0/15 masquerade fully-random", i);
	case 3: return fmt::format("ip daddr {{ 192.0.2.{}, 198.51.100.{} }} udp dport {} accept", b, a, port);
	case 4: return fmt::format("ct status dnat ip saddr 198.18.{}.{} snat to 203.0.113.{}", a, b, b);
	case 5: return fmt::format("oifname != \"docker0\" ip saddr 198.19.{}.0/24 masquerade", a);
	case 6: return fmt::format("ip saddr . tcp dport {{ 198.18.{}.{} . {} }} counter packets 0 bytes 0", a, b, port);
	case 7: return fmt::format("ct state established,related ip daddr 203.0.113.{} return", b);
	case 8: return fmt::format("meta l4proto udp th dport {}-{} snat to 198.51.100.{}:{}", port, port + 10, b, port);
	default: return fmt::format("ip daddr 198.18.{}.{} return comment \"rule {}\"", a, b, i);
	}
}

void loadNeighbour(const std::string &path)
{
	{
		std::ofstream out(path);
		out << "table ip neighbour {\n\tchain postrouting {\n\t\ttype nat hook postrouting priority 90;\n"
		       "\t\tjump rules\n\t}\n\tchain rules {\n";
		for (size_t i = 0; i < kRules; i++)
			out << "\t\t" << neighbourRule(i) << "\n";
		out << "\t}\n}\n";
	}
	if (ipmasq::test::run("nft -f " + path) != 0)
		die("nft -f could not load the neighbour table");
}

struct Figures {
	double wallMs = 0, cpuMs = 0;
	long peakKiB = 0;
	int status = -1;
};

// Runs `work` in a child; its wall time, CPU time and peak RSS from wait4.
template<typename Work>
Figures inChild(Work work)
{
	std::fflush(stdout); // else the child prints the parent's buffered lines again
	const auto start = Clock::now();
	const pid_t pid = fork();
	if (pid < 0)
		die("fork failed");
	if (pid == 0)
		std::_Exit(work());
	int status = 0;
	rusage usage{};
	if (wait4(pid, &status, 0, &usage) != pid)
		die("wait4 failed");
	const auto ms = [](const timeval &t) { return t.tv_sec * 1000.0 + t.tv_usec / 1000.0; };
	return {std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
		ms(usage.ru_utime) + ms(usage.ru_stime), usage.ru_maxrss,
		WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

double cpuMs()
{
	timespec t{};
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1000.0 + t.tv_nsec / 1e6;
}

// The agent's reader, then (with `print`) the text of every rule it read, each step's CPU
// time printed. Exits 0 when the table was read whole (and every rule printed), 2 when it
// was unreadable.
int readAndPrint(const nft::NatReadLimits &limits, bool print)
{
	const double start = cpuMs();
	const auto ruleset = nft::readNatRuleset(limits);
	if (!ruleset)
		return 1;
	const double read = cpuMs();
	size_t rules = 0, bytes = 0;
	for (const nft::Table &table : ruleset->tables) {
		if (!table.unreadable.empty())
			return 2;
		for (const nft::Chain &chain : table.chains)
			for (const nft::Rule &rule : chain.rules) {
				rules++;
				if (print)
					bytes += nft::ruleText(table, rule).size();
			}
	}
	const double printed = cpuMs();
	fmt::print("    read {} rules: {:.0f} ms CPU (most of it the kernel's dump of one long chain)", rules, read - start);
	if (print)
		fmt::print("; their text ({} bytes): {:.0f} ms CPU, {:.1f} us a rule", bytes, printed - read,
			   (printed - read) * 1000 / double(rules));
	fmt::print("\n");
	std::fflush(stdout);
	return rules > kRules && (!print || bytes > 0) ? 0 : 3;
}

void report(const char *what, const Figures &f)
{
	fmt::print("  {:<58} {:>9.0f} ms wall {:>9.0f} ms CPU {:>8} KiB peak RSS  (exit {})\n", what, f.wallMs, f.cpuMs,
		   f.peakKiB, f.status);
}

} // namespace

int main()
{
	if (const std::string why = ipmasq::test::enterPrivateNetns(); !why.empty()) {
		std::fprintf(stderr, "SKIP: %s\n", why.c_str());
		return 77;
	}
	const std::string path = "/tmp/ipmasq-bench-rule-text.nft";
	loadNeighbour(path);
	std::remove(path.c_str());
	fmt::print("Rule text of a {}-rule neighbour (section 13), each in a fresh process:\n", kRules);
	report("nft -a list table ip neighbour (libnftables)",
	       inChild([] { return ipmasq::test::run("nft -a list table ip neighbour > /dev/null"); }));
	report("the agent's reader, the check's bounds (unreadable: exit 2)",
	       inChild([] { return readAndPrint({}, false); }));
	nft::NatReadLimits raised;
	raised.maxRules = 2 * kRules;
	raised.maxBytes = size_t(1) << 30;
	report("the agent's reader, bounds raised", inChild([&] { return readAndPrint(raised, false); }));
	report("the agent's reader and the text of every rule", inChild([&] { return readAndPrint(raised, true); }));
	(void)ipmasq::test::run("nft delete table ip neighbour");
	return 0;
}
