// SPDX-License-Identifier: Apache-2.0
// The mapping between config + flags and the desired ruleset, in both directions.
#include "ip-masq-agent/compile/ruleset_mapping.h"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/config/policy.h"

namespace ipmasq {

namespace {

bool hasFamily(const std::vector<Prefix> &prefixes, Family family)
{
	return std::any_of(prefixes.begin(), prefixes.end(),
			   [family](const Prefix &p) { return p.network.family == family; });
}

// What a destination set's comment records of the config that made it: whether the set
// holds link-local (not masqLinkLocal) and whether masqueradeCIDRs cut holes in it. The
// comment is written from these and read back into them (destinationSetTraits), which is
// how adoption knows them.
struct DestinationSetTraits {
	bool linkLocal;
	bool exceptions;
};

std::string destinationSetComment(Family family, DestinationSetTraits traits)
{
	return fmt::format("{} destinations not masqueraded: nonMasqueradeCIDRs{}{}",
			   familyName(family), traits.linkLocal ? " and link-local" : "",
			   traits.exceptions ? ", less masqueradeCIDRs" : "");
}

// The traits whose comment this is; nullopt for a comment the agent never writes.
std::optional<DestinationSetTraits> destinationSetTraits(Family family, const std::string &comment)
{
	for (const bool linkLocal : {true, false})
		for (const bool exceptions : {false, true})
			if (comment == destinationSetComment(family, {linkLocal, exceptions}))
				return DestinationSetTraits{linkLocal, exceptions};
	return std::nullopt;
}

std::string sourceSetComment(Family family)
{
	return fmt::format("{} sources masqueraded: masqueradeSourceCIDRs", familyName(family));
}

// The kernel sees the resolved result: one set, one lookup per packet, however the
// exceptions nest (policy.h).
AddressSet nonMasqueradeSet(Family family, const Config &config)
{
	const DestinationSetTraits traits{!config.masqueradesLinkLocal(family),
					  hasFamily(config.masqueradeCIDRs, family)};
	return AddressSet{destinationSetName(family), resolveNonMasquerade(config, family),
			  destinationSetComment(family, traits)};
}

// Only sources in this set are masqueraded (masqueradeSourceCIDRs of one family).
AddressSet sourceSet(Family family, const Config &config)
{
	return AddressSet{sourceSetName(family), masqueradeSources(config, family),
			  sourceSetComment(family)};
}

// The discovered-* sets: per source of nonMasqueradeDiscovery and family, the ranges the
// source has in force (held-down ones included), merged per source. No rule refers to them,
// so a packet never pays for them: they are the pod network's memory across restarts (a
// merged nomasq set cannot say which source held what), read back by discoveredInKernel.
const char *discoveredSetSource(DiscoverySource source)
{
	switch (source) {
	case DiscoverySource::routes: return "routes";
	case DiscoverySource::flannel: return "flannel";
	case DiscoverySource::cni: return "cni";
	}
	return "";
}

std::string discoveredSetName(DiscoverySource source, Family family)
{
	return fmt::format("discovered-{}-{}", discoveredSetSource(source), family == Family::ipv4 ? "v4" : "v6");
}

std::string discoveredSetComment(DiscoverySource source, Family family)
{
	return fmt::format("{} ranges in force from {} (nonMasqueradeDiscovery): kept across restarts, no "
			   "rule uses it", familyName(family), discoverySourceName(source));
}

// The discovered-* sets the section's sources make, in the sources' order.
void addDiscoveredSets(Ruleset &ruleset, const Config &config, const std::vector<Family> &families)
{
	if (!config.nonMasqueradeDiscovery)
		return;
	for (const DiscoverySource source : kAllDiscoverySources)
		if (config.nonMasqueradeDiscovery->names(source))
			for (const Family family : families)
				ruleset.sets.push_back(AddressSet{
					discoveredSetName(source, family),
					IntervalSet::fromPrefixes(family, config.discoveredBySource.of(source)),
					discoveredSetComment(source, family)});
}

// The discovered-* set `set` is, if it is one: its source.
std::optional<DiscoverySource> discoveredSetOf(const AddressSet &set)
{
	for (const DiscoverySource source : kAllDiscoverySources)
		if (!set.interfaceNames && set.name == discoveredSetName(source, set.family()) &&
		    set.comment == discoveredSetComment(source, set.family()))
			return source;
	return std::nullopt;
}

// For adoption: a section in `config` that names `source` (what it names is a placeholder:
// only which sources there are shapes the table).
void namePlaceholderSource(Config &config, DiscoverySource source)
{
	if (!config.nonMasqueradeDiscovery)
		config.nonMasqueradeDiscovery.emplace();
	NonMasqueradeDiscovery &section = *config.nonMasqueradeDiscovery;
	const DiscoveryPath placeholder{"/placeholder", {}};
	switch (source) {
	case DiscoverySource::routes: section.routeProtocols = {RouteProtocol{}}; break;
	case DiscoverySource::flannel: section.flannelSubnetEnv = placeholder; break;
	case DiscoverySource::cni: section.cniConfDir = placeholder; break;
	}
}

// The base chain's jumps: one for every family at once (or IPv4 only) as upstream, or,
// when masqueradeSourceCIDRs restricts a family, one per family, the restricted ones
// matching their source set. Their comments do not embed the chain's name, so they do
// not lower the longest --masq-chain that fits.
void addJumpRules(Chain &base, const std::vector<Family> &families, const Ruleset &ruleset,
		  const RulesetOptions &options, const std::string &outputInterfaceSet)
{
	const auto sourceSetOf = [&ruleset](Family family) {
		return ruleset.findSet(sourceSetName(family));
	};
	const bool restricted = std::any_of(families.begin(), families.end(), sourceSetOf);
	if (!restricted) {
		base.rules.push_back(Rule{
			JumpIfNotLocal{options.enableIpv6 ? std::nullopt : std::optional(Family::ipv4),
				       options.masqChain, {}, outputInterfaceSet},
			fmt::format("non-local destinations go through {}", options.masqChain)});
		return;
	}
	for (const Family family : families) {
		if (const AddressSet *sources = sourceSetOf(family))
			base.rules.push_back(Rule{
				JumpIfNotLocal{family, options.masqChain, sources->name,
					       outputInterfaceSet},
				fmt::format("{} sources in masqueradeSourceCIDRs, to non-local "
					    "destinations", familyName(family))});
		else
			base.rules.push_back(Rule{
				JumpIfNotLocal{family, options.masqChain, {}, outputInterfaceSet},
				fmt::format("every {} source (masqueradeSourceCIDRs lists no {}), to "
					    "non-local destinations", familyName(family), familyName(family))});
	}
}

// Output interfaces as a set of interface keys (egress.h): each name or wildcard a range.
AddressSet interfaceSet(const char *name, const std::vector<InterfacePattern> &patterns,
			std::string comment)
{
	std::vector<AddressRange> ranges;
	ranges.reserve(patterns.size());
	for (const InterfacePattern &pattern : patterns)
		ranges.push_back(interfaceKeyRange(pattern));
	return AddressSet{name, IntervalSet::fromRanges(Family::ipv6, std::move(ranges)),
			  std::move(comment), true};
}

// The NAT rules of one target (masquerade, or SNAT to an address of a family), spread
// over --to-ports as upstream does with "-m statistic --probability": rule i takes
// size_i of the flows still undecided, so every range gets exactly size_i / total of all
// flows. The last rule, without ports, takes the rest. `make` builds the statement for a
// port range and sample; `who` starts the port rules' comments.
template<typename Make>
void addPortCascade(Chain &chain, const RulesetOptions &options, std::string_view who,
		    const Make &make, std::string lastComment, const std::string &counter)
{
	uint32_t remaining = 0;
	for (const PortRange &range : options.toPorts)
		remaining += range.size();
	const uint32_t total = remaining;
	for (const PortRange &range : options.toPorts) {
		std::optional<RandomSample> sample;
		if (range.size() != remaining)
			sample = RandomSample{remaining, range.size()};
		chain.rules.push_back(Rule{make(range, sample),
					   fmt::format("{}tcp, udp and sctp get source ports {} ({} of {} "
						       "ports)", who, range.toString(), range.size(),
						       total),
					   counter});
		remaining -= range.size();
	}
	chain.rules.push_back(Rule{make(std::nullopt, std::nullopt), std::move(lastComment), counter});
}

// The table's named counters, added as the rules that count into them are made
// (--connection-counters; none without it).
class CounterBook
{
public:
	CounterBook(Ruleset &ruleset, bool enabled) : ruleset_(ruleset), enabled_(enabled) {}

	bool enabled() const { return enabled_; }

	// The name of the counter of `label` for a rule to count into ("" when counters are
	// off), declared on first use with a comment that says what it counts.
	std::string use(const CounterLabel &label, std::string_view what)
	{
		if (!enabled_)
			return {};
		std::string name = counterName(label);
		for (const NamedCounter &counter : ruleset_.counters)
			if (counter.name == name)
				return name;
		ruleset_.counters.push_back(NamedCounter{
			name, label, fmt::format("{} connections {}", familyName(label.family), what)});
		return name;
	}

private:
	Ruleset &ruleset_;
	bool enabled_;
};

// The last SNAT rule's comment says which form of outputAddress made it, and for a subnet
// which one: the kernel's rule holds only the address, and adoption reads the rest back
// from here (snatFormOf).
std::string snatComment(Family family, const OutputAddress &address)
{
	if (address.form == OutputAddress::Form::subnet)
		return fmt::format("{} outbound traffic is SNATed to this node's address in {} ({})",
				   familyName(family), address.toString(), outputAddressKey(family));
	return fmt::format("{} outbound traffic is SNATed to {}", familyName(family),
			   outputAddressKey(family));
}

// The reverse of snatComment for a rule that SNATs to `to`: the outputAddress that made
// it, and for a subnet this node's address in it; nullopt for a comment the agent does
// not write.
struct SnatForm {
	OutputAddress address;
	std::optional<Address> nodeAddress;
};

std::optional<SnatForm> snatFormOf(Family family, const AddressRange &to, const std::string &comment)
{
	if (comment == fmt::format("{} outbound traffic is SNATed to {}", familyName(family),
				   outputAddressKey(family))) {
		OutputAddress address;
		address.form = to.first == to.last ? OutputAddress::Form::address
						   : OutputAddress::Form::range;
		address.range = to;
		return SnatForm{address, std::nullopt};
	}
	const std::string head = fmt::format("{} outbound traffic is SNATed to this node's address in ",
					     familyName(family));
	const std::string tail = fmt::format(" ({})", outputAddressKey(family));
	if (!comment.starts_with(head) || !comment.ends_with(tail) || to.first != to.last ||
	    comment.size() < head.size() + tail.size())
		return std::nullopt;
	auto subnet = parseOutputAddress(
		std::string_view(comment).substr(head.size(), comment.size() - head.size() - tail.size()));
	if (!subnet || subnet->form != OutputAddress::Form::subnet || subnet->family() != family)
		return std::nullopt;
	return SnatForm{*subnet, to.first};
}

// Where a family's traffic is source-NATed: outputAddress's address or range, this node's
// address in its subnet, or nowhere (masquerade: no outputAddress, or no address of this
// node in the subnet).
std::optional<AddressRange> snatTarget(const Config &config, Family family,
				       const SubnetAddresses &subnet)
{
	const std::optional<OutputAddress> &address = config.outputAddressOf(family);
	if (!address)
		return std::nullopt;
	if (address->form != OutputAddress::Form::subnet)
		return address->range;
	if (const std::optional<Address> &own = subnet.of(family))
		return AddressRange{*own, *own};
	return std::nullopt;
}

// nonMasqueradeInterfaces: one rule, or one per family when a counter per family counts.
void addInterfaceReturns(Chain &chain, const std::vector<Family> &families, CounterBook &counters)
{
	const std::string comment =
		fmt::format("{} is not subject to masquerade", kNonMasqueradeInterfaceSetName);
	const auto counter = [&](Family family) {
		return counters.use({family, Decision::notMasqueraded, DecisionReason::interface},
				    "not masqueraded: output interface in nonMasqueradeInterfaces");
	};
	if (!counters.enabled() || families.size() == 1) {
		chain.rules.push_back(Rule{ReturnIfOutputInterfaceInSet{kNonMasqueradeInterfaceSetName},
					   comment, counter(families.front())});
		return;
	}
	for (const Family family : families)
		chain.rules.push_back(Rule{ReturnIfOutputInterfaceInSet{kNonMasqueradeInterfaceSetName, family},
					   comment, counter(family)});
}

// What reaches the end of the agent's chain is source-NATed: for each family with an SNAT
// target, to it (an inet chain's "snat ip" leaves IPv6 to the next rule, and the other
// way round), then masquerade for the families left, if any. With counters, and both
// families in the chain, each rule is limited to its family: a counter before the NAT
// would count the other family's packets too, which pass through it.
void addNatRules(Chain &chain, const Config &config, const std::vector<Family> &families,
		 const RulesetOptions &options, const SubnetAddresses &subnet,
		 CounterBook &counters)
{
	const bool perFamily = counters.enabled() && families.size() > 1;
	std::vector<Family> masquerading;
	for (const Family family : families) {
		const std::optional<AddressRange> target = snatTarget(config, family, subnet);
		if (!target) {
			masquerading.push_back(family);
			continue;
		}
		addPortCascade(
			chain, options, fmt::format("{} ", familyName(family)),
			[&](std::optional<PortRange> ports, std::optional<RandomSample> sample) {
				return SourceNat{family, *target, ports, sample, options.randomFully,
						 perFamily};
			},
			snatComment(family, *config.outputAddressOf(family)),
			counters.use({family, Decision::snat, DecisionReason::none},
				     fmt::format("SNATed to {}", outputAddressKey(family))));
	}
	if (masquerading.empty())
		return;
	if (!perFamily) {
		// One rule for every family left; counted when counting (then it is one family).
		addPortCascade(
			chain, options, "",
			[&](std::optional<PortRange> ports, std::optional<RandomSample> sample) {
				return Masquerade{ports, sample, options.randomFully};
			},
			"outbound traffic is masqueraded (must be last in chain)",
			counters.use({masquerading.front(), Decision::masqueraded, DecisionReason::none},
				     "masqueraded"));
		return;
	}
	for (const Family family : masquerading)
		addPortCascade(
			chain, options, fmt::format("{} ", familyName(family)),
			[&](std::optional<PortRange> ports, std::optional<RandomSample> sample) {
				return Masquerade{ports, sample, options.randomFully, family};
			},
			fmt::format("{} outbound traffic is masqueraded", familyName(family)),
			counters.use({family, Decision::masqueraded, DecisionReason::none},
				     "masqueraded"));
}

// The table's sets: destinations per family, then sources, then interfaces, each only
// where its key lists something (without the keys the table is exactly upstream's).
void addSets(Ruleset &ruleset, const Config &config, const std::vector<Family> &families)
{
	for (Family family : families)
		ruleset.sets.push_back(nonMasqueradeSet(family, config));
	for (Family family : families)
		if (hasFamily(config.masqueradeSourceCIDRs, family))
			ruleset.sets.push_back(sourceSet(family, config));
	// The interface sets, likewise, only when their keys list names.
	if (!config.outputInterfaces.empty())
		ruleset.sets.push_back(interfaceSet(kOutputInterfaceSetName, config.outputInterfaces,
						    "output interfaces whose traffic is considered: "
						    "outputInterface"));
	if (!config.nonMasqueradeInterfaces.empty())
		ruleset.sets.push_back(interfaceSet(kNonMasqueradeInterfaceSetName,
						    config.nonMasqueradeInterfaces,
						    "output interfaces never source-NATed: "
						    "nonMasqueradeInterfaces"));
	addDiscoveredSets(ruleset, config, families);
}

// The guard's dynamic sets hold this many keys each (the kernel's default is 65,535): a
// key is a source and a destination with a new connection in the last
// kGuardRateTimeoutMs (the rate set), or with open connections (the open set), or over a
// limit in the last kGuardOverTimeoutMs (the over sets). A full set adds no key: a new
// key goes unguarded, those in it stay limited.
constexpr uint32_t kGuardSetSize = 65536;
// The rate set's keys leave 2 s after their last new connection. Their bucket (burst =
// rate) is full again after 1 s without one, so a key that leaves and comes back starts
// exactly where it would have been; and one source holds at most its new destinations per
// second times 2 of the set's keys.
constexpr uint64_t kGuardRateTimeoutMs = 2000;
// What was over a limit stays in the over sets, with its count of attempts, until 10
// minutes pass without one: long enough to read between scrapes and to decide.
constexpr uint64_t kGuardOverTimeoutMs = 600000;

// The limits the section sets, in the order of their rules.
std::vector<std::pair<GuardLimitKind, uint32_t>> guardLimits(const SnatGuard &guard)
{
	std::vector<std::pair<GuardLimitKind, uint32_t>> limits;
	if (guard.newConnectionsPerSecond)
		limits.emplace_back(GuardLimitKind::newConnections, *guard.newConnectionsPerSecond);
	if (guard.openConnections)
		limits.emplace_back(GuardLimitKind::openConnections, *guard.openConnections);
	return limits;
}

const char *guardLimitKey(GuardLimitKind kind)
{
	return kind == GuardLimitKind::newConnections ? "newConnectionsPerSecond" : "openConnections";
}

// snatGuard's sets: per family, the exempt sources (even when none: an edit of `exempt` is
// then an element update), and per limit the keys tracked and those over it.
void addGuardSets(Ruleset &ruleset, const SnatGuard &guard, const std::vector<Family> &families)
{
	for (const Family family : families) {
		ruleset.sets.push_back(AddressSet{
			guardExemptSetName(family), IntervalSet::fromPrefixes(family, guard.exempt),
			fmt::format("{} sources the SNAT guard never limits: snatGuard exempt",
				    familyName(family))});
		for (const auto &[kind, limit] : guardLimits(guard)) {
			const bool rate = kind == GuardLimitKind::newConnections;
			ruleset.dynamicSets.push_back(DynamicSet{
				guardTrackSetName(kind, family), family, kGuardSetSize,
				rate ? kGuardRateTimeoutMs : 0, false,
				fmt::format("{} sources and destinations tracked for snatGuard {}",
					    familyName(family), guardLimitKey(kind))});
			ruleset.dynamicSets.push_back(DynamicSet{
				guardOverSetName(kind, family), family, kGuardSetSize, kGuardOverTimeoutMs,
				true,
				fmt::format("{} sources and destinations over snatGuard {}: attempts "
					    "over", familyName(family), guardLimitKey(kind))});
		}
	}
}

// snatGuard's rules, right before the NAT: only what the agent source-NATs is limited.
void addGuardRules(Chain &chain, const SnatGuard &guard, const std::vector<Family> &families,
		   CounterBook &counters)
{
	const bool enforce = guard.enforces();
	const Decision decision = enforce ? Decision::guardDropped : Decision::guardObserved;
	for (const Family family : families)
		for (const auto &[kind, limit] : guardLimits(guard)) {
			const DecisionReason reason = kind == GuardLimitKind::newConnections
				? DecisionReason::newConnections
				: DecisionReason::openConnections;
			chain.rules.push_back(Rule{
				GuardLimit{family, kind, limit, guardExemptSetName(family),
					   guardTrackSetName(kind, family), guardOverSetName(kind, family),
					   enforce},
				fmt::format("snatGuard ({}): {} per source and destination over {} {}",
					    snatGuardModeName(*guard.mode), familyName(family),
					    guardLimitKey(kind), enforce ? "are dropped" : "are counted"),
				counters.use({family, decision, reason},
					     fmt::format("over snatGuard {} ({})", guardLimitKey(kind),
							 enforce ? "dropped" : "observed"))});
		}
}

// The guard's counters last: a switch of mode replaces them, and `nft list` keeps the
// order counters were made in, so the others (made before) are kept by a replacement.
void moveGuardCountersLast(Ruleset &ruleset)
{
	std::stable_partition(ruleset.counters.begin(), ruleset.counters.end(),
			      [](const NamedCounter &counter) { return !isGuardDecision(counter.label.decision); });
}

} // namespace

Ruleset buildRuleset(const Config &config, const RulesetOptions &options,
		     const SubnetAddresses &subnet)
{
	Ruleset ruleset;
	ruleset.table = options.table;
	ruleset.comment = "managed by ip-masq-agent: edits are overwritten, change its config";
	std::vector<Family> families{Family::ipv4};
	if (options.enableIpv6)
		families.push_back(Family::ipv6);
	addSets(ruleset, config, families);
	if (config.snatGuard)
		addGuardSets(ruleset, *config.snatGuard, families);

	CounterBook counters(ruleset, options.connectionCounters);
	const std::string outputInterfaceSet =
		config.outputInterfaces.empty() ? "" : kOutputInterfaceSetName;
	Chain base{kBaseChainName, BaseChainHook{options.priority},
		   "nat postrouting hook of ip-masq-agent", {}};
	addJumpRules(base, families, ruleset, options, outputInterfaceSet);
	// The sources masqueradeSourceCIDRs leaves alone never jump: counted here.
	if (counters.enabled())
		for (const Family family : families)
			if (const AddressSet *sources = ruleset.findSet(sourceSetName(family)))
				base.rules.push_back(Rule{
					MatchUnlistedSource{family, sources->name, outputInterfaceSet},
					fmt::format("{} sources not in masqueradeSourceCIDRs are left "
						    "alone", familyName(family)),
					counters.use({family, Decision::notMasqueraded,
						      DecisionReason::source},
						     "not masqueraded: source not in "
						     "masqueradeSourceCIDRs")});

	Chain masq{options.masqChain, std::nullopt,
		   "return for non-masquerade destinations, masquerade the rest", {}};
	if (!config.nonMasqueradeInterfaces.empty())
		addInterfaceReturns(masq, families, counters);
	for (Family family : families)
		if (const AddressSet *set = ruleset.findSet(family))
			masq.rules.push_back(Rule{
				ReturnIfDestinationInSet{set->family(), set->name},
				fmt::format("{} is not subject to masquerade", set->name),
				counters.use({family, Decision::notMasqueraded,
					      DecisionReason::destination},
					     fmt::format("not masqueraded: destination in {}", set->name))});
	if (config.snatGuard)
		addGuardRules(masq, *config.snatGuard, families, counters);
	addNatRules(masq, config, families, options, subnet, counters);
	moveGuardCountersLast(ruleset);

	ruleset.chains.push_back(std::move(base));
	ruleset.chains.push_back(std::move(masq));
	return ruleset;
}

RangesBySource discoveredInKernel(const KernelTable &kernel)
{
	RangesBySource kept;
	size_t total = 0;
	for (const AddressSet &set : kernel.sets) {
		const auto source = discoveredSetOf(set);
		if (!source)
			continue;
		// A range of an interval set is at most two prefixes per bit: the walk stops at
		// the model's bound whatever someone wrote into the set.
		for (const AddressRange &range : set.elements.ranges())
			for (Prefix &prefix : prefixesOf(range)) {
				if (total++ >= kMaxDiscoveredPrefixes)
					return kept;
				kept.of(*source).push_back(std::move(prefix));
			}
	}
	return kept;
}

namespace {

// The config keys the kernel's sets' names and comments describe, into `config`; false
// for a set the agent does not write. A placeholder entry stands for each list that left
// a mark: buildRuleset then makes the same sets, rules and comments.
bool describeSets(const std::vector<AddressSet> &sets, Config &config)
{
	for (const AddressSet &set : sets) {
		const Family family = set.family();
		const Prefix placeholder{Address{family, 0}, 0, {}, {}};
		const InterfacePattern anyName{"placeholder", false, {}};
		if (set.interfaceNames && set.name == kOutputInterfaceSetName) {
			config.outputInterfaces.push_back(anyName);
			continue;
		}
		if (set.interfaceNames && set.name == kNonMasqueradeInterfaceSetName) {
			config.nonMasqueradeInterfaces.push_back(anyName);
			continue;
		}
		if (set.interfaceNames)
			return false;
		if (const auto source = discoveredSetOf(set)) {
			namePlaceholderSource(config, *source);
			continue;
		}
		if (set.name == sourceSetName(family)) {
			config.masqueradeSourceCIDRs.push_back(placeholder);
			continue;
		}
		if (set.name != destinationSetName(family))
			return false;
		const auto traits = destinationSetTraits(family, set.comment);
		if (!traits)
			return false;
		(family == Family::ipv4 ? config.masqLinkLocal : config.masqLinkLocalIPv6) =
			!traits->linkLocal;
		if (traits->exceptions)
			config.masqueradeCIDRs.push_back(placeholder);
	}
	return true;
}

} // namespace

std::optional<Ruleset> rulesetFromKernel(const RulesetOptions &options, const KernelTable &kernel)
{
	// The config the sets and the SNAT rules describe; the elements are the kernel's (below).
	Config config;
	SubnetAddresses subnet;
	if (!describeSets(kernel.sets, config))
		return std::nullopt;
	// Each family's last SNAT rule says which outputAddress made the family's rules.
	for (const KernelSnatRule &rule : kernel.snatRules) {
		const auto form = snatFormOf(rule.family, rule.to, rule.comment);
		if (!form)
			continue; // a port rule of the cascade: the last one tells
		(rule.family == Family::ipv4 ? config.outputAddress : config.outputAddressIPv6) =
			form->address;
		(rule.family == Family::ipv4 ? subnet.ipv4 : subnet.ipv6) = form->nodeAddress;
	}
	Ruleset candidate = buildRuleset(config, options, subnet);
	if (candidate.sets.size() != kernel.sets.size())
		return std::nullopt;
	for (AddressSet &set : candidate.sets) {
		const AddressSet *inKernel = nullptr;
		for (const AddressSet &k : kernel.sets)
			if (k.name == set.name)
				inKernel = &k;
		if (!inKernel || inKernel->family() != set.family() ||
		    inKernel->interfaceNames != set.interfaceNames)
			return std::nullopt;
		set.elements = inKernel->elements;
	}
	return candidate;
}

namespace {

// Every comment the ruleset carries, with what it belongs to.
std::vector<std::pair<std::string, std::string>> comments(const Ruleset &ruleset)
{
	std::vector<std::pair<std::string, std::string>> out{{"the table", ruleset.comment}};
	for (const NamedCounter &counter : ruleset.counters)
		out.emplace_back("counter " + counter.name, counter.comment);
	for (const AddressSet &set : ruleset.sets)
		out.emplace_back("set " + set.name, set.comment);
	for (const Chain &chain : ruleset.chains) {
		out.emplace_back("chain " + chain.name, chain.comment);
		for (const Rule &rule : chain.rules)
			out.emplace_back("a rule of chain " + chain.name, rule.comment);
	}
	return out;
}

// Configs that between them make buildRuleset use every comment text it has: the
// defaults; exceptions and restricted sources in both families; sources of IPv4 only
// (an unrestricted IPv6 jump beside a restricted IPv4 one), and of IPv6 only.
std::vector<Config> configsWithEveryComment()
{
	Config both;
	both.masqueradeCIDRs = {builtinPrefix("10.0.0.0/16"), builtinPrefix("fe80::/64")};
	both.masqueradeSourceCIDRs = {builtinPrefix("10.0.0.0/8"), builtinPrefix("fd00::/8")};
	Config v4Sources;
	v4Sources.masqueradeSourceCIDRs = {builtinPrefix("10.0.0.0/8")};
	Config v6Sources;
	v6Sources.masqueradeSourceCIDRs = {builtinPrefix("fd00::/8")};
	// The egress keys: ranges in both families and interfaces; and subnets, the longest
	// there are, with an address of this node in each (their comments name the subnet).
	const auto outputAddress = [](const Prefix &prefix, OutputAddress::Form form) {
		return OutputAddress{form, AddressRange{prefix.first(), prefix.last()}, prefix.length, {}};
	};
	Config egress;
	egress.outputAddress =
		outputAddress(builtinPrefix("255.255.255.0/24"), OutputAddress::Form::range);
	egress.outputAddressIPv6 = outputAddress(builtinPrefix("ffff::/16"), OutputAddress::Form::range);
	egress.outputInterfaces = {InterfacePattern{"eth", true, {}}};
	egress.nonMasqueradeInterfaces = {InterfacePattern{"wg0", false, {}}};
	Config subnets = egress;
	subnets.outputAddress =
		outputAddress(builtinPrefix("255.255.255.255/32"), OutputAddress::Form::subnet);
	subnets.outputAddressIPv6 = outputAddress(
		builtinPrefix("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"), OutputAddress::Form::subnet);
	Config discovery;
	for (const DiscoverySource source : kAllDiscoverySources)
		namePlaceholderSource(discovery, source);
	return {Config{}, both, v4Sources, v6Sources, egress, subnets, discovery};
}

} // namespace

Status validateRulesetOptions(const RulesetOptions &options)
{
	if (auto s = validateName("--table", options.table); !s)
		return s;
	if (auto s = validateName("--masq-chain", options.masqChain); !s)
		return s;
	if (options.masqChain == kBaseChainName)
		return fail(fmt::format("--masq-chain {} is the name of the agent's base chain; "
					"choose another name", quoted(options.masqChain)));
	if (options.priority < kMinNatPriority)
		return fail(fmt::format("--priority {} is below {}: NAT chains must run after "
					"conntrack", options.priority, kMinNatPriority));
	// Names appear inside comments (e.g. "non-local destinations go through <chain>").
	// Check the comments of the rulesets these options really build, rather than a
	// bound per name that would drift when a comment is reworded. The config chooses
	// among fixed texts only: these configs show every one of them.
	RulesetOptions widest = options;
	widest.enableIpv6 = true;
	std::vector<std::pair<std::string, std::string>> all;
	for (const Config &config : configsWithEveryComment()) {
		// A subnet's address of this node: the highest in it, for the longest text.
		SubnetAddresses subnet;
		for (const Family family : {Family::ipv4, Family::ipv6})
			if (const auto &address = config.outputAddressOf(family))
				(family == Family::ipv4 ? subnet.ipv4 : subnet.ipv6) = address->range.last;
		for (auto &entry : comments(buildRuleset(config, widest, subnet)))
			all.push_back(std::move(entry));
	}
	for (const auto &[owner, comment] : all) {
		auto fits = checkCommentLength(owner, comment);
		if (fits)
			continue;
		// Say which flag to shorten, and by how much, when it is the chain's name.
		const size_t excess = comment.size() - kMaxNftCommentLength;
		if (comment.find(options.masqChain) != std::string::npos &&
		    options.masqChain.size() > excess)
			return fail(fmt::format("--masq-chain is {} characters long: the comment of "
						"{} embeds it and would be {} characters, over nft's "
						"limit of {}; use at most {} characters",
						options.masqChain.size(), owner, comment.size(),
						kMaxNftCommentLength, options.masqChain.size() - excess));
		return fits;
	}
	return {};
}


} // namespace ipmasq
