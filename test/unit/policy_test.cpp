// SPDX-License-Identifier: Apache-2.0
// The destination policy: longest-prefix resolution against a brute-force oracle, the
// warning for exceptions that change nothing and the conflict between the two lists.
#include <catch2/catch.hpp>

#include <random>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/config/config_location.h"
#include "ip-masq-agent/diagnose/explain.h"
#include "ip-masq-agent/config/policy.h"
#include "ip-masq-agent/model/ruleset.h"

using namespace ipmasq;

namespace {

const std::string kSource = "/etc/config/ip-masq-agent";

Prefix prefixOf(Family family, AddressValue value, unsigned length)
{
	const unsigned bits = familyBits(family);
	const AddressValue all = bits == 128 ? ~AddressValue(0) : (AddressValue(1) << bits) - 1;
	const AddressValue host = length == bits ? 0 : (length == 0 ? all : all >> length);
	Prefix prefix;
	prefix.network = Address{family, value & all & ~host};
	prefix.length = length;
	return prefix;
}

// Its own, apart from Prefix::contains(): the oracle shares no code with what it checks.
bool oracleCovers(const Prefix &prefix, const Address &address)
{
	return address.family == prefix.network.family && prefix.first() <= address &&
	       address <= prefix.last();
}

// The definition, checked entry by entry: the longest covering prefix decides, a
// masquerade entry wins a tie, no covering entry means masqueraded.
bool oracleMasqueraded(const Config &config, const Address &address)
{
	std::vector<std::pair<Prefix, bool>> entries; // prefix, masquerade
	for (const Prefix &p : config.nonMasqueradeCIDRs)
		entries.emplace_back(p, false);
	if (!(address.family == Family::ipv4 ? config.masqLinkLocal : config.masqLinkLocalIPv6))
		entries.emplace_back(linkLocalPrefix(address.family), false);
	for (const Prefix &p : config.masqueradeCIDRs)
		entries.emplace_back(p, true);
	int bestLength = -1;
	bool masqueraded = true;
	for (const auto &[prefix, masquerade] : entries) {
		if (!oracleCovers(prefix, address))
			continue;
		const int length = static_cast<int>(prefix.length);
		if (length > bestLength || (length == bestLength && masquerade)) {
			bestLength = length;
			masqueraded = masquerade;
		}
	}
	return masqueraded;
}

// Random prefixes clustered around a few bases so that they nest often: lengths from 0
// to the full width, with the extremes (/0, /32, /128) likelier than by chance.
class PrefixGenerator
{
public:
	PrefixGenerator(Family family, uint64_t seed) : family_(family), random_(seed)
	{
		for (int i = 0; i < 3; i++)
			bases_.push_back(randomValue());
		bases_.push_back(linkLocalPrefix(family).network.value);
	}

	AddressValue randomValue()
	{
		AddressValue v = (AddressValue(random_()) << 64) | random_();
		if (family_ == Family::ipv4)
			v &= 0xffffffff;
		return v;
	}

	Prefix next()
	{
		const unsigned bits = familyBits(family_);
		unsigned length = static_cast<unsigned>(random_() % (bits + 1));
		switch (random_() % 8) {
		case 0: length = 0; break;
		case 1: length = bits; break;
		default: break;
		}
		// Keep the top bits of a base, randomize the rest: nested and disjoint prefixes.
		const AddressValue base = bases_[random_() % bases_.size()];
		const unsigned kept = static_cast<unsigned>(random_() % (bits + 1));
		const AddressValue all = Address::max(family_).value;
		const AddressValue keepMask = kept == 0 ? 0 : (all << (bits - kept)) & all;
		const AddressValue value = (base & keepMask) | (randomValue() & ~keepMask);
		return prefixOf(family_, value, length);
	}

	std::mt19937_64 &random() { return random_; }

private:
	Family family_;
	std::mt19937_64 random_;
	std::vector<AddressValue> bases_;
};

// Addresses worth asking about: the edges of every prefix (first, last and just
// outside each), the family's ends, and random ones.
std::vector<Address> probes(const Config &config, Family family, PrefixGenerator &generator)
{
	std::vector<Address> out{Address{family, 0}, Address::max(family)};
	const AddressValue max = Address::max(family).value;
	const auto edges = [&](const Prefix &p) {
		if (p.network.family != family)
			return;
		out.push_back(p.first());
		out.push_back(p.last());
		if (p.first().value != 0)
			out.push_back(Address{family, p.first().value - 1});
		if (p.last().value != max)
			out.push_back(Address{family, p.last().value + 1});
	};
	for (const Prefix &p : config.nonMasqueradeCIDRs)
		edges(p);
	for (const Prefix &p : config.masqueradeCIDRs)
		edges(p);
	edges(linkLocalPrefix(family));
	for (int i = 0; i < 64; i++)
		out.push_back(Address{family, generator.randomValue()});
	return out;
}

void checkAgainstOracle(Family family, uint64_t seed)
{
	PrefixGenerator generator(family, seed);
	auto &random = generator.random();
	for (int round = 0; round < 300; round++) {
		Config config;
		const size_t nonMasquerade = random() % 12;
		const size_t masquerade = random() % 12;
		for (size_t i = 0; i < nonMasquerade; i++)
			config.nonMasqueradeCIDRs.push_back(generator.next());
		for (size_t i = 0; i < masquerade; i++)
			config.masqueradeCIDRs.push_back(generator.next());
		config.masqLinkLocal = random() % 2;
		config.masqLinkLocalIPv6 = random() % 2;
		// Each entry named by its line (a prefix listed twice, by its first), some found on
		// the node, for the names decidingEntries gives.
		config.files = {kSource};
		config.nonMasqueradeCIDRsGiven = random() % 2;
		config.discoveredOrigins = {"FLANNEL_NETWORK in /run/flannel/subnet.env:1"};
		uint32_t line = 1;
		for (Prefix &p : config.nonMasqueradeCIDRs)
			p.origin = random() % 4 == 0 ? Origin{Origin::kDiscovered, 0} : Origin{0, line++};
		for (Prefix &p : config.masqueradeCIDRs)
			p.origin = Origin{0, line++};
		const auto names = decidingEntries(config);

		const IntervalSet resolved = resolveNonMasquerade(config, family);
		// A valid interval set: sorted, disjoint and not adjacent (what nft requires).
		const auto &ranges = resolved.ranges();
		for (size_t i = 0; i < ranges.size(); i++) {
			REQUIRE(ranges[i].first <= ranges[i].last);
			if (i > 0)
				REQUIRE(ranges[i - 1].last.value + 1 < ranges[i].first.value);
		}
		for (const Address &address : probes(config, family, generator)) {
			const bool expected = oracleMasqueraded(config, address);
			INFO("seed " << seed << " round " << round << " address " << address.toString());
			REQUIRE(resolved.contains(address) == !expected);
			REQUIRE(explainDecision(config, address).masqueraded == expected);
			// Named apart from the config as --explain names it with the config.
			REQUIRE(names->describe(address) ==
				describeDecidingEntry(config, explainDecision(config, address)));
		}
	}
}

std::vector<std::string> rangesOf(const IntervalSet &set)
{
	std::vector<std::string> out;
	for (const AddressRange &range : set.ranges())
		out.push_back(range.toString());
	return out;
}

LoadedConfig loadOk(const std::string &text, ConfigFlags flags = {})
{
	auto loaded = loadConfigContent(ConfigContent::single(kSource, text), flags);
	INFO(text << (loaded ? "" : loaded.error().message));
	REQUIRE(loaded);
	return *loaded;
}

} // namespace

TEST_CASE("the resolution equals the longest-prefix oracle, and the entries named apart from the "
	  "config are --explain's, IPv4")
{
	for (const uint64_t seed : {1, 2, 3})
		checkAgainstOracle(Family::ipv4, seed);
}

TEST_CASE("the resolution equals the longest-prefix oracle, and the entries named apart from the "
	  "config are --explain's, IPv6")
{
	for (const uint64_t seed : {11, 12, 13})
		checkAgainstOracle(Family::ipv6, seed);
}

TEST_CASE("the issue's example: 10.1.2.x kept, the rest of 10.1.x masqueraded, the rest of 10/8 kept")
{
	const LoadedConfig loaded = loadOk("nonMasqueradeCIDRs: [10.0.0.0/8, 10.1.2.0/24]\n"
					   "masqueradeCIDRs: [10.1.0.0/16, 169.254.169.254/32]\n");
	CHECK(loaded.warnings.empty());
	CHECK(rangesOf(resolveNonMasquerade(loaded.config, Family::ipv4)) ==
	      std::vector<std::string>{"10.0.0.0/16", "10.1.2.0/24", "10.2.0.0-10.255.255.255",
				       "169.254.0.0-169.254.169.253", "169.254.169.255-169.254.255.255"});
	const ExplainDecision decision =
		explainDecision(loaded.config, parsePrefix("10.1.3.4/32")->network);
	CHECK(decision.masqueraded);
	REQUIRE(decision.decidedBy);
	CHECK(decision.decidedBy->prefix.toString() == "10.1.0.0/16");
	CHECK(describeOrigin(loaded.config, decision.decidedBy->prefix.origin) == kSource + ":2");
	REQUIRE(decision.overrides);
	CHECK(decision.overrides->prefix.toString() == "10.0.0.0/8");
}

TEST_CASE("without masqueradeCIDRs the resolution is the union of the non-masquerade prefixes")
{
	Config config = defaultConfig({.nomasqAllReservedRanges = true, .enableIpv6 = false});
	std::vector<Prefix> all = config.nonMasqueradeCIDRs;
	all.push_back(linkLocalPrefix(Family::ipv4));
	CHECK(resolveNonMasquerade(config, Family::ipv4) == IntervalSet::fromPrefixes(Family::ipv4, all));
	config.masqLinkLocal = true;
	CHECK(resolveNonMasquerade(config, Family::ipv4) ==
	      IntervalSet::fromPrefixes(Family::ipv4, config.nonMasqueradeCIDRs));
}

TEST_CASE("an exception equal to a built-in entry wins over it")
{
	const LoadedConfig loaded = loadOk("masqueradeCIDRs: [172.16.0.0/12, 169.254.0.0/16]\n");
	CHECK(loaded.warnings.empty());
	CHECK(rangesOf(resolveNonMasquerade(loaded.config, Family::ipv4)) ==
	      std::vector<std::string>{"10.0.0.0/8", "192.168.0.0/16"});
}

TEST_CASE("an exception no non-masquerade prefix covers gets one warning naming it")
{
	const LoadedConfig loaded = loadOk("nonMasqueradeCIDRs: [10.0.0.0/8]\n"
					   "masqueradeCIDRs:\n"
					   "  - 10.1.0.0/16\n"
					   "  - 198.51.100.0/24\n"
					   "masqLinkLocal: true\n"
					   "masqLinkLocalIPv6: true\n");
	REQUIRE(loaded.warnings.size() == 1);
	CHECK_THAT(loaded.warnings[0], Catch::StartsWith(kSource + ":4: masqueradeCIDRs: 198.51.100.0/24") &&
					       Catch::Contains("changes nothing"));
	// Link-local counts as a non-masquerade range, unless masqLinkLocal.
	CHECK(loadOk("masqueradeCIDRs: [169.254.169.254/32]\n").warnings.empty());
	const LoadedConfig masqLinkLocal =
		loadOk("masqueradeCIDRs: [169.254.169.254/32]\nmasqLinkLocal: true\n");
	REQUIRE(masqLinkLocal.warnings.size() == 1);
	CHECK_THAT(masqLinkLocal.warnings[0], Catch::Contains(kSource + ":1: masqueradeCIDRs: 169.254.169.254/32"));
	// IPv6 too.
	const LoadedConfig v6 = loadOk("masqueradeCIDRs: [\"2001:db8::/32\", \"fe80::1/128\"]\n",
				       {.nomasqAllReservedRanges = false, .enableIpv6 = true});
	REQUIRE(v6.warnings.size() == 1);
	CHECK_THAT(v6.warnings[0], Catch::Contains("2001:db8::/32"));
}

TEST_CASE("the same prefix in both lists is an error naming both entries")
{
	auto loaded = loadConfigContent(ConfigContent::single(kSource, "nonMasqueradeCIDRs:\n"
									   "  - 192.168.0.0/16\n"
									   "  - 10.0.0.0/8\n"
									   "masqueradeCIDRs:\n"
									   "  - 10.0.0.0/8\n"),
					{});
	REQUIRE_FALSE(loaded);
	CHECK(loaded.error().message ==
	      kSource + ":5: masqueradeCIDRs: 10.0.0.0/8 is also listed in nonMasqueradeCIDRs at " +
		      kSource + ":3: a destination cannot be both; remove one of them");
}

TEST_CASE("the source sets are the listed prefixes of each family, normalized")
{
	const LoadedConfig loaded = loadOk("masqueradeSourceCIDRs: [10.244.1.0/24, 10.244.0.0/24, "
					   "10.244.0.0/25, \"fd00::/8\"]\n",
					   {.nomasqAllReservedRanges = false, .enableIpv6 = true});
	CHECK(rangesOf(masqueradeSources(loaded.config, Family::ipv4)) ==
	      std::vector<std::string>{"10.244.0.0/23"});
	CHECK(rangesOf(masqueradeSources(loaded.config, Family::ipv6)) ==
	      std::vector<std::string>{"fd00::/8"});
	CHECK(masqueradeSources(Config{}, Family::ipv4).empty());
}
