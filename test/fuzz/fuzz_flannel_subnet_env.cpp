// SPDX-License-Identifier: Apache-2.0
// Fuzz target: a subnet.env -> parseFlannelSubnetEnv.
// Invariants: no crash; errors are one line; every network is of its key's family, a
// canonical prefix (no host bits) that prints back to itself; at least one network when
// the file is taken; parsing is deterministic.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "ip-masq-agent/node/flannel_subnet_env.h"

using namespace ipmasq;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::string_view text(reinterpret_cast<const char *>(data), size);
	auto env = parseFlannelSubnetEnv(text, "/run/flannel/subnet.env");
	if (!env) {
		fuzz::checkOneLine(env.error().message);
		return 0;
	}
	fuzz::check(!env->networks.empty(), "a subnet.env taken without a network");
	fuzz::check(env->networks.size() <= 2 * kMaxFlannelNetworks, "more networks than the bound");
	for (const FlannelNetwork &network : env->networks) {
		const bool ipv6 = network.key == "FLANNEL_IPV6_NETWORK";
		fuzz::check(ipv6 || network.key == "FLANNEL_NETWORK", "a network of another key", network.key);
		fuzz::check((network.prefix.network.family == Family::ipv6) == ipv6,
			    "a network of the other family", network.prefix.toString());
		auto again = parsePrefix(network.prefix.toString());
		fuzz::check(again && *again == network.prefix, "a network that does not print back",
			    network.prefix.toString());
		fuzz::check(network.line >= 1, "a network without its line");
	}
	auto twice = parseFlannelSubnetEnv(text, "/run/flannel/subnet.env");
	fuzz::check(twice && twice->networks.size() == env->networks.size(), "parsing is not deterministic");
	return 0;
}
