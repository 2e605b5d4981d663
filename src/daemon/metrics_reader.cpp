// SPDX-License-Identifier: Apache-2.0
// The daemon loop's reads for /metrics: conntrack's statistics, the table's counters.
#include "ip-masq-agent/daemon/metrics_reader.h"

#include <algorithm>

#include "ip-masq-agent/conntrack/conntrack_stats.h"

namespace ipmasq {

void MetricsReader::readDue(Clock::time_point now)
{
	if (now >= conntrackAt_) {
		conntrackAt_ = now + kConntrackPeriod;
		readConntrack();
	}
	if (countersAt_ && now >= *countersAt_) {
		countersAt_ = now + kCountersPeriod;
		readCounters();
	}
}

MetricsReader::Clock::time_point MetricsReader::nextWake() const
{
	return countersAt_ ? std::min(conntrackAt_, *countersAt_) : conntrackAt_;
}

void MetricsReader::readConntrack()
{
	auto stats = netlink::readConntrackStats();
	if (stats) {
		if (conntrackError_.clear())
			log::info("conntrack statistics are readable again");
		status_.conntrackRead(*stats);
		return;
	}
	// Counted every time, said once: the same failure every 10 s is no news.
	status_.conntrackReadFailed();
	if (conntrackError_.changed(stats.error().message))
		log::warning("{}; the conntrack metrics are left out until a read succeeds "
			     "(readiness does not depend on them)", stats.error().message);
}

void MetricsReader::readCounters()
{
	auto values = backend_.readCounters(table_);
	if (values) {
		countersError_.clear();
		// None: the table is missing for a moment (it heals); the last values stay.
		if (!values->empty())
			status_.countersRead(*values);
		return;
	}
	if (countersError_.changed(values.error().message))
		log::warning("{}; ip_masq_agent_connections_total keeps its last values until a "
			     "read succeeds", values.error().message);
}

} // namespace ipmasq
