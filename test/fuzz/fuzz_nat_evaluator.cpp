// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the NAT evaluator and the rule renderer on arbitrary tables, chains, jump
// graphs (loops included), expression lists, sets and packets decoded from the input. No
// crash, no hang (the walk stays within its step bound), the same verdict twice, at least
// one outcome, "certain" never with an undetermined outcome, and every text one line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include "fuzz_support.h"
#include "ip-masq-agent/nat_evaluator.h"
#include "ip-masq-agent/nat_rule_text.h"

using namespace ipmasq;
using namespace ipmasq::nat;

namespace {

// Reads the input as a stream of choices; past its end every choice is 0.
class Input
{
public:
	Input(const uint8_t *data, size_t size) : data_(data), size_(size) {}

	uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
	uint32_t below(uint32_t n) { return n == 0 ? 0 : byte() % n; }
	bool flag() { return byte() & 1; }
	uint32_t u32()
	{
		uint32_t v = 0;
		for (int i = 0; i < 4; i++)
			v = (v << 8) | byte();
		return v;
	}
	Bytes bytes(size_t n)
	{
		Bytes out(n);
		for (uint8_t &b : out)
			b = byte();
		return out;
	}
	std::string text(size_t max)
	{
		std::string out(below(static_cast<uint32_t>(max + 1)), '\0');
		for (char &c : out)
			c = static_cast<char>(byte());
		return out;
	}

private:
	const uint8_t *data_;
	size_t size_;
	size_t pos_ = 0;
};

// Registers: valid ones of both sizes, the verdict register, and invalid numbers.
uint32_t reg(Input &in)
{
	static constexpr uint32_t kRegs[] = {NFT_REG_1, NFT_REG_2, NFT_REG_3, NFT_REG_4, NFT_REG32_00,
					     NFT_REG32_01, NFT_REG32_07, NFT_REG32_15, NFT_REG_VERDICT,
					     5, 99};
	return kRegs[in.below(std::size(kRegs))];
}

std::optional<uint32_t> optReg(Input &in)
{
	return in.flag() ? std::optional<uint32_t>(reg(in)) : std::nullopt;
}

std::string chainName(Input &in, uint32_t chains)
{
	// Sometimes a chain that does not exist.
	const uint32_t i = in.below(chains + 1);
	return "c" + std::to_string(i);
}

Verdict verdict(Input &in, uint32_t chains)
{
	static constexpr VerdictCode kCodes[] = {
		VerdictCode::accept, VerdictCode::drop, VerdictCode::queue, VerdictCode::stolen,
		VerdictCode::continueRule, VerdictCode::breakRule, VerdictCode::jump,
		VerdictCode::goTo, VerdictCode::returnToCaller};
	Verdict v{kCodes[in.below(std::size(kCodes))], {}};
	if (v.code == VerdictCode::jump || v.code == VerdictCode::goTo)
		v.chain = chainName(in, chains);
	return v;
}

Expression expression(Input &in, uint32_t chains, uint32_t sets)
{
	static constexpr PayloadBase kBases[] = {PayloadBase::link, PayloadBase::network,
						 PayloadBase::transport, PayloadBase::inner};
	static constexpr CmpOp kOps[] = {CmpOp::eq, CmpOp::neq, CmpOp::lt, CmpOp::lte, CmpOp::gt, CmpOp::gte};
	switch (in.below(24)) {
	case 0: return PayloadLoad{kBases[in.below(4)], in.below(48), in.below(24), reg(in)};
	case 1: return MetaLoad{in.below(40), reg(in)};
	case 2: return MetaSet{in.below(6), reg(in)};
	case 3: return CtLoad{in.below(26), in.flag() ? std::optional<uint8_t>(in.below(2)) : std::nullopt, reg(in)};
	case 4: return CtSet{in.below(6), reg(in)};
	case 5: return Fib{in.below(64), in.below(5), reg(in)};
	case 6: {
		const uint32_t len = in.below(20);
		return Bitwise{static_cast<BitwiseOp>(in.below(3)), reg(in), reg(in), len,
			       in.bytes(in.below(len + 2)), in.bytes(in.below(len + 2)), in.below(40)};
	}
	case 7: return Byteorder{in.flag(), reg(in), reg(in), in.below(20), in.below(10)};
	case 8: return Cmp{reg(in), kOps[in.below(6)], in.bytes(in.below(18))};
	case 9: {
		const size_t len = in.below(6);
		return Range{reg(in), in.flag(), in.bytes(len), in.bytes(in.flag() ? len : in.below(6))};
	}
	case 10: return Lookup{"s" + std::to_string(in.below(sets + 1)), reg(in), optReg(in), in.flag()};
	case 11: return Immediate{reg(in), in.bytes(in.below(20))};
	case 12: return ImmediateVerdict{verdict(in, chains)};
	case 13: return Masquerade{in.u32(), optReg(in), optReg(in)};
	case 14: {
		Nat n;
		n.type = in.flag() ? NatType::snat : NatType::dnat;
		n.family = in.below(12);
		n.addrMinReg = optReg(in);
		n.addrMaxReg = optReg(in);
		n.protoMinReg = optReg(in);
		n.protoMaxReg = optReg(in);
		n.flags = in.u32();
		return n;
	}
	case 15: return Redirect{in.u32(), optReg(in), optReg(in)};
	case 16: return Counter{in.u32(), in.u32()};
	case 17: return Log{in.flag() ? std::optional<std::string>(in.text(8)) : std::nullopt, {}};
	case 18: return Passthrough{in.text(6)};
	case 19: return RateMatch{"limit"};
	case 20: return OpaqueLoad{"numgen", reg(in), in.below(24)};
	case 21: {
		static const char *kNames[] = {"addrtype", "mark", "comment", "statistic"};
		return CompatMatch{kNames[in.below(4)], in.below(3), in.bytes(in.below(16))};
	}
	case 22: {
		static const char *kNames[] = {"MASQUERADE", "SNAT", "DNAT", "REDIRECT", "RETURN",
					       "ACCEPT", "DROP", "MARK"};
		return CompatTarget{kNames[in.below(8)], in.below(3), in.bytes(in.below(48))};
	}
	default: return Unknown{in.text(6)};
	}
}

Set set(Input &in, uint32_t index, uint32_t chains)
{
	static constexpr uint32_t kFlags[] = {0, NFT_SET_INTERVAL, NFT_SET_MAP, NFT_SET_TIMEOUT,
					      NFT_SET_INTERVAL | NFT_SET_CONCAT, NFT_SET_ANONYMOUS};
	Set s;
	s.name = "s" + std::to_string(index);
	s.flags = kFlags[in.below(std::size(kFlags))];
	s.keyLen = in.flag() ? 4 : in.below(20);
	s.dataType = in.flag() ? uint32_t(NFT_DATA_VERDICT) : 0;
	s.dataLen = in.below(17);
	s.complete = in.below(8) != 0;
	const uint32_t elements = in.below(8);
	for (uint32_t i = 0; i < elements; i++) {
		SetElement e;
		e.key = in.bytes(in.below(8) == 0 ? in.below(20) : s.keyLen);
		e.intervalEnd = in.flag();
		e.catchAll = in.below(10) == 0;
		if (in.flag())
			e.verdict = verdict(in, chains);
		else
			e.data = in.bytes(in.below(17));
		s.elements.push_back(std::move(e));
	}
	return s;
}

Table table(Input &in, uint32_t index)
{
	Table t;
	t.family = static_cast<TableFamily>(in.below(3));
	t.name = in.below(6) == 0 ? "ip-masq-agent" : "t" + std::to_string(index);
	const uint32_t chains = 1 + in.below(5);
	const uint32_t sets = in.below(3);
	for (uint32_t i = 0; i < sets; i++)
		t.sets.push_back(set(in, i, chains));
	for (uint32_t c = 0; c < chains; c++) {
		Chain chain;
		chain.name = "c" + std::to_string(c);
		if (c == 0 || in.below(3) == 0)
			chain.base = BaseHook{in.below(5) ? "nat" : "filter",
					      in.below(4) ? uint32_t(NF_INET_POST_ROUTING) : uint32_t(NF_INET_PRE_ROUTING),
					      static_cast<int32_t>(static_cast<int8_t>(in.byte())) + 100,
					      in.below(5) ? VerdictCode::accept
							  : (in.flag() ? VerdictCode::drop : VerdictCode::queue)};
		const uint32_t rules = in.below(7);
		for (uint32_t r = 0; r < rules; r++) {
			Rule rule;
			rule.handle = in.byte();
			if (in.below(8) == 0)
				rule.comment = in.text(10);
			const uint32_t expressions = in.below(7);
			for (uint32_t e = 0; e < expressions; e++)
				rule.expressions.push_back(expression(in, chains, sets));
			chain.rules.push_back(std::move(rule));
		}
		t.chains.push_back(std::move(chain));
	}
	return t;
}

Packet packet(Input &in)
{
	Packet p;
	const Family family = in.flag() ? Family::ipv6 : Family::ipv4;
	const auto address = [&] {
		AddressValue v = 0;
		for (unsigned i = 0; i < familyBits(family) / 8; i++)
			v = (v << 8) | in.byte();
		return Address{family, v};
	};
	p.source = address();
	p.destination = in.below(16) == 0 ? Address{family == Family::ipv4 ? Family::ipv6 : Family::ipv4, 0}
					  : address();
	if (in.flag())
		p.outputInterface = in.text(18);
	if (in.flag())
		p.inputInterface = in.text(3);
	if (in.flag())
		p.l4proto = in.byte();
	if (in.flag())
		p.destinationPort = static_cast<uint16_t>(in.u32());
	p.mark = in.flag() ? std::optional<uint32_t>(in.u32() & 0xffff) : std::nullopt;
	p.ctMark = in.flag() ? std::optional<uint32_t>(0) : std::nullopt;
	return p;
}

void checkText(const NatRuleset &ruleset, const NatVerdict &v)
{
	for (const Table &t : ruleset.tables)
		for (const Chain &c : t.chains)
			for (const Rule &r : c.rules)
				fuzz::checkOneLine(ruleText(t, r));
	for (const Outcome &o : v.outcomes)
		fuzz::checkOneLine(describeOutcome(o));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Input in(data, size);
	NatRuleset ruleset;
	const uint32_t tables = 1 + in.below(3);
	for (uint32_t i = 0; i < tables; i++)
		ruleset.tables.push_back(table(in, i));
	Packet p = packet(in);
	AgentPlacement agent;
	agent.priority = static_cast<int32_t>(static_cast<int8_t>(in.byte())) + 100;
	agent.masquerades = in.flag();
	NodeAddresses node;
	node.complete = in.flag();
	node.addresses.push_back({p.destination, in.below(129)});
	// Read last, so that the corpus's inputs decode as before (an input that ends
	// earlier reads 0: a known source).
	p.sourceKnown = !in.flag();
	Limits limits;
	limits.maxRuleEvaluations = 20000;

	const NatVerdict first = evaluate(ruleset, p, node, agent, limits);
	const NatVerdict second = evaluate(ruleset, p, node, agent, limits);
	fuzz::check(first.outcomes == second.outcomes && first.mayPoints == second.mayPoints &&
			    first.orderMatters == second.orderMatters,
		    "the same input gave two verdicts");
	fuzz::check(!first.outcomes.empty(), "a verdict without an outcome");
	fuzz::check(first.rulesEvaluated <= limits.maxRuleEvaluations, "the walk passed its bound");
	if (first.certain())
		for (const Outcome &o : first.outcomes)
			fuzz::check(o.action != NatAction::undetermined, "certain but undetermined");
	checkText(ruleset, first);
	return 0;
}
