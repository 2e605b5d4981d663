// SPDX-License-Identifier: Apache-2.0
// Sampling where other tables' rules match: the boundaries of their destination matches,
// spread under a bound, and the ports that make their port matches true.
#include "ip-masq-agent/diagnose/samples.h"

#include <algorithm>
#include <array>
#include <optional>
#include <set>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/base/overloaded.h"

namespace ipmasq {


namespace {

// What some bytes of a read are, as far as sampling cares.
struct Part {
	enum class Kind { destination, port, protocol };
	Kind kind = Kind::destination;
	Family family = Family::ipv4; // of a destination
	uint32_t keyOffset = 0; // where they sit in the read's bytes
	uint32_t len = 0;
	std::span<const uint8_t> mask = {}; // a bitwise and before the comparison; empty: none
};

// A load's bytes as a field: the leading bytes of a destination address (`ip daddr`, or a
// prefix nft loads in fewer bytes), the transport header's destination port, the protocol.
std::optional<Part> fieldOf(nft::TableFamily family, const nft::ValueSource &source, uint32_t offset, uint32_t len)
{
	if (const auto *p = std::get_if<nft::FromPayload>(&source)) {
		const uint32_t at = p->offset + offset;
		if (p->base == nft::PayloadBase::network) {
			if (family != nft::TableFamily::ip6 && at == 16 && len <= 4)
				return Part{Part::Kind::destination, Family::ipv4, 0, len};
			if (family != nft::TableFamily::ip && at == 24 && len <= 16)
				return Part{Part::Kind::destination, Family::ipv6, 0, len};
			if ((family != nft::TableFamily::ip6 && at == 9 && len == 1) ||
			    (family != nft::TableFamily::ip && at == 6 && len == 1))
				return Part{Part::Kind::protocol, Family::ipv4, 0, 1};
		}
		if (p->base == nft::PayloadBase::transport && at == 2 && len == 2)
			return Part{Part::Kind::port, Family::ipv4, 0, 2};
		return std::nullopt;
	}
	if (const auto *m = std::get_if<nft::FromMeta>(&source); m && m->key == NFT_META_L4PROTO && offset == 0 && len == 1)
		return Part{Part::Kind::protocol, Family::ipv4, 0, 1};
	return std::nullopt;
}

// One slice of a read as a field: a load, or a load under a bitwise and (a prefix that is
// not on a byte boundary, iptables' `-d 198.18.0.0/15`).
std::optional<Part> partOf(nft::TableFamily family, const nft::Rule &rule, const nft::Slice &slice)
{
	if (slice.kind != nft::Slice::Kind::value || slice.value >= rule.values.size())
		return std::nullopt;
	const nft::ValueSource &source = rule.values[slice.value].source;
	const auto *m = std::get_if<nft::Masked>(&source);
	if (!m)
		return fieldOf(family, source, slice.offset, slice.len);
	const auto xorValue = m->xorValue();
	if (m->op != nft::BitwiseOp::boolean || std::any_of(xorValue.begin(), xorValue.end(), [](uint8_t b) { return b; }) ||
	    m->source >= rule.reads.size() || m->mask().size() < slice.offset + slice.len)
		return std::nullopt;
	const std::span<const nft::Slice> inner = rule.read(m->source);
	if (inner.size() != 1 || inner[0].kind != nft::Slice::Kind::value || inner[0].value >= rule.values.size())
		return std::nullopt;
	auto part = fieldOf(family, rule.values[inner[0].value].source, inner[0].offset + slice.offset, slice.len);
	if (part)
		part->mask = m->mask().subspan(slice.offset, slice.len);
	return part;
}

// The fields a read holds, where in its bytes (a concatenation holds several).
std::vector<Part> partsOf(nft::TableFamily family, const nft::Rule &rule, nft::ReadId read)
{
	std::vector<Part> parts;
	if (read >= rule.reads.size())
		return parts;
	uint32_t at = 0;
	for (const nft::Slice &slice : rule.read(read)) {
		if (auto part = partOf(family, rule, slice)) {
			part->keyOffset = at;
			parts.push_back(*part);
		}
		at += slice.len;
	}
	return parts;
}

// The destinations collected, per family, up to a bound.
class Boundaries
{
public:
	explicit Boundaries(size_t max) : max_(max) {}

	// The address a part's bytes of `key` start (the rest zero) and, with `next`, the one
	// after the last they cover (the rest ones): a match decides alike between the two.
	void add(const Part &part, std::span<const uint8_t> key, bool start, bool next)
	{
		if (part.kind != Part::Kind::destination || key.size() < part.keyOffset + part.len)
			return;
		std::array<uint8_t, 16> low{}, high;
		high.fill(0xff);
		for (uint32_t i = 0; i < part.len; i++) {
			const uint8_t mask = part.mask.empty() ? 0xff : part.mask[i];
			low[i] = key[part.keyOffset + i] & mask;
			high[i] = low[i] | uint8_t(~mask);
		}
		const Address first = Address::fromBytes(part.family, low.data());
		const Address last = Address::fromBytes(part.family, high.data());
		if (start)
			put(first);
		if (next && last < Address::max(part.family))
			put(Address{part.family, last.value + 1});
	}
	void cut(Family family) { (family == Family::ipv4 ? atLeast_[0] : atLeast_[1]) = true; }

	const std::vector<AddressValue> &of(Family family) const { return family == Family::ipv4 ? v4_ : v6_; }
	bool atLeast(Family family) const { return family == Family::ipv4 ? atLeast_[0] : atLeast_[1]; }

private:
	void put(const Address &a)
	{
		std::vector<AddressValue> &list = a.family == Family::ipv4 ? v4_ : v6_;
		if (list.size() < max_)
			list.push_back(a.value);
		else
			cut(a.family);
	}

	size_t max_;
	std::vector<AddressValue> v4_, v6_;
	bool atLeast_[2] = {false, false};
};

// The elements of a set to look at: all, or `max` evenly spread (as spreadEvenly spreads,
// without a list of every index).
std::vector<size_t> spreadIndexes(size_t count, size_t max)
{
	std::vector<size_t> out;
	const size_t n = std::min(count, max);
	out.reserve(n);
	for (size_t k = 0; k < n; k++)
		out.push_back(count <= max ? k : k * count / max);
	return out;
}

// The boundaries of a look-up of `read` in `name`: its elements' keys (an interval set's are
// boundaries already), and the address after each exact key.
void fromSet(const nft::Table &t, const nft::Rule &rule, nft::ReadId read, const std::string &name, Boundaries &out,
	     const RuleSampleLimits &limits)
{
	const std::vector<Part> parts = partsOf(t.family, rule, read);
	const nft::Set *set = t.findSet(name);
	if (parts.empty() || !set || !set->unusable().empty() || !set->holdsElements())
		return;
	const bool interval = set->flags & NFT_SET_INTERVAL;
	for (const size_t i : spreadIndexes(set->size(), limits.maxSetElements))
		for (const Part &part : parts) {
			const bool ranges = !set->keyEnd(i).empty();
			out.add(part, set->key(i), true, !interval && !ranges);
			if (ranges)
				out.add(part, set->keyEnd(i), false, true);
		}
	if (set->size() > limits.maxSetElements)
		for (const Part &part : parts)
			if (part.kind == Part::Kind::destination)
				out.cut(part.family);
}

void collect(const nft::Table &t, const nft::Rule &rule, Boundaries &out, const RuleSampleLimits &limits)
{
	for (const nft::Statement &statement : rule.statements)
		std::visit(Overloaded{
				   [&](const nft::Compare &c) {
					   for (const Part &part : partsOf(t.family, rule, c.lhs))
						   out.add(part, c.data, true, true);
				   },
				   [&](const nft::InRange &r) {
					   for (const Part &part : partsOf(t.family, rule, r.lhs)) {
						   out.add(part, r.from(), true, false);
						   out.add(part, r.to(), false, true);
					   }
				   },
				   [&](const nft::InSet &s) { fromSet(t, rule, s.key, s.set, out, limits); },
				   [&](const nft::VerdictMap &v) { fromSet(t, rule, v.key, v.set, out, limits); },
				   [](const auto &) {},
			   },
			   statement);
	for (const nft::Value &value : rule.values)
		if (const auto *map = std::get_if<nft::MapData>(&value.source))
			fromSet(t, rule, map->key, map->set, out, limits);
}

// A family's destinations to sample: the collected boundaries, less the plan's own, those
// inside one entry's stretch first; each named.
std::vector<SampledPacket> destinationsOf(const std::vector<AddressValue> &collected, Family family,
					  const SamplePlan &plan, const NodeAddresses &node, size_t max, size_t &found)
{
	std::set<Address> planned;
	for (const SampledPacket &p : plan.packets)
		if (p.destination.family == family)
			planned.insert(p.destination);
	std::set<Address> distinct;
	for (const AddressValue value : collected)
		distinct.insert(value == 0 ? firstSampledHost(family) : Address{family, value});
	std::vector<SampledPacket> inside, boundary;
	for (const Address &a : distinct) {
		if (planned.count(a) || node.isLocal(a))
			continue;
		SampledPacket packet{a};
		packet.entry = plan.entries->describe(a);
		const bool sameAsBefore = a.value > 0 && plan.entries->describe(Address{family, a.value - 1}) == packet.entry;
		(sameAsBefore ? inside : boundary).push_back(std::move(packet));
	}
	found = inside.size() + boundary.size();
	std::vector<SampledPacket> chosen = spreadEvenly(inside, max);
	for (SampledPacket &p : spreadEvenly(boundary, max - chosen.size()))
		chosen.push_back(std::move(p));
	std::sort(chosen.begin(), chosen.end(),
		  [](const SampledPacket &a, const SampledPacket &b) { return a.destination < b.destination; });
	return chosen;
}

bool hasPorts(uint8_t protocol)
{
	return protocol == IPPROTO_TCP || protocol == IPPROTO_UDP || protocol == IPPROTO_SCTP ||
	       protocol == IPPROTO_UDPLITE || protocol == IPPROTO_DCCP;
}

uint16_t portIn(std::span<const uint8_t> key, const Part &part)
{
	return uint16_t(key[part.keyOffset] << 8 | key[part.keyOffset + 1]);
}

// A port that makes `port OP value` true.
std::optional<uint16_t> satisfying(nft::CmpOp op, uint16_t value)
{
	switch (op) {
	case nft::CmpOp::eq:
	case nft::CmpOp::lte:
	case nft::CmpOp::gte: return value;
	case nft::CmpOp::neq: return value == 65535 ? value - 1 : value + 1;
	case nft::CmpOp::lt: return value > 0 ? std::optional<uint16_t>(value - 1) : std::nullopt;
	case nft::CmpOp::gt: return value < 65535 ? std::optional<uint16_t>(value + 1) : std::nullopt;
	}
	return std::nullopt;
}

// The ports and protocols a rule's own matches name.
struct PortMatches {
	std::vector<uint16_t> ports;
	std::vector<uint8_t> protocols;

	void add(const Part &part, std::span<const uint8_t> key, std::optional<nft::CmpOp> op = nft::CmpOp::eq)
	{
		if (key.size() < part.keyOffset + part.len || !op)
			return;
		if (part.kind == Part::Kind::port) {
			if (auto port = satisfying(*op, portIn(key, part)); port && *port != 0)
				ports.push_back(*port);
		} else if (part.kind == Part::Kind::protocol && *op == nft::CmpOp::eq && hasPorts(key[part.keyOffset])) {
			protocols.push_back(key[part.keyOffset]);
		}
	}
};

void portsFromSet(const nft::Table &t, const nft::Rule &rule, nft::ReadId read, const std::string &name, PortMatches &out)
{
	const nft::Set *set = t.findSet(name);
	if (!set || !set->unusable().empty() || !set->holdsElements())
		return;
	for (const Part &part : partsOf(t.family, rule, read))
		for (const size_t i : spreadIndexes(set->size(), 4))
			if (!set->intervalEnd(i))
				out.add(part, set->key(i));
}

} // namespace

RuleSamples samplesFromRules(const nft::NatRuleset &ruleset, const SamplePlan &plan, const NodeAddresses &node,
			     const RuleSampleLimits &limits)
{
	RuleSamples out;
	if (!plan.entries)
		return out;
	Boundaries boundaries(limits.maxCandidates);
	for (const nft::Table &table : ruleset.tables)
		for (const nft::Chain &chain : table.chains)
			for (const nft::Rule &rule : chain.rules)
				collect(table, rule, boundaries, limits);
	for (const Family family : {Family::ipv4, Family::ipv6}) {
		std::vector<std::optional<Address>> sources;
		for (const SampledPacket &p : plan.packets)
			if (p.destination.family == family &&
			    std::find(sources.begin(), sources.end(), p.source) == sources.end())
				sources.push_back(p.source);
		if (sources.empty())
			continue; // the plan does not sample the family: the agent leaves it alone
		size_t found = 0;
		const std::vector<SampledPacket> destinations =
			destinationsOf(boundaries.of(family), family, plan, node, limits.maxDestinations, found);
		if (found > destinations.size() || boundaries.atLeast(family))
			out.cuts.push_back({family, found, destinations.size(), boundaries.atLeast(family)});
		for (const SampledPacket &destination : destinations)
			for (const std::optional<Address> &source : sources) {
				SampledPacket packet = destination;
				packet.source = source;
				out.packets.push_back(std::move(packet));
			}
	}
	return out;
}

std::vector<PortProtocol> destinationPorts(const nft::Table &table, const nft::Rule &rule, size_t max)
{
	PortMatches matches;
	for (const nft::Statement &statement : rule.statements)
		std::visit(Overloaded{
				   [&](const nft::Compare &c) {
					   for (const Part &part : partsOf(table.family, rule, c.lhs))
						   matches.add(part, c.data, c.op);
				   },
				   [&](const nft::InRange &r) {
					   for (const Part &part : partsOf(table.family, rule, r.lhs))
						   matches.add(part, r.negated ? r.to() : r.from(),
							       r.negated ? nft::CmpOp::gt : nft::CmpOp::eq);
				   },
				   [&](const nft::InSet &s) {
					   if (!s.invert)
						   portsFromSet(table, rule, s.key, s.set, matches);
				   },
				   [](const auto &) {},
			   },
			   statement);
	if (matches.protocols.empty())
		matches.protocols = {IPPROTO_UDP, IPPROTO_TCP}; // `th dport`: any protocol with ports
	std::vector<PortProtocol> out;
	for (const uint16_t port : matches.ports)
		for (const uint8_t protocol : matches.protocols) {
			const PortProtocol candidate{protocol, port};
			if (out.size() < max && std::find(out.begin(), out.end(), candidate) == out.end())
				out.push_back(candidate);
		}
	return out;
}

} // namespace ipmasq
