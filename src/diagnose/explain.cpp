// SPDX-License-Identifier: Apache-2.0
// --explain: the decision for each address by a scan of the config, the source check, and the
// comparison with the kernel's sets.
#include "ip-masq-agent/diagnose/explain.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/netlink/refusal.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/agent_table.h"
#include "ip-masq-agent/diagnose/conflicts.h"
#include "ip-masq-agent/config/policy.h"
#include "ip-masq-agent/conntrack/snat_usage.h"

namespace ipmasq {

namespace {

// What the compiled desired state decides, which --explain reports (the agent's own rules
// walked like any other table's); the config only names the entries behind it.

// Whether the desired ruleset's set `name` holds `key` (an address, or an interface's key).
bool desiredHolds(const ExplainContext &context, std::string_view name, const Address &key)
{
	const AddressSet *set = context.desired.findSet(name);
	return set && set->elements.contains(key);
}

// Where the desired ruleset source-NATs a family's traffic; nullopt: masquerade.
std::optional<AddressRange> desiredSnatTarget(const ExplainContext &context, Family family)
{
	const SnatPlan plan = snatPlanOf(context.desired);
	return plan.of(family) ? plan.of(family)->to : std::nullopt;
}

// Where a masqueraded destination's traffic is source-NATed, for the verdict: "masqueraded",
// "SNAT to 203.0.113.7 (outputAddress, FILE:LINE)", or a subnet's address of this node.
std::string natAction(const Config &config, const ExplainContext &context, Family family)
{
	const std::optional<AddressRange> target = desiredSnatTarget(context, family);
	const std::optional<OutputAddress> &address = config.outputAddressOf(family);
	const std::string key = address ? fmt::format("{}, {}", outputAddressKey(family),
						      describeOrigin(config, address->origin))
					: std::string();
	const bool subnet = address && address->form == OutputAddress::Form::subnet;
	if (target && subnet)
		return fmt::format("SNAT to {}, this node's address in {} ({})", target->toString(),
				   address->toString(), key);
	if (target)
		return fmt::format("SNAT to {}{}", target->toString(), key.empty() ? "" : " (" + key + ")");
	if (subnet)
		return fmt::format("masqueraded (this node has no address in {}: {})", address->toString(), key);
	return "masqueraded";
}

// `masqueraded` is the desired state's verdict; the decision names the config's entries.
std::string describeDecision(const Config &config, const ExplainContext &context,
			     const ExplainDecision &decision, Family family, bool masqueraded)
{
	std::string text = masqueraded ? natAction(config, context, family) + ": " : "not masqueraded: ";
	if (decision.masqueraded != masqueraded)
		return text + "the desired ruleset and the config's entries disagree (" +
		       describeDecidingEntry(config, decision) + "): please report this";
	if (!decision.decidedBy)
		return text + "no entry covers it";
	text += describeEntry(config, *decision.decidedBy);
	if (decision.decidedBy->kind == ExplainEntry::Kind::linkLocal)
		text += decision.decidedBy->prefix.network.family == Family::ipv4
			? " (masqLinkLocal is false)"
			: " (masqLinkLocalIPv6 is false)";
	if (decision.overrides)
		text += " overrides " + describeEntry(config, *decision.overrides);
	return text;
}

Family familyOf(const Prefix &prefix) { return prefix.network.family; }
Family familyOf(const Address &address) { return address.family; }

template<typename T>
std::vector<T> ofFamily(const std::vector<T> &items, Family family)
{
	std::vector<T> out;
	std::copy_if(items.begin(), items.end(), std::back_inserter(out),
		     [family](const T &item) { return familyOf(item) == family; });
	return out;
}

// The masqueradeSourceCIDRs part of a line: empty when the source does not matter.
std::string describeSources(const Config &config, const ExplainContext &context,
			    const Address &destination, bool masqueraded)
{
	const Family family = destination.family;
	const std::vector<Prefix> allowed = ofFamily(config.masqueradeSourceCIDRs, family);
	const std::vector<Address> sources = ofFamily(context.sources, family);
	if (allowed.empty())
		return sources.empty() ? std::string()
				       : fmt::format("; any source: masqueradeSourceCIDRs lists no {} prefix",
						     familyName(family));
	if (sources.empty())
		return masqueraded ? fmt::format("; only from sources in masqueradeSourceCIDRs ({} {} "
						 "{}): the agent leaves other sources alone",
						 allowed.size(), familyName(family),
						 allowed.size() == 1 ? "entry" : "entries")
				   : std::string();
	std::string text;
	for (const Address &source : sources) {
		const Prefix *entry = longestCovering(allowed, source);
		if (desiredHolds(context, sourceSetName(family), source))
			text += fmt::format("; from {}: {}: source in masqueradeSourceCIDRs {}",
					    source.toString(),
					    masqueraded ? "masqueraded" : "not masqueraded",
					    entry ? fmt::format("{} ({})", entry->toString(),
								describeOrigin(config, entry->origin))
						  : "(no entry names it: please report this)");
		else
			text += fmt::format("; from {}: not masqueraded: source in no masqueradeSourceCIDRs "
					    "entry, so the agent leaves it alone whatever the destination",
					    source.toString());
	}
	return text;
}

// Where the kernel's set `name` differs from the desired ruleset's: whether it is there,
// then, for each key asked about (an address, an interface's key, with its words), whether
// it holds it.
void compareSet(const ExplainContext &context, const char *name,
		const std::vector<std::pair<Address, std::string>> &keys,
		std::vector<std::string> &differences)
{
	const AddressSet *inKernel = findSet(context.kernel.sets, name);
	const AddressSet *desired = context.desired.findSet(name);
	if (keys.empty() || (!inKernel && !desired))
		return;
	if (!inKernel || !desired) {
		differences.push_back(fmt::format("it {} set {} although the agent's ruleset {}",
						  inKernel ? "has" : "has no", name,
						  inKernel ? "has none" : "has one"));
		return;
	}
	for (const auto &[key, words] : keys) {
		const bool held = inKernel->elements.contains(key);
		if (held != desired->elements.contains(key))
			differences.push_back(fmt::format("its set {} {} {}", name,
							  held ? "holds" : "does not hold", words));
	}
}

// The first pattern of `list` that matches the interface, if any.
const InterfacePattern *matchingPattern(const std::vector<InterfacePattern> &list,
					std::string_view name)
{
	for (const InterfacePattern &pattern : list)
		if (matchesInterface(pattern, name))
			return &pattern;
	return nullptr;
}

std::string describePattern(const Config &config, const char *key, const InterfacePattern &pattern)
{
	return fmt::format("{} {} ({})", key, escaped(pattern.toString()),
			   describeOrigin(config, pattern.origin));
}

std::string entries(size_t count)
{
	return fmt::format("{} {}", count, count == 1 ? "entry" : "entries");
}

// Why traffic through --explain-interface is never source-NATed, if it is not: the first
// thing the agent checks, in its base chain's jump and its chain's first rule.
std::optional<std::string> interfaceGate(const Config &config, const ExplainContext &context)
{
	const std::string &name = context.outputInterface;
	if (name.empty())
		return std::nullopt;
	const Address key = interfaceKeyRange(InterfacePattern{name, false, {}}).first;
	if (context.desired.findSet(kOutputInterfaceSetName) &&
	    !desiredHolds(context, kOutputInterfaceSetName, key))
		return fmt::format("leaves through {}, which is in no outputInterface entry ({}), so the "
				   "agent leaves it alone", escaped(name),
				   entries(config.outputInterfaces.size()));
	if (!desiredHolds(context, kNonMasqueradeInterfaceSetName, key))
		return std::nullopt;
	const InterfacePattern *excluded = matchingPattern(config.nonMasqueradeInterfaces, name);
	return fmt::format("leaves through {}: {}", escaped(name),
			   excluded ? describePattern(config, "nonMasqueradeInterfaces", *excluded)
				    : "in nonMasqueradeInterfaces (no entry names it: please report this)");
}

// The interface part of a line whose traffic may be source-NATed: which interface keys it
// passed, or the condition they set when no interface was given; empty when unused.
std::string describeInterfaces(const Config &config, const ExplainContext &context)
{
	const std::string &name = context.outputInterface;
	std::string text;
	if (name.empty()) {
		if (!config.outputInterfaces.empty())
			text += fmt::format("; only through an outputInterface ({})",
					    entries(config.outputInterfaces.size()));
		if (!config.nonMasqueradeInterfaces.empty())
			text += fmt::format("; never through a nonMasqueradeInterfaces entry ({})",
					    entries(config.nonMasqueradeInterfaces.size()));
		return text;
	}
	if (const InterfacePattern *listed = matchingPattern(config.outputInterfaces, name))
		text += fmt::format("; through {}: {}", escaped(name),
				    describePattern(config, "outputInterface", *listed));
	if (!config.nonMasqueradeInterfaces.empty())
		text += fmt::format("; through {}: in no nonMasqueradeInterfaces entry", escaped(name));
	return text;
}

// Why the one --explain-source of the destination's family is left alone, if it is: with
// one source given, the line leads with its verdict.
std::optional<std::string> sourceGate(const ExplainContext &context, Family family)
{
	const std::vector<Address> sources = ofFamily(context.sources, family);
	if (sources.size() != 1 || !context.desired.findSet(sourceSetName(family)) ||
	    desiredHolds(context, sourceSetName(family), sources.front()))
		return std::nullopt;
	return fmt::format("from {}: source in no masqueradeSourceCIDRs entry, so the agent leaves "
			   "it alone whatever the destination", sources.front().toString());
}

// Where the kernel's SNAT rule, source and interface sets differ from the desired
// ruleset's, for this line.
void compareEgress(const ExplainContext &context, Family family, std::vector<std::string> &differences)
{
	const std::optional<AddressRange> expected = desiredSnatTarget(context, family);
	std::optional<AddressRange> inKernel;
	for (const KernelSnatRule &rule : context.kernel.snatRules)
		if (rule.family == family)
			inKernel = rule.to;
	if (inKernel != expected)
		differences.push_back(
			inKernel ? fmt::format("its {} traffic is SNATed to {}", familyName(family),
					       inKernel->toString())
				 : fmt::format("it masquerades {} traffic instead of SNAT", familyName(family)));
	std::vector<std::pair<Address, std::string>> sources;
	for (const Address &source : ofFamily(context.sources, family))
		sources.emplace_back(source, "source " + source.toString());
	compareSet(context, sourceSetName(family), sources, differences);
	const std::string &name = context.outputInterface;
	if (name.empty())
		return;
	const Address key = interfaceKeyRange(InterfacePattern{name, false, {}}).first;
	for (const char *set : {kOutputInterfaceSetName, kNonMasqueradeInterfaceSetName})
		compareSet(context, set, {{key, escaped(name)}}, differences);
}

// The live check: "; the kernel agrees", what differs, or why it could not be checked.
// `masqueraded` is the desired state's decision (set membership, before the local check);
// without the table, the line's verdict (the gates included).
std::string describeKernel(const ExplainContext &context, const Address &destination,
			   bool masqueraded)
{
	const KernelView &kernel = context.kernel;
	switch (kernel.state) {
	case KernelView::State::noPermission:
		return "; could not check the kernel: no CAP_NET_ADMIN";
	case KernelView::State::unreadable:
		return fmt::format("; could not check the kernel: {}", escaped(kernel.problem));
	case KernelView::State::tableAbsent:
		// Without its table the agent masquerades nothing: that agrees with a line that
		// says "not masqueraded", only not for the config's reasons.
		if (!masqueraded)
			return fmt::format("; the kernel agrees, but only because table inet {} is not in "
					   "the kernel: the agent masquerades nothing here yet", context.table);
		return fmt::format("; the kernel disagrees: table inet {} is not in the kernel, so the "
				   "agent masquerades nothing here", context.table);
	case KernelView::State::sets:
		break;
	}

	const Family family = destination.family;
	const char *setName = destinationSetName(family);
	const AddressSet *set = findSet(kernel.sets, setName);
	std::vector<std::string> differences;
	if (family == Family::ipv6 && !context.enableIpv6) {
		if (set)
			differences.push_back(fmt::format("its table has set {}, as if applied with "
							  "--enable-ipv6", setName));
	} else if (!set) {
		differences.push_back(fmt::format("table inet {} has no set {}", context.table, setName));
	} else {
		const bool inSet = set->elements.contains(destination);
		if (inSet == masqueraded)
			differences.push_back(fmt::format("its set {} {} it, so the kernel {}", setName,
							  inSet ? "holds" : "does not hold",
							  inSet ? "does not masquerade it" : "masquerades it"));
		compareEgress(context, family, differences);
	}
	if (differences.empty())
		return "; the kernel agrees";
	return fmt::format("; the kernel disagrees: {} (the table is stale, was edited, or was made "
			   "from another config or other flags)",
			   fmt::join(differences, ", "));
}

// The other ranges found on the node (nonMasqueradeDiscovery) that hold the destination: the
// decision names the longest, and the operator sees every origin.
std::string otherDiscovered(const Config &config, const ExplainDecision &decision, const Address &destination)
{
	std::string out;
	for (const Prefix &prefix : config.nonMasqueradeCIDRs)
		if (prefix.origin.discovered() && prefix.contains(destination) &&
		    !(decision.decidedBy && decision.decidedBy->prefix == prefix))
			out += fmt::format("; also found on the node: {} ({})", prefix.toString(),
					   describeOrigin(config, prefix.origin));
	return out;
}

// A line's verdict and reason, with the kernel check.
std::string decideLine(const Config &config, const ExplainContext &context, const Address &destination)
{
	if (destination.family == Family::ipv6 && !context.enableIpv6)
		return "not masqueraded: the agent leaves IPv6 alone without --enable-ipv6" +
		       describeKernel(context, destination, false);

	const Family family = destination.family;
	const AddressSet *exempt = context.desired.findSet(family);
	const bool masqueraded = !exempt || !exempt->elements.contains(destination);
	const ExplainDecision decision = explainDecision(config, destination);
	const std::string kernel = describeKernel(context, destination, masqueraded);
	// A gate's "not masqueraded" is what a missing table gives too.
	const std::string gatedKernel = context.kernel.state == KernelView::State::tableAbsent
		? describeKernel(context, destination, false)
		: kernel;
	const std::string decided = describeDecision(config, context, decision, family, masqueraded) +
				    otherDiscovered(config, decision, destination);
	// In the order the packet meets them: the local check, the interface keys, the source,
	// then the destination. A gate that stops it leads the line.
	if (context.node.isLocal(destination))
		return "not masqueraded: a local address of this host (fib daddr type local never "
		       "enters the agent's chain); by the config alone: " + decided + gatedKernel;
	if (auto gate = interfaceGate(config, context))
		return "not masqueraded: " + *gate + "; by the destination alone: " + decided + gatedKernel;
	if (auto gate = sourceGate(context, family); gate && masqueraded)
		return "not masqueraded: " + *gate + "; by the destination alone: " + decided + gatedKernel;
	return decided + (masqueraded ? describeInterfaces(config, context) : "") +
	       describeSources(config, context, destination, masqueraded) + kernel;
}

// The packet --explain asks about: from the one --explain-source of its family (any source
// without one), through --explain-interface (not known without).
SampledPacket explainedPacket(const Config &config, const ExplainContext &context,
			      const Address &destination)
{
	SampledPacket packet{destination};
	const std::vector<Address> sources = ofFamily(context.sources, destination.family);
	if (sources.size() == 1)
		packet.source = sources.front();
	if (!context.outputInterface.empty())
		packet.outputInterface = context.outputInterface;
	packet.transport = context.transport;
	packet.entry = describeDecidingEntry(config, explainDecision(config, destination));
	return packet;
}

// The node-wide clause, for each conflict (diagnose/conflicts.h): "; but table ip nat
// chain POSTROUTING (...) masquerades it: rule handle 7 (`...`)", "; other tables' NAT may
// undo that: <why>"; else "; no other table's NAT undoes that", or why that could not be
// checked.
std::string describeOtherTables(const Config &config, const ExplainContext &context,
				const Address &destination)
{
	const OtherTablesView &view = context.otherTables;
	const bool legacy = destination.family == Family::ipv4 ? view.legacyIpv4 : view.legacyIpv6;
	const std::string legacyNote =
		legacy ? fmt::format("; legacy iptables nat rules exist ({}), which cannot be checked",
				     destination.family == Family::ipv4 ? "ip_tables" : "ip6_tables")
		       : std::string();
	switch (view.state) {
	case OtherTablesView::State::notRead:
		return {};
	case OtherTablesView::State::noPermission:
		return "; could not check other tables' NAT: no CAP_NET_ADMIN" + legacyNote;
	case OtherTablesView::State::unreadable:
		return fmt::format("; could not check other tables' NAT: {}", escaped(view.problem)) + legacyNote;
	case OtherTablesView::State::read:
		break;
	}
	const SampledPacket packet = explainedPacket(config, context, destination);
	const ConflictPass pass = findConflicts(view.ruleset, &view.agent, std::span(&packet, 1), context.node);
	if (pass.conflicts.empty())
		return "; no other table's NAT undoes that" + legacyNote;
	std::string text;
	for (const NatConflict &c : pass.conflicts)
		switch (c.kind) {
		case NatConflict::Kind::natsExempted:
			text += "; but " + c.describeRule();
			break;
		case NatConflict::Kind::natsFirst:
			text += "; but " + c.describeRule() + ", before the agent " + c.agentAction;
			break;
		case NatConflict::Kind::undetermined:
			text += "; other tables' NAT may undo that: " + c.describeRule();
			break;
		}
	return text + legacyNote;
}

std::string explainDestination(const Config &config, const ExplainContext &context,
			       const Address &destination)
{
	return destination.toString() + ": " + decideLine(config, context, destination) +
	       describeOtherTables(config, context, destination);
}

} // namespace

std::vector<std::string> explainDestinations(const Config &config, const ExplainContext &context,
					     const std::vector<Address> &destinations)
{
	std::vector<std::string> lines;
	lines.reserve(destinations.size());
	for (const Address &destination : destinations)
		lines.push_back(explainDestination(config, context, destination));
	return lines;
}

namespace {

// A view that could not be read. EPERM to a process without CAP_NET_ADMIN is --explain run
// without privileges, as it may be. To one with it, something else refused
// (netlink/refusal.h): the problem says what.
template<typename View>
View unreadable(View view, const Error &error)
{
	const bool lacksNetAdmin = error.errnum == EPERM && !netlink::currentPrivileges().netAdmin;
	view.state = lacksNetAdmin ? View::State::noPermission : View::State::unreadable;
	view.problem = netlink::explainRefusal(error).message;
	return view;
}

} // namespace

KernelView readKernelView(const std::string &table)
{
	KernelView view;
	auto backend = NetlinkBackend::open();
	if (!backend)
		return unreadable(std::move(view), backend.error());
	auto read = (*backend)->readTable(table);
	if (!read)
		return unreadable(std::move(view), read.error());
	if (!*read) {
		view.state = KernelView::State::tableAbsent;
		return view;
	}
	view.state = KernelView::State::sets;
	view.sets = std::move((*read)->sets);
	view.snatRules = std::move((*read)->snatRules);
	return view;
}

OtherTablesView readOtherTablesView(const Ruleset &desired)
{
	OtherTablesView view;
	if (auto legacy = legacyNatTables()) {
		view.legacyIpv4 = legacy->ipv4;
		view.legacyIpv6 = legacy->ipv6;
	}
	nft::NatReadLimits limits;
	limits.skipInetTable = desired.table;
	auto ruleset = nft::readNatRuleset(limits);
	auto agent = ruleset ? nft::agentTable(desired) : Result<nft::Table>(fail(ruleset.error()));
	if (!agent)
		return unreadable(std::move(view), agent.error());
	view.state = OtherTablesView::State::read;
	view.ruleset = std::move(*ruleset);
	view.agent = std::move(*agent);
	return view;
}

} // namespace ipmasq
