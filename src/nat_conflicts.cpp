// SPDX-License-Identifier: Apache-2.0
// The conflict check's pure part: which decisions to sample, which outcomes undo them, and
// what changed between two passes.
#include "ip-masq-agent/nat_conflicts.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/explain.h"
#include "ip-masq-agent/nat_rule_text.h"
#include "ip-masq-agent/policy.h"

namespace ipmasq {

namespace {

// At most `limit` of `items`, evenly spaced from the first: a config of 10,000 CIDRs is
// checked across its whole range, in bounded time.
template<typename T>
std::vector<T> spread(const std::vector<T> &items, size_t limit)
{
	if (items.size() <= limit)
		return items;
	std::vector<T> out;
	out.reserve(limit);
	for (size_t i = 0; i < limit; i++)
		out.push_back(items[i * items.size() / limit]);
	return out;
}

// The first address of each non-masquerade interval and of each masqueraded range
// between them, in address order. The all-zeros address stands for no host: its
// range is sampled by the next address.
std::vector<Address> sampleDestinations(const IntervalSet &exempt)
{
	const Family family = exempt.family();
	std::vector<Address> out;
	Address next{family, 0};
	bool more = true; // the addresses from `next` on are not yet covered
	for (const AddressRange &range : exempt.ranges()) {
		if (next < range.first)
			out.push_back(next);
		out.push_back(range.first);
		more = range.last < Address::max(family);
		if (more)
			next = Address{family, range.last.value + 1};
	}
	if (more)
		out.push_back(next);
	for (Address &a : out)
		if (a.value == 0 && exempt.contains(a) == exempt.contains(Address{family, 1}))
			a.value = 1;
	return out;
}

// Beyond the limit the spread may skip link-local, the one entry the agent adds itself and
// the one other components most often leave out (kubelet's rule exempts only the cluster
// CIDR): its interval is always sampled, one more destination at most.
std::vector<Address> withLinkLocal(std::vector<Address> sampled, const IntervalSet &exempt)
{
	const Address linkLocal = linkLocalPrefix(exempt.family()).network;
	for (const AddressRange &range : exempt.ranges()) {
		if (!(range.first <= linkLocal && linkLocal <= range.last))
			continue;
		if (std::find(sampled.begin(), sampled.end(), range.first) == sampled.end())
			sampled.insert(std::upper_bound(sampled.begin(), sampled.end(), range.first),
				       range.first);
		break;
	}
	return sampled;
}

std::optional<AddressRange> agentSnatRange(const Config &config, Family family)
{
	const std::optional<OutputAddress> &output = config.outputAddressOf(family);
	if (!output)
		return std::nullopt;
	return output->range;
}

bool isNat(nat::NatAction action)
{
	switch (action) {
	case nat::NatAction::masquerade:
	case nat::NatAction::snat:
	case nat::NatAction::dnat:
	case nat::NatAction::redirect:
		return true;
	case nat::NatAction::none:
	case nat::NatAction::dropped:
	case nat::NatAction::undetermined:
		return false;
	}
	return false;
}

// Whether `o` undoes the sampled decision: a rule of another table NATs what the agent
// exempts, or rewrites the source to an address before the agent masquerades. A masquerade
// before the agent's does what the agent would; a drop is not NAT.
std::optional<NatConflict::Kind> conflictKind(const nat::Outcome &o, const SampledDecision &sample)
{
	if (o.decider != nat::Decider::rule || !isNat(o.action))
		return std::nullopt;
	if (!sample.masquerades)
		return NatConflict::Kind::natsExempted;
	if (o.action != nat::NatAction::snat)
		return std::nullopt;
	// An SNAT to where the agent's own outputAddress would put the source is the same
	// decision, made earlier.
	if (sample.agentSnat && o.address && sample.agentSnat->first <= *o.address &&
	    *o.address <= sample.agentSnat->last)
		return std::nullopt;
	return NatConflict::Kind::natsFirst;
}

std::string ruleTextOf(const nat::NatRuleset &ruleset, const nat::Outcome &o)
{
	if (!o.rule)
		return {};
	const nat::Rule *rule = nat::findRule(ruleset, *o.rule);
	if (!rule)
		return {};
	for (const nat::Table &table : ruleset.tables)
		if (table.family == o.rule->family && table.name == o.rule->table)
			return nat::ruleText(table, *rule);
	return {};
}

nat::Packet packetFor(const SampledDecision &sample)
{
	nat::Packet packet;
	packet.destination = sample.destination;
	packet.source = sample.source.value_or(Address{sample.destination.family, 0});
	packet.sourceKnown = sample.source.has_value();
	// The input interface and the protocol are not known: a match on them "may".
	packet.outputInterface = sample.outputInterface;
	packet.inputInterface = std::nullopt;
	return packet;
}

// Adds the conflicts one verdict shows that `pass` does not hold yet.
void collect(const nat::NatRuleset &ruleset, const SampledDecision &sample,
	     const nat::NatVerdict &verdict, size_t maxConflicts, ConflictPass &pass)
{
	for (const nat::Outcome &o : verdict.outcomes) {
		const auto kind = conflictKind(o, sample);
		if (!kind)
			continue;
		NatConflict conflict{*kind, sample.destination.family, verdict.certain(), o, {},
				     sample.entry, sample};
		const auto same = [&conflict](const NatConflict &c) { return c.sameAs(conflict); };
		if (std::any_of(pass.conflicts.begin(), pass.conflicts.end(), same))
			continue;
		if (pass.conflicts.size() >= maxConflicts) {
			pass.complete = false;
			return;
		}
		conflict.ruleText = ruleTextOf(ruleset, o);
		pass.conflicts.push_back(std::move(conflict));
	}
}

} // namespace

std::vector<SampledDecision> sampleDecisions(const Config &config, bool enableIpv6,
					     const SampleLimits &limits)
{
	std::vector<SampledDecision> out;
	for (const Family family : {Family::ipv4, Family::ipv6}) {
		if (family == Family::ipv6 && !enableIpv6)
			continue;
		const std::optional<AddressRange> agentSnat = agentSnatRange(config, family);
		std::vector<std::optional<Address>> sources;
		const IntervalSet allowed = masqueradeSources(config, family);
		for (const AddressRange &range : allowed.ranges())
			sources.emplace_back(range.first);
		if (sources.empty())
			sources.emplace_back(std::nullopt); // no entry of the family: any source
		sources = spread(sources, limits.maxSources);
		const IntervalSet exempt = resolveNonMasquerade(config, family);
		const auto destinations =
			withLinkLocal(spread(sampleDestinations(exempt), limits.maxDestinations), exempt);
		for (const Address &destination : destinations) {
			const ExplainDecision decision = explainDecision(config, destination);
			const std::string entry = describeDecidingEntry(config, decision);
			for (const std::optional<Address> &source : sources)
				out.push_back(SampledDecision{.destination = destination,
							      .source = source,
							      .outputInterface = std::nullopt,
							      .masquerades = decision.masqueraded,
							      .agentSnat = agentSnat,
							      .entry = entry});
		}
	}
	return out;
}

bool NatConflict::sameAs(const NatConflict &other) const
{
	return kind == other.kind && family == other.family && certain == other.certain &&
	       outcome.rule == other.outcome.rule && outcome.action == other.outcome.action &&
	       outcome.address == other.outcome.address && entry == other.entry;
}

std::string NatConflict::describeRule() const
{
	const std::string rule = ruleText.empty() ? std::string() : fmt::format(" (`{}`)", ruleText);
	return nat::describeOutcome(outcome, certain) + rule;
}

std::string NatConflict::describe() const
{
	const std::string from = example.source ? "from " + example.source->toString()
						: std::string("from any source");
	const std::string what =
		kind == Kind::natsExempted
			? fmt::format("which undoes {}: {} traffic {} to {} is not masqueraded by the agent",
				      entry, familyName(family), from, example.destination.toString())
			: fmt::format("before the agent masquerades {} traffic {} to {} ({})",
				      familyName(family), from, example.destination.toString(), entry);
	return fmt::format("{}, {}", describeRule(), what);
}

ConflictPass findConflicts(const nat::NatRuleset &ruleset, std::span<const SampledDecision> samples,
			   const nat::NodeAddresses &node, const nat::AgentPlacement &agent,
			   const CheckLimits &limits)
{
	ConflictPass pass;
	for (const SampledDecision &sample : samples) {
		if (pass.steps >= limits.maxSteps) {
			pass.complete = false;
			break;
		}
		nat::AgentPlacement placement = agent;
		placement.masquerades = sample.masquerades;
		const nat::NatVerdict verdict = nat::evaluate(ruleset, packetFor(sample), node, placement);
		pass.evaluated++;
		pass.steps += verdict.rulesEvaluated;
		collect(ruleset, sample, verdict, limits.maxConflicts, pass);
	}
	return pass;
}

void ConflictCycle::restart()
{
	next_ = 0;
	conflicts_.clear();
}

std::optional<std::vector<NatConflict>> ConflictCycle::add(const ConflictPass &pass, size_t sampleCount,
							   size_t maxConflicts)
{
	for (const NatConflict &conflict : pass.conflicts) {
		const auto same = [&conflict](const NatConflict &c) { return c.sameAs(conflict); };
		if (conflicts_.size() < maxConflicts &&
		    std::none_of(conflicts_.begin(), conflicts_.end(), same))
			conflicts_.push_back(conflict);
	}
	next_ += pass.evaluated;
	if (next_ < sampleCount)
		return std::nullopt;
	std::vector<NatConflict> done = std::move(conflicts_);
	restart();
	return done;
}

nat::NodeAddresses evaluatorAddresses(const std::vector<NodeAddress> &addresses)
{
	nat::NodeAddresses out;
	out.complete = true;
	for (const NodeAddress &a : addresses)
		out.addresses.push_back({a.address, a.prefixLength});
	return out;
}

ConflictChanges diffConflicts(const std::vector<NatConflict> &before,
			      const std::vector<NatConflict> &after)
{
	const auto in = [](const std::vector<NatConflict> &list, const NatConflict &c) {
		return std::any_of(list.begin(), list.end(),
				   [&c](const NatConflict &other) { return other.sameAs(c); });
	};
	ConflictChanges changes;
	for (const NatConflict &c : after)
		if (!in(before, c))
			changes.found.push_back(c);
	for (const NatConflict &c : before)
		if (!in(after, c))
			changes.resolved.push_back(c);
	return changes;
}

} // namespace ipmasq
