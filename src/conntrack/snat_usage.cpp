// SPDX-License-Identifier: Apache-2.0
// SNAT usage: the agent's ranges from its ruleset, the kernel's port rules, the bounded
// aggregation of conntrack entries, and the table.
#include "ip-masq-agent/conntrack/snat_usage.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

namespace ipmasq {

namespace {

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
	// FNV-1a over the packed bytes: the keys come from the node's own connections,
	// spread by destination and translated address.
	uint64_t hash = 1469598103934665603ULL;
	const auto mix = [&hash](const uint8_t *bytes, size_t n) {
		for (size_t i = 0; i < n; i++)
			hash = (hash ^ bytes[i]) * 1099511628211ULL;
	};
	mix(key.translated.data(), key.translated.size());
	mix(key.destination.data(), key.destination.size());
	const uint8_t rest[] = {uint8_t(key.port >> 8), uint8_t(key.port), key.protocol, key.family,
				key.pool};
	mix(rest, sizeof(rest));
	return static_cast<size_t>(hash);
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

void SnatUsageCounter::count(std::unordered_map<Key, uint32_t, KeyHash> &map, size_t limit,
			     const Key &key, uint64_t &overflow)
{
	if (auto it = map.find(key); it != map.end()) {
		it->second++;
		return;
	}
	if (map.size() >= limit) {
		overflow++;
		return;
	}
	map.emplace(key, 1);
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
	if (!pool) // not port-translated: no pool to run out of
		pool = PortPool{};
	Key key;
	key.translated = packed(entry.translatedSource);
	key.destination = packed(entry.destination);
	key.port = (entry.protocol == kProtoIcmp || entry.protocol == kProtoIcmpv6) ? 0
										  : entry.destinationPort;
	key.protocol = entry.protocol;
	key.family = entry.family == Family::ipv6;
	key.pool = static_cast<uint8_t>(pool->kind);
	if (agents) {
		connections_++;
		count(agents_, limits_.maxDestinations, key, leftOut_);
	} else {
		others_connections_++;
		count(others_, limits_.maxOtherDestinations, key, othersLeftOut_);
	}
}

SnatUsage SnatUsageCounter::finish() const
{
	SnatUsage usage;
	usage.entriesRead = entries_;
	usage.kernelFiltered = kernelFiltered_;
	usage.connections = connections_;
	usage.leftOut = leftOut_;
	usage.otherConnections = others_connections_;
	usage.destinations = agents_.size();
	// The top `limits_.top`, kept sorted while the map is walked once.
	const auto keepTop = [&](std::vector<SnatDestination> &top, const SnatDestination &d,
				 const auto &before) {
		if (top.size() == limits_.top && (top.empty() || !before(d, top.back())))
			return;
		top.insert(std::upper_bound(top.begin(), top.end(), d, before), d);
		if (top.size() > limits_.top)
			top.pop_back();
	};
	for (const auto &[key, connections] : agents_) {
		SnatDestination d = destinationOf(key, connections);
		const double ratio = d.ratio();
		usage.maxRatio = std::max(usage.maxRatio, ratio);
		usage.aboveWarning += ratio >= SnatUsage::kWarningRatio;
		usage.exhausted += ratio >= 1.0;
		keepTop(usage.top, d, busier);
	}
	const auto moreConnections = [](const SnatDestination &a, const SnatDestination &b) {
		if (a.connections != b.connections)
			return a.connections > b.connections;
		return std::tie(a.family, a.protocol, a.destination, a.port, a.translated) <
		       std::tie(b.family, b.protocol, b.destination, b.port, b.translated);
	};
	for (const auto &[key, connections] : others_)
		keepTop(usage.otherTop, destinationOf(key, connections), moreConnections);
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
	// One more walk of the map, summing only the keys of those few destinations.
	std::vector<SnatDestinationTotal> totals;
	for (const SnatDestination &d : top) {
		const bool seen = std::any_of(totals.begin(), totals.end(), [&](const auto &t) {
			return t.family == d.family && t.protocol == d.protocol &&
			       t.destination == d.destination && t.port == d.port && t.pool == d.pool.kind;
		});
		if (seen)
			continue;
		SnatDestinationTotal total{d.family, d.protocol, d.destination, d.port, d.pool.kind};
		const std::optional<SnatFamilyPlan> &plan = plan_.of(d.family);
		total.addresses = plan && plan->to ? addressCount(*plan->to) : 1;
		total.available = total.addresses * d.pool.size();
		totals.push_back(total);
	}
	for (const auto &[key, connections] : agents_)
		for (SnatDestinationTotal &total : totals)
			if (total.protocol == key.protocol && (total.family == Family::ipv6) == key.family &&
			    packed(total.destination) == key.destination && total.port == key.port &&
			    static_cast<uint8_t>(total.pool) == key.pool) {
				total.connections += connections;
				total.addressesInUse++;
			}
	return totals;
}

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
