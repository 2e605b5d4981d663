// SPDX-License-Identifier: Apache-2.0
// Health and counters, and their Prometheus text exposition.
#include "ip-masq-agent/agent_status.h"

#include <fmt/format.h>

#include "ip_masq_agent_version.h"

namespace ipmasq {

void AgentStatus::configLoaded()
{
	std::lock_guard lock(mutex_);
	configError_.clear();
}

void AgentStatus::configFailed(const std::string &error)
{
	std::lock_guard lock(mutex_);
	configError_ = error;
	configErrors_++;
}

void AgentStatus::syncSucceeded(const Ruleset &applied, std::chrono::duration<double> took)
{
	std::lock_guard lock(mutex_);
	started_ = true;
	syncError_.clear();
	tableDrifted_ = false;
	syncs_++;
	lastSuccessUnixSeconds_ =
		std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
	const double seconds = took.count();
	for (size_t i = 0; i < kDurationBuckets.size(); i++)
		if (seconds <= kDurationBuckets[i])
			durationBucketCounts_[i]++;
	durationCount_++;
	durationSum_ += seconds;
	const AddressSet *v4 = applied.findSet(Family::ipv4);
	const AddressSet *v6 = applied.findSet(Family::ipv6);
	intervalsV4_ = v4 ? v4->elements.size() : 0;
	intervalsV6_ = v6 ? v6->elements.size() : 0;
	table_ = applied.table;
}

void AgentStatus::syncFailed(const std::string &error)
{
	std::lock_guard lock(mutex_);
	started_ = true;
	syncError_ = error;
	syncFailures_++;
}

void AgentStatus::noopResync()
{
	std::lock_guard lock(mutex_);
	started_ = true;
	syncError_.clear(); // the kernel was just seen to hold the desired table
	noopResyncs_++;
}

void AgentStatus::tableDrifted()
{
	std::lock_guard lock(mutex_);
	tableDrifted_ = true;
}

void AgentStatus::driftRepaired()
{
	std::lock_guard lock(mutex_);
	driftRepairs_++;
}

void AgentStatus::loopTurned()
{
	// Zero means "never": a monotonic clock read is never zero after boot.
	lastLoopTurn_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
			    std::memory_order_relaxed);
}

std::optional<std::chrono::steady_clock::time_point> AgentStatus::lastLoopTurn() const
{
	const auto ticks = lastLoopTurn_.load(std::memory_order_relaxed);
	if (ticks == 0)
		return std::nullopt;
	return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ticks));
}

AgentStatus::Health AgentStatus::health() const
{
	std::lock_guard lock(mutex_);
	if (!configError_.empty())
		return {false, "config invalid (the last good ruleset stays in force): " + configError_};
	if (!syncError_.empty())
		return {false, "the kernel rejected the ruleset: " + syncError_};
	if (tableDrifted_)
		return {false, fmt::format("table inet {} is missing or was changed, and is not yet "
					   "restored", table_)};
	if (!started_)
		return {false, "no sync has completed yet"};
	return {true, {}};
}

std::string AgentStatus::summary() const
{
	const Health h = health();
	std::lock_guard lock(mutex_);
	if (!h.ok)
		return h.reason;
	return fmt::format("table inet {} in force: {} IPv4 and {} IPv6 non-masquerade intervals",
			   table_, intervalsV4_, intervalsV6_);
}

std::string AgentStatus::prometheusText() const
{
	const bool healthy = health().ok;
	std::lock_guard lock(mutex_);
	std::string out;
	const auto metric = [&](const char *name, const char *type, const char *help, auto value) {
		out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name,
				   value);
	};
	metric("ip_masq_agent_syncs_total", "counter",
	       "Rulesets committed to the kernel.", syncs_);
	metric("ip_masq_agent_sync_failures_total", "counter",
	       "Syncs that failed (kernel rejected the batch, or netlink failed).", syncFailures_);
	metric("ip_masq_agent_noop_resyncs_total", "counter",
	       "Syncs skipped because nothing had changed.", noopResyncs_);
	metric("ip_masq_agent_drift_repairs_total", "counter",
	       "Times the table was restored after being deleted or changed outside the agent.",
	       driftRepairs_);
	metric("ip_masq_agent_config_errors_total", "counter",
	       "Config loads that failed (counted once per change of the file).", configErrors_);
	metric("ip_masq_agent_last_successful_sync_timestamp_seconds", "gauge",
	       "Unix time of the last successful sync.", fmt::format("{:.3f}", lastSuccessUnixSeconds_));
	metric("ip_masq_agent_healthy", "gauge", "1 when /healthz reports ok.", healthy ? 1 : 0);

	out += "# HELP ip_masq_agent_sync_duration_seconds Time to commit a ruleset to the kernel.\n"
	       "# TYPE ip_masq_agent_sync_duration_seconds histogram\n";
	for (size_t i = 0; i < kDurationBuckets.size(); i++)
		out += fmt::format("ip_masq_agent_sync_duration_seconds_bucket{{le=\"{}\"}} {}\n",
				   kDurationBuckets[i], durationBucketCounts_[i]);
	out += fmt::format("ip_masq_agent_sync_duration_seconds_bucket{{le=\"+Inf\"}} {}\n"
			   "ip_masq_agent_sync_duration_seconds_sum {}\n"
			   "ip_masq_agent_sync_duration_seconds_count {}\n",
			   durationCount_, durationSum_, durationCount_);

	out += "# HELP ip_masq_agent_nonmasquerade_intervals Intervals in the non-masquerade sets "
	       "in force.\n# TYPE ip_masq_agent_nonmasquerade_intervals gauge\n";
	out += fmt::format("ip_masq_agent_nonmasquerade_intervals{{family=\"ipv4\"}} {}\n"
			   "ip_masq_agent_nonmasquerade_intervals{{family=\"ipv6\"}} {}\n",
			   intervalsV4_, intervalsV6_);
	out += fmt::format("# HELP ip_masq_agent_build_info The agent's version.\n"
			   "# TYPE ip_masq_agent_build_info gauge\n"
			   "ip_masq_agent_build_info{{version=\"{}\"}} 1\n",
			   IP_MASQ_AGENT_VERSION);
	return out;
}

} // namespace ipmasq
