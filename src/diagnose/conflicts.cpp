// SPDX-License-Identifier: Apache-2.0
// Conflicts: the packet's fate with the whole node against its fate with the agent's rules
// alone; the pass, the cycle of passes, and what changed.
#include "ip-masq-agent/diagnose/conflicts.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/nft/codec/rule_text.h"
#include "ip-masq-agent/diagnose/samples.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

namespace {

using nat::Decider;
using nat::NatAction;

// Where the packet's source ends up, as far as the evaluator can tell.
struct Fate {
	enum class Kind { unchanged, nodeAddress, range, unknown, dropped };
	Kind kind = Kind::unknown;
	AddressRange range = {};
};

Fate fateOf(const nat::Outcome &o)
{
	switch (o.action) {
	case NatAction::none: return {Fate::Kind::unchanged};
	// Masquerade picks an address of the output interface: one of the node's.
	case NatAction::masquerade: return {Fate::Kind::nodeAddress};
	case NatAction::snat: return o.addresses ? Fate{Fate::Kind::range, *o.addresses} : Fate{};
	case NatAction::dropped: return {Fate::Kind::dropped};
	// dnat and redirect cannot run at postrouting (the kernel refuses them there).
	case NatAction::dnat:
	case NatAction::redirect:
	case NatAction::undetermined:
		break;
	}
	return {};
}

enum class Differs { no, yes, maybe };

bool contains(const AddressRange &range, const Address &a)
{
	return a.family == range.first.family && range.first <= a && a <= range.last;
}

// Whether the node's fate leaves the packet with another source than the agent's fate.
Differs differs(const Fate &node, const Fate &agent, const SampledPacket &packet,
		const NodeAddresses &addresses)
{
	using K = Fate::Kind;
	if (node.kind == K::dropped || agent.kind == K::dropped)
		return Differs::no; // a drop is not NAT: the packet never leaves
	if (node.kind == K::unknown || agent.kind == K::unknown)
		return Differs::maybe;
	if (node.kind == agent.kind && node.kind != K::range)
		return Differs::no;
	const Fate &a = node.kind <= agent.kind ? node : agent, &b = node.kind <= agent.kind ? agent : node;
	if (a.kind == K::unchanged) {
		// Unchanged is the packet's own source: a node address (node-made traffic) or
		// one in the range leaves the question open.
		if (!packet.source)
			return Differs::yes;
		if (b.kind == K::nodeAddress)
			return addresses.isLocal(*packet.source) ? Differs::maybe : Differs::yes;
		if (!contains(b.range, *packet.source))
			return Differs::yes;
		return b.range.first == b.range.last ? Differs::no : Differs::maybe;
	}
	if (a.kind == K::nodeAddress) {
		const bool nodeAddressIn = std::any_of(addresses.addresses.begin(), addresses.addresses.end(),
						       [&b](const NodeAddress &l) { return contains(b.range, l.address); });
		return nodeAddressIn || !addresses.complete ? Differs::maybe : Differs::yes;
	}
	if (a.range == b.range)
		return Differs::no;
	const bool disjoint = a.range.last < b.range.first || b.range.last < a.range.first;
	return disjoint ? Differs::yes : Differs::maybe;
}

// What the agent's rules alone do, in words: "masquerades", "SNATs to 203.0.113.7".
std::string agentActionText(const nat::NatVerdict &alone)
{
	std::vector<std::string> actions;
	for (const nat::Outcome &o : alone.outcomes) {
		std::string text = o.action == NatAction::masquerade ? "masquerades"
				   : o.action == NatAction::snat ? "SNATs to " + (o.addresses ? o.addresses->toString()
											    : std::string("an address"))
				   : o.action == NatAction::none ? "leaves it alone"
								 : "may do anything with it";
		if (std::find(actions.begin(), actions.end(), text) == actions.end())
			actions.push_back(std::move(text));
	}
	return fmt::format("{}", fmt::join(actions, " or "));
}

std::string ruleTextOf(const nft::NatRuleset &ruleset, const nft::Table *agent, const nat::Outcome &o)
{
	if (!o.rule)
		return {};
	const nft::Table *table = findTable(ruleset, agent, o.rule->family, o.rule->table);
	const nft::Rule *rule = table ? findRule(*table, *o.rule) : nullptr;
	return rule ? nft::ruleText(*table, *rule) : std::string();
}

nat::Packet packetFor(const SampledPacket &sample)
{
	nat::Packet packet;
	packet.destination = sample.destination;
	packet.source = sample.source.value_or(Address{sample.destination.family, 0});
	packet.sourceKnown = sample.source.has_value();
	// The input interface, and the protocol and ports unless given, stay unknown (nullopt):
	// a match on them "may". The connection is the agent's kind (Packet::untranslated).
	packet.outputInterface = sample.outputInterface;
	if (sample.transport) {
		packet.l4proto = sample.transport->protocol;
		packet.destinationPort = sample.transport->port;
	}
	return packet;
}

// The ports that decide a "may" of a packet of any port: those the rules where the walk
// forked match (a fork on anything else gives none).
std::vector<PortProtocol> portsOfForks(const nat::NatVerdict &node, const nft::NatRuleset &ruleset,
				       const nft::Table *agent)
{
	constexpr size_t kMaxPorts = 4, kMaxForks = 8;
	std::vector<PortProtocol> out;
	for (size_t i = 0; i < node.mayPoints.size() && i < kMaxForks && out.size() < kMaxPorts; i++) {
		const nat::RuleRef &ref = node.mayPoints[i].rule;
		const nft::Table *table = findTable(ruleset, agent, ref.family, ref.table);
		const nft::Rule *rule = table ? findRule(*table, ref) : nullptr;
		if (!rule)
			continue;
		for (const PortProtocol &port : destinationPorts(*table, *rule, kMaxPorts))
			if (out.size() < kMaxPorts && std::find(out.begin(), out.end(), port) == out.end())
				out.push_back(port);
	}
	return out;
}

// Whether `list` holds the same conflict as `conflict` (NatConflict::sameAs).
bool holds(const std::vector<NatConflict> &list, const NatConflict &conflict)
{
	return std::any_of(list.begin(), list.end(), [&conflict](const NatConflict &c) { return c.sameAs(conflict); });
}

} // namespace

std::vector<NatConflict> conflictsOf(const SampledPacket &packet, const nat::NatVerdict &node,
				     const nat::NatVerdict &agentAlone, const NodeAddresses &addresses,
				     const nft::NatRuleset &ruleset, const nft::Table *agent)
{
	const bool agentExempts = std::all_of(agentAlone.outcomes.begin(), agentAlone.outcomes.end(),
					      [](const nat::Outcome &o) { return o.action == NatAction::none; });
	std::vector<NatConflict> out;
	for (const nat::Outcome &o : node.outcomes) {
		// The agent's own decisions, and a path no chain NATs (there the agent's rules ran
		// and left it alone), are what the agent does.
		const bool ownTable = o.base && agent && o.base->family == agent->family && o.base->table == agent->name;
		if (o.decider == Decider::agent || o.decider == Decider::nobody || ownTable)
			continue;
		std::optional<Differs> verdict;
		for (const nat::Outcome &a : agentAlone.outcomes) {
			const Differs d = differs(fateOf(o), fateOf(a), packet, addresses);
			verdict = !verdict || *verdict == d ? d : Differs::maybe;
		}
		if (!verdict || *verdict == Differs::no)
			continue;
		NatConflict c;
		c.kind = o.action == NatAction::undetermined ? NatConflict::Kind::undetermined
			 : agentExempts			     ? NatConflict::Kind::natsExempted
							     : NatConflict::Kind::natsFirst;
		c.family = packet.destination.family;
		c.certain = *verdict == Differs::yes && node.certain() && agentAlone.certain();
		c.outcome = o;
		c.ruleText = ruleTextOf(ruleset, agent, o);
		c.agentAction = agentActionText(agentAlone);
		c.example = packet;
		out.push_back(std::move(c));
	}
	return out;
}

bool NatConflict::sameAs(const NatConflict &other) const
{
	// Where the rule sits, without its handle or position.
	const auto sits = [](const nat::Outcome &o) {
		return o.rule ? std::make_tuple(o.rule->family, o.rule->table, o.rule->chain)
			      : std::make_tuple(nft::TableFamily::inet, std::string(), std::string());
	};
	return kind == other.kind && family == other.family && certain == other.certain &&
	       sits(outcome) == sits(other.outcome) && ruleText == other.ruleText &&
	       outcome.base == other.outcome.base && outcome.action == other.outcome.action &&
	       outcome.addresses == other.outcome.addresses && outcome.reason == other.outcome.reason &&
	       example.entry == other.example.entry;
}

std::string NatConflict::describeRule() const
{
	const std::string rule = ruleText.empty() ? std::string() : fmt::format(" (`{}`)", ruleText);
	return describeOutcome(outcome, certain) + rule;
}

std::string NatConflict::describe() const
{
	const std::string traffic = fmt::format(
		"{} traffic {} to {} {}", familyName(family),
		example.source ? "from " + example.source->toString() : std::string("from any source"),
		example.destination.toString(),
		example.transport ? "port " + example.transport->toString() : std::string("on any port"));
	switch (kind) {
	case Kind::natsExempted:
		return fmt::format("{}, which undoes {}: {} is not masqueraded by the agent", describeRule(),
				   example.entry, traffic);
	case Kind::natsFirst:
		return fmt::format("{}, before the agent {} {} ({})", describeRule(), agentAction, traffic,
				   example.entry);
	case Kind::undetermined:
		break;
	}
	return fmt::format("{}, so whether another table's NAT undoes the agent's decision for {} ({}) "
			   "is not known", describeRule(), traffic, example.entry);
}

ConflictPass findConflicts(const nft::NatRuleset &ruleset, const nft::Table *agent,
			   std::span<const SampledPacket> samples, const NodeAddresses &addresses,
			   const CheckLimits &limits)
{
	static const nft::NatRuleset kNone;
	ConflictPass pass;
	for (const SampledPacket &sample : samples) {
		if (pass.steps >= limits.maxSteps) {
			pass.complete = false;
			break;
		}
		const nat::Packet packet = packetFor(sample);
		const nat::NatVerdict node = nat::evaluate(ruleset, agent, packet, addresses, limits.evaluation);
		const nat::NatVerdict alone = nat::evaluate(kNone, agent, packet, addresses, limits.evaluation);
		pass.evaluated++;
		pass.steps += node.steps + alone.steps;
		for (NatConflict &c : conflictsOf(sample, node, alone, addresses, ruleset, agent)) {
			if (holds(pass.conflicts, c))
				continue;
			if (pass.conflicts.size() >= limits.maxConflicts) {
				pass.complete = false;
				break;
			}
			// Once per conflict kept, not per sample: each fork is a rule to find.
			if (!c.certain && !sample.transport)
				c.ports = portsOfForks(node, ruleset, agent);
			pass.conflicts.push_back(std::move(c));
		}
	}
	return pass;
}

std::vector<SampledPacket> portSamples(const std::vector<NatConflict> &conflicts, size_t max)
{
	std::vector<SampledPacket> out;
	for (const NatConflict &c : conflicts)
		for (const PortProtocol &port : c.ports) {
			SampledPacket packet = c.example;
			packet.transport = port;
			if (out.size() < max && std::find(out.begin(), out.end(), packet) == out.end())
				out.push_back(std::move(packet));
		}
	return out;
}

std::vector<NatConflict> withoutMayTwins(std::vector<NatConflict> conflicts)
{
	const auto hasCertainTwin = [&conflicts](const NatConflict &c) {
		if (c.certain)
			return false;
		NatConflict twin = c;
		twin.certain = true;
		return holds(conflicts, twin);
	};
	std::vector<NatConflict> out;
	for (const NatConflict &c : conflicts)
		if (!hasCertainTwin(c))
			out.push_back(c);
	return out;
}

void ConflictCycle::restart(std::vector<SampledPacket> samples)
{
	stop();
	samples_ = std::move(samples);
	running_ = true;
}

void ConflictCycle::stop()
{
	samples_.clear();
	next_ = 0;
	running_ = false;
	portsAdded_ = false;
	conflicts_.clear();
}

std::optional<std::vector<NatConflict>> ConflictCycle::add(const ConflictPass &pass, size_t maxConflicts,
							   size_t maxPortSamples)
{
	for (const NatConflict &conflict : pass.conflicts)
		if (conflicts_.size() < maxConflicts && !holds(conflicts_, conflict))
			conflicts_.push_back(conflict);
	next_ = std::min(next_ + pass.evaluated, samples_.size());
	if (next_ < samples_.size())
		return std::nullopt;
	if (!portsAdded_) {
		portsAdded_ = true;
		std::vector<SampledPacket> more = portSamples(conflicts_, maxPortSamples);
		std::erase_if(more, [this](const SampledPacket &p) {
			return std::find(samples_.begin(), samples_.end(), p) != samples_.end();
		});
		if (!more.empty()) {
			samples_.insert(samples_.end(), more.begin(), more.end());
			return std::nullopt;
		}
	}
	std::vector<NatConflict> done = withoutMayTwins(std::move(conflicts_));
	stop();
	return done;
}

ConflictChanges diffConflicts(const std::vector<NatConflict> &before, const std::vector<NatConflict> &after)
{
	ConflictChanges changes;
	for (const NatConflict &c : after)
		if (!holds(before, c))
			changes.found.push_back(c);
	for (const NatConflict &c : before)
		if (!holds(after, c))
			changes.resolved.push_back(c);
	return changes;
}

namespace {

using nat::Decider;
using nat::NatAction;
using nat::Placement;

const char *placementText(Placement placement)
{
	switch (placement) {
	case Placement::beforeAgent: return "before the agent";
	case Placement::tiedWithAgent: return "at the agent's priority: the order is not defined";
	case Placement::afterAgent: return "after the agent";
	}
	return "?";
}

std::string actionText(const nat::Outcome &o, bool certain)
{
	const std::string to = o.addresses ? " to " + o.addresses->toString() : "";
	const auto verb = [certain](const char *does, const char *may) { return std::string(certain ? does : may); };
	switch (o.action) {
	case NatAction::none: return verb("does not NAT it", "may not NAT it");
	case NatAction::masquerade: return verb("masquerades it", "may masquerade it");
	case NatAction::snat: return verb("rewrites its source", "may rewrite its source") + to;
	case NatAction::dnat: return verb("rewrites its destination", "may rewrite its destination") + to;
	case NatAction::redirect: return verb("redirects it", "may redirect it");
	case NatAction::dropped: return verb("drops it", "may drop it");
	case NatAction::undetermined: return "may do anything with it";
	}
	return "?";
}

} // namespace

const nft::Table *findTable(const nft::NatRuleset &ruleset, const nft::Table *agent, nft::TableFamily family,
		       const std::string &name)
{
	if (agent && agent->family == family && agent->name == name)
		return agent;
	for (const nft::Table &table : ruleset.tables)
		if (table.family == family && table.name == name)
			return &table;
	return nullptr;
}

const nft::Rule *findRule(const nft::Table &table, const nat::RuleRef &ref)
{
	const nft::Chain *chain = table.findChain(ref.chain);
	if (!chain)
		return nullptr;
	// Where the walk met it, unless the chain was read again since.
	if (ref.position < chain->rules.size() && chain->rules[ref.position].handle == ref.handle)
		return &chain->rules[ref.position];
	for (const nft::Rule &rule : chain->rules)
		if (rule.handle == ref.handle)
			return &rule;
	return ref.position < chain->rules.size() ? &chain->rules[ref.position] : nullptr;
}

std::string describeOutcome(const nat::Outcome &o, bool certain)
{
	switch (o.decider) {
	case Decider::nobody:
		return "no chain NATs it";
	case Decider::agent:
		return "the agent " + actionText(o, certain);
	case Decider::evaluator:
		if (!o.base)
			return "the evaluator cannot tell: " + o.reason;
		break;
	case Decider::rule:
	case Decider::policy:
		break;
	}
	std::string out = fmt::format("table {} {} chain {} (priority {}, {})", nft::tableFamilyName(o.base->family),
				      escaped(o.base->table), escaped(o.base->chain),
				      formatChainPriority(o.base->priority), placementText(o.placement));
	if (o.decider == Decider::policy)
		return out + " drops it by its policy";
	if (o.decider == Decider::evaluator) {
		out += " cannot be evaluated: " + o.reason;
		return o.rule ? out + fmt::format(" (rule handle {})", o.rule->handle) : out;
	}
	out += fmt::format(" {}", actionText(o, certain)); // not " " + ...: GCC bug 105329 at -O3
	if (o.rule) {
		out += fmt::format(": rule handle {}", o.rule->handle);
		if (o.rule->chain != o.base->chain)
			out += fmt::format(" in chain {}", escaped(o.rule->chain));
	}
	return out;
}

Result<LegacyNat> legacyNatTables(const std::string &procNet)
{
	const auto lists = [&procNet](const char *file) -> Result<bool> {
		const std::string path = procNet + "/" + file;
		struct stat st;
		if (stat(path.c_str(), &st) != 0) {
			const int err = errno; // before the message allocates
			if (err == ENOENT)
				return false; // the module is not loaded
			return fail(fmt::format("cannot read {}: {}", path, std::strerror(err)), err);
		}
		std::ifstream in(path);
		if (!in)
			return fail(fmt::format("cannot read {}", path), EIO);
		std::string line;
		for (int lines = 0; lines < 1000 && std::getline(in, line); lines++)
			if (line == "nat")
				return true;
		return false;
	};
	auto v4 = lists("ip_tables_names");
	if (!v4)
		return fail(v4.error());
	auto v6 = lists("ip6_tables_names");
	if (!v6)
		return fail(v6.error());
	return LegacyNat{*v4, *v6};
}

} // namespace ipmasq
