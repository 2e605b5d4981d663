// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the fast scanner for plain block YAML (plain_yaml.h) against yaml-cpp.
// Invariant: parseConfig (fast scanner first) and parseConfigWithYamlCpp give the same
// result for every input: the same config with the same entry origins, the same warnings,
// or the same error message.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "ip-masq-agent/config/config.h"

using namespace ipmasq;

namespace {

void checkSameOrigins(const std::vector<Prefix> &fast, const std::vector<Prefix> &reference)
{
	for (size_t i = 0; i < fast.size() && i < reference.size(); i++)
		fuzz::check(fast[i].origin == reference[i].origin,
			    "the fast scanner gives an entry another line than yaml-cpp",
			    fast[i].toString());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	ConfigFlags flags;
	flags.enableIpv6 = data[0] & 1;
	const std::string_view text(reinterpret_cast<const char *>(data + 1), size - 1);

	const auto fast = parseConfig(text, "fuzz.yaml", flags);
	const auto reference = parseConfigWithYamlCpp(text, "fuzz.yaml", flags);
	fuzz::check(fast.has_value() == reference.has_value(),
		    "the fast scanner and yaml-cpp disagree on whether the config is valid",
		    fast ? reference.error().message : fast.error().message);
	if (!fast) {
		fuzz::check(fast.error().message == reference.error().message,
			    "the fast scanner and yaml-cpp give different errors",
			    fast.error().message + " | " + reference.error().message);
		return 0;
	}
	fuzz::check(fast->config == reference->config, "the fast scanner gives another config");
	fuzz::check(fast->warnings == reference->warnings, "the fast scanner gives other warnings");
	fuzz::check(fast->fromFile == reference->fromFile, "the fast scanner gives another source");
	checkSameOrigins(fast->config.nonMasqueradeCIDRs, reference->config.nonMasqueradeCIDRs);
	checkSameOrigins(fast->config.masqueradeCIDRs, reference->config.masqueradeCIDRs);
	checkSameOrigins(fast->config.masqueradeSourceCIDRs, reference->config.masqueradeSourceCIDRs);
	return 0;
}
