// SPDX-License-Identifier: Apache-2.0
// The config file: upstream's keys, defaults and rejections, with messages that say how to fix.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "scratch_dir.h"
#include "config_entries.h"

using namespace ipmasq;
using namespace std::chrono_literals;

namespace {

const std::string &kSource = test::kConfigFile;

using test::parseError;
using test::parseOk;

std::vector<std::string> cidrs(const Config &config)
{
	std::vector<std::string> out;
	for (const Prefix &p : config.nonMasqueradeCIDRs)
		out.push_back(p.toString());
	return out;
}

const std::vector<std::string> kRfc1918{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"};

} // namespace

TEST_CASE("defaults match upstream")
{
	const Config c = defaultConfig({});
	CHECK(cidrs(c) == kRfc1918);
	CHECK(c.cidrLimit == 64);
	CHECK_FALSE(c.masqLinkLocal);
	CHECK_FALSE(c.masqLinkLocalIPv6);
	CHECK(c.resyncInterval == 60s);

	const Config reserved = defaultConfig({.nomasqAllReservedRanges = true, .enableIpv6 = false});
	CHECK(cidrs(reserved) ==
	      std::vector<std::string>{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
				       "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "198.18.0.0/15",
				       "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4"});
}

TEST_CASE("an empty file, comments only or null means all defaults")
{
	for (const char *text : {"", "\n", "# nothing here\n", "~\n", "null", "{}"}) {
		const LoadedConfig loaded = parseOk(text);
		CHECK(loaded.config == defaultConfig({}));
		CHECK(loaded.warnings.empty());
	}
}

TEST_CASE("keys that are present replace their defaults, the others keep them")
{
	const LoadedConfig loaded = parseOk("nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 100.64.0.0/10\n"
					    "masqLinkLocal: true\n");
	CHECK(cidrs(loaded.config) == std::vector<std::string>{"10.0.0.0/8", "100.64.0.0/10"});
	CHECK(loaded.config.masqLinkLocal);
	CHECK(loaded.config.cidrLimit == 64);
	CHECK(loaded.config.resyncInterval == 60s);

	const LoadedConfig all = parseOk("nonMasqueradeCIDRs: [192.0.2.0/24]\ncidrLimit: 5\n"
					 "masqLinkLocal: false\nmasqLinkLocalIPv6: true\n"
					 "resyncInterval: 1m30s\n");
	CHECK(all.config.cidrLimit == 5);
	CHECK(all.config.masqLinkLocalIPv6);
	CHECK(all.config.resyncInterval == 90s);

	// The file's list replaces the defaults even with --nomasq-all-reserved-ranges.
	const LoadedConfig file = parseOk("nonMasqueradeCIDRs: [192.0.2.0/24]\n",
					  {.nomasqAllReservedRanges = true, .enableIpv6 = false});
	CHECK(cidrs(file.config) == std::vector<std::string>{"192.0.2.0/24"});
	// Without the key, that flag's defaults apply.
	CHECK(parseOk("cidrLimit: 20\n", {.nomasqAllReservedRanges = true, .enableIpv6 = false})
		      .config.nonMasqueradeCIDRs.size() == 11);
}

TEST_CASE("JSON is accepted, as upstream")
{
	const LoadedConfig loaded = parseOk(R"({"nonMasqueradeCIDRs": ["10.0.0.0/8"], "cidrLimit": 10,
		"masqLinkLocal": true, "resyncInterval": "2m"})");
	CHECK(cidrs(loaded.config) == std::vector<std::string>{"10.0.0.0/8"});
	CHECK(loaded.config.cidrLimit == 10);
	CHECK(loaded.config.masqLinkLocal);
	CHECK(loaded.config.resyncInterval == 120s);
}

TEST_CASE("an explicit empty list or null empties the list")
{
	CHECK(parseOk("nonMasqueradeCIDRs: []\n").config.nonMasqueradeCIDRs.empty());
	CHECK(parseOk("nonMasqueradeCIDRs:\n").config.nonMasqueradeCIDRs.empty());
	CHECK(parseOk("nonMasqueradeCIDRs: null\n").config.nonMasqueradeCIDRs.empty());
	// null for a scalar keeps its default, as Go's decoder does.
	CHECK(parseOk("cidrLimit: null\nresyncInterval: ~\n").config == defaultConfig({}));
}

TEST_CASE("unknown keys are ignored with a warning that names them")
{
	const LoadedConfig loaded = parseOk("nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqLinkLocl: true\n");
	REQUIRE(loaded.warnings.size() == 1);
	CHECK_THAT(loaded.warnings[0], Catch::Contains("masqLinkLocl") &&
					       Catch::Contains("unknown key") &&
					       Catch::Contains(kSource + ":2:1"));
	CHECK_FALSE(loaded.config.masqLinkLocal);
}

TEST_CASE("a misspelled key is ignored with a warning that names the key it most likely means")
{
	// One letter short: the defaults stay in force, and the warning says so loudly.
	const LoadedConfig loaded = parseOk("nonMasqueradeCIDR:\n  - 198.51.100.0/24\n");
	CHECK(loaded.config == defaultConfig({}));
	REQUIRE(loaded.warnings.size() == 1);
	CHECK(loaded.warnings[0] == kSource + ":1:1: ignoring unknown key \"nonMasqueradeCIDR\": did you "
					      "mean \"nonMasqueradeCIDRs\"?");
	CHECK(loaded.unknownKeys == loaded.warnings);

	// A key far from every known one gets the list instead.
	const LoadedConfig far = parseOk("nodeName: worker-1\ncidrLimit: 5\n");
	REQUIRE(far.unknownKeys.size() == 1);
	CHECK_THAT(far.unknownKeys[0], Catch::Contains("(known keys: nonMasqueradeCIDRs, cidrLimit") &&
					       !Catch::Contains("did you mean"));
	CHECK(far.config.cidrLimit == 5);
	// A known key misspelled only in case is no unknown key.
	CHECK(parseOk("NonMasqueradeCIDRs: [198.51.100.0/24]\n").unknownKeys.empty());
}

TEST_CASE("the suggestion: the closest known key, by edits ignoring case, when close enough")
{
	CHECK(suggestKey("nonMasqueradeCIDR") == "nonMasqueradeCIDRs");
	CHECK(suggestKey("NONMASQUERADECIDR") == "nonMasqueradeCIDRs");
	CHECK(suggestKey("masqLinkLcoal") == "masqLinkLocal"); // two letters swapped: one edit
	CHECK(suggestKey("masqLinkLocalIpv4") == "masqLinkLocalIPv6");
	CHECK(suggestKey("resync") == std::nullopt); // 8 edits from resyncInterval
	CHECK(suggestKey("cidrLimt") == "cidrLimit");
	CHECK(suggestKey("masqueradeCIDR") == "masqueradeCIDRs");
	// At most kMaxSuggestionDistance edits, and fewer than half the key's letters.
	CHECK(suggestKey("cidrLmt") == "cidrLimit");     // 2 edits of 7 letters
	CHECK(suggestKey("xxxxLimit") == std::nullopt);  // 4 edits
	CHECK(suggestKey("ab") == std::nullopt);
	CHECK(suggestKey(std::string(33, 'a')) == std::nullopt);
	// The section's keys, for its own message.
	CHECK(suggestKey("withn", true) == "within");
	CHECK(suggestKey("withn") == std::nullopt);
	CHECK_THAT(parseError("nonMasqueradeDiscovery:\n  withn: [198.18.0.0/15]\n"),
		   Catch::Contains("unknown key \"withn\": did you mean \"within\"?"));
}

TEST_CASE("--strict-config: an unknown key is an error; without it upstream's configs load")
{
	const ConfigFlags strict{.nomasqAllReservedRanges = false, .enableIpv6 = false, .strictKeys = true};
	CHECK(parseError("nonMasqueradeCIDR:\n  - 198.51.100.0/24\n", strict) ==
	      kSource + ":1:1: unknown key \"nonMasqueradeCIDR\" (--strict-config: unknown keys are "
			"errors): did you mean \"nonMasqueradeCIDRs\"? Fix its spelling, or remove it");
	CHECK_THAT(parseError("nodeName: worker-1\n", strict),
		   Catch::Contains("remove it, or fix its spelling (known keys: nonMasqueradeCIDRs"));
	// A config written for upstream, with a key of a newer upstream or a fork: read as
	// upstream reads it, the unknown key ignored.
	const std::string upstream = "nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - 198.51.100.0/24\n"
				     "masqLinkLocal: false\nresyncInterval: 60s\nnodeName: worker-1\n";
	const LoadedConfig loaded = parseOk(upstream);
	CHECK(cidrs(loaded.config) == std::vector<std::string>{"10.0.0.0/8", "198.51.100.0/24"});
	CHECK(loaded.unknownKeys.size() == 1);
	// And with the flag, a config without unknown keys loads the same.
	CHECK(parseOk("nonMasqueradeCIDRs: [198.51.100.0/24]\ncidrLimit: 5\n", strict).config ==
	      parseOk("nonMasqueradeCIDRs: [198.51.100.0/24]\ncidrLimit: 5\n").config);
}

TEST_CASE("every error of a file is reported at once, in the order of the file")
{
	const std::string e = parseError("nonMasqueradeCIDRs:\n  - 198.51.100.0/24\n  - 198.51.100.1/24\n"
					 "  - bogus\n  - 203.0.113.0/33\ncidrLimit: many\n");
	CHECK_THAT(e, Catch::StartsWith(kSource + ": 4 errors (fix each of them): [1] " + kSource +
					":3:5: nonMasqueradeCIDRs[1]: "));
	const auto at = [&](const std::string &text) { return e.find(text); };
	REQUIRE(at("[2] " + kSource + ":4:5: nonMasqueradeCIDRs[2]: CIDR \"bogus\"") != std::string::npos);
	REQUIRE(at("[3] " + kSource + ":5:5: nonMasqueradeCIDRs[3]: ") != std::string::npos);
	REQUIRE(at("[4] " + kSource + ":6:12: cidrLimit: expected a whole number") != std::string::npos);
	CHECK(at("[1]") < at("[2]"));
	CHECK(at("[2]") < at("[3]"));
	CHECK(at("[3]") < at("[4]"));
	// One error is reported as it is, unnumbered.
	CHECK_THAT(parseError("nonMasqueradeCIDRs: [bogus]\n"), Catch::StartsWith(kSource + ":1:"));
}

TEST_CASE("after an error the rest of the file is read as the file says")
{
	// A refused value is skipped whole, whatever its shape, and the next key read as a key.
	const std::string wrongType = parseError("cidrLimit: [1, 2]\nmasqLinkLocal: maybe\n"
						 "nonMasqueradeCIDRs: [[198.51.100.0/24], bogus]\n");
	CHECK_THAT(wrongType, Catch::StartsWith(kSource + ": 4 errors") &&
				      Catch::Contains("[1] " + kSource + ":1:12: cidrLimit:") &&
				      Catch::Contains("[2] " + kSource + ":2:16: masqLinkLocal:") &&
				      Catch::Contains("[3] " + kSource + ":3:22: nonMasqueradeCIDRs[0]: expected a "
						      "CIDR string such as \"10.0.0.0/8\", got a list") &&
				      Catch::Contains("[4] " + kSource + ":3:41: nonMasqueradeCIDRs[1]: CIDR \"bogus\""));
	// A duplicate key's value is not read as a key.
	const std::string duplicate = parseError("cidrLimit: 3\nCIDRLimit: 4\nmasqLinkLocal: maybe\n");
	CHECK_THAT(duplicate, Catch::StartsWith(kSource + ": 2 errors") &&
				      Catch::Contains("[1] " + kSource + ":2:1: cidrLimit: duplicate key") &&
				      Catch::Contains("[2] " + kSource + ":3:16: masqLinkLocal:"));
	// The section too: a bad key's value is skipped, each bad entry said.
	const std::string section = parseError("nonMasqueradeDiscovery:\n  within: [bogus, 198.18.0.0/15]\n"
					       "  holdDwn: {a: b}\n  holdDown: 1\n"
					       "  routeInterfaces: [[x], \"an-interface-name-too-long\"]\n");
	CHECK_THAT(section, Catch::StartsWith(kSource + ": 5 errors") &&
				    Catch::Contains("nonMasqueradeDiscovery.within[0]") &&
				    Catch::Contains("unknown key \"holdDwn\": did you mean \"holdDown\"?") &&
				    Catch::Contains("nonMasqueradeDiscovery.holdDown: \"1\" is a bare number") &&
				    Catch::Contains("nonMasqueradeDiscovery.routeInterfaces[0]") &&
				    Catch::Contains("nonMasqueradeDiscovery.routeInterfaces[1]"));
	// A list longer than cidrLimit is said once, with the file's other errors.
	const std::string limit = parseError("cidrLimit: 1\nnonMasqueradeCIDRs: [198.51.100.0/24, "
					     "203.0.113.0/24, 198.18.0.0/15]\nmasqLinkLocal: maybe\n");
	CHECK_THAT(limit, Catch::StartsWith(kSource + ": 2 errors") && Catch::Contains("more than cidrLimit (1") &&
				  Catch::Contains("masqLinkLocal"));
	// A syntax error is reported alone: what came before it may be its consequence.
	CHECK_THAT(parseError("cidrLimit: x\nnonMasqueradeCIDRs: [198.51.100.0/24\n"),
		   Catch::StartsWith(kSource + ":") && Catch::Contains("YAML syntax error") &&
			   !Catch::Contains("cidrLimit"));
}

TEST_CASE("the errors listed are bounded: the first 20, and how many more")
{
	std::string text = "nonMasqueradeCIDRs:\n";
	for (int i = 0; i < 25; i++)
		text += "  - bogus" + std::to_string(i) + "\n";
	const std::string e = parseError(text);
	CHECK_THAT(e, Catch::StartsWith(kSource + ": 25 errors") &&
			      Catch::Contains("[20] " + kSource + ":21:5: nonMasqueradeCIDRs[19]") &&
			      !Catch::Contains("[21]") && !Catch::Contains("bogus20") &&
			      Catch::EndsWith("; and 5 more after these (only the first 20 are listed)"));
	STATIC_REQUIRE(kMaxReportedConfigErrors == 20);
}

TEST_CASE("a tab in the indentation is named as such")
{
	CHECK_THAT(parseError("nonMasqueradeCIDRs:\n\t- 198.51.100.0/24\n"),
		   Catch::StartsWith(kSource + ":2:1: a tab in the indentation: YAML indents with spaces "
						"only: replace the tab with spaces (the YAML parser stopped at "));
	CHECK_THAT(parseError("cidrLimit: 3\nnonMasqueradeCIDRs:\n  - 198.51.100.0/24\n \t- 203.0.113.0/24\n"),
		   Catch::StartsWith(kSource + ":4:2: a tab in the indentation"));
	// A tab elsewhere is not blamed: JSON may use tabs, and a syntax error after a tab
	// in a value is another error.
	const LoadedConfig json = parseOk("{\n\t\"cidrLimit\": 5\n}\n");
	CHECK(json.config.cidrLimit == 5);
	CHECK_THAT(parseError("nonMasqueradeCIDRs: [198.51.100.0/24\ncidrLimit:\t3\n"),
		   Catch::Contains("YAML syntax error") && !Catch::Contains("tab"));
}

TEST_CASE("keys match case-insensitively, as upstream's JSON decoder, with a warning")
{
	const LoadedConfig loaded = parseOk("NonMasqueradeCIDRs: [10.0.0.0/8]\n");
	CHECK(cidrs(loaded.config) == std::vector<std::string>{"10.0.0.0/8"});
	REQUIRE(loaded.warnings.size() == 1);
	CHECK_THAT(loaded.warnings[0], Catch::Contains("\"nonMasqueradeCIDRs\""));
}

TEST_CASE("an unparsable CIDR is rejected with file, line, key and value")
{
	const std::string e = parseError("nonMasqueradeCIDRs:\n  - 10.0.0.0/8\n  - abcdefg\n");
	CHECK_THAT(e, Catch::StartsWith(kSource + ":3:5: nonMasqueradeCIDRs[1]: ") &&
			      Catch::Contains("\"abcdefg\" could not be parsed"));
	CHECK_THAT(parseError("nonMasqueradeCIDRs: [10.256.0.0/16]\n"),
		   Catch::Contains("nonMasqueradeCIDRs[0]") && Catch::Contains("10.256.0.0") &&
			   Catch::Contains("not a valid IPv4 address"));
}

TEST_CASE("a CIDR with host bits set is rejected and the aligned network named")
{
	const std::string e = parseError("nonMasqueradeCIDRs: [\"10.0.0.1/8\"]\n");
	CHECK_THAT(e, Catch::Contains("nonMasqueradeCIDRs[0]") && Catch::Contains("\"10.0.0.1/8\"") &&
			      Catch::Contains("host bits are set") && Catch::Contains("10.0.0.0/8"));
}

TEST_CASE("more CIDRs than cidrLimit are rejected; link-local is not counted")
{
	const std::string e = parseError("cidrLimit: 2\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16]\n");
	CHECK_THAT(e, Catch::Contains("nonMasqueradeCIDRs") && Catch::Contains("3 entries") &&
			      Catch::Contains("cidrLimit (2") && Catch::Contains("raise cidrLimit"));
	// Exactly at the limit is fine, and masqLinkLocal does not change the count.
	CHECK(parseOk("cidrLimit: 3\nnonMasqueradeCIDRs: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16]\n")
		      .config.nonMasqueradeCIDRs.size() == 3);
	// The limit applies to the defaults too when the file does not give a list.
	CHECK_THAT(parseError("cidrLimit: 2\n"), Catch::Contains("3 entries"));
	CHECK_THAT(parseError("cidrLimit: -1\n"), Catch::Contains("cidrLimit") && Catch::Contains("out of range"));
}

TEST_CASE("an IPv6 CIDR needs --enable-ipv6")
{
	const std::string e = parseError("nonMasqueradeCIDRs: [10.0.0.0/8, \"2001:db8::/32\"]\n");
	CHECK_THAT(e, Catch::Contains("nonMasqueradeCIDRs[1]") && Catch::Contains("2001:db8::/32") &&
			      Catch::Contains("--enable-ipv6"));
	const LoadedConfig ok = parseOk("nonMasqueradeCIDRs: [10.0.0.0/8, \"2001:db8::/32\"]\n",
					{.nomasqAllReservedRanges = false, .enableIpv6 = true});
	CHECK(cidrs(ok.config) == std::vector<std::string>{"10.0.0.0/8", "2001:db8::/32"});
}

TEST_CASE("resyncInterval must be a duration string; a bare number is an error")
{
	const std::string e = parseError("resyncInterval: 60\n");
	CHECK_THAT(e, Catch::Contains("resyncInterval") && Catch::Contains("bare number") &&
			      Catch::Contains("\"60s\""));
	CHECK_THAT(parseError("{\"resyncInterval\": 60}"), Catch::Contains("bare number"));
	CHECK_THAT(parseError("resyncInterval: 1.5\n"), Catch::Contains("bare number"));
	CHECK_THAT(parseError("resyncInterval: soon\n"), Catch::Contains("\"soon\" is not a duration"));
	CHECK_THAT(parseError("resyncInterval: [1s]\n"), Catch::Contains("expected a duration string"));
	CHECK(parseOk("resyncInterval: \"90s\"\n").config.resyncInterval == 90s);
}

TEST_CASE("a resyncInterval below 1s is raised to 1s with a warning")
{
	for (const char *text : {"resyncInterval: 0s\n", "resyncInterval: 300ms\n", "resyncInterval: \"0\"\n",
				 "resyncInterval: -5s\n"}) {
		const LoadedConfig loaded = parseOk(text);
		CHECK(loaded.config.resyncInterval == 1s);
		REQUIRE(loaded.warnings.size() == 1);
		CHECK_THAT(loaded.warnings[0], Catch::Contains("resyncInterval") && Catch::Contains("1s"));
	}
	CHECK(parseOk("resyncInterval: 1s\n").warnings.empty());
}

TEST_CASE("values of the wrong type are rejected")
{
	CHECK_THAT(parseError("cidrLimit: \"64\"\n"), Catch::Contains("cidrLimit") && Catch::Contains("whole number"));
	CHECK_THAT(parseError("cidrLimit: lots\n"), Catch::Contains("whole number"));
	CHECK_THAT(parseError("cidrLimit: 6.5\n"), Catch::Contains("whole number"));
	CHECK_THAT(parseError("masqLinkLocal: maybe\n"), Catch::Contains("masqLinkLocal") && Catch::Contains("true or false"));
	CHECK_THAT(parseError("masqLinkLocal: \"true\"\n"), Catch::Contains("true or false"));
	CHECK_THAT(parseError("nonMasqueradeCIDRs: 10.0.0.0/8\n"), Catch::Contains("expected a list"));
	CHECK_THAT(parseError("nonMasqueradeCIDRs: [[10.0.0.0/8]]\n"), Catch::Contains("nonMasqueradeCIDRs[0]") &&
										Catch::Contains("got a list"));
	CHECK_THAT(parseError("- 10.0.0.0/8\n"), Catch::Contains("must be a mapping"));
	CHECK(parseOk("masqLinkLocal: yes\n").config.masqLinkLocal); // YAML 1.1, as upstream's decoder
}

TEST_CASE("YAML syntax errors give line and column")
{
	const std::string e = parseError("nonMasqueradeCIDRs: [10.0.0.0/8\ncidrLimit: 3\n");
	CHECK_THAT(e, Catch::StartsWith(kSource + ":") && Catch::Contains("YAML syntax error"));
	const std::string tabs = parseError("cidrLimit: 3\n  masqLinkLocal: true\n");
	CHECK_THAT(tabs, Catch::StartsWith(kSource + ":2:"));
}

TEST_CASE("loadConfig: a missing file means defaults, a present one is parsed")
{
	const ipmasq::test::ScratchDir dir;
	const std::string path = dir.file("ip-masq-agent");

	auto missing = loadConfig(ConfigLocation::file(path), {});
	REQUIRE(missing);
	CHECK_FALSE(missing->fromFile);
	CHECK(missing->config == defaultConfig({}));

	std::ofstream(path) << "nonMasqueradeCIDRs: [198.51.100.0/24]\n";
	auto present = loadConfig(ConfigLocation::file(path), {});
	REQUIRE(present);
	CHECK(present->fromFile);
	CHECK(cidrs(present->config) == std::vector<std::string>{"198.51.100.0/24"});

	std::ofstream(path) << "nonMasqueradeCIDRs: [198.51.100.1/24]\n";
	auto bad = loadConfig(ConfigLocation::file(path), {});
	REQUIRE_FALSE(bad);
	CHECK_THAT(bad.error().message, Catch::StartsWith(path + ":1:"));

	// A directory is not a config (a ConfigMap volume path without the key's file name).
	auto directory = loadConfig(ConfigLocation::file(dir.path.string()), {});
	REQUIRE_FALSE(directory);
	CHECK_THAT(directory.error().message, Catch::Contains("is a directory"));
}

TEST_CASE("describeConfig gives one line with every key")
{
	const std::string line = describeConfig(defaultConfig({}));
	CHECK(line == "nonMasqueradeCIDRs=[10.0.0.0/8,172.16.0.0/12,192.168.0.0/16] cidrLimit=64 "
		      "masqLinkLocal=false masqLinkLocalIPv6=false resyncInterval=1m0s");
}

TEST_CASE("describeConfig names the operator's nonMasqueradeCIDRs and the discovered ranges apart")
{
	LoadedConfig loaded = parseOk("nonMasqueradeCIDRs: []\n"
				      "nonMasqueradeDiscovery:\n"
				      "  within: [198.18.0.0/15]\n"
				      "  routeProtocols: [bird]\n");
	Config &config = loaded.config;
	// As putDiscovered adds them: after the operator's entries, marked as discovered.
	for (int i = 0; i < 1000; i++) {
		Prefix prefix = parsePrefix(fmt::format("198.18.{}.{}/28", i * 32 / 256, i * 32 % 256)).value();
		prefix.origin = Origin{Origin::kDiscovered, static_cast<uint32_t>(i)};
		config.nonMasqueradeCIDRs.push_back(prefix);
	}
	const std::string line = describeConfig(config);
	INFO(line);
	CHECK_THAT(line, Catch::StartsWith("nonMasqueradeCIDRs=[] nonMasqueradeDiscovery={within=[198.18.0.0/15] "
					   "routeProtocols=[bird] holdDown=30s} discovered=[198.18.0.0/28,198.18.0.32/28,") &&
				 Catch::Contains(",... (1000 entries)] cidrLimit=64 "));

	config.nonMasqueradeCIDRs.insert(config.nonMasqueradeCIDRs.begin(), parsePrefix("192.0.2.0/24").value());
	config.nonMasqueradeCIDRs.resize(3);
	CHECK_THAT(describeConfig(config),
		   Catch::StartsWith("nonMasqueradeCIDRs=[192.0.2.0/24] nonMasqueradeDiscovery={") &&
			   Catch::Contains("} discovered=[198.18.0.0/28,198.18.0.32/28] cidrLimit=64 "));
}

TEST_CASE("masqueradeCIDRs and masqueradeSourceCIDRs: lists of CIDRs with their lines")
{
	const LoadedConfig loaded = parseOk("nonMasqueradeCIDRs: [10.0.0.0/8]\n"
					    "masqueradeCIDRs:\n"
					    "  - 10.1.0.0/16\n"
					    "  - 169.254.169.254/32\n"
					    "MasqueradeSourceCIDRs: [10.244.0.0/16]\n");
	const Config &c = loaded.config;
	CHECK(c.nonMasqueradeCIDRsGiven);
	REQUIRE(c.masqueradeCIDRs.size() == 2);
	CHECK(c.masqueradeCIDRs[0].toString() == "10.1.0.0/16");
	CHECK(c.masqueradeCIDRs[1].toString() == "169.254.169.254/32");
	CHECK(c.masqueradeCIDRs[1].origin == Origin{0, 4});
	REQUIRE(c.masqueradeSourceCIDRs.size() == 1);
	CHECK(c.masqueradeSourceCIDRs[0].toString() == "10.244.0.0/16");
	CHECK(c.masqueradeSourceCIDRs[0].origin == Origin{0, 5});
	CHECK(c.nonMasqueradeCIDRs[0].origin == Origin{0, 1});
	CHECK(c.files == std::vector<std::string>{kSource});
	// Keys match case-insensitively, with the usual warning.
	REQUIRE(loaded.warnings.size() == 1);
	CHECK_THAT(loaded.warnings[0], Catch::Contains("\"masqueradeSourceCIDRs\""));

	// Without the keys: empty lists, built-in defaults that say so.
	const Config defaults = parseOk("masqLinkLocal: true\n").config;
	CHECK(defaults.masqueradeCIDRs.empty());
	CHECK(defaults.masqueradeSourceCIDRs.empty());
	CHECK_FALSE(defaults.nonMasqueradeCIDRsGiven);
	CHECK(defaults.nonMasqueradeCIDRs[0].origin.builtIn());
	// An explicit null or [] is an empty list.
	CHECK(parseOk("masqueradeCIDRs: null\nmasqueradeSourceCIDRs: []\n").config.masqueradeCIDRs.empty());
	CHECK(parseOk("nonMasqueradeCIDRs: null\n").config.nonMasqueradeCIDRsGiven);
}

TEST_CASE("the new lists are validated exactly as nonMasqueradeCIDRs, and each message names them")
{
	for (const std::string key : {"masqueradeCIDRs", "masqueradeSourceCIDRs"}) {
		INFO(key);
		CHECK_THAT(parseError(key + ":\n  - 10.0.0.0/8\n  - abcdefg\n"),
			   Catch::StartsWith(kSource + ":3:5: " + key + "[1]: ") &&
				   Catch::Contains("\"abcdefg\" could not be parsed"));
		CHECK_THAT(parseError(key + ": [\"10.0.0.1/8\"]\n"),
			   Catch::StartsWith(kSource + ":1:") && Catch::Contains(key + "[0]") &&
				   Catch::Contains("\"10.0.0.1/8\"") && Catch::Contains("host bits are set") &&
				   Catch::Contains("Write \"10.0.0.0/8\""));
		CHECK_THAT(parseError(key + ": [10.0.0.0/8, \"2001:db8::/32\"]\n"),
			   Catch::Contains(key + "[1]") && Catch::Contains("2001:db8::/32") &&
				   Catch::Contains("--enable-ipv6"));
		CHECK(parseOk(key + ": [\"2001:db8::/32\"]\n", {.nomasqAllReservedRanges = false, .enableIpv6 = true}).warnings.empty());
		CHECK_THAT(parseError(key + ": 10.0.0.0/8\n"),
			   Catch::Contains(key) && Catch::Contains("expected a list"));
		CHECK_THAT(parseError(key + ": [[10.0.0.0/8]]\n"),
			   Catch::Contains(key + "[0]") && Catch::Contains("got a list"));
		CHECK_THAT(parseError("a: &list [10.0.0.0/8]\n" + key + ": *list\n"),
			   Catch::Contains(key) && Catch::Contains("alias of a list"));
		CHECK_THAT(parseError(key + ": [10.0.0.0/8]\n" + key + ": [10.0.0.0/8]\n"),
			   Catch::Contains("duplicate key"));
	}
}

TEST_CASE("cidrLimit bounds each list separately")
{
	// Three entries in each list, at a limit of 3: fine (6 in all).
	const std::string three = "[10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16]";
	const LoadedConfig ok = parseOk("cidrLimit: 3\nnonMasqueradeCIDRs: " + three +
					"\nmasqueradeCIDRs: [10.1.0.0/16, 10.2.0.0/16, 10.3.0.0/16]\n"
					"masqueradeSourceCIDRs: " + three + "\n");
	CHECK(ok.config.masqueradeCIDRs.size() == 3);
	// Four in one: refused, naming that list, whether cidrLimit comes before or after it.
	const std::string four = "[10.1.0.0/16, 10.2.0.0/16, 10.3.0.0/16, 10.4.0.0/16]";
	CHECK_THAT(parseError("cidrLimit: 3\nmasqueradeCIDRs: " + four + "\n"),
		   Catch::StartsWith(kSource + ":2:") && Catch::Contains("masqueradeCIDRs[3]") &&
			   Catch::Contains("cidrLimit (3)") && Catch::Contains("raise cidrLimit"));
	CHECK_THAT(parseError("masqueradeSourceCIDRs: " + four + "\ncidrLimit: 3\n"),
		   Catch::Contains("masqueradeSourceCIDRs: 4 entries") && Catch::Contains("cidrLimit (3)"));
	CHECK_THAT(parseError("nonMasqueradeCIDRs: " + four + "\ncidrLimit: 3\n"),
		   Catch::Contains("nonMasqueradeCIDRs: 4 entries") &&
			   Catch::Contains("link-local is not counted"));
}

TEST_CASE("describeConfig names the new lists only when they are used")
{
	Config config = defaultConfig({});
	config.masqueradeCIDRs.push_back(parsePrefix("10.1.0.0/16").value());
	config.masqueradeSourceCIDRs.push_back(parsePrefix("10.244.0.0/16").value());
	CHECK(describeConfig(config) ==
	      "nonMasqueradeCIDRs=[10.0.0.0/8,172.16.0.0/12,192.168.0.0/16] masqueradeCIDRs=[10.1.0.0/16] "
	      "masqueradeSourceCIDRs=[10.244.0.0/16] cidrLimit=64 masqLinkLocal=false "
	      "masqLinkLocalIPv6=false resyncInterval=1m0s");
}
