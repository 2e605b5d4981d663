// SPDX-License-Identifier: Apache-2.0
// The config file against hostile and careless input: no crash, hang or unbounded memory,
// and every refusal names file, line, key, value and fix without forging a log line.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "scratch_dir.h"
#include "config_entries.h"

using namespace ipmasq;
using ipmasq::test::ScratchDir;

namespace {

const std::string &kSource = test::kConfigFile;

using test::parseError;
using test::parseOk;

// A message fit for one log line: no control byte can end it or forge another.
bool isOneSafeLine(const std::string &message)
{
	return std::none_of(message.begin(), message.end(), [](char c) {
		const auto byte = static_cast<unsigned char>(c);
		return byte < 0x20 || byte == 0x7f;
	});
}

// Old code hung on some inputs: a test that hangs is ended by SIGALRM (a failure, which
// says so), never left waiting. The bound only catches a hang, at ten times and more what
// the case takes on an idle machine: no case here asserts speed (the
// benchmark's section 5 times the loader).
extern "C" void onDeadline(int)
{
	static const char message[] = "\nthis test case hung: it ran past its Deadline, a bound "
				      "only a hang misses\n";
	(void)!write(STDERR_FILENO, message, sizeof(message) - 1);
	_exit(1);
}

class Deadline
{
public:
	explicit Deadline(unsigned seconds)
	{
		std::signal(SIGALRM, onDeadline);
		alarm(seconds);
	}
	~Deadline() { alarm(0); }
	Deadline(const Deadline &) = delete;
	Deadline &operator=(const Deadline &) = delete;
};

std::string cidrsYaml(size_t count, const std::string &before, const std::string &after)
{
	std::string text = before + "nonMasqueradeCIDRs:\n";
	for (size_t i = 0; i < count; i++)
		text += fmt::format("  - {}.{}.{}.0/24\n", 20 + i / 65536, (i / 256) % 256, i % 256);
	return text + after;
}

} // namespace

TEST_CASE("a scalar of 100,000 digits is refused, without recursion, with a short message")
{
	const std::string digits(100000, '7');
	const std::string limit = parseError("cidrLimit: " + digits + "\n");
	CHECK_THAT(limit, Catch::StartsWith(kSource + ":1:12: cidrLimit: ") &&
				  Catch::Contains("out of range") && Catch::Contains("from 0 to 1000000000") &&
				  Catch::Contains("(100000 bytes)"));
	CHECK(limit.size() < 400);

	const std::string interval = parseError("resyncInterval: " + digits + "\n");
	CHECK_THAT(interval, Catch::Contains("resyncInterval") && Catch::Contains("bare number"));
	CHECK(interval.size() < 600);
	// With a unit it is a duration far too long to be one.
	CHECK_THAT(parseError("resyncInterval: " + digits + "s\n"),
		   Catch::Contains("resyncInterval") && Catch::Contains("is not a duration"));
	// Digits then garbage: not a number, however long.
	CHECK_THAT(parseError("cidrLimit: " + digits + "x\n"), Catch::Contains("whole number"));
}

TEST_CASE("cidrLimit is read digit by digit with the real bounds")
{
	CHECK(parseOk("cidrLimit: 1000000000\n").config.cidrLimit == 1000000000);
	CHECK(parseOk("cidrLimit: +0064\n").config.cidrLimit == 64);
	CHECK(parseOk("cidrLimit: -0\nnonMasqueradeCIDRs: []\n").config.cidrLimit == 0);
	CHECK_THAT(parseError("cidrLimit: 1000000001\n"), Catch::Contains("from 0 to 1000000000"));
	CHECK_THAT(parseError("cidrLimit: 18446744073709551617\n"), Catch::Contains("out of range"));
	CHECK_THAT(parseError("cidrLimit: -1\n"), Catch::Contains("out of range"));
	CHECK_THAT(parseError("cidrLimit: 1_000\n"), Catch::Contains("whole number"));
	CHECK_THAT(parseError("cidrLimit: \"64\"\n"), Catch::Contains("write it without quotes"));
}

TEST_CASE("resyncInterval: a bare number is told apart from a duration without regex")
{
	for (const char *bare : {"60", "+7", "-3.", "1.5", "1e5", "2.5E-3"})
		CHECK_THAT(parseError(std::string("resyncInterval: ") + bare + "\n"),
			   Catch::Contains("bare number"));
	// Quoted, it is a string and goes to the duration parser, as before.
	CHECK(parseOk("resyncInterval: \"0\"\n").config.resyncInterval == kMinResyncInterval);
	CHECK_THAT(parseError("resyncInterval: 1e\n"), Catch::Contains("is not a duration"));
}

TEST_CASE("booleans: the same spellings as yaml-cpp's convert<bool>")
{
	for (const char *spelling : {"y", "Y", "n", "N", "yes", "Yes", "YES", "yEs", "no", "No", "NO",
				     "true", "True", "TRUE", "tRUE", "false", "False", "FALSE",
				     "on", "On", "ON", "oN", "off", "Off", "OFF", "1", "0", "ye", "t",
				     "truee", "yes!"}) {
		INFO("masqLinkLocal: " << spelling);
		bool expected = false;
		const bool valid = YAML::convert<bool>::decode(YAML::Node(spelling), expected);
		auto loaded = parseConfig(std::string("masqLinkLocal: ") + spelling + "\n", kSource, {});
		REQUIRE(loaded.has_value() == valid);
		if (valid)
			CHECK(loaded->config.masqLinkLocal == expected);
		else
			CHECK_THAT(loaded.error().message, Catch::Contains("true or false"));
	}
}

TEST_CASE("a FIFO as the config path is an error at once, not a hang")
{
	ScratchDir dir;
	Deadline deadline(10); // before the fix, a FIFO blocked the open for ever

	const std::string fifo = dir.file("fifo");
	REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
	auto fromFifo = loadConfig(ConfigLocation::file(fifo), {});
	REQUIRE_FALSE(fromFifo);
	CHECK_THAT(fromFifo.error().message,
		   Catch::StartsWith(fifo + ": is a FIFO") && Catch::Contains("--config"));

	// Also with a writer attached: the read must not wait for data either.
	UniqueFd writer(open(fifo.c_str(), O_RDWR | O_NONBLOCK));
	REQUIRE(writer.isValid());
	CHECK_THAT(readConfigText(fifo).error().message, Catch::Contains("is a FIFO"));

	// Symlinks are followed: a ConfigMap volume's key is one.
	const std::string linkToFifo = dir.file("config");
	REQUIRE(symlink(fifo.c_str(), linkToFifo.c_str()) == 0);
	CHECK_THAT(loadConfig(ConfigLocation::file(linkToFifo), {}).error().message, Catch::Contains("is a FIFO"));
}

TEST_CASE("a symlink to /dev/zero, a socket: errors at once, nothing read")
{
	ScratchDir dir;
	Deadline deadline(10); // before the fix, /dev/zero was read until std::bad_alloc

	const std::string linkToZero = dir.file("zero");
	REQUIRE(symlink("/dev/zero", linkToZero.c_str()) == 0);
	auto fromZero = loadConfig(ConfigLocation::file(linkToZero), {});
	REQUIRE_FALSE(fromZero);
	CHECK_THAT(fromZero.error().message, Catch::StartsWith(linkToZero + ": is a character device"));

	const std::string socketPath = dir.file("socket");
	UniqueFd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	REQUIRE(sock.isValid());
	sockaddr_un addr {};
	addr.sun_family = AF_UNIX;
	REQUIRE(socketPath.size() < sizeof(addr.sun_path));
	std::copy(socketPath.begin(), socketPath.end(), addr.sun_path);
	REQUIRE(bind(sock.get(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0);
	CHECK_THAT(loadConfig(ConfigLocation::file(socketPath), {}).error().message, Catch::Contains("is a socket"));

	// A dangling symlink is a missing file: the defaults, as before.
	const std::string dangling = dir.file("dangling");
	REQUIRE(symlink(dir.file("nowhere").c_str(), dangling.c_str()) == 0);
	auto absent = loadConfig(ConfigLocation::file(dangling), {});
	REQUIRE(absent);
	CHECK_FALSE(absent->fromFile);
}

TEST_CASE("a file over the 16 MiB cap is refused unread, naming cap, size and fix")
{
	ScratchDir dir;
	Deadline deadline(10);
	const std::string path = dir.file("config");
	{
		// Sparse: no 16 MiB written to disk.
		UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
		REQUIRE(fd.isValid());
		REQUIRE(ftruncate(fd.get(), static_cast<off_t>(kMaxConfigFileBytes) + 1) == 0);
	}
	// inotify reports every read(2) of the file (IN_ACCESS), so "unread" is counted, not
	// timed.
	const UniqueFd watch(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
	REQUIRE(watch.isValid());
	REQUIRE(inotify_add_watch(watch.get(), path.c_str(), IN_ACCESS) >= 0);
	char events[4096];
	auto loaded = loadConfig(ConfigLocation::file(path), {});
	REQUIRE_FALSE(loaded);
	CHECK_THAT(loaded.error().message,
		   Catch::StartsWith(path + ": ") && Catch::Contains("16777217 bytes") &&
			   Catch::Contains("16 MiB (16777216 bytes)") && Catch::Contains("--config"));
	// Refused from its size, not after reading it: no read reported.
	CHECK(read(watch.get(), events, sizeof(events)) < 0);
	CHECK(errno == EAGAIN);
	// The watch does see reads: one byte read here is reported.
	{
		const UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
		char byte = 0;
		REQUIRE(read(fd.get(), &byte, 1) == 1);
	}
	CHECK(read(watch.get(), events, sizeof(events)) > 0);

	// Exactly at the cap, it is read (and then parsed).
	std::string text = "cidrLimit: 7\n#";
	text.resize(kMaxConfigFileBytes - 1, 'x');
	text += "\n";
	std::ofstream(path, std::ios::trunc | std::ios::binary) << text;
	auto atCap = readConfigText(path);
	REQUIRE(atCap);
	REQUIRE(atCap->has_value());
	CHECK((*atCap)->size() == kMaxConfigFileBytes);
	CHECK(parseOk(**atCap).config.cidrLimit == 7);
}

TEST_CASE("duplicate keys are refused naming both places, also in another case")
{
	CHECK_THAT(parseError("cidrLimit: 5\nmasqLinkLocal: true\ncidrLimit: 6\n"),
		   Catch::StartsWith(kSource + ":3:1: cidrLimit: duplicate key") &&
			   Catch::Contains("line 1, column 1") && Catch::Contains("keep one"));
	const std::string cased = parseError("nonMasqueradeCIDRs: []\nNonMasqueradeCIDRs: [10.0.0.0/8]\n");
	CHECK_THAT(cased, Catch::StartsWith(kSource + ":2:1: nonMasqueradeCIDRs: duplicate key") &&
				  Catch::Contains("line 1, column 1") &&
				  Catch::Contains("case-insensitively"));
	CHECK_THAT(parseError("{\"cidrLimit\": 5, \"CIDRLIMIT\": 6}"),
		   Catch::Contains(":1:18:") && Catch::Contains("duplicate key") &&
			   Catch::Contains("column 2 (as \"cidrLimit\")"));
	CHECK_THAT(parseError("colour: red\ncolour: blue\n"),
		   Catch::StartsWith(kSource + ":2:1: duplicate key \"colour\"") &&
			   Catch::Contains("line 1, column 1"));
}

TEST_CASE("a second YAML document is refused where it starts; an empty one means defaults")
{
	CHECK_THAT(parseError("cidrLimit: 5\n---\ncidrLimit: 6\n"),
		   Catch::StartsWith(kSource + ":2:1: ") && Catch::Contains("second YAML document"));
	CHECK_THAT(parseError("---\ncidrLimit: 5\n---\n"), Catch::StartsWith(kSource + ":3:1: "));
	CHECK(parseOk("---\n").config == defaultConfig({}));
	CHECK(parseOk("---\n# only a comment\n").config == defaultConfig({}));
	CHECK(parseOk("---\ncidrLimit: 5\n...\n").config.cidrLimit == 5);
}

TEST_CASE("complex keys, aliases as keys and merge keys are refused with file:line:col")
{
	const std::string complex = parseError("cidrLimit: 5\n? [a, b]\n: 1\n");
	CHECK_THAT(complex, Catch::StartsWith(kSource + ":2:3: ") && Catch::Contains("complex key") &&
				    Catch::Contains("write the key as plain text"));
	CHECK_THAT(parseError("{{a: 1}: 2}"), Catch::StartsWith(kSource + ":1:2: ") &&
						       Catch::Contains("a mapping (a complex key)"));
	// An alias cycle (a list that holds itself) as a key: neither expanded nor converted.
	const std::string cycle = parseError("&a [*a]: 1\n");
	CHECK_THAT(cycle, Catch::StartsWith(kSource + ":1:1: ") && Catch::Contains("complex key"));
	CHECK_THAT(cycle, !Catch::Contains("bad conversion"));

	CHECK_THAT(parseError("name: &k cidrLimit\n*k : 5\n"),
		   Catch::StartsWith(kSource + ":2:1: ") && Catch::Contains("alias (*k) cannot be a key"));
	CHECK_THAT(parseError("base: &b {cidrLimit: 5}\n<<: *b\n"),
		   Catch::StartsWith(kSource + ":2:1: ") && Catch::Contains("merge keys (<<)"));
	// A quoted "<<" is an ordinary (unknown) key.
	CHECK(parseOk("\"<<\": 1\n").warnings.size() == 1);
}

TEST_CASE("aliases: single values are looked up, lists and mappings are refused, none expanded")
{
	const LoadedConfig loaded =
		parseOk("shared: &net 10.0.0.0/8\nlimit: &n 3\n"
			"nonMasqueradeCIDRs: [*net, 192.168.0.0/16]\ncidrLimit: *n\n");
	CHECK(loaded.config.nonMasqueradeCIDRs.size() == 2);
	CHECK(loaded.config.nonMasqueradeCIDRs[0].toString() == "10.0.0.0/8");
	CHECK(loaded.config.cidrLimit == 3);
	// An alias carries its anchor's quoting: a quoted number is still not a number.
	CHECK_THAT(parseError("q: &q \"5\"\ncidrLimit: *q\n"), Catch::Contains("a quoted string"));

	CHECK_THAT(parseError("mine: &list [10.0.0.0/8]\nnonMasqueradeCIDRs: *list\n"),
		   Catch::StartsWith(kSource + ":2:21: nonMasqueradeCIDRs: *list is an alias of a list") &&
			   Catch::Contains("write the list here"));
	CHECK_THAT(parseError("m: &m {a: 1}\nnonMasqueradeCIDRs: [*m]\n"),
		   Catch::Contains("nonMasqueradeCIDRs[0]: expected a CIDR string such as \"10.0.0.0/8\", "
				   "got *m, an alias of a mapping"));
	CHECK_THAT(parseError("l: &l [1]\ncidrLimit: *l\n"),
		   Catch::Contains("cidrLimit: expected a whole number such as 64, got *l, an alias of a list"));

	// "Billion laughs" under an unknown key: the aliases are not followed, so it costs
	// what its text costs; it is ignored with a warning.
	std::string laughs = "lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
	for (int i = 1; i < 30; i++)
		laughs += fmt::format("lol{}: &l{} [{}]\n", i, i,
				      fmt::join(std::vector<std::string>(10, fmt::format("*l{}", i - 1)), ", "));
	// Followed, they would be 10^30 values: the Deadline catches that hang (milliseconds
	// here, unfollowed).
	Deadline deadline(20);
	CHECK(parseOk(laughs).warnings.size() == 30);
	CHECK_THAT(parseError(laughs + "nonMasqueradeCIDRs: *l29\n"), Catch::Contains("alias of a list"));
}

TEST_CASE("deep nesting is refused at a fixed depth, without recursion")
{
	const std::string deep = "other: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
	CHECK_THAT(parseError(deep), Catch::StartsWith(kSource + ":1:") &&
					     Catch::Contains("nested more than 64 levels"));
	// Where the handler does not count (the root, a key), yaml-cpp's own guard stops it,
	// and the message says what happened.
	for (const char *prefix : {"", "? "})
		CHECK_THAT(parseError(prefix + std::string(100000, '[')),
			   Catch::StartsWith(kSource + ":") && Catch::Contains("levels deep or more"));
	// A refused value is skipped, and counted as it is skipped: both are said.
	CHECK_THAT(parseError("nonMasqueradeCIDRs: " + std::string(100000, '[')),
		   Catch::StartsWith(kSource + ": 2 errors") && Catch::Contains("nonMasqueradeCIDRs[0]: expected a CIDR") &&
			   Catch::Contains("nested more than 64 levels deep"));
	// Shallow values of unknown keys are skipped as before.
	CHECK(parseOk("other: {a: [1, {b: c}]}\ncidrLimit: 5\n").config.cidrLimit == 5);
}

TEST_CASE("too many anchors or unknown keys: not an ip-masq-agent config")
{
	std::string anchors = "x: [";
	for (size_t i = 0; i <= kMaxConfigAnchors; i++)
		anchors += fmt::format("&a{} 1, ", i);
	CHECK_THAT(parseError(anchors + "]\n"), Catch::Contains("more than 1000 anchors"));

	std::string keys;
	for (size_t i = 0; i < kMaxUnknownConfigKeys; i++)
		keys += fmt::format("key{}: 1\n", i);
	CHECK(parseOk(keys).warnings.size() == kMaxUnknownConfigKeys);
	CHECK_THAT(parseError(keys + "onemore: 1\n"),
		   Catch::StartsWith(kSource + ":101:1: ") && Catch::Contains("more than 100 unknown keys"));
}

TEST_CASE("a file of millions of tiny values is stopped at the value cap")
{
	// 4 bytes a value here, 48 inside yaml-cpp's scanner: the cap bounds both, and time.
	std::string text = "other:\n";
	for (size_t i = 0; i <= kMaxConfigValues; i++)
		text += "-\n";
	// Linear in the values, well under a second here: a scanner that went quadratic would
	// hang, which the Deadline catches.
	Deadline deadline(20);
	CHECK_THAT(parseError(text), Catch::StartsWith(kSource + ":1100000:1: ") &&
					     Catch::Contains("more than 1100000 values"));
}

TEST_CASE("control bytes in values and keys cannot forge a log line")
{
	const std::string forged = "10.0.0.0/8\\nE1123 12:00:00.000000 1 fake.go:1] forged\\x1b[2J";
	const std::string cidr = parseError("nonMasqueradeCIDRs: [\"" + forged + "\"]\n");
	CHECK(isOneSafeLine(cidr));
	CHECK_THAT(cidr, Catch::Contains("nonMasqueradeCIDRs[0]") &&
				 Catch::Contains("\"10.0.0.0/8\\nE1123") && Catch::Contains("\\x1b[2J"));
	// A tab or a quote only: still escaped, still names the entry.
	CHECK_THAT(parseError("nonMasqueradeCIDRs: [\"10.0.0.0/8\\t\"]\n"), Catch::Contains("\"10.0.0.0/8\\t\""));
	CHECK_THAT(parseError("nonMasqueradeCIDRs: ['10.0.0.0/8\"']\n"), Catch::Contains("\"10.0.0.0/8\\\"\""));

	const std::string interval = parseError("resyncInterval: \"1s\\nE1123 forged\"\n");
	CHECK(isOneSafeLine(interval));
	CHECK_THAT(interval, Catch::Contains("\"1s\\nE1123 forged\" is not a duration"));

	const std::string limit = parseError("cidrLimit: \"6\\r4\"\n");
	CHECK(isOneSafeLine(limit));
	CHECK_THAT(limit, Catch::Contains("\"6\\r4\""));

	const LoadedConfig unknown = parseOk("\"evil\\nE1123 forged\": 1\n");
	REQUIRE(unknown.warnings.size() == 1);
	CHECK(isOneSafeLine(unknown.warnings[0]));
	CHECK_THAT(unknown.warnings[0], Catch::Contains("\"evil\\nE1123 forged\""));

	const std::string duplicate = parseError("\"a\\nb\": 1\n\"a\\nb\": 2\n");
	CHECK(isOneSafeLine(duplicate));

	// The file name is escaped too.
	auto named = parseConfig("cidrLimit: x\n", "/etc/config\nE1123 forged", {});
	REQUIRE_FALSE(named);
	CHECK(isOneSafeLine(named.error().message));
	CHECK_THAT(named.error().message, Catch::StartsWith("/etc/config\\nE1123 forged:1:12: "));
}

TEST_CASE("a very long value is cut short in messages")
{
	const std::string longCidr(5000, '1');
	const std::string e = parseError("nonMasqueradeCIDRs: [" + longCidr + "]\n");
	CHECK_THAT(e, Catch::Contains("nonMasqueradeCIDRs[0]") && Catch::Contains("(5000 bytes)"));
	CHECK(e.size() < 400);
	// An explicit key ("? "): an implicit one is limited to 1024 characters by YAML.
	const LoadedConfig key = parseOk("? " + std::string(5000, 'k') + "\n: 1\n");
	REQUIRE(key.warnings.size() == 1);
	CHECK(key.warnings[0].size() < 400);
}

TEST_CASE("cidrLimit bounds the work: a list past it stops at the first entry too many")
{
	// cidrLimit first: the entry past it is named, and the rest is not read.
	const std::string text = cidrsYaml(100000, "cidrLimit: 2\n", "");
	const std::string e = parseError(text);
	CHECK_THAT(e, Catch::StartsWith(kSource + ":5:5: nonMasqueradeCIDRs[2]: ") &&
			      Catch::Contains("3 entries or more") && Catch::Contains("cidrLimit (2;") &&
			      Catch::Contains("raise cidrLimit"));

	// cidrLimit after the list: checked as soon as it is read.
	CHECK_THAT(parseError(cidrsYaml(1000, "", "cidrLimit: 999\n")),
		   Catch::StartsWith(kSource + ":2:3: nonMasqueradeCIDRs: 1000 entries") &&
			   Catch::Contains("cidrLimit (999;"));
	// ... or at the end, for the default.
	CHECK_THAT(parseError(cidrsYaml(65, "", "")), Catch::Contains("65 entries, more than cidrLimit (64;"));
}

TEST_CASE("a long list with cidrLimit after it is kept whole and in order")
{
	// cidrLimit comes after the list: the list is held (compactly) until it is known.
	const size_t n = 70000;
	const LoadedConfig loaded = parseOk(cidrsYaml(n, "", fmt::format("cidrLimit: {}\n", n)));
	const auto &list = loaded.config.nonMasqueradeCIDRs;
	REQUIRE(list.size() == n);
	CHECK(list.front().toString() == "20.0.0.0/24");
	CHECK(list[65536].toString() == "21.0.0.0/24");
	CHECK(list.back().toString() == fmt::format("21.{}.{}.0/24", (n - 1 - 65536) / 256, (n - 1) % 256));
	CHECK(loaded.config.cidrLimit == static_cast<int>(n));
	// Entries read from a file carry no spelling: messages are made while parsing.
	CHECK(list.front().spelling.empty());
	CHECK_THAT(parseError(cidrsYaml(n, "", fmt::format("cidrLimit: {}\n", n - 1))),
		   Catch::Contains("70000 entries"));
}

TEST_CASE("describeConfig stays one short line for a long list")
{
	Config config = defaultConfig({});
	config.nonMasqueradeCIDRs = parseOk(cidrsYaml(10000, "cidrLimit: 10000\n", ""))
					    .config.nonMasqueradeCIDRs;
	const std::string line = describeConfig(config);
	CHECK_THAT(line, Catch::StartsWith("nonMasqueradeCIDRs=[20.0.0.0/24,20.0.1.0/24,") &&
				 Catch::Contains(",... (10000 entries)] cidrLimit=64 "));
	CHECK(line.size() < 300);
	// Up to 16 entries are listed in full (the reserved ranges are 11).
	CHECK_THAT(describeConfig(defaultConfig({.nomasqAllReservedRanges = true, .enableIpv6 = false})),
		   Catch::Contains("203.0.113.0/24,240.0.0.0/4]"));
}
