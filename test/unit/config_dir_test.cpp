// SPDX-License-Identifier: Apache-2.0
// --config-dir: which files of a directory are read, how their configs merge, and the one
// load path (loadConfigContent) every mode takes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "ip-masq-agent/config/config_dir.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/config/policy.h"
#include "ip-masq-agent/base/process_guard.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "scratch_dir.h"

using namespace ipmasq;
using ipmasq::test::ScratchDir;
using namespace std::chrono_literals;

namespace {

Prefix entry(const char *text, uint32_t line)
{
	auto prefix = parsePrefix(text);
	REQUIRE(prefix);
	prefix->origin = Origin{0, line};
	return *prefix;
}

// One file's config, as the parser makes it: its own path in `files`, origins index 0.
LoadedConfig fileConfig(const std::string &path)
{
	LoadedConfig loaded;
	loaded.config = defaultConfig({});
	loaded.config.files = {path};
	loaded.fromFile = true;
	return loaded;
}

void giveNonMasquerade(LoadedConfig &loaded, std::vector<Prefix> prefixes)
{
	loaded.config.nonMasqueradeCIDRs = std::move(prefixes);
	loaded.config.nonMasqueradeCIDRsGiven = true;
}

LoadedConfig mergeOk(std::vector<LoadedConfig> parts)
{
	auto merged = mergeConfigs(std::move(parts), {});
	INFO((merged ? "" : merged.error().message));
	REQUIRE(merged);
	return *merged;
}

// The prefixes of a list with the file each came from: "10.0.0.0/8@dir/ip-masq-a:3".
std::vector<std::string> withOrigins(const Config &config, const std::vector<Prefix> &list)
{
	std::vector<std::string> out;
	for (const Prefix &prefix : list)
		out.push_back(prefix.toString() + "@" + describeOrigin(config, prefix.origin));
	return out;
}

// Three files that use every merge rule.
std::vector<LoadedConfig> threeFiles()
{
	LoadedConfig a = fileConfig("/d/ip-masq-a");
	giveNonMasquerade(a, {entry("10.0.0.0/8", 2), entry("192.168.0.0/16", 3)});
	a.warnings = {"warning from a"};

	LoadedConfig b = fileConfig("/d/ip-masq-b");
	giveNonMasquerade(b, {entry("10.0.0.0/8", 5), entry("198.51.100.0/24", 6)});
	b.config.masqueradeCIDRs = {entry("10.1.0.0/16", 8)};
	b.config.masqLinkLocalIPv6 = true;
	b.config.cidrLimit = 100;
	b.cidrLimitGiven = true;
	b.config.resyncInterval = 30s;
	b.resyncIntervalGiven = true;

	LoadedConfig c = fileConfig("/d/ip-masq-c"); // no nonMasqueradeCIDRs: the defaults
	c.config.masqLinkLocal = true;
	c.config.masqueradeSourceCIDRs = {entry("10.244.0.0/16", 1)};
	c.config.resyncInterval = 2min;
	c.resyncIntervalGiven = true;
	c.warnings = {"warning from c"};
	return {a, b, c};
}

} // namespace

TEST_CASE("merge: unions with origins, booleans ORed, largest cidrLimit, shortest resync")
{
	const LoadedConfig merged = mergeOk(threeFiles());
	const Config &config = merged.config;
	CHECK(config.files == std::vector<std::string>{"/d/ip-masq-a", "/d/ip-masq-b", "/d/ip-masq-c"});
	CHECK(config.nonMasqueradeCIDRsGiven);
	// 10.0.0.0/8 is listed by a and b: kept once, where a lists it. No defaults: a
	// file gave the key.
	CHECK(withOrigins(config, config.nonMasqueradeCIDRs) ==
	      std::vector<std::string>{"10.0.0.0/8@/d/ip-masq-a:2", "192.168.0.0/16@/d/ip-masq-a:3",
				       "198.51.100.0/24@/d/ip-masq-b:6"});
	CHECK(withOrigins(config, config.masqueradeCIDRs) ==
	      std::vector<std::string>{"10.1.0.0/16@/d/ip-masq-b:8"});
	CHECK(withOrigins(config, config.masqueradeSourceCIDRs) ==
	      std::vector<std::string>{"10.244.0.0/16@/d/ip-masq-c:1"});
	CHECK(config.masqLinkLocal);
	CHECK(config.masqLinkLocalIPv6);
	CHECK(config.cidrLimit == 100);
	CHECK(config.resyncInterval == 30s);
	CHECK(merged.warnings == std::vector<std::string>{"warning from a", "warning from c"});
	CHECK(merged.fromFile);
}

TEST_CASE("merge: the result does not depend on the order of the files")
{
	std::vector<LoadedConfig> parts = threeFiles();
	const LoadedConfig first = mergeOk(parts);
	std::vector<size_t> order{0, 1, 2};
	size_t permutations = 0;
	do {
		std::vector<LoadedConfig> permuted;
		for (size_t i : order)
			permuted.push_back(parts[i]);
		const LoadedConfig merged = mergeOk(permuted);
		INFO("order " << order[0] << order[1] << order[2]);
		CHECK(merged.config == first.config);
		CHECK(withOrigins(merged.config, merged.config.nonMasqueradeCIDRs) ==
		      withOrigins(first.config, first.config.nonMasqueradeCIDRs));
		CHECK(withOrigins(merged.config, merged.config.masqueradeCIDRs) ==
		      withOrigins(first.config, first.config.masqueradeCIDRs));
		permutations++;
	} while (std::next_permutation(order.begin(), order.end()));
	CHECK(permutations == 6);
}

TEST_CASE("merge: the built-in defaults only when no file gives nonMasqueradeCIDRs")
{
	LoadedConfig a = fileConfig("/d/ip-masq-a");
	LoadedConfig b = fileConfig("/d/ip-masq-b");
	a.config.masqLinkLocal = true;
	SECTION("none gives it: the defaults, as built-in entries")
	{
		const Config config = mergeOk({a, b}).config;
		CHECK_FALSE(config.nonMasqueradeCIDRsGiven);
		CHECK(config.nonMasqueradeCIDRs == defaultNonMasqueradeCIDRs({}));
		for (const Prefix &prefix : config.nonMasqueradeCIDRs)
			CHECK(prefix.origin.builtIn());
		CHECK(config.masqLinkLocal);
	}
	SECTION("one gives it, even empty: only what the files list")
	{
		giveNonMasquerade(b, {});
		const Config config = mergeOk({a, b}).config;
		CHECK(config.nonMasqueradeCIDRsGiven);
		CHECK(config.nonMasqueradeCIDRs.empty());
	}
	SECTION("no file at all: the defaults, not from a file")
	{
		const LoadedConfig merged = mergeOk({});
		CHECK_FALSE(merged.fromFile);
		CHECK(merged.config == defaultConfig({}));
	}
}

TEST_CASE("merge: the largest cidrLimit bounds each merged list, naming count, limit and files")
{
	LoadedConfig a = fileConfig("/d/ip-masq-a");
	giveNonMasquerade(a, {entry("192.0.2.0/26", 1), entry("192.0.2.64/26", 2)});
	a.config.cidrLimit = 2;
	a.cidrLimitGiven = true;
	LoadedConfig b = fileConfig("/d/ip-masq-b");
	giveNonMasquerade(b, {entry("192.0.2.128/26", 1), entry("192.0.2.192/26", 2),
			      entry("192.0.2.0/26", 3)}); // a lists it too: counted once
	b.config.cidrLimit = 3;
	b.cidrLimitGiven = true;

	auto refused = mergeConfigs({a, b}, {});
	REQUIRE_FALSE(refused);
	CHECK_THAT(refused.error().message,
		   Catch::Contains("/d/ip-masq-a, /d/ip-masq-b: nonMasqueradeCIDRs") &&
			   Catch::Contains("4 entries") && Catch::Contains("cidrLimit") &&
			   Catch::Contains("(3;"));

	b.config.cidrLimit = 4;
	CHECK(mergeOk({a, b}).config.nonMasqueradeCIDRs.size() == 4);

	// The other lists are bounded separately, by the same limit.
	a.config.cidrLimit = 1;
	b.config.cidrLimit = 1;
	giveNonMasquerade(a, {});
	giveNonMasquerade(b, {});
	a.config.masqueradeCIDRs = {entry("10.1.0.0/16", 4)};
	b.config.masqueradeCIDRs = {entry("10.2.0.0/16", 4)};
	auto masquerade = mergeConfigs({a, b}, {});
	REQUIRE_FALSE(masquerade);
	CHECK_THAT(masquerade.error().message,
		   Catch::Contains("masqueradeCIDRs") && Catch::Contains("2 entries"));
}

TEST_CASE("merge: a prefix non-masquerade in one file and masquerade in another names both")
{
	LoadedConfig a = fileConfig("/d/ip-masq-a");
	giveNonMasquerade(a, {entry("10.0.0.0/8", 2), entry("10.1.0.0/16", 3)});
	LoadedConfig b = fileConfig("/d/ip-masq-b");
	b.config.masqueradeCIDRs = {entry("10.1.0.0/16", 7)};
	const auto load = [](std::vector<LoadedConfig> parts) {
		LoadedConfig merged = mergeOk(std::move(parts));
		return checkConfigPolicy(merged);
	};
	for (auto parts : {std::vector{a, b}, std::vector{b, a}}) {
		auto status = load(parts);
		REQUIRE_FALSE(status);
		CHECK_THAT(status.error().message,
			   Catch::Contains("/d/ip-masq-b:7") && Catch::Contains("/d/ip-masq-a:3"));
	}
}

TEST_CASE("loadConfigContent: one bad file makes the config bad and is named")
{
	ScratchDir dir;
	const ConfigContent content{{{dir.file("ip-masq-a"), "nonMasqueradeCIDRs: [10.0.0.0/8]\n"},
				     {dir.file("ip-masq-b"), "nonMasqueradeCIDRs: [10.0.0.1/8]\n"}}};
	auto loaded = loadConfigContent(content, {});
	REQUIRE_FALSE(loaded);
	CHECK_THAT(loaded.error().message, Catch::StartsWith(dir.file("ip-masq-b")));
}

TEST_CASE("loadConfigContent: parsed files merge (the path every mode takes)")
{
	const ConfigContent content{
		{{"/d/ip-masq-b", "nonMasqueradeCIDRs: [192.0.2.0/24]\nmasqLinkLocal: true\n"},
		 {"/d/ip-masq-a", "nonMasqueradeCIDRs: [10.0.0.0/8]\nresyncInterval: 1h\n"}}};
	auto loaded = loadConfigContent(content, {});
	INFO((loaded ? "" : loaded.error().message));
	REQUIRE(loaded);
	const Config &config = loaded->config;
	CHECK(config.files == std::vector<std::string>{"/d/ip-masq-a", "/d/ip-masq-b"});
	REQUIRE(config.nonMasqueradeCIDRs.size() == 2);
	CHECK(config.nonMasqueradeCIDRs[0].toString() == "10.0.0.0/8");
	CHECK(config.nonMasqueradeCIDRs[0].origin.file == 0);
	CHECK(config.nonMasqueradeCIDRs[1].toString() == "192.0.2.0/24");
	CHECK(config.nonMasqueradeCIDRs[1].origin.file == 1);
	CHECK(config.masqLinkLocal);
	CHECK(config.resyncInterval == 1h); // b leaves it out: it does not vote with the default

	auto none = loadConfigContent(ConfigContent::absent(), {});
	REQUIRE(none);
	CHECK_FALSE(none->fromFile);
	CHECK(none->config.nonMasqueradeCIDRs == defaultNonMasqueradeCIDRs({}));
}

TEST_CASE("listConfigDir: regular ip-masq* files, symlinks followed, in byte order; nothing else")
{
	ScratchDir dir;
	dir.write("ip-masq-b", "b");
	dir.write("ip-masq-B", "B"); // 'B' < 'b' in bytes
	dir.write("other", "x");
	dir.write(".ip-masq-a.swp", "x");
	// A ConfigMap volume: ip-masq-c -> ..data/ip-masq-c, ..data -> ..2026_11_23_x.
	std::filesystem::create_directory(dir.path / "..2026_11_23_x");
	dir.write("..2026_11_23_x/ip-masq-c", "c");
	std::filesystem::create_directory_symlink("..2026_11_23_x", dir.path / "..data");
	std::filesystem::create_symlink("..data/ip-masq-c", dir.path / "ip-masq-c");
	std::filesystem::create_symlink("nowhere", dir.path / "ip-masq-dangling");
	std::filesystem::create_directory(dir.path / "ip-masq-subdir");
	dir.write("ip-masq-subdir/ip-masq-nested", "x");
	REQUIRE(mkfifo(dir.file("ip-masq-fifo").c_str(), 0600) == 0);

	auto listing = listConfigDir(dir.path.string());
	INFO((listing ? "" : listing.error().message));
	REQUIRE(listing);
	REQUIRE(*listing);
	CHECK(**listing == std::vector<std::string>{dir.file("ip-masq-B"), dir.file("ip-masq-b"),
						     dir.file("ip-masq-c")});

	// Read as a whole: the FIFO is never opened (it would block), the symlink is followed.
	auto content = readConfigContent(ConfigLocation::directory(dir.path.string()));
	REQUIRE(content);
	REQUIRE(content->files.size() == 3);
	CHECK(content->files[2].text == "c");
}

TEST_CASE("listConfigDir: missing is no files; a file, or too many files, is an error")
{
	ScratchDir dir;
	auto missing = listConfigDir(dir.file("missing"));
	REQUIRE(missing);
	CHECK_FALSE(*missing);
	auto absent = readConfigContent(ConfigLocation::directory(dir.file("missing")));
	REQUIRE(absent);
	CHECK(absent->files.empty());

	dir.write("ip-masq-agent", "");
	auto notDir = listConfigDir(dir.file("ip-masq-agent"));
	REQUIRE_FALSE(notDir);
	CHECK_THAT(notDir.error().message, Catch::Contains("not a directory") &&
						   Catch::Contains("--config"));

	for (size_t i = 1; i < kMaxConfigDirFiles; i++)
		dir.write("ip-masq-" + std::to_string(i), "");
	auto full = listConfigDir(dir.path.string());
	REQUIRE(full);
	CHECK((*full)->size() == kMaxConfigDirFiles);
	dir.write("ip-masq-one-more", "");
	auto tooMany = listConfigDir(dir.path.string());
	REQUIRE_FALSE(tooMany);
	CHECK_THAT(tooMany.error().message, Catch::Contains("more than 64 files"));
}

TEST_CASE("readConfigContent: the files together are bounded like one file")
{
	ScratchDir dir;
	const std::string comment(kMaxConfigDirBytes / 2 + 1, '#');
	dir.write("ip-masq-a", comment);
	auto one = readConfigContent(ConfigLocation::directory(dir.path.string()));
	REQUIRE(one);
	dir.write("ip-masq-b", comment);
	auto two = readConfigContent(ConfigLocation::directory(dir.path.string()));
	REQUIRE_FALSE(two);
	CHECK_THAT(two.error().message, Catch::Contains("together") && Catch::Contains(dir.path.string()));
}

TEST_CASE("listConfigDir: a directory of very many entries is refused, not scanned to its end")
{
	ScratchDir dir;
	// Other names count too: the bound is on the listing's loop, not on the matches.
	for (size_t i = 0; i < kMaxConfigDirEntries; i++)
		std::ofstream(dir.path / ("other-" + std::to_string(i)));
	auto tooMany = listConfigDir(dir.path.string());
	REQUIRE_FALSE(tooMany);
	CHECK_THAT(tooMany.error().message,
		   Catch::Contains(std::to_string(kMaxConfigDirEntries) + " entries") &&
			   Catch::Contains(dir.path.string()));
}

TEST_CASE("DirStream: the one owner of a directory stream closes it, and says why it could not open one")
{
	ScratchDir dir;
	std::ofstream(dir.path / "ip-masq-a") << "x";
	const size_t before = process::descriptorRoom().open;
	for (int i = 0; i < 100; i++) {
		DirStream stream = DirStream::open(dir.path.c_str());
		REQUIRE(stream.isValid());
		size_t entries = 0;
		while (stream.next() != nullptr && entries < 10)
			entries++;
		CHECK(entries == 3); // ".", ".." and the file
		CHECK(errno == 0);   // the end, not an error
		// Relative to the stream's own descriptor, as /proc/PID/fd is opened in /proc.
		DirStream self = DirStream::open(".", stream.fd());
		CHECK(self.isValid());
	}
	CHECK(process::descriptorRoom().open == before); // none left open

	DirStream missing = DirStream::open((dir.path / "absent").c_str());
	CHECK_FALSE(missing.isValid());
	CHECK(errno == ENOENT);
	DirStream file = DirStream::open((dir.path / "ip-masq-a").c_str());
	CHECK_FALSE(file.isValid());
	CHECK(errno == ENOTDIR);
	CHECK(process::descriptorRoom().open == before);
}
