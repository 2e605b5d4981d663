// SPDX-License-Identifier: Apache-2.0
// The config section nonMasqueradeDiscovery: its keys, defaults, errors and bounds, and how
// it merges under --config-dir.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <string>

#include "config_entries.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_dir.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/model/route_protocols.h"

using namespace ipmasq;
using namespace std::chrono_literals;
using test::parseError;
using test::parseOk;

namespace {

const std::string kIssueExample = R"(nonMasqueradeCIDRs: [10.0.0.0/8]
nonMasqueradeDiscovery:
  within: [10.244.0.0/16]
  routeProtocols: [bird]
  routeInterfaces: ["flannel.1"]
  flannelSubnetEnv: /run/flannel/subnet.env
  cniConfDir: /etc/cni/net.d
  holdDown: 30s
)";

const NonMasqueradeDiscovery &sectionOf(const LoadedConfig &loaded)
{
	REQUIRE(loaded.config.nonMasqueradeDiscovery);
	return *loaded.config.nonMasqueradeDiscovery;
}

std::string withSection(const std::string &keys)
{
	return "nonMasqueradeDiscovery:\n  within: [10.244.0.0/16]\n" + keys;
}

} // namespace

TEST_CASE("discovery: the issue's section, every key")
{
	const LoadedConfig loaded = parseOk(kIssueExample);
	const NonMasqueradeDiscovery &d = sectionOf(loaded);
	REQUIRE(d.within.size() == 1);
	CHECK(d.within[0].toString() == "10.244.0.0/16");
	CHECK(d.within[0].origin == Origin{0, 3});
	CHECK(d.routeProtocols == std::vector<RouteProtocol>{RouteProtocol{12}});
	REQUIRE(d.routeInterfaces.size() == 1);
	CHECK(d.routeInterfaces[0].toString() == "flannel.1");
	REQUIRE(d.flannelSubnetEnv);
	CHECK(d.flannelSubnetEnv->path == "/run/flannel/subnet.env");
	CHECK(d.flannelSubnetEnv->origin == Origin{0, 6});
	REQUIRE(d.cniConfDir);
	CHECK(d.cniConfDir->path == "/etc/cni/net.d");
	CHECK(d.holdDown == 30s);
	CHECK(d.written.origin == Origin{0, 3});
	CHECK(loaded.holdDownGiven);
	CHECK(loaded.warnings.empty());
	// The operator's list is unchanged: discovered ranges are added when running.
	REQUIRE(loaded.config.nonMasqueradeCIDRs.size() == 1);

	// The same in JSON, read by yaml-cpp alone (the fast scanner does not take nesting).
	const LoadedConfig json = parseOk(
		R"({"nonMasqueradeDiscovery": {"within": ["10.244.0.0/16"], "routeProtocols": ["bird"],)"
		R"( "routeInterfaces": ["flannel.1"], "flannelSubnetEnv": "/run/flannel/subnet.env",)"
		R"( "cniConfDir": "/etc/cni/net.d", "holdDown": "30s"}, "nonMasqueradeCIDRs": ["10.0.0.0/8"]})");
	CHECK(json.config == loaded.config);
	auto reference = parseConfigWithYamlCpp(kIssueExample, test::kConfigFile, {});
	REQUIRE(reference);
	CHECK(reference->config == loaded.config);
}

TEST_CASE("discovery: without the section nothing changes; null is no section")
{
	CHECK_FALSE(parseOk("nonMasqueradeCIDRs: [10.0.0.0/8]\n").config.nonMasqueradeDiscovery);
	const LoadedConfig null = parseOk("nonMasqueradeDiscovery:\nnonMasqueradeCIDRs: [10.0.0.0/8]\n");
	CHECK_FALSE(null.config.nonMasqueradeDiscovery);
	CHECK(null.config == parseOk("nonMasqueradeCIDRs: [10.0.0.0/8]\n").config);
	// The section is part of what the config means.
	CHECK_FALSE(parseOk(kIssueExample).config == parseOk("nonMasqueradeCIDRs: [10.0.0.0/8]\n").config);
}

TEST_CASE("discovery: holdDown defaults to 30s, takes 0s to 1h, and is a duration with a unit")
{
	const LoadedConfig plain = parseOk(withSection("  routeProtocols: [bird]\n"));
	CHECK(sectionOf(plain).holdDown == 30s);
	CHECK_FALSE(plain.holdDownGiven);
	CHECK(sectionOf(parseOk(withSection("  holdDown: 0s\n"))).holdDown == 0s);
	CHECK(sectionOf(parseOk(withSection("  holdDown: 1h\n"))).holdDown == 1h);
	CHECK(sectionOf(parseOk(withSection("  holdDown: 2m30s\n"))).holdDown == 150s);
	CHECK(sectionOf(parseOk(withSection("  holdDown: null\n"))).holdDown == 30s);

	CHECK(parseError(withSection("  holdDown: 2h\n")) ==
	      "/etc/config/ip-masq-agent:3:13: nonMasqueradeDiscovery.holdDown: \"2h\" is out of range: "
	      "use a duration from \"0s\" (a withdrawn range leaves at once) to \"1h0m0s\"");
	CHECK_THAT(parseError(withSection("  holdDown: -1s\n")), Catch::Contains("is out of range"));
	CHECK(parseError(withSection("  holdDown: 30\n")) ==
	      "/etc/config/ip-masq-agent:3:13: nonMasqueradeDiscovery.holdDown: \"30\" is a bare number; "
	      "like upstream, the agent needs a duration with a unit: write \"30s\" for 30 seconds");
	CHECK_THAT(parseError(withSection("  holdDown: soon\n")), Catch::Contains("is not a duration"));
	CHECK_THAT(parseError(withSection("  holdDown: [1s]\n")),
		   Catch::Contains("nonMasqueradeDiscovery.holdDown: expected a duration string"));
}

TEST_CASE("discovery: within is required, and the error names file, key and fix")
{
	const std::string message =
		"/etc/config/ip-masq-agent:1:1: nonMasqueradeDiscovery: within is required: list the "
		"CIDRs of the pod network, such as within: [\"10.244.0.0/16\"]; a discovered prefix "
		"outside them is ignored (a BGP peer may announce service or load-balancer prefixes)";
	CHECK(parseError("nonMasqueradeDiscovery:\n  routeProtocols: [bird]\n") == message);
	CHECK(parseError("nonMasqueradeDiscovery:\n  within: []\n  routeProtocols: [bird]\n") == message);
	CHECK(parseError("nonMasqueradeDiscovery:\n  within:\n  routeProtocols: [bird]\n") == message);
	CHECK(parseError("nonMasqueradeDiscovery: {}\n") == message);
	CHECK(parseError("cidrLimit: 5\nnonMasqueradeDiscovery: {routeProtocols: [bird]}\n") ==
	      "/etc/config/ip-masq-agent:2:1: nonMasqueradeDiscovery: within is required: list the "
	      "CIDRs of the pod network, such as within: [\"10.244.0.0/16\"]; a discovered prefix "
	      "outside them is ignored (a BGP peer may announce service or load-balancer prefixes)");
	// A single CIDR is not a list here, as for nonMasqueradeCIDRs.
	CHECK_THAT(parseError("nonMasqueradeDiscovery:\n  within: 10.244.0.0/16\n"),
		   Catch::Contains("nonMasqueradeDiscovery.within: expected a list of CIDR strings"));
}

TEST_CASE("discovery: within entries are CIDRs, IPv6 only with --enable-ipv6, at most 1024")
{
	CHECK(parseError("nonMasqueradeDiscovery:\n  within: [10.244.0.1/16]\n") ==
	      "/etc/config/ip-masq-agent:2:12: nonMasqueradeDiscovery.within[0]: CIDR \"10.244.0.1/16\" "
	      "is not aligned to a CIDR block: host bits are set (the network is 10.244.0.0/16). Write "
	      "\"10.244.0.0/16\" if you meant the whole network");
	CHECK(parseError("nonMasqueradeDiscovery:\n  within: [10.244.0.0/16, \"fd00::/48\"]\n") ==
	      "/etc/config/ip-masq-agent:2:27: nonMasqueradeDiscovery.within[1]: \"fd00::/48\" is an "
	      "IPv6 CIDR but IPv6 is not enabled: start the agent with --enable-ipv6, or remove this "
	      "entry");
	const LoadedConfig v6 = parseOk("nonMasqueradeDiscovery:\n  within: [10.244.0.0/16, \"fd00::/48\"]\n",
					{.nomasqAllReservedRanges = false, .enableIpv6 = true});
	CHECK(sectionOf(v6).within.size() == 2);

	std::string many = "nonMasqueradeDiscovery:\n  within:\n";
	for (int i = 0; i <= 1024; i++)
		many += fmt::format("  - 10.{}.{}.0/24\n", i / 256, i % 256);
	CHECK(parseError(many) ==
	      "/etc/config/ip-masq-agent:1027:5: nonMasqueradeDiscovery.within[1024]: more than 1024 "
	      "entries, the most this key takes: merge them into fewer");
	CHECK_THAT(parseError("nonMasqueradeDiscovery:\n  within: [[10.0.0.0/8]]\n"),
		   Catch::Contains("nonMasqueradeDiscovery.within[0]: expected a list of CIDR strings"));
}

TEST_CASE("discovery: routeProtocols takes rt_protos names and numbers; one name is a list of one")
{
	const LoadedConfig loaded =
		parseOk(withSection("  routeProtocols: [bird, bgp, \"static\", 77, \"0\", kernel]\n"));
	std::vector<int> numbers;
	for (const RouteProtocol &p : sectionOf(loaded).routeProtocols)
		numbers.push_back(p.number);
	CHECK(numbers == std::vector<int>{12, 186, 4, 77, 0, 2});
	CHECK(sectionOf(parseOk(withSection("  routeProtocols: zebra\n"))).routeProtocols ==
	      std::vector<RouteProtocol>{RouteProtocol{11}});
	CHECK(sectionOf(parseOk(withSection("  routeProtocols:\n"))).routeProtocols.empty());

	CHECK(parseError(withSection("  routeProtocols: [bird, BIRD]\n")) ==
	      "/etc/config/ip-masq-agent:3:26: nonMasqueradeDiscovery.routeProtocols[1]: \"BIRD\" is "
	      "not a route protocol: write a name that ip-route prints (bird, bgp, static, kernel, "
	      "boot, zebra, ...) or a number from 0 to 255");
	CHECK_THAT(parseError(withSection("  routeProtocols: [256]\n")),
		   Catch::Contains("\"256\" is not a route protocol"));
	CHECK_THAT(parseError(withSection("  routeProtocols: [-1]\n")),
		   Catch::Contains("\"-1\" is not a route protocol"));
	CHECK_THAT(parseError(withSection("  routeProtocols: [{a: b}]\n")),
		   Catch::Contains("routeProtocols[0]: expected a list of route protocols"));
}

TEST_CASE("discovery: routeInterfaces are names or prefixes with a trailing *")
{
	const LoadedConfig loaded = parseOk(withSection("  routeInterfaces: [\"flannel.1\", \"cali*\", tunl0]\n"));
	const auto &names = sectionOf(loaded).routeInterfaces;
	REQUIRE(names.size() == 3);
	CHECK(names[1].wildcard);
	CHECK(names[1].name == "cali");
	CHECK(names[2].origin == Origin{0, 3});
	CHECK(sectionOf(parseOk(withSection("  routeInterfaces: tunl0\n"))).routeInterfaces.size() == 1);
	CHECK_THAT(parseError(withSection("  routeInterfaces: [\"a/b\"]\n")),
		   Catch::StartsWith("/etc/config/ip-masq-agent:3:21: nonMasqueradeDiscovery.routeInterfaces[0]: "));
	CHECK_THAT(parseError(withSection("  routeInterfaces: [\"*\"]\n")),
		   Catch::Contains("routeInterfaces[0]"));
}

TEST_CASE("discovery: the paths are absolute")
{
	CHECK(parseError(withSection("  flannelSubnetEnv: run/flannel/subnet.env\n")) ==
	      "/etc/config/ip-masq-agent:3:21: nonMasqueradeDiscovery.flannelSubnetEnv: "
	      "\"run/flannel/subnet.env\" is not an absolute path: write an absolute path such as "
	      "\"/run/flannel/subnet.env\"");
	CHECK(parseError(withSection("  cniConfDir: \"\"\n")) ==
	      "/etc/config/ip-masq-agent:3:15: nonMasqueradeDiscovery.cniConfDir: \"\" is empty: write "
	      "an absolute path such as \"/etc/cni/net.d\"");
	CHECK_THAT(parseError(withSection("  cniConfDir: \"/etc/cni/\\tnet.d\"\n")),
		   Catch::Contains("holds a control character"));
	CHECK_THAT(parseError(withSection("  cniConfDir: [/etc]\n")),
		   Catch::Contains("cniConfDir: expected an absolute path"));
	CHECK_THAT(parseError(withSection("  cniConfDir: /" + std::string(4096, 'a') + "\n")),
		   Catch::Contains("is longer than 4096 bytes"));
	const LoadedConfig quoted = parseOk(withSection("  cniConfDir: \"/etc/cni dir/net.d\"\n"));
	CHECK(sectionOf(quoted).cniConfDir->path == "/etc/cni dir/net.d");
	CHECK_FALSE(sectionOf(parseOk(withSection("  cniConfDir:\n"))).cniConfDir);
}

TEST_CASE("discovery: unknown and repeated keys in the section are errors; spelling is forgiven")
{
	CHECK(parseError(withSection("  routeProtocol: [bird]\n")) ==
	      "/etc/config/ip-masq-agent:3:3: nonMasqueradeDiscovery: unknown key \"routeProtocol\": did "
	      "you mean \"routeProtocols\"? (the section's keys: within, routeProtocols, routeInterfaces, flannelSubnetEnv, cniConfDir, "
	      "holdDown): fix its spelling");
	CHECK(parseError(withSection("  holdDown: 1s\n  HoldDown: 2s\n")) ==
	      "/etc/config/ip-masq-agent:4:3: nonMasqueradeDiscovery: holdDown: duplicate key: it is "
	      "already set at line 3, column 3 (as \"holdDown\"); keys match case-insensitively: keep "
	      "one of them");
	const LoadedConfig spelled = parseOk(withSection("  HOLDDOWN: 5s\n  routeProtocols: [bird]\n"));
	CHECK(sectionOf(spelled).holdDown == 5s);
	REQUIRE(spelled.warnings.size() == 1);
	CHECK(spelled.warnings[0] == "/etc/config/ip-masq-agent:3:3: nonMasqueradeDiscovery: HOLDDOWN: read "
				     "as \"holdDown\"; please spell it exactly so");
	CHECK_THAT(parseError(kIssueExample + "nonMasqueradeDiscovery: {within: [10.0.0.0/8]}\n"),
		   Catch::Contains("nonMasqueradeDiscovery: duplicate key"));
}

TEST_CASE("discovery: the section is a mapping")
{
	CHECK(parseError("nonMasqueradeDiscovery: yes\n") ==
	      "/etc/config/ip-masq-agent:1:25: nonMasqueradeDiscovery: expected a mapping such as "
	      "{within: [\"10.244.0.0/16\"], routeProtocols: [bird]}, got a scalar \"yes\"");
	CHECK_THAT(parseError("nonMasqueradeDiscovery: [within]\n"),
		   Catch::Contains("expected a mapping such as"));
	CHECK_THAT(parseError("x: &a {within: [10.0.0.0/8]}\nnonMasqueradeDiscovery: *a\n"),
		   Catch::Contains("*a is an alias of a mapping"));
	CHECK_THAT(parseError("nonMasqueradeDiscovery: {[a]: b}\n"), Catch::Contains("complex key"));
}

TEST_CASE("discovery: a section without a source is taken, with a warning")
{
	const LoadedConfig loaded = parseOk("nonMasqueradeDiscovery:\n  within: [10.244.0.0/16]\n");
	REQUIRE(loaded.warnings.size() == 1);
	CHECK(loaded.warnings[0] ==
	      "/etc/config/ip-masq-agent:1:1: nonMasqueradeDiscovery: names no source (routeProtocols, "
	      "routeInterfaces, flannelSubnetEnv, cniConfDir): nothing is discovered");
}

TEST_CASE("discovery: the log line of the config names the section")
{
	CHECK_THAT(describeConfig(parseOk(kIssueExample).config),
		   Catch::Contains("nonMasqueradeDiscovery={within=[10.244.0.0/16] routeProtocols=[bird] "
				   "routeInterfaces=[flannel.1] flannelSubnetEnv=/run/flannel/subnet.env "
				   "cniConfDir=/etc/cni/net.d holdDown=30s} "));
	CHECK_THAT(describeConfig(defaultConfig({})), !Catch::Contains("nonMasqueradeDiscovery"));
}

TEST_CASE("discovery: --config-dir merges the section like the other keys")
{
	const ConfigContent content{{
		{"/d/ip-masq-a", "nonMasqueradeDiscovery:\n  within: [10.244.0.0/16]\n"
				 "  routeProtocols: [bird]\n  holdDown: 10s\n"
				 "  flannelSubnetEnv: /run/flannel/subnet.env\n"},
		{"/d/ip-masq-b", "nonMasqueradeDiscovery:\n  within: [10.244.0.0/16, 10.96.0.0/12]\n"
				 "  routeProtocols: [bird, bgp]\n  routeInterfaces: [\"flannel.1\"]\n"
				 "  holdDown: 1m\n  flannelSubnetEnv: /run/flannel/subnet.env\n"},
		{"/d/ip-masq-c", "nonMasqueradeCIDRs: [10.0.0.0/8]\n"},
	}};
	auto loaded = loadConfigContent(content, {});
	INFO((loaded ? "" : loaded.error().message));
	REQUIRE(loaded);
	const NonMasqueradeDiscovery &d = sectionOf(*loaded);
	REQUIRE(d.within.size() == 2);
	CHECK(d.within[0].toString() == "10.244.0.0/16");
	CHECK(d.within[0].origin.file == 0);
	CHECK(d.within[1].toString() == "10.96.0.0/12");
	CHECK(d.within[1].origin.file == 1);
	CHECK(d.routeProtocols == std::vector<RouteProtocol>{RouteProtocol{12}, RouteProtocol{186}});
	CHECK(d.routeInterfaces.size() == 1);
	CHECK(d.holdDown == 1min); // the longest given
	CHECK(d.flannelSubnetEnv->path == "/run/flannel/subnet.env");

	// A file that gives no holdDown does not vote with the default.
	const ConfigContent shorter{{
		{"/d/ip-masq-a", "nonMasqueradeDiscovery: {within: [10.244.0.0/16], holdDown: 5s}\n"},
		{"/d/ip-masq-b", "nonMasqueradeDiscovery: {within: [10.244.0.0/16]}\n"},
	}};
	auto five = loadConfigContent(shorter, {});
	REQUIRE(five);
	CHECK(sectionOf(*five).holdDown == 5s);
}

TEST_CASE("discovery: --config-dir files may repeat a path but not contradict it; each names within")
{
	const ConfigContent contradiction{{
		{"/d/ip-masq-a", "nonMasqueradeDiscovery:\n  within: [10.244.0.0/16]\n  cniConfDir: /etc/cni/net.d\n"},
		{"/d/ip-masq-b", "nonMasqueradeDiscovery:\n  within: [10.244.0.0/16]\n  cniConfDir: /etc/cni/other\n"},
	}};
	auto loaded = loadConfigContent(contradiction, {});
	REQUIRE_FALSE(loaded);
	CHECK(loaded.error().message ==
	      "/d/ip-masq-b:3: nonMasqueradeDiscovery.cniConfDir: \"/etc/cni/other\" contradicts "
	      "\"/etc/cni/net.d\" at /d/ip-masq-a:3: the files must agree on it, or only one of them "
	      "may set it");

	const ConfigContent missing{{
		{"/d/ip-masq-a", "nonMasqueradeDiscovery:\n  within: [10.244.0.0/16]\n"},
		{"/d/ip-masq-b", "nonMasqueradeDiscovery:\n  routeProtocols: [bird]\n"},
	}};
	auto refused = loadConfigContent(missing, {});
	REQUIRE_FALSE(refused);
	CHECK_THAT(refused.error().message,
		   Catch::StartsWith("/d/ip-masq-b:1:1: nonMasqueradeDiscovery: within is required"));
}

TEST_CASE("route protocols: names both ways, numbers")
{
	CHECK(RouteProtocol{12}.toString() == "bird");
	CHECK(RouteProtocol{186}.toString() == "bgp");
	CHECK(RouteProtocol{77}.toString() == "77");
	CHECK(routeProtocolName(3) == std::optional<std::string_view>("boot"));
	CHECK_FALSE(routeProtocolName(5));
	for (unsigned n = 0; n < 256; n++) {
		auto parsed = parseRouteProtocol(RouteProtocol{static_cast<uint8_t>(n)}.toString());
		REQUIRE(parsed);
		CHECK(parsed->number == n);
	}
	CHECK_FALSE(parseRouteProtocol(""));
	CHECK_FALSE(parseRouteProtocol("0012"));
	CHECK_FALSE(parseRouteProtocol("012")); // octal to iproute2
	CHECK_FALSE(parseRouteProtocol("0x0c"));
	CHECK_FALSE(parseRouteProtocol("1a"));
}
