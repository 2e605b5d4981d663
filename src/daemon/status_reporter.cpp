// SPDX-License-Identifier: Apache-2.0
// What the daemon's loop says about itself: the pod network found, and systemd's
// READY=1, STATUS= and WATCHDOG=1.
#include "ip-masq-agent/daemon/status_reporter.h"

#include <fmt/format.h>

namespace ipmasq {

namespace {

// What the pod network's model holds, as /readyz?verbose and /metrics show it.
AgentStatus::PodNetworkState podNetworkState(const PodNetwork &podNetwork, PodNetwork::Clock::time_point now)
{
	const DiscoveredRanges &model = podNetwork.model();
	const DiscoveryStats stats = model.stats();
	AgentStatus::PodNetworkState state{{}, {}, {}, stats.inForce, stats.heldDown, stats.changes,
					   stats.outsideWithin, stats.overBound, {}, {}};
	for (const DiscoverySource source : kAllDiscoverySources) {
		state.perSource.emplace_back(discoverySourceName(source), stats.prefixesPerSource[size_t(source)]);
		state.inputsPerSource.emplace_back(discoverySourceName(source), stats.inputsPerSource[size_t(source)]);
		bool stale = false;
		for (const DiscoveryInput &input : model.inputs())
			if (input.source == source && input.state == DiscoveryInput::State::stale) {
				stale = true;
				state.problems.push_back(fmt::format("{} could not be read ({}): {}", input.name,
								     input.reason, model.whatStays(input)));
			}
		state.staleSources.emplace_back(discoverySourceName(source), stale);
	}
	if (stats.overBound)
		state.problems.push_back(fmt::format("more than {} ranges found: the last set within the bound stays",
						     kMaxDiscoveredPrefixes));
	for (const DiscoveredRange &range : model.ranges()) {
		if (state.ranges.size() == AgentStatus::kListedRanges)
			break;
		std::string origins;
		for (const DiscoveredRange::Origin &origin : range.origins)
			origins += (origins.empty() ? "" : "; ") + origin.text;
		if (range.leavesAt)
			origins += fmt::format("{}withdrawn, leaves in {} s", origins.empty() ? "" : "; ",
					       std::chrono::ceil<std::chrono::seconds>(*range.leavesAt - now).count());
		state.ranges.push_back(fmt::format("{}: {}", range.prefix.toString(), origins));
	}
	return state;
}

} // namespace

void StatusReporter::podNetworkFound(const PodNetwork *podNetwork, Clock::time_point now)
{
	status_.podNetworkFound(podNetwork ? std::optional(podNetworkState(*podNetwork, now)) : std::nullopt);
}

void StatusReporter::notifySystemd()
{
	if (!notifier_.enabled())
		return;
	const std::string line = status_.summary();
	std::string message;
	if (!readySent_ && status_.health().ok) {
		message = "READY=1\n";
		readySent_ = true;
	}
	if (line != lastStatusLine_)
		message += "STATUS=" + line;
	lastStatusLine_ = line;
	if (!message.empty())
		notifier_.notify(message);
}

void StatusReporter::watchdog(Clock::time_point now)
{
	const auto period = notifier_.watchdogPeriod();
	if (!period || (watchdogAt_ && now < *watchdogAt_))
		return;
	notifier_.notify("WATCHDOG=1");
	watchdogAt_ = now + *period;
}

} // namespace ipmasq
