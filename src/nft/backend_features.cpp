// SPDX-License-Identifier: Apache-2.0
// The netlink backend's kernel features: learned from the commits the kernel refuses, not probed.
//
// A probe costs two check-only batches (~30 ms) before every start. Instead the real
// table is sent; only when the kernel refuses the object that carries a feature does the
// backend adapt: without fully-random it sends the table again without the flag (as
// upstream does when iptables lacks --random-fully), without NAT in the inet family
// (Linux < 5.2) it says which kernel is needed. The refused object is known from the
// batch's sequence numbers, never from the text of an error.
#include <cerrno>
#include <cstdint>
#include <utility>
#include <variant>

#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/nft/table_batch.h"
#include "ip-masq-agent/nft/objects.h"

namespace ipmasq {

using namespace netlink;

namespace {

// A NAT range flag no kernel defines: nft_masq refuses unknown flags with EINVAL, which
// is exactly what a kernel that predates fully-random answers to that flag.
constexpr uint32_t kUnknownNatFlag = 0x8000;
static_assert((kUnknownNatFlag & NF_NAT_RANGE_MASK) == 0);

// The fully-random flag of a statement, or null for a kind that has none. Exhaustive: a
// new kind of statement is a compile error here until it says whether it has one, so the
// fallback below cannot skip a new NAT statement.
bool *fullyRandomFlag(Statement &statement)
{
	return std::visit(Overloaded{
				  [](JumpIfNotLocal &) -> bool * { return nullptr; },
				  [](ReturnIfDestinationInSet &) -> bool * { return nullptr; },
				  [](ReturnIfOutputInterfaceInSet &) -> bool * { return nullptr; },
				  [](MatchUnlistedSource &) -> bool * { return nullptr; },
				  [](Masquerade &s) -> bool * { return &s.fullyRandom; },
				  [](SourceNat &s) -> bool * { return &s.fullyRandom; },
				  [](GuardLimit &) -> bool * { return nullptr; },
			  },
			  statement);
}

bool usesFullyRandom(const Statement &statement)
{
	// fullyRandomFlag() only points into the statement; nothing is written here.
	const bool *flag = fullyRandomFlag(const_cast<Statement &>(statement));
	return flag != nullptr && *flag;
}

// `ruleset` as this kernel can hold it: a copy only on kernels that refused a feature.
Ruleset withoutFullyRandom(const Ruleset &ruleset)
{
	Ruleset adapted = ruleset;
	for (Chain &chain : adapted.chains)
		for (Rule &rule : chain.rules)
			if (bool *flag = fullyRandomFlag(rule.statement))
				*flag = false;
	return adapted;
}

} // namespace

Result<uint32_t> NetlinkBackend::apply(const Ruleset &ruleset)
{
	refusedFeature_.reset();
	auto applied = commitTable(ruleset);
	if (applied || !refusedFeature_)
		return applied;
	switch (*std::exchange(refusedFeature_, std::nullopt)) {
	case Feature::inetNat:
		return fail(applied.error().withContext(
			"this kernel has no NAT in nftables' inet family (Linux 5.2 or later is "
			"needed); upgrade the kernel, or keep using the iptables-based agent: "));
	case Feature::fullyRandomMasquerade:
		log::warning("this kernel refuses masquerade fully-random ({}); masquerading "
			     "without it from now on (as upstream does when iptables lacks "
			     "--random-fully)", applied.error().message);
		limits_.noFullyRandom = true;
		return commitTable(ruleset);
	}
	return applied;
}

Result<EncodedTable> NetlinkBackend::encodeForKernel(const Ruleset &ruleset) const
{
	// The fault hook: the flag bit becomes one no kernel knows, until apply() learns to
	// leave it out.
	const EncodingOptions options{simulateNoFullyRandom_ ? kUnknownNatFlag
							    : NF_NAT_RANGE_PROTO_RANDOM_FULLY};
	return limits_.noFullyRandom ? encodeRuleset(withoutFullyRandom(ruleset), options)
				     : encodeRuleset(ruleset, options);
}

std::vector<NetlinkBackend::FeatureCarrier>
NetlinkBackend::featureCarriers(const Ruleset &ruleset, const EncodedTable &encoded) const
{
	std::vector<FeatureCarrier> carriers;
	// encodeRuleset() keeps the model's order of chains and rules.
	if (encoded.chains.size() != ruleset.chains.size())
		return carriers;
	for (size_t c = 0; c < ruleset.chains.size(); c++) {
		const Chain &chain = ruleset.chains[c];
		const EncodedChain &out = encoded.chains[c];
		if (chain.hook)
			carriers.push_back({&out, Feature::inetNat});
		if (limits_.noFullyRandom || out.rules.size() != chain.rules.size())
			continue;
		for (size_t r = 0; r < chain.rules.size(); r++)
			if (usesFullyRandom(chain.rules[r].statement))
				carriers.push_back({&out.rules[r], Feature::fullyRandomMasquerade});
	}
	return carriers;
}

std::optional<NetlinkBackend::Feature>
NetlinkBackend::refusedFeature(const Batch &batch, const std::vector<FeatureCarrier> &carriers,
			       uint32_t seq, int error)
{
	// The refused message's sequence number names the object it carried: two objects
	// may share a description, never an identity.
	const void *refused = batch.sourceOf(seq);
	for (const FeatureCarrier &carrier : carriers) {
		if (refused == nullptr || carrier.object != refused)
			continue;
		switch (carrier.feature) {
		case Feature::fullyRandomMasquerade:
			// An unknown NAT flag: EINVAL from nft_masq's validation.
			if (error == EINVAL || error == EOPNOTSUPP)
				return carrier.feature;
			return std::nullopt;
		case Feature::inetNat:
			// No "nat" chain type for family inet: its lookup fails.
			if (error == ENOENT || error == EOPNOTSUPP)
				return carrier.feature;
			return std::nullopt;
		}
	}
	return std::nullopt;
}

} // namespace ipmasq
