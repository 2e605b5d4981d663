// SPDX-License-Identifier: Apache-2.0
// The egress keys: outputAddress(IPv6) in its three forms and the interface lists, parsed,
// validated, merged and mapped into the ruleset.
#include <catch2/catch.hpp>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_dir.h"
#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/nft/nft_text.h"
#include "../common/rule_texts.h"
#include "ip-masq-agent/config/policy.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "config_entries.h"

using namespace ipmasq;

namespace {

const std::string &kSource = test::kConfigFile;
const ConfigFlags kIpv6{false, true};

using test::parseError;
using test::parseOk;

std::vector<std::string> names(const std::vector<InterfacePattern> &patterns)
{
	std::vector<std::string> out;
	for (const InterfacePattern &pattern : patterns)
		out.push_back(pattern.toString());
	return out;
}

// The rules of the agent's chain, as nft lists them.
std::vector<std::string> masqChainRules(const Ruleset &ruleset)
{
	return test::ruleTexts(ruleset, ruleset.chains.back().name);
}

} // namespace

TEST_CASE("outputAddress: an address, a range, a subnet; the wrong family or order is refused")
{
	auto address = parseOutputAddress("203.0.113.7");
	REQUIRE(address);
	CHECK(address->form == OutputAddress::Form::address);
	CHECK(address->toString() == "203.0.113.7");

	auto range = parseOutputAddress("203.0.113.7-203.0.113.9");
	REQUIRE(range);
	CHECK(range->form == OutputAddress::Form::range);
	CHECK(range->range.last.toString() == "203.0.113.9");
	// A range of one address is that address.
	CHECK(parseOutputAddress("203.0.113.7-203.0.113.7")->form == OutputAddress::Form::address);

	auto subnet = parseOutputAddress("2001:db8:1::/64");
	REQUIRE(subnet);
	CHECK(subnet->form == OutputAddress::Form::subnet);
	CHECK(subnet->family() == Family::ipv6);
	CHECK(subnet->toString() == "2001:db8:1::/64");

	CHECK_THAT(parseOutputAddress("203.0.113.9-203.0.113.7").error().message,
		   Catch::Contains("ends (203.0.113.7) before it starts (203.0.113.9)"));
	CHECK_THAT(parseOutputAddress("203.0.113.7-2001:db8::1").error().message,
		   Catch::Contains("two ends must be of one family"));
	CHECK_THAT(parseOutputAddress("203.0.113.7/24").error().message, Catch::Contains("host bits"));
	CHECK_FALSE(parseOutputAddress("eth0"));
	CHECK_FALSE(parseOutputAddress(""));

	// iptables' --to-source syntax, as upstream PR #103's fork passed it on: the ports
	// belong to --to-ports here.
	for (const char *withPorts : {"203.0.113.7:1024-65535", "203.0.113.7-203.0.113.9:1024",
				      "[2001:db8::7]:1024"})
		CHECK_THAT(parseOutputAddress(withPorts).error().message,
			   Catch::Contains("ports are not part of it") && Catch::Contains("--to-ports"));
	// An IPv6 address with an IPv4 tail is no port.
	CHECK(parseOutputAddress("::ffff:203.0.113.7"));
}

TEST_CASE("outputAddress in the config: file, line, key and value in every refusal")
{
	const LoadedConfig ok = parseOk("outputAddress: 203.0.113.7\n"
					"outputAddressIPv6: \"2001:db8::7-2001:db8::9\"\n",
					kIpv6);
	REQUIRE(ok.config.outputAddress);
	CHECK(ok.config.outputAddress->toString() == "203.0.113.7");
	CHECK(ok.config.outputAddress->origin.line == 1);
	REQUIRE(ok.config.outputAddressIPv6);
	CHECK(ok.config.outputAddressIPv6->form == OutputAddress::Form::range);

	CHECK(parseError("outputAddress: 2001:db8::7\n", kIpv6) ==
	      kSource + ":1:16: outputAddress: \"2001:db8::7\" is an IPv6 address; outputAddress "
			"takes IPv4 only: write it in outputAddressIPv6");
	CHECK(parseError("outputAddressIPv6: 203.0.113.0/24\n", kIpv6) ==
	      kSource + ":1:20: outputAddressIPv6: \"203.0.113.0/24\" is an IPv4 CIDR; "
			"outputAddressIPv6 takes IPv6 only: write it in outputAddress");
	CHECK(parseError("outputAddressIPv6: 2001:db8::7\n") ==
	      kSource + ":1:20: outputAddressIPv6: IPv6 is not enabled: start the agent with "
			"--enable-ipv6, or remove this key");
	CHECK_THAT(parseError("\noutputAddress: 203.0.113.9-203.0.113.7\n"),
		   Catch::StartsWith(kSource + ":2:16: outputAddress: \"203.0.113.9-203.0.113.7\"") &&
			   Catch::Contains("write the lower address first"));
	CHECK_THAT(parseError("outputAddress: [203.0.113.7]\n"),
		   Catch::StartsWith(kSource + ":1:16: outputAddress: expected an IPv4 address"));
	// null: as if it were not there.
	CHECK_FALSE(parseOk("outputAddress: null\n").config.outputAddress);
}

TEST_CASE("interface names: exact, nft's and iptables' wildcards; a list or one name")
{
	const LoadedConfig ok = parseOk("outputInterface: [eth0, \"vlan*\", \"ens+\"]\n"
					"nonMasqueradeInterfaces: wg0\n");
	CHECK(names(ok.config.outputInterfaces) == std::vector<std::string>{"eth0", "vlan*", "ens*"});
	CHECK(names(ok.config.nonMasqueradeInterfaces) == std::vector<std::string>{"wg0"});
	CHECK(ok.config.outputInterfaces[1].origin.line == 1);

	const LoadedConfig block = parseOk("nonMasqueradeInterfaces:\n  - tun0\n  - \"flannel.*\"\n");
	CHECK(names(block.config.nonMasqueradeInterfaces) == std::vector<std::string>{"tun0", "flannel.*"});
	CHECK(block.config.nonMasqueradeInterfaces[1].origin.line == 3);
	CHECK(parseOk("outputInterface: null\n").config.outputInterfaces.empty());
	CHECK(parseOk("outputInterface: []\n").config.outputInterfaces.empty());

	CHECK(parseError("outputInterface: [eth0, \"*\"]\n") ==
	      kSource + ":1:25: outputInterface[1]: \"*\" is not an interface name: a wildcard alone "
			"matches every interface; leave the key out instead");
	CHECK_THAT(parseError("nonMasqueradeInterfaces: [averyveryverylongname]\n"),
		   Catch::Contains("nonMasqueradeInterfaces[0]: \"averyveryverylongname\" is not an "
				   "interface name: 21 bytes, but Linux names have at most 15"));
	CHECK_THAT(parseError("outputInterface: [\"e*th\"]\n"),
		   Catch::Contains("may only end a name"));
	CHECK_THAT(parseError("outputInterface: [\"eth 0\"]\n"), Catch::Contains("no spaces"));
	CHECK_THAT(parseError("outputInterface: [\"a/b\"]\n"), Catch::Contains("\"/\""));
	CHECK_THAT(parseError("outputInterface: [..]\n"), Catch::Contains("Linux refuses it"));
	CHECK_THAT(parseError("outputInterface: [[eth0]]\n"),
		   Catch::Contains("outputInterface[0]: expected an interface name"));
	CHECK_THAT(parseError("outputInterface: {a: b}\n"),
		   Catch::Contains("outputInterface: expected a list of interface names"));

	std::string many = "outputInterface: [";
	for (size_t i = 0; i <= kMaxInterfacePatterns; i++)
		many.append("e").append(std::to_string(i)).append(","); // not "e" + string: GCC bug 105329
	CHECK_THAT(parseError(many + "]\n"), Catch::Contains("more than 1024 names"));
}

TEST_CASE("interface patterns are ranges of 16-byte keys, and print back as themselves")
{
	const auto pattern = [](const char *text) { return parseInterfacePattern(text).value(); };
	const AddressRange eth = interfaceKeyRange(pattern("eth*"));
	const AddressRange eth0 = interfaceKeyRange(pattern("eth0"));
	CHECK(eth.first <= eth0.first);
	CHECK(eth0.last <= eth.last);
	CHECK(eth0.first == eth0.last);
	// "eth" itself is in "eth*"; "eti" is the first key after it.
	CHECK(interfaceKeyRange(pattern("eth")).first == eth.first);
	CHECK(interfaceKeyRange(pattern("eti")).first.value == eth.last.value + 1);

	// Adjacent patterns merge into one range, which splits back into them.
	const IntervalSet merged = IntervalSet::fromRanges(
		Family::ipv6, {eth, interfaceKeyRange(pattern("eti")), interfaceKeyRange(pattern("wg0"))});
	REQUIRE(merged.size() == 2);
	CHECK(names(interfacePatternsOf(merged.ranges()[0])) == std::vector<std::string>{"eth*", "eti"});
	CHECK(names(interfacePatternsOf(merged.ranges()[1])) == std::vector<std::string>{"wg0"});
	// The longest names and the shortest wildcard.
	CHECK(names(interfacePatternsOf(interfaceKeyRange(pattern("abcdefghijklmno")))) ==
	      std::vector<std::string>{"abcdefghijklmno"});
	CHECK(names(interfacePatternsOf(interfaceKeyRange(pattern("abcdefghijklmn*")))) ==
	      std::vector<std::string>{"abcdefghijklmn*"});
	CHECK(names(interfacePatternsOf(interfaceKeyRange(pattern("a*")))) ==
	      std::vector<std::string>{"a*"});
}

TEST_CASE("--config-dir: interface lists are unions, outputAddress must agree")
{
	const auto part = [](const std::string &file, const std::string &text) {
		auto loaded = parseConfig(text, file, kIpv6);
		REQUIRE(loaded);
		return *loaded;
	};
	auto merged = mergeConfigs({part("/d/ip-masq-a", "outputInterface: [eth0]\n"
							 "outputAddress: 203.0.113.7\n"),
				    part("/d/ip-masq-b", "outputInterface: [eth0, \"vlan*\"]\n"
							 "outputAddress: 203.0.113.7\n"
							 "nonMasqueradeInterfaces: [wg0]\n")},
				   kIpv6);
	REQUIRE(merged);
	CHECK(names(merged->config.outputInterfaces) == std::vector<std::string>{"eth0", "vlan*"});
	CHECK(names(merged->config.nonMasqueradeInterfaces) == std::vector<std::string>{"wg0"});
	REQUIRE(merged->config.outputAddress);
	CHECK(describeOrigin(merged->config, merged->config.outputAddress->origin) == "/d/ip-masq-a:2");

	auto conflict = mergeConfigs({part("/d/ip-masq-a", "\noutputAddress: 203.0.113.7\n"),
				      part("/d/ip-masq-b", "outputAddress: 203.0.113.0/24\n")},
				     kIpv6);
	REQUIRE_FALSE(conflict);
	CHECK(conflict.error().message ==
	      "/d/ip-masq-b:1: outputAddress: 203.0.113.0/24 contradicts 203.0.113.7 at "
	      "/d/ip-masq-a:2: the files must agree on it, or only one of them may set it");
}

TEST_CASE("the ruleset: without the egress keys, nothing changes")
{
	const Config plain = defaultConfig({});
	Config same = plain;
	same.outputInterfaces.clear();
	CHECK(buildRuleset(plain, {}) == buildRuleset(same, {}));
	CHECK(masqChainRules(buildRuleset(plain, {})) ==
	      std::vector<std::string>{"ip daddr @nomasq-v4 return", "masquerade fully-random"});
}

TEST_CASE("the ruleset: SNAT per family, masquerade for the rest, ports spread as for masquerade")
{
	RulesetOptions options;
	options.enableIpv6 = true;
	options.connectionCounters = false; // counters split the rules per family (ruleset_test)
	Config config = defaultConfig({});
	config.outputAddress = parseOutputAddress("203.0.113.7").value();
	CHECK(masqChainRules(buildRuleset(config, options)) ==
	      std::vector<std::string>{"ip daddr @nomasq-v4 return", "ip6 daddr @nomasq-v6 return",
				       "snat ip to 203.0.113.7 fully-random", "masquerade fully-random"});

	config.outputAddressIPv6 = parseOutputAddress("2001:db8::7-2001:db8::9").value();
	options.toPorts = {PortRange{1024, 29999}, PortRange{32768, 65535}};
	options.randomFully = false;
	CHECK(masqChainRules(buildRuleset(config, options)) ==
	      std::vector<std::string>{
		      "ip daddr @nomasq-v4 return", "ip6 daddr @nomasq-v6 return",
		      "meta l4proto { tcp, udp, sctp } numgen random mod 61744 < 28976 snat ip to "
		      "203.0.113.7:1024-29999",
		      "meta l4proto { tcp, udp, sctp } snat ip to 203.0.113.7:32768-65535",
		      // The rest (ICMP, say) without ports, as masquerade's cascade ends.
		      "snat ip to 203.0.113.7",
		      "meta l4proto { tcp, udp, sctp } numgen random mod 61744 < 28976 snat ip6 to "
		      "[2001:db8::7]-[2001:db8::9]:1024-29999",
		      "meta l4proto { tcp, udp, sctp } snat ip6 to [2001:db8::7]-[2001:db8::9]:32768-65535",
		      "snat ip6 to 2001:db8::7-2001:db8::9"});
}

TEST_CASE("the ruleset: a subnet SNATs to this node's address in it, or masquerades without one")
{
	Config config = defaultConfig({});
	config.outputAddress = parseOutputAddress("203.0.113.0/24").value();
	const Ruleset without = buildRuleset(config, {});
	CHECK(masqChainRules(without) ==
	      std::vector<std::string>{"ip daddr @nomasq-v4 return", "masquerade fully-random"});
	SubnetAddresses subnet;
	subnet.ipv4 = parseAddress("203.0.113.5").value();
	const Ruleset with = buildRuleset(config, {}, subnet);
	CHECK(masqChainRules(with) ==
	      std::vector<std::string>{"ip daddr @nomasq-v4 return", "snat ip to 203.0.113.5 fully-random"});
	CHECK(with.chains.back().rules.back().comment ==
	      "IPv4 outbound traffic is SNATed to this node's address in 203.0.113.0/24 (outputAddress)");
}

TEST_CASE("the ruleset: interface sets, matched once per packet per key")
{
	Config config = defaultConfig({});
	config.outputInterfaces = {parseInterfacePattern("eth*").value(),
				   parseInterfacePattern("eth0").value(),
				   parseInterfacePattern("ens3").value()};
	config.nonMasqueradeInterfaces = {parseInterfacePattern("wg0").value()};
	const Ruleset ruleset = buildRuleset(config, {});
	const AddressSet *out = ruleset.findSet(kOutputInterfaceSetName);
	REQUIRE(out);
	CHECK(out->interfaceNames);
	REQUIRE(ruleset.findSet(kNonMasqueradeInterfaceSetName));
	CHECK(test::ruleTexts(ruleset, ruleset.chains.front().name).front() ==
	      "oifname @masq-ifaces meta nfproto ipv4 fib daddr type != local jump IP-MASQ-AGENT");
	CHECK(masqChainRules(ruleset).front() == "oifname @nomasq-ifaces return");
	const auto table = renderTable(ruleset);
	REQUIRE(table);
	const std::string &text = *table;
	// "eth0" is inside "eth*": the set holds what nft would accept, sorted.
	CHECK_THAT(text, Catch::Contains("type ifname") &&
				 Catch::Contains("elements = { \"ens3\",\n\t\t\t     \"eth*\" }"));
}
