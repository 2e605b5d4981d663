// SPDX-License-Identifier: Apache-2.0
// Named configs shared by the golden renderer tests and the kernel integration tests.
#pragma once

#include <string>
#include <vector>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/cli/options.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

namespace ipmasq::test {

struct RulesetCase {
	std::string name;       // also the golden file's name: test/golden/<name>.nft
	std::string configText; // the config file's content ("" = all defaults)
	std::vector<std::string> flags;
	// This node's addresses in outputAddress subnets ("" = none), as the daemon finds them.
	std::string subnetAddressV4 = {};
	std::string subnetAddressV6 = {};
	// Whether adoption rebuilds it from the kernel's sets (rulesetFromKernel): not with a
	// snatGuard, whose limits and mode only its rules hold.
	bool adoptable = true;
};

inline const std::vector<RulesetCase> &rulesetCases()
{
	static const std::vector<RulesetCase> cases{
		{"defaults", "", {}},
		{"reserved-ranges", "", {"--nomasq-all-reserved-ranges"}},
		{"ipv6", "nonMasqueradeCIDRs: [10.0.0.0/8, \"2001:db8::/32\", \"fd00::/8\"]\n",
		 {"--enable-ipv6"}},
		{"masq-link-local", "nonMasqueradeCIDRs: [10.0.0.0/8]\nmasqLinkLocal: true\n"
				    "masqLinkLocalIPv6: true\n", {"--enable-ipv6=true"}},
		{"to-ports", "", {"--to-ports=1024-29999,32768-65535"}},
		{"to-ports-single", "", {"--to-ports", "8080", "--random-fully=false"}},
		{"no-random-fully", "", {"-random-fully=false"}},
		{"empty-list-custom-names", "nonMasqueradeCIDRs: []\nmasqLinkLocal: true\n",
		 {"--masq-chain=MY-MASQ", "--table=my-masq", "--priority=srcnat"}},
		{"edges", "nonMasqueradeCIDRs: [0.0.0.0/32, 255.255.255.255/32, 10.0.0.0/8, 11.0.0.0/8, "
			  "\"::/128\", \"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128\"]\n",
		 {"--enable-ipv6", "--priority=-100"}},
		{"everything", "", {"--enable-ipv6", "--priority", "0"}},
		{"all-addresses", "nonMasqueradeCIDRs: [0.0.0.0/0, \"::/0\"]\n", {"--enable-ipv6"}},
		// masqueradeCIDRs: exceptions resolved by the longest prefix (the example).
		{"masquerade-cidrs", "nonMasqueradeCIDRs: [10.0.0.0/8, 10.1.2.0/24]\n"
				     "masqueradeCIDRs: [10.1.0.0/16, 169.254.169.254/32]\n", {}},
		{"masquerade-cidrs-ipv6", "nonMasqueradeCIDRs: [10.0.0.0/8, \"2001:db8::/32\"]\n"
					  "masqueradeCIDRs: [\"2001:db8:1::/48\", \"fe80::/64\"]\n",
		 {"--enable-ipv6"}},
		// Exceptions equal to built-in entries (a default, link-local) win over them.
		{"masquerade-cidrs-builtin", "masqueradeCIDRs: [172.16.0.0/12, 169.254.0.0/16]\n", {}},
		{"masquerade-cidrs-edges", "nonMasqueradeCIDRs: [0.0.0.0/0, \"::/0\"]\n"
					   "masqueradeCIDRs: [0.0.0.0/32, 255.255.255.255/32, \"::/128\", "
					   "\"ffff::/16\"]\n", {"--enable-ipv6"}},
		// masqueradeSourceCIDRs: only listed sources of a family are masqueraded.
		{"masquerade-source", "masqueradeSourceCIDRs: [10.244.0.0/16, 192.0.2.0/24]\n", {}},
		{"masquerade-source-ipv6", "masqueradeSourceCIDRs: [10.244.0.0/16, \"fd00:10:244::/56\"]\n",
		 {"--enable-ipv6"}},
		{"masquerade-source-ipv4-only", "masqueradeSourceCIDRs: [10.244.0.0/16]\n", {"--enable-ipv6"}},
		{"masquerade-source-ipv6-only", "masqueradeSourceCIDRs: [\"fd00:10:244::/56\"]\n",
		 {"--enable-ipv6"}},
		// outputAddress: SNAT to an address, a range, this node's address in a subnet.
		{"output-address", "outputAddress: 203.0.113.7\n", {}},
		{"output-address-range-ipv6", "outputAddress: 203.0.113.7-203.0.113.9\n"
					      "outputAddressIPv6: \"2001:db8::7\"\n",
		 {"--enable-ipv6"}},
		{"output-address-to-ports", "outputAddress: 203.0.113.7-203.0.113.9\n",
		 {"--to-ports=1024-29999,32768-65535"}},
		{"output-address-ipv6-only-port", "outputAddressIPv6: \"2001:db8::7-2001:db8::9\"\n",
		 {"--enable-ipv6", "--to-ports=8080", "--random-fully=false"}},
		{"output-subnet", "outputAddress: 198.51.100.0/24\noutputAddressIPv6: \"2001:db8:1::/64\"\n",
		 {"--enable-ipv6"}, "198.51.100.9", "2001:db8:1::9"},
		// No address of this node in the subnet: masquerade, as without the key.
		{"output-subnet-missing", "outputAddress: 198.51.100.0/24\n", {}},
		// outputInterface and nonMasqueradeInterfaces: interface sets.
		{"interfaces", "outputInterface: [eth0, \"vlan*\", \"ens+\"]\n"
			       "nonMasqueradeInterfaces: [wg0, \"tun*\"]\n", {}},
		{"interfaces-sources-ipv6", "outputInterface: eth0\nmasqueradeSourceCIDRs: [10.244.0.0/16]\n"
					    "outputAddress: 203.0.113.7\n",
		 {"--enable-ipv6"}},
		// --connection-counters=false: no counter objects, one rule per decision.
		{"no-counters", "", {"--connection-counters=false"}},
		{"no-counters-everything", "outputInterface: eth0\nnonMasqueradeInterfaces: [wg0]\n"
					   "masqueradeSourceCIDRs: [10.244.0.0/16, \"fd00:10:244::/56\"]\n"
					   "outputAddress: 203.0.113.7\n",
		 {"--enable-ipv6", "--connection-counters=false"}},
		// nonMasqueradeDiscovery: a discovered-* set per source and family, which no rule
		// uses (here empty: the config alone finds nothing).
		{"discovery", "nonMasqueradeCIDRs: [198.18.0.0/16]\n"
			      "nonMasqueradeDiscovery:\n"
			      "  within: [198.51.100.0/24, \"2001:db8::/32\"]\n"
			      "  routeProtocols: [bird]\n"
			      "  flannelSubnetEnv: /run/flannel/subnet.env\n"
			      "  cniConfDir: /etc/cni/net.d\n",
		 {"--enable-ipv6"}},
		// Counters with both families: one rule per family before each counter.
		{"counters-everything", "outputInterface: eth0\nnonMasqueradeInterfaces: [wg0]\n"
					"masqueradeSourceCIDRs: [10.244.0.0/16, \"fd00:10:244::/56\"]\n"
					"outputAddressIPv6: \"2001:db8::7\"\n",
		 {"--enable-ipv6", "--to-ports=1024-65535"}},
		// snatGuard: both limits, enforced, both families, exempt sources of each.
		{"snat-guard", "snatGuard:\n"
			       "  mode: enforce\n"
			       "  newConnectionsPerSecond: 20\n"
			       "  openConnections: 30\n"
			       "  exempt: [198.18.0.0/24, \"2001:db8:9::/48\"]\n",
		 {"--enable-ipv6"}, "", "", false},
	};
	return cases;
}

// A case's ruleset and the options its flags give.
struct BuiltCase {
	RulesetOptions options;
	Ruleset ruleset;
};

// Parse a case's flags and config text into the ruleset the agent would want.
inline Result<BuiltCase> buildCaseWithOptions(const RulesetCase &c)
{
	std::vector<const char *> argv{"ip-masq-agent"};
	for (const std::string &flag : c.flags)
		argv.push_back(flag.c_str());
	auto cl = parseCommandLine(static_cast<int>(argv.size()), argv.data());
	if (!cl)
		return fail(cl.error());
	auto loaded = parseConfig(c.configText, c.name, cl->options.configFlags);
	if (!loaded)
		return fail(loaded.error());
	SubnetAddresses subnet;
	for (auto [text, address] : {std::pair{&c.subnetAddressV4, &subnet.ipv4},
				     std::pair{&c.subnetAddressV6, &subnet.ipv6}}) {
		if (text->empty())
			continue;
		auto parsed = parseAddress(*text);
		if (!parsed)
			return fail(parsed.error());
		*address = *parsed;
	}
	return BuiltCase{cl->options.ruleset, buildRuleset(loaded->config, cl->options.ruleset, subnet)};
}

inline Result<Ruleset> buildCase(const RulesetCase &c)
{
	auto built = buildCaseWithOptions(c);
	if (!built)
		return fail(built.error());
	return std::move(built->ruleset);
}

} // namespace ipmasq::test
