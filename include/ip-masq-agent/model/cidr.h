// SPDX-License-Identifier: Apache-2.0
// The CIDR model: IPv4/IPv6 prefixes as values and their normalization into interval sets.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/base/error.h"

namespace ipmasq {

enum class Family { ipv4, ipv6 };

const char *familyName(Family family); // "IPv4" / "IPv6"
unsigned familyBits(Family family);    // 32 / 128

// An address is held as a 128-bit integer for both families (IPv4 in the low 32 bits),
// so that ordering, merging and "+1" are plain integer arithmetic.
__extension__ typedef unsigned __int128 AddressValue; // GCC/Clang built-in

struct Address {
	Family family = Family::ipv4;
	AddressValue value = 0;

	static Address max(Family family);
	// From network byte order: 4 bytes for IPv4, 16 for IPv6, as netlink carries them.
	static Address fromBytes(Family family, const uint8_t *bytes);

	// Network byte order, 4 or 16 bytes: what netlink carries.
	std::vector<uint8_t> bytes() const;
	// Canonical text: dotted quad, or RFC 5952 for IPv6 (as inet_ntop and nft print it).
	std::string toString() const;

	auto operator<=>(const Address &) const = default;
};

// Where a prefix was written, for messages and --explain: an index into the config's
// list of files (Config::files) and a 1-based line. Built-in prefixes have no file; a
// prefix found on the node (nonMasqueradeDiscovery) has its origins' text at index
// `line` of Config::discoveredOrigins.
struct Origin {
	static constexpr uint32_t kBuiltIn = UINT32_MAX;
	static constexpr uint32_t kDiscovered = UINT32_MAX - 1;
	uint32_t file = kBuiltIn;
	uint32_t line = 0;

	bool builtIn() const { return file == kBuiltIn; }
	bool discovered() const { return file == kDiscovered; }
	bool operator==(const Origin &) const = default;
};

// A prefix as the user wrote it. `spelling` keeps the original text for messages and
// `origin` where it was written; neither takes part in comparisons.
struct Prefix {
	Address network;
	unsigned length = 0;
	std::string spelling;
	Origin origin; // fits in the padding: a Prefix stays 80 bytes

	Address first() const { return network; }
	Address last() const;
	std::string toString() const; // canonical "network/length"
	// Whether `address` (of the same family) lies in it.
	bool contains(const Address &address) const
	{
		return network.family == address.family && first() <= address && address <= last();
	}
	// Whether all of `inner` lies in it (of the same family, as long or longer).
	bool contains(const Prefix &inner) const
	{
		return network.family == inner.network.family && length <= inner.length && first() <= inner.first() &&
		       inner.last() <= last();
	}

	bool operator==(const Prefix &other) const
	{
		return network == other.network && length == other.length;
	}
};

// Parse "a.b.c.d/n" or "x:y::/n". Rejects host bits set, and says which network was meant.
Result<Prefix> parsePrefix(std::string_view text);

// The longest text of a prefix: an IPv6 address of 45 bytes with an embedded IPv4, and
// "/128". Readers of untrusted files quote no more than this of a value that is longer.
inline constexpr size_t kMaxPrefixTextBytes = 49;

// A prefix written in the program itself (a default, link-local), not by a user: valid
// by construction. An invalid one is a programming error that the unit tests meet
// first; it aborts with the text rather than return an error no caller could handle.
Prefix builtinPrefix(std::string_view text);

// An inclusive range of addresses of one family.
struct AddressRange {
	Address first;
	Address last;

	// If the range is exactly one prefix, its length; otherwise -1.
	int prefixLength() const;
	// "10.0.0.0/8", "192.0.2.1" (a single address, as nft prints it) or "a-b".
	std::string toString() const;

	bool operator==(const AddressRange &) const = default;
};

// The fewest prefixes that hold exactly the addresses of `range` (at most two per bit of
// its family): how a range read back from an interval set becomes prefixes again.
std::vector<Prefix> prefixesOf(const AddressRange &range);

// A set of addresses of one family as the minimal sorted list of disjoint,
// non-adjacent ranges: the form nftables interval sets require (they reject overlaps).
class IntervalSet
{
public:
	explicit IntervalSet(Family family) : family_(family) {}

	// Normalize: sort, drop contained prefixes, merge overlapping and adjacent ones.
	static IntervalSet fromPrefixes(Family family, const std::vector<Prefix> &prefixes);
	static IntervalSet fromRanges(Family family, std::vector<AddressRange> ranges);

	Family family() const { return family_; }
	const std::vector<AddressRange> &ranges() const { return ranges_; }
	bool empty() const { return ranges_.empty(); }
	size_t size() const { return ranges_.size(); }
	bool contains(const Address &address) const;
	// Whether every address of `range` (of this family) is in the set.
	bool contains(const AddressRange &range) const;

	// Addresses in this set and not in `other`: room for an "exceptions" list later.
	IntervalSet difference(const IntervalSet &other) const;

	bool operator==(const IntervalSet &) const = default;

private:
	Family family_;
	std::vector<AddressRange> ranges_;
};

// Parse one address, "192.0.2.1" or "2001:db8::1", with no "/length" (for --explain).
// A CIDR, an empty text or a malformed address is an error that names it.
Result<Address> parseAddress(std::string_view text);

} // namespace ipmasq
