// SPDX-License-Identifier: Apache-2.0
// What one rule of a nat chain does to the evaluator's synthetic packet, on each path it
// forks into: the values the rule loads (bytes, each known or not), its matches (three-
// valued: one that may or may not hold forks the path), the verdict or NAT it ends with.
// The walk of the chains (evaluator.h) asks it rule after rule.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/diagnose/evaluator.h"

namespace ipmasq::nat {

// How a rule ends on one path.
struct RuleExit {
	enum class Kind { next, verdict, nat, undetermined } kind = Kind::next;
	nft::Verdict verdict = {};
	NatAction action = NatAction::none;
	std::optional<AddressRange> addresses = {};
	std::string reason = {};
	std::optional<uint32_t> mark = {}, ctMark = {};

	// Built field by field: GCC 12 at -O3 takes an aggregate with a defaulted Verdict for
	// one that may be read uninitialized (-Wmaybe-uninitialized), which fails the release
	// build.
	static RuleExit undetermined(std::string reason)
	{
		RuleExit e;
		e.kind = Kind::undetermined;
		e.action = NatAction::undetermined;
		e.reason = std::move(reason);
		return e;
	}
};

class RuleEvaluator
{
public:
	// Each rule it cannot decide goes to `mayPoints`, once per reason.
	RuleEvaluator(const Packet &packet, const NodeAddresses &node, const Limits &limits,
		      std::vector<MayPoint> &mayPoints);
	~RuleEvaluator();

	// How `rule` of `table` ends, on each path it forks into, for the packet with these
	// marks.
	std::vector<RuleExit> evaluate(const nft::Table &table, const nft::Rule &rule, std::optional<uint32_t> mark,
				       std::optional<uint32_t> ctMark, const RuleRef &ref);

private:
	class Impl;
	std::unique_ptr<Impl> impl_;
};

} // namespace ipmasq::nat
