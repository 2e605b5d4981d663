// SPDX-License-Identifier: Apache-2.0
// The mapping between config + flags and the desired ruleset, in both directions.
#include "ip-masq-agent/ruleset_mapping.h"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/policy.h"

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

// The base chain's jumps: one for every family at once (or IPv4 only) as upstream, or,
// when masqueradeSourceCIDRs restricts a family, one per family, the restricted ones
// matching their source set. Their comments do not embed the chain's name, so they do
// not lower the longest --masq-chain that fits.
void addJumpRules(Chain &base, const std::vector<Family> &families, const Ruleset &ruleset,
		  const RulesetOptions &options)
{
	const auto sourceSetOf = [&ruleset](Family family) {
		return ruleset.findSet(sourceSetName(family));
	};
	const bool restricted = std::any_of(families.begin(), families.end(), sourceSetOf);
	if (!restricted) {
		base.rules.push_back(Rule{
			JumpIfNotLocal{options.enableIpv6 ? std::nullopt : std::optional(Family::ipv4),
				       options.masqChain, {}},
			fmt::format("non-local destinations go through {}", options.masqChain)});
		return;
	}
	for (const Family family : families) {
		if (const AddressSet *sources = sourceSetOf(family))
			base.rules.push_back(Rule{
				JumpIfNotLocal{family, options.masqChain, sources->name},
				fmt::format("{} sources in masqueradeSourceCIDRs, to non-local "
					    "destinations", familyName(family))});
		else
			base.rules.push_back(Rule{
				JumpIfNotLocal{family, options.masqChain, {}},
				fmt::format("every {} source (masqueradeSourceCIDRs lists no {}), to "
					    "non-local destinations", familyName(family), familyName(family))});
	}
}

void addMasqueradeRules(Chain &chain, const RulesetOptions &options)
{
	// Spread flows over the ranges in proportion to their sizes, as upstream does with
	// "-m statistic --probability": rule i takes size_i of the flows still undecided,
	// so every range gets exactly size_i / total of all flows. The last takes the rest.
	uint32_t remaining = 0;
	for (const PortRange &range : options.toPorts)
		remaining += range.size();
	const uint32_t total = remaining;
	for (const PortRange &range : options.toPorts) {
		Masquerade masq{range, std::nullopt, options.randomFully};
		if (range.size() != remaining)
			masq.sample = RandomSample{remaining, range.size()};
		chain.rules.push_back(Rule{
			masq, fmt::format("tcp, udp and sctp get source ports {} ({} of {} ports)",
					  range.toString(), range.size(), total)});
		remaining -= range.size();
	}
	chain.rules.push_back(Rule{Masquerade{std::nullopt, std::nullopt, options.randomFully},
				   "outbound traffic is masqueraded (must be last in chain)"});
}

} // namespace

Ruleset buildRuleset(const Config &config, const RulesetOptions &options)
{
	Ruleset ruleset;
	ruleset.table = options.table;
	ruleset.comment = "managed by ip-masq-agent: edits are overwritten, change its config";

	std::vector<Family> families{Family::ipv4};
	if (options.enableIpv6)
		families.push_back(Family::ipv6);
	for (Family family : families)
		ruleset.sets.push_back(nonMasqueradeSet(family, config));
	// Source sets only where masqueradeSourceCIDRs lists the family: without the key the
	// table is exactly upstream's.
	for (Family family : families)
		if (hasFamily(config.masqueradeSourceCIDRs, family))
			ruleset.sets.push_back(sourceSet(family, config));

	Chain base{kBaseChainName, BaseChainHook{options.priority},
		   "nat postrouting hook of ip-masq-agent", {}};
	addJumpRules(base, families, ruleset, options);

	Chain masq{options.masqChain, std::nullopt,
		   "return for non-masquerade destinations, masquerade the rest", {}};
	for (Family family : families)
		if (const AddressSet *set = ruleset.findSet(family))
			masq.rules.push_back(Rule{ReturnIfDestinationInSet{set->family(), set->name},
						  fmt::format("{} is not subject to masquerade", set->name)});
	addMasqueradeRules(masq, options);

	ruleset.chains.push_back(std::move(base));
	ruleset.chains.push_back(std::move(masq));
	return ruleset;
}

std::optional<Ruleset> rulesetFromKernelSets(const RulesetOptions &options,
					     const std::vector<AddressSet> &kernelSets)
{
	// The config the sets' names and comments describe. A placeholder prefix of the
	// family stands for each list that left a mark: buildRuleset then makes the same
	// sets, rules and comments, and the elements are the kernel's (below).
	Config config;
	for (const AddressSet &set : kernelSets) {
		const Family family = set.family();
		const Prefix placeholder{Address{family, 0}, 0, {}, {}};
		if (set.name == sourceSetName(family)) {
			config.masqueradeSourceCIDRs.push_back(placeholder);
			continue;
		}
		if (set.name != destinationSetName(family))
			return std::nullopt;
		const auto traits = destinationSetTraits(family, set.comment);
		if (!traits)
			return std::nullopt;
		(family == Family::ipv4 ? config.masqLinkLocal : config.masqLinkLocalIPv6) =
			!traits->linkLocal;
		if (traits->exceptions)
			config.masqueradeCIDRs.push_back(placeholder);
	}
	Ruleset candidate = buildRuleset(config, options);
	if (candidate.sets.size() != kernelSets.size())
		return std::nullopt;
	for (AddressSet &set : candidate.sets) {
		const auto kernel = std::find_if(kernelSets.begin(), kernelSets.end(),
						 [&](const AddressSet &k) { return k.name == set.name; });
		if (kernel == kernelSets.end() || kernel->family() != set.family())
			return std::nullopt;
		set.elements = kernel->elements;
	}
	return candidate;
}

namespace {

// Every comment the ruleset carries, with what it belongs to.
std::vector<std::pair<std::string, std::string>> comments(const Ruleset &ruleset)
{
	std::vector<std::pair<std::string, std::string>> out{{"the table", ruleset.comment}};
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
	return {Config{}, both, v4Sources, v6Sources};
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
	for (const Config &config : configsWithEveryComment())
		for (auto &entry : comments(buildRuleset(config, widest)))
			all.push_back(std::move(entry));
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
