// SPDX-License-Identifier: Apache-2.0
// SNAT usage: the agent's ranges from its ruleset, the kernel's port rules, the bounded
// aggregation of conntrack entries, and the table.
#include "ip-masq-agent/conntrack/snat_usage.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <linux/netfilter/nf_conntrack_tcp.h>

namespace ipmasq {

namespace {

// FNV-1a over packed bytes: the keys come from the node's own connections, spread by
// destination, translated address and client.
constexpr uint64_t kFnvOffset = 1469598103934665603ULL;
uint64_t fnv1a(uint64_t hash, const uint8_t *bytes, size_t n)
{
	for (size_t i = 0; i < n; i++)
		hash = (hash ^ bytes[i]) * 1099511628211ULL;
	return hash;
}

// Keeps `top` sorted by `before` and at most `limit` long as values are offered one by
// one: a walk of a map keeps its best few without sorting all of it.
template<typename T, typename Before>
void keepTop(std::vector<T> &top, size_t limit, const T &value, const Before &before)
{
	if (top.size() == limit && (top.empty() || !before(value, top.back())))
		return;
	top.insert(std::upper_bound(top.begin(), top.end(), value, before), value);
	if (top.size() > limit)
		top.pop_back();
}

// Network order, as Address::bytes() but without its allocation: this runs for every
// entry of a dump.
std::array<uint8_t, 16> packed(const Address &address)
{
	std::array<uint8_t, 16> out{};
	const size_t n = address.family == Family::ipv4 ? 4 : 16;
	AddressValue value = address.value;
	for (size_t i = n; i-- > 0; value >>= 8)
		out[i] = static_cast<uint8_t>(value);
	return out;
}

Address unpacked(Family family, const std::array<uint8_t, 16> &bytes)
{
	return Address::fromBytes(family, bytes.data());
}

// The kernel's default ranges (nf_nat_l4proto_unique_tuple, when the rule gives none).
PortPool defaultPool(uint16_t sourcePort)
{
	if (sourcePort < 512)
		return {PortPoolKind::below512, {{1, 511}}};
	if (sourcePort < 1024)
		return {PortPoolKind::below1024, {{600, 1023}}};
	return {PortPoolKind::unprivileged, {{1024, 65535}}};
}

bool coversPorts(uint8_t protocol)
{
	return std::find(std::begin(kPortProtocols), std::end(kPortProtocols), protocol) !=
	       std::end(kPortProtocols);
}

// The pool a key names, back from its kind (the ranges of toPorts from the plan).
PortPool poolOfKind(const SnatFamilyPlan *plan, PortPoolKind kind)
{
	switch (kind) {
	case PortPoolKind::toPorts:
		return {kind, plan ? plan->toPorts : std::vector<PortRange>{}};
	case PortPoolKind::below512:
		return defaultPool(0);
	case PortPoolKind::below1024:
		return defaultPool(512);
	case PortPoolKind::unprivileged:
		return defaultPool(1024);
	case PortPoolKind::icmpIds:
		return {kind, {{0, 65535}}};
	}
	return defaultPool(1024);
}

uint64_t addressCount(const AddressRange &range)
{
	const AddressValue span = range.last.value - range.first.value;
	return span >= AddressValue(UINT64_MAX) ? UINT64_MAX : uint64_t(span) + 1;
}

// Highest ratio first, then the most connections; the key's text breaks ties, so that
// the same table always reads the same.
bool busier(const SnatDestination &a, const SnatDestination &b)
{
	if (a.ratio() != b.ratio())
		return a.ratio() > b.ratio();
	if (a.connections != b.connections)
		return a.connections > b.connections;
	return std::tie(a.family, a.protocol, a.destination, a.port, a.translated) <
	       std::tie(b.family, b.protocol, b.destination, b.port, b.translated);
}

std::string percent(double ratio)
{
	return fmt::format("{:.1f}%", ratio * 100);
}

// "1 destination", "3 destinations": a count and its noun, singular for one.
std::string counted(uint64_t count, std::string_view one, std::string_view many)
{
	return fmt::format("{} {}", count, count == 1 ? one : many);
}

} // namespace

std::string protocolName(uint8_t protocol)
{
	switch (protocol) {
	case kProtoIcmp:
		return "icmp";
	case kProtoTcp:
		return "tcp";
	case kProtoUdp:
		return "udp";
	case kProtoDccp:
		return "dccp";
	case kProtoIcmpv6:
		return "icmpv6";
	case kProtoSctp:
		return "sctp";
	case kProtoUdplite:
		return "udplite";
	default:
		return std::to_string(protocol);
	}
}

uint32_t PortPool::size() const
{
	uint32_t total = 0;
	for (const PortRange &range : ranges)
		total += range.size();
	return total;
}

bool PortPool::contains(uint16_t port) const
{
	return std::any_of(ranges.begin(), ranges.end(), [port](const PortRange &range) {
		return port >= range.first && port <= range.last;
	});
}

HoldState holdStateOf(const ConntrackEntry &entry)
{
	if (entry.protocol != kProtoTcp)
		return HoldState::notTcp;
	switch (entry.tcpState.value_or(TCP_CONNTRACK_NONE)) {
	case TCP_CONNTRACK_SYN_SENT:
	case TCP_CONNTRACK_SYN_RECV:
	case TCP_CONNTRACK_ESTABLISHED:
	case TCP_CONNTRACK_SYN_SENT2: // a simultaneous open
		return HoldState::tcpOpen;
	case TCP_CONNTRACK_TIME_WAIT:
		return HoldState::tcpTimeWait;
	default: // closing (FIN_WAIT, CLOSE_WAIT, LAST_ACK, CLOSE), or no state sent
		return HoldState::tcpOther;
	}
}

const char *holdStateLabel(HoldState state)
{
	switch (state) {
	case HoldState::tcpOpen:
		return "tcp_open";
	case HoldState::tcpTimeWait:
		return "tcp_time_wait";
	case HoldState::tcpOther:
		return "tcp_other";
	case HoldState::notTcp:
		return "not_tcp";
	}
	return "not_tcp";
}

uint64_t HoldCounts::total() const
{
	uint64_t sum = 0;
	for (const uint32_t count : byState)
		sum += count;
	return sum;
}

std::string PortPool::toString() const
{
	std::vector<std::string> parts;
	for (const PortRange &range : ranges)
		parts.push_back(range.toString());
	if (kind == PortPoolKind::icmpIds)
		return "ids " + fmt::format("{}", fmt::join(parts, ","));
	return fmt::format("{}", fmt::join(parts, ","));
}

std::optional<std::vector<Address>> translatedByMasquerade(const NodeAddresses &node)
{
	if (!node.known())
		return std::nullopt;
	std::vector<Address> addresses;
	addresses.reserve(node.addresses.size());
	for (const NodeAddress &a : node.addresses)
		addresses.push_back(a.address);
	return addresses;
}

SnatPlan snatPlanOf(const Ruleset &ruleset)
{
	// Per family: whether it reaches the agent's chain at all (without --enable-ipv6 the
	// jump is IPv4's only), its SNAT, and a masquerade that covers it.
	struct FamilyRules {
		bool reaches = false;
		std::optional<SnatFamilyPlan> snat, masquerade;
	} families[2];
	const auto each = [&families](std::optional<Family> only, const auto &note) {
		for (const Family family : {Family::ipv4, Family::ipv6})
			if (!only || *only == family)
				note(families[family == Family::ipv6]);
	};
	const auto addPorts = [](std::optional<SnatFamilyPlan> &plan, std::optional<AddressRange> to,
				 const std::optional<PortRange> &ports) {
		if (!plan)
			plan = SnatFamilyPlan{to, {}};
		if (ports)
			plan->toPorts.push_back(*ports);
	};
	// Every kind decides here (an exhaustive visit): a new one is a compile error until it
	// says whether, and where, it translates.
	for (const Chain &chain : ruleset.chains)
		for (const Rule &rule : chain.rules)
			std::visit(Overloaded{
					   [&](const JumpIfNotLocal &jump) {
						   each(jump.onlyFamily, [](FamilyRules &f) { f.reaches = true; });
					   },
					   [&](const SourceNat &s) {
						   each(s.family, [&](FamilyRules &f) { addPorts(f.snat, s.to, s.toPorts); });
					   },
					   [&](const Masquerade &m) {
						   each(m.onlyFamily, [&](FamilyRules &f) {
							   addPorts(f.masquerade, std::nullopt, m.toPorts);
						   });
					   },
					   // These translate nothing: the packet leaves as it is, or goes on.
					   [](const ReturnIfDestinationInSet &) {},
					   [](const ReturnIfOutputInterfaceInSet &) {},
					   [](const MatchUnlistedSource &) {},
					   // It drops or lets through: what it lets through reaches the NAT rules.
					   [](const GuardLimit &) {},
				   },
				   rule.statement);
	SnatPlan plan;
	for (const Family family : {Family::ipv4, Family::ipv6}) {
		FamilyRules &rules = families[family == Family::ipv6];
		auto &chosen = family == Family::ipv4 ? plan.ipv4 : plan.ipv6;
		// A packet the SNAT translates never reaches a later masquerade.
		if (rules.reaches)
			chosen = rules.snat ? rules.snat : rules.masquerade;
		if (chosen)
			std::sort(chosen->toPorts.begin(), chosen->toPorts.end(),
				  [](const PortRange &a, const PortRange &b) { return a.first < b.first; });
	}
	return plan;
}

std::optional<PortPool> portPoolOf(const SnatFamilyPlan &plan, uint8_t protocol, uint16_t sourcePort)
{
	switch (protocol) {
	case kProtoIcmp:
	case kProtoIcmpv6:
		return poolOfKind(&plan, PortPoolKind::icmpIds);
	case kProtoTcp:
	case kProtoUdp:
	case kProtoSctp:
	case kProtoUdplite:
	case kProtoDccp:
		// The agent's ranged rules match tcp, udp and sctp; the others fall through to
		// its rule without ports.
		if (!plan.toPorts.empty() && coversPorts(protocol))
			return PortPool{PortPoolKind::toPorts, plan.toPorts};
		return defaultPool(sourcePort);
	default:
		return std::nullopt;
	}
}

std::string SnatDestination::destinationText() const
{
	if (protocol == kProtoIcmp || protocol == kProtoIcmpv6)
		return destination.toString();
	if (family == Family::ipv6)
		return fmt::format("[{}]:{}", destination.toString(), port);
	return fmt::format("{}:{}", destination.toString(), port);
}

size_t SnatUsageCounter::KeyHash::operator()(const Key &key) const
{
	uint64_t hash = fnv1a(kFnvOffset, key.translated.data(), key.translated.size());
	hash = fnv1a(hash, key.destination.data(), key.destination.size());
	const uint8_t rest[] = {uint8_t(key.port >> 8), uint8_t(key.port), key.protocol, key.family,
				key.pool};
	return static_cast<size_t>(fnv1a(hash, rest, sizeof(rest)));
}

size_t SnatUsageCounter::ClientKeyHash::operator()(const ClientKey &key) const
{
	const uint8_t index[] = {uint8_t(key.key >> 24), uint8_t(key.key >> 16), uint8_t(key.key >> 8),
				 uint8_t(key.key)};
	return static_cast<size_t>(fnv1a(fnv1a(kFnvOffset, index, sizeof(index)), key.client.data(),
					 key.client.size()));
}

SnatUsageCounter::SnatUsageCounter(SnatPlan plan, std::optional<std::vector<Address>> nodeAddresses,
				   Limits limits)
	: plan_(std::move(plan)), nodeAddresses_(std::move(nodeAddresses)), limits_(limits)
{
	if (nodeAddresses_)
		std::sort(nodeAddresses_->begin(), nodeAddresses_->end());
}

SnatUsageCounter::SnatUsageCounter(SnatPlan plan, std::optional<std::vector<Address>> nodeAddresses)
	: SnatUsageCounter(std::move(plan), std::move(nodeAddresses), Limits{})
{
}

bool SnatUsageCounter::isAgents(const ConntrackEntry &entry, const SnatFamilyPlan &plan) const
{
	if (plan.to)
		return entry.translatedSource.family == plan.to->first.family &&
		       entry.translatedSource >= plan.to->first && entry.translatedSource <= plan.to->last;
	// Masquerade: the node's address (of the interface the packet left through).
	return !nodeAddresses_ || std::binary_search(nodeAddresses_->begin(), nodeAddresses_->end(),
						      entry.translatedSource);
}

SnatUsageCounter::Key SnatUsageCounter::keyOf(const ConntrackEntry &entry, PortPoolKind pool) const
{
	Key key;
	key.translated = packed(entry.translatedSource);
	key.destination = packed(entry.destination);
	key.port = (entry.protocol == kProtoIcmp || entry.protocol == kProtoIcmpv6) ? 0
										  : entry.destinationPort;
	key.protocol = entry.protocol;
	key.family = entry.family == Family::ipv6;
	key.pool = static_cast<uint8_t>(pool);
	return key;
}

void SnatUsageCounter::countAgents(const Key &key, const ConntrackEntry &entry)
{
	connections_++;
	auto it = agents_.find(key);
	if (it == agents_.end()) {
		if (agents_.size() >= limits_.maxDestinations) {
			leftOut_++;
			return;
		}
		it = agents_.emplace(key, KeyCounts{0, static_cast<uint32_t>(agents_.size()), 0}).first;
	}
	KeyCounts &counts = it->second;
	counts.connections++;
	// Its client: the pair's counts by state, or, past the bound, counted as unattributed.
	const ClientKey pair{counts.index, packed(entry.originalSource)};
	auto held = limits_.maxClientPairs ? clients_.find(pair) : clients_.end();
	if (held == clients_.end()) {
		if (clients_.size() >= limits_.maxClientPairs) {
			counts.unattributed++;
			unattributedClients_++;
			return;
		}
		held = clients_.emplace(pair, HoldCounts{}).first;
	}
	held->second[holdStateOf(entry)]++;
}

void SnatUsageCounter::countOthers(const Key &key)
{
	others_connections_++;
	if (auto it = others_.find(key); it != others_.end()) {
		it->second++;
		return;
	}
	if (others_.size() >= limits_.maxOtherDestinations) {
		othersLeftOut_++;
		return;
	}
	others_.emplace(key, 1);
}

void SnatUsageCounter::add(const ConntrackEntry &entry)
{
	entries_++;
	if (!entry.sourceNat)
		return; // the kernel did not filter: not translated, holds no port of the agent's
	if (only_ && entry.destination != *only_)
		return;
	const std::optional<SnatFamilyPlan> &plan = plan_.of(entry.family);
	const SnatFamilyPlan none;
	std::optional<PortPool> pool = portPoolOf(plan ? *plan : none, entry.protocol,
						  entry.originalSourcePort);
	const bool agents = plan && pool && isAgents(entry, *plan) && pool->contains(entry.translatedPort);
	// A protocol without translated ports has no pool to run out of: the default kind.
	const Key key = keyOf(entry, pool ? pool->kind : PortPool{}.kind);
	if (agents)
		countAgents(key, entry);
	else
		countOthers(key);
}

SnatUsage SnatUsageCounter::finish() const
{
	SnatUsage usage;
	usage.entriesRead = entries_;
	usage.kernelFiltered = kernelFiltered_;
	usage.connections = connections_;
	usage.leftOut = leftOut_;
	usage.unattributedClients = unattributedClients_;
	usage.otherConnections = others_connections_;
	usage.destinations = agents_.size();
	usage.clientsPerDestination = limits_.topClients;
	// The top `limits_.top`, kept sorted while the map is walked once.
	for (const auto &[key, counts] : agents_) {
		SnatDestination d = destinationOf(key, counts.connections);
		const double ratio = d.ratio();
		usage.maxRatio = std::max(usage.maxRatio, ratio);
		usage.aboveWarning += ratio >= SnatUsage::kWarningRatio;
		usage.exhausted += ratio >= 1.0;
		keepTop(usage.top, limits_.top, d, busier);
	}
	const auto moreConnections = [](const SnatDestination &a, const SnatDestination &b) {
		if (a.connections != b.connections)
			return a.connections > b.connections;
		return std::tie(a.family, a.protocol, a.destination, a.port, a.translated) <
		       std::tie(b.family, b.protocol, b.destination, b.port, b.translated);
	};
	for (const auto &[key, connections] : others_)
		keepTop(usage.otherTop, limits_.top, destinationOf(key, connections), moreConnections);
	usage.totals = totalsOf(usage.top);
	return usage;
}

SnatDestination SnatUsageCounter::destinationOf(const Key &key, uint32_t connections) const
{
	SnatDestination d;
	d.family = key.family ? Family::ipv6 : Family::ipv4;
	d.protocol = key.protocol;
	d.translated = unpacked(d.family, key.translated);
	d.destination = unpacked(d.family, key.destination);
	d.port = key.port;
	const std::optional<SnatFamilyPlan> &plan = plan_.of(d.family);
	d.pool = poolOfKind(plan ? &*plan : nullptr, static_cast<PortPoolKind>(key.pool));
	d.connections = connections;
	return d;
}

std::vector<SnatDestinationTotal> SnatUsageCounter::totalsOf(const std::vector<SnatDestination> &top) const
{
	std::vector<SnatDestinationTotal> totals;
	for (size_t i = 0; i < top.size(); i++) {
		const SnatDestination &d = top[i];
		const bool seen = std::any_of(totals.begin(), totals.end(), [&](const auto &t) {
			return t.family == d.family && t.protocol == d.protocol &&
			       t.destination == d.destination && t.port == d.port && t.pool == d.pool.kind;
		});
		if (seen)
			continue;
		SnatDestinationTotal total;
		total.family = d.family;
		total.protocol = d.protocol;
		total.destination = d.destination;
		total.port = d.port;
		total.pool = d.pool.kind;
		const std::optional<SnatFamilyPlan> &plan = plan_.of(d.family);
		total.addresses = plan && plan->to ? addressCount(*plan->to) : 1;
		total.poolSize = d.pool.size();
		total.available = total.addresses * total.poolSize;
		total.rank = i + 1;
		totals.push_back(total);
	}
	// One more walk of the map, summing only the keys of those few destinations and
	// noting, by each key's index, the total it belongs to for the walk of the clients.
	std::vector<int32_t> totalOf(agents_.size(), -1);
	std::vector<const Key *> keyOf(agents_.size(), nullptr);
	for (const auto &[key, counts] : agents_)
		for (size_t t = 0; t < totals.size(); t++) {
			SnatDestinationTotal &total = totals[t];
			if (total.protocol != key.protocol || (total.family == Family::ipv6) != key.family ||
			    packed(total.destination) != key.destination || total.port != key.port ||
			    static_cast<uint8_t>(total.pool) != key.pool)
				continue;
			total.connections += counts.connections;
			total.addressesInUse++;
			total.holders.unattributed += counts.unattributed;
			totalOf[counts.index] = static_cast<int32_t>(t);
			keyOf[counts.index] = &key;
			break;
		}
	holdersOf(totals, totalOf, keyOf);
	return totals;
}

void SnatUsageCounter::holdersOf(std::vector<SnatDestinationTotal> &totals,
				 const std::vector<int32_t> &totalOf,
				 const std::vector<const Key *> &keyOf) const
{
	// The most entries first; the addresses break ties, so that the same table always
	// reads the same.
	const auto holdsMore = [](const SnatClient &a, const SnatClient &b) {
		if (a.held.total() != b.held.total())
			return a.held.total() > b.held.total();
		return std::tie(a.address, a.translated) < std::tie(b.address, b.translated);
	};
	std::vector<uint64_t> held(totals.size(), 0);
	for (const auto &[pair, counts] : clients_) {
		const int32_t t = totalOf[pair.key];
		if (t < 0)
			continue;
		SnatDestinationTotal &total = totals[static_cast<size_t>(t)];
		total.holders.clients++;
		held[static_cast<size_t>(t)] += counts.total();
		SnatClient client;
		client.address = unpacked(total.family, pair.client);
		client.translated = unpacked(total.family, keyOf[pair.key]->translated);
		client.held = counts;
		client.pool = total.poolSize;
		keepTop(total.holders.top, limits_.topClients, client, holdsMore);
	}
	for (size_t t = 0; t < totals.size(); t++) {
		SnatHolders &holders = totals[t].holders;
		uint64_t shown = 0;
		for (const SnatClient &client : holders.top)
			shown += client.held.total();
		holders.clientsLeftOut = holders.clients - holders.top.size();
		holders.connectionsLeftOut = held[t] - shown;
	}
}

namespace {

// One destination's holders: a line that names it, a row per client (TCP's by state), then
// what was left out.
std::string holdersBlock(const SnatUsage &usage, const SnatDestinationTotal &t)
{
	SnatDestination d;
	d.family = t.family;
	d.protocol = t.protocol;
	d.destination = t.destination;
	d.port = t.port;
	const SnatHolders &h = t.holders;
	const bool tcp = t.protocol == kProtoTcp;
	const bool translated = t.addressesInUse > 1; // name each row's translated address
	const std::string where =
		translated ? fmt::format("{} of the agent's addresses ({} ports each)", t.addressesInUse,
					 t.poolSize)
			   : fmt::format("{} ({} ports)", usage.top[t.rank - 1].translated.toString(), t.poolSize);
	std::string out = fmt::format("{} {}, translated to {}: {} from {}\n", protocolName(t.protocol),
				      d.destinationText(), where,
				      counted(t.connections, "connection", "connections"),
				      counted(h.clients, "client", "clients"));
	const auto row = [&](std::string_view share, std::string_view held,
			     const std::array<std::string, 3> &states, std::string_view client,
			     std::string_view source, std::string_view reached) {
		std::string line = fmt::format("{:>7} {:>7}", share, held);
		if (tcp)
			line += fmt::format(" {:>7} {:>9} {:>7}", states[0], states[1], states[2]);
		line += fmt::format("  {:<39}", client);
		if (translated)
			line += fmt::format(" {:<39}", source);
		return line + fmt::format(" {}\n", reached);
	};
	out += row("SHARE", "HELD", {"OPEN", "TIME_WAIT", "OTHER"}, "CLIENT", "TRANSLATED SOURCE",
		   "REACHED THROUGH");
	for (const SnatClient &c : h.top)
		out += row(percent(c.share()), std::to_string(c.held.total()),
			   {std::to_string(c.held[HoldState::tcpOpen]),
			    std::to_string(c.held[HoldState::tcpTimeWait]),
			    std::to_string(c.held[HoldState::tcpOther])},
			   c.address.toString(), c.translated.toString(),
			   c.reachedThrough.empty() ? "-" : c.reachedThrough);
	if (h.clientsLeftOut)
		out += fmt::format("{:>15}  and {} more {} with {}, left out (at most {} shown)\n", "",
				   h.clientsLeftOut, h.clientsLeftOut == 1 ? "client" : "clients",
				   counted(h.connectionsLeftOut, "connection", "connections"),
				   usage.clientsPerDestination);
	if (h.unattributed)
		out += fmt::format("{:>15}  and {} whose client the read did not keep (beyond its "
				   "bound of client and destination pairs)\n",
				   "", counted(h.unattributed, "connection", "connections"));
	return out;
}

// Who holds the ports of each destination of the top.
std::string holdersTable(const SnatUsage &usage)
{
	if (usage.totals.empty())
		return {};
	std::string out = fmt::format(
		"\nWho holds the ports: each destination's clients (a connection's original source: a "
		"pod, or this node for its own and hostNetwork traffic), at most {}, the most entries "
		"first; SHARE is of the ports of the client's translated address.\n",
		usage.clientsPerDestination);
	for (const SnatDestinationTotal &t : usage.totals)
		out += holdersBlock(usage, t);
	return out;
}

} // namespace

std::string snatUsageTable(const SnatUsage &usage)
{
	std::string out;
	if (usage.top.empty()) {
		out += "No connection that the agent's rules source-NATed is in conntrack now.\n";
	} else {
		out += fmt::format("{:>7} {:>7} {:>7}  {:<7} {:<45} {:<39} {}\n", "USAGE", "IN USE",
				   "PORTS", "PROTO", "DESTINATION", "TRANSLATED SOURCE", "PORT RANGE");
		for (const SnatDestination &d : usage.top)
			out += fmt::format("{:>7} {:>7} {:>7}  {:<7} {:<45} {:<39} {}\n",
					   percent(d.ratio()), d.connections, d.available(),
					   protocolName(d.protocol), d.destinationText(),
					   d.translated.toString(), d.pool.toString());
		for (const SnatDestinationTotal &t : usage.totals) {
			if (t.addresses < 2)
				continue;
			SnatDestination d;
			d.family = t.family;
			d.protocol = t.protocol;
			d.destination = t.destination;
			d.port = t.port;
			out += fmt::format("{} {} over the agent's {} addresses: {} from {} of "
					   "them, {} ports in all ({}); each client gets one address\n",
					   protocolName(t.protocol), d.destinationText(), t.addresses,
					   counted(t.connections, "connection", "connections"),
					   t.addressesInUse, t.available,
					   percent(t.available ? double(t.connections) / t.available : 1.0));
		}
	}
	out += fmt::format("{} of the agent's rules toward {} (per translated address); highest "
			   "usage {}; {} at or above {:.0f}%, {} exhausted.\n",
			   counted(usage.connections, "connection", "connections"),
			   counted(usage.destinations, "destination", "destinations"), percent(usage.maxRatio),
			   usage.aboveWarning, SnatUsage::kWarningRatio * 100, usage.exhausted);
	if (usage.entriesRead == 0)
		out += "Read no conntrack entry.\n";
	else
		out += fmt::format("Read {} ({}).\n",
				   counted(usage.entriesRead, "conntrack entry", "conntrack entries"),
				   usage.kernelFiltered ? "the kernel sent the source-NATed ones only"
							: "every entry: this kernel does not filter a dump "
							  "by status, so they were filtered here");
	if (usage.leftOut)
		out += fmt::format("Incomplete: {} toward destinations beyond the first {} {} counted "
				   "but not attributed.\n",
				   counted(usage.leftOut, "connection", "connections"), usage.destinations,
				   usage.leftOut == 1 ? "was" : "were");
	out += holdersTable(usage);
	if (usage.otherConnections) {
		out += fmt::format("Not counted above: {} source-NATed connections that the agent's "
				   "rules did not make (another address, or ports outside its ranges):\n",
				   usage.otherConnections);
		for (const SnatDestination &d : usage.otherTop)
			out += fmt::format("{:>15} {:>7}  {:<7} {:<45} {}\n", "", d.connections,
					   protocolName(d.protocol), d.destinationText(),
					   d.translated.toString());
	}
	return out;
}

std::string snatUsageClause(const SnatUsage &usage)
{
	if (usage.top.empty())
		return {};
	std::vector<std::string> parts;
	for (const SnatDestination &d : usage.top) {
		const bool icmp = d.protocol == kProtoIcmp || d.protocol == kProtoIcmpv6;
		parts.push_back(fmt::format("{}{} from {}: {} of {} ({})", protocolName(d.protocol),
					    icmp ? "" : fmt::format(" port {}", d.port),
					    d.translated.toString(), d.connections, d.available(),
					    percent(d.ratio())));
	}
	std::string more;
	if (usage.destinations > usage.top.size())
		more = fmt::format(" (and {} more, less used)", usage.destinations - usage.top.size());
	return fmt::format("; SNAT ports in use toward it now: {}{}", fmt::join(parts, "; "), more);
}

Result<netlink::ConntrackDump> countSourceNatEntries(SnatUsageCounter &counter)
{
	auto dump = netlink::dumpSourceNatEntries([&counter](const ConntrackEntry &entry) { counter.add(entry); });
	if (dump)
		counter.kernelFiltered(dump->kernelFiltered);
	return dump;
}

} // namespace ipmasq
