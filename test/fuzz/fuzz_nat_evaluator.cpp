// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the decoder, the NAT evaluator, the rule text and the conflict definition on
// arbitrary tables, chains, jump graphs (loops included), expression lists with any
// registers, sets and maps with arbitrary elements, unreadable tables, the agent's own
// table (absent, as data, or the one a config builds) and packets decoded from the input.
// Decoding never crashes; the walk stays within its step bound and gives the same verdict
// twice, at least one outcome, "certain" never with an undetermined outcome; every rule
// text, outcome sentence and conflict is one line without control bytes; Set::find agrees
// with a linear scan of small sets.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include "fuzz_support.h"
#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/diagnose/conflicts.h"
#include "ip-masq-agent/nft/codec/decoder.h"
#include "ip-masq-agent/diagnose/evaluator.h"
#include "ip-masq-agent/diagnose/samples.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/agent_table.h"
#include "ip-masq-agent/nft/codec/rule_text.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

using namespace ipmasq;
using namespace ipmasq::nat;
using namespace ipmasq::nft;

namespace {

// ruleset.h (the agent's own model) names some types as model.h does: Chain and Rule
// are nat:: here.

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

// Any kind the kernel has, with attributes from the input (registers valid or not,
// lengths that fit or not): as libnftnl would parse them from a dump.
Expression load(Input &in)
{
	switch (in.below(12)) {
	case 0: return Payload{.base = in.below(5), .offset = in.below(48), .len = in.below(24), .dreg = reg(in)};
	case 1: return Meta{.key = in.below(40), .dreg = reg(in)};
	case 2: return Ct{.key = in.below(26), .direction = in.flag() ? std::optional<uint8_t>(in.below(2)) : std::nullopt,
			  .dreg = reg(in)};
	case 3: return Fib{.flags = in.below(64), .result = in.below(5), .dreg = reg(in)};
	case 4: return Exthdr{.type = in.byte(), .offset = in.below(40), .len = in.below(20), .flags = in.below(2),
			      .op = in.below(4), .dreg = reg(in)};
	case 5: return Numgen{.type = in.below(3), .modulus = in.u32(), .offset = in.u32(), .dreg = reg(in)};
	case 6: return Hash{.type = in.below(3), .len = in.below(20), .modulus = in.u32(), .offset = in.below(4),
			    .seed = in.flag() ? std::optional<uint32_t>(in.u32()) : std::nullopt, .sreg = optReg(in),
			    .dreg = reg(in)};
	case 7: return Rt{.key = in.below(8), .dreg = reg(in)};
	case 8: return Socket{.key = in.below(6), .level = in.below(4), .dreg = reg(in)};
	case 9: return Xfrm{.key = in.below(8), .spnum = in.below(4), .direction = uint8_t(in.below(3)), .dreg = reg(in)};
	case 10: return Osf{.ttl = uint8_t(in.below(3)), .flags = in.below(2), .dreg = reg(in)};
	default: return Tunnel{.key = in.below(3), .dreg = reg(in)};
	}
}

Expression operation(Input &in, uint32_t sets)
{
	const auto setName = [&] { return "s" + std::to_string(in.below(sets + 1)); };
	switch (in.below(8)) {
	case 0: {
		const uint32_t len = in.below(20);
		return Bitwise{.sreg = reg(in), .dreg = reg(in), .len = len,
			       .op = in.flag() ? std::optional<uint32_t>(in.below(4)) : std::nullopt,
			       .mask = in.bytes(in.below(len + 2)), .xorValue = in.bytes(in.below(len + 2)),
			       .shift = in.bytes(in.below(6))};
	}
	case 1: return Byteorder{.sreg = reg(in), .dreg = reg(in), .op = in.below(3), .len = in.below(20), .size = in.below(10)};
	case 2: return Cmp{.sreg = reg(in), .op = in.below(7), .data = in.bytes(in.below(18))};
	case 3: {
		const size_t len = in.below(6);
		return Range{.sreg = reg(in), .op = in.below(2), .from = in.bytes(len), .to = in.bytes(in.flag() ? len : in.below(6))};
	}
	case 4: return Lookup{.set = setName(), .sreg = reg(in), .dreg = optReg(in),
			      .flags = in.flag() ? std::optional<uint32_t>(NFT_LOOKUP_F_INV) : std::nullopt};
	case 5: return Immediate{.dreg = reg(in), .data = in.bytes(in.below(20))};
	case 6: return Dynset{.set = setName(), .key = reg(in), .op = in.below(3), .data = optReg(in), .timeout = in.u32()};
	default: return Objref{.type = in.below(10), .name = in.flag() ? std::optional<std::string>(in.text(6)) : std::nullopt,
			       .set = in.flag() ? std::optional<std::string>(setName()) : std::nullopt, .sreg = optReg(in)};
	}
}

Expression statement(Input &in, uint32_t chains)
{
	switch (in.below(16)) {
	case 0: return Immediate{.dreg = NFT_REG_VERDICT, .verdict = verdictNumber(verdict(in, chains).code),
				 .chain = chainName(in, chains)};
	case 1: return Masq{.flags = in.u32(), .portMin = optReg(in), .portMax = optReg(in)};
	case 2: return Nat{.type = in.below(3), .family = in.below(12), .addressMin = optReg(in), .addressMax = optReg(in),
			   .portMin = optReg(in), .portMax = optReg(in), .flags = in.u32()};
	case 3: return Redir{.flags = in.u32(), .portMin = optReg(in), .portMax = optReg(in)};
	case 4: return Counter{.packets = in.u32(), .bytes = in.u32()};
	case 5: return Log{.prefix = in.flag() ? std::optional<std::string>(in.text(8)) : std::nullopt,
			   .level = in.flag() ? std::optional<uint32_t>(in.below(10)) : std::nullopt,
			   .flags = in.flag() ? std::optional<uint32_t>(in.below(64)) : std::nullopt};
	case 6: return Limit{.rate = in.u32(), .unit = in.below(90000), .burst = in.below(8), .type = in.below(2), .flags = in.below(2)};
	case 7: return Meta{.key = in.below(40), .sreg = reg(in)};
	case 8: return Ct{.key = in.below(26), .sreg = reg(in)};
	case 9: return Payload{.base = in.below(4), .offset = in.below(48), .len = in.below(24), .sreg = reg(in)};
	case 10: return Exthdr{.type = in.byte(), .offset = in.below(40), .len = in.below(20), .op = in.below(4),
			       .sreg = optReg(in)};
	case 11: return Dup{.address = optReg(in), .device = optReg(in)};
	case 12: {
		static const char *kNames[] = {"addrtype", "mark", "comment", "statistic", "multiport"};
		return Match{.name = kNames[in.below(std::size(kNames))], .revision = in.below(3), .info = in.bytes(in.below(24))};
	}
	case 13: {
		// The xtables NAT targets' info structs are 24 (compat) and 40 bytes (nf_nat_range).
		static const char *kNames[] = {"MASQUERADE", "SNAT", "DNAT", "REDIRECT", "RETURN",
					       "ACCEPT", "DROP", "MARK", "NETMAP", "LOG"};
		return Target{.name = kNames[in.below(std::size(kNames))], .revision = in.below(3), .info = in.bytes(in.below(48))};
	}
	case 14: return Quota{.bytes = in.u32(), .consumed = in.u32(), .flags = in.below(2)};
	default: return UnknownExpression{.name = in.text(6)};
	}
}

Expression expression(Input &in, uint32_t chains, uint32_t sets)
{
	switch (in.below(3)) {
	case 0: return load(in);
	case 1: return operation(in, sets);
	default: return statement(in, chains);
	}
}

// A set as the reader builds one: declared, its elements added, finished; a set the read
// could not take whole is unusable.
Set set(Input &in, uint32_t index, uint32_t chains)
{
	static constexpr uint32_t kFlags[] = {0, NFT_SET_INTERVAL, NFT_SET_MAP, NFT_SET_TIMEOUT,
					      NFT_SET_INTERVAL | NFT_SET_CONCAT, NFT_SET_ANONYMOUS, NFT_SET_OBJECT,
					      NFT_SET_ANONYMOUS | NFT_SET_EVAL};
	Set s;
	s.name = "s" + std::to_string(index);
	s.flags = kFlags[in.below(std::size(kFlags))];
	s.keyLen = in.flag() ? 4 : in.below(20);
	s.dataType = in.flag() ? uint32_t(NFT_DATA_VERDICT) : 0;
	s.dataLen = in.below(17);
	// Address data (a map of addresses, or of ranges: twice the length), by its length.
	if (s.dataType == 0)
		s.dataType = (s.dataLen == 4 || s.dataLen == 8) ? 7 : (s.dataLen == 16 ? 8 : 0);
	s.keyType = s.keyLen == 4 ? 7 : (s.keyLen == 16 ? 8 : 0);
	// Interval and anonymous sets with a verdict or word-sized data are maps (interval
	// maps: nft's prefix maps and vmaps), as the kernel declares them; flags 0 stays a set
	// whatever its data says.
	if ((s.flags & (NFT_SET_INTERVAL | NFT_SET_ANONYMOUS)) &&
	    (s.dataType == NFT_DATA_VERDICT || (s.dataLen != 0 && s.dataLen % 4 == 0)))
		s.flags |= NFT_SET_MAP;
	const bool complete = in.below(8) != 0;
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
		s.add(e);
	}
	s.finish();
	if (!complete)
		s.markUnusable("set " + s.name + " was not read whole");
	return s;
}

Table table(Input &in, uint32_t index)
{
	Table t;
	t.family = static_cast<TableFamily>(in.below(3));
	t.name = in.below(6) == 0 ? "ip-masq-agent" : "t" + std::to_string(index);
	const uint32_t chains = 1 + in.below(5);
	const uint32_t sets = in.below(3);
	// Sets first: the decoder takes their widths from them.
	for (uint32_t i = 0; i < sets; i++)
		t.sets.push_back(set(in, i, chains));
	for (uint32_t c = 0; c < chains; c++) {
		nft::Chain chain;
		chain.name = "c" + std::to_string(c);
		if (c == 0 || in.below(3) == 0)
			chain.base = BaseHook{in.below(5) ? "nat" : "filter",
					      in.below(4) ? uint32_t(NF_INET_POST_ROUTING) : uint32_t(NF_INET_PRE_ROUTING),
					      static_cast<int32_t>(static_cast<int8_t>(in.byte())) + 100,
					      in.below(5) ? VerdictCode::accept
							  : (in.flag() ? VerdictCode::drop : VerdictCode::queue)};
		const uint32_t rules = in.below(7);
		for (uint32_t r = 0; r < rules; r++) {
			const uint64_t handle = in.byte();
			const std::string comment = in.below(8) == 0 ? in.text(10) : std::string();
			std::vector<Expression> expressions;
			const uint32_t count = in.below(7);
			for (uint32_t e = 0; e < count; e++)
				expressions.push_back(expression(in, chains, sets));
			chain.rules.push_back(decodeRule(t, handle, expressions, comment));
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

// The agent's table a config builds (an outputAddress, interfaces, sources): linearized
// through the backend's encoder and decoded, as the daemon and --explain get it. Made once.
const Table &configuredAgent()
{
	static const Table agent = [] {
		Config config;
		config.nonMasqueradeCIDRs = {parsePrefix("10.0.0.0/8").value(), parsePrefix("198.18.0.0/15").value()};
		config.nonMasqueradeCIDRsGiven = true;
		config.masqueradeSourceCIDRs = {parsePrefix("198.18.10.0/24").value()};
		config.outputAddress = parseOutputAddress("203.0.113.7").value();
		config.nonMasqueradeInterfaces = {parseInterfacePattern("wg0").value()};
		RulesetOptions options;
		options.enableIpv6 = true;
		auto table = agentTable(buildRuleset(config, options));
		fuzz::check(table.has_value(), "the agent's table could not be linearized");
		return std::move(*table);
	}();
	return agent;
}

void checkText(const Table &t)
{
	for (const nft::Chain &c : t.chains)
		for (const nft::Rule &r : c.rules)
			fuzz::checkOneLine(ruleText(t, r));
}

// Set::find against the definition, element by element, for sets small enough to scan.
void checkFind(const Set &s, Input &in)
{
	if (!s.unusable().empty() || s.size() > 64)
		return;
	std::vector<Bytes> probes;
	for (size_t i = 0; i < s.size(); i++) {
		const auto k = s.key(i);
		probes.emplace_back(k.begin(), k.end());
		Bytes next(k.begin(), k.end()), previous(k.begin(), k.end());
		if (!next.empty()) {
			next.back()++;
			previous.back()--;
		}
		probes.push_back(std::move(next));
		probes.push_back(std::move(previous));
	}
	probes.push_back(in.bytes(s.keyLen));
	const bool interval = s.flags & NFT_SET_INTERVAL;
	for (const Bytes &probe : probes) {
		// The last boundary at or before the key (interval: it must open a range), or an
		// element equal to it.
		std::optional<size_t> expected;
		for (size_t i = 0; i < s.size(); i++) {
			const auto k = s.key(i);
			const int order = s.keyLen == 0 ? 0 : std::memcmp(k.data(), probe.data(), s.keyLen);
			if (interval ? order <= 0 : order == 0)
				expected = i;
		}
		if (expected && interval && s.intervalEnd(*expected))
			expected.reset();
		const std::optional<size_t> found = s.find(probe);
		const bool inSet = found && *found != Set::kCatchAll;
		fuzz::check(inSet == expected.has_value(), "Set::find disagrees with a scan", s.name);
		if (inSet && !interval)
			fuzz::check(s.keyLen == 0 || std::memcmp(s.key(*found).data(), probe.data(), s.keyLen) == 0,
				    "Set::find gave an element of another key", s.name);
		if (!expected)
			fuzz::check(found.has_value() == s.hasCatchAll(), "Set::find and the catch-all", s.name);
	}
}

// Names every destination alike: the fuzzer's plan has no config.
class FixedNames final : public DecidingEntries
{
public:
	std::string describe(const Address &) const override { return "no entry covers it"; }
};

// Where other tables' rules match, and the ports that decide a "may": bounded, of the
// plan's families and sources, each packet once.
void checkSamples(const NatRuleset &ruleset, const SampledPacket &sample, const NodeAddresses &node,
		  const ConflictPass &pass)
{
	RuleSampleLimits limits;
	limits.maxDestinations = 8;
	limits.maxSetElements = 16;
	const SamplePlan plan{{sample}, std::make_shared<const FixedNames>()};
	const RuleSamples more = samplesFromRules(ruleset, plan, node, limits);
	fuzz::check(more.packets.size() <= limits.maxDestinations, "more destinations than the bound");
	for (const SampledPacket &p : more.packets) {
		fuzz::check(p.destination.family == sample.destination.family, "a destination of another family");
		fuzz::check(p.destination != sample.destination, "a destination the plan samples already");
		fuzz::check(p.source == sample.source, "a source the plan does not sample");
		fuzz::check(!node.isLocal(p.destination), "an address of the node");
	}
	for (const Table &t : ruleset.tables)
		for (const nft::Chain &c : t.chains)
			for (const nft::Rule &r : c.rules)
				for (const PortProtocol &port : destinationPorts(t, r, 4))
					fuzz::check(port.port != 0 && !port.toString().empty(), "a port sample without a port");
	const std::vector<SampledPacket> ports = portSamples(pass.conflicts, 4);
	fuzz::check(ports.size() <= 4, "more port samples than the bound");
	for (const SampledPacket &p : ports)
		fuzz::check(p.transport.has_value(), "a port sample without a port");
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
	// The agent at a priority, masquerading or not: what the old input format said.
	const int32_t agentPriority = static_cast<int32_t>(static_cast<int8_t>(in.byte())) + 100;
	const bool agentMasquerades = in.flag();
	NodeAddresses node;
	node.complete = in.flag();
	node.addresses.push_back({p.destination, in.below(129)});
	// Read last, so that the corpus's older inputs decode as before (an input that ends
	// earlier reads 0: a known source, the agent's table as data, every table readable).
	p.sourceKnown = !in.flag();
	std::optional<Table> agent;
	switch (in.below(4)) {
	case 0: {
		agent = Table{TableFamily::inet, "ip-masq-agent", {}, {}};
		nft::Chain chain{"postrouting", BaseHook{"nat", NF_INET_POST_ROUTING, agentPriority, VerdictCode::accept}, {}};
		if (agentMasquerades)
			chain.rules.push_back(decodeRule(*agent, 1, std::vector<Expression>{Masq{}}));
		agent->chains.push_back(std::move(chain));
		break;
	}
	case 1: break; // no agent table
	case 2:
		agent = table(in, tables);
		agent->family = TableFamily::inet;
		agent->name = "ip-masq-agent";
		break;
	default: agent = configuredAgent(); break;
	}
	for (Table &t : ruleset.tables)
		switch (in.below(8)) {
		case 1: t.unreadable = "table " + t.name + " could not be read: \x1b[31mbusy\n"; break;
		case 2: t = Table{t.family, t.name, {}, {}, "table " + t.name + " could not be read: too big"}; break;
		default: break;
		}
	Limits limits;
	limits.maxSteps = 5000; // four walks of it per input, under the sanitizers
	const Table *agentTable = agent ? &*agent : nullptr;

	const NatVerdict first = evaluate(ruleset, agentTable, p, node, limits);
	const NatVerdict second = evaluate(ruleset, agentTable, p, node, limits);
	fuzz::check(first.outcomes == second.outcomes && first.mayPoints == second.mayPoints &&
			    first.steps == second.steps,
		    "the same input gave two verdicts");
	fuzz::check(!first.outcomes.empty(), "a verdict without an outcome");
	fuzz::check(first.steps <= limits.maxSteps, "the walk passed its bound");
	if (first.certain())
		for (const Outcome &o : first.outcomes)
			fuzz::check(o.action != NatAction::undetermined, "certain but undetermined");
	for (const Table &t : ruleset.tables) {
		checkText(t);
		for (const Set &s : t.sets)
			checkFind(s, in);
	}
	if (agent)
		checkText(*agent);
	for (const Outcome &o : first.outcomes) {
		fuzz::checkOneLine(describeOutcome(o));
		fuzz::checkOneLine(describeOutcome(o, false));
	}
	for (const MayPoint &m : first.mayPoints)
		fuzz::checkOneLine(m.reason);

	// The conflict definition on the same packet: one line each, never certain when the
	// evaluator could not tell, never the agent's own decision.
	SampledPacket sample{p.destination};
	if (p.sourceKnown)
		sample.source = p.source;
	sample.outputInterface = p.outputInterface;
	CheckLimits checkLimits;
	checkLimits.evaluation = limits;
	const ConflictPass pass = findConflicts(ruleset, agentTable, std::span(&sample, 1), node, checkLimits);
	for (const NatConflict &c : pass.conflicts) {
		fuzz::checkOneLine(c.describe());
		fuzz::check(c.kind != NatConflict::Kind::undetermined || !c.certain, "an undetermined conflict is certain");
		fuzz::check(c.outcome.decider != Decider::agent, "the agent's own decision is a conflict");
		fuzz::check(c.sameAs(c), "a conflict is not the same as itself");
	}
	checkSamples(ruleset, sample, node, pass);
	return 0;
}
