// SPDX-License-Identifier: Apache-2.0
// The NAT conflict check's thread: paced passes of reading other tables and evaluating the
// sampled packets, with what they find logged once and reported to the status.
#include "ip-masq-agent/daemon/conflict_check.h"

#include <fmt/format.h>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/agent_table.h"

namespace ipmasq {

namespace {

// Packets for the debug log, at most 512 of them.
std::string listed(std::span<const SampledPacket> packets)
{
	constexpr size_t kMax = 512;
	std::string out;
	for (size_t i = 0; i < packets.size() && i < kMax; i++)
		out += (i ? ", " : "") + packets[i].toString();
	if (packets.size() > kMax)
		out += fmt::format(" and {} more", packets.size() - kMax);
	return out;
}

} // namespace

struct ConflictCheck::Input {
	Ruleset ruleset; // until the thread made `agent` of it
	std::optional<nft::Table> agent;
	SamplePlan samples;
};

ConflictCheck::ConflictCheck(AgentStatus &status)
	: status_(status),
	  thread_("the NAT conflict check", {kPeriod, 10}, [this] { return pass(); })
{
}

void ConflictCheck::setDesired(const Ruleset &ruleset, SamplePlan samples)
{
	auto input = std::make_shared<Input>(Input{ruleset, std::nullopt, std::move(samples)});
	thread_.locked([&] { next_ = std::move(input); });
	thread_.nudge();
}

void ConflictCheck::setNodeAddresses(std::shared_ptr<const NodeAddresses> addresses)
{
	thread_.locked([&] { addresses_ = std::move(addresses); });
}

bool ConflictCheck::pass()
{
	if (auto next = thread_.locked([this] { return std::move(next_); })) {
		input_ = std::move(next);
		inputSerial_++;
		cycle_.stop();
	}
	return input_ && pass(*input_);
}

bool ConflictCheck::pass(Input &input)
{
	if (!input.agent && !linearizeAgent(input))
		return false;
	std::vector<std::string> warnings = legacyWarnings();
	const nft::NatRuleset *ruleset = otherTables(warnings);
	if (!ruleset)
		return false;
	Evaluated now{ruleset->generation, inputSerial_, thread_.locked([this] { return addresses_; }),
		      warnings};
	if (!cycle_.running()) {
		if (evaluated_ == now)
			return false;
		cycle_.restart(cycleSamples(input.samples, *ruleset, *now.addresses));
	}
	auto cycle = evaluate(*ruleset, *input.agent, *now.addresses);
	if (!cycle)
		return true;
	evaluated_ = std::move(now);
	report(std::move(*cycle), std::move(warnings));
	return false;
}

std::optional<std::vector<NatConflict>> ConflictCheck::evaluate(const nft::NatRuleset &ruleset,
								const nft::Table &agent,
								const NodeAddresses &addresses)
{
	// Twice at most: the port samples join the cycle once, and go in the same pass while
	// its steps last.
	size_t steps = 0;
	for (int round = 0; round < 2; round++) {
		CheckLimits budget;
		budget.maxSteps = kStepsPerPass - steps;
		const size_t before = cycle_.samples().size(), left = cycle_.rest().size();
		const ConflictPass pass = findConflicts(ruleset, &agent, cycle_.rest(), addresses, budget);
		steps += pass.steps;
		if (auto done = cycle_.add(pass))
			return done;
		// Not "NAT conflict", which the operator greps for conflicts (docs/kubernetes.md).
		if (cycle_.samples().size() > before && log::debugEnabled())
			log::debug("the conflict check adds {} packets with the ports that decide its \"may\" "
				   "conflicts: {}", cycle_.samples().size() - before,
				   listed(std::span(cycle_.samples()).subspan(before)));
		if (pass.evaluated < left || steps >= kStepsPerPass)
			break;
	}
	log::debug("the NAT conflict check goes on at sample {} of {} in the next pass ({} steps in this one)",
		   cycle_.next(), cycle_.samples().size(), steps);
	return std::nullopt;
}

std::vector<SampledPacket> ConflictCheck::cycleSamples(const SamplePlan &plan, const nft::NatRuleset &ruleset,
							const NodeAddresses &node)
{
	RuleSamples more = samplesFromRules(ruleset, plan, node);
	const RuleSampleLimits limits;
	const auto cuts = [](const std::vector<RuleSamples::Cut> &list, Family family) {
		return std::any_of(list.begin(), list.end(), [family](const RuleSamples::Cut &c) { return c.family == family; });
	};
	for (const RuleSamples::Cut &cut : more.cuts)
		if (!cuts(cuts_, cut.family))
			log::info("other tables' rules match {}{} {} destinations (the boundaries of their destination "
				  "matches): the conflict check samples {} of them, evenly spread (its bound: {} a "
				  "family, and {} elements of a set); --explain=ADDRESS evaluates any other",
				  cut.atLeast ? "at least " : "", cut.found, familyName(cut.family), cut.sampled,
				  limits.maxDestinations, limits.maxSetElements);
	for (const RuleSamples::Cut &cut : cuts_)
		if (!cuts(more.cuts, cut.family))
			log::info("the conflict check samples every {} destination other tables' rules match again",
				  familyName(cut.family));
	cuts_ = std::move(more.cuts);
	std::vector<SampledPacket> samples = plan.packets;
	samples.insert(samples.end(), more.packets.begin(), more.packets.end());
	if (log::debugEnabled())
		log::debug("the conflict check's cycle: {} packets, {} of them where other tables' rules "
			   "match: {}", samples.size(), more.packets.size(), listed(samples));
	return samples;
}

bool ConflictCheck::linearizeAgent(Input &input)
{
	auto table = nft::agentTable(input.ruleset);
	if (!table) {
		log::warning("the NAT conflict check cannot read the agent's own rules: {}",
			     table.error().message);
		status_.natConflictCheckFailed({fmt::format("could not check other tables' NAT: the agent's "
							    "own rules cannot be read: {}", table.error().message)});
		return false;
	}
	input.agent = std::move(*table);
	input.ruleset = {};
	return true;
}

const nft::NatRuleset *ConflictCheck::otherTables(std::vector<std::string> &warnings)
{
	auto generation = nft::readRulesetGeneration();
	if (read_ && generation && *generation == read_->generation) {
		log::debug("other tables' NAT: nothing committed since generation {}, not read again",
			   read_->generation);
		return &*read_;
	}
	read_.reset(); // before the read: the old tables and the new are not held at once
	nft::NatReadLimits limits;
	limits.skipInetTable = input_->agent->name;
	auto ruleset = generation ? nft::readNatRuleset(limits) : Result<nft::NatRuleset>(fail(generation.error()));
	if (!ruleset) {
		if (readError_.changed(ruleset.error().message))
			log::warning("{}; other tables' NAT is not checked against the agent's decisions "
				     "until it can be read", ruleset.error().message);
		evaluated_.reset();
		// Said where the operator looks, like a conflict: no gauge is not "no conflict".
		warnings.insert(warnings.begin(),
				fmt::format("could not check other tables' NAT: {}", ruleset.error().message));
		status_.natConflictCheckFailed(std::move(warnings));
		return nullptr;
	}
	if (readError_.clear())
		log::info("other tables' NAT is readable again");
	log::debug("other tables' NAT read at generation {}: {} tables", ruleset->generation, ruleset->tables.size());
	return &read_.emplace(std::move(*ruleset));
}

void ConflictCheck::report(std::vector<NatConflict> conflicts, std::vector<std::string> warnings)
{
	const ConflictChanges changes = diffConflicts(conflicts_, conflicts);
	for (const NatConflict &c : changes.found)
		log::warning("NAT conflict: {}", c.describe());
	for (const NatConflict &c : changes.resolved)
		log::info("NAT conflict resolved: {}", c.describe());
	AgentStatus::Snapshot::NatConflicts counts;
	for (const NatConflict &c : conflicts) {
		(c.kind == NatConflict::Kind::undetermined ? counts.undetermined
		 : c.certain				   ? counts.certain
							   : counts.may)++;
		warnings.push_back("NAT conflict: " + c.describe());
	}
	conflicts_ = std::move(conflicts);
	status_.natConflictsChecked(counts, std::move(warnings));
}

std::vector<std::string> ConflictCheck::legacyWarnings()
{
	std::vector<std::string> warnings;
	auto legacy = legacyNatTables();
	if (!legacy) {
		log::debug("{}; legacy iptables nat tables are not looked for", legacy.error().message);
		return warnings;
	}
	const std::pair<bool, const char *> kinds[] = {{legacy->ipv4, "ip_tables_names"},
						       {legacy->ipv6, "ip6_tables_names"}};
	for (size_t i = 0; i < 2; i++) {
		if (!kinds[i].first)
			continue;
		warnings.push_back(fmt::format(
			"legacy iptables nat rules exist (/proc/net/{} lists nat): they are outside "
			"nf_tables, so the conflict check cannot see whether they undo the agent's "
			"decisions (iptables-legacy-save -t nat lists them)", kinds[i].second));
		if (!std::exchange(legacySaid_[i], true))
			log::warning("{}", warnings.back());
	}
	return warnings;
}

} // namespace ipmasq
