// SPDX-License-Identifier: Apache-2.0
// Encoding the ruleset model into libnftnl objects exactly as nft 1.0.x encodes its text.
#include "ip-masq-agent/nft/objects.h"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/rtnetlink.h>

#include <memory>
#include <span>

#include <fmt/format.h>

#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/nft/codec/expression.h"
#include "ip-masq-agent/nft/codec/rule_text.h"
#include "ip-masq-agent/nft/codec/table_reader.h"
#include "ip-masq-agent/nft/agent_table.h"
#include "ip-masq-agent/nft/set_encoding.h"
#include "ip-masq-agent/nft/user_data.h"

namespace ipmasq::netlink {

static_assert(kNatFlagFullyRandom == NF_NAT_RANGE_PROTO_RANDOM_FULLY);

namespace {

// nft 1.0.x still uses the 16-byte registers: NFT_REG_1 and the one after it.
constexpr uint32_t kReg1 = NFT_REG_1;

std::vector<uint8_t> u32Bytes(uint32_t hostValue)
{
	const auto *p = reinterpret_cast<const uint8_t *>(&hostValue);
	return {p, p + sizeof(hostValue)};
}

// Registers as nft 1.0.x uses them: the 16-byte NFT_REG_1 and NFT_REG_2.
nft::Expression metaLoad(uint32_t key)
{
	return nft::Meta{.key = key, .dreg = kReg1};
}

nft::Expression cmp(uint32_t op, std::vector<uint8_t> data)
{
	return nft::Cmp{kReg1, op, std::move(data)};
}

nft::Expression verdict(int32_t code, const std::string &chain = {})
{
	nft::Immediate i{.dreg = NFT_REG_VERDICT, .verdict = static_cast<uint32_t>(code)};
	if (!chain.empty())
		i.chain = chain;
	return i;
}

nft::Expression immediate(uint32_t reg, std::vector<uint8_t> data)
{
	return nft::Immediate{.dreg = reg, .data = std::move(data)};
}

void nfprotoMatch(std::vector<nft::Expression> &out, Family family)
{
	out.push_back(metaLoad(NFT_META_NFPROTO));
	out.push_back(cmp(NFT_CMP_EQ, {uint8_t(family == Family::ipv4 ? NFPROTO_IPV4 : NFPROTO_IPV6)}));
}

// "fib daddr type != local": fib's address type is a host-endian u32 (enum rtn_type).
void notLocalMatch(std::vector<nft::Expression> &out)
{
	out.push_back(nft::Fib{NFTA_FIB_F_DADDR, NFT_FIB_RESULT_ADDRTYPE, kReg1});
	out.push_back(cmp(NFT_CMP_NEQ, u32Bytes(RTN_LOCAL)));
}

enum class AddressField { source, destination };

// "ip saddr" / "ip6 daddr" ...: the address loaded from the network header into reg 1
// (struct iphdr: saddr at 12, daddr at 16; struct ipv6hdr: saddr at 8, daddr at 24).
nft::Expression addressLoad(Family family, AddressField field)
{
	const bool source = field == AddressField::source;
	const bool v4 = family == Family::ipv4;
	return nft::Payload{.base = NFT_PAYLOAD_NETWORK_HEADER, .offset = v4 ? (source ? 12u : 16u) : (source ? 8u : 24u),
			    .len = v4 ? 4u : 16u, .dreg = kReg1};
}

// Encodes each of `items` and appends it to `out`, up to the first that fails.
template<typename Item, typename Encoded, typename Encode>
Status encodeEach(const std::vector<Item> &items, std::vector<Encoded> &out, const Encode &encode)
{
	for (const Item &item : items) {
		auto encoded = encode(item);
		if (!encoded)
			return fail(encoded.error());
		out.push_back(std::move(*encoded));
	}
	return {};
}

class Encoder
{
public:
	Encoder(const Ruleset &ruleset, const EncodingOptions &options)
		: ruleset_(ruleset), options_(options)
	{
	}

	Result<EncodedTable> encode();

private:
	Result<EncodedObject> encodeCounter(const NamedCounter &counter);
	Result<EncodedChain> encodeChain(const Chain &chain);
	Result<EncodedRule> encodeRule(const Chain &chain, size_t position, const Rule &rule);
	// "meta l4proto { ... }": a lookup of an anonymous set of `protocols` the rule carries.
	void protocolMatch(EncodedRule &out, std::span<const uint8_t> protocols);
	// The guard's key, source . destination . l4proto . destination port, into the
	// registers from NFT_REG_1 on, as nft loads a concatenation.
	void guardKey(Family family);

	// Each statement as the expressions nft emits for its text.
	void encodeStatement(EncodedRule &out, const JumpIfNotLocal &statement);
	void encodeStatement(EncodedRule &out, const ReturnIfDestinationInSet &statement);
	void encodeStatement(EncodedRule &out, const ReturnIfOutputInterfaceInSet &statement);
	void encodeStatement(EncodedRule &out, const MatchUnlistedSource &statement);
	void encodeStatement(EncodedRule &out, const Masquerade &statement);
	void encodeStatement(EncodedRule &out, const SourceNat &statement);
	void encodeStatement(EncodedRule &out, const GuardLimit &statement);
	// What a NAT statement matches and samples first (its family, when it is limited to
	// one; with --to-ports the transports and the sample), then its counter; returns its
	// NAT flags so far (fully-random).
	uint32_t encodePortSelection(EncodedRule &out, const std::optional<Family> &family,
				     const std::optional<PortRange> &toPorts,
				     const std::optional<RandomSample> &sample, bool fullyRandom);
	// A lookup of a named set, or (`id`) of one the same batch declares.
	void lookup(uint32_t sreg, const std::string &set, bool inverted = false, uint32_t id = 0);
	void interfaceLookup(const std::string &set);
	// The rule's counter (the one encodeRule is at), if any: every statement's encoder
	// calls this right before its verdict or NAT, where nft puts "counter name".
	void ruleCounter();
	// Loads a port range as nft does for "to :first-last" into `minReg` (and the next
	// register for a range); returns the registers: max is min for a single port.
	std::pair<uint32_t, uint32_t> portRegisters(const PortRange &ports, uint32_t minReg);

	uint32_t setIdOf(const std::string &name) const;

	const Ruleset &ruleset_;
	const EncodingOptions &options_;
	std::string ruleCounter_; // the counter of the rule being encoded; "" for none
	std::vector<nft::Expression> expressions_; // of the rule being encoded
	// nft numbers the sets of a batch 1, 2, ... in the order it declares them; rules
	// and element messages refer to a set of the same batch by that id.
	uint32_t nextSetId_ = 1;
	std::vector<std::pair<std::string, uint32_t>> setIds_;
};

Result<EncodedTable> Encoder::encode()
{
	EncodedTable out;
	out.description = fmt::format("table {}", ruleset_.table);
	if (auto s = checkCommentLength(out.description, ruleset_.comment); !s)
		return fail(s.error());
	out.table = tableHandle(ruleset_.table, true);
	if (!ruleset_.comment.empty()) {
		UserData udata;
		udata.putString(NFTNL_UDATA_TABLE_COMMENT, ruleset_.comment);
		nftnl_table_set_data(out.table.get(), NFTNL_TABLE_USERDATA, udata.data(),
				     udata.size());
	}

	// Each named set takes the batch's next id, by which the rules look it up (setIdOf).
	const auto declareSet = [this](const auto &set) {
		setIds_.emplace_back(set.name, nextSetId_++);
		return encodeSet(ruleset_.table, set, setIds_.back().second);
	};
	Status s = encodeEach(ruleset_.counters, out.objects, [this](const auto &c) { return encodeCounter(c); });
	if (s)
		s = encodeEach(ruleset_.dynamicSets, out.sets, declareSet);
	if (s)
		s = encodeEach(ruleset_.sets, out.sets, declareSet);
	if (s)
		s = encodeEach(ruleset_.chains, out.chains, [this](const auto &c) { return encodeChain(c); });
	if (!s)
		return fail(s.error());
	return out;
}

Result<EncodedObject> Encoder::encodeCounter(const NamedCounter &counter)
{
	EncodedObject out;
	out.description = fmt::format("counter {}", counter.name);
	if (auto s = checkCommentLength(out.description, counter.comment); !s)
		return fail(s.error());
	out.object = newObj();
	nftnl_obj *obj = out.object.get();
	nftnl_obj_set_u32(obj, NFTNL_OBJ_FAMILY, NFPROTO_INET);
	nftnl_obj_set_str(obj, NFTNL_OBJ_TABLE, ruleset_.table.c_str());
	nftnl_obj_set_str(obj, NFTNL_OBJ_NAME, counter.name.c_str());
	nftnl_obj_set_u32(obj, NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
	nftnl_obj_set_u64(obj, NFTNL_OBJ_CTR_PKTS, 0);
	nftnl_obj_set_u64(obj, NFTNL_OBJ_CTR_BYTES, 0);
	if (!counter.comment.empty()) {
		UserData udata;
		udata.putString(NFTNL_UDATA_OBJ_COMMENT, counter.comment);
		nftnl_obj_set_data(obj, NFTNL_OBJ_USERDATA, udata.data(), udata.size());
	}
	return out;
}

Result<EncodedChain> Encoder::encodeChain(const Chain &chain)
{
	EncodedChain out;
	out.description = fmt::format("chain {}", chain.name);
	if (auto s = checkCommentLength(out.description, chain.comment); !s)
		return fail(s.error());

	out.chain = newChain();
	nftnl_chain_set_u32(out.chain.get(), NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	nftnl_chain_set_str(out.chain.get(), NFTNL_CHAIN_TABLE, ruleset_.table.c_str());
	nftnl_chain_set_str(out.chain.get(), NFTNL_CHAIN_NAME, chain.name.c_str());
	if (chain.hook) {
		nftnl_chain_set_str(out.chain.get(), NFTNL_CHAIN_TYPE, "nat");
		nftnl_chain_set_u32(out.chain.get(), NFTNL_CHAIN_HOOKNUM, NF_INET_POST_ROUTING);
		nftnl_chain_set_s32(out.chain.get(), NFTNL_CHAIN_PRIO, chain.hook->priority);
		nftnl_chain_set_u32(out.chain.get(), NFTNL_CHAIN_POLICY, NF_ACCEPT);
	}
	if (!chain.comment.empty()) {
		UserData udata;
		udata.putString(NFTNL_UDATA_CHAIN_COMMENT, chain.comment);
		nftnl_chain_set_data(out.chain.get(), NFTNL_CHAIN_USERDATA, udata.data(),
				     udata.size());
	}

	for (size_t i = 0; i < chain.rules.size(); i++) {
		auto encoded = encodeRule(chain, i + 1, chain.rules[i]);
		if (!encoded)
			return fail(encoded.error());
		out.rules.push_back(std::move(*encoded));
	}
	return out;
}

Result<EncodedRule> Encoder::encodeRule(const Chain &chain, size_t position, const Rule &rule)
{
	EncodedRule out;
	// Until nameRules() gives its text.
	out.description = fmt::format("rule {} in chain {}", position, chain.name);
	if (auto s = checkCommentLength(out.description, rule.comment); !s)
		return fail(s.error());

	out.rule = newRule();
	nftnl_rule_set_u32(out.rule.get(), NFTNL_RULE_FAMILY, NFPROTO_INET);
	nftnl_rule_set_str(out.rule.get(), NFTNL_RULE_TABLE, ruleset_.table.c_str());
	nftnl_rule_set_str(out.rule.get(), NFTNL_RULE_CHAIN, chain.name.c_str());
	ruleCounter_ = rule.counter;
	expressions_.clear();
	std::visit([&](const auto &statement) { encodeStatement(out, statement); },
		   rule.statement);
	nft::encodeInto(out.rule.get(), expressions_);
	if (!rule.comment.empty()) {
		UserData udata;
		udata.putString(NFTNL_UDATA_RULE_COMMENT, rule.comment);
		nftnl_rule_set_data(out.rule.get(), NFTNL_RULE_USERDATA, udata.data(),
				    udata.size());
	}
	return out;
}

void Encoder::ruleCounter()
{
	if (!ruleCounter_.empty())
		expressions_.push_back(nft::Objref{.type = NFT_OBJECT_COUNTER, .name = ruleCounter_});
}

void Encoder::lookup(uint32_t sreg, const std::string &set, bool inverted, uint32_t id)
{
	nft::Lookup l{.set = set, .sreg = sreg};
	// A non-zero id ties it to a set of the same batch; 0 names an existing set only.
	if (const uint32_t batchId = id ? id : setIdOf(set))
		l.setId = batchId;
	if (inverted)
		l.flags = NFT_LOOKUP_F_INV;
	expressions_.push_back(std::move(l));
}

void Encoder::interfaceLookup(const std::string &set)
{
	// "oifname @set": the name's 16 bytes, looked up as they are.
	expressions_.push_back(metaLoad(NFT_META_OIFNAME));
	lookup(kReg1, set);
}

void Encoder::encodeStatement(EncodedRule &, const JumpIfNotLocal &statement)
{
	if (!statement.outputInterfaceSet.empty())
		interfaceLookup(statement.outputInterfaceSet);
	if (statement.onlyFamily)
		nfprotoMatch(expressions_, *statement.onlyFamily);
	if (!statement.sourceSet.empty()) {
		// "ip saddr @set": after its implicit nfproto match (above), as nft emits it.
		expressions_.push_back(addressLoad(statement.onlyFamily.value_or(Family::ipv4), AddressField::source));
		lookup(kReg1, statement.sourceSet);
	}
	notLocalMatch(expressions_);
	ruleCounter();
	expressions_.push_back(verdict(NFT_JUMP, statement.target));
}

void Encoder::encodeStatement(EncodedRule &, const ReturnIfDestinationInSet &statement)
{
	// "ip daddr" in an inet table: nft adds the implicit "meta nfproto ipv4" dependency.
	nfprotoMatch(expressions_, statement.family);
	expressions_.push_back(addressLoad(statement.family, AddressField::destination));
	lookup(kReg1, statement.set);
	ruleCounter();
	expressions_.push_back(verdict(NFT_RETURN));
}

void Encoder::encodeStatement(EncodedRule &, const ReturnIfOutputInterfaceInSet &statement)
{
	if (statement.family)
		nfprotoMatch(expressions_, *statement.family);
	interfaceLookup(statement.set);
	ruleCounter();
	expressions_.push_back(verdict(NFT_RETURN));
}

void Encoder::encodeStatement(EncodedRule &, const MatchUnlistedSource &statement)
{
	if (!statement.outputInterfaceSet.empty())
		interfaceLookup(statement.outputInterfaceSet);
	// "ip saddr != @set": its implicit nfproto match, the address, an inverted lookup.
	nfprotoMatch(expressions_, statement.family);
	expressions_.push_back(addressLoad(statement.family, AddressField::source));
	lookup(kReg1, statement.sourceSet, true);
	notLocalMatch(expressions_);
	ruleCounter();
}

uint32_t Encoder::encodePortSelection(EncodedRule &out, const std::optional<Family> &family,
				      const std::optional<PortRange> &toPorts,
				      const std::optional<RandomSample> &sample, bool fullyRandom)
{
	if (family)
		nfprotoMatch(expressions_, *family);
	if (toPorts)
		protocolMatch(out, kPortProtocols);
	if (sample) {
		// numgen random mod M < B: the random number is host-endian, nft converts it
		// to big endian and compares it with a big-endian constant. nft always sends
		// the offset, even when it is 0.
		expressions_.push_back(nft::Numgen{NFT_NG_RANDOM, sample->modulus, 0, kReg1});
		expressions_.push_back(nft::Byteorder{kReg1, kReg1, NFT_BYTEORDER_HTON, 4, 4});
		const uint32_t below = htonl(sample->below);
		const auto *b = reinterpret_cast<const uint8_t *>(&below);
		expressions_.push_back(cmp(NFT_CMP_LT, {b, b + sizeof(below)}));
	}
	ruleCounter();
	return fullyRandom ? options_.fullyRandomFlag : 0;
}

std::pair<uint32_t, uint32_t> Encoder::portRegisters(const PortRange &ports, uint32_t minReg)
{
	// Ports travel in network byte order, two bytes each, as in the transport header.
	const auto load = [this](uint32_t reg, uint16_t port) {
		expressions_.push_back(immediate(reg, {uint8_t(port >> 8), uint8_t(port & 0xff)}));
	};
	load(minReg, ports.first);
	if (ports.first == ports.last)
		return {minReg, minReg};
	load(minReg + 1, ports.last);
	return {minReg, minReg + 1};
}

void Encoder::encodeStatement(EncodedRule &out, const Masquerade &statement)
{
	nft::Masq masq;
	uint32_t flags = encodePortSelection(out, statement.onlyFamily, statement.toPorts, statement.sample,
					     statement.fullyRandom);
	if (statement.toPorts) {
		flags |= NF_NAT_RANGE_PROTO_SPECIFIED;
		const auto [min, max] = portRegisters(*statement.toPorts, kReg1);
		masq.portMin = min;
		if (max != min)
			masq.portMax = max;
	}
	// A plain "masquerade" carries no attribute at all, not even flags 0.
	if (flags)
		masq.flags = flags;
	expressions_.push_back(masq);
}

void Encoder::encodeStatement(EncodedRule &out, const SourceNat &statement)
{
	uint32_t flags = encodePortSelection(out, statement.matchFamily ? std::optional(statement.family) : std::nullopt,
					     statement.toPorts, statement.sample, statement.fullyRandom) |
			 NF_NAT_RANGE_MAP_IPS;
	// As nft: the registers in order, one for an address or a port that is not a range
	// (named as both ends).
	nft::Nat nat{.type = NFT_NAT_SNAT, .family = uint32_t(statement.family == Family::ipv4 ? NFPROTO_IPV4 : NFPROTO_IPV6)};
	uint32_t next = kReg1;
	expressions_.push_back(immediate(next, statement.to.first.bytes()));
	nat.addressMin = nat.addressMax = next++;
	if (statement.to.last != statement.to.first) {
		expressions_.push_back(immediate(next, statement.to.last.bytes()));
		nat.addressMax = next++;
	}
	if (statement.toPorts) {
		flags |= NF_NAT_RANGE_PROTO_SPECIFIED;
		const auto [min, max] = portRegisters(*statement.toPorts, next);
		nat.portMin = min;
		nat.portMax = max;
	}
	nat.flags = flags;
	expressions_.push_back(nat);
}

void Encoder::protocolMatch(EncodedRule &out, std::span<const uint8_t> protocols)
{
	// An anonymous constant set per rule.
	EncodedSet set = encodeProtocolSet(ruleset_.table, out.description, protocols, nextSetId_++);
	const uint32_t id = nftnl_set_get_u32(set.set.get(), NFTNL_SET_ID);
	const std::string name = nftnl_set_get_str(set.set.get(), NFTNL_SET_NAME);
	out.anonymousSets.push_back(std::move(set));
	expressions_.push_back(metaLoad(NFT_META_L4PROTO));
	lookup(kReg1, name, false, id);
}

void Encoder::guardKey(Family family)
{
	// nft names a register by its 16-byte number where a component starts one (NFT_REG_1,
	// NFT_REG_2...) and by its 32-bit number elsewhere (NFT_REG32_01...).
	const auto registerAt = [](uint32_t word) {
		return word % 4 == 0 ? uint32_t(NFT_REG_1) + word / 4 : uint32_t(NFT_REG32_00) + word;
	};
	const uint32_t addressWords = familyBits(family) / 32;
	nft::Payload source = std::get<nft::Payload>(addressLoad(family, AddressField::source));
	nft::Payload destination = std::get<nft::Payload>(addressLoad(family, AddressField::destination));
	destination.dreg = registerAt(addressWords);
	expressions_.push_back(source);
	expressions_.push_back(destination);
	expressions_.push_back(nft::Meta{.key = NFT_META_L4PROTO, .dreg = registerAt(2 * addressWords)});
	// "th dport": two bytes at offset 2 of the transport header, whatever the protocol.
	expressions_.push_back(nft::Payload{.base = NFT_PAYLOAD_TRANSPORT_HEADER, .offset = 2, .len = 2,
					    .dreg = registerAt(2 * addressWords + 1)});
}

void Encoder::encodeStatement(EncodedRule &out, const GuardLimit &statement)
{
	protocolMatch(out, kGuardedProtocols);
	// "ip saddr != @exempt": its implicit nfproto match, the address, an inverted lookup.
	nfprotoMatch(expressions_, statement.family);
	expressions_.push_back(addressLoad(statement.family, AddressField::source));
	lookup(kReg1, statement.exemptSet, true);
	// The limit: the dynset's statement, which ends the rule for a key within it.
	nft::Dynset track;
	track.set = statement.trackSet;
	track.key = kReg1;
	if (statement.kind == GuardLimitKind::newConnections) {
		track.op = NFT_DYNSET_OP_UPDATE;
		track.statements.push_back({std::make_shared<const nft::Expression>(nft::Limit{
			.rate = statement.limit, .unit = 1, .burst = statement.limit,
			.type = NFT_LIMIT_PKTS, .flags = NFT_LIMIT_F_INV})});
	} else {
		track.op = NFT_DYNSET_OP_ADD;
		track.statements.push_back({std::make_shared<const nft::Expression>(
			nft::Connlimit{.count = statement.limit, .flags = NFT_CONNLIMIT_F_INV})});
	}
	guardKey(statement.family);
	expressions_.push_back(std::move(track));
	// Over the limit: the key is recorded (with the over set's counter)...
	nft::Dynset over;
	over.set = statement.overSet;
	over.key = kReg1;
	over.op = NFT_DYNSET_OP_UPDATE;
	guardKey(statement.family);
	expressions_.push_back(std::move(over));
	ruleCounter();
	// ... and dropped when enforcing.
	if (statement.drop)
		expressions_.push_back(verdict(NF_DROP));
}

uint32_t Encoder::setIdOf(const std::string &name) const
{
	for (const auto &[set, id] : setIds_)
		if (set == name)
			return id;
	// A lookup of a set this batch does not declare: the kernel finds it by name, or
	// rejects the rule, and that error names the rule.
	return 0;
}

} // namespace

void startCountersAt(EncodedTable &table, const std::vector<CounterValue> &values)
{
	for (EncodedObject &object : table.objects) {
		nftnl_obj *obj = object.object.get();
		const char *name = nftnl_obj_get_str(obj, NFTNL_OBJ_NAME);
		for (const CounterValue &start : values)
			if (name && start.name == name) {
				nftnl_obj_set_u64(obj, NFTNL_OBJ_CTR_PKTS, start.packets);
				nftnl_obj_set_u64(obj, NFTNL_OBJ_CTR_BYTES, start.bytes);
			}
	}
}

TablePtr tableHandle(const std::string &name, bool withFlags)
{
	TablePtr table = newTable();
	nftnl_table_set_u32(table.get(), NFTNL_TABLE_FAMILY, NFPROTO_INET);
	nftnl_table_set_str(table.get(), NFTNL_TABLE_NAME, name.c_str());
	if (withFlags)
		nftnl_table_set_u32(table.get(), NFTNL_TABLE_FLAGS, 0);
	return table;
}

namespace {

// Each rule as nft lists it, read back through the codec (decoder.h, rule_text.h): the dry
// run prints, and an error about the rule quotes, the rule as it is sent.
void nameRules(EncodedTable &encoded)
{
	nft::Table decoded = nft::decodeEncodedTable(encoded, false);
	for (size_t c = 0; c < encoded.chains.size(); c++) {
		for (size_t r = 0; r < encoded.chains[c].rules.size(); r++) {
			nft::Rule &rule = decoded.chains[c].rules[r];
			rule.comment.clear(); // those who print the text add it where they want it
			EncodedRule &out = encoded.chains[c].rules[r];
			out.text = nft::ruleText(decoded, rule);
			out.description = fmt::format("rule in chain {}: {}", decoded.chains[c].name, out.text);
		}
	}
}

} // namespace

Result<EncodedTable> encodeRuleset(const Ruleset &ruleset, const EncodingOptions &options)
{
	auto encoded = Encoder(ruleset, options).encode();
	if (encoded)
		nameRules(*encoded);
	return encoded;
}

} // namespace ipmasq::netlink
