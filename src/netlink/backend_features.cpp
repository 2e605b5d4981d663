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
#include <cstdio> // libnftnl/expr.h needs FILE
#include <utility>

#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>

#include <fmt/format.h>

#include "ip-masq-agent/log.h"
#include "ip-masq-agent/netlink/backend.h"
#include "ip-masq-agent/netlink/batch.h"
#include "ip-masq-agent/netlink/objects.h"

namespace ipmasq {

using namespace netlink;

namespace {

// A NAT range flag no kernel defines: nft_masq refuses unknown flags with EINVAL, which
// is exactly what a kernel that predates fully-random answers to that flag.
constexpr uint32_t kUnknownNatFlag = 0x8000;
static_assert((kUnknownNatFlag & NF_NAT_RANGE_MASK) == 0);

bool usesFullyRandom(const Rule &rule)
{
	const auto *masquerade = std::get_if<Masquerade>(&rule.statement);
	return masquerade != nullptr && masquerade->fullyRandom;
}

// A C callback (nftnl_expr_foreach): swaps the fully-random flag for the unknown one.
int replaceFullyRandomFlag(nftnl_expr *expr, void *)
{
	const char *name = nftnl_expr_get_str(expr, NFTNL_EXPR_NAME);
	if (name == nullptr || std::string_view(name) != "masq" ||
	    !nftnl_expr_is_set(expr, NFTNL_EXPR_MASQ_FLAGS))
		return 0;
	const uint32_t flags = nftnl_expr_get_u32(expr, NFTNL_EXPR_MASQ_FLAGS);
	if (flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY)
		nftnl_expr_set_u32(expr, NFTNL_EXPR_MASQ_FLAGS,
				   (flags & ~NF_NAT_RANGE_PROTO_RANDOM_FULLY) | kUnknownNatFlag);
	return 0;
}

// `ruleset` as this kernel can hold it: a copy only on kernels that refused a feature.
Ruleset withoutFullyRandom(const Ruleset &ruleset)
{
	Ruleset adapted = ruleset;
	for (Chain &chain : adapted.chains)
		for (Rule &rule : chain.rules)
			if (auto *masquerade = std::get_if<Masquerade>(&rule.statement))
				masquerade->fullyRandom = false;
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

Result<uint32_t> NetlinkBackend::commitTable(const Ruleset &ruleset)
{
	auto exists = tableExists(ruleset.table);
	if (!exists)
		return fail(exists.error());
	if (!*exists) {
		auto created = replaceTable(ruleset, true);
		if (created || refusedFeature_ || created.error().errnum != EEXIST)
			return created;
		log::debug("table inet {} was created by someone else meanwhile; replacing it",
			   ruleset.table);
	}
	return replaceTable(ruleset, false);
}

Result<bool> NetlinkBackend::tableExists(const std::string &table)
{
	TablePtr request = tableHandle(table, false);
	Status s = socket_.query(
		(NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE, NFPROTO_INET, 0,
		[&](nlmsghdr *nlh) { nftnl_table_nlmsg_build_payload(nlh, request.get()); },
		[](const nlmsghdr *) -> Status { return {}; });
	if (s)
		return true;
	if (s.error().errnum == ENOENT)
		return false;
	return fail(s.error().withContext(fmt::format("reading table inet {}: ", table)));
}

Result<EncodedTable> NetlinkBackend::encodeForKernel(const Ruleset &ruleset, bool forCommit)
{
	auto encoded = limits_.noFullyRandom ? encodeRuleset(withoutFullyRandom(ruleset))
					     : encodeRuleset(ruleset);
	if (!encoded || !forCommit)
		return encoded;

	featureObjects_.clear();
	// encodeRuleset() keeps the model's order of chains and rules.
	if (encoded->chains.size() != ruleset.chains.size())
		return encoded;
	for (size_t c = 0; c < ruleset.chains.size(); c++) {
		const Chain &chain = ruleset.chains[c];
		EncodedChain &out = encoded->chains[c];
		if (chain.hook)
			featureObjects_.push_back({out.description, Feature::inetNat});
		if (limits_.noFullyRandom || out.rules.size() != chain.rules.size())
			continue;
		for (size_t r = 0; r < chain.rules.size(); r++) {
			if (!usesFullyRandom(chain.rules[r]))
				continue;
			featureObjects_.push_back({out.rules[r].description,
						   Feature::fullyRandomMasquerade});
			if (simulateNoFullyRandom_)
				nftnl_expr_foreach(out.rules[r].rule.get(), replaceFullyRandomFlag,
						   nullptr);
		}
	}
	return encoded;
}

void NetlinkBackend::noteRefusal(const Batch &batch, uint32_t seq, int error)
{
	const std::string object = batch.describe(seq);
	for (const FeatureObject &carrier : featureObjects_) {
		if (carrier.description != object)
			continue;
		switch (carrier.feature) {
		case Feature::fullyRandomMasquerade:
			// An unknown NAT flag: EINVAL from nft_masq's validation.
			if (error == EINVAL || error == EOPNOTSUPP)
				refusedFeature_ = carrier.feature;
			return;
		case Feature::inetNat:
			// No "nat" chain type for family inet: its lookup fails.
			if (error == ENOENT || error == EOPNOTSUPP)
				refusedFeature_ = carrier.feature;
			return;
		}
	}
}

} // namespace ipmasq
