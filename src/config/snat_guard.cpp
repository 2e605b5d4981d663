// SPDX-License-Identifier: Apache-2.0
// The snatGuard section's values and checks.
#include "ip-masq-agent/config/snat_guard.h"

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

const char *snatGuardModeName(SnatGuardMode mode)
{
	switch (mode) {
	case SnatGuardMode::observe: return "observe";
	case SnatGuardMode::enforce: return "enforce";
	}
	return "";
}

Result<SnatGuardMode> parseSnatGuardMode(std::string_view text)
{
	for (const SnatGuardMode mode : {SnatGuardMode::observe, SnatGuardMode::enforce})
		if (text == snatGuardModeName(mode))
			return mode;
	return fail(fmt::format("mode {} is not one the guard knows: use observe (count the "
				"connections over a limit, drop none) or enforce (drop them)",
				quotedShort(text)));
}

std::optional<std::string> snatGuardLimitProblem(std::string_view here, std::string_view key,
						 int64_t value)
{
	if (value >= 1 && value <= int64_t(kMaxSnatGuardLimit))
		return std::nullopt;
	return fmt::format("{}{} is {}: give a whole number from 1 to {} (per source address "
			   "toward one destination), or leave the key out for no such limit",
			   here, key, value, kMaxSnatGuardLimit);
}

Status validateSnatGuard(const SnatGuard &guard, std::string_view here)
{
	if (!guard.mode)
		return fail(fmt::format("{}mode is required: observe (count the connections over a "
					"limit, drop none: start here) or enforce (drop them)",
					here));
	if (!guard.newConnectionsPerSecond && !guard.openConnections)
		return fail(fmt::format("{}gives no limit: set newConnectionsPerSecond, "
					"openConnections or both, such as newConnectionsPerSecond: 100",
					here));
	for (const auto &[key, value] : {std::pair{"newConnectionsPerSecond", guard.newConnectionsPerSecond},
					 std::pair{"openConnections", guard.openConnections}})
		if (value)
			if (auto problem = snatGuardLimitProblem(here, key, *value))
				return fail(*problem);
	if (guard.exempt.size() > kMaxSnatGuardExempt)
		return fail(fmt::format("{}exempt lists {} CIDRs, more than {}: exempt the "
					"prefixes of the components that need it (a proxy, the "
					"cluster's agents), not single pods",
					here, guard.exempt.size(), kMaxSnatGuardExempt));
	return {};
}

std::string describeSnatGuard(const SnatGuard &guard)
{
	const auto limit = [](const std::optional<uint32_t> &value) {
		return value ? std::to_string(*value) : std::string("-");
	};
	std::vector<std::string> exempt;
	for (const Prefix &prefix : guard.exempt)
		exempt.push_back(prefix.toString());
	return fmt::format("mode={} newConnectionsPerSecond={} openConnections={} exempt=[{}]",
			   guard.mode ? snatGuardModeName(*guard.mode) : "-",
			   limit(guard.newConnectionsPerSecond), limit(guard.openConnections),
			   fmt::join(exempt, ","));
}

} // namespace ipmasq
