// SPDX-License-Identifier: Apache-2.0
// The command line's modes: --dry-run, --explain, --snat-usage, --cleanup, --once and the
// daemon, each from the parsed options to an exit status.
#include "ip-masq-agent/cli/modes.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "ip-masq-agent/daemon/agent_status.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/config/config_source.h"
#include "ip-masq-agent/daemon/daemon.h"
#include "ip-masq-agent/compile/desired_state.h"
#include "ip-masq-agent/daemon/desired_state_source.h"
#include "ip-masq-agent/diagnose/explain.h"
#include "ip-masq-agent/nft/guarded_backend.h"
#include "ip-masq-agent/daemon/health_server.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/node/address_monitor.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/conntrack/conntrack_dump.h"
#include "ip-masq-agent/netlink/monitor.h"
#include "ip-masq-agent/nft/nft_text.h"
#include "ip-masq-agent/node/pod_network.h"
#include "ip-masq-agent/base/process_guard.h"
#include "ip-masq-agent/daemon/reconciler.h"
#include "ip-masq-agent/daemon/snat_usage_check.h"
#include "ip-masq-agent/diagnose/guard_over.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "ip-masq-agent/conntrack/snat_usage.h"
#include "ip_masq_agent_version.h"

namespace ipmasq {

namespace {

// --dry-run and --explain read the config once, as the daemon would, and log what it says.
void logWarnings(const std::vector<std::string> &warnings)
{
	for (const std::string &warning : warnings)
		log::warning("{}", warning);
}

// This node's addresses, for --explain: what is local, the outputAddress subnet's address,
// other tables' address-type matches; not known, with a warning, when they cannot be read.
NodeAddresses nodeAddresses()
{
	auto read = readNodeAddresses();
	if (!read)
		log::warning("{}; --explain goes on without this node's addresses (only loopback is "
			     "local, and an outputAddress subnet gives no address)", read.error().message);
	return NodeAddresses::fromRead(read);
}

// A subnet that gives this node no address makes the script masquerade: say why, as the
// daemon does (it also reports not ready then).
void logSubnetsWithoutAddress(const std::vector<SubnetChoice> &subnets)
{
	for (const SubnetChoice &choice : subnets)
		if (!choice.address)
			log::warning("{}: this node has no address in it: its {} traffic is "
				     "masqueraded instead", choice.subnet, familyName(choice.family));
}

// For --explain: a clause on the agent's SNAT usage toward each address, when conntrack
// can be read and the agent's rules translate connections toward it; "" otherwise (a
// read that needs CAP_NET_ADMIN is no part of why an address is or is not masqueraded).
std::vector<std::string> snatUsageClauses(const Ruleset &ruleset, const NodeAddresses &node,
					  const std::vector<Address> &destinations)
{
	std::vector<SnatUsageCounter> counters;
	for (const Address &destination : destinations) {
		counters.emplace_back(snatPlanOf(ruleset), translatedByMasquerade(node));
		counters.back().onlyToward(destination);
	}
	auto dump = netlink::dumpSourceNatEntries([&counters](const ConntrackEntry &entry) {
		for (SnatUsageCounter &counter : counters)
			counter.add(entry);
	});
	std::vector<std::string> clauses(destinations.size());
	if (!dump) {
		log::debug("{}; --explain leaves out the SNAT usage", dump.error().message);
		return clauses;
	}
	for (size_t i = 0; i < destinations.size(); i++)
		clauses[i] = snatUsageClause(counters[i].finish());
	return clauses;
}

} // namespace

int runDryRun(const AgentOptions &options)
{
	const auto state = desiredFromLocation(options.config, options.configFlags, options.ruleset,
					       readNodeAddresses());
	if (!state) {
		log::error("{}", state.error().message);
		return EXIT_FAILURE;
	}
	logWarnings(state->warnings);
	logSubnetsWithoutAddress(state->subnets);

	const Ruleset &ruleset = state->ruleset;
	std::vector<std::string> header{
		fmt::format("ip-masq-agent {} dry run, config: {}", IP_MASQ_AGENT_VERSION, state->origin),
		fmt::format("Replaces table inet {} atomically and touches nothing else.", ruleset.table),
		"Apply by hand with: ip-masq-agent --dry-run | nft -f -"};
	if (!state->discovered.empty())
		header.push_back(fmt::format("Not masqueraded, found on this node (nonMasqueradeDiscovery): {}",
					     state->discovered.size()));
	for (const std::string &range : state->discovered)
		header.push_back("  " + range);
	const Result<std::string> script = renderNftScript(ruleset, header);
	if (!script) {
		log::error("{}", script.error().message);
		return EXIT_FAILURE;
	}
	std::fwrite(script->data(), 1, script->size(), stdout);
	return std::fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

namespace {

// The guard's part of --snat-usage: what its over sets hold now, or why it could not be
// read (said in the text: a failed read is not "nobody is over").
std::string guardOverOf(const Ruleset &ruleset)
{
	if (ruleset.dynamicSets.empty())
		return {};
	auto backend = NetlinkBackend::open();
	if (!backend)
		return fmt::format("\nSNAT guard (snatGuard): its sets could not be read: {}\n", backend.error().message);
	Result<GuardReading> read = (*backend)->readGuard(ruleset.table, ruleset.dynamicSets, kTopGuardOver);
	if (!read)
		return fmt::format("\nSNAT guard (snatGuard): its sets could not be read: {}\n", read.error().message);
	return guardOverText(ruleset, std::move(read->over), read->fill);
}

// The guard's clause of each --explain line: what it limits and what its over sets say
// (read once for all the lines; a failed read is said, never "nobody is over").
std::vector<std::string> guardClauses(const Ruleset &ruleset, const std::vector<Address> &sources,
				      const std::vector<Address> &destinations)
{
	std::optional<std::vector<GuardOverKey>> over;
	std::string why;
	if (!ruleset.dynamicSets.empty()) {
		auto backend = NetlinkBackend::open();
		auto read = backend ? (*backend)->readGuardOver(ruleset.table, ruleset.dynamicSets)
				    : Result<std::vector<GuardOverKey>>(fail(backend.error()));
		if (read)
			over = std::move(*read);
		else
			why = read.error().message;
	}
	std::vector<std::string> clauses;
	for (const Address &destination : destinations)
		clauses.push_back(guardExplainClause(ruleset, destination, sources, over, why));
	return clauses;
}

} // namespace

int runSnatUsage(const AgentOptions &options)
{
	const Result<std::vector<NodeAddress>> read = readNodeAddresses();
	const auto state = desiredFromLocation(options.config, options.configFlags, options.ruleset, read);
	if (!state) {
		log::error("{}", state.error().message);
		return EXIT_FAILURE;
	}
	logWarnings(state->warnings);
	SnatUsageCounter counter(snatPlanOf(state->ruleset),
				 translatedByMasquerade(NodeAddresses::fromRead(read)));
	auto dump = countSourceNatEntries(counter);
	if (!dump) {
		log::error("{}", dump.error().message);
		return EXIT_FAILURE;
	}
	SnatUsage usage = counter.finish();
	if (Status routes = describeClientRoutes(usage); !routes)
		log::debug("{}; the clients' interfaces are left out", routes.error().message);
	const std::string table = snatUsageTable(usage) + guardOverOf(state->ruleset);
	std::fwrite(table.data(), 1, table.size(), stdout);
	return std::fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int runExplain(const AgentOptions &options)
{
	auto read = loadConfig(options.config, options.configFlags);
	if (!read) {
		log::error("{}", read.error().message);
		return EXIT_FAILURE;
	}
	logWarnings(read->warnings);
	const auto loaded = std::optional(withPodNetworkReadOnce(std::move(*read), options.configFlags.enableIpv6));

	ExplainContext context;
	context.enableIpv6 = options.configFlags.enableIpv6;
	context.table = options.ruleset.table;
	context.sources = options.explainSources;
	context.outputInterface = options.explainInterface;
	context.transport = options.explainPort;
	const NodeAddresses node = nodeAddresses();
	context.node = node;
	context.kernel = readKernelView(options.ruleset.table);
	// The agent's own rules as the daemon would make them here: what each line reports,
	// and walked with the other tables' rules.
	context.desired = desiredFromConfig(*loaded, options.config, options.ruleset, node).ruleset;
	context.otherTables = readOtherTablesView(context.desired);
	const std::vector<std::string> lines = explainDestinations(loaded->config, context, options.explain);
	const std::vector<std::string> usage = snatUsageClauses(context.desired, node, options.explain);
	const std::vector<std::string> guard = guardClauses(context.desired, options.explainSources, options.explain);
	for (size_t i = 0; i < lines.size(); i++)
		std::fprintf(stdout, "%s%s%s\n", lines[i].c_str(), i < usage.size() ? usage[i].c_str() : "",
			     guard[i].c_str());
	return std::fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

namespace {

// Fault hooks for the integration tests: commits look as they do to a kernel without
// masquerade fully-random, to exercise the fallback (kernel_features_test.cpp); every
// reading of the pod network's routes fails (pod_network_memory_test.cpp).
constexpr const char *kFaultVariable = "IP_MASQ_AGENT_TEST_FAULT";
constexpr std::string_view kFaultNoFullyRandom = "kernel-without-fully-random";
constexpr std::string_view kFaultRouteDumpFails = "route-dump-fails";

bool faultInjected(std::string_view fault)
{
	const char *value = std::getenv(kFaultVariable);
	return value && value == fault;
}

PodNetwork::RouteOpener routeOpener()
{
	if (!faultInjected(kFaultRouteDumpFails))
		return &PodNetwork::openRoutes;
	return [](RouteFilter filter) {
		auto source = RouteSource::open(std::move(filter));
		if (source)
			source->simulateFailingDumps();
		return source;
	};
}

// What the agent's table holds for each pod network source (its discovered-* sets): read
// by --once and by the daemon when it first follows the pod network, so that a source that
// cannot be read keeps what it had in force. Nothing on a first start.
RangesBySource keptRanges(TableBackend &backend, const std::string &table)
{
	auto read = backend.readTable(table);
	if (!read) {
		log::warning("{}; the pod network is what its sources say now (a source that cannot be "
			     "read has nothing to keep)", read.error().message);
		return {};
	}
	if (!*read)
		return {};
	RangesBySource kept = discoveredInKernel(**read);
	if (kept.size() > 0)
		log::info("pod network: table inet {} holds {} ranges its sources had in force before this start "
			  "(routes {}, flannelSubnetEnv {}, cniConfDir {}): each source keeps its own until it "
			  "reads", table, kept.size(), kept.of(DiscoverySource::routes).size(),
			  kept.of(DiscoverySource::flannel).size(), kept.of(DiscoverySource::cni).size());
	return kept;
}

// --once: read the config, make the kernel hold its ruleset, exit. No loop, no timers, no
// signals blocked; the config is read as the daemon's first look reads it (the write
// guard waits, bounded, for a file held open for writing).
int applyOnce(const AgentOptions &options, TableBackend &backend)
{
	AgentStatus status;
	Reconciler reconciler(backend, Reconciler::Settings{options.ruleset, false, options.config.path},
			      status);
	// The read lease signals SIGIO when a writer opens the file during the read, whose
	// default action would end the process.
	(void)std::signal(SIGIO, SIG_IGN);
	auto content = ConfigSource::readSettled(options.config);
	// A bad config is logged here and fails the reconcile below.
	auto desired = content ? desiredFromReadContent(*content, options.config, options.configFlags,
							options.ruleset, readNodeAddresses(),
							[&] { return keptRanges(backend, options.ruleset.table); })
			       : Result<DesiredState>(fail(content.error()));
	if (desired)
		reconciler.setDesired(std::move(*desired));
	else
		reconciler.setConfigError(desired.error());
	return reconciler.reconcile(SyncTrigger::startup) ? EXIT_SUCCESS : EXIT_FAILURE;
}

// The descriptors the daemon holds besides its health endpoint's sessions: the backend's and
// the two monitors' netlink sockets (nf_tables, addresses), the signalfd, the timerfd, the
// inotify instance and the systemd notify socket, and the pod network's route socket and
// inotify instance, which a config may ask for at any time (9); the health endpoint's epoll,
// eventfd, timerfd and listening socket (4); and a reserve for what it opens for a moment
// (the config file twice, for the read lease and the read, a directory listing, /proc for
// a table owner's name, a netlink socket to read addresses or conntrack's statistics, or
// to follow other commits while the agent reads its table: one of them at a time).
size_t daemonDescriptors(const AgentOptions &options)
{
	const size_t own = 9;
	const size_t health = options.healthAddr.empty() ? 0 : 4 + HealthServer::kMinSessions;
	return own + health + HealthServer::kReservedDescriptors;
}

// Too few descriptors to run at all is an error at start, naming the limit: found later
// it would be a config that cannot be read, or probes that get no answer.
bool enoughDescriptors(const AgentOptions &options)
{
	const size_t needed = daemonDescriptors(options);
	const size_t wanted = needed + (options.healthAddr.empty() ? 0 : HealthServer::kMaxSessions);
	auto room = process::ensureDescriptorRoom(needed, wanted);
	if (!room) {
		log::error("{}", room.error().message);
		return false;
	}
	log::debug("open-files limit {}, {} open", room->limit, room->open);
	return true;
}

// --cleanup: the agent's table deleted, nothing else touched.
int cleanup(NetlinkBackend &backend, const std::string &table)
{
	if (auto removed = backend.remove(table); !removed) {
		log::error("{}", removed.error().message);
		return EXIT_FAILURE;
	}
	log::info("deleted table inet {} (if it existed); nothing else was touched", table);
	return EXIT_SUCCESS;
}

// The test hooks of the daemon's change monitors (netlink/socket.h).
constexpr std::string_view kFaultMonitorsFailWhile = "monitors-fail-while:";

// The health endpoint, or nullptr when --health-addr is empty. A port that cannot be bound
// is fatal: probes would fail forever otherwise, and an exit makes the conflict visible at
// once. (The flag's parser already refused a malformed address; this is the same parse.)
Result<std::unique_ptr<HealthServer>> startHealth(const std::string &healthAddr,
						  const AgentStatus &status)
{
	if (healthAddr.empty())
		return std::unique_ptr<HealthServer>();
	auto address = parseListenAddress(healthAddr);
	if (!address)
		return fail(address.error().withContext("--health-addr: "));
	auto server = HealthServer::start(*address, status);
	if (!server)
		return fail(server.error());
	log::info("serving /healthz, /livez, /readyz, /metrics and /snat-usage on {} (port {})",
		  healthAddr, (*server)->port());
	return server;
}

// The daemon until SIGTERM: the monitor, the loop, the health endpoint.
int runDaemon(const AgentOptions &options, NetlinkBackend &backend)
{
	// Before the first thread: a failure costs address space, never the daemon.
	if (auto reserved = process::reserveLessPerThread(); !reserved)
		log::warning("{}; each thread reserves the default stack and arena",
			     reserved.error().message);
	if (const char *fault = std::getenv(kFaultVariable);
	    fault && std::string_view(fault).starts_with(kFaultMonitorsFailWhile))
		netlink::failMonitorsWhileFileExists(fault + kFaultMonitorsFailWhile.size());
	// The nftables monitor, told to ignore the backend's own commits and to watch only the
	// agent's table; the daemon opens it (and opens it again whenever it fails).
	NftablesMonitor monitor;
	monitor.ignoreChangesFrom(backend.portId());
	monitor.watchOnlyTable(options.ruleset.table);
	backend.quietDuringCommits(&monitor);
	// Out of memory, a sync fails and is retried; the process goes on.
	GuardedBackend guarded(backend);
	const auto readKept = [&guarded, table = options.ruleset.table] { return keptRanges(guarded, table); };
	auto daemon = Daemon::create(DesiredStateSource::open(options.config, options.configFlags, options.ruleset,
								 readKept, routeOpener()), guarded,
				     &monitor, SystemdNotifier::fromEnvironment());
	if (!daemon) {
		log::error("{}", daemon.error().message);
		return EXIT_FAILURE;
	}
	auto health = startHealth(options.healthAddr, (*daemon)->status());
	if (!health) {
		log::error("{}", health.error().message);
		return EXIT_FAILURE;
	}
	return (*daemon)->runGuarded();
}

} // namespace

int runAgent(AgentOptions options, const std::vector<std::string> &effectiveFlags)
{
	const std::string flags = fmt::format("{}", fmt::join(effectiveFlags, " "));
	log::info({{"version", IP_MASQ_AGENT_VERSION}, {"flags", flags}},
		  "ip-masq-agent {} starting; flags: {}", IP_MASQ_AGENT_VERSION, flags);
	if (!options.once && !options.cleanup && !enoughDescriptors(options))
		return EXIT_FAILURE;
	auto backend = NetlinkBackend::open();
	if (!backend) {
		log::error("{}", backend.error().message);
		return EXIT_FAILURE;
	}
	if (options.cleanup)
		return cleanup(**backend, options.ruleset.table);
	// No feature probe here: apply() learns from the first commit what the kernel
	// refuses (backend_features.cpp), which keeps the start fast.
	if (faultInjected(kFaultNoFullyRandom))
		(*backend)->simulateKernelWithoutFullyRandom();
	if (options.once)
		return applyOnce(options, **backend);
	return runDaemon(options, **backend);
}

} // namespace ipmasq
