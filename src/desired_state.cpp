// SPDX-License-Identifier: Apache-2.0
// From the config's content to the desired state: load, merge and check, then map.
#include "ip-masq-agent/desired_state.h"

#include "ip-masq-agent/config.h"
#include "ip-masq-agent/config_location.h"
#include "ip-masq-agent/ruleset_mapping.h"

namespace ipmasq {

DesiredState desiredFromConfig(const LoadedConfig &loaded, const ConfigLocation &location,
			       const RulesetOptions &options)
{
	return DesiredState{buildRuleset(loaded.config, options), loaded.config.resyncInterval,
			    describeConfigOrigin(location, loaded), describeConfig(loaded.config),
			    loaded.warnings};
}

Result<DesiredState> desiredFromContent(const ConfigContent &content,
					const ConfigLocation &location, const ConfigFlags &flags,
					const RulesetOptions &options)
{
	auto loaded = loadConfigContent(content, flags);
	if (!loaded)
		return fail(loaded.error());
	return desiredFromConfig(*loaded, location, options);
}

Result<DesiredState> desiredFromLocation(const ConfigLocation &location, const ConfigFlags &flags,
					 const RulesetOptions &options)
{
	auto content = readConfigContent(location);
	if (!content)
		return fail(content.error());
	return desiredFromContent(*content, location, flags, options);
}

} // namespace ipmasq
