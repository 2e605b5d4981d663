// SPDX-License-Identifier: Apache-2.0
// The destination policy: longest-prefix resolution of non-masquerade and masquerade entries.
#include "ip-masq-agent/config/policy.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

Prefix linkLocalPrefix(Family family)
{
	return builtinPrefix(family == Family::ipv4 ? "169.254.0.0/16" : "fe80::/10");
}

std::string describeOrigin(const Config &config, const Origin &origin)
{
	if (origin.discovered() && origin.line < config.discoveredOrigins.size())
		return config.discoveredOrigins[origin.line];
	if (origin.builtIn() || origin.file >= config.files.size())
		return "built-in default";
	return fmt::format("{}:{}", escaped(config.files[origin.file]), origin.line);
}

namespace {

// What kind of entry a prefix of the sweep is; the order breaks ties of equal prefixes.
enum class PolicyEntryKind { nonMasquerade, linkLocal, masquerade };

bool prefixLess(const Prefix &a, const Prefix &b)
{
	return std::tie(a.network, a.length) < std::tie(b.network, b.length);
}

// The same prefix listed as non-masquerade and as masquerade: no rule could say which
// the operator meant. A built-in entry (a default) is not the operator's: the exception
// wins over it (see resolveNonMasquerade).
Status checkNoPrefixInBothLists(const Config &config)
{
	std::vector<const Prefix *> masquerade;
	masquerade.reserve(config.masqueradeCIDRs.size());
	for (const Prefix &prefix : config.masqueradeCIDRs)
		masquerade.push_back(&prefix);
	std::sort(masquerade.begin(), masquerade.end(),
		  [](const Prefix *a, const Prefix *b) { return prefixLess(*a, *b); });
	for (const Prefix &prefix : config.nonMasqueradeCIDRs) {
		if (prefix.origin.builtIn())
			continue;
		const auto found = std::lower_bound(
			masquerade.begin(), masquerade.end(), &prefix,
			[](const Prefix *a, const Prefix *b) { return prefixLess(*a, *b); });
		if (found == masquerade.end() || !(**found == prefix))
			continue;
		return fail(fmt::format("{}: masqueradeCIDRs: {} is also listed in nonMasqueradeCIDRs "
					"at {}: a destination cannot be both; remove one of them",
					describeOrigin(config, (*found)->origin), prefix.toString(),
					describeOrigin(config, prefix.origin)));
	}
	return {};
}

AddressValue lastOf(Family family, AddressValue first, unsigned length)
{
	const unsigned hostBits = familyBits(family) - length;
	const AddressValue hostMask =
		hostBits == 128 ? ~AddressValue(0) : (AddressValue(1) << hostBits) - 1;
	return first | hostMask;
}

// One prefix in the sweep: 32 bytes, whatever the list it came from. `index` points back
// at the entry (into config.nonMasqueradeCIDRs or config.masqueradeCIDRs; unused for
// link-local).
struct SweepEntry {
	AddressValue first;
	uint32_t index;
	uint8_t length;
	PolicyEntryKind kind;

	bool masquerade() const { return kind == PolicyEntryKind::masquerade; }
};

// Sorted by first address, then by length (an enclosing prefix before what it encloses),
// then non-masquerade before masquerade, so that of two equal prefixes the masquerade
// one is the inner, deciding one.
bool sweepLess(const SweepEntry &a, const SweepEntry &b)
{
	return std::tie(a.first, a.length, a.kind) < std::tie(b.first, b.length, b.kind);
}
static_assert(PolicyEntryKind::nonMasquerade < PolicyEntryKind::masquerade &&
	      PolicyEntryKind::linkLocal < PolicyEntryKind::masquerade);

std::vector<SweepEntry> sweepEntries(const Config &config, Family family)
{
	std::vector<SweepEntry> entries;
	entries.reserve(config.nonMasqueradeCIDRs.size() + config.masqueradeCIDRs.size() + 1);
	const auto add = [&](const std::vector<Prefix> &list, PolicyEntryKind kind) {
		for (size_t i = 0; i < list.size(); i++)
			if (list[i].network.family == family)
				entries.push_back({list[i].network.value, static_cast<uint32_t>(i),
						   static_cast<uint8_t>(list[i].length), kind});
	};
	add(config.nonMasqueradeCIDRs, PolicyEntryKind::nonMasquerade);
	if (!config.masqueradesLinkLocal(family)) {
		const Prefix linkLocal = linkLocalPrefix(family);
		entries.push_back({linkLocal.network.value, 0, static_cast<uint8_t>(linkLocal.length),
				   PolicyEntryKind::linkLocal});
	}
	add(config.masqueradeCIDRs, PolicyEntryKind::masquerade);
	std::sort(entries.begin(), entries.end(), sweepLess);
	return entries;
}

// The sweep: walks the entries in order with a stack of the prefixes enclosing the
// current position (they nest or are disjoint, so the innermost is the longest match),
// and hands every stretch of addresses to `segment` with its deciding entry.
// `opened` sees each entry as it is pushed, with the number of non-masquerade entries
// enclosing it.
// (Templates rather than std::function: a million entries make a million calls.)
template<typename Segment, typename Opened>
class Sweep
{
public:
	Sweep(Family family, Segment segment, Opened opened)
		: family_(family), max_(Address::max(family).value), segment_(std::move(segment)),
		  opened_(std::move(opened))
	{
	}

	void run(const std::vector<SweepEntry> &entries)
	{
		for (const SweepEntry &entry : entries) {
			while (!stack_.empty() && stack_.back().last < entry.first)
				close();
			if (!stack_.empty() && cursor_ < entry.first)
				segment_(cursor_, entry.first - 1, stack_.back().entry);
			cursor_ = entry.first;
			opened_(entry, nonMasqueradeOpen_);
			stack_.push_back({lastOf(family_, entry.first, entry.length), entry});
			if (!entry.masquerade())
				nonMasqueradeOpen_++;
		}
		while (!stack_.empty())
			close();
	}

private:
	struct Open {
		AddressValue last;
		SweepEntry entry;
	};

	void close()
	{
		const Open top = stack_.back();
		stack_.pop_back();
		if (!top.entry.masquerade())
			nonMasqueradeOpen_--;
		// An equal prefix closed just before has covered this stretch already.
		if (exhausted_ || cursor_ > top.last)
			return;
		segment_(cursor_, top.last, top.entry);
		if (top.last == max_)
			exhausted_ = true; // the top address: nothing follows (last + 1 would wrap)
		else
			cursor_ = top.last + 1;
	}

	Family family_;
	AddressValue max_;
	Segment segment_;
	Opened opened_;
	std::vector<Open> stack_;
	AddressValue cursor_ = 0;
	bool exhausted_ = false;
	size_t nonMasqueradeOpen_ = 0;
};

// A masqueradeCIDRs entry that no non-masquerade prefix encloses changes nothing.
void warnAboutUncoveredExceptions(LoadedConfig &loaded, Family family)
{
	const Config &config = loaded.config;
	std::vector<uint32_t> uncovered;
	Sweep sweep(
		family, [](AddressValue, AddressValue, const SweepEntry &) {},
		[&](const SweepEntry &entry, size_t enclosingNonMasquerade) {
			if (entry.masquerade() && enclosingNonMasquerade == 0)
				uncovered.push_back(entry.index);
		});
	sweep.run(sweepEntries(config, family));
	// In the order written, not in address order.
	std::sort(uncovered.begin(), uncovered.end());
	for (const uint32_t index : uncovered) {
		const Prefix &prefix = config.masqueradeCIDRs[index];
		loaded.warnings.push_back(fmt::format(
			"{}: masqueradeCIDRs: {} is inside no non-masquerade range (nonMasqueradeCIDRs "
			"or its defaults, or link-local), so it changes nothing: it is masqueraded "
			"anyway. Remove it, or list the range it is an exception of in "
			"nonMasqueradeCIDRs",
			describeOrigin(config, prefix.origin), prefix.toString()));
	}
}

// The first address of each non-masquerade interval and of each masqueraded range
// between them, in address order. The all-zeros address stands for no host: its
// range is sampled by the next address.
std::vector<Address> sampleDestinations(const IntervalSet &exempt)
{
	const Family family = exempt.family();
	std::vector<Address> out;
	Address next{family, 0};
	bool more = true; // the addresses from `next` on are not yet covered
	for (const AddressRange &range : exempt.ranges()) {
		if (next < range.first)
			out.push_back(next);
		out.push_back(range.first);
		more = range.last < Address::max(family);
		if (more)
			next = Address{family, range.last.value + 1};
	}
	if (more)
		out.push_back(next);
	const Address host = firstSampledHost(family);
	for (Address &a : out)
		if (a.value == 0 && exempt.contains(a) == exempt.contains(host))
			a = host;
	return out;
}

// Beyond the limit the spread may skip link-local, the one entry the agent adds itself and
// the one other components most often leave out (kubelet's rule exempts only the cluster
// CIDR): its interval is always sampled, one more destination at most.
std::vector<Address> withLinkLocal(std::vector<Address> sampled, const IntervalSet &exempt)
{
	const Address linkLocal = linkLocalPrefix(exempt.family()).network;
	for (const AddressRange &range : exempt.ranges()) {
		if (!(range.first <= linkLocal && linkLocal <= range.last))
			continue;
		if (std::find(sampled.begin(), sampled.end(), range.first) == sampled.end())
			sampled.insert(std::upper_bound(sampled.begin(), sampled.end(), range.first),
				       range.first);
		break;
	}
	return sampled;
}

} // namespace

Status checkConfigPolicy(LoadedConfig &loaded)
{
	if (auto s = checkNoPrefixInBothLists(loaded.config); !s)
		return s;
	if (loaded.config.masqueradeCIDRs.empty())
		return {};
	for (const Family family : {Family::ipv4, Family::ipv6})
		warnAboutUncoveredExceptions(loaded, family);
	return {};
}

IntervalSet resolveNonMasquerade(const Config &config, Family family)
{
	std::vector<AddressRange> ranges;
	Sweep sweep(
		family,
		[&](AddressValue first, AddressValue last, const SweepEntry &decidedBy) {
			if (decidedBy.masquerade())
				return;
			// Stretches come in address order: extend an adjacent one.
			if (!ranges.empty() && ranges.back().last.value + 1 == first)
				ranges.back().last.value = last;
			else
				ranges.push_back({Address{family, first}, Address{family, last}});
		},
		[](const SweepEntry &, size_t) {});
	const std::vector<SweepEntry> entries = sweepEntries(config, family);
	// Without exceptions there is at most one range per entry: reserved at once, the list
	// is not doubled (and copied) on its way, which was the daemon's peak memory.
	ranges.reserve(entries.size() + 1);
	sweep.run(entries);
	return IntervalSet::fromRanges(family, std::move(ranges));
}

IntervalSet masqueradeSources(const Config &config, Family family)
{
	return IntervalSet::fromPrefixes(family, config.masqueradeSourceCIDRs);
}

const Prefix *longestCovering(const std::vector<Prefix> &prefixes, const Address &address)
{
	const Prefix *best = nullptr;
	for (const Prefix &prefix : prefixes)
		if (prefix.contains(address) && (!best || prefix.length > best->length))
			best = &prefix;
	return best;
}

std::string describeEntry(const Config &config, const ExplainEntry &entry)
{
	switch (entry.kind) {
	case ExplainEntry::Kind::nonMasquerade:
		if (entry.prefix.origin.discovered())
			return fmt::format("discovered {} ({})", entry.prefix.toString(),
					   describeOrigin(config, entry.prefix.origin));
		if (!config.nonMasqueradeCIDRsGiven || entry.prefix.origin.builtIn())
			return fmt::format("built-in default {}", entry.prefix.toString());
		return fmt::format("nonMasqueradeCIDRs {} ({})", entry.prefix.toString(),
				   describeOrigin(config, entry.prefix.origin));
	case ExplainEntry::Kind::linkLocal:
		return fmt::format("link-local {}", entry.prefix.toString());
	case ExplainEntry::Kind::masquerade:
		return fmt::format("masqueradeCIDRs {} ({})", entry.prefix.toString(),
				   describeOrigin(config, entry.prefix.origin));
	}
	return {};
}

std::string describeDecidingEntry(const Config &config, const ExplainDecision &decision)
{
	return decision.decidedBy ? describeEntry(config, *decision.decidedBy) : "no entry covers it";
}

ExplainDecision explainDecision(const Config &config, const Address &destination)
{
	const Family family = destination.family;
	// The most specific non-masquerade entry: the config's list first, so that among
	// equals an entry the user wrote is named rather than the link-local default.
	std::optional<ExplainEntry> nonMasquerade;
	if (const Prefix *entry = longestCovering(config.nonMasqueradeCIDRs, destination))
		nonMasquerade = ExplainEntry{ExplainEntry::Kind::nonMasquerade, *entry};
	if (!config.masqueradesLinkLocal(family)) {
		const Prefix linkLocal = linkLocalPrefix(family);
		if (linkLocal.contains(destination) &&
		    (!nonMasquerade || linkLocal.length > nonMasquerade->prefix.length))
			nonMasquerade = ExplainEntry{ExplainEntry::Kind::linkLocal, linkLocal};
	}
	std::optional<ExplainEntry> masquerade;
	if (const Prefix *entry = longestCovering(config.masqueradeCIDRs, destination))
		masquerade = ExplainEntry{ExplainEntry::Kind::masquerade, *entry};

	ExplainDecision decision;
	if (masquerade && (!nonMasquerade || masquerade->prefix.length >= nonMasquerade->prefix.length)) {
		decision.masqueraded = true;
		decision.decidedBy = std::move(masquerade);
		decision.overrides = std::move(nonMasquerade);
	} else if (nonMasquerade) {
		decision.masqueraded = false;
		decision.decidedBy = std::move(nonMasquerade);
		decision.overrides = std::move(masquerade);
	}
	return decision;
}

namespace {

// One destination entry of the config, compact: 16 bytes for IPv4 (the key its first
// address), 32 for IPv6.
template<typename Key>
struct IndexedEntry {
	Key first;
	Origin origin;
	uint8_t length;
	bool masquerade; // a masqueradeCIDRs entry, else a non-masquerade one
	auto key() const { return std::tie(first, length, masquerade); }
};
static_assert(sizeof(IndexedEntry<uint32_t>) == 16 && sizeof(IndexedEntry<AddressValue>) == 32);

// The entries of one family, sorted, a prefix listed twice in one list once (the first
// written: the one explainDecision names). Link-local is explainDecision's own (from the
// flags): only the lists are indexed.
template<typename Key>
std::vector<IndexedEntry<Key>> indexEntries(const Config &config, Family family)
{
	std::vector<IndexedEntry<Key>> out;
	const auto add = [&](const std::vector<Prefix> &list, bool masquerade) {
		for (const Prefix &p : list)
			if (p.network.family == family)
				out.push_back({static_cast<Key>(p.network.value), p.origin, static_cast<uint8_t>(p.length),
					       masquerade});
	};
	add(config.nonMasqueradeCIDRs, false);
	add(config.masqueradeCIDRs, true);
	std::stable_sort(out.begin(), out.end(), [](const auto &a, const auto &b) { return a.key() < b.key(); });
	out.erase(std::unique(out.begin(), out.end(), [](const auto &a, const auto &b) { return a.key() == b.key(); }),
		  out.end());
	out.shrink_to_fit();
	return out;
}

// The config's destination entries kept apart from it, and what names them: the entries
// that cover an address (one binary search per prefix length), handed to explainDecision
// itself, so the name is --explain's by construction.
class EntryIndex final : public DecidingEntries
{
public:
	explicit EntryIndex(const Config &config)
		: ipv4_(indexEntries<uint32_t>(config, Family::ipv4)),
		  ipv6_(indexEntries<AddressValue>(config, Family::ipv6))
	{
		names_.nonMasqueradeCIDRsGiven = config.nonMasqueradeCIDRsGiven;
		names_.masqLinkLocal = config.masqLinkLocal;
		names_.masqLinkLocalIPv6 = config.masqLinkLocalIPv6;
		names_.files = config.files;
		names_.discoveredOrigins = config.discoveredOrigins;
	}

	std::string describe(const Address &destination) const override
	{
		Config covering; // just the entries that cover it, for explainDecision
		covering.masqLinkLocal = names_.masqLinkLocal;
		covering.masqLinkLocalIPv6 = names_.masqLinkLocalIPv6;
		if (destination.family == Family::ipv4)
			addCovering(ipv4_, destination, covering);
		else
			addCovering(ipv6_, destination, covering);
		return describeDecidingEntry(names_, explainDecision(covering, destination));
	}

private:
	template<typename Key>
	static void addCovering(const std::vector<IndexedEntry<Key>> &entries, const Address &a, Config &into)
	{
		const unsigned bits = familyBits(a.family);
		for (unsigned length = 0; length <= bits; length++) {
			const AddressValue host = lastOf(a.family, 0, length);
			const Key first = static_cast<Key>(a.value & ~host);
			auto it = std::lower_bound(entries.begin(), entries.end(), std::tuple(first, uint8_t(length)),
						   [](const IndexedEntry<Key> &e, const auto &k) {
							   return std::tie(e.first, e.length) < k;
						   });
			for (; it != entries.end() && it->first == first && it->length == length; ++it)
				(it->masquerade ? into.masqueradeCIDRs : into.nonMasqueradeCIDRs)
					.push_back(Prefix{Address{a.family, first}, length, {}, it->origin});
		}
	}

	// What describing needs of the config besides its lists: its files, the discovered
	// ranges' origins, whether nonMasqueradeCIDRs was given, the link-local keys.
	Config names_;
	std::vector<IndexedEntry<uint32_t>> ipv4_;
	std::vector<IndexedEntry<AddressValue>> ipv6_;
};

} // namespace

std::shared_ptr<const DecidingEntries> decidingEntries(const Config &config)
{
	return std::make_shared<const EntryIndex>(config);
}

std::vector<SampledPacket> samplePackets(const Config &config, bool enableIpv6,
					 const SampleLimits &limits)
{
	std::vector<SampledPacket> out;
	for (const Family family : {Family::ipv4, Family::ipv6}) {
		if (family == Family::ipv6 && !enableIpv6)
			continue;
		std::vector<std::optional<Address>> sources;
		const IntervalSet allowed = masqueradeSources(config, family);
		for (const AddressRange &range : allowed.ranges())
			sources.emplace_back(range.first);
		if (sources.empty())
			sources.emplace_back(std::nullopt); // no entry of the family: any source
		sources = spreadEvenly(sources, limits.maxSources);
		const IntervalSet exempt = resolveNonMasquerade(config, family);
		const auto destinations =
			withLinkLocal(spreadEvenly(sampleDestinations(exempt), limits.maxDestinations), exempt);
		for (const Address &destination : destinations) {
			const std::string entry = describeDecidingEntry(config, explainDecision(config, destination));
			for (const std::optional<Address> &source : sources)
				out.push_back(SampledPacket{destination, source, std::nullopt, std::nullopt, entry});
		}
	}
	return out;
}

} // namespace ipmasq
