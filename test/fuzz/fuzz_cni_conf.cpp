// SPDX-License-Identifier: Apache-2.0
// Fuzz target: a CNI network config -> parseCniConf.
// Input: first byte: the form (even: .conflist, odd: .conf); the rest: the file.
// Invariants: no crash and no deep recursion (nlohmann's parser keeps its stack on the heap,
// and the reader refuses past kMaxCniJsonDepth); errors are
// one line; at most kMaxCniSubnets subnets, each canonical and printing back to itself,
// each from a line of the file; parsing is deterministic.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "ip-masq-agent/node/cni_conf.h"

using namespace ipmasq;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const CniConfForm form = data[0] % 2 ? CniConfForm::single : CniConfForm::list;
	const std::string_view text(reinterpret_cast<const char *>(data + 1), size - 1);
	auto conf = parseCniConf(text, "/etc/cni/net.d/10-fuzz.conflist", form);
	if (!conf) {
		fuzz::checkOneLine(conf.error().message);
		return 0;
	}
	fuzz::check(conf->subnets.size() <= kMaxCniSubnets, "more subnets than the bound");
	const auto lines = static_cast<uint32_t>(std::count(text.begin(), text.end(), '\n') + 1);
	for (const CniSubnet &subnet : conf->subnets) {
		auto again = parsePrefix(subnet.prefix.toString());
		fuzz::check(again && *again == subnet.prefix, "a subnet that does not print back",
			    subnet.prefix.toString());
		fuzz::check(subnet.line >= 1 && subnet.line <= lines, "a subnet outside the file's lines");
	}
	auto twice = parseCniConf(text, "/etc/cni/net.d/10-fuzz.conflist", form);
	fuzz::check(twice && twice->subnets.size() == conf->subnets.size(), "parsing is not deterministic");
	return 0;
}
