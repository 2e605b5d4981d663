// SPDX-License-Identifier: Apache-2.0
// Liveness, readiness, counters, and their Prometheus text exposition.
#include "ip-masq-agent/daemon/agent_status.h"

#include <functional>

#include <fmt/format.h>

#include "ip_masq_agent_version.h"

namespace ipmasq {

double unixNow()
{
	return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
		.count();
}

namespace {

// One sample with its HELP and TYPE lines.
void appendMetric(std::string &out, std::string_view name, std::string_view type,
		  std::string_view help, const auto &value)
{
	out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

// A family as the metrics' `family` label writes it.
const char *familyLabel(Family family)
{
	return family == Family::ipv4 ? "ipv4" : "ipv6";
}

// The table's connection counters: a counter per decision, its labels from its name.
std::string connectionsText(const std::vector<CounterValue> &values)
{
	std::string out;
	for (const CounterValue &value : values) {
		const std::optional<CounterLabel> label = counterLabelOf(value.name);
		if (!label || isGuardDecision(label->decision))
			continue; // not one of the agent's (someone else's object), or the guard's
		if (out.empty())
			out = "# HELP ip_masq_agent_connections_total New connections the agent's table "
			      "decided on (its nat chain sees the first packet of each: connections, "
			      "not traffic), by family, decision and reason. Never decreases while "
			      "the agent runs: replacements and restarts keep the counters; a table "
			      "deleted by hand is restored from the values read at most 2 s before, "
			      "so the connections of those seconds are not counted (docs/design.md, "
			      "Counts that never go down).\n"
			      "# TYPE ip_masq_agent_connections_total counter\n";
		out += fmt::format("ip_masq_agent_connections_total{{family=\"{}\",decision=\"{}\","
				   "reason=\"{}\"}} {}\n",
				   familyLabel(label->family),
				   decisionName(label->decision), reasonName(label->reason),
				   value.packets);
	}
	return out;
}

// The SNAT guard's counters: the connections over each limit, per mode (its counters'
// names say which, like the connection counters').
std::string guardCountersText(const std::vector<CounterValue> &values)
{
	std::string out;
	for (const CounterValue &value : values) {
		const std::optional<CounterLabel> label = counterLabelOf(value.name);
		if (!label || !isGuardDecision(label->decision))
			continue;
		if (out.empty())
			out = "# HELP ip_masq_agent_snat_guard_over_total New connections over a limit of "
			      "snatGuard (attempts: a retried SYN counts again), by family, limit "
			      "(new_connections, open_connections) and mode (observe: let through, "
			      "enforce: dropped). Never decreases while the agent runs.\n"
			      "# TYPE ip_masq_agent_snat_guard_over_total counter\n";
		out += fmt::format("ip_masq_agent_snat_guard_over_total{{family=\"{}\",limit=\"{}\",mode=\"{}\"}} {}\n",
				   familyLabel(label->family), reasonName(label->reason),
				   label->decision == Decision::guardDropped ? "enforce" : "observe",
				   value.packets);
	}
	return out;
}

// The SNAT guard's last reading: the keys most over a limit, by rank, and each dynamic
// set's fill against its size (a full one adds no key).
std::string guardReadingText(const AgentStatus::Snapshot &s)
{
	std::string out;
	for (size_t i = 0; i < s.guardTopOver.size(); i++) {
		const GuardOverKey &key = s.guardTopOver[i];
		if (i == 0)
			out += "# HELP ip_masq_agent_snat_guard_top_over_attempts The sources and destinations "
			       "with the most attempts over a limit of snatGuard in its over sets (each key "
			       "leaves 10 minutes after its last attempt over), by rank: `client` the "
			       "source, `destination` address and port.\n"
			       "# TYPE ip_masq_agent_snat_guard_top_over_attempts gauge\n";
		const bool v4 = key.destination.family == Family::ipv4;
		out += fmt::format("ip_masq_agent_snat_guard_top_over_attempts{{rank=\"{}\",family=\"{}\",limit=\"{}\","
				   "protocol=\"{}\",client=\"{}\",destination=\"{}{}{}:{}\"}} {}\n",
				   i + 1, familyLabel(key.source.family),
				   key.kind == GuardLimitKind::newConnections ? "new_connections" : "open_connections",
				   protocolName(key.protocol), key.source.toString(), v4 ? "" : "[",
				   key.destination.toString(), v4 ? "" : "]", key.port, key.attempts);
	}
	for (size_t i = 0; i < s.guardFill.size(); i++) {
		if (i == 0)
			out += "# HELP ip_masq_agent_snat_guard_set_elements Keys each dynamic set of snatGuard "
			       "holds; at its size (ip_masq_agent_snat_guard_set_size) it adds none, and a "
			       "new key goes unguarded.\n"
			       "# TYPE ip_masq_agent_snat_guard_set_elements gauge\n";
		out += fmt::format("ip_masq_agent_snat_guard_set_elements{{set=\"{}\"}} {}\n", s.guardFill[i].set,
				   s.guardFill[i].elements);
	}
	for (size_t i = 0; i < s.guardFill.size(); i++) {
		if (i == 0)
			out += "# HELP ip_masq_agent_snat_guard_set_size The most keys each dynamic set of "
			       "snatGuard holds.\n# TYPE ip_masq_agent_snat_guard_set_size gauge\n";
		out += fmt::format("ip_masq_agent_snat_guard_set_size{{set=\"{}\"}} {}\n", s.guardFill[i].set,
				   s.guardFill[i].size);
	}
	return out;
}

// Conntrack's families: only what the last reading holds (a statistic this kernel does not
// keep, or a reading that failed, is left out rather than shown as 0), and always the
// read's own health.
std::string conntrackText(const AgentStatus::Snapshot &s)
{
	std::string out;
	if (s.conntrack) {
		for (const netlink::ConntrackCounter &counter : netlink::kConntrackCounters)
			if (const auto &value = (*s.conntrack).*counter.value)
				appendMetric(out, fmt::format("ip_masq_agent_conntrack_{}_total", counter.name),
					     "counter",
					     fmt::format("{} Summed over CPUs, as conntrack -S shows {}.",
							 counter.meaning, counter.kernelName),
					     *value);
		if (s.conntrack->entries)
			appendMetric(out, "ip_masq_agent_conntrack_entries", "gauge",
				     "Entries in the conntrack table.", *s.conntrack->entries);
		if (s.conntrack->entriesLimit)
			appendMetric(out, "ip_masq_agent_conntrack_entries_limit", "gauge",
				     "Entries the conntrack table may hold (nf_conntrack_max).",
				     *s.conntrack->entriesLimit);
	}
	if (s.conntrackReadUnixSeconds > 0)
		appendMetric(out, "ip_masq_agent_conntrack_last_read_timestamp_seconds", "gauge",
			     "Unix time of the last successful read of the conntrack statistics.",
			     fmt::format("{:.3f}", s.conntrackReadUnixSeconds));
	appendMetric(out, "ip_masq_agent_conntrack_read_failures_total", "counter",
		     "Reads of the conntrack statistics (over ctnetlink) that failed.",
		     s.conntrackReadFailures);
	return out;
}

// A label value: the text between the quotes, escaped as the exposition format wants.
std::string labelValue(std::string_view text)
{
	std::string out;
	for (const char c : text) {
		if (c == '\\' || c == '"')
			out += '\\';
		if (c == '\n') {
			out += "\\n";
			continue;
		}
		out += c;
	}
	return out;
}

// The busiest destinations, kTopDestinations at most, by rank: one metric a figure.
std::string snatTopText(const SnatUsage &u)
{
	const struct {
		const char *name, *help;
		std::function<std::string(const SnatDestination &)> value;
	} tops[] = {
		{"ip_masq_agent_snat_top_usage_ratio",
		 "Share of source ports in use toward one of the busiest destinations, by rank "
		 "(1 is the highest ratio).",
		 [](const SnatDestination &d) { return fmt::format("{}", d.ratio()); }},
		{"ip_masq_agent_snat_top_connections",
		 "Connections toward one of the busiest destinations, by rank.",
		 [](const SnatDestination &d) { return std::to_string(d.connections); }},
		{"ip_masq_agent_snat_top_available_ports",
		 "Source ports the agent's rules can give toward one of the busiest "
		 "destinations from its translated address, by rank.",
		 [](const SnatDestination &d) { return std::to_string(d.available()); }},
	};
	std::string out;
	for (const auto &top : tops) {
		if (u.top.empty())
			break;
		out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", top.name, top.help, top.name);
		for (size_t i = 0; i < u.top.size(); i++) {
			const SnatDestination &d = u.top[i];
			out += fmt::format("{}{{rank=\"{}\",family=\"{}\",protocol=\"{}\","
					   "destination=\"{}\",source=\"{}\",ports=\"{}\"}} {}\n",
					   top.name, i + 1, familyLabel(d.family),
					   labelValue(protocolName(d.protocol)),
					   labelValue(d.destinationText()),
					   labelValue(d.translated.toString()),
					   labelValue(d.pool.toString()), top.value(d));
		}
	}
	return out;
}

// The labels of one of the busiest destinations over every translated address: the rank
// of its busiest in the top_* series, and the same family, protocol, destination and ports.
std::string totalLabels(const SnatUsage &u, const SnatDestinationTotal &t)
{
	const SnatDestination &busiest = u.top[t.rank - 1];
	return fmt::format("rank=\"{}\",family=\"{}\",protocol=\"{}\",destination=\"{}\",ports=\"{}\"",
			   t.rank, familyLabel(t.family), labelValue(protocolName(t.protocol)),
			   labelValue(busiest.destinationText()), labelValue(busiest.pool.toString()));
}

// The clients of those destinations, kTopClients each by rank: their connections by state
// (TCP's three, or not_tcp), and their share of their translated address's ports.
std::string snatClientsText(const SnatUsage &u)
{
	std::string connections, shares;
	for (const SnatDestinationTotal &t : u.totals)
		for (size_t i = 0; i < t.holders.top.size(); i++) {
			const SnatClient &c = t.holders.top[i];
			const std::string labels = fmt::format(
				"{},client_rank=\"{}\",source=\"{}\",client=\"{}\",interface=\"{}\"",
				totalLabels(u, t), i + 1, labelValue(c.translated.toString()),
				labelValue(c.address.toString()), labelValue(c.interface));
			shares += fmt::format("ip_masq_agent_snat_top_client_usage_ratio{{{}}} {}\n", labels,
					      c.share());
			const auto state = [&](HoldState s) {
				connections += fmt::format(
					"ip_masq_agent_snat_top_client_connections{{{},state=\"{}\"}} {}\n",
					labels, holdStateLabel(s), c.held[s]);
			};
			if (t.protocol != kProtoTcp)
				state(HoldState::notTcp);
			else
				for (const HoldState s : {HoldState::tcpOpen, HoldState::tcpTimeWait, HoldState::tcpOther})
					state(s);
		}
	if (connections.empty())
		return {};
	return "# HELP ip_masq_agent_snat_top_client_connections Connections a client (their "
	       "original source: a pod, or the node) holds toward one of the busiest destinations, "
	       "by the destination's rank, the client's rank and state: tcp_open, tcp_time_wait, "
	       "tcp_other (closing), not_tcp.\n"
	       "# TYPE ip_masq_agent_snat_top_client_connections gauge\n" +
	       connections +
	       "# HELP ip_masq_agent_snat_top_client_usage_ratio A client's share of the source "
	       "ports its translated address has toward one of the busiest destinations.\n"
	       "# TYPE ip_masq_agent_snat_top_client_usage_ratio gauge\n" +
	       shares;
}

// Who holds the ports of the busiest destinations: for each (over every translated
// address), its clients and what was left out; then the clients by rank. At most
// kTopDestinations x (3 + kTopClients x 4) series.
std::string snatHoldersText(const SnatUsage &u)
{
	const struct {
		const char *name, *help;
		std::function<uint64_t(const SnatHolders &)> value;
	} perDestination[] = {
		{"ip_masq_agent_snat_top_clients",
		 "Clients (the original sources: pods, or the node) that hold the entries of one of "
		 "the busiest destinations, over every translated address, by the rank of its busiest.",
		 [](const SnatHolders &h) { return h.clients; }},
		{"ip_masq_agent_snat_top_clients_left_out",
		 "Of those, the clients beyond the 10 that have series of their own.",
		 [](const SnatHolders &h) { return h.clientsLeftOut; }},
		{"ip_masq_agent_snat_top_clients_left_out_connections",
		 "Connections toward one of the busiest destinations in no client's series: those of "
		 "the clients left out, and those whose client the read did not keep.",
		 [](const SnatHolders &h) { return h.connectionsLeftOut + h.unattributed; }},
	};
	std::string out;
	for (const auto &metric : perDestination) {
		if (u.totals.empty())
			break;
		out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", metric.name, metric.help, metric.name);
		for (const SnatDestinationTotal &t : u.totals)
			out += fmt::format("{}{{{}}} {}\n", metric.name, totalLabels(u, t), metric.value(t.holders));
	}
	return out + snatClientsText(u);
}

// The SNAT usage: node-wide gauges, and kTopDestinations destinations by rank. The
// number of series never depends on the number of destinations.
std::string snatUsageMetrics(const AgentStatus::Snapshot &s)
{
	std::string out;
	if (const auto &u = s.snatUsage) {
		appendMetric(out, "ip_masq_agent_snat_usage_max_ratio", "gauge",
			     "The highest share of source ports in use toward one destination (address, "
			     "port, protocol) from one translated address, over the connections the "
			     "agent's rules source-NATed; 1 is exhausted.",
			     u->maxRatio);
		appendMetric(out, "ip_masq_agent_snat_destinations", "gauge",
			     "Destinations (address, port, protocol, translated address) that the "
			     "agent's source-NATed connections go to.",
			     u->destinations);
		out += fmt::format(
			"# HELP ip_masq_agent_snat_destinations_over_threshold Destinations whose share "
			"of source ports in use is at least the threshold.\n"
			"# TYPE ip_masq_agent_snat_destinations_over_threshold gauge\n"
			"ip_masq_agent_snat_destinations_over_threshold{{threshold=\"{}\"}} {}\n"
			"ip_masq_agent_snat_destinations_over_threshold{{threshold=\"1\"}} {}\n",
			SnatUsage::kWarningRatio, u->aboveWarning, u->exhausted);
		appendMetric(out, "ip_masq_agent_snat_connections", "gauge",
			     "Connections in conntrack that the agent's rules source-NATed.",
			     u->connections);
		appendMetric(out, "ip_masq_agent_snat_unattributed_connections", "gauge",
			     "Of those, connections toward destinations beyond the read's bound "
			     "(65,536 destinations): counted, not in the per-destination figures.",
			     u->leftOut);
		appendMetric(out, "ip_masq_agent_snat_unattributed_client_connections", "gauge",
			     "Of the agent's connections, those whose client the read did not keep (its "
			     "bound of 65,536 client and destination pairs): in their destination's "
			     "figures, in no client's.",
			     u->unattributedClients);
		appendMetric(out, "ip_masq_agent_snat_other_connections", "gauge",
			     "Source-NATed connections that the agent's rules did not make (another "
			     "address, or ports outside its ranges): never counted above.",
			     u->otherConnections);
		out += snatTopText(*u);
		out += snatHoldersText(*u);
	}
	if (s.snatReadUnixSeconds > 0)
		appendMetric(out, "ip_masq_agent_snat_last_read_timestamp_seconds", "gauge",
			     "Unix time at which the last successful read of conntrack's entries for the "
			     "SNAT usage began: every connection made before it was counted.",
			     fmt::format("{:.3f}", s.snatReadUnixSeconds));
	appendMetric(out, "ip_masq_agent_snat_read_failures_total", "counter",
		     "Reads of conntrack's entries (over ctnetlink) for the SNAT usage that failed.",
		     s.snatReadFailures);
	return out;
}

} // namespace

AgentStatus::AgentStatus(Clock::time_point startedAt) : startedAt_(startedAt) {}

void AgentStatus::configLoaded()
{
	std::lock_guard lock(mutex_);
	state_.configError.clear();
}

void AgentStatus::configKeysUnknown(std::vector<std::string> warnings)
{
	std::lock_guard lock(mutex_);
	state_.unknownConfigKeys = std::move(warnings);
}

void AgentStatus::configFailed(const std::string &error)
{
	std::lock_guard lock(mutex_);
	state_.configError = error;
	state_.configErrors++;
}

void AgentStatus::syncSucceeded(const Ruleset &applied, std::chrono::duration<double> took)
{
	const AddressSet *v4 = applied.findSet(Family::ipv4);
	const AddressSet *v6 = applied.findSet(Family::ipv6);
	const double now = unixNow();
	std::lock_guard lock(mutex_);
	Snapshot &s = state_;
	s.started = true;
	s.rulesetInForce = true;
	s.syncError.clear();
	s.tableDrifted = false;
	s.syncs++;
	s.lastSuccessUnixSeconds = now;
	const double seconds = took.count();
	for (size_t i = 0; i < kDurationBuckets.size(); i++)
		if (seconds <= kDurationBuckets[i])
			s.durationBucketCounts[i]++;
	s.durationCount++;
	s.durationSum += seconds;
	s.intervalsV4 = v4 ? v4->elements.size() : 0;
	s.intervalsV6 = v6 ? v6->elements.size() : 0;
	s.table = applied.table;
}

void AgentStatus::syncFailed(const std::string &error)
{
	std::lock_guard lock(mutex_);
	state_.started = true;
	state_.syncError = error;
	state_.syncFailures++;
}

void AgentStatus::noopResync()
{
	std::lock_guard lock(mutex_);
	state_.started = true;
	state_.rulesetInForce = true;
	state_.syncError.clear(); // the kernel was just seen to hold the desired table
	state_.noopResyncs++;
}

void AgentStatus::tableDrifted()
{
	std::lock_guard lock(mutex_);
	state_.tableDrifted = true;
}

void AgentStatus::subnetsChosen(const std::vector<SubnetChoice> &subnets)
{
	std::lock_guard lock(mutex_);
	state_.subnets = subnets;
}

void AgentStatus::addressesFollowed(const AddressFollowing &following)
{
	std::lock_guard lock(mutex_);
	state_.addresses = following;
}

void AgentStatus::podNetworkFound(std::optional<PodNetworkState> state)
{
	std::lock_guard lock(mutex_);
	state_.podNetwork = std::move(state);
}

void AgentStatus::countersRead(const std::vector<CounterValue> &values)
{
	std::lock_guard lock(mutex_);
	state_.connections = values;
}

void AgentStatus::driftRepaired()
{
	std::lock_guard lock(mutex_);
	state_.driftRepairs++;
}

void AgentStatus::conntrackRead(const netlink::ConntrackStats &stats)
{
	const double now = unixNow();
	std::lock_guard lock(mutex_);
	state_.conntrack = stats;
	state_.conntrackReadUnixSeconds = now;
}

void AgentStatus::conntrackReadFailed()
{
	std::lock_guard lock(mutex_);
	state_.conntrack.reset();
	state_.conntrackReadFailures++;
}

void AgentStatus::natConflictsChecked(Snapshot::NatConflicts counts, std::vector<std::string> warnings)
{
	std::lock_guard lock(mutex_);
	state_.natConflicts = counts;
	state_.natCheckCycles++;
	state_.warnings = std::move(warnings);
}

void AgentStatus::natConflictCheckFailed(std::vector<std::string> warnings)
{
	std::lock_guard lock(mutex_);
	state_.natConflicts.reset();
	state_.natCheckFailures++;
	state_.warnings = std::move(warnings);
}

void AgentStatus::snatUsageRead(SnatUsage usage, double startedUnixSeconds)
{
	std::lock_guard lock(mutex_);
	state_.snatUsage = std::move(usage);
	state_.snatReadUnixSeconds = startedUnixSeconds;
}

void AgentStatus::snatGuardRead(std::string text, std::vector<GuardOverKey> topOver,
				std::vector<DynamicSetFill> fill)
{
	std::lock_guard lock(mutex_);
	state_.guardText = std::move(text);
	state_.guardTopOver = std::move(topOver);
	state_.guardFill = std::move(fill);
}

void AgentStatus::snatUsageReadFailed()
{
	std::lock_guard lock(mutex_);
	state_.snatUsage.reset();
	state_.snatReadFailures++;
}

void AgentStatus::checkThread(CheckThread state)
{
	std::lock_guard lock(mutex_);
	for (CheckThread &known : state_.checkThreads)
		if (known.label == state.label) {
			known = std::move(state);
			return;
		}
	state_.checkThreads.push_back(std::move(state));
}

std::string AgentStatus::Snapshot::snatUsageText() const
{
	if (snatUsage)
		return snatUsageTable(*snatUsage) + guardText;
	if (snatReadFailures > 0)
		return "conntrack's entries could not be read at the last attempt (the log says why)\n";
	return "conntrack's entries have not been read yet\n";
}

AgentStatus::Snapshot AgentStatus::snapshot() const
{
	std::lock_guard lock(mutex_);
	return state_;
}

void AgentStatus::loopTurned(Clock::time_point now)
{
	// Zero means "never": a monotonic clock read is never zero after boot.
	lastLoopTurn_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
}

std::optional<AgentStatus::Clock::time_point> AgentStatus::lastLoopTurn() const
{
	const auto ticks = lastLoopTurn_.load(std::memory_order_relaxed);
	if (ticks == 0)
		return std::nullopt;
	return Clock::time_point(Clock::duration(ticks));
}

AgentStatus::Health AgentStatus::liveness(Clock::time_point now) const
{
	const std::optional<Clock::time_point> beat = lastLoopTurn();
	// Whole seconds, rounded down: "has not turned for 17 s".
	const auto age = std::chrono::duration_cast<std::chrono::seconds>(now - beat.value_or(startedAt_));
	if (age <= kLivenessLimit)
		return {true, {}};
	if (!beat)
		return {false, fmt::format("the event loop has not started {} s after start-up "
					   "(the limit is {} s)", age.count(), kLivenessLimit.count())};
	return {false, fmt::format("the event loop has not turned for {} s (the limit is {} s): "
				   "it is stuck, for example in a kernel call", age.count(),
				   kLivenessLimit.count())};
}

AgentStatus::Health AgentStatus::Snapshot::health() const
{
	if (!configError.empty() && !rulesetInForce)
		return {false, "config invalid (no ruleset of the agent is in force: nothing was "
			       "applied, and no table of the agent was found to keep): " + configError};
	if (!configError.empty())
		return {false, "config invalid (the last good ruleset stays in force): " + configError};
	if (!syncError.empty())
		return {false, "the kernel rejected the ruleset: " + syncError};
	if (tableDrifted)
		return {false, fmt::format("table inet {} is missing or was changed, and is not yet "
					   "restored", table)};
	// Never "no address": a config with a subnet waits, and what is in force stays.
	if (addresses.state == AddressFollowing::State::waiting)
		return {false, fmt::format("this node's addresses could not be read yet ({}): the "
					   "config's outputAddress subnet waits for them, and whatever "
					   "table is in force stays as it is", addresses.reason)};
	for (const SubnetChoice &choice : subnets)
		if (!choice.address)
			return {false, fmt::format("{}: this node has no address in it, so its {} traffic "
						   "is masqueraded instead: the config cannot be honoured "
						   "on this node", choice.subnet, familyName(choice.family))};
	if (!started)
		return {false, "no sync has completed yet"};
	return {true, {}};
}

std::vector<std::string> AgentStatus::Snapshot::verboseWarnings() const
{
	std::vector<std::string> out = unknownConfigKeys;
	out.insert(out.end(), warnings.begin(), warnings.end());
	if (addresses.state == AddressFollowing::State::stale)
		out.push_back(fmt::format("this node's addresses are stale ({}): the outputAddress "
					  "subnets keep the addresses last known until they are read "
					  "again", addresses.reason));
	if (podNetwork)
		for (const std::string &problem : podNetwork->problems)
			out.push_back("pod network: " + problem);
	for (const CheckThread &check : checkThreads)
		if (!check.refused.empty())
			out.push_back(fmt::format("{} is not running: {}; the agent goes on without it, and "
						  "tries to start it again at each resync", check.what,
						  check.refused));
	return out;
}

std::vector<std::string> AgentStatus::Snapshot::verboseInfo() const
{
	std::vector<std::string> out;
	if (!podNetwork)
		return out;
	for (const std::string &range : podNetwork->ranges)
		out.push_back("pod network, not masqueraded: " + range);
	const size_t ranges = podNetwork->inForce + podNetwork->heldDown;
	if (ranges > podNetwork->ranges.size())
		out.push_back(fmt::format("pod network: {} more ranges not listed", ranges - podNetwork->ranges.size()));
	return out;
}

std::string AgentStatus::Snapshot::summary() const
{
	if (const Health h = health(); !h.ok)
		return h.reason;
	return fmt::format("table inet {} in force: {} IPv4 and {} IPv6 non-masquerade intervals",
			   table, intervalsV4, intervalsV6);
}

namespace {

// The syncs' counters and durations, readiness, and the sets in force.
std::string syncText(const AgentStatus::Snapshot &s)
{
	std::string out;
	const auto metric = [&](const char *name, const char *type, const char *help,
				const auto &value) { appendMetric(out, name, type, help, value); };
	metric("ip_masq_agent_syncs_total", "counter", "Rulesets committed to the kernel.", s.syncs);
	metric("ip_masq_agent_sync_failures_total", "counter",
	       "Syncs that failed (kernel rejected the batch, or netlink failed).", s.syncFailures);
	metric("ip_masq_agent_noop_resyncs_total", "counter",
	       "Syncs skipped because nothing had changed.", s.noopResyncs);
	metric("ip_masq_agent_drift_repairs_total", "counter",
	       "Times the table was restored after being deleted or changed outside the agent.",
	       s.driftRepairs);
	metric("ip_masq_agent_config_errors_total", "counter",
	       "Config loads that failed (counted once per change of the file).", s.configErrors);
	metric("ip_masq_agent_config_unknown_keys", "gauge",
	       "Keys of the config in force that the agent does not know and ignores (a typo "
	       "such as nonMasqueradeCIDR leaves the key it meant at its default; "
	       "/readyz?verbose names each, and the key it most likely means).",
	       s.unknownConfigKeys.size());
	metric("ip_masq_agent_last_successful_sync_timestamp_seconds", "gauge",
	       "Unix time of the last successful sync.", fmt::format("{:.3f}", s.lastSuccessUnixSeconds));
	metric("ip_masq_agent_healthy", "gauge", "1 when /readyz (and /healthz) report ok.",
	       s.health().ok ? 1 : 0);
	out += "# HELP ip_masq_agent_sync_duration_seconds Time to commit a ruleset to the kernel.\n"
	       "# TYPE ip_masq_agent_sync_duration_seconds histogram\n";
	for (size_t i = 0; i < AgentStatus::kDurationBuckets.size(); i++)
		out += fmt::format("ip_masq_agent_sync_duration_seconds_bucket{{le=\"{}\"}} {}\n",
				   AgentStatus::kDurationBuckets[i], s.durationBucketCounts[i]);
	out += fmt::format("ip_masq_agent_sync_duration_seconds_bucket{{le=\"+Inf\"}} {}\n"
			   "ip_masq_agent_sync_duration_seconds_sum {}\n"
			   "ip_masq_agent_sync_duration_seconds_count {}\n",
			   s.durationCount, s.durationSum, s.durationCount);
	out += "# HELP ip_masq_agent_nonmasquerade_intervals Intervals in the non-masquerade sets "
	       "in force.\n# TYPE ip_masq_agent_nonmasquerade_intervals gauge\n";
	out += fmt::format("ip_masq_agent_nonmasquerade_intervals{{family=\"ipv4\"}} {}\n"
			   "ip_masq_agent_nonmasquerade_intervals{{family=\"ipv6\"}} {}\n",
			   s.intervalsV4, s.intervalsV6);
	return out;
}

// The outputAddress subnets' choices, and whether the addresses they use are followed.
std::string addressText(const AgentStatus::Snapshot &s)
{
	using State = AgentStatus::AddressFollowing::State;
	std::string out;
	if (!s.subnets.empty()) {
		out += "# HELP ip_masq_agent_output_address_available 1 when this node has an address "
		       "in the family's outputAddress subnet and SNATs to it, 0 when it has none and "
		       "masquerades instead.\n# TYPE ip_masq_agent_output_address_available gauge\n";
		for (const SubnetChoice &choice : s.subnets)
			out += fmt::format("ip_masq_agent_output_address_available{{family=\"{}\"}} {}\n",
					   familyLabel(choice.family), choice.address ? 1 : 0);
	}
	if (!s.subnets.empty() || s.addresses.state != State::following)
		appendMetric(out, "ip_masq_agent_node_addresses_stale", "gauge",
			     "1 while the outputAddress subnets use the node's addresses last known "
			     "(they could not be read again, or change notifications were lost) or "
			     "wait for a first read; 0 while they are followed.",
			     s.addresses.state == State::following ? 0 : 1);
	return out;
}

// The pod network found on the node: per source, changes, what was left out.
std::string podNetworkText(const AgentStatus::Snapshot &s)
{
	if (!s.podNetwork)
		return {};
	const AgentStatus::PodNetworkState &p = *s.podNetwork;
	std::string out = "# HELP ip_masq_agent_discovered_ranges Non-masquerade ranges found on the node "
			  "(nonMasqueradeDiscovery), by the source that gives them.\n"
			  "# TYPE ip_masq_agent_discovered_ranges gauge\n";
	for (const auto &[source, count] : p.perSource)
		out += fmt::format("ip_masq_agent_discovered_ranges{{source=\"{}\"}} {}\n", source, count);
	out += "# HELP ip_masq_agent_discovery_stale 1 while the source's last read failed: the ranges it "
	       "gave before stay.\n# TYPE ip_masq_agent_discovery_stale gauge\n";
	for (const auto &[source, stale] : p.staleSources)
		out += fmt::format("ip_masq_agent_discovery_stale{{source=\"{}\"}} {}\n", source, stale ? 1 : 0);
	out += "# HELP ip_masq_agent_discovery_inputs What each source reads: the route source, subnet.env, "
	       "each CNI network config file present.\n# TYPE ip_masq_agent_discovery_inputs gauge\n";
	for (const auto &[source, inputs] : p.inputsPerSource)
		out += fmt::format("ip_masq_agent_discovery_inputs{{source=\"{}\"}} {}\n", source, inputs);
	appendMetric(out, "ip_masq_agent_discovered_ranges_held_down", "gauge",
		     "Discovered ranges withdrawn and still in force until their hold-down ends.", p.heldDown);
	appendMetric(out, "ip_masq_agent_discovered_range_changes_total", "counter",
		     "Discovered ranges added to or removed from the non-masquerade set.", p.changes);
	appendMetric(out, "ip_masq_agent_discovered_outside_within_total", "counter",
		     "Prefixes a source gave outside nonMasqueradeDiscovery.within, ignored.", p.outsideWithin);
	appendMetric(out, "ip_masq_agent_discovered_over_bound", "gauge",
		     "1 while more ranges are found than the bound: the last set within it stays.",
		     p.overBound ? 1 : 0);
	return out;
}

// The NAT conflict check's last cycle and its counts.
std::string natCheckText(const AgentStatus::Snapshot &s)
{
	std::string out;
	if (s.natConflicts)
		out += fmt::format(
			"# HELP ip_masq_agent_nat_conflicts Rules of other tables after which a sampled "
			"packet leaves with another source than the agent's rules give it (NAT what it "
			"exempts, or NAT it first to another address), as the last check found them: "
			"certain, may (a match or an address it could not evaluate), or undetermined "
			"(a bound, an unreadable table, a target it does not know: it cannot tell).\n"
			"# TYPE ip_masq_agent_nat_conflicts gauge\n"
			"ip_masq_agent_nat_conflicts{{certainty=\"certain\"}} {}\n"
			"ip_masq_agent_nat_conflicts{{certainty=\"may\"}} {}\n"
			"ip_masq_agent_nat_conflicts{{certainty=\"undetermined\"}} {}\n",
			s.natConflicts->certain, s.natConflicts->may, s.natConflicts->undetermined);
	appendMetric(out, "ip_masq_agent_nat_check_failures_total", "counter",
		     "Passes of the NAT conflict check that could not read other tables.",
		     s.natCheckFailures);
	appendMetric(out, "ip_masq_agent_nat_check_cycles_total", "counter",
		     "Cycles of the NAT conflict check completed over the whole sample.",
		     s.natCheckCycles);
	return out;
}

// Whether each check's thread runs.
std::string checkThreadsText(const AgentStatus::Snapshot &s)
{
	if (s.checkThreads.empty())
		return {};
	std::string out = "# HELP ip_masq_agent_check_running 1 while the check runs on its thread, 0 "
			  "while the kernel refuses the thread (a limit on tasks: /readyz?verbose and "
			  "the log say which).\n# TYPE ip_masq_agent_check_running gauge\n";
	for (const AgentStatus::CheckThread &check : s.checkThreads)
		out += fmt::format("ip_masq_agent_check_running{{check=\"{}\"}} {}\n", check.label,
				   check.refused.empty() ? 1 : 0);
	return out;
}

} // namespace

std::string AgentStatus::Snapshot::prometheusText() const
{
	return syncText(*this) +
	       fmt::format("# HELP ip_masq_agent_build_info The agent's version.\n"
			   "# TYPE ip_masq_agent_build_info gauge\n"
			   "ip_masq_agent_build_info{{version=\"{}\"}} 1\n",
			   IP_MASQ_AGENT_VERSION) +
	       addressText(*this) + podNetworkText(*this) + connectionsText(connections) + guardCountersText(connections) +
	       guardReadingText(*this) + conntrackText(*this) +
	       natCheckText(*this) + checkThreadsText(*this) + snatUsageMetrics(*this);
}

} // namespace ipmasq
