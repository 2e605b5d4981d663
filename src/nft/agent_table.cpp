// SPDX-License-Identifier: Apache-2.0
// The agent's own table as the kernel would hold it, encoded and read back.
#include "ip-masq-agent/nft/agent_table.h"

#include <map>
#include <span>
#include <string>
#include <vector>

#include <linux/netfilter/nf_tables.h>

#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/decoder.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/objects.h"

namespace ipmasq::nft {

using netlink::stringOf;

namespace {

// A rule of the agent's batch, its look-ups naming the sets the kernel would name.
std::vector<Expression> withSetNames(const nftnl_rule *rule, const std::map<uint32_t, std::string> &batchSets)
{
	std::vector<Expression> expressions = decodeRuleExpressions(rule, kMaxExpressionsPerRule + 1);
	for (Expression &e : expressions)
		if (auto *lookup = std::get_if<Lookup>(&e); lookup && lookup->setId && batchSets.count(*lookup->setId))
			lookup->set = batchSets.at(*lookup->setId);
	return expressions;
}

} // namespace

Table decodeEncodedTable(const netlink::EncodedTable &encoded, bool namedSetElements)
{
	Table table{TableFamily::inet, stringOf(nftnl_table_get_str(encoded.table.get(), NFTNL_TABLE_NAME)), {}, {}};
	// Sets as the kernel holds them; anonymous ones get the names the kernel would give.
	std::map<uint32_t, std::string> batchSets; // by the id that names them in the batch
	const auto addSet = [&](const netlink::EncodedSet &encoded) {
		Set set = declaredSet(encoded.set.get());
		const bool anonymous = set.flags & NFT_SET_ANONYMOUS;
		if (anonymous) {
			set.name = fmt::format("__set{}", batchSets.size());
			batchSets[nftnl_set_get_u32(encoded.set.get(), NFTNL_SET_ID)] = set.name;
		}
		// A named set's 100,000 elements are not even walked when only the rules are wanted.
		const std::span<const netlink::ElementChunk> chunks =
			anonymous || namedSetElements ? std::span(encoded.elements) : std::span<const netlink::ElementChunk>();
		for (const netlink::ElementChunk &chunk : chunks)
			for (const netlink::ElementSpec &spec : chunk.elements)
				set.add({Bytes(spec.key.begin(), spec.key.begin() + spec.keyLen), {}, spec.intervalEnd});
		set.finish();
		table.sets.push_back(std::move(set));
	};
	for (const netlink::EncodedSet &set : encoded.sets)
		addSet(set);
	for (const netlink::EncodedChain &chain : encoded.chains)
		for (const netlink::EncodedRule &rule : chain.rules)
			for (const netlink::EncodedSet &set : rule.anonymousSets)
				addSet(set);
	for (const netlink::EncodedChain &encodedChain : encoded.chains) {
		Chain chain = declaredChain(encodedChain.chain.get());
		uint64_t handle = 0;
		for (const netlink::EncodedRule &rule : encodedChain.rules)
			chain.rules.push_back(decodeRule(table, ++handle, withSetNames(rule.rule.get(), batchSets),
							 ruleComment(rule.rule.get())));
		table.chains.push_back(std::move(chain));
	}
	return table;
}

Result<Table> agentTable(const Ruleset &ruleset)
{
	auto encoded = netlink::encodeRuleset(ruleset);
	if (!encoded)
		return fail(encoded.error());
	return decodeEncodedTable(*encoded, true);
}

} // namespace ipmasq::nft
