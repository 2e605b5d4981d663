// SPDX-License-Identifier: Apache-2.0
// The CIDR model: parsing, canonical printing and interval normalization.
#include "ip-masq-agent/model/cidr.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

const char *familyName(Family family)
{
	return family == Family::ipv4 ? "IPv4" : "IPv6";
}

unsigned familyBits(Family family)
{
	return family == Family::ipv4 ? 32 : 128;
}

namespace {

AddressValue allOnes(unsigned bits)
{
	return bits == 128 ? ~AddressValue(0) : (AddressValue(1) << bits) - 1;
}

// Mask of the host part of a prefix of `length` bits in a `bits`-wide family.
AddressValue hostMask(unsigned bits, unsigned length)
{
	return allOnes(bits - length);
}

} // namespace

Address Address::max(Family family)
{
	return Address{family, allOnes(familyBits(family))};
}

Address Address::fromBytes(Family family, const uint8_t *bytes)
{
	AddressValue value = 0;
	for (unsigned i = 0; i < familyBits(family) / 8; i++)
		value = (value << 8) | bytes[i];
	return Address{family, value};
}

std::vector<uint8_t> Address::bytes() const
{
	const unsigned n = familyBits(family) / 8;
	std::vector<uint8_t> out(n);
	AddressValue v = value;
	for (unsigned i = n; i-- > 0;) {
		out[i] = static_cast<uint8_t>(v & 0xff);
		v >>= 8;
	}
	return out;
}

std::string Address::toString() const
{
	const std::vector<uint8_t> raw = bytes();
	char buf[INET6_ADDRSTRLEN];
	const int af = family == Family::ipv4 ? AF_INET : AF_INET6;
	if (!inet_ntop(af, raw.data(), buf, sizeof(buf)))
		return "?";
	return buf;
}

Address Prefix::last() const
{
	return Address{network.family,
		       network.value | hostMask(familyBits(network.family), length)};
}

std::string Prefix::toString() const
{
	return fmt::format("{}/{}", network.toString(), length);
}

Result<Prefix> parsePrefix(std::string_view text)
{
	const std::string quoted = ipmasq::quoted(text);
	const size_t slash = text.find('/');
	if (slash == std::string_view::npos)
		return fail(fmt::format("CIDR {} could not be parsed: it has no \"/length\" "
					"(write a network such as 10.0.0.0/8, or 192.0.2.1/32 for one address)",
					quoted));

	const std::string addressText(text.substr(0, slash));
	const std::string_view lengthText = text.substr(slash + 1);
	const bool v6 = addressText.find(':') != std::string::npos;
	const Family family = v6 ? Family::ipv6 : Family::ipv4;
	const unsigned bits = familyBits(family);

	uint8_t raw[16] = {};
	if (addressText.empty() || addressText.find('\0') != std::string::npos ||
	    inet_pton(v6 ? AF_INET6 : AF_INET, addressText.c_str(), raw) != 1)
		return fail(fmt::format("CIDR {} could not be parsed: {} is not a valid {} address",
					quoted, ipmasq::quoted(addressText), familyName(family)));

	const std::optional<uint64_t> length = ascii::parseDecimal(lengthText);
	if (!length || *length > bits)
		return fail(fmt::format("CIDR {} could not be parsed: prefix length {} is not a "
					"number from 0 to {}", quoted, ipmasq::quoted(lengthText), bits));

	AddressValue value = 0;
	for (unsigned i = 0; i < bits / 8; i++)
		value = (value << 8) | raw[i];

	Prefix prefix;
	prefix.network = Address{family, value & ~hostMask(bits, *length)};
	prefix.length = *length;
	prefix.spelling = std::string(text);
	if (prefix.network.value != value)
		return fail(fmt::format("CIDR {} is not aligned to a CIDR block: host bits are set "
					"(the network is {}). Write \"{}\" if you meant the whole network",
					quoted, prefix.toString(), prefix.toString()));
	return prefix;
}

Prefix builtinPrefix(std::string_view text)
{
	auto prefix = parsePrefix(text);
	if (!prefix) {
		std::fprintf(stderr, "ip-masq-agent: internal error: built-in prefix: %s\n",
			     prefix.error().message.c_str());
		std::abort();
	}
	return std::move(*prefix);
}

int AddressRange::prefixLength() const
{
	const unsigned bits = familyBits(first.family);
	const AddressValue span = last.value - first.value;
	// A prefix spans 2^k - 1 above its first address, and the first address is aligned.
	if ((span & (span + 1)) != 0)
		return -1;
	if (span == allOnes(bits))
		return 0;
	unsigned hostBits = 0;
	while (hostBits < bits && (span >> hostBits) != 0)
		hostBits++;
	if ((first.value & span) != 0)
		return -1;
	return static_cast<int>(bits - hostBits);
}

std::string AddressRange::toString() const
{
	const int length = prefixLength();
	if (length == static_cast<int>(familyBits(first.family)))
		return first.toString();
	if (length >= 0)
		return fmt::format("{}/{}", first.toString(), length);
	return fmt::format("{}-{}", first.toString(), last.toString());
}

IntervalSet IntervalSet::fromPrefixes(Family family, const std::vector<Prefix> &prefixes)
{
	std::vector<AddressRange> ranges;
	ranges.reserve(prefixes.size());
	for (const Prefix &prefix : prefixes)
		if (prefix.network.family == family)
			ranges.push_back(AddressRange{prefix.first(), prefix.last()});
	return fromRanges(family, std::move(ranges));
}

IntervalSet IntervalSet::fromRanges(Family family, std::vector<AddressRange> ranges)
{
	std::erase_if(ranges, [family](const AddressRange &r) {
		return r.first.family != family || r.last < r.first;
	});
	const auto byFirst = [](const AddressRange &a, const AddressRange &b) { return a.first < b.first; };
	// Ranges that come sorted (a resolved policy) skip the sort: one pass instead.
	if (!std::is_sorted(ranges.begin(), ranges.end(), byFirst))
		std::sort(ranges.begin(), ranges.end(), byFirst);

	// Merged in place: no second list of the set's size (peak memory with 100,000 CIDRs).
	size_t kept = 0;
	for (const AddressRange &range : ranges) {
		if (kept > 0) {
			AddressRange &tail = ranges[kept - 1];
			// Overlapping or adjacent (tail.last + 1 == range.first) ranges merge.
			// tail.last cannot be the family's maximum here unless it covers range.
			if (tail.last.value == Address::max(family).value ||
			    range.first.value <= tail.last.value + 1) {
				tail.last = std::max(tail.last, range.last);
				continue;
			}
		}
		ranges[kept++] = range;
	}
	ranges.resize(kept);
	// The set lives as long as its ruleset: give back what merging or growing the input
	// left unused, unless that is little (shrinking copies the list).
	if (ranges.capacity() - ranges.size() > ranges.size() / 8)
		ranges.shrink_to_fit();
	IntervalSet set(family);
	set.ranges_ = std::move(ranges);
	return set;
}

bool IntervalSet::contains(const Address &address) const
{
	if (address.family != family_)
		return false;
	auto it = std::upper_bound(ranges_.begin(), ranges_.end(), address,
				   [](const Address &a, const AddressRange &r) { return a < r.first; });
	if (it == ranges_.begin())
		return false;
	--it;
	return address <= it->last;
}

bool IntervalSet::contains(const AddressRange &range) const
{
	if (range.first.family != family_ || range.last < range.first)
		return false;
	// The ranges are merged: addresses that follow each other lie in one of them.
	auto it = std::upper_bound(ranges_.begin(), ranges_.end(), range.first,
				   [](const Address &a, const AddressRange &r) { return a < r.first; });
	if (it == ranges_.begin())
		return false;
	--it;
	return range.last <= it->last;
}

std::vector<Prefix> prefixesOf(const AddressRange &range)
{
	std::vector<Prefix> out;
	const Family family = range.first.family;
	const unsigned bits = familyBits(family);
	AddressValue start = range.first.value;
	const AddressValue last = range.last.value;
	while (start <= last) {
		// The shortest prefix that starts at `start` (aligned) and ends within the range.
		unsigned length = bits;
		AddressValue span = 0; // its size minus one
		while (length > 0) {
			const unsigned hostBits = bits - length + 1;
			const AddressValue wider = hostBits >= 128 ? ~AddressValue(0) : (AddressValue(1) << hostBits) - 1;
			if ((start & wider) != 0 || last - start < wider)
				break;
			span = wider;
			length--;
		}
		Prefix prefix;
		prefix.network = Address{family, start};
		prefix.length = length;
		out.push_back(std::move(prefix));
		if (last - start == span)
			break; // the range's end, which may be the family's last address
		start += span + 1;
	}
	return out;
}

IntervalSet IntervalSet::difference(const IntervalSet &other) const
{
	IntervalSet out(family_);
	auto cut = other.ranges_.begin();
	for (AddressRange range : ranges_) {
		// Skip exclusions that end before this range starts.
		while (cut != other.ranges_.end() && cut->last < range.first)
			++cut;
		bool consumed = false;
		for (auto c = cut; c != other.ranges_.end() && c->first <= range.last; ++c) {
			if (range.first < c->first)
				out.ranges_.push_back(
					{range.first, Address{family_, c->first.value - 1}});
			if (c->last >= range.last) {
				consumed = true;
				break;
			}
			range.first = Address{family_, c->last.value + 1};
		}
		if (!consumed)
			out.ranges_.push_back(range);
	}
	return out;
}

Result<Address> parseAddress(std::string_view text)
{
	const std::string quoted = ipmasq::quoted(text);
	if (text.empty())
		return fail("address \"\" is empty: write one address, such as 192.0.2.1 or 2001:db8::1");
	if (text.find('/') != std::string_view::npos)
		return fail(fmt::format("address {} is a CIDR, not an address: write one address "
					"without \"/length\", such as {}",
					quoted, ipmasq::quoted(text.substr(0, text.find('/')))));
	const std::string addressText(text);
	const bool v6 = addressText.find(':') != std::string::npos;
	const Family family = v6 ? Family::ipv6 : Family::ipv4;
	uint8_t raw[16] = {};
	if (addressText.find('\0') != std::string::npos ||
	    inet_pton(v6 ? AF_INET6 : AF_INET, addressText.c_str(), raw) != 1)
		return fail(fmt::format("address {} could not be parsed: it is not a valid {} address "
					"(write one address, such as {})",
					quoted, familyName(family), v6 ? "2001:db8::1" : "192.0.2.1"));
	AddressValue value = 0;
	for (unsigned i = 0; i < familyBits(family) / 8; i++)
		value = (value << 8) | raw[i];
	return Address{family, value};
}

} // namespace ipmasq
